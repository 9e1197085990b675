"""Docs are tests: every `console` block of the README and of docs/*.md is what the command prints now,
and every command is documented in the README and has help text."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from vramcalc.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```console\n\$ vramcalc (?P<args>[^\n]+)\n(?P<body>.*?)```", re.S)


def _blocks() -> list[tuple[str, str]]:
    return [(m["args"], m["body"]) for doc in DOCS for m in BLOCK.finditer(doc.read_text(encoding="utf-8"))]


def test_readme_has_console_examples() -> None:
    assert len(_blocks()) >= 5


@pytest.mark.parametrize(("args", "body"), _blocks(), ids=[a for a, _ in _blocks()])
def test_readme_shows_real_output(args: str, body: str) -> None:
    # The README blocks were generated at a 120-column terminal, from the repository root.
    import os

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        result = runner.invoke(app, shlex.split(args), env={"COLUMNS": "120", "TERMINAL_WIDTH": "120"})
    finally:
        os.chdir(cwd)
    expected, _, code = body.partition("$ echo $?\n")
    assert result.exit_code == (int(code) if code else 0), result.output
    lines = [line.rstrip() for line in (result.stderr + result.stdout).splitlines()]
    assert "\n".join(lines).rstrip() == expected.rstrip()


def _commands() -> list[str]:
    group = typer.main.get_command(app)
    return sorted(group.commands)  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", _commands())
def test_every_command_documented(name: str) -> None:
    assert f"vramcalc {name}" in README.read_text(encoding="utf-8")
    result = runner.invoke(app, [name, "--help"])
    assert result.exit_code == 0, result.output
    group = typer.main.get_command(app)
    assert group.commands[name].help  # type: ignore[attr-defined]


def test_readme_set_up_commands_match_ci() -> None:
    readme = README.read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    test_command = (
        'python3 -m venv .venv && . .venv/bin/activate && python -m pip install -q -e ".[test]" '
        "&& ruff check . && ruff format --check . && mypy && python -m pytest"
    )
    assert test_command in readme and test_command in ci  # the quality gates run in CI too
    assert "vramcalc estimate configs/bert-base.yaml" in readme
