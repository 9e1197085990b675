"""The command line: the typer app (:mod:`vramcalc.cli.main`) and one module per command group."""

from typing import TYPE_CHECKING

from vramcalc.cli.main import run

if TYPE_CHECKING:
    import typer

__all__ = ["app", "run"]


def __getattr__(name: str) -> "typer.Typer":
    """``app``: the whole typer app (every command group imported; the console entry point, :func:`run`,
    imports only the group of the command it runs)."""
    if name == "app":
        from vramcalc.cli.main import whole_app

        return whole_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
