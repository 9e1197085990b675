"""Presentation of ``vramcalc compare``: the estimate-vs-measurement table and its JSON document."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from vramcalc.planning.compare import ALLOCATED_PEAK, RESERVED_PEAK, Comparison, Row
from vramcalc.render.text import gib, print_wrapped

ROW_LABELS = {
    "peak_allocated": "peak allocated",
    "peak_reserved": "peak reserved",
    "fragmentation": "fragmentation",
    "cuda_context": "CUDA context",
    "total": "total",
}
#: What each measured figure is, printed under the table.
SOURCES = (
    f"measured: peak allocated = {ALLOCATED_PEAK}; peak reserved = {RESERVED_PEAK}; "
    "fragmentation = reserved - allocated"
)
SMI_SOURCES = (
    "CUDA context = nvidia-smi memory.used - reserved peak (with several GPUs also NCCL's buffers); "
    "total = nvidia-smi memory.used"
)
COUNTER_NOTES = {
    "num_alloc_retries": "times the allocator freed its cache and retried cudaMalloc (memory pressure)",
    "num_ooms": "out-of-memory errors during the run",
}


def _percent(row: Row) -> str:
    error = row.relative_error
    return "n/a" if error is None else f"{error:+.1%}"


def render_comparison(comparison: Comparison, console: Console) -> None:
    """Estimated vs measured GiB per quantity; the gated row says whether it is within tolerance."""
    table = Table(
        title=f"{comparison.name}: estimate vs torch.cuda.memory_stats()", title_justify="left", highlight=False
    )
    table.add_column("quantity")
    table.add_column("estimated GiB", justify="right")
    table.add_column("measured GiB", justify="right")
    table.add_column("difference", justify="right")
    table.add_column("")
    for row in comparison.rows:
        verdict = ""
        if row.gated:
            ok = abs(row.relative_error or 0.0) <= comparison.tolerance
            verdict = f"within {comparison.tolerance:.0%}" if ok else f"off by more than {comparison.tolerance:.0%}"
        label = ROW_LABELS.get(row.key, row.key)
        table.add_row(label, gib(row.estimated_bytes), gib(row.measured_bytes), _percent(row), verdict)
    console.print(table)
    print_wrapped(console, SOURCES)
    if any(row.key == "total" for row in comparison.rows):
        print_wrapped(console, SMI_SOURCES)
    for key, count in comparison.counters.items():
        if count:
            print_wrapped(console, f"note: {key} = {count}: {COUNTER_NOTES.get(key, '')}")
    word = "within" if comparison.within_tolerance else "NOT within"
    print_wrapped(
        console,
        f"peak allocated is {word} the {comparison.tolerance:.0%} tolerance "
        f"(exit {0 if comparison.within_tolerance else 1}); only that row is gated",
    )


def comparison_dict(comparison: Comparison) -> dict[str, Any]:
    """``compare --json``: int bytes, relative errors as fractions (None when nothing was measured)."""
    return {
        "name": comparison.name,
        "tolerance": comparison.tolerance,
        "within_tolerance": comparison.within_tolerance,
        "rows": {
            row.key: {
                "estimated_bytes": row.estimated_bytes,
                "measured_bytes": row.measured_bytes,
                "difference_bytes": row.difference_bytes,
                "relative_error": row.relative_error,
                "gated": row.gated,
            }
            for row in comparison.rows
        },
        "counters": dict(comparison.counters),
    }
