"""``python -m vramcalc``."""

from vramcalc.cli.app import run

run()
