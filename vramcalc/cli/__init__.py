"""The command line: the typer app (:mod:`vramcalc.cli.app`) and one module per command group."""

from vramcalc.cli.app import app, run

__all__ = ["app", "run"]
