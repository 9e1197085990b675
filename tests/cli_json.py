"""Run a command of the CLI in-process and read its JSON document."""

from __future__ import annotations

import json
from typing import Any

from typer.testing import CliRunner

from vramcalc.cli import app

runner = CliRunner()


def run_json(args: list[str], codes: tuple[int, ...] = (0, 1)) -> Any:
    """The JSON a command prints on stdout; its exit code must be one of ``codes``."""
    result = runner.invoke(app, args)
    assert result.exit_code in codes, result.output
    return json.loads(result.stdout)
