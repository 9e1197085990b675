"""Catalog and bandwidth commands (`vramcalc gpus`, `vramcalc bandwidth`).

Imported when the CLI starts, so the top level imports only typer, typing and enum (which typer has
already loaded); the catalog, the bandwidth maths and rich tables are imported inside the commands
(the shared options of :mod:`vramcalc.cli._common` are loaded at start-up anyway).
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from vramcalc.choices import Mode
from vramcalc.cli._common import GpuOpt, GpusFileOpt, ModelOpt
from vramcalc.cli.workload import workload_options

if TYPE_CHECKING:
    from vramcalc.cli.workload import WorkloadArgs

WEIGHTS = "Weights (pick one: SPEC or --model, --params, --weights)"
CUSTOM = "Custom card (instead of --gpu)"


class SortKey(StrEnum):
    memory = "memory"
    bandwidth = "bandwidth"


class ClockSource(StrEnum):
    gpuz = "gpuz"
    nvidia_smi = "nvidia-smi"


JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (int bytes) instead of a table.")]


def gpus(
    *,
    vendor: Annotated[str | None, typer.Option(help="Only this vendor: nvidia, amd, intel or apple.")] = None,
    memory_type: Annotated[str | None, typer.Option(help="Only this memory type, e.g. HBM3e or GDDR6X.")] = None,
    min_memory: Annotated[
        str | None, typer.Option(help="Only cards with at least this capacity (with a unit: 40GB, 48GiB).")
    ] = None,
    sort: Annotated[SortKey | None, typer.Option(help="Sort by capacity or bandwidth, largest first.")] = None,
    gpus_file: GpusFileOpt = None,
    json_out: JsonOpt = False,
    wide: Annotated[
        bool, typer.Option("--wide", help="Show every column, even when the table is wider than the terminal.")
    ] = False,
) -> None:
    """List the GPU catalog (with --gpus-file, your cards too): memory, bus width, data rate, bandwidth,
    TFLOPS, host link."""
    from vramcalc.cli._common import print_json, stdout, user_errors
    from vramcalc.hardware.catalog import select_gpus
    from vramcalc.hardware.lookup import active_catalog
    from vramcalc.render.gpus import gpu_dict, render_gpus

    with user_errors():
        rows = select_gpus(
            active_catalog().gpus,
            vendor=vendor,
            memory_type=memory_type,
            min_memory=min_memory,
            sort=sort.value if sort else None,
        )
    if json_out:
        print_json([gpu_dict(gpu) for gpu in rows])
    else:
        render_gpus(rows, stdout(), wide=wide)


@workload_options(Mode.inference)
def bandwidth(
    spec: Annotated[
        str | None,
        typer.Argument(metavar="SPEC", help="YAML spec: its parameters are the weights.", show_default=False),
    ] = None,
    *,
    gpu: GpuOpt = None,
    gpus_file: GpusFileOpt = None,
    model: ModelOpt = None,
    params: Annotated[str | None, typer.Option(help="Parameter count, e.g. 70B.", rich_help_panel=WEIGHTS)] = None,
    dtype: Annotated[
        str | None,
        typer.Option(
            help="Weight dtype: fp32, bf16, fp16, fp8, int8, int4. With --params the default is fp16; with "
            "SPEC or --model fp32, bf16 and fp16 set workload.precision, the others workload.quantization "
            "(its linear layers at 1 or 1/2 byte per parameter).",
            rich_help_panel=WEIGHTS,
        ),
    ] = None,
    weights: Annotated[str | None, typer.Option(help="Weight bytes, e.g. 140GB.", rich_help_panel=WEIGHTS)] = None,
    batch: Annotated[
        int | None,
        typer.Option(help="Decode batch: the roofline and the experts a MoE step reads (default: spec's, else 1)."),
    ] = None,
    tensor_parallel: Annotated[
        int | None,
        typer.Option(help="GPUs of tensor parallelism: each streams its share per step.", rich_help_panel=WEIGHTS),
    ] = None,
    efficiency: Annotated[
        str | None, typer.Option(help="Achieved share of peak memory bandwidth (default 85%).")
    ] = None,
    host_efficiency: Annotated[str | None, typer.Option(help="Achieved share of the PCIe rate (default 80%).")] = None,
    memory_type: Annotated[str | None, typer.Option(help="e.g. GDDR6, HBM2e.", rich_help_panel=CUSTOM)] = None,
    memory_clock: Annotated[
        str | None, typer.Option(help="Memory clock with unit, e.g. 1750MHz.", rich_help_panel=CUSTOM)
    ] = None,
    clock_source: Annotated[
        ClockSource | None, typer.Option(help="Tool the clock comes from (default gpuz).", rich_help_panel=CUSTOM)
    ] = None,
    data_rate: Annotated[
        str | None, typer.Option(help="Per-pin data rate, e.g. 21Gbps.", rich_help_panel=CUSTOM)
    ] = None,
    bus_width: Annotated[str | None, typer.Option(help="Bus width in bits, e.g. 256.", rich_help_panel=CUSTOM)] = None,
    json_out: JsonOpt = False,
    workload: WorkloadArgs,
) -> None:
    """Memory bandwidth of a card (data rate x bus width / 8) and the time to stream a model's weights.

    Name a catalog card with --gpu, or describe one with --bus-width and --data-rate (or --memory-type
    and --memory-clock). A capacity as --gpu (48GiB) is a card with no bus: alone it shows the capacity
    and the weights and says what it cannot compute; with the bus flags, they give its bandwidth.
    A memory clock is not the data rate: GPU-Z shows GDDR6 at rate / 8, GDDR6X and GDDR7 at / 16,
    HBM2/HBM2e at / 2; nvidia-smi shows rate / 2. Given weights (SPEC, --params or --weights): the
    weight-streaming floor on a decode step, the tokens/s bound, the host -> device copy time and the
    roofline at --batch.

    Without --gpu or a custom card: the spec's target.gpu. With --model and
    no SPEC, the workload is inference (a decode step) unless --mode or a
    training flag says otherwise.
    """
    from vramcalc.cli._common import notes_to_stderr, print_json, stdout, user_errors
    from vramcalc.hardware import bandwidth as bw
    from vramcalc.planning.stream import select_weights
    from vramcalc.render.gpus import render_bandwidth

    custom = {
        "bus_width": bus_width,
        "mem_type": memory_type,
        "memory_clock": memory_clock,
        "data_rate": data_rate,
        "clock_source": clock_source.value if clock_source else None,
    }
    described = any(value is not None for value in custom.values())
    with user_errors():
        _refuse_repeats(spec, model, workload, dtype=dtype, batch=batch)
    with user_errors(spec or (f"--model {model}" if model else None)):  # a spec error names the file
        weights_of = None
        if spec is not None or model is not None:
            from vramcalc.cli.inputs import load_workload_spec

            weights_of = load_workload_spec(spec, model, workload)[0]
            if gpu is None and not described and weights_of.target is not None:
                gpu = weights_of.target.gpu  # None: select_card asks for --gpu
        label = Path(spec).name if spec is not None else "spec"
        load = select_weights(
            weights_of, params=params, dtype=dtype, weights=weights, tensor_parallel=tensor_parallel, label=label
        )
        if gpu is not None and not described:
            from vramcalc.cli.cards import capacity_card, show_capacity_only

            sized = capacity_card(gpu)
            if sized is not None:
                show_capacity_only(*sized, load, json_out)
                return
        bus, card, note = bw.select_card(gpu, **custom)
        report = bw.analyse(
            bus,
            load,
            gpu=card,
            batch=batch,
            efficiency=bw.parse_efficiency(efficiency, bw.DEFAULT_MEMORY_EFFICIENCY, "efficiency"),
            host_efficiency=bw.parse_efficiency(host_efficiency, bw.DEFAULT_HOST_EFFICIENCY, "host efficiency"),
        )
    if note:
        notes_to_stderr([note])
    if json_out:
        from vramcalc.results.bandwidth import BandwidthResult

        print_json(BandwidthResult.of(report).to_dict())
    else:
        render_bandwidth(report, stdout())


def _refuse_repeats(
    spec: str | None, model: str | None, workload: WorkloadArgs, *, dtype: str | None, batch: int | None
) -> None:
    """Workload flags need SPEC or --model; one that says what another flag of ``bandwidth`` says is refused."""
    from vramcalc.errors import SpecError

    if spec is None and model is None and workload.named:
        from vramcalc.cli.inputs import no_input

        raise no_input(workload)
    if batch is not None and "--batch-size" in workload.named:
        raise SpecError("--batch and --batch-size: give one (both set the decode batch)")
    for flag in ("--precision", "--quantization", "--qlora"):
        if dtype is not None and flag in workload.named:
            raise SpecError(f"--dtype and {flag}: give one (both set the weights' dtype)")


def add_commands(app: typer.Typer) -> None:
    """Register this module's commands on the app."""
    app.command()(gpus)
    app.command()(bandwidth)
