"""Every command on every bundled example spec ends with exit 0, 1 or 2 and never a traceback: the
commands share the spec types, and a new model key or path must hold on each of them (a ResNet spec once
reached a transformer-only code path in `bandwidth`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from vramcalc.cli import app

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
COMMANDS = [
    ["estimate", "{spec}", "--gpu", "a100-80gb-sxm", "--timeline"],
    ["bandwidth", "{spec}", "--gpu", "h100-sxm", "--batch", "8"],
    ["max-batch", "{spec}", "--gpu", "rtx-4090"],
    ["max-seq", "{spec}", "--gpu", "rtx-4090"],
    ["plan", "{spec}", "--gpu", "a100-40gb-sxm", "--gpus", "8"],
    ["check", "{spec}", "--gpu", "48GiB", "--format", "json"],
]


@pytest.mark.parametrize("spec", CONFIGS, ids=[path.stem for path in CONFIGS])
@pytest.mark.parametrize("command", COMMANDS, ids=[command[0] for command in COMMANDS])
def test_command_on_bundled_spec(command: list[str], spec: Path) -> None:
    args = [str(spec) if arg == "{spec}" else arg for arg in command]
    result = CliRunner().invoke(app, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (0, 1, 2), result.output
    if result.exit_code == 2:  # bad input is one error line per problem, never a traceback
        assert all(line.startswith(("error: ", "note: ", "  ")) for line in result.stderr.splitlines())
