"""Seeing and measuring memory: `vramcalc report` (HTML) and `vramcalc compare` (memory_stats JSON).

Also the helpers behind `vramcalc estimate --timeline`. Imported when the CLI starts, so the top
level imports only typer, the standard library and the shared options of :mod:`vramcalc.cli._common`;
everything else is imported inside the commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from vramcalc.cli._common import GpuOpt, GpusFileOpt, ModelOpt
from vramcalc.cli.workload import workload_options

if TYPE_CHECKING:
    from vramcalc.cli.output import OutputFile
    from vramcalc.cli.workload import WorkloadArgs
    from vramcalc.families.estimate import Estimate
    from vramcalc.planning.budget import Budget
    from vramcalc.planning.outcome import Outcome
    from vramcalc.render.html_report import ReportEntry
    from vramcalc.spec.models import Spec

EXIT_OFF = 1
SNIPPET = (
    "import json, torch  # after two or more training steps:\n"
    'json.dump(torch.cuda.memory_stats(), open("stats.json", "w"))'
)


def estimate_for(
    path: Path | None,
    gpu: str | None,
    reserve: str | None = None,
    model: str | None = None,
    workload: WorkloadArgs | None = None,
) -> tuple[Spec, Outcome]:
    """Load one spec (errors name the file; with ``workload``, the flags' spec of ``path`` or ``--model``),
    the card (``--gpu``, else the spec's ``target.gpu``) with its reserve (``--reserve``, else
    ``target.reserve``), and the estimate on that card with its verdict."""
    from vramcalc.cli._common import input_name, load_spec_file, user_errors, verdict_budget
    from vramcalc.planning.outcome import estimate_outcome

    source = input_name(path, model)
    with user_errors(source):
        if workload is not None:
            from vramcalc.cli.inputs import load_workload_spec

            spec, _ = load_workload_spec(path, model, workload)
        else:
            assert path is not None
            spec = load_spec_file(path)
        budget = verdict_budget(spec, source, gpu, reserve)
        return spec, estimate_outcome(spec, budget)


def report_entry(
    path: Path | None, gpu: str | None, reserve: str | None, model: str | None, workload: WorkloadArgs
) -> ReportEntry:
    from vramcalc.cli._common import input_name
    from vramcalc.families.timeline import build_timeline
    from vramcalc.render.html_report import ReportEntry

    spec, outcome = estimate_for(path, gpu, reserve, model, workload)
    result, budget, fit = outcome.estimate, outcome.budget, outcome.fit
    timeline = build_timeline(spec, result)
    source = input_name(path, model)
    return ReportEntry(source=source, spec=spec, estimate=result, timeline=timeline, budget=budget, fit=fit)


def write_output(text: str, output: OutputFile | None) -> None:
    """Write ``text`` to the checked ``--output`` file (a note on stderr), or to stdout when there is none."""
    from vramcalc.cli._common import echo_err
    from vramcalc.cli.output import write_text

    written = write_text(output, text)
    if output is not None:
        echo_err(f"wrote {output.given} ({written:,} bytes)")


@workload_options()
def report(
    specs: Annotated[
        list[Path] | None,
        typer.Argument(
            metavar="SPEC",
            help="YAML spec files; several are compared side by side (or give --model).",
            show_default=False,
        ),
    ] = None,
    *,
    model: ModelOpt = None,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            help="HTML file to write (default or '-': standard output), atomically; never over one of the specs, "
            "a FIFO or a device.",
        ),
    ] = None,
    gpu: GpuOpt = None,
    gpus_file: GpusFileOpt = None,
    reserve: Annotated[
        str | None,
        typer.Option("--reserve", help="Headroom to keep free on the card: '10%' or '2GiB' (default: target.reserve)."),
    ] = None,
    workload: WorkloadArgs,
) -> None:
    """Write a self-contained HTML report: the step timeline of each SPEC (inline SVG), its components,
    assumptions and, with --gpu, the card's capacity line and headroom. No network, no JavaScript.

    Without --gpu, the card is the spec's target.gpu. With --model, the
    catalog model replaces each SPEC's (alone: the flags' workload)."""
    from vramcalc.cli.output import output_file, spec_inputs
    from vramcalc.render.html_report import render_report
    from vramcalc.version import VERSION as __version__

    paths: list[Path | None] = list(specs or [])
    sink = output_file(output, spec_inputs([path for path in paths if path is not None]))
    entries = [report_entry(path, gpu, reserve, model, workload) for path in paths or [None]]
    write_output(render_report(entries, version=__version__), sink)


def compare(
    spec: Annotated[Path, typer.Argument(metavar="SPEC", help="YAML spec of the measured run.", show_default=False)],
    *,
    measured: Annotated[
        Path, typer.Option("--measured", help="torch.cuda.memory_stats() dumped as JSON.", show_default=False)
    ],
    nvidia_smi_used: Annotated[
        str | None, typer.Option(help="nvidia-smi memory.used after the peak, with a unit: 23.4GiB, '23962 MiB'.")
    ] = None,
    tolerance: Annotated[str, typer.Option(help="Largest accepted error of the peak allocated.")] = "10%",
    gpu: GpuOpt = None,
    gpus_file: GpusFileOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object (int bytes).")] = False,
) -> None:
    """Compare the estimate of SPEC with PyTorch's statistics of a real run.

    Dump the statistics as JSON (never a pickle) at the end of the run:

    [bold]{snippet}[/]

    Shows peak allocated (allocated_bytes.all.peak), peak reserved
    (reserved_bytes.all.peak), fragmentation (reserved - allocated) and,
    with --nvidia-smi-used, the implied CUDA context (used - reserved).

    Exit codes: 0 peak allocated within --tolerance, 1 it is not, 2 bad input.
    """
    from vramcalc.cli._common import print_json, stdout, user_errors
    from vramcalc.planning.compare import compare as run_compare
    from vramcalc.planning.compare import load_memory_stats
    from vramcalc.render.compare import comparison_dict, render_comparison
    from vramcalc.units import parse_fraction, parse_size

    with user_errors():
        limit = parse_fraction(tolerance, "--tolerance")
        smi = parse_size(nvidia_smi_used, "--nvidia-smi-used") if nvidia_smi_used is not None else None
        stats = load_memory_stats(measured)
    result = estimate_for(spec, gpu)[1].estimate
    with user_errors():
        comparison = run_compare(result, stats, tolerance=limit, nvidia_smi_used_bytes=smi)
    if json_out:
        print_json(comparison_dict(comparison))
    else:
        render_comparison(comparison, stdout())
    if not comparison.within_tolerance:
        raise typer.Exit(EXIT_OFF)


compare.__doc__ = (compare.__doc__ or "").replace("{snippet}", SNIPPET.replace("\n", "\n    "))


def print_timeline(spec: Spec, result: Estimate, budget: Budget | None) -> None:
    """``estimate --timeline``: the terminal timeline, with the card's allocation budget when given."""
    from vramcalc.cli._common import stdout
    from vramcalc.families.timeline import allocation_budget_bytes, build_timeline
    from vramcalc.render.timeline import render_timeline

    tensors = allocation_budget_bytes(budget.available_bytes, result) if budget is not None else None
    render_timeline(build_timeline(spec, result), stdout(), tensors, budget.gpu_name if budget else "")


def add_commands(app: typer.Typer) -> None:
    """Register this module's commands on the app."""
    app.command()(report)
    app.command()(compare)
