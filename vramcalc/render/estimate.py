"""Presentation: rich tables and the ``--json`` document. The only place bytes become "GiB" text."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from vramcalc.core.estimate import COMPONENTS, Estimate
from vramcalc.render.text import LABELS, gib
from vramcalc.units import GB

if TYPE_CHECKING:  # the catalog and NVML modules load only when a card is named
    from vramcalc.hardware.catalog import GPU

BAR_WIDTH = 24


def _bar(n_bytes: int, total: int) -> str:
    filled = round(BAR_WIDTH * n_bytes / total) if total else 0
    return "█" * filled + "·" * (BAR_WIDTH - filled)


def estimate_dict(result: Estimate, gpu: GPU | None = None) -> dict[str, Any]:
    """The ``--json`` document: int bytes, stable keys (a public contract)."""
    doc: dict[str, Any] = {
        "name": result.name,
        "params": result.params,
        "mode": result.mode,
        "peak_phase": result.peak_phase,
        "components": dict(result.components),
        "component_peaks": dict(result.component_peaks),
        "peak_allocated_bytes": result.peak_allocated_bytes,
        "overhead": dict(result.overhead),
        "total_bytes": result.total_bytes,
        "phases": dict(result.phases),
        "assumptions": list(result.assumptions),
    }
    if gpu is not None:
        doc["gpu"] = {
            "id": gpu.id,
            "name": gpu.name,
            "usable_bytes": gpu.usable_bytes,
            "usable_basis": usable_basis(gpu),
            "headroom_bytes": gpu.usable_bytes - result.total_bytes,
            "fits": result.total_bytes <= gpu.usable_bytes,
        }
    from vramcalc.render.llm import llm_dict

    doc.update(llm_dict(result, gpu))  # KV cache, capacity, trainable/active params
    from vramcalc.render.plan import parallel_dict

    doc.update(parallel_dict(result))  # per_rank, host_bytes, parallel
    return doc


def usable_basis(gpu: GPU) -> str:
    from vramcalc.hardware.local import LocalGPU

    if isinstance(gpu, LocalGPU):
        return gpu.basis
    if gpu.driver_total_mib:
        return f"driver total {gpu.driver_total_mib:,} MiB (nvidia-smi)"
    unit = "GiB" if gpu.capacity_is_binary else "GB"
    return f"nominal {gpu.capacity:g} {gpu.capacity_unit} read as {unit} (driver total not in catalog)"


def render_estimate(result: Estimate, console: Console, gpu: GPU | None = None) -> None:
    """Component table (at the peak and each component's own maximum), phases, overhead, verdict."""
    peak = result.peak_allocated_bytes
    per_gpu = f", per GPU of {result.parallel.plan.gpus}" if result.parallel and result.parallel.plan.gpus > 1 else ""
    title = f"{escape(result.name)}: {result.params:,} parameters, {result.mode}{per_gpu}"
    table = Table(title=title, title_justify="left")
    table.add_column("component")
    table.add_column("at peak GiB", justify="right")
    table.add_column("own max GiB", justify="right")
    table.add_column(f"share of peak ({result.peak_phase})")
    for key in COMPONENTS:
        at_peak, own = result.components[key], result.component_peaks[key]
        if at_peak == 0 and own == 0:
            continue
        table.add_row(LABELS[key], gib(at_peak), gib(own), _bar(at_peak, peak))
    table.add_section()
    table.add_row("[bold]peak allocated[/]", f"[bold]{gib(peak)}[/]", "", "max_memory_allocated()")
    for key, value in result.overhead.items():
        table.add_row(f"+ {LABELS[key]}", gib(value), "", "outside the allocator")
    table.add_row("[bold]total[/]", f"[bold]{gib(result.total_bytes)}[/]", "", f"{result.total_bytes / GB:,.2f} GB")
    console.print(table)
    phases = ", ".join(f"{name} {gib(value)} GiB" for name, value in result.phases.items())
    console.print(f"peak phase: [bold]{result.peak_phase}[/] (phases: {phases})")
    if result.component_peaks["gradients"] > result.components["gradients"]:
        console.print(
            f"note: gradients are {gib(result.component_peaks['gradients'])} GiB once allocated; "
            f"at the {result.peak_phase} peak only {gib(result.components['gradients'])} GiB of them exist."
        )
    if result.llm is not None:
        from vramcalc.render.llm import render_llm

        render_llm(result, console, gpu)
    if result.parallel is not None:
        from vramcalc.render.plan import render_parallel

        render_parallel(result, console)
    if result.assumptions:
        console.print("assumptions: " + escape("; ".join(result.assumptions)))
    if gpu is not None:
        render_headroom(result, gpu, console)


def render_headroom(result: Estimate, gpu: GPU, console: Console) -> None:
    headroom = gpu.usable_bytes - result.total_bytes
    verdict = "[green]fits[/]" if headroom >= 0 else "[red]does not fit[/]"
    console.print(
        f"{gpu.name}: {gib(gpu.usable_bytes)} GiB usable ({usable_basis(gpu)}); "
        f"needs {gib(result.total_bytes)} GiB -> {verdict}, headroom {gib(headroom)} GiB"
    )
