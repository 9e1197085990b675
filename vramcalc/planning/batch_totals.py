"""Totals at many batch sizes from one estimate on a symbolic batch size (sweeps and max-batch).

``BatchTotals.of(spec, hopper_or_newer=...)(b)`` is ``estimate(spec with batch_size b).total_bytes``,
the same integer, without re-validating the spec and re-running the formulas at every ``b``:

* the dense single-GPU phases (:func:`vramcalc.core.dense.phase_candidates`) run once with the batch
  size as a :class:`vramcalc.core.symbolic.Poly`; each candidate moment keeps two expressions in ``b``,
  its allocated bytes and the bytes the allocator reserve applies to (for a fixed sequence length every
  activation is tokens ``b·s`` or scores ``b·heads·s²`` times shape constants);
* per batch size: the first moment with the largest allocated bytes (the one ``estimate`` picks), plus
  the inputs (rounded to the allocator's 512-byte blocks, so computed per point), the CUDA context and
  that moment's allocator reserve, as ``estimate`` adds them.

Specs on other paths (several GPUs, ResNet, the LLM keys), or whose formulas leave polynomials
(:class:`vramcalc.core.symbolic.NotPolynomial`), run the full estimate at every batch size. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vramcalc.choices import Architecture, Precision
from vramcalc.core import activations as act
from vramcalc.core.allocator import weights_rounding_bytes
from vramcalc.core.dense import phase_candidates
from vramcalc.core.phases import phase_total
from vramcalc.core.reserve import ReserveRule
from vramcalc.core.shape import ModelShape
from vramcalc.core.stack import overhead_terms
from vramcalc.core.symbolic import NotPolynomial, Peak, Poly, maximum
from vramcalc.core.workload import DTYPES, ResolvedWorkload, image_elements, input_bytes, workspace_bytes
from vramcalc.families import estimate
from vramcalc.families.resolve import resolve_workload
from vramcalc.spec.load import override_workload
from vramcalc.spec.models import Spec, uses_llm_keys
from vramcalc.spec.techniques import given_techniques

#: A candidate moment: its allocated bytes as polynomials in the batch size, and its long-lived bytes.
Moment = tuple[tuple[tuple[int, ...], ...], int]


@dataclass(frozen=True)
class BatchTotals:
    """``total_bytes`` of ``spec`` as a function of the batch size (call it with an int)."""

    spec: Spec
    hopper_or_newer: bool
    #: Per candidate moment, in the order ``estimate`` compares them: its allocated bytes without the inputs,
    #: the largest of these polynomials in the batch size (coefficients, constant first), and the bytes of it
    #: the allocator reserve does not apply to (its long-lived state, the same at every batch size); empty
    #: when every batch size runs the full estimate.
    moments: tuple[Moment, ...] = ()
    #: The allocated peak without the inputs: the largest of these polynomials in the batch size.
    peak: tuple[tuple[int, ...], ...] = ()
    shape: ModelShape | None = None
    context: int = 0
    reserve: ReserveRule | None = None
    tokens: act.Tokens | None = None  # the batch shape at batch size 1 (sequence and target lengths)
    pixels_per_sample: int = 0  # image elements of one sample (0 for text)
    interconnect: str = "nvswitch"  # the card's, for NCCL's buffers across GPUs (full estimates only)

    @classmethod
    def of(cls, spec: Spec, *, hopper_or_newer: bool, interconnect: str = "nvswitch") -> BatchTotals:
        """Prepare the totals of ``spec`` on a card of that generation (cuBLAS workspace size)."""
        from vramcalc.stacks.transformers import attention_run

        spec = attention_run(spec)  # as the full estimate resolves it
        if not symbolic_path(spec):
            return cls(spec, hopper_or_newer, interconnect=interconnect)
        work = resolve_workload(spec)
        context, reserve, _ = overhead_terms(spec.overhead, work.stack)
        try:
            totals = [(phase_total(m), reserve.kept_of(m)) for m in _symbolic_moments(work, hopper_or_newer)]
            peak = _coefficients(maximum(*(total for total, _ in totals)))
        except NotPolynomial:
            return cls(spec, hopper_or_newer, interconnect=interconnect)
        if not all(isinstance(kept, int) for _, kept in totals):  # long-lived state that grows with the batch
            return cls(spec, hopper_or_newer, interconnect=interconnect)
        moments = _never_dominated(tuple((_coefficients(total), kept) for total, kept in totals))
        one = work.at_batch(1).tokens
        return cls(
            spec,
            hopper_or_newer,
            moments,
            peak,
            work.shape,
            context,
            reserve,
            one,
            image_elements(spec, 1),
            interconnect,
        )

    @property
    def symbolic(self) -> bool:
        """Whether batch sizes are evaluated from the prepared polynomials (else a full estimate each)."""
        return self.shape is not None

    def __call__(self, batch: int) -> int:
        if self.shape is None:
            changed = override_workload(self.spec, self.spec.name or "<spec>", batch_size=batch)
            return estimate(changed, hopper_or_newer=self.hopper_or_newer, interconnect=self.interconnect).total_bytes
        wl, one, reserve = self.spec.workload, self.tokens, self.reserve
        assert one is not None and reserve is not None  # prepared with the shape
        tk = act.Tokens(batch, one.seq, one.target)  # the step's tokens at this batch size
        pixels = batch * self.pixels_per_sample
        inputs = input_bytes(self.shape, tk, wl.mode, pixels, DTYPES[wl.precision].param)
        allocated, kept = -1, 0
        for polynomials, long_lived in self.moments:  # the first of equals, as estimate picks its peak phase
            for coefs in polynomials:
                total = _horner(coefs, batch)
                if total > allocated:
                    allocated, kept = total, long_lived
        allocated += inputs
        return allocated + self.context + reserve.of_base(allocated - kept)


def _coefficients(peak: int | Poly | Peak) -> tuple[tuple[int, ...], ...]:
    """The polynomials of a peak (an int when nothing depends on the batch size) as coefficient tuples."""
    if isinstance(peak, Peak):
        return tuple(member.coefs for member in peak.members)
    return ((peak,),) if isinstance(peak, int) else (peak.coefs,)


def _never_dominated(moments: tuple[Moment, ...]) -> tuple[Moment, ...]:
    """The moments that can be the first largest at some batch size >= 1: a moment is dropped when every one
    of its polynomials is, coefficient by coefficient, at most one of an earlier moment's (a tie goes to
    the earlier one) or below one of a later moment's."""

    def covers(high: tuple[int, ...], low: tuple[int, ...], strictly: bool) -> bool:
        width = max(len(high), len(low))
        high, low = high + (0,) * (width - len(high)), low + (0,) * (width - len(low))
        return all(h >= lo for h, lo in zip(high, low, strict=True)) and (not strictly or high != low)

    def dominates(a: Moment, b: Moment, strictly: bool) -> bool:
        return all(any(covers(high, low, strictly) for high in a[0]) for low in b[0])

    return tuple(
        m
        for j, m in enumerate(moments)
        if not any(dominates(other, m, strictly=i > j) for i, other in enumerate(moments) if i != j)
    )


def _horner(coefs: tuple[int, ...], batch: int) -> int:
    value = 0
    for coef in reversed(coefs):
        value = value * batch + coef
    return value


def symbolic_path(spec: Spec) -> bool:
    """The dense single-GPU path of :func:`vramcalc.core.dense.estimate` (the one that runs
    :func:`~vramcalc.core.dense.phase_candidates`)."""
    mixed = spec.workload.precision in (Precision.mixed_fp16, Precision.mixed_bf16)
    resnet = spec.model.architecture is Architecture.resnet
    techniques = given_techniques(spec.workload)  # estimated per batch size (vramcalc/stacks/techniques.py)
    return spec.parallel is None and not mixed and not resnet and not uses_llm_keys(spec) and not techniques


def _symbolic_moments(work: ResolvedWorkload, hopper_or_newer: bool) -> list[dict[str, Any]]:
    """The step's candidate moments in phase order, every component but the inputs, in a symbolic batch
    size. The inputs are the same tensors in every moment, so leaving them out moves no maximum."""
    base = {
        "parameters": work.n_params * work.dtypes.param,
        "allocator_rounding": weights_rounding_bytes(work.shape, work.dtypes.param),  # a plain dense model
        "workspace": workspace_bytes(work.mode, hopper_or_newer),
    }
    candidates = phase_candidates(work.at_batch(Poly.batch()), base)
    return [moment for moments in candidates.values() for moment in moments]
