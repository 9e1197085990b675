"""Totals over a grid of batch sizes x sequence lengths, each point exactly as ``vramcalc estimate``
would give it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from vramcalc.errors import SpecError
from vramcalc.llm.kvcache import KvPool
from vramcalc.planning.batch_totals import BatchTotals, symbolic_path
from vramcalc.planning.budget import Budget, Fit, estimate_on, fit_of_pool, fit_on
from vramcalc.planning.limits import MAX_SPEC_COUNT, check_seq_is_free, with_workload
from vramcalc.spec.models import Spec
from vramcalc.units import parse_count

#: Most grid points one sweep computes on the symbolic path (batch sizes evaluated from one estimate per
#: sequence length): 1,000,000 take about 6 s as CSV (benchmarks/search_budget.py).
MAX_SWEEP_POINTS = 1_000_000
#: Most grid points of a spec off that path, each a full estimate (2,518 a second for a QLoRA spec in
#: benchmarks/planning_speed.py): about 2 s of CPU.
MAX_ESTIMATED_POINTS = 5_000


@dataclass(frozen=True)
class Sweep:
    """Totals over a grid of batch sizes x sequence lengths (row-major: batch outer)."""

    name: str
    batch_sizes: list[int]
    seq_lens: list[int | None]
    totals: list[int]
    budget: Budget | None
    #: The verdict at each point (:func:`~vramcalc.planning.budget.fit_of`); None without a card.
    verdicts: list[Fit] | None = None

    @property
    def fits(self) -> list[bool] | None:
        """Whether each point fits the card (None without one)."""
        return None if self.verdicts is None else [verdict.fits for verdict in self.verdicts]

    @property
    def serving(self) -> bool:
        """A vLLM serving spec on a card: its points are judged by vLLM's pool, not by their totals."""
        return self.verdicts is not None and any(verdict.kv_pool is not None for verdict in self.verdicts[:1])

    def points(self) -> list[tuple[int, int | None, int]]:
        """(batch_size, seq_len, total_bytes) for every grid point."""
        pairs = [(b, s) for b in self.batch_sizes for s in self.seq_lens]
        return [(b, s, total) for (b, s), total in zip(pairs, self.totals, strict=True)]


def parse_values(values: str | Sequence[int], what: str) -> list[int]:
    """'1,2,4,8k' (a flag's text) or [1, 2, 4, 8000] -> [1, 2, 4, 8000]: counts in 1..10^12, sorted,
    duplicates dropped; at least one."""
    items: Sequence[str | int] = values.split(",") if isinstance(values, str) else values
    if not items:
        raise SpecError(f"{what}: no values")
    found = set()
    for item in items:
        shown = item.strip() if isinstance(item, str) else item
        value = parse_count(shown, what)
        if not 1 <= value <= MAX_SPEC_COUNT:
            raise SpecError(f"{what}: {shown!r} is outside 1..{MAX_SPEC_COUNT:,}")
        found.add(value)
    return sorted(found)


def grid_totals(
    spec: Spec,
    batch_sizes: Sequence[int],
    seqs: Sequence[int | None],
    *,
    hopper_or_newer: bool,
    interconnect: str = "nvswitch",
) -> list[int]:
    """``total_bytes`` at every (batch, seq) pair, batch outer; a ``None`` seq keeps the spec's.

    Each sequence length is prepared once (:class:`vramcalc.planning.batch_totals.BatchTotals`: the estimate
    on a symbolic batch size) and every batch size is evaluated from it: the same integers as
    ``vramcalc estimate`` at each point (tests/planning/test_batch_totals.py), without re-running the formulas
    (benchmarks/planning_speed.py measures the rate and profiles where the time goes)."""
    columns = []
    for seq in seqs:
        at_seq = spec if seq is None else with_workload(spec, seq_len=seq)
        total_at = BatchTotals.of(at_seq, hopper_or_newer=hopper_or_newer, interconnect=interconnect)
        columns.append([total_at(batch) for batch in batch_sizes])
    return [column[i] for i in range(len(batch_sizes)) for column in columns]


def sweep(
    spec: Spec, batch_sizes: str | Sequence[int], seq_lens: str | Sequence[int] | None, budget: Budget | None
) -> Sweep:
    """Totals at every (batch, seq) pair, as ``vramcalc sweep`` and :func:`vramcalc.sweep` give them: the
    values as counts or as the flags' text (:func:`parse_values`); ``seq_lens`` None (or empty) keeps the
    spec's (or a vision model's) length."""
    lengths = parse_values(seq_lens, "--seq-len") if seq_lens else None
    batches = parse_values(batch_sizes, "--batch-size")
    if lengths:
        check_seq_is_free(spec, "--seq-len")
    seqs: list[int | None] = list(lengths) if lengths else [None]
    points = len(batches) * len(seqs)
    if points > MAX_SWEEP_POINTS:
        raise SpecError(f"sweep: {points:,} points; at most {MAX_SWEEP_POINTS:,} per sweep")
    if points > MAX_ESTIMATED_POINTS and not symbolic_path(spec):
        raise SpecError(
            f"sweep: {points:,} points; at most {MAX_ESTIMATED_POINTS:,} for this spec, whose every point is a "
            "full estimate (mixed precision, a parallel section, LLM keys, training techniques or a ResNet)"
        )
    hopper, link = (budget.hopper_or_newer, budget.interconnect) if budget else (True, "nvswitch")
    totals = grid_totals(spec, batches, seqs, hopper_or_newer=hopper, interconnect=link)
    verdicts = grid_verdicts(spec, batches, seqs, totals, budget)
    return Sweep(spec.name or "unnamed", batches, seqs, totals, budget, verdicts)


def grid_verdicts(
    spec: Spec, batch_sizes: Sequence[int], seqs: Sequence[int | None], totals: list[int], budget: Budget | None
) -> list[Fit] | None:
    """The verdict at every grid point (batch outer), None without a card. For a training or plain
    inference spec it is ``total_bytes`` against the budget; a vLLM serving spec runs the verdict per
    point (its KV pool, not its total, decides)."""
    if budget is None:
        return None
    probe = fit_on(spec, budget)
    if probe.kv_pool is None:  # paged optimizer states the verdict counts do not depend on batch or length
        paged = probe.paged_bytes
        return [Fit(total + paged, probe.available_bytes, paged_bytes=paged) for total in totals]
    columns = []
    for seq in seqs:  # one estimate per length: the pool's profile and per-sequence KV do not depend on the batch
        pool = _kv_pool(spec if seq is None else with_workload(spec, seq_len=seq), budget)
        columns.append([fit_of_pool(replace(pool, kv_bytes=b * pool.bytes_per_sequence), budget) for b in batch_sizes])
    return [column[i] for i in range(len(batch_sizes)) for column in columns]


def _kv_pool(spec: Spec, budget: Budget) -> KvPool:
    result = estimate_on(spec, budget)
    assert result.llm is not None and result.llm.kv_pool is not None  # a serving spec at every length
    return result.llm.kv_pool
