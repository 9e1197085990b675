"""Presentation for `vramcalc gpus` and `vramcalc bandwidth`: rich tables, and the ``gpus --json`` entries
(``bandwidth --json`` is :class:`vramcalc.results.bandwidth.BandwidthResult`).

GB/s, GB and TB/s here are decimal (10^9, 10^12); GiB is 2^30. Capacity is shown as the vendor
states it ("80 GB") and as GiB of DRAM, each labelled.
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from vramcalc.hardware.bandwidth import Report
from vramcalc.hardware.catalog import GPU
from vramcalc.hardware.memory_bus import GPUZ_CLOCK_DIVISOR, NVIDIA_SMI_CLOCK_DIVISOR, MemoryBus
from vramcalc.hardware.weights import ROUTING_ASSUMPTION
from vramcalc.render.text import print_wrapped, table_width
from vramcalc.units import GB, KB, MB, GiB, KiB, MiB

GPUS_CAPTION = (
    "memory: capacity as the vendor states it; GiB: the DRAM behind it (vendor GB read as GiB where the chips "
    "are binary). Gbps: per-pin data rate. GB/s = 10^9 B/s: the vendor's figure; computed = Gbps x bus bits / 8, "
    "* where it differs from the vendor's by more than 1 % (vendor rounding). FP16/FP8: dense tensor TFLOPS "
    "(no sparsity). NVLink in GB/s. Full names and sources: --json."
)


def gb_s(bytes_per_s: float, digits: int = 1) -> str:
    return f"{bytes_per_s / GB:,.{digits}f} GB/s"


def duration(seconds: float) -> str:
    """Seconds as '0.11 µs', '41.79 ms' or '2.22 s'."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:,.2f} µs"
    return f"{seconds * 1e3:,.2f} ms" if seconds < 1 else f"{seconds:,.2f} s"


def size(n_bytes: int) -> str:
    """Bytes in the largest decimal unit below the value, with its binary twin: '140.00 GB = 130.39 GiB'."""
    for dec, binary, name in ((GB, GiB, "G"), (MB, MiB, "M"), (KB, KiB, "K")):
        if n_bytes >= dec:
            return f"{n_bytes / dec:,.2f} {name}B = {n_bytes / binary:,.2f} {name}iB"
    return f"{n_bytes:,} bytes"


def host_link(gpu: GPU) -> str:
    """'PCIe4 x16, NVLink 600' (NVLink in GB/s), or '-'."""
    link = gpu.host_link
    parts = [f"PCIe{link.pcie_gen} x{link.pcie_lanes}"] if link.pcie_gen and link.pcie_lanes else []
    if link.nvlink_gb_s:
        parts.append(f"NVLink {link.nvlink_gb_s:g}")
    return ", ".join(parts) or "-"


def _tflops(value: float | None) -> str:
    return f"{value:,g}" if value else "-"


#: Columns of the catalog table, and the order they are left out in when the console is too narrow.
GPU_COLUMNS = ("memory", "GiB", "type", "bus bit", "Gbps", "GB/s", "computed", "FP16", "FP8", "host link")
#: The narrowest the wrapped host link column gets ("PCIe4 x16,").
HOST_LINK_MIN = 10
DROP_ORDER = ("host link", "computed", "FP8", "bus bit", "GiB", "Gbps", "type")


def _gpu_cells(gpu: GPU) -> dict[str, str]:
    computed = f"{gpu.computed_bandwidth_bytes_per_s / GB:,.1f}" + ("*" if gpu.bandwidth_differs else "")
    return {
        "memory": f"{gpu.capacity:g} {gpu.capacity_unit}",
        "GiB": f"{gpu.capacity_bytes / GiB:,.2f}",
        "type": gpu.memory_type,
        "bus bit": f"{gpu.bus_width_bits:,}",
        "Gbps": f"{gpu.data_rate_gbps:g}",
        "GB/s": f"{gpu.bandwidth_gb_s:,g}",
        "computed": computed,
        "FP16": _tflops(gpu.fp16_tflops_dense),
        "FP8": _tflops(gpu.fp8_tflops_dense),
        "host link": host_link(gpu),
    }


def _gpus_table(gpus: list[GPU], columns: tuple[str, ...], caption: str) -> Table:
    table = Table(
        title=f"{len(gpus)} GPUs",
        title_justify="left",
        caption=caption,
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    table.add_column("id", no_wrap=True)
    for header in columns:
        justify = "left" if header in ("type", "host link") else "right"
        wraps = header == "host link"  # wraps at its spaces, down to HOST_LINK_MIN characters
        table.add_column(header, justify=justify, no_wrap=not wraps, min_width=HOST_LINK_MIN if wraps else None)  # type: ignore[arg-type]
    for gpu in gpus:
        cells = _gpu_cells(gpu)
        table.add_row(gpu.id, *(cells[header] for header in columns))
    return table


def render_gpus(gpus: list[GPU], console: Console, *, wide: bool = False) -> None:
    """The catalog as one table, one row per entry (names and sources are in ``--json``). Columns are
    left out, in :data:`DROP_ORDER`, until the table fits the console; ``wide`` keeps every column,
    however wide the table."""
    columns: tuple[str, ...] = GPU_COLUMNS
    table = _gpus_table(gpus, columns, GPUS_CAPTION)
    if wide:
        console.width = max(console.width, table_width(table, console, natural=True))
    dropped: list[str] = []

    def narrowest() -> int:  # every column at its natural width but the host link, which wraps
        links = [len(host_link(gpu)) for gpu in gpus] if "host link" in columns else []
        return table_width(table, console, natural=True) - max(0, max(links, default=0) - HOST_LINK_MIN)

    while narrowest() > console.width and len(dropped) < len(DROP_ORDER):
        dropped.append(DROP_ORDER[len(dropped)])
        columns = tuple(header for header in GPU_COLUMNS if header not in dropped)
        shown = ", ".join(header for header in GPU_COLUMNS if header in dropped)
        caption = f"{GPUS_CAPTION} Left out at this width: {shown} (--wide shows every column)."
        table = _gpus_table(gpus, columns, caption)
    console.print(table)


def gpu_dict(gpu: GPU) -> dict[str, Any]:
    """One catalog entry for ``gpus --json``: the YAML fields plus int-byte figures (the free-memory
    reading of ``--gpu local`` only when there is one)."""
    reading = {"free_bytes", "free_reading"} if gpu.free_bytes is None else set()
    doc = gpu.model_dump(mode="json", exclude=reading)
    doc.update(
        capacity_bytes=gpu.capacity_bytes,
        usable_bytes=gpu.usable_bytes,
        bandwidth_bytes_per_s=gpu.bandwidth_bytes_per_s,
        computed_bandwidth_bytes_per_s=gpu.computed_bandwidth_bytes_per_s,
        bandwidth_differs=gpu.bandwidth_differs,
    )
    return doc


def _data_rate_text(bus: MemoryBus) -> str:
    if bus.memory_clock_mhz is None:
        return f"{bus.data_rate_gbps:g} Gbps per pin"
    assert bus.memory_type is not None
    if bus.clock_source == "gpuz":
        divisor, tool = GPUZ_CLOCK_DIVISOR[bus.memory_type], "GPU-Z"
    else:
        divisor, tool = NVIDIA_SMI_CLOCK_DIVISOR, "nvidia-smi"
    return f"{bus.memory_clock_mhz:g} MHz ({tool}) x {divisor} = {bus.data_rate_gbps:g} Gbps per pin"


def _official_text(bus: MemoryBus) -> str:
    if bus.official_bytes_per_s is None:
        return "none (custom card): timings use the computed figure"
    gap = bus.bandwidth_gap or 0.0
    if bus.bandwidth_differs:
        return (
            f"{gb_s(bus.official_bytes_per_s)} (vendor); computed {gb_s(bus.computed_bytes_per_s)} differs "
            f"by {gap:+.1%} (vendor rounding): timings use the official figure"
        )
    return f"{gb_s(bus.official_bytes_per_s)} (vendor); computed is within 1 % ({gap:+.2%})"


def _card_rows(report: Report, table: Table) -> None:
    bus, gpu = report.bus, report.gpu
    table.add_row("card", f"{report.name} ({report.card_id})" if report.card_id is not None else report.name)
    if gpu is not None:
        table.add_row(
            "memory",
            f"{gpu.capacity_label} {bus.memory_type} (as the vendor states it) = "
            f"{gpu.capacity_bytes / GiB:,.2f} GiB of DRAM",
        )
    elif report.sized is not None:
        kind = f", {bus.memory_type}" if bus.memory_type else ""
        table.add_row("memory", f"{report.sized.size_text} usable (as given){kind}")
    elif bus.memory_type:
        table.add_row("memory", bus.memory_type)
    table.add_row("bus width", f"{bus.bus_width_bits:,} bit")
    table.add_row("data rate", _data_rate_text(bus))
    table.add_row(
        "bandwidth",
        f"{bus.data_rate_gbps:g} Gbps x {bus.bus_width_bits:,} bit / 8 = {gb_s(bus.computed_bytes_per_s)}",
    )
    table.add_row("official", _official_text(bus))


def _weight_rows(report: Report, table: Table) -> None:
    assert report.weights is not None and report.streaming is not None
    weights, stream = report.weights, report.streaming
    table.add_row("", "")
    table.add_row("weights", f"{size(weights.weights_bytes)} ({weights.origin})")
    moe = weights.experts
    if moe is not None:
        table.add_row(
            "experts",
            f"{moe.experts} routed per layer x {moe.moe_layers} MoE layers, top-{moe.top_k} per token; "
            f"{weights.active_params:,} parameters active per token",
        )
        table.add_row(
            "routing",
            f"batch {report.batch} reads E x (1 - (1 - k/E)^B) = {moe.expected_experts(report.batch):,.3f} distinct "
            f"experts per layer (assuming {ROUTING_ASSUMPTION}; all {moe.experts} as B grows): "
            f"{size(report.streamed_weights_bytes or 0)} of weights per step",
        )
    read = "active weights: " if moe is not None else ""
    table.add_row(
        "weight stream",
        f"{read}{duration(stream.weight_stream_s)} per decode step at {gb_s(stream.bytes_per_s)} "
        f"-> at most {stream.tokens_per_s_upper_bound:,.2f} tokens/s (batch 1)",
    )
    table.add_row(
        f"at {report.efficiency:.0%} of peak",
        f"{duration(stream.realistic_s)} -> {stream.tokens_per_s_realistic:,.2f} tokens/s (batch 1)",
    )
    if report.kv is not None and report.decode_step_s is not None:
        kv = report.kv
        table.add_row(
            "KV cache",
            f"{kv.bytes_per_token:,} bytes per token; {kv.context_tokens:,} tokens x batch "
            f"{kv.batch} = {size(kv.read_bytes_per_step)} read per step",
        )
        table.add_row(
            "decode step",
            f"{'streamed weights' if moe is not None else 'weights'} + KV cache: "
            f"{duration(report.decode_step_s)} at peak -> "
            f"{kv.batch / report.decode_step_s:,.2f} tokens/s (batch {kv.batch})",
        )
    if report.host is not None:
        host = report.host
        table.add_row(
            "host -> device",
            f"PCIe {host.pcie_gen}.0 x{host.pcie_lanes} {gb_s(host.bytes_per_s, 3)} per "
            f"direction: {duration(host.seconds)}; at {host.efficiency:.0%}: "
            f"{duration(host.realistic_s)}",
        )
    if report.roofline is not None:
        roof = report.roofline
        relation = "<" if roof.bound == "memory" else ">="
        table.add_row(
            f"roofline (batch {roof.batch})",
            f"{roof.intensity:,.1f} FLOP/byte {relation} ridge {roof.ridge:,.1f} FLOP/byte "
            f"({roof.flops_per_s / 1e12:,g} TFLOPS {roof.precision} / {gb_s(roof.bytes_per_s)}): "
            f"{roof.bound}-bound; crossover at batch {roof.crossover_batch:,.1f} "
            f"(compute-bound from batch {roof.first_compute_bound_batch:,})",
        )


def render_bandwidth(report: Report, console: Console) -> None:
    """Card figures with the formula worked out; weight streaming, host transfer and roofline when given."""
    table = Table(show_header=False, box=None, padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    _card_rows(report, table)
    if report.weights is not None:
        _weight_rows(report, table)
    console.print(table)
    for note in report.notes:
        print_wrapped(console, f"note: {note}")
