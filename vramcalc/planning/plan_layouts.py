"""`vramcalc plan`: the layouts that fit one card, cheapest first, on exactly N GPUs or on the fewest.

Pure: neither typer nor rich, no I/O. On top of :mod:`vramcalc.planning.plan_search`'s combinations
(sharding scheme of the spec's framework x tensor x pipeline, the spec's context parallelism) the
search varies, for training specs:

* activation checkpointing: none, full, and selective where it changes memory (attention: eager:
  with SDPA/flash attention the scores are never saved, so selective recomputation would cost time
  and save nothing);
* the micro-batch: the batch per data-parallel rank ``N`` = ``batch_size`` x the spec's micro-batches
  (its ``parallel.micro_batches``, or ``pipeline``, else 1) is held; the micro-batch runs over ``N``
  and its divisors, each at most half the one before (``N, N/2, ..., 1`` for a power of two), the rest
  being micro-batches per step: gradient accumulation, or the pipeline's micro-batches;
* the data-parallel degree: with ``gpus`` the one that makes N GPUs; otherwise, as in
  :func:`~vramcalc.planning.plan_search.search_plans`, the smallest that fits (bisection). ZeRO, FSDP
  sharding and Megatron's distributed optimizer need a shard group (data x context) of two or more:
  over one rank they are the same plan with more buffers.

Each layout (scheme, degrees) is listed once, with its cheapest fitting checkpointing and micro-batch.
Order: fewest GPUs first when no count is given; then :mod:`vramcalc.planning.plan_cost`'s relative
step-time cost; then the most headroom.

Speed: per combination, the two variants that need the least memory (full checkpointing with a
micro-batch of 1, and with the whole batch, which needs no accumulated gradients) are estimated first,
at the largest data degree (and at one rank: plain data parallelism adds its bucket from two on); when
neither fits, nor does any other, and the combination is skipped. The smallest data degree they
need is the lower end of every other variant's bisection. Without ``gpus``, combinations are taken
fewest model-parallel ranks first and none larger than the ``top``-th plan found so far.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from vramcalc.choices import Architecture, Attention, Checkpointing, Mode
from vramcalc.errors import SpecError, VramcalcError
from vramcalc.families.resolve import resolve_model
from vramcalc.planning.budget import DEFAULT_MAX_GPUS, Budget
from vramcalc.planning.limits import with_workload
from vramcalc.planning.plan_cost import CRITERION, step_cost
from vramcalc.planning.plan_search import (
    Allowance,
    Candidate,
    PlanSearch,
    _Search,
    check_searchable,
    combinations,
    fewest_degree,
)
from vramcalc.spec.models import Spec
from vramcalc.spec.target import MAX_GPU_COUNT

#: Largest global batch a plan search holds (sequences per optimizer step; a bound on typos).
MAX_GLOBAL_BATCH = 10**7


@dataclass(frozen=True)
class Variant:
    """The workload half of a plan: checkpointing and micro-batch (the spec, changed accordingly)."""

    checkpointing: Checkpointing
    micro_batch: int
    micro_batches: int | None  # per step; None: the spec's own (inference)
    spec: Spec
    frugal: bool  # among the variants needing the least memory


def plans_for(
    spec: Spec,
    budget: Budget,
    *,
    gpus: int | None = None,
    max_gpus: int | None = None,
    top: int = 10,
    global_batch: int | None = None,
) -> PlanSearch:
    """What ``vramcalc plan`` and :func:`vramcalc.plan` list: :func:`best_plans` on exactly ``gpus`` GPUs,
    or the fewest up to ``max_gpus`` (default 64), the two being exclusive; ``top`` of them (1 or more)."""
    if gpus is not None and max_gpus is not None:
        raise VramcalcError(
            "--gpus and --max-gpus: give one (--gpus N: plans on exactly N GPUs; --max-gpus M: the fewest GPUs up to M)"
        )
    if top < 1:
        raise SpecError(f"--top: expected 1 or more, got {top}")
    limit = DEFAULT_MAX_GPUS if max_gpus is None else max_gpus
    return best_plans(spec, budget, gpus=gpus, max_gpus=limit, top=top, global_batch=global_batch)


def best_plans(
    spec: Spec,
    budget: Budget,
    *,
    gpus: int | None = None,
    max_gpus: int = 64,
    top: int = 10,
    global_batch: int | None = None,
) -> PlanSearch:
    """The ``top`` cheapest layouts that fit one card of ``budget``: on exactly ``gpus`` GPUs, or the
    fewest GPUs first up to ``max_gpus``. When none fits, the closest plan (least memory per GPU).
    ``global_batch``: the sequences per optimizer step every plan holds (:func:`global_batch_plans`)."""
    limit = gpus if gpus is not None else max_gpus
    check_searchable(spec, budget, limit, "--gpus" if gpus is not None else "--max-gpus")
    if global_batch is not None:
        return global_batch_plans(spec, budget, global_batch, gpus=gpus, limit=limit, top=top)
    per_rank = batch_per_rank(spec)
    variants = workload_variants(spec, per_rank)
    shape, _ = resolve_model(spec.model, spec.workload)
    tokens = _tokens_per_sequence(spec, shape.architecture)
    search = _LayoutSearch(budget, variants, limit, Allowance())
    combos = sorted(combinations(spec, limit), key=_ranks)
    if gpus is not None:
        combos = [c for c in combos if gpus % _ranks(c) == 0]
    rows: dict[str, Candidate] = {}
    cap = None  # fewest-GPUs mode: the GPU count of the top-th plan so far
    for combo in combos:
        if (cap is not None and _ranks(combo) > cap) or search.allowance.reached:
            break
        for cand, variant in search.layouts(combo, gpus, cap):
            row = _costed(cand, variant, tokens, shape.hidden)
            key = _layout_key(row)
            if key not in rows or _rank(row, gpus) < _rank(rows[key], gpus):
                rows[key] = row
        if gpus is None and len(rows) >= top:
            cap = sorted(rows.values(), key=lambda c: _rank(c, None))[top - 1].gpus
    count, complete = search.count, not search.allowance.reached
    return _found(spec, budget, limit, list(rows.values()), search.tried, count, gpus, top, complete, per_rank=per_rank)


def _found(
    spec: Spec,
    budget: Budget,
    limit: int,
    rows: list[Candidate],
    tried: list[Candidate],
    count: int,
    gpus: int | None,
    top: int,
    complete: bool,
    *,
    per_rank: int | None = None,
    global_batch: int | None = None,
) -> PlanSearch:
    """The search's result: the ``top`` fitting rows in order, else the closest plan tried."""
    fitting = sorted(rows, key=lambda c: _rank(c, gpus))
    closest = None if fitting else min(tried, key=lambda c: c.needed_bytes, default=None)
    return PlanSearch(
        spec.name or "unnamed",
        budget,
        limit,
        tuple(fitting[:top]),
        closest,
        count,
        gpus=gpus,
        criterion=("" if gpus is not None else "fewest GPUs; then ") + CRITERION,
        batch_per_rank=per_rank,
        global_batch=global_batch,
        complete=complete,
    )


def _costed(cand: Candidate, variant: Variant, tokens: int, hidden: int) -> Candidate:
    """The candidate with its workload half (checkpointing, micro-batch, accumulation) and step cost."""
    cost = step_cost(
        cand.parallel,
        variant.checkpointing,
        variant.micro_batch * -(-tokens // cand.parallel["context"]),
        variant.micro_batches or 1,
        hidden,
    )
    return replace(
        cand,
        checkpointing=variant.checkpointing.value,
        micro_batch=variant.micro_batch,
        grad_accumulation=variant.micro_batches or 1,
        cost=cost,
    )


def global_batch_plans(
    spec: Spec, budget: Budget, global_batch: int, *, gpus: int | None, limit: int, top: int
) -> PlanSearch:
    """Layouts that hold ``global_batch`` sequences per optimizer step: data-parallel degree x micro-batch x
    micro-batches per step. The data degree divides the global batch: with ``gpus`` it is the one that makes
    N GPUs (layouts whose degree does not divide it are left out, and an error says so when none is left),
    otherwise the smallest divisor that fits. Each layout keeps its cheapest fitting checkpointing and
    micro-batch, in :func:`best_plans`'s order."""
    if spec.workload.mode is not Mode.train:
        raise SpecError("--global-batch: only for training (a serving spec's batch is its concurrent sequences)")
    if not 1 <= global_batch <= MAX_GLOBAL_BATCH:
        raise SpecError(f"--global-batch: expected 1 to {MAX_GLOBAL_BATCH:,}, got {global_batch:,}")
    shape, _ = resolve_model(spec.model, spec.workload)
    tokens = _tokens_per_sequence(spec, shape.architecture)
    combos = sorted(combinations(spec, limit), key=_ranks)
    if gpus is not None:
        combos = [c for c in combos if gpus % _ranks(c) == 0]
        degrees = sorted({gpus // _ranks(c) for c in combos})
        combos = [c for c in combos if global_batch % (gpus // _ranks(c)) == 0]
        if not combos:
            raise SpecError(
                f"--global-batch: {global_batch:,} is not a multiple of the data-parallel degree of any layout "
                f"on {gpus:,} GPUs ({', '.join(map(str, degrees))})"
            )
    rows: dict[str, Candidate] = {}
    tried: list[Candidate] = []
    searches: dict[int, _LayoutSearch] = {}
    allowance = Allowance()
    for combo in combos:
        if allowance.reached:
            break
        ranks = _ranks(combo)
        data = [gpus // ranks] if gpus is not None else [d for d in _divisors(global_batch) if d * ranks <= limit]
        for d in data:
            if _sharded(combo) and d * combo["context"] < 2:
                continue  # ZeRO, FSDP sharding, a distributed optimizer: over two or more ranks
            per_rank = global_batch // d
            if per_rank not in searches:
                searches[per_rank] = _LayoutSearch(budget, workload_variants(spec, per_rank), limit, allowance)
            search = searches[per_rank]
            found = []
            for variant, s in zip(search.variants, search.searches, strict=True):
                cand = s.try_plan(_with_steps(combo, variant), d)
                if cand is not None:
                    tried.append(cand)
                    if cand.fits:
                        found.append(_costed(cand, variant, tokens, shape.hidden))
            if found:
                best = min(found, key=lambda c: _rank(c, gpus))
                rows.setdefault(_layout_key(best), best)
                break  # the smallest data degree of this layout that fits
    count = sum(search.count for search in searches.values())
    found = list(rows.values())
    return _found(spec, budget, limit, found, tried, count, gpus, top, not allowance.reached, global_batch=global_batch)


def _divisors(n: int) -> list[int]:
    """The divisors of ``n``, smallest first."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def batch_per_rank(spec: Spec) -> int:
    """Sequences one data-parallel rank processes per optimizer step in the spec as written."""
    section = spec.parallel
    if section is None or spec.workload.mode is not Mode.train:
        return spec.workload.batch_size
    steps = section.micro_batches or (section.pipeline if section.pipeline > 1 else 1)
    return spec.workload.batch_size * steps


def micro_batch_sizes(n: int) -> list[int]:
    """``n`` and its divisors, largest first, each at most half the one before; always ends with 1."""
    out = [n]
    for d in reversed(_divisors(n)):
        if 2 * d <= out[-1]:
            out.append(d)
    return out


def workload_variants(spec: Spec, per_rank: int) -> list[Variant]:
    """Checkpointing x micro-batch for training; the spec alone otherwise."""
    wl = spec.workload
    if wl.mode is not Mode.train:
        return [Variant(wl.gradient_checkpointing, wl.batch_size, None, spec, True)]
    modes = [Checkpointing.none, Checkpointing.full]
    if wl.attention is Attention.eager:
        modes.insert(1, Checkpointing.selective)
    # at most MAX_GPU_COUNT micro-batches a step (parallel.micro_batches' bound): a larger batch is tried
    # with micro-batches of at least per_rank / MAX_GPU_COUNT sequences
    sizes = [size for size in micro_batch_sizes(per_rank) if per_rank // size <= MAX_GPU_COUNT]
    out = []
    for mode in modes:
        for size in sizes:
            changed = with_workload(spec, batch_size=size, gradient_checkpointing=mode.value)
            frugal = mode is Checkpointing.full and size in (1, per_rank)
            out.append(Variant(mode, size, per_rank // size, changed, frugal))
    return out


class _LayoutSearch:
    """One cached :class:`_Search` per workload variant; the data degrees of one combination. Every
    variant's estimates come out of one ``allowance``."""

    def __init__(self, budget: Budget, variants: list[Variant], limit: int, allowance: Allowance) -> None:
        self.variants, self.allowance = variants, allowance
        self.searches = [_Search(v.spec, budget, limit, allowance) for v in variants]
        self.tried: list[Candidate] = []

    @property
    def count(self) -> int:
        return sum(s.count for s in self.searches)

    def layouts(self, combo: dict[str, Any], gpus: int | None, cap: int | None) -> list[tuple[Candidate, Variant]]:
        """Every variant of ``combo`` that fits, at its smallest data degree (``gpus``: the one degree)."""
        ranks = _ranks(combo)
        lo = 2 if _sharded(combo) and combo["context"] == 1 else 1
        hi = (gpus or cap or self.searches[0].max_gpus) // ranks
        if hi < lo:
            return []
        if gpus is not None:
            lo = hi
        pairs = list(zip(self.variants, self.searches, strict=True))
        frugal = [(v, s) for v, s in pairs if v.frugal]
        # one rank on its own too: plain data parallelism adds its all-reduce bucket only from two ranks on
        degrees = {lo, hi} if lo == 1 else {hi}
        found = [d for d in (fewest_degree(s, _with_steps(combo, v), lo, hi) for v, s in frugal) if d is not None]
        screened = [s.try_plan(_with_steps(combo, v), d) for v, s in frugal for d in sorted(degrees)]  # cached
        self.tried += [c for c in screened if c is not None]
        if not found:
            return []
        floor = min(found)
        out = []
        for v, s in pairs:
            data = fewest_degree(s, _with_steps(combo, v), floor, hi)
            cand = None if data is None else s.try_plan(_with_steps(combo, v), data)
            if cand is not None:
                out.append((cand, v))
        return out


def _with_steps(combo: dict[str, Any], variant: Variant) -> dict[str, Any]:
    if variant.micro_batches is None:
        return combo
    return {**combo, "micro_batches": variant.micro_batches}


def _sharded(combo: dict[str, Any]) -> bool:
    """ZeRO >= 1, FSDP other than no_shard, Megatron's distributed optimizer: they need two ranks."""
    return (
        bool(combo.get("zero"))
        or combo.get("fsdp") not in (None, "no_shard")
        or bool(combo.get("distributed_optimizer"))
    )


def _ranks(combo: dict[str, Any]) -> int:
    return int(combo["tensor"] * combo["pipeline"] * combo["context"])


def _layout_key(c: Candidate) -> str:
    keep = {k: v for k, v in c.parallel.items() if k != "micro_batches"}
    return repr(sorted(keep.items()))


def _rank(c: Candidate, gpus: int | None) -> tuple[int, float, int]:
    """The stated order: fewest GPUs (only without ``gpus``), relative cost, most headroom."""
    cost = round(c.relative_cost or 0.0, 9)
    return (0 if gpus is not None else c.gpus), cost, -c.headroom_bytes


def _tokens_per_sequence(spec: Spec, architecture: Architecture) -> int:
    """Tokens of one sequence a GPU computes (source + target for an encoder-decoder)."""
    from vramcalc.core.workload import tokens_for

    shape, _ = resolve_model(spec.model, spec.workload)
    tk = tokens_for(spec, shape, 1)
    return tk.seq + (tk.target if architecture is Architecture.encoder_decoder else 0)
