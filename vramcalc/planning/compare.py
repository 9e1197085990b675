"""Estimate vs measurement: ``torch.cuda.memory_stats()`` as JSON, and optionally nvidia-smi's figure.

Pure: no typer, no rich. The stats file is JSON (never a pickle): the flat dict
``torch.cuda.memory_stats()`` returns (``"allocated_bytes.all.peak": 123, ...``), or the nested form
of ``torch.cuda.memory_stats_as_nested_dict()``. Only the peaks are read:

* ``allocated_bytes.all.peak``: what ``max_memory_allocated()`` reports, the estimate's
  ``peak_allocated_bytes``;
* ``reserved_bytes.all.peak``: what the caching allocator held from the driver at most, the
  estimate's peak + ``allocator_reserve``. Reserved minus allocated is fragmentation: every block is
  rounded up to 512 B and carved from 2 MiB segments (requests up to 1 MiB) or 20 MiB segments (up to
  10 MiB; larger ones round up to 2 MiB), and a segment's unused tail is reserved, not allocated;
* with nvidia-smi's ``memory.used`` (device-wide, so take it on an otherwise idle card after the peak:
  the reserved pool does not shrink unless ``torch.cuda.empty_cache()`` runs): used minus reserved
  peak is the implied CUDA context (plus cuDNN/NCCL buffers outside PyTorch's allocator).

Only the allocated peak decides the verdict: the reserve and the context are heuristics of the
estimate (a quarter of the transient bytes and 512 MiB by default), shown next to the measurement but
not held to the tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vramcalc.errors import MeasuredStatsError, SpecError
from vramcalc.families.estimate import Estimate
from vramcalc.units import MAX_BYTES, quoted

ALLOCATED_PEAK = "allocated_bytes.all.peak"
RESERVED_PEAK = "reserved_bytes.all.peak"
#: Optional counters shown when present: cudaMalloc retries after freeing the cache, and OOMs.
COUNTERS = ("num_alloc_retries", "num_ooms")
#: A memory_stats() dump is ~10 KB; anything this large is not one.
MAX_STATS_BYTES = 10 * 2**20
DEFAULT_TOLERANCE = 0.10


@dataclass(frozen=True)
class MeasuredStats:
    """The peaks of one ``torch.cuda.memory_stats()`` dump (int bytes) and its retry/OOM counters."""

    peak_allocated_bytes: int
    peak_reserved_bytes: int
    counters: dict[str, int]


@dataclass(frozen=True)
class Row:
    """One compared quantity; ``gated`` rows decide the exit code."""

    key: str
    estimated_bytes: int
    measured_bytes: int
    gated: bool = False

    @property
    def difference_bytes(self) -> int:
        return self.estimated_bytes - self.measured_bytes

    @property
    def relative_error(self) -> float | None:
        """(estimated - measured) / measured; None when nothing was measured."""
        return self.difference_bytes / self.measured_bytes if self.measured_bytes else None


@dataclass(frozen=True)
class Comparison:
    name: str
    tolerance: float
    rows: tuple[Row, ...]
    counters: dict[str, int]

    @property
    def within_tolerance(self) -> bool:
        """True when every gated row is within ``tolerance`` of its measurement."""
        return all(abs(r.relative_error or 0.0) <= self.tolerance for r in self.rows if r.gated)


def load_memory_stats(path: str | Path) -> MeasuredStats:
    """Read and check a memory_stats JSON file (bounded size, nesting and numbers; UTF-8)."""
    from vramcalc.files import read_json

    with _as_stats_error():
        data = read_json(Path(path), MAX_STATS_BYTES, "memory_stats() dumps")
    return memory_stats_from(data, str(path))


def parse_memory_stats(text: str, source: str = "<stats>") -> MeasuredStats:
    """Check the JSON text of ``torch.cuda.memory_stats()`` and take its peaks (int bytes)."""
    from vramcalc.files import parse_json

    with _as_stats_error():
        data = parse_json(text, source)
    return memory_stats_from(data, source)


@contextmanager
def _as_stats_error() -> Iterator[None]:
    try:
        yield
    except SpecError as exc:
        raise MeasuredStatsError(str(exc)) from None


def memory_stats_from(data: Any, source: str) -> MeasuredStats:
    """The peaks (int bytes) and counters of a decoded ``torch.cuda.memory_stats()`` dump."""
    if not isinstance(data, dict):
        raise MeasuredStatsError(
            f"{source}: expected the JSON object torch.cuda.memory_stats() returns, got {type(data).__name__}"
        )
    allocated = _byte_count(data, ALLOCATED_PEAK, source)
    reserved = _byte_count(data, RESERVED_PEAK, source)
    if allocated == 0:
        raise MeasuredStatsError(f"{source}: {ALLOCATED_PEAK}: is 0 (dump the stats after the training steps ran)")
    if reserved < allocated:
        raise MeasuredStatsError(
            f"{source}: {RESERVED_PEAK}: {reserved:,} is below {ALLOCATED_PEAK} ({allocated:,}); "
            "the allocator never holds less than it hands out"
        )
    counters = {key: _byte_count(data, key, source) for key in COUNTERS if _lookup(data, key) is not None}
    return MeasuredStats(peak_allocated_bytes=allocated, peak_reserved_bytes=reserved, counters=counters)


def _lookup(data: dict[str, Any], key: str) -> Any:
    """The flat key, else the nested path (memory_stats_as_nested_dict): a.b.c -> data[a][b][c]."""
    if key in data:
        return data[key]
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _byte_count(data: dict[str, Any], key: str, source: str) -> int:
    """A whole number in [0, MAX_BYTES] (the counters too: a count is never larger than the bytes)."""
    value = _lookup(data, key)
    if value is None:
        raise MeasuredStatsError(
            f"{source}: {key}: missing (dump torch.cuda.memory_stats(); see 'vramcalc compare --help')"
        )
    if isinstance(value, bool) or not isinstance(value, int):
        raise MeasuredStatsError(f"{source}: {key}: must be a whole number, got {quoted(value)}")
    if not 0 <= value <= MAX_BYTES:
        raise MeasuredStatsError(f"{source}: {key}: {quoted(value)} is out of range (0 to 2**60 bytes, 1 EiB)")
    return value


def compare(
    estimate: Estimate,
    measured: MeasuredStats,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    nvidia_smi_used_bytes: int | None = None,
) -> Comparison:
    """Estimated vs measured peaks (allocated gated by ``tolerance``), fragmentation and, given
    nvidia-smi's used bytes, the implied CUDA context (used - reserved peak) and the total."""
    if not math.isfinite(tolerance) or tolerance < 0:
        raise MeasuredStatsError(f"--tolerance: must be a non-negative fraction, got {tolerance!r}")
    reserve = estimate.overhead.get("allocator_reserve", 0)
    measured_gap = measured.peak_reserved_bytes - measured.peak_allocated_bytes
    rows = [
        Row("peak_allocated", estimate.peak_allocated_bytes, measured.peak_allocated_bytes, gated=True),
        Row("peak_reserved", estimate.peak_allocated_bytes + reserve, measured.peak_reserved_bytes),
        Row("fragmentation", reserve, measured_gap),
    ]
    if nvidia_smi_used_bytes is not None:
        if nvidia_smi_used_bytes < measured.peak_reserved_bytes:
            raise MeasuredStatsError(
                f"--nvidia-smi-used: {nvidia_smi_used_bytes} bytes is below {RESERVED_PEAK} "
                f"({measured.peak_reserved_bytes}); take it on this run's card, after the peak"
            )
        context = nvidia_smi_used_bytes - measured.peak_reserved_bytes
        outside = sum(bytes_ for key, bytes_ in estimate.overhead.items() if key != "allocator_reserve")
        rows.append(Row("cuda_context", outside, context))  # with several GPUs NCCL's buffers too
        rows.append(Row("total", estimate.total_bytes, nvidia_smi_used_bytes))
    return Comparison(name=estimate.name, tolerance=tolerance, rows=tuple(rows), counters=dict(measured.counters))
