"""Does a spec fit a card, and if not, with what: `fit` over the catalog, `check` on one card, and the
sharded plans over several GPUs behind "cards needed" and "shard over N GPUs".

Pure: no I/O, neither typer nor rich. Sharded plans come from :mod:`vramcalc.planning.plan_search`'s search:

* ``cards needed`` (:meth:`ShardSearch.smallest`): the plan `vramcalc plan` lists first for that card,
  among plans of two or more GPUs: every scheme of the spec's framework, tensor, pipeline and
  data-parallel degree the model shape allows, up to ``max_gpus``;
* the "shard over N GPUs" suggestion: for a spec with a ``parallel`` section, that same plan; for a
  one-GPU spec, the fewer GPUs of ZeRO-3 (DeepSpeed) and FSDP full_shard over data-parallel ranks only
  (:meth:`ShardSearch.data_sharded`): sharding that needs no tensor- or pipeline-parallel model code.

Only the layout changes. For a one-GPU spec the optimizer implementation is pinned to the spec's own
(torch.optim's foreach by default); otherwise the per-rank model would credit any plan naming ZeRO with
DeepSpeed's fused Adam, and "1 GPU, no sharding" could fit where the spec itself does not.

Speed: ``fit`` searches every card of the catalog. A plan's per-GPU total depends on the plan and the
card's generation (its cuBLAS workspace), not on the card's capacity, so one :class:`ShardSearch` keeps
every estimate and shares it between cards (:class:`_SharedSearch`: plan_search's search with that
cache), and each distinct (available bytes, generation) pair is searched once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from vramcalc.choices import Mode, Precision
from vramcalc.core.stack import Device
from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.families.estimate import Estimate
from vramcalc.hardware.catalog import GPU
from vramcalc.parallel.rules import LLM_KEYS, check_supported
from vramcalc.planning.budget import DEFAULT_MAX_GPUS, Budget, Fit, budget_for, estimate_on, fit_of, fit_on
from vramcalc.planning.limits import with_workload
from vramcalc.planning.plan_search import (
    MAX_SEARCH_GPUS,
    SEARCH_ESTIMATES,
    TP_LIMIT,
    Allowance,
    Candidate,
    _order,
    _Search,
    combinations,
    fewest_degree,
)
from vramcalc.planning.suggest import Suggestion, best_first, suggestions, tried
from vramcalc.spec.models import Spec
from vramcalc.spec.parallel import FsdpStrategy, ParallelSpec
from vramcalc.spec.target import NO_RESERVE, Reserve
from vramcalc.stacks.techniques import one_gpu_only

#: Why more cards of a kind do not help by themselves.
DATA_PARALLEL = (
    "pure data parallelism does not reduce per-card memory: every replica holds the whole model, its "
    "gradients and optimizer states, and its own activations"
)
#: The same for an inference spec (no gradients or optimizer states).
REPLICAS = (
    "more replicas do not reduce per-card memory: every replica holds the whole model and its own "
    "activations and KV cache"
)
MIXED = (Precision.mixed_fp16, Precision.mixed_bf16)


@dataclass(frozen=True)
class CardFit:
    """The spec on one card: needed against available, and how many cards it would take."""

    budget: Budget
    verdict: Fit  # the one verdict (vramcalc.planning.budget.fit_of)
    suggestions: tuple[Suggestion, ...] = ()
    sharding: str = DATA_PARALLEL  # what more cards of this kind would do (one line)
    plan: Candidate | None = None  # a sharded plan on fewer cards than the spec's own, when one is found
    tried: str = ""  # the kinds of change tried, in words (for "no single change makes it fit")
    search_cut: bool = False  # the sharded-plan search reached its budget of estimates on this card

    @property
    def needed_bytes(self) -> int:
        return self.verdict.needed_bytes

    @property
    def available_bytes(self) -> int:
        return self.verdict.available_bytes

    @property
    def headroom_bytes(self) -> int:
        return self.verdict.headroom_bytes

    @property
    def fits(self) -> bool:
        return self.verdict.fits

    @property
    def min_cards(self) -> int | None:
        """The fewest cards that hold the spec: ``plan``'s GPUs when there is one; else, when it fits, 1 or
        (with a ``parallel`` section) its own GPU count; else None (nothing fits within ``max_gpus``)."""
        if self.plan is not None:
            return self.plan.gpus
        if not self.fits:
            return None
        return self.budget.count if self.budget.sharded else 1


def fit_cards(
    spec: Spec, gpus: list[GPU], reserve: Reserve = NO_RESERVE, search: ShardSearch | None = None
) -> list[CardFit]:
    """The spec on every card: those it fits first (smallest first), then the rest (largest first), each
    with the fewest cards of a sharded plan."""
    search = search or ShardSearch(spec)
    count = plan_gpus(spec.parallel) if spec.parallel is not None else 1
    budgets = [budget_for(gpu, reserve, count, spec.parallel is not None) for gpu in gpus]
    kinds = {(b.hopper_or_newer, b.interconnect) for b in budgets}
    results: dict[tuple[bool, str, Device | None], Estimate] = {
        (flag, link, None): estimate(spec, hopper_or_newer=flag, interconnect=link) for flag, link in kinds
    }
    for b in budgets:  # a vLLM serving spec: vLLM's default batch sizes depend on the card
        plain = results[(b.hopper_or_newer, b.interconnect, None)]
        key = (b.hopper_or_newer, b.interconnect, b.card)
        if plain.llm is not None and plain.llm.kv_pool is not None and key not in results:
            results[key] = estimate_on(spec, b)
    # smallest first, older generations first: what one card's search finds bounds the next's (ShardSearch)
    budgets.sort(key=lambda b: (b.hopper_or_newer, b.available_bytes))
    rows = []
    for b in budgets:
        result = results.get((b.hopper_or_newer, b.interconnect, b.card))
        rows.append(_card(b, fit_of(result or results[(b.hopper_or_newer, b.interconnect, None)], b), search))
    return sorted(rows, key=lambda r: (not r.fits, r.budget.available_bytes * (1 if r.fits else -1), r.budget.gpu_id))


@dataclass(frozen=True)
class FitReport:
    """``vramcalc fit``: the spec on every card of the catalog, and on its target card when it names one."""

    cards: list[CardFit]  # those it fits first (smallest first), then the rest (largest first)
    target: CardFit | None  # the target card with the changes that would make it fit; None without one
    search: ShardSearch  # the sharded-plan search behind "cards needed"

    @property
    def fits(self) -> bool:
        """It fits its target card, or with no target, at least one card (``fit``'s exit code 0)."""
        return self.target.fits if self.target else any(card.fits for card in self.cards)


def fit_report(
    spec: Spec, budget: Budget | None, reserve: Reserve = NO_RESERVE, max_gpus: int = DEFAULT_MAX_GPUS
) -> FitReport:
    """What ``vramcalc fit`` and :func:`vramcalc.fit` report: ``spec`` on every card of the active catalog
    with ``reserve`` kept free on each, and on ``budget`` (its target card, if any) with what would make it
    fit; sharded plans are searched up to ``max_gpus``."""
    from vramcalc.hardware.lookup import active_catalog

    search = ShardSearch(spec, max_gpus)
    cards = fit_cards(spec, active_catalog().gpus, reserve, search)
    target = check_on(spec, budget, search, fewest=True) if budget else None
    return FitReport(cards, target, search)


def check_on(spec: Spec, budget: Budget, search: ShardSearch | None = None, *, fewest: bool = False) -> CardFit:
    """One spec on one card, with the changes that would make it fit when it does not: single workload
    changes and "shard over N GPUs", best first. A spec with a ``parallel`` section that fits is searched
    for a plan on fewer cards only with ``fewest`` (as `fit` does; `check` does not need it)."""
    verdict = fit_on(spec, budget)
    if verdict.fits and not fewest:
        return CardFit(budget, verdict)
    search = search or ShardSearch(spec)
    if verdict.fits:
        return _card(budget, verdict, search)
    sharded = search.suggestion(budget)
    found = best_first(suggestions(spec, budget) + ([sharded] if sharded else []))
    return replace(_card(budget, verdict, search, tuple(found)), tried=tried(spec))


def _card(budget: Budget, verdict: Fit, search: ShardSearch, found: tuple[Suggestion, ...] = ()) -> CardFit:
    """The card's row: when it fits a spec with a ``parallel`` section over several GPUs, with a plan on
    fewer cards if the search finds one; when it does not fit, with the fewest cards' plan."""
    if verdict.fits and not (budget.sharded and budget.count > 1):
        return CardFit(budget, verdict)
    plan = search.smallest(budget)
    if verdict.fits and (plan is None or plan.gpus >= budget.count):
        return CardFit(budget, verdict, sharding=f"{budget.count} x {budget.gpu_id} as the spec's parallel section")
    return CardFit(budget, verdict, found, search.note(budget, plan), plan, search_cut=search.cut(budget))


def plan_gpus(section: ParallelSpec) -> int:
    """GPUs of a ``parallel`` section: ``gpus``, else data x tensor x pipeline x context (data default 1)."""
    return section.gpus or (section.data or 1) * section.tensor * section.pipeline * section.context


# -- the sharded-plan search --------------------------------------------------------------------------


class _SharedSearch(_Search):
    """plan_search's search for one card, drawing estimates from a cache shared between cards."""

    def __init__(
        self, spec: Spec, budget: Budget, max_gpus: int, shared: dict[Any, Candidate | None], allowance: Allowance
    ) -> None:
        super().__init__(spec, budget, max_gpus, allowance)
        self.shared = shared

    def _estimate(self, parallel: dict[str, Any]) -> Candidate | None:
        key = (repr(sorted(parallel.items())), self.budget.hopper_or_newer, self.budget.interconnect)
        if key not in self.shared:
            self.shared[key] = super()._estimate(parallel)
        found = self.shared[key]
        return None if found is None else replace(found, available_bytes=self.budget.available_bytes)


def unsearchable(spec: Spec) -> str | None:
    """Why the multi-GPU model cannot search ``spec`` (one line), or None when it can."""
    if spec.workload.mode is not Mode.train:
        given = [key for key in LLM_KEYS if getattr(spec.workload, key) is not None]
        if given:
            return (
                f"the sharded (ZeRO/FSDP) search does not cover serving specs (workload.{given[0]}); tensor "
                "parallelism (vLLM's tensor_parallel_size; parallel: {tensor: N}) splits the weights and the KV cache"
            )
        return "the sharded (ZeRO/FSDP) search covers training only; vramcalc plan lists tensor and pipeline layouts"
    reason = one_gpu_only(spec.workload)
    if reason is not None:
        return "the multi-GPU model does not cover this spec: " + reason
    section = spec.parallel or ParallelSpec()
    try:
        check_supported(spec.model_copy(update={"parallel": section}), section)
    except SpecError as exc:
        return "the multi-GPU model does not cover this spec: " + str(exc).removeprefix("parallel: ")
    return None


def _layout_only(spec: Spec) -> Spec:
    """``spec`` with its optimizer implementation made explicit when it has no plan of its own."""
    if spec.parallel is not None or spec.workload.precision in MIXED:
        return spec
    return with_workload(spec, optimizer_impl=spec.workload.optimizer_impl)


class ShardSearch:
    """Sharded plans for one spec on any number of cards (estimates shared; one search per capacity). All
    its searches together estimate at most :data:`SEARCH_ESTIMATES` plans; a card whose search ran out of
    them has the best plan found before (or none), and :meth:`note` says so."""

    def __init__(self, spec: Spec, max_gpus: int = DEFAULT_MAX_GPUS) -> None:
        if not 1 <= max_gpus <= MAX_SEARCH_GPUS:
            raise SpecError(f"--max-gpus: expected 1 to {MAX_SEARCH_GPUS:,}, got {max_gpus}")
        self.spec, self.max_gpus = spec, max_gpus
        self.reason = unsearchable(spec)
        self.base = spec if self.reason else _layout_only(spec)
        self._estimates: dict[Any, Candidate | None] = {}
        self._smallest: dict[tuple[int, bool, str], Candidate | None] = {}
        self._combinations: list[dict[str, Any]] | None = None
        self.allowance = Allowance()
        self._cut: set[tuple[int, bool, str]] = set()  # cards whose search ran out of the allowance

    def combinations(self) -> list[dict[str, Any]]:
        """plan_search's combinations (no data degree), fewest model-parallel ranks first: the spec's own
        framework; for a one-GPU spec DeepSpeed's (ZeRO 0-3) and FSDP's, either being the user's to pick."""
        if self._combinations is None:
            variants = [self.base]
            if self.spec.parallel is None:
                fsdp = ParallelSpec(fsdp=FsdpStrategy.full_shard)
                variants.append(self.base.model_copy(update={"parallel": fsdp}))
            found = [base for variant in variants for base in combinations(variant, self.max_gpus)]
            self._combinations = sorted(found, key=_ranks)
        return self._combinations

    def smallest(self, budget: Budget) -> Candidate | None:
        """The plan `vramcalc plan` would list first for this card (of two or more GPUs for a one-GPU spec)."""
        if self.reason:
            return None
        key = (budget.available_bytes, budget.hopper_or_newer, budget.interconnect)
        if key not in self._smallest:
            self._smallest[key] = None if self._none_fits(*key) else self._first_plan(budget)
            if self.allowance.reached:
                self._cut.add(key)
        return self._smallest[key]

    def cut(self, budget: Budget) -> bool:
        """Whether this card's search ran out of the allowance (its plan is the best found, or none)."""
        return (budget.available_bytes, budget.hopper_or_newer, budget.interconnect) in self._cut

    def _none_fits(self, available: int, hopper: bool, link: str) -> bool:
        """Known without a search: no plan fit a card at least as large that needs no more (a Hopper-or-newer
        card needs more than an older one: larger cuBLAS workspaces; NVSwitch boards more than PCIe: NCCL)."""
        return any(
            plan is None and cap >= available and (h == hopper or hopper) and (lk == link or link == "nvswitch")
            for (cap, h, lk), plan in self._smallest.items()
            if (cap, h, lk) not in self._cut
        )

    def _seed(self, search: _SharedSearch, budget: Budget) -> Candidate | None:
        """The plan of the largest smaller card searched so far, re-estimated here, if it fits this card."""
        smaller = [
            (cap, plan) for (cap, _, _), plan in self._smallest.items() if plan and cap <= budget.available_bytes
        ]
        for _, plan in sorted(smaller, key=lambda item: -item[0]):
            fitted = search.try_plan(plan.parallel, plan.parallel["data"])
            if fitted is not None and fitted.fits:
                return fitted
        return None

    def _first_plan(self, budget: Budget) -> Candidate | None:
        """plan_search's first plan (see :meth:`_smallest_in`), found with less work: combinations in order of
        model-parallel size, each searched only up to the best GPU count so far, none once their model
        parallelism alone exceeds it (a larger plan cannot come first). The best so far starts as the
        plan of a smaller card searched before, when it fits this one (``fit`` searches small cards first)."""
        search = _SharedSearch(self.base, budget, self.max_gpus, self._estimates, self.allowance)
        best = self._seed(search, budget)
        if best is not None:
            search.max_gpus = best.gpus
        for base in self.combinations():
            if (best is not None and _ranks(base) > best.gpus) or self.allowance.reached:
                break
            cand = self._smallest_in(search, base)
            if cand is not None and cand.fits and (best is None or _order(cand) < _order(best)):
                best = cand
                search.max_gpus = best.gpus
        return best

    def data_sharded(self, budget: Budget) -> Candidate | None:
        """The fewer GPUs of ZeRO-3 and FSDP full_shard, with no tensor or pipeline parallelism; when the
        run is planned for several GPUs (``target.count`` or ``--gpus``), over exactly those."""
        if self.reason:
            return None
        search = _SharedSearch(self.base, budget, self.max_gpus, self._estimates, self.allowance)
        bases = list(filter(_fully_sharded_data_parallel, self.combinations()))
        if budget.count > 1:
            found = [search.try_plan(base, budget.count) for base in bases]
        else:
            found = [self._smallest_in(search, base) for base in bases]
        return min((c for c in found if c is not None and c.fits), key=_order, default=None)

    def _smallest_in(self, search: _SharedSearch, base: dict[str, Any]) -> Candidate | None:
        """plan_search's smallest data degree for ``base``; for a one-GPU spec at least two GPUs (one GPU
        is the spec itself, which the plain estimate already found too big; the per-rank model at one GPU
        can differ from it slightly)."""
        cand = search.smallest(base)
        if self.spec.parallel is not None or cand is None or cand.gpus > 1:
            return cand
        top = search.max_gpus // _ranks(base)  # one rank fits, but is not sharding
        data = fewest_degree(search, base, 2, top) if top >= 2 else None
        return None if data is None else search.try_plan(base, data)

    @property
    def sharding(self) -> str:
        """How "cards needed" (the fewest cards of a kind) is found, one line without a final period."""
        if self.reason:
            return f"not searched: {self.reason}; {DATA_PARALLEL}"
        return (
            f"the fewest cards of a sharded plan, from vramcalc plan's search (ZeRO/FSDP, tensor and pipeline "
            f"parallelism, up to {self.max_gpus} GPUs; batch_size stays per GPU); {DATA_PARALLEL}"
        )

    def note(self, budget: Budget, plan: Candidate | None) -> str:
        """What more cards of this kind would do (one line): the plan, or why there is none."""
        if self.reason:
            more = DATA_PARALLEL if self.spec.workload.mode is Mode.train else REPLICAS
            return f"not searched: {self.reason}; {more}"
        if plan is None and self.cut(budget):
            return (
                f"no sharded plan found before the search reached its budget of {SEARCH_ESTIMATES:,} estimates "
                f"(layouts with the fewest model-parallel GPUs first); a smaller --max-gpus than {self.max_gpus} "
                f"searches more of them; {DATA_PARALLEL}"
            )
        if plan is None:
            return f"no sharded plan fits within {self.max_gpus} GPUs (--max-gpus); {DATA_PARALLEL}"
        if plan.gpus == 1:
            return f"1 x {budget.gpu_id}: one card holds it under the parallel section's framework"
        cut = (
            f" (the best found before the search reached its budget of {SEARCH_ESTIMATES:,} estimates)"
            if self.cut(budget)
            else ""
        )
        return f"{plan.gpus} x {budget.gpu_id} with {plan_text(plan)}{cut}"

    def tensor_parallel(self, budget: Budget) -> Suggestion | None:
        """For an inference or serving spec without a parallel section: the fewest GPUs of tensor
        parallelism that fit (up to 8, one node), or when the run is planned for several GPUs exactly those.
        A serving spec is estimated per GPU as vLLM shards it (vramcalc/families/serving.py)."""
        spec, wl = self.spec, self.spec.workload
        if wl.mode is Mode.train or spec.parallel is not None:
            return None
        for t in [budget.count] if budget.count > 1 else range(2, min(TP_LIMIT, self.max_gpus) + 1):
            changed = spec.model_copy(update={"parallel": ParallelSpec(tensor=t)})
            try:
                verdict = fit_of(estimate_on(changed, budget), budget)
            except SpecError:  # a degree the shape does not allow (heads, kv_heads, ffn_size), or a ResNet
                continue
            if verdict.fits:
                why = f"parallel: {{gpus: {t}, tensor: {t}}}; every figure is one GPU's (weights and activations split)"
                return Suggestion(
                    f"tensor parallelism over {t} GPUs",
                    why,
                    verdict.needed_bytes,
                    verdict.headroom_bytes,
                    {"tensor": t},
                )
        return None

    def suggestion(self, budget: Budget) -> Suggestion | None:
        """'shard over N GPUs (plan)' with its per-GPU total, when such a plan fits."""
        if self.reason:
            return self.tensor_parallel(budget)
        plan = self.smallest(budget) if self.spec.parallel is not None else self.data_sharded(budget)
        if plan is None:
            return None
        batch, p = self.spec.workload.batch_size, plan.parallel
        micro = p.get("micro_batches") or p["pipeline"]
        steps = f" x {micro} micro-batches" if micro > 1 else ""
        detail = (
            f"parallel: {parallel_text(p)}; every figure is one GPU's; batch_size {batch} stays per GPU "
            f"(global batch {batch} x {p['data']} data-parallel ranks{steps})"
        )
        # a spec's own multi-GPU plan can need more per GPU than one GPU (DeepSpeed's data-parallel buckets)
        change = f"shard over {plan.gpus} GPUs ({plan_text(plan)})" if plan.gpus > 1 else "1 GPU (no sharding)"
        return Suggestion(change, detail, plan.needed_bytes, plan.headroom_bytes, dict(plan.parallel))


def _ranks(base: dict[str, Any]) -> int:
    """GPUs of one data-parallel rank's model copy: tensor x pipeline x context."""
    return int(base["tensor"] * base["pipeline"] * base["context"])


def _fully_sharded_data_parallel(base: dict[str, Any]) -> bool:
    """ZeRO-3 or FSDP full_shard with neither tensor nor pipeline parallelism."""
    stage3 = base.get("zero") == 3 or base.get("fsdp") == "full_shard"
    return stage3 and base["tensor"] == base["pipeline"] == 1


def plan_text(plan: Candidate) -> str:
    """'FSDP full_shard', 'TP 2 x DP 15, FSDP full_shard + SP', 'TP 2, no ZeRO + SP'."""
    p = plan.parallel
    scheme = plan.label.split(", ", 1)[-1]
    for plain in ("no sharding", "data parallel (no ZeRO)"):
        scheme = scheme.replace(plain, "no ZeRO")
    dims = [f"{name} {p[key]}" for name, key in (("TP", "tensor"), ("PP", "pipeline"), ("CP", "context")) if p[key] > 1]
    if dims and p["data"] > 1:
        dims.append(f"DP {p['data']}")
    return ", ".join([" x ".join(dims), scheme] if dims else [scheme])


def parallel_text(parallel: dict[str, Any]) -> str:
    """The keys of a plan's ``parallel`` section that set its layout, as a YAML flow mapping."""
    keys: dict[str, Any] = {"gpus": parallel["data"] * parallel["tensor"] * parallel["pipeline"] * parallel["context"]}
    keys |= {k: parallel[k] for k in ("tensor", "pipeline", "context") if parallel[k] > 1}
    keys |= {"sequence_parallel": "true"} if parallel["sequence_parallel"] else {}
    keys |= {k: parallel[k] for k in ("zero", "fsdp") if k in parallel}
    if "distributed_optimizer" in parallel:
        keys["distributed_optimizer"] = str(parallel["distributed_optimizer"]).lower()
    return "{" + ", ".join(f"{k}: {v}" for k, v in keys.items()) + "}"
