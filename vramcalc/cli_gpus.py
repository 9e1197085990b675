"""Catalog and bandwidth commands (`vramcalc gpus`, `vramcalc bandwidth`)."""

from __future__ import annotations

import typer


def add_commands(app: typer.Typer) -> None:
    """Register this module's commands on the app."""
