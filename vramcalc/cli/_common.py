"""What every command module shares: input errors as one ``error:`` line with exit 2, the card and
reserve a command compares against, the consoles and JSON printing.

Every line written to stderr goes through :func:`vramcalc.render.escape.terminal_line` (see
:func:`echo_err`): one problem is one physical line, whatever a file name or a quoted value holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vramcalc.errors import EXIT_BAD_INPUT, SpecError, UnitError, VramcalcError
from vramcalc.render.escape import terminal_line

if TYPE_CHECKING:
    from rich.console import Console

    from vramcalc.planning.budget import Budget
    from vramcalc.spec.models import Spec
    from vramcalc.spec.target import Reserve


def echo_err(line: str) -> None:
    """Write one line to stderr, escaped and bounded by :func:`~vramcalc.render.escape.terminal_line`."""
    typer.echo(terminal_line(line), err=True)


def error_lines(message: str, source: str | None = None, *, prefix: bool = False) -> list[str]:
    """The problems in an error's ``message``, one per line. Line breaks in ``source`` (a file name may
    hold any character but ``/`` and NUL) are escaped before the message is split, so they never split a
    problem in two; with ``prefix``, a line that does not name ``source`` yet is prefixed with it."""
    if source:
        shown = terminal_line(source, limit=None)
        message = message.replace(source, shown)
    lines = message.splitlines() or ["unknown error"]
    if source and prefix:
        lines = [line if line.startswith(shown) else f"{shown}: {line}" for line in lines]
    return lines


@contextmanager
def user_errors(source: str | None = None, passing: tuple[type[Exception], ...] = ()) -> Iterator[None]:
    """Turn vramcalc errors into ``error:`` lines on stderr and exit code 2 (never a traceback).

    Lines that do not name ``source`` (the spec file) yet are prefixed with it. Errors of the ``passing``
    types are the caller's to answer.
    """
    try:
        yield
    except VramcalcError as exc:
        if isinstance(exc, passing):
            raise
        lines = error_lines(str(exc), source, prefix=isinstance(exc, SpecError))
        for line in lines:
            echo_err(f"error: {line}")
        stage = getattr(exc, "stage", None)
        if stage is not None and _wants_json():
            # a model that could not be read: the JSON reader learns which step failed (path, hub, config,
            # header) as well as the message
            print_json({"error": {"message": terminal_line(lines[0]), "stage": stage}})
        raise typer.Exit(EXIT_BAD_INPUT) from None


def _wants_json() -> bool:
    """Whether the running command was asked for JSON (``--json``, or ``--format json``)."""
    from typer._click.globals import get_current_context  # typer's own click (never import click)

    ctx = get_current_context(silent=True)
    params = ctx.params if ctx is not None else {}
    return params.get("json_out") is True or params.get("json") is True or str(params.get("format")) == "json"


#: The help of every ``--gpu`` option: what a card name may be.
GPU_HELP = (
    "Card: a catalog name or any unambiguous start of one (see 'vramcalc gpus'), 'local' (NVML, free memory), "
    "or a capacity such as 48GiB or 24GB (a custom card with that much usable memory and no other figures)."
)
#: The ``--gpu`` option of the commands that take one card: without it, the spec's ``target.gpu``.
GpuOpt = Annotated[str | None, typer.Option("--gpu", help=f"{GPU_HELP} Default: the spec's target.gpu.")]


def _use_gpus_file(ctx: typer.Context, value: Path | None) -> Path | None:
    """``--gpus-file`` / ``VRAMCALC_GPUS``: load the user's catalog before the command runs (a bad file is
    one ``error:`` line naming it, exit 2) and drop it when the command ends. Without the option this
    imports nothing but the small lookup module."""
    from vramcalc.hardware import lookup

    if value is None or not str(value):
        lookup.use_gpus_file(None)
        return None
    try:
        notes = lookup.use_gpus_file(value)
    except VramcalcError as exc:
        for line in error_lines(str(exc), str(value)):
            echo_err(f"error: {line}")
        raise typer.Exit(EXIT_BAD_INPUT) from None
    ctx.call_on_close(lambda: lookup.use_gpus_file(None))
    notes_to_stderr(notes)
    return value


GpusFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--gpus-file",
        envvar="VRAMCALC_GPUS",
        callback=_use_gpus_file,
        show_default=False,
        help="Your own GPU catalog: a YAML list of entries with the fields of the bundled gpus.yaml. Its cards are "
        "added to the catalog; one with a bundled id replaces that entry.",
    ),
]


def stdout() -> Console:
    """The console commands print to. It never reads rich markup: a name, a path or a note is shown as
    it is written (renderers style their own words with :class:`rich.text.Text`)."""
    from rich.console import Console

    return Console(highlight=False, markup=False)


def print_json(doc: Any) -> None:
    import json

    typer.echo(json.dumps(doc, indent=2, allow_nan=False))


def notes_to_stderr(notes: list[str]) -> None:
    """Each note as a ``note:`` line on stderr, escaped like every stderr line and wrapped at the
    terminal's width (continuation lines indented by two spaces). Error lines are never wrapped: one
    problem is one line."""
    from vramcalc.render.text import terminal_width, wrap

    width = terminal_width()
    for note in notes:
        for line in wrap(terminal_line(f"note: {note}"), width):
            typer.echo(line, err=True)


def reserve_flag(text: str | None) -> Reserve | None:
    """``--reserve`` as a :class:`~vramcalc.spec.target.Reserve` (None when not given)."""
    from vramcalc.spec.target import parse_reserve

    return parse_reserve(text, "--reserve") if text is not None else None


def card_budget(spec: Spec, source: str, gpu: str | None, reserve: str | None, *, required: bool) -> Budget | None:
    """The card a command compares against (``--gpu``, else the spec's ``target.gpu``; None when neither
    names one and ``required`` is false) with its reserve (``--reserve``, else ``target.reserve``);
    notes go to stderr. Raises :class:`VramcalcError` for bad input (inside :func:`user_errors`)."""
    from vramcalc.planning.check import single_budget

    budget, notes = single_budget(spec, source, gpu, reserve_flag(reserve), required=required)
    notes_to_stderr(notes)
    return budget


def verdict_budget(spec: Spec, source: str, gpu: str | None, reserve: str | None) -> Budget | None:
    """The card ``estimate`` and ``report`` give their verdict on: ``--gpu``, else the spec's ``target.gpu``;
    None when neither names one (then a ``--reserve`` is an error: there is no card to keep it free on).
    Without a card, neither the catalog nor the planning modules are imported."""
    if gpu is None and (spec.target is None or spec.target.gpu is None):
        if reserve is not None:
            raise UnitError("--reserve: needs a card: --gpu or the spec's target.gpu")
        return None
    return card_budget(spec, source, gpu, reserve, required=True)


def load_spec_file(path: Path | str) -> Spec:
    """The spec a SPEC argument names (a file, or the bundled example of that name, with a note on
    stderr saying so; see :func:`vramcalc.spec.load.load_spec_arg`). Raises :class:`VramcalcError`."""
    from vramcalc.spec.load import load_spec_arg

    spec, note = load_spec_arg(path)
    if note:
        notes_to_stderr([note])
    return spec


#: The ``--model`` option of the commands that read a spec.
ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        metavar="NAME",
        help="A model from the bundled catalog ('vramcalc models'), e.g. llama-3.1-8b: replaces SPEC's model; "
        "without SPEC the workload is the flags' (batch 1 and seq_len 4,096, or the model's context if shorter, "
        "when not given).",
    ),
]


def input_name(spec: Path | str | None, model: str | None) -> str:
    """How messages name a command's input: the SPEC argument, else ``--model NAME``."""
    return str(spec) if spec is not None else f"--model {model}" if model is not None else ""
