"""What every command module shares: input errors as one ``error:`` line with exit 2, card look-up,
the consoles and JSON printing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console

from vramcalc.errors import SpecError, VramcalcError

stderr = Console(stderr=True, highlight=False)


EXIT_BAD_INPUT = 2


@contextmanager
def user_errors(source: str | None = None) -> Iterator[None]:
    """Turn vramcalc errors into ``error:`` lines on stderr and exit code 2 (never a traceback).

    Lines that do not name ``source`` (the spec file) yet are prefixed with it.
    """
    try:
        yield
    except VramcalcError as exc:
        for line in str(exc).splitlines() or ["unknown error"]:
            if source and isinstance(exc, SpecError) and not line.startswith(source):
                line = f"{source}: {line}"
            typer.echo(f"error: {line}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None


def lookup_gpu(name: str) -> Any:
    """Catalog lookup for ``--gpu``; an ambiguous short name prints which variant it picked."""
    from vramcalc.hardware.catalog import ambiguity_note
    from vramcalc.hardware.lookup import resolve_gpu

    card, others = resolve_gpu(name)
    if others:
        typer.echo(f"note: {ambiguity_note(name, card, others)}", err=True)
    return card


def stdout() -> Console:
    return Console(highlight=False)


def print_json(doc: Any) -> None:
    import json

    typer.echo(json.dumps(doc, indent=2))
