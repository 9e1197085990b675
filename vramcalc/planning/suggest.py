"""What would make a spec fit a card: single workload changes and a smaller batch with gradient
accumulation, best first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from vramcalc.choices import Attention, Checkpointing, Mode, Optimizer, Precision
from vramcalc.core.estimate import DEFAULT_ALLOCATOR_RESERVE, Estimate
from vramcalc.errors import SpecError
from vramcalc.planning.budget import Budget, estimate_on, fit_of, fit_on
from vramcalc.planning.limits import max_batch, with_workload
from vramcalc.spec.models import Spec


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
    (:func:`vramcalc.planning.fit.check_on` adds "shard over N GPUs")."""
    found = []
    for change, why, keys in _candidates(spec, budget):
        try:
            changed = with_workload(spec, **keys)
        except SpecError:  # a change the spec's other keys do not allow is not suggested
            continue
        verdict = fit_on(changed, budget)
        if verdict.fits:
            found.append(Suggestion(change, why, verdict.needed_bytes, verdict.headroom_bytes))
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
    verdict = fit_of(result, budget)
    if spec.workload.mode is not Mode.train:
        change, why = f"batch_size: {micro}", f"runs the {batch} samples as {steps} batches"
        total = verdict.needed_bytes
    else:
        change = f"batch_size: {micro} with {steps} gradient accumulation steps"
        why = f"keeps the effective batch of {batch}; gradients stay allocated between micro-batches"
        total = accumulation_total(result, spec)
    if total > verdict.available_bytes:
        return None
    why += f"; the largest batch that fits is {limit.value}"
    return Suggestion(change, why, total, verdict.available_bytes - total)


def accumulation_total(result: Estimate, spec: Spec) -> int:
    """Total bytes of a step under gradient accumulation: every phase also holds the gradients
    (``component_peaks['gradients']``), which ``zero_grad`` only frees after the optimizer step."""
    grads = result.component_peaks["gradients"]
    comps = result.phase_components
    peak = max(total - comps[name]["gradients"] + grads for name, total in result.phases.items())
    reserve = spec.overhead.allocator_reserve
    fraction = DEFAULT_ALLOCATOR_RESERVE if reserve is None else reserve
    return peak + result.overhead["cuda_context"] + math.ceil(peak * fraction)
