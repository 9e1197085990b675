"""`vramcalc plan`: the smallest multi-GPU plans (by GPU count) whose per-GPU peak fits a card.

Pure: neither typer nor rich, no I/O. The search varies what the model shape allows:

* sharding scheme within the spec's framework (DeepSpeed unless the spec's ``parallel`` section names
  FSDP or Megatron-LM): ZeRO 0-3 (2 and 3 only without pipeline stages, as DeepSpeed requires); FSDP
  no_shard / shard_grad_op / full_shard; Megatron with and without the distributed optimizer;
* tensor parallelism over divisors of ``heads``, ``kv_heads`` and ``ffn_size`` up to one node
  (``gpus_per_node``, default 8: TP needs the node's NVLink), with sequence parallelism on; a serving spec
  may also replicate its KV heads over a multiple of their count, as vLLM does;
* pipeline stages over divisors of ``layers`` (1 for encoder-decoders), with the spec's micro-batches
  (default: as many as stages);
* the data-parallel degree: for each combination above the smallest that fits. Per-GPU bytes never
  grow with it (ZeRO/FSDP shard more; plain data parallelism is flat), so it is found by bisection.

Everything else is the spec's: the micro-batch per GPU (``batch_size``), sequence, precision,
optimizer, checkpointing, context parallelism, offload, buckets. The global batch grows with the
data-parallel degree. Each plan is estimated on the card and judged by the one verdict,
:func:`vramcalc.planning.budget.fit_of`: ``Estimate.total_bytes`` per GPU against the card's usable memory
less the reserve, or for a vLLM serving spec vLLM's own KV-pool rule (then a data-parallel rank is a replica
and its concurrent sequences are listed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vramcalc.choices import Architecture, Mode
from vramcalc.errors import SpecError
from vramcalc.families.estimate import Estimate
from vramcalc.families.resolve import resolve_model
from vramcalc.parallel.layout import DEFAULT_GPUS_PER_NODE
from vramcalc.planning.budget import Budget, estimate_on, fit_of
from vramcalc.spec.models import Spec
from vramcalc.spec.parallel import Framework, ParallelSpec
from vramcalc.spec.versions import zeroes_gradients_in_place

if TYPE_CHECKING:
    from vramcalc.planning.plan_cost import StepCost

#: The most GPUs a search may consider (a bound on typos, like target.MAX_GPU_COUNT).
MAX_SEARCH_GPUS = 100_000
TP_LIMIT = 8
#: The most plans one command estimates in all its searches together (`plan`'s layouts, `fit`'s cards,
#: `check`'s "shard over N GPUs"): a few seconds of CPU at the largest shapes a spec may have. The bundled
#: configs need at most about 1,300 (`fit` over the catalog, up to 64 GPUs) and 3,100 (up to 1,024);
#: a model of 720,720 layers, whose pipeline degrees are the divisors of that, asks for about 32,000
#: when searched up to 100,000 GPUs. A search that reaches the budget answers from the plans it
#: estimated, layouts with the fewest model-parallel GPUs first, and says so.
SEARCH_ESTIMATES = 4_000


class AllowanceSpent(Exception):
    """A search asked for an estimate past its command's :class:`Allowance`."""


class Allowance:
    """The estimates a command's searches may still compute (:data:`SEARCH_ESTIMATES`), shared by all."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = SEARCH_ESTIMATES if limit is None else limit
        self.spent = self.refused = 0

    def take(self) -> None:
        """Count one estimate; :class:`AllowanceSpent` once ``limit`` are spent."""
        if self.spent >= self.limit:
            self.refused += 1
            raise AllowanceSpent
        self.spent += 1

    @property
    def reached(self) -> bool:
        """Whether a search was refused an estimate: its answer is the best of those it made."""
        return self.refused > 0


@dataclass(frozen=True)
class Candidate:
    """One plan that was estimated: its parallel section and the per-GPU figures (int bytes)."""

    parallel: dict[str, Any]
    gpus: int
    label: str
    needed_bytes: int
    peak_allocated_bytes: int
    host_bytes: int
    available_bytes: int
    # set by the layout search of `vramcalc plan` (vramcalc.planning.plan_layouts), None elsewhere
    checkpointing: str | None = None
    micro_batch: int | None = None
    grad_accumulation: int | None = None
    cost: StepCost | None = None
    nccl_bytes: int = 0  # NCCL's buffers among needed_bytes (vramcalc/stacks/nccl.py)
    total_bytes: int = 0  # the estimate's total per GPU (needed_bytes, unless vLLM's pool decides)
    max_sequences: int | None = None  # a vLLM serving plan: concurrent sequences per replica

    @property
    def relative_cost(self) -> float | None:
        return None if self.cost is None else self.cost.total

    @property
    def fits(self) -> bool:
        return self.needed_bytes <= self.available_bytes

    @property
    def headroom_bytes(self) -> int:
        return self.available_bytes - self.needed_bytes


@dataclass(frozen=True)
class PlanSearch:
    """The result of :func:`search_plans` (fitting plans, smallest GPU count first) or of
    :func:`vramcalc.planning.plan_layouts.best_plans` (ordered by ``criterion``)."""

    name: str
    budget: Budget
    max_gpus: int
    plans: tuple[Candidate, ...]
    closest: Candidate | None
    n_estimates: int
    gpus: int | None = None  # the exact GPU count asked for (None: the fewest GPUs up to max_gpus)
    complete: bool = True  # False: the search reached SEARCH_ESTIMATES before it tried every layout
    criterion: str = "fewest GPUs, then the least tensor x pipeline parallelism, then the least memory per GPU"
    batch_per_rank: int | None = None  # sequences per data-parallel rank per optimizer step, when held
    global_batch: int | None = None  # sequences per optimizer step over all ranks, when held

    @property
    def min_gpus(self) -> int | None:
        """The fewest GPUs any plan needs (None when nothing fits within ``max_gpus``)."""
        return self.plans[0].gpus if self.plans else None


def search_plans(spec: Spec, budget: Budget, *, max_gpus: int, top: int = 10) -> PlanSearch:
    """The ``top`` smallest plans that fit one card of ``budget`` (per GPU); when none fits, the
    plan needing the least per GPU at the largest data degree tried."""
    check_searchable(spec, budget, max_gpus, "--max-gpus")
    search = _Search(spec, budget, max_gpus)
    found = []
    for base in combinations(spec, max_gpus):
        if search.allowance.reached:
            break
        found += [c for c in [search.smallest(base)] if c is not None]
    fitting = sorted((c for c in found if c.fits), key=_order)
    closest = None if fitting else min(search.largest_tried(), key=lambda c: c.needed_bytes, default=None)
    name = spec.name or "unnamed"
    complete = not search.allowance.reached
    return PlanSearch(name, budget, max_gpus, tuple(fitting[:top]), closest, search.count, complete=complete)


def check_searchable(spec: Spec, budget: Budget, gpus: int, flag: str) -> None:
    """The GPU bound (``flag``) in range, a transformer, and the spec as written valid: its own error,
    not "no plan fits" from every combination."""
    if not 1 <= gpus <= MAX_SEARCH_GPUS:
        raise SpecError(f"{flag}: expected 1 to {MAX_SEARCH_GPUS:,}, got {gpus}")
    if spec.model.architecture is Architecture.resnet:
        raise SpecError("model.architecture: resnet has no multi-GPU model yet; plan searches transformers only")
    if spec.workload.mode is Mode.train and zeroes_gradients_in_place(spec.workload.versions):
        torch = (spec.workload.versions or {})["torch"]
        raise SpecError(f"workload.versions.torch: {torch} is modelled on one GPU; plan searches multi-GPU layouts")
    estimate_on(spec, budget)
    smallest = combinations(spec, gpus)[:1]  # no tensor or pipeline split: what the spec itself refuses
    try:
        for base in smallest:
            one_gpu = spec.model_copy(update={"parallel": ParallelSpec.model_validate({**base, "data": 1})})
            estimate_on(one_gpu, budget)
    except SpecError as exc:  # runtime: litgpt, llama.cpp, experts, one-GPU techniques, ...
        raise SpecError(f"{exc}; plan searches multi-GPU layouts") from None


def _order(c: Candidate) -> tuple[int, int, int]:
    """Fewest GPUs; then the least model parallelism; then the least memory per GPU."""
    model_parallel = c.parallel.get("tensor", 1) * c.parallel.get("pipeline", 1)
    return c.gpus, model_parallel, c.needed_bytes


def combinations(spec: Spec, max_gpus: int) -> list[dict[str, Any]]:
    """Parallel sections without the data degree: every scheme x tensor x pipeline the shape allows."""
    shape, _ = resolve_model(spec.model, spec.workload)
    section = spec.parallel
    context = section.context if section else 1
    per_node = section.gpus_per_node if section and section.gpus_per_node else TP_LIMIT
    train = spec.workload.mode is Mode.train  # serving: tensor, pipeline and replicas, nothing sharded
    tensors = [
        t for t in range(1, min(per_node, max_gpus) + 1) if _splits(shape.heads, shape.kv_heads, shape.ffn, t, train)
    ]
    pipelines = [p for p in range(1, min(shape.layers, max_gpus) + 1) if shape.layers % p == 0]
    if shape.architecture is Architecture.encoder_decoder:
        pipelines = [1]
    out = []
    for t in tensors:
        for p in pipelines:
            if t * p * context > max_gpus:
                continue
            out += [
                {**_kept(spec), **scheme, "tensor": t, "pipeline": p, "context": context}
                | {"sequence_parallel": train and t > 1}
                for scheme in (_schemes(spec, p) if train else [{}])
            ]
    return out


def _splits(heads: int, kv_heads: int, ffn: int, tensor: int, train: bool) -> bool:
    """Whether ``tensor`` ranks can split the attention and the MLP: the heads, the KV heads and the MLP's
    width evenly; serving (vLLM) may also replicate the KV heads over a multiple of their count."""
    if heads % tensor or ffn % tensor:
        return False
    return kv_heads % tensor == 0 or (not train and tensor % kv_heads == 0)


def _schemes(spec: Spec, pipeline: int) -> list[dict[str, Any]]:
    framework = spec.parallel.resolved_framework if spec.parallel else Framework.deepspeed
    if framework is Framework.fsdp:
        return [{"fsdp": s} for s in ("no_shard", "shard_grad_op", "full_shard")]
    if framework is Framework.megatron:
        return [{"distributed_optimizer": False}, {"distributed_optimizer": True}]
    return [{"zero": z} for z in (0, 1, 2, 3) if z < 2 or pipeline == 1]


def _kept(spec: Spec) -> dict[str, Any]:
    """Keys of the spec's own parallel section that the search does not vary."""
    if spec.parallel is None:
        return {}
    keep = ("offload", "buckets", "gpus_per_node", "fp32_grads", "micro_batches", "uneven_pipeline", "interconnect")
    data = spec.parallel.model_dump(include=set(keep), exclude_none=True, mode="json")
    return {k: v for k, v in data.items() if k in spec.parallel.model_fields_set}


class _Search:
    """Estimates with a cache; finds the smallest data degree that fits one combination. Estimates come
    out of ``allowance`` (shared by the command's searches); past it a plan counts as not estimated."""

    def __init__(self, spec: Spec, budget: Budget, max_gpus: int, allowance: Allowance | None = None) -> None:
        self.spec, self.budget, self.max_gpus = spec, budget, max_gpus
        self.allowance = allowance or Allowance()
        self.count = 0
        self.cache: dict[str, Candidate | None] = {}
        self.largest: list[Candidate] = []

    def smallest(self, base: dict[str, Any]) -> Candidate | None:
        """The fitting candidate with the fewest data-parallel ranks (None when none fits). One rank is
        tried on its own: plain data parallelism adds its all-reduce bucket only from two ranks on."""
        ranks = base["tensor"] * base["pipeline"] * base["context"]
        top = self.max_gpus // ranks
        first = self.try_plan(base, 1)
        if first is not None and first.fits:
            return first
        last = self.try_plan(base, top)
        if last is not None:
            self.largest.append(last)
        data = fewest_degree(self, base, 2, top)
        return None if data is None else self.try_plan(base, data)

    def largest_tried(self) -> list[Candidate]:
        return self.largest

    def try_plan(self, base: dict[str, Any], data: int) -> Candidate | None:
        parallel = {**base, "data": data}
        key = repr(sorted(parallel.items()))
        if key not in self.cache:
            try:
                self.cache[key] = self._estimate(parallel)
            except AllowanceSpent:
                return None
        return self.cache[key]

    def _estimate(self, parallel: dict[str, Any]) -> Candidate | None:
        self.allowance.take()
        changed = self.spec.model_copy(update={"parallel": ParallelSpec.model_validate(parallel)})
        try:
            result = estimate_on(changed, self.budget)
        except SpecError:  # a combination the spec's other keys rule out
            return None
        self.count += 1
        return _candidate(parallel, result, self.budget)


def fewest_degree(search: _Search, base: dict[str, Any], lo: int, hi: int) -> int | None:
    """The smallest data degree from ``lo`` to ``hi`` whose plan of ``base`` fits (None when none does).

    Without NCCL's buffers per-GPU bytes do not grow with the data degree (ZeRO/FSDP shard more, plain data
    parallelism is flat); NCCL's grow with it up to a node's GPUs (trees, NVLS: vramcalc/stacks/nccl.py)
    and are flat beyond. So: when ``hi`` minus its NCCL bytes plus ``lo``'s is still too much, nothing fits;
    else the degrees up to a node are tried one by one, and from a node on bisection finds the smallest."""
    if lo > hi:
        return None
    first, last = search.try_plan(base, lo), search.try_plan(base, hi)
    if first is not None and first.fits:
        return lo
    if last is None or lo == hi:
        return None
    least_nccl = first.nccl_bytes if first is not None else 0
    if last.needed_bytes - last.nccl_bytes + least_nccl > last.available_bytes:
        return None
    node = min(hi, max(lo, base.get("gpus_per_node", DEFAULT_GPUS_PER_NODE)))
    for data in range(lo + 1, node + 1):
        cand = search.try_plan(base, data)
        if cand is not None and cand.fits:
            return data
    if not last.fits:
        return None
    while hi - node > 1:  # node does not fit, hi does
        mid = (node + hi) // 2
        cand = search.try_plan(base, mid)
        node, hi = (node, mid) if cand is not None and cand.fits else (mid, hi)
    return hi


def _candidate(parallel: dict[str, Any], result: Estimate, budget: Budget) -> Candidate:
    details = result.parallel
    assert details is not None  # a plan's estimate is per rank
    verdict = fit_of(result, budget)
    return Candidate(
        parallel=parallel,
        gpus=details.plan.gpus,
        label=details.plan.summary,
        needed_bytes=verdict.needed_bytes,
        peak_allocated_bytes=result.peak_allocated_bytes,
        host_bytes=details.host_bytes,
        available_bytes=verdict.available_bytes,
        nccl_bytes=result.overhead.get("nccl", 0),
        total_bytes=result.total_bytes,
        max_sequences=None if verdict.kv_pool is None else verdict.kv_pool.max_sequences,
    )
