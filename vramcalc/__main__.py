"""``python -m vramcalc``."""

from vramcalc.cli.main import run

run()
