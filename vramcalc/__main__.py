"""``python -m vramcalc``."""

from vramcalc.cli import app

app()
