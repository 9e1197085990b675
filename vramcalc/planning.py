"""Planning on top of the estimator: budgets, the largest batch or sequence that fits, the workload
changes that would make a spec fit, and grids of totals (fit on each card: :mod:`vramcalc.planning_fit`).
Pure: no I/O, neither typer nor rich.

What is compared (the same everywhere):

* ``needed_bytes`` = :attr:`vramcalc.estimator.Estimate.total_bytes`: the allocated peak plus the
  runtime overhead (CUDA context and the caching allocator's reserve), for the card's generation
  (cuBLAS workspaces are larger on Hopper and newer).
* ``available_bytes`` = the card's usable memory minus the reserve. Usable memory is the total the
  driver exposes (nvidia-smi's memory.total, :attr:`vramcalc.catalog.GPU.usable_bytes`) where the
  catalog has it -- the most a process can ever allocate, a few hundred MiB under the DRAM size on
  the box -- and the nominal capacity otherwise. The reserve (``target.reserve`` or ``--reserve``,
  default none) is headroom the user wants kept free: a share of the usable memory or a size.

The estimate is nondecreasing in batch size and sequence length, so the largest value that fits is
found by doubling and then bisection: about 2 log2(n) estimates.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from vramcalc.batch_totals import BatchTotals
from vramcalc.catalog import GPU
from vramcalc.choices import Attention, Checkpointing, Mode, Optimizer, Precision
from vramcalc.errors import SpecError
from vramcalc.estimator import DEFAULT_ALLOCATOR_RESERVE, Estimate, estimate
from vramcalc.spec import Spec, override_workload
from vramcalc.target import NO_RESERVE, Reserve
from vramcalc.units import parse_count

#: The spec's bound on counts (``PositiveCount`` in spec.py).
MAX_SPEC_COUNT = 10**12
#: Largest batch size or sequence length a search tries: one below that bound, so the value after
#: it can still be estimated.
SEARCH_CAP = MAX_SPEC_COUNT - 1
#: Largest GPU count the sharded-plan search tries unless --max-gpus says otherwise (as `vramcalc plan`).
DEFAULT_MAX_GPUS = 64
#: NVIDIA cards of compute capability below 8.0 (Pascal, Volta, Turing): no bf16 tensor cores, so
#: bf16 precisions are not suggested there (PyTorch can only emulate bf16 on them, slowly).
NO_BF16 = frozenset(
    {
        "t4",
        "v100-16gb-sxm2",
        "v100-32gb-sxm2",
        "v100-16gb-pcie",
        "v100-32gb-pcie",
        "titan-rtx",
        "titan-x-pascal",
        "rtx-2080-ti",
    }
)


@dataclass(frozen=True)
class Budget:
    """One card as the planning commands see it (int bytes)."""

    gpu_id: str
    gpu_name: str
    usable_bytes: int
    capacity_basis: str
    hopper_or_newer: bool = False
    reserve: Reserve = NO_RESERVE
    count: int = 1
    bf16: bool = True  # the card has bf16 tensor cores (bf16 precisions are suggested)
    sharded: bool = False  # ``count`` is the GPU count of the spec's parallel section (figures per GPU)

    @property
    def reserve_bytes(self) -> int:
        return self.reserve.bytes_of(self.usable_bytes)

    @property
    def available_bytes(self) -> int:
        """Usable memory minus the reserve (never below zero: a reserve larger than the card leaves
        nothing): what the estimate's total is compared with."""
        return max(0, self.usable_bytes - self.reserve_bytes)


def capacity_basis(gpu: GPU) -> str:
    """Which capacity figure a card is compared with, and why (one line)."""
    if gpu.driver_total_mib:
        return (
            f"driver total {gpu.driver_total_mib:,} MiB (nvidia-smi memory.total: the most CUDA can allocate; "
            f"the nominal {gpu.capacity:g} {gpu.capacity_unit} is the DRAM size)"
        )
    unit = "GiB" if gpu.capacity_is_binary or gpu.capacity_unit == "GiB" else "GB"
    return (
        f"nominal {gpu.capacity:g} {gpu.capacity_unit} read as {unit} (the catalog has no driver total; "
        "the driver exposes a little less)"
    )


def budget_for(gpu: GPU, reserve: Reserve = NO_RESERVE, count: int = 1, sharded: bool = False) -> Budget:
    """The budget of a catalog card."""
    basis = capacity_basis(gpu)
    bf16 = gpu.id not in NO_BF16
    return Budget(gpu.id, gpu.name, gpu.usable_bytes, basis, gpu.hopper_or_newer, reserve, count, bf16, sharded)


def estimate_on(spec: Spec, budget: Budget) -> Estimate:
    """The estimate for the card's generation (its cuBLAS workspace size)."""
    return estimate(spec, hopper_or_newer=budget.hopper_or_newer)


def with_workload(spec: Spec, **changes: Any) -> Spec:
    """``spec`` with workload keys replaced, validated like the file (:func:`override_workload`)."""
    return override_workload(spec, spec.name or "<spec>", **changes)


def _check_seq_is_free(spec: Spec, what: str) -> None:
    """Sequence length can only be varied when the spec neither lacks one nor pins it."""
    if spec.workload.seq_len is None:
        raise SpecError(f"{what}: the spec has no seq_len (a vision model's length follows image_size)")
    if getattr(spec.workload, "max_new_tokens", None) is not None:
        raise SpecError(f"{what}: seq_len is prompt_len + max_new_tokens in this spec; vary those instead")


# -- largest batch / sequence --------------------------------------------------------------------


@dataclass(frozen=True)
class Limit:
    """The largest value of ``key`` that fits (0 when even 1 does not), with the totals around it."""

    key: str
    value: int
    total_at_max: int | None
    total_at_next: int
    n_estimates: int
    budget: Budget
    notes: tuple[str, ...] = ()
    #: How the totals were computed (max-batch on the symbolic path): the allocated peak without the
    #: inputs is the largest of these polynomials in the batch size (int coefficients, constant first).
    peak_by_batch: tuple[tuple[int, ...], ...] = ()


def largest_fitting(
    total_at: Callable[[int], int], available_bytes: int, cap: int = SEARCH_CAP
) -> tuple[int, dict[int, int]]:
    """Largest ``n`` in 1..cap with ``total_at(n) <= available_bytes`` (0 if none) for a
    nondecreasing ``total_at``: doubling brackets it, bisection closes the bracket. Returns the
    value and every total computed (the value after the answer is always among them, below cap)."""
    seen: dict[int, int] = {}

    def fits(n: int) -> bool:
        if n not in seen:
            seen[n] = total_at(n)
        return seen[n] <= available_bytes

    if not fits(1):
        return 0, seen
    lo, hi = 1, 2
    while hi <= cap and fits(hi):
        lo, hi = hi, 2 * hi
    hi = min(hi, cap + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo, seen


def totals_along(spec: Spec, budget: Budget, key: str) -> Callable[[int], int]:
    """``total_bytes`` as a function of ``batch_size`` or ``seq_len``, the other keys as in the spec.
    Batch sizes come from one estimate on a symbolic batch size (:class:`~vramcalc.batch_totals.BatchTotals`);
    each sequence length runs a full estimate (it can change the model itself: the default position table)."""
    if key == "batch_size":
        return BatchTotals.of(spec, hopper_or_newer=budget.hopper_or_newer)
    return lambda n: estimate_on(with_workload(spec, **{key: n}), budget).total_bytes


def _limit(spec: Spec, budget: Budget, key: str) -> Limit:
    total_at = totals_along(spec, budget, key)
    value, seen = largest_fitting(total_at, budget.available_bytes)
    at_next = seen[value + 1] if value + 1 in seen else total_at(value + 1)
    n_estimates = len(seen) + (value + 1 not in seen)
    polynomials = total_at.peak if isinstance(total_at, BatchTotals) else ()
    return Limit(key, value, seen.get(value), at_next, n_estimates, budget, peak_by_batch=polynomials)


def max_batch(spec: Spec, budget: Budget) -> Limit:
    """The largest ``batch_size`` that fits ``budget`` (other keys as in the spec)."""
    return _limit(spec, budget, "batch_size")


def max_seq(spec: Spec, budget: Budget) -> Limit:
    """The largest ``seq_len`` that fits (an encoder-decoder's target follows unless target_len is set)."""
    _check_seq_is_free(spec, "max-seq")
    limit = _limit(spec, budget, "seq_len")
    positions = spec.model.max_position_embeddings
    if positions is not None and limit.value > positions:
        note = f"above the model's max_position_embeddings ({positions:,}): longer inputs need a larger position table"
        return replace(limit, notes=(note,))
    return limit


# -- what would make it fit ------------------------------------------------------------------------


@dataclass(frozen=True)
class Suggestion:
    """One change that makes the spec fit, with the (per-GPU) total it leads to."""

    change: str
    detail: str
    total_bytes: int
    headroom_bytes: int
    parallel: dict[str, Any] | None = None  # the plan's parallel section, for "shard over N GPUs"


PRECISION_NOTES = {
    Precision.amp_bf16: "autocast to bf16 with fp32 master weights (bf16 needs an Ampere-class or newer GPU)",
    Precision.amp_fp16: "autocast to fp16 with fp32 master weights and loss scaling",
    Precision.bf16: "pure bf16 weights, gradients and optimizer states (no fp32 master copy)",
}
OPTIMIZER_NOTES = {
    Optimizer.adamw_8bit: "bitsandbytes 8-bit AdamW: 1-byte states in 2048-element blocks",
    Optimizer.adafactor: "factored second moments (a row and a column vector per matrix), no first moment",
}


def _candidates(spec: Spec, budget: Budget) -> list[tuple[str, str, dict[str, Any]]]:
    """Single workload changes that may reduce memory: (label, why, workload keys)."""
    wl = spec.workload
    training = wl.mode is Mode.train
    out: list[tuple[str, str, dict[str, Any]]] = []
    if training and wl.gradient_checkpointing is not Checkpointing.full:
        why = "keep one input per block and recompute it in backward (about a third more compute)"
        out.append(("gradient_checkpointing: full", why, {"gradient_checkpointing": Checkpointing.full}))
    if wl.attention is Attention.eager:
        why = "fused attention kernels keep no heads x seq^2 score matrices"
        out.append(("attention: sdpa", why, {"attention": Attention.sdpa}))
    if wl.precision is Precision.fp32:
        usable = [p for p in PRECISION_NOTES if budget.bf16 or p not in (Precision.bf16, Precision.amp_bf16)]
        out += [(f"precision: {p.value}", PRECISION_NOTES[p], {"precision": p}) for p in usable]
    optimizer = wl.optimizer or (Optimizer.adamw if training else Optimizer.none)
    if training and optimizer in (Optimizer.adam, Optimizer.adamw):
        out += [(f"optimizer: {o.value}", why, {"optimizer": o}) for o, why in OPTIMIZER_NOTES.items()]
    return out


def suggestions(spec: Spec, budget: Budget) -> list[Suggestion]:
    """The single workload changes that make ``spec`` fit ``budget``, most headroom first
    (:func:`vramcalc.planning_fit.check_on` adds "shard over N GPUs")."""
    found = []
    for change, why, keys in _candidates(spec, budget):
        try:
            changed = with_workload(spec, **keys)
        except SpecError:  # a change the spec's other keys do not allow is not suggested
            continue
        total = estimate_on(changed, budget).total_bytes
        if total <= budget.available_bytes:
            found.append(Suggestion(change, why, total, budget.available_bytes - total))
    smaller = _smaller_batch(spec, budget)
    if smaller is not None:
        found.append(smaller)
    return best_first(found)


def best_first(found: list[Suggestion]) -> list[Suggestion]:
    """Least total (most headroom) first; ties by the change's text."""
    return sorted(found, key=lambda s: (s.total_bytes, s.change))


def _largest_divisor_at_most(n: int, k: int) -> int:
    divisors = set()
    for i in range(1, math.isqrt(n) + 1):
        if n % i == 0:
            divisors |= {i, n // i}
    return max(d for d in divisors if d <= k)


def _smaller_batch(spec: Spec, budget: Budget) -> Suggestion | None:
    """The largest divisor of the batch that fits, with accumulation steps keeping the effective batch.

    Gradient accumulation keeps the gradients allocated between micro-batches, so the total is
    re-computed with param-sized gradients alive in every phase (:func:`accumulation_total`)."""
    batch = spec.workload.batch_size
    limit = max_batch(spec, budget)
    if not 0 < limit.value < batch:
        return None
    micro = _largest_divisor_at_most(batch, limit.value)
    steps = batch // micro
    result = estimate_on(with_workload(spec, batch_size=micro), budget)
    if spec.workload.mode is not Mode.train:
        change, why = f"batch_size: {micro}", f"runs the {batch} samples as {steps} batches"
        total = result.total_bytes
    else:
        change = f"batch_size: {micro} with {steps} gradient accumulation steps"
        why = f"keeps the effective batch of {batch}; gradients stay allocated between micro-batches"
        total = accumulation_total(result, spec)
    if total > budget.available_bytes:
        return None
    why += f"; the largest batch that fits is {limit.value}"
    return Suggestion(change, why, total, budget.available_bytes - total)


def accumulation_total(result: Estimate, spec: Spec) -> int:
    """Total bytes of a step under gradient accumulation: every phase also holds the gradients
    (``component_peaks['gradients']``), which ``zero_grad`` only frees after the optimizer step."""
    grads = result.component_peaks["gradients"]
    comps = result.phase_components
    peak = max(total - comps[name]["gradients"] + grads for name, total in result.phases.items())
    reserve = spec.overhead.allocator_reserve
    fraction = DEFAULT_ALLOCATOR_RESERVE if reserve is None else reserve
    return peak + result.overhead["cuda_context"] + math.ceil(peak * fraction)


# -- sweeps --------------------------------------------------------------------------------------------

#: Most grid points one sweep computes: a few seconds on the symbolic path, about two minutes off it.
MAX_SWEEP_POINTS = 1_000_000


@dataclass(frozen=True)
class Sweep:
    """Totals over a grid of batch sizes x sequence lengths (row-major: batch outer)."""

    name: str
    batch_sizes: list[int]
    seq_lens: list[int | None]
    totals: list[int]
    budget: Budget | None

    def points(self) -> list[tuple[int, int | None, int]]:
        """(batch_size, seq_len, total_bytes) for every grid point."""
        pairs = [(b, s) for b in self.batch_sizes for s in self.seq_lens]
        return [(b, s, total) for (b, s), total in zip(pairs, self.totals, strict=True)]


def parse_values(text: str, what: str) -> list[int]:
    """'1,2,4,8k' -> [1, 2, 4, 8000]: counts in 1..10^12, sorted, duplicates dropped."""
    values = set()
    for item in text.split(","):
        value = parse_count(item.strip(), what)
        if not 1 <= value <= MAX_SPEC_COUNT:
            raise SpecError(f"{what}: {item.strip()!r} is outside 1..{MAX_SPEC_COUNT:,}")
        values.add(value)
    return sorted(values)


def grid_totals(
    spec: Spec, batch_sizes: Sequence[int], seqs: Sequence[int | None], *, hopper_or_newer: bool
) -> list[int]:
    """``total_bytes`` at every (batch, seq) pair, batch outer; a ``None`` seq keeps the spec's.

    Each sequence length is prepared once (:class:`vramcalc.batch_totals.BatchTotals`: the estimate
    on a symbolic batch size) and every batch size is evaluated from it: the same integers as
    ``vramcalc estimate`` at each point (tests/test_batch_totals.py), without re-running the formulas
    (benchmarks/planning_speed.py measures the rate and profiles where the time goes)."""
    columns = []
    for seq in seqs:
        at_seq = spec if seq is None else with_workload(spec, seq_len=seq)
        total_at = BatchTotals.of(at_seq, hopper_or_newer=hopper_or_newer)
        columns.append([total_at(batch) for batch in batch_sizes])
    return [column[i] for i in range(len(batch_sizes)) for column in columns]


def sweep(spec: Spec, batch_sizes: list[int], seq_lens: list[int] | None, budget: Budget | None) -> Sweep:
    """Totals at every (batch, seq) pair; ``seq_lens`` None keeps the spec's (or a vision model's) length."""
    if seq_lens:
        _check_seq_is_free(spec, "--seq-len")
    seqs: list[int | None] = list(seq_lens) if seq_lens else [None]
    if len(batch_sizes) * len(seqs) > MAX_SWEEP_POINTS:
        raise SpecError(f"sweep: {len(batch_sizes) * len(seqs):,} points; at most {MAX_SWEEP_POINTS:,} per sweep")
    hopper = budget.hopper_or_newer if budget else True
    totals = grid_totals(spec, batch_sizes, seqs, hopper_or_newer=hopper)
    return Sweep(spec.name or "unnamed", batch_sizes, seqs, totals, budget)
