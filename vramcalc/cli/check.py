"""CI gate and planning commands: `vramcalc check`, `fit`, `max-batch`, `max-seq`, `sweep`.

Imported when the CLI starts, so the top level imports only typer, typing, enum, pathlib and the
output sink (:mod:`vramcalc.cli.output`); the planning core and the formatters are imported inside
the commands. Command bodies parse options, call the core (:mod:`vramcalc.planning.check`,
:mod:`vramcalc.planning.limits`, :mod:`vramcalc.planning.fit`) and hand a formatter's string to :func:`emit`,
the only place output is written.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from vramcalc.choices import Mode
from vramcalc.cli._common import GPU_HELP, GpuOpt, GpusFileOpt, ModelOpt, echo_err, notes_to_stderr, reserve_flag
from vramcalc.cli.output import OutputFile, output_file, refuse_inputs, spec_inputs, write_text
from vramcalc.cli.workload import workload_options

if TYPE_CHECKING:
    from vramcalc.cli.workload import WorkloadArgs


class CheckFormat(StrEnum):
    table = "table"
    json = "json"
    github = "github"
    junit = "junit"
    markdown = "markdown"


class SweepFormat(StrEnum):
    table = "table"
    json = "json"
    csv = "csv"


SpecArg = Annotated[Path, typer.Argument(help="YAML spec file.", show_default=False)]
OptSpecArg = Annotated[Path | None, typer.Argument(help="YAML spec file (or give --model).", show_default=False)]
ReserveOpt = Annotated[
    str | None,
    typer.Option(help="Memory kept free on the card: a share of it (10%) or a size (2GiB). Overrides target.reserve."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (int bytes).")]
OutputOpt = Annotated[
    str | None,
    typer.Option(
        "--output",
        "-o",
        help="Write the report to FILE instead of stdout ('-': stdout), atomically; never over one of the inputs, "
        "a FIFO or a device.",
    ),
]
CheckOutputOpt = Annotated[
    str | None,
    typer.Option(
        "--output",
        "-o",
        help="Write the report to FILE instead of stdout ('-': stdout), atomically; never over one of the specs "
        "checked, a FIFO or a device. Written with exit code 2 too: the report then lists the specs that "
        "could not be checked (an error testcase in junit).",
    ),
]
MaxGpusOpt = Annotated[
    int,
    typer.Option(
        "--max-gpus",
        min=1,
        max=100_000,  # vramcalc.planning.plan_search.MAX_SEARCH_GPUS (not imported: the CLI starts without the core)
        help="Largest GPU count the sharded-plan search considers.",
    ),
]


def emit(text: str, output: OutputFile | None = None) -> None:
    """Write a formatter's string to stdout, or to the checked ``--output`` file (only then is a file
    written; see :mod:`vramcalc.cli.output`)."""
    write_text(output, text)


def _table_style(output: OutputFile | None) -> tuple[bool, int]:
    """(colour, width) for a table: colour only on an interactive stdout; the terminal's width (COLUMNS
    included) on stdout, a fixed width in a file."""
    from vramcalc.cli._common import stdout
    from vramcalc.render.text import DEFAULT_WIDTH, terminal_width

    console = stdout()
    terminal = console.is_terminal and output is None
    return terminal, (terminal_width() if output is None else DEFAULT_WIDTH)


def check(
    specs: Annotated[
        list[str],
        typer.Argument(metavar="SPEC", help="Spec files, directories or glob patterns.", show_default=False),
    ],
    *,
    gpu: Annotated[
        list[str] | None, typer.Option("--gpu", help=f"{GPU_HELP} Instead of target.gpu; repeatable.")
    ] = None,
    gpus_file: GpusFileOpt = None,
    gpus: Annotated[
        int | None,
        typer.Option(
            "--gpus",
            min=1,
            max=100_000,  # vramcalc.spec.target.MAX_GPU_COUNT, target.count's bound (not imported: see --max-gpus)
            help="GPUs the run is planned for (must match a spec's parallel section).",
        ),
    ] = None,
    reserve: ReserveOpt = None,
    max_gpus: MaxGpusOpt = 64,
    fmt: Annotated[CheckFormat, typer.Option("--format", help="Output format.")] = CheckFormat.table,
    json_out: Annotated[bool, typer.Option("--json", help="Same as --format json.")] = False,
    output: CheckOutputOpt = None,
    exclude: Annotated[
        list[str] | None,
        typer.Option(
            "--exclude",
            metavar="GLOB",
            help="Leave out paths matching GLOB (repeatable; fnmatch rules, '*' crosses '/'): matched against "
            "the path as given or found and against the file name alone; a matching directory is not searched.",
        ),
    ] = None,
    skip_non_specs: Annotated[
        bool,
        typer.Option(
            "--skip-non-specs",
            help="Skip YAML files that are not vramcalc specs even when named on the command line (for "
            "pre-commit, which names every changed YAML file); found by a directory or pattern they always are.",
        ),
    ] = False,
) -> None:
    """Check that specs fit their GPU: a gate for CI and pre-commit.

    Each spec's [bold]target:[/] section (gpu, count, reserve) names the card; --gpu, --gpus and
    --reserve override it. The estimate's total (allocated peak + CUDA context + allocator reserve, and NCCL
    buffers across GPUs) is compared with the card's usable memory (the driver total where the catalog has it) minus the
    reserve. A spec that does not fit is listed with the single changes that would make it fit, sharding
    over more GPUs included (ZeRO-3/FSDP for a one-GPU spec; the spec's own framework for a spec with a
    [bold]parallel:[/] section, whose GPU count --gpus and target.count must match).

    A SPEC that does not exist is bad input, never the bundled example of that name ('vramcalc
    examples NAME > NAME' copies one here).

    A directory or pattern search skips YAML files that are not vramcalc specs (accelerate, DeepSpeed
    and Hugging Face configs, lists, several documents, mappings without model, workload or name),
    with one note each on stderr; a file named explicitly is checked unless --skip-non-specs.

    Exit codes: 0 = every spec fits; 1 = at least one spec does not fit; 2 = bad input (one error line
    per problem on stderr; the other specs are still reported, but nothing is reported as passing).
    """
    from vramcalc.cli._common import user_errors
    from vramcalc.planning.check import TargetFlags, run_check
    from vramcalc.render.check import format_check

    sink = output_file(output, spec_inputs(specs))  # a missing bare name's bundled example too
    _refuse_spec_in_search(sink, specs)
    with user_errors():
        flags = TargetFlags(tuple(gpu or ()), gpus, reserve_flag(reserve))
        report = run_check(specs, flags, max_gpus, exclude=tuple(exclude or ()), skip_non_specs=skip_non_specs)
    refuse_inputs(sink, [*(row.source for row in report.rows), *(error.source for error in report.errors)])
    for error in report.errors:
        for line in error.messages:
            echo_err(f"error: {line}")
    notes_to_stderr(report.notes)
    color, width = _table_style(sink)
    text = format_check(report, "json" if json_out else fmt.value, color=color, width=width)
    if fmt is CheckFormat.github and not json_out:  # workflow commands are this format's purpose
        from vramcalc.cli.output import deliberate_commands

        with deliberate_commands():
            emit(text, sink)
    else:
        emit(text, sink)
    raise typer.Exit(report.exit_code)


def _refuse_spec_in_search(sink: OutputFile | None, specs: list[str]) -> None:
    """Refuse an ``--output`` spec file (.yaml/.yml) inside a directory or pattern being searched: it
    would be one of the inputs, even when the search stops at one of its bounds before reaching it."""
    import os

    from vramcalc.paths import is_pattern
    from vramcalc.planning.check import SPEC_SUFFIXES

    if sink is None or not sink.target.endswith(SPEC_SUFFIXES):
        return
    for arg in specs:
        root = arg.split("*", 1)[0].split("?", 1)[0].split("[", 1)[0] if is_pattern(arg) else arg
        root = root if os.path.isdir(root) else os.path.dirname(root)
        if is_pattern(arg) or os.path.isdir(arg):
            real = os.path.realpath(root or ".")
            if sink.target.startswith(real.rstrip("/") + "/"):
                refuse_inputs(sink, [sink.target])  # one refusal wording: "is an input of this command"


@workload_options()
def fit(
    spec: OptSpecArg = None,
    *,
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    gpus_file: GpusFileOpt = None,
    reserve: ReserveOpt = None,
    max_gpus: MaxGpusOpt = 64,
    json_out: JsonOpt = False,
    workload: WorkloadArgs,
) -> None:
    """Every catalog card SPEC fits on, with the headroom, and what would make it fit its target card.

    For a card it does not fit, "cards needed" is the fewest cards of that kind under a sharded plan
    (the search of 'vramcalc plan': ZeRO/FSDP, tensor and pipeline parallelism, up to --max-gpus; one
    search per distinct capacity; at most 4,000 plans estimated for all cards together, and a card
    whose search reached that budget says so). Pure data parallelism does not reduce per-card memory. For the target
    card (target.gpu or --gpu) a spec that does not fit is listed with the single changes that would make
    it fit, "shard over N GPUs" included.

    Exit codes: 0 = it fits its target card (or, with no target, at least one card); 1 = it does not;
    2 = bad input.
    """
    from vramcalc.cli._common import user_errors
    from vramcalc.cli.inputs import load_with_budget
    from vramcalc.planning.fit import fit_report
    from vramcalc.render.planning import fit_json, fit_table

    loaded, source, budget, kept = load_with_budget(spec, model, workload, gpu, reserve, required=False)
    with user_errors(source):
        report = fit_report(loaded, budget, kept, max_gpus)
    name = loaded.name or (spec.stem if spec else source)
    emit((fit_json if json_out else fit_table)(source, name, report))
    raise typer.Exit(0 if report.fits else 1)


def _limit_command(
    spec: Path | None,
    gpu: str | None,
    reserve: str | None,
    json_out: bool,
    key: str,
    model: str | None,
    workload: WorkloadArgs,
) -> None:
    from vramcalc.cli._common import user_errors
    from vramcalc.cli.inputs import load_with_budget
    from vramcalc.planning.limits import max_batch, max_seq
    from vramcalc.render.planning import limit_json, limit_text

    loaded, source, budget, _ = load_with_budget(spec, model, workload, gpu, reserve, required=True)
    assert budget is not None  # required=True: a missing card is an input error
    with user_errors(source):
        limit = max_batch(loaded, budget) if key == "batch_size" else max_seq(loaded, budget)
    other = "seq_len" if key == "batch_size" else "batch_size"
    fixed: dict[str, int | None] = {other: getattr(loaded.workload, other)}
    name = loaded.name or (spec.stem if spec else source)
    emit((limit_json if json_out else limit_text)(source, name, limit, fixed))
    raise typer.Exit(0 if limit.value else 1)


#: A ``--model`` run of max-batch or max-seq without SPEC or --mode: inference (how many sequences, or how
#: long a one, a card serves); a full fine-tune of all but the smallest models fits no single card.
LIMIT_MODE = Mode.inference
WHOLE = "max-seq searches the whole sequence; drop it"


@workload_options(LIMIT_MODE, refused={"batch_size": "max-batch searches the batch size; drop it"})
def max_batch(
    spec: OptSpecArg = None,
    *,
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    gpus_file: GpusFileOpt = None,
    reserve: ReserveOpt = None,
    json_out: JsonOpt = False,
    workload: WorkloadArgs,
) -> None:
    """The largest batch size of SPEC that fits the card, with the memory there and at the next one.

    With --model and no SPEC, the workload is inference unless --mode or
    a training flag (--lora, --optimizer, ...) says otherwise.

    Exact: a search over the estimate (doubling, then bisection). JSON keys:
    max_batch_size (0 when even batch 1 does not fit), total_bytes_at_max,
    total_bytes_at_next. Exit codes: 0 = batch 1 fits; 1 = even batch 1 does
    not fit; 2 = bad input.
    """
    _limit_command(spec, gpu, reserve, json_out, "batch_size", model, workload)


@workload_options(
    LIMIT_MODE,
    refused={"seq_len": "max-seq searches the sequence length; drop it", "prompt_len": WHOLE, "max_new_tokens": WHOLE},
)
def max_seq(
    spec: OptSpecArg = None,
    *,
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    gpus_file: GpusFileOpt = None,
    reserve: ReserveOpt = None,
    json_out: JsonOpt = False,
    workload: WorkloadArgs,
) -> None:
    """The largest sequence length of SPEC that fits the card, with the memory there and at the next one.

    With --model and no SPEC, the workload is inference unless --mode or
    a training flag (--lora, --optimizer, ...) says otherwise.

    JSON keys: max_seq_len (0 when even length 1 does not fit),
    total_bytes_at_max, total_bytes_at_next. Exit codes: 0 = length 1 fits;
    1 = it does not; 2 = bad input.
    """
    _limit_command(spec, gpu, reserve, json_out, "seq_len", model, workload)


@workload_options()
def sweep(
    spec: OptSpecArg = None,
    *,
    model: ModelOpt = None,
    batch_size: Annotated[str, typer.Option(help="Comma-separated batch sizes, e.g. 1,2,4,8,16,32.")],
    seq_len: Annotated[str | None, typer.Option(help="Comma-separated sequence lengths (default: the spec's).")] = None,
    gpu: GpuOpt = None,
    gpus_file: GpusFileOpt = None,
    reserve: ReserveOpt = None,
    fmt: Annotated[SweepFormat, typer.Option("--format", help="Output format.")] = SweepFormat.table,
    json_out: Annotated[bool, typer.Option("--json", help="Same as --format json.")] = False,
    output: OutputOpt = None,
    workload: WorkloadArgs,
) -> None:
    """A grid of totals over batch sizes x sequence lengths, for capacity planning.

    Each point is marked fits / does not fit when a card is named (--gpu or target.gpu). Exit code 0
    when the grid was computed, 2 for bad input.
    """
    from vramcalc.cli._common import user_errors
    from vramcalc.cli.inputs import load_with_budget
    from vramcalc.planning.sweep import sweep as run_sweep
    from vramcalc.render.planning import format_sweep

    sink = output_file(output, spec_inputs([spec] if spec else []))
    loaded, source, budget, _ = load_with_budget(spec, model, workload, gpu, reserve, required=False)
    with user_errors(source):
        grid = run_sweep(loaded, batch_size, seq_len, budget)
    emit(format_sweep(source, grid, "json" if json_out else fmt.value, _table_style(sink)[1]), sink)


def add_commands(app: typer.Typer) -> None:
    """Register this module's commands on the app."""
    app.command()(check)
    app.command()(fit)
    app.command(name="max-batch")(max_batch)
    app.command(name="max-seq")(max_seq)
    app.command()(sweep)
