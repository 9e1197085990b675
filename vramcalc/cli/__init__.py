"""The command line: the typer app (:mod:`vramcalc.cli.main`) and one module per command group."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import typer

__all__ = ["app", "run"]


def run() -> None:
    """Console entry point: :func:`vramcalc.cli.main.run`, imported with the cyclic garbage collector paused.

    Start-up creates tens of thousands of objects (the libraries' modules, typer's command, pydantic's
    schemas) that live until exit and hold no garbage; collecting as they are created is wasted work.
    ``main.run`` freezes them and resumes the collector.

    The command's pydantic models (the spec's sections, the JSON documents) load no pydantic plugins: an
    observability hook installed for another program has nothing to validate here, and looking plugins
    up reads the metadata of every installed distribution. A value the user set is kept."""
    import gc
    import os

    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "1")
    gc.disable()
    from vramcalc.cli.main import run as run_command

    run_command()


def __getattr__(name: str) -> "typer.Typer":
    """``app``: the whole typer app (every command group imported; the console entry point, :func:`run`,
    imports only the group of the command it runs)."""
    if name == "app":
        from vramcalc.cli.main import whole_app

        return whole_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
