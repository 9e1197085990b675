"""Command line: parse options, call the core, render. The only module that imports typer.

Exit codes: 0 = an estimate was produced; 2 = bad input (one ``error:`` line per problem on stderr).
"""

# Annotations are evaluated when defined (no `from __future__ import annotations`): typer would
# otherwise parse each option's annotation string on every start.

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from vramcalc.cli._common import (
    EXIT_BAD_INPUT,
    GpuOpt,
    GpusFileOpt,
    ModelOpt,
    echo_err,
    print_json,
    stdout,
    user_errors,
    verdict_budget,
)
from vramcalc.cli.workload import WorkloadArgs, workload_options
from vramcalc.errors import PipelineModel, SpecError, VramcalcError
from vramcalc.version import VERSION as __version__

if TYPE_CHECKING:
    from vramcalc.planning.runnable import Runnable
    from vramcalc.spec.models import Spec

#: Allocations between two collections of the youngest generation once a command runs (Python's default: 700).
GC_THRESHOLD = 100_000

base_app = typer.Typer(
    rich_markup_mode="rich",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Estimate GPU memory (VRAM) of training and inference steps from a YAML spec or a model's name "
    "(offline, unless a Hub id names a model that is not on this machine).\n\n"
    "Exit codes: 0 ok, 1 does not fit (check commands), 2 bad input.",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"vramcalc {__version__}")
        raise typer.Exit()


@base_app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", "-V", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = False,
) -> None:
    """vramcalc: will it fit, on which card, and how fast can the weights stream?"""


SpecArg = Annotated[Path, typer.Argument(help="YAML spec file.", show_default=False)]
OptSpecArg = Annotated[
    Path | None, typer.Argument(help="YAML spec file (or give --hf-config or --model).", show_default=False)
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object (int bytes).")]
ReserveFlag = Annotated[
    str | None,
    typer.Option("--reserve", help="Headroom to keep free on the card: '10%' or '2GiB' (default: target.reserve)."),
]


@base_app.command()
@workload_options()
def estimate(
    spec: OptSpecArg = None,
    *,
    json_out: JsonOpt = False,
    gpu: GpuOpt = None,
    gpus_file: GpusFileOpt = None,
    reserve: ReserveFlag = None,
    timeline: Annotated[bool, typer.Option("--timeline", help="Also draw the step timeline, peak marked.")] = False,
    explain: Annotated[
        bool, typer.Option("--explain", help="Give each assumption with its reason (default: key=value).")
    ] = False,
    hf_config: Annotated[Path | None, typer.Option(help="A transformers config.json instead of SPEC.")] = None,
    model: ModelOpt = None,
    emit_spec: Annotated[
        str | None,
        typer.Option(
            "--emit-spec",
            metavar="ROW",
            help="With --model and --gpu alone, or a spec with a model and no workload (and --runtime for the "
            "serving rows): print the spec of one row of what the model can run (serve-bf16, serve-fp8, "
            "serve-awq, lora, qlora, full).",
            show_default=False,
        ),
    ] = None,
    workload: WorkloadArgs,
) -> None:
    """Estimate the peak memory of one step of SPEC (or of --hf-config or --model), by component and phase.

    With a card (--gpu, else the spec's target.gpu), the verdict on it: the
    one check gives. --model NAME --gpu CARD with no workload flag (or a SPEC
    that names a model and no workload, with a card) answers what the model can
    run on the card: serving at its dtype, in fp8 and in 4-bit AWQ, LoRA, QLoRA
    and full fine-tuning, one row each."""
    from vramcalc.cli.inputs import load_workload_spec
    from vramcalc.planning.outcome import estimate_outcome
    from vramcalc.render.estimate import render_estimate

    source = str(spec or hf_config or (f"--model {model}" if model else "estimate"))
    # a Diffusers pipeline named by --model alone is answered with its weights; a spec's workload is refused
    passing: tuple[type[Exception], ...] = (PipelineModel,) if spec is None and hf_config is None else ()
    try:
        menu = spec is None and hf_config is None and model is not None and gpu is not None
        menu = menu and set(workload.named) <= {"--runtime"}  # the serving rows' runtime may be named
        runtime = str(workload.flags.get("runtime") or "vllm")
        found, menu_spec = None, None
        if spec is not None and hf_config is None and model is None and set(workload.named) <= {"--runtime"}:
            menu_spec = _without_workload(spec, gpu)  # a spec naming a model and no workload: the same rows
        if menu_spec is not None and not timeline:
            found = _what_runs(*menu_spec, gpu, reserve, json_out, emit_spec, source, runtime)
            if found is None:
                return
        elif menu and not timeline:
            assert model is not None and gpu is not None
            with user_errors(source, passing=passing):
                from vramcalc.spec.model_flag import spec_with_model

                base, notes = spec_with_model(None, model, {"mode": "inference"})
            name = base.name if base.model.checkpoint is None else None  # a model read from files: its keys
            found = _what_runs(base, name, notes, gpu, reserve, json_out, emit_spec, source, runtime)
            if found is None:  # shown: the table, or one row's spec
                return
        with user_errors(source, passing=passing):
            if emit_spec is not None:
                raise SpecError(
                    "--emit-spec: give --model NAME and --gpu CARD alone, or a spec with a model and no workload "
                    "(the rows of what the model can run)"
                )
            if spec is None and hf_config is None and model is None and not workload.named:
                raise SpecError("give a SPEC file or --hf-config config.json or --model NAME (one of them)")
            if menu_spec is not None:
                loaded = menu_spec[0]
            else:
                loaded, _ = load_workload_spec(spec, model, workload, hf_config)
            budget = verdict_budget(loaded, source, gpu, reserve)
            outcome = estimate_outcome(loaded, budget)
            result, fit = outcome.estimate, outcome.fit
    except PipelineModel as pipeline:
        with user_errors(source):
            _pipeline_answer(pipeline, source, gpu, reserve, workload, json_out)
        return
    if json_out:
        from vramcalc.results.estimate import EstimateResult

        steps = None
        if timeline:
            from vramcalc.families.timeline import build_timeline

            steps = build_timeline(loaded, result)
        doc = EstimateResult.of(result, budget, fit, steps).to_dict()
        if found is not None:  # --model and --gpu alone: every way it runs on the card, beside the estimate
            from vramcalc.results.runnable import RunnableResult

            doc["what_runs"] = RunnableResult.of(found).to_dict()
        print_json(doc)
    else:
        render_estimate(result, stdout(), budget, fit, explain=explain)
        if timeline:  # the report command's module only then
            from vramcalc.cli.report import print_timeline

            print_timeline(loaded, result, budget)


def _pipeline_answer(
    pipeline: PipelineModel, source: str, gpu: str | None, reserve: str | None, workload: WorkloadArgs, json_out: bool
) -> None:
    """A Diffusers pipeline named as the model: its weights by component, all resident and one at a time,
    and with a card the verdict on the weights alone (vramcalc/planning/pipeline.py)."""
    from vramcalc.cli._common import notes_to_stderr, reserve_flag
    from vramcalc.planning.check import TargetFlags, card_budget, resolve_flag_gpus
    from vramcalc.planning.pipeline import pipeline_weights
    from vramcalc.results.pipeline import PipelineResult
    from vramcalc.sources.checkpoint import Checkpoint
    from vramcalc.spec.from_checkpoint import source_of
    from vramcalc.spec.target import NO_RESERVE

    checkpoint = pipeline.checkpoint
    assert isinstance(checkpoint, Checkpoint)
    other = sorted(set(workload.named) - {"--precision"})
    if other:
        raise SpecError(
            f"{other[0]}: a Diffusers pipeline's weights take only --precision (its steps are not modelled)"
        )
    precision = workload.flags.get("precision")
    chosen = None if precision is None else str(getattr(precision, "value", precision)).removeprefix("pure-")
    if chosen is not None and chosen not in ("fp32", "fp16", "bf16"):
        raise SpecError(f"--precision: {chosen}: a pipeline's weights are cast to fp32, fp16 or bf16")
    budget = None
    if gpu is not None:
        cards, notes = resolve_flag_gpus(TargetFlags((gpu,), None, None))
        notes_to_stderr(notes)
        budget = card_budget(cards[0], reserve_flag(reserve) or NO_RESERVE)
    name = checkpoint.origin.label
    found = PipelineResult.of(name, source_of(checkpoint), pipeline_weights(checkpoint, chosen), budget)
    if json_out:
        print_json(found.to_dict())
        return
    from vramcalc.render.pipeline import render_pipeline

    render_pipeline(found, stdout())


def _without_workload(spec: Path, gpu: str | None) -> "tuple[Spec, str | None, list[str]] | None":
    """A spec file that names a model and no workload: the spec the rows of what the model can run start
    from, the model's name for their specs, and notes (see :func:`vramcalc.spec.model_flag.spec_without_workload`);
    None for any other file, or one that cannot be read (the estimate's own reading then says why)."""
    import re

    from vramcalc.files import MAX_SPEC_BYTES, parse_yaml, read_regular_file

    try:
        text = read_regular_file(spec, MAX_SPEC_BYTES, "spec files").decode("utf-8")
        if re.search(r"^workload\s*:", text, re.MULTILINE):  # a workload section: the estimate reads the file
            return None
        data = parse_yaml(text, str(spec))
    except (VramcalcError, OSError, UnicodeDecodeError):
        return None
    from vramcalc.spec.model_flag import spec_without_workload

    with user_errors(str(spec)):
        found = spec_without_workload(data, str(spec))
        if found is not None and gpu is None and (found[0].target is None or found[0].target.gpu is None):
            raise SpecError(
                f"{spec}: workload: not given; name a card (--gpu, or target.gpu in the spec) to see what the "
                "model can run on it, or add a workload section"
            )
    return found


def _what_runs(
    base: "Spec",
    name: str | None,
    notes: list[str],
    gpu: str | None,
    reserve: str | None,
    json_out: bool,
    emit_spec: str | None,
    source: str,
    runtime: str,
) -> "Runnable | None":
    """Every way ``base``'s model runs on the card (``--gpu``, else its ``target.gpu``): shown as a table or
    one row's spec (``--emit-spec``), or, for ``--json``, returned for the estimate's document to carry.
    ``name``: the model's name for the rows' specs (None: its keys)."""
    from vramcalc.cli._common import card_budget, notes_to_stderr
    from vramcalc.planning.runnable import option_named, runnable

    with user_errors(source):
        # the rows choose their own workloads: only what the name resolved to is worth saying
        notes_to_stderr([note for note in notes if not note.startswith(("workload.", "precision not given"))])
        budget = card_budget(base, source, gpu, reserve, required=True)
        assert budget is not None  # required=True: a card is named or an error raised
        precision = base.workload.precision.value
        found = runnable(base, budget, precision, model=name, plan=emit_spec is None, runtime=runtime)
        chosen = option_named(found, emit_spec) if emit_spec is not None else None
    if chosen is not None:
        import yaml

        typer.echo(yaml.safe_dump(chosen.document, sort_keys=False), nl=False)
        return None
    if json_out:
        return found
    from vramcalc.render.runnable import render_runnable

    render_runnable(found, stdout())
    return None


@base_app.command()
def schema() -> None:
    """Print the JSON Schema of spec files (for editor validation)."""
    from vramcalc.spec.load import json_schema

    print_json(json_schema())


#: The command groups beside ``estimate`` and ``schema``, in the order ``--help`` lists them: each module's
#: ``add_commands`` registers its commands. A run of one command imports only its module.
COMMAND_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("vramcalc.cli.gpus", ("gpus", "bandwidth")),
    ("vramcalc.cli.report", ("report", "compare")),
    ("vramcalc.cli.check", ("check", "fit", "max-batch", "max-seq", "sweep")),
    ("vramcalc.cli.inputs", ("import",)),
    ("vramcalc.cli.plan", ("plan",)),
    ("vramcalc.cli.examples", ("examples",)),
    ("vramcalc.cli.models", ("models",)),
)
_whole: typer.Typer | None = None


def whole_app() -> typer.Typer:
    """The app with every command registered (``vramcalc --help``, an unknown command, the tests)."""
    global _whole
    if _whole is None:
        import importlib

        for module, _ in COMMAND_GROUPS:
            importlib.import_module(module).add_commands(base_app)
        _whole = base_app
    return _whole


def __getattr__(name: str) -> typer.Typer:
    """``app``: the whole app, its command groups imported on first use."""
    if name == "app":
        return whole_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _app_for(args: list[str]) -> typer.Typer:
    """The app narrowed to the command that ``args`` name first: only its module is imported and only its
    parameters are built (typer builds those of every registered command before it parses). Anything else
    (options first, no command, an unknown name) gets the whole app, so help and errors are the same."""
    if not args or args[0].startswith("-"):
        return whole_app()
    import copy

    from typer.main import get_command_name

    narrowed = copy.copy(base_app)
    narrowed.registered_commands = list(base_app.registered_commands)
    group = next((module for module, names in COMMAND_GROUPS if args[0] in names), None)
    if group is not None and _whole is None:
        import importlib

        importlib.import_module(group).add_commands(narrowed)
    chosen = [
        info
        for info in narrowed.registered_commands
        if (info.name or get_command_name(getattr(info.callback, "__name__", ""))) == args[0]
    ]
    if not chosen:
        return whole_app()
    narrowed.registered_commands = chosen
    return narrowed


def run() -> None:
    """Console entry point. Typer's own usage errors (a bad flag value, an unknown option) become
    one ``error:`` line and exit code 2, like every other input error, instead of a usage panel.

    Standard output and error never end the run with a traceback: characters their encoding lacks
    are replaced; a closed pipe (``vramcalc gpus | head -1``) ends the run quietly with exit code 141
    (128 + SIGPIPE, as a shell reports a program a closed pipe ended); any other failed write (a full
    disk) is one ``error: standard output: cannot write (...)`` line and exit code 2."""
    import gc
    import sys

    from vramcalc.cli.output import StreamError, flush_streams, guard_streams, stream_failed

    # What start-up imported lives until exit: the collector need not scan it again. It was paused while
    # the entry point (vramcalc.cli.run) imported this module, and runs less often from here on: the
    # command's own imports and the spec's models are long-lived too, and a command leaves little garbage.
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD)
    gc.enable()
    guard_streams()
    usage_error = typer.BadParameter.__mro__[1]  # typer's vendored UsageError (never import click)
    try:
        try:
            code = _app_for(sys.argv[1:])(standalone_mode=False)
        except usage_error as exc:  # type: ignore[misc]  # an exception class, found at run time
            message = " ".join(exc.format_message().split())
            if message:  # no message: `vramcalc` alone, whose help was already printed
                echo_err(f"error: {message}")
            code = EXIT_BAD_INPUT
        except typer.Abort:
            typer.echo("error: aborted", err=True)
            code = 1
        flush_streams()
    except StreamError as exc:
        code = stream_failed(exc)
    # The interpreter's exit collects every object not frozen, garbage or not; the output is flushed and the
    # files are closed, so what the command built is frozen too and the exit has nothing left to scan.
    gc.freeze()
    sys.exit(code if isinstance(code, int) else 0)
