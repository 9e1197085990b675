"""The largest batch size or sequence length that fits a card (pure: no I/O, neither typer nor rich).

"Fits" is :func:`vramcalc.planning.budget.fit_of`, the verdict every command uses: the estimate's
total against the card's usable memory minus the reserve, or for a vLLM serving spec the KV pool's
sequences against ``batch_size``. The needed bytes are nondecreasing in batch size and sequence
length, so the largest value that fits is found by doubling and then bisection: about 2 log2(n)
estimates (batch sizes of a dense spec come from one estimate on a symbolic batch size).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from vramcalc.errors import SpecError
from vramcalc.planning.batch_totals import BatchTotals
from vramcalc.planning.budget import Budget, fit_on
from vramcalc.spec.load import override_workload
from vramcalc.spec.models import Spec

#: The spec's bound on counts (``PositiveCount`` in spec.py).
MAX_SPEC_COUNT = 10**12
#: Largest batch size or sequence length a search tries: one below that bound, so the value after
#: it can still be estimated.
SEARCH_CAP = MAX_SPEC_COUNT - 1


def with_workload(spec: Spec, **changes: Any) -> Spec:
    """``spec`` with workload keys replaced, validated like the file (:func:`override_workload`)."""
    return override_workload(spec, spec.name or "<spec>", **changes)


def check_seq_is_free(spec: Spec, what: str) -> None:
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
    total_at_next: int | None  # None when the spec is not valid one past the largest value
    n_estimates: int
    budget: Budget
    notes: tuple[str, ...] = ()
    #: What the needed bytes are compared with (:class:`~vramcalc.planning.budget.Fit`): the budget's
    #: available bytes, or for a vLLM serving spec the memory vLLM manages on the card.
    available_bytes: int = 0
    #: How the totals were computed (max-batch on the symbolic path): the allocated peak without the
    #: inputs is the largest of these polynomials in the batch size (int coefficients, constant first).
    peak_by_batch: tuple[tuple[int, ...], ...] = ()


def largest_fitting(
    total_at: Callable[[int], float], available_bytes: int, cap: int = SEARCH_CAP
) -> tuple[int, dict[int, float]]:
    """Largest ``n`` in 1..cap with ``total_at(n) <= available_bytes`` (0 if none) for a
    nondecreasing ``total_at``: doubling brackets it, bisection closes the bracket. Returns the
    value and every total computed (the value after the answer is always among them, below cap)."""
    seen: dict[int, float] = {}

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


def needed_along(spec: Spec, budget: Budget, key: str) -> tuple[Callable[[int], int], int]:
    """The needed bytes of :func:`~vramcalc.planning.budget.fit_of` as a function of ``batch_size`` or
    ``seq_len`` (the other keys as in the spec), and the bytes available for them on the card.

    A dense spec's batch sizes come from one estimate on a symbolic batch size
    (:class:`~vramcalc.planning.batch_totals.BatchTotals`, equal to ``total_bytes``); anything else runs
    the verdict per value (a sequence length can change the model itself: the default position table; the
    verdict adds paged optimizer states to the total under ``paged_states: device``)."""
    probe = fit_on(spec, budget)
    if key == "batch_size" and probe.kv_pool is None and not probe.paged_bytes:
        totals = BatchTotals.of(spec, hopper_or_newer=budget.hopper_or_newer, interconnect=budget.interconnect)
        return totals, probe.available_bytes
    return (lambda n: fit_on(with_workload(spec, **{key: n}), budget).needed_bytes), probe.available_bytes


def _limit(spec: Spec, budget: Budget, key: str) -> Limit:
    needed_at, available = needed_along(spec, budget, key)
    invalid: dict[int, str] = {}

    def needed_or_invalid(n: int) -> float:
        """A length the spec cannot take (a vocabulary derived from ``params`` that a longer position table
        leaves no room for) does not fit, and neither does any longer one: the table only grows."""
        try:
            return needed_at(n)
        except SpecError as exc:
            invalid[n] = str(exc)
            return math.inf

    value, seen = largest_fitting(needed_or_invalid, available)
    at_next = seen[value + 1] if value + 1 in seen else needed_or_invalid(value + 1)
    n_estimates = len(seen) + (value + 1 not in seen) + 1  # and the probe
    polynomials = needed_at.peak if isinstance(needed_at, BatchTotals) else ()
    notes: tuple[str, ...] = ()
    if value + 1 in invalid:
        notes = (f"at {key} {value + 1:,} the spec is not valid: {invalid[value + 1]}",)
    return Limit(
        key,
        value,
        _bytes(seen.get(value)),
        _bytes(at_next),
        n_estimates,
        budget,
        notes,
        peak_by_batch=polynomials,
        available_bytes=available,
    )


def _bytes(needed: float | None) -> int | None:
    """Needed bytes as an int; None where the spec is not valid (or nothing was estimated)."""
    return None if needed is None or needed == math.inf else int(needed)


def max_batch(spec: Spec, budget: Budget) -> Limit:
    """The largest ``batch_size`` that fits ``budget`` (other keys as in the spec)."""
    return _limit(spec, budget, "batch_size")


def max_seq(spec: Spec, budget: Budget) -> Limit:
    """The largest ``seq_len`` that fits (an encoder-decoder's target follows unless target_len is set)."""
    check_seq_is_free(spec, "max-seq")
    limit = _limit(spec, budget, "seq_len")
    positions = spec.model.max_position_embeddings
    if positions is not None and limit.value > positions:
        note = f"above the model's max_position_embeddings ({positions:,}): longer inputs need a larger position table"
        return replace(limit, notes=(note,))
    return limit


# -- what would make it fit ------------------------------------------------------------------------


# -- sweeps --------------------------------------------------------------------------------------------
