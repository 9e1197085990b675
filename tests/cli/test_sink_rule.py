"""No line any command writes reads as a CI workflow command or as rich markup, whatever the names.

Each command runs as a user runs it (the console entry point in a fresh interpreter, standard streams as
files, a narrow terminal so long names wrap) on specs whose name and file name carry the payloads: a
leading ``::error::``, ``::`` at many word starts so that wrapped lines start with it, the legacy ``##[``
syntax, and rich markup (``[/]`` crashed four renderers; ``[link=...]`` hid a URL). Every line of standard
output and error is checked: none starts with ``::`` (after spaces) or holds ``##[``, none is a traceback,
and the markup is printed as written. ``check --format github`` emits workflow commands on purpose: there
each line is a well-formed command whose user text is escaped.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
#: Leading ``::``, ``::`` at word starts (wrapped lines), ``##[``, and rich markup, within the 200 characters
#: a spec name may have.
NAME = "::error::a " + " ".join(["::warning::b ##[c] [/] [link=https://x.example]d[/link]"] * 3)
COMMANDS = [
    ["estimate"],
    ["estimate", "--timeline"],
    ["estimate", "--gpu", "t4"],
    ["estimate", "--gpu", "t4", "--json"],
    ["check", "--gpu", "t4"],
    ["check", "--gpu", "t4", "--format", "junit"],
    ["check", "--gpu", "t4", "--format", "markdown"],
    ["fit", "--max-gpus", "2"],
    ["max-batch", "--gpu", "t4"],
    ["sweep", "--batch-size", "1,2", "--gpu", "t4"],
    ["plan", "--gpu", "t4", "--max-gpus", "2"],
    ["bandwidth", "--gpu", "t4"],
    ["compare", "--measured", "10GiB"],
]
GITHUB = ["check", "--gpu", "t4", "--format", "github"]
WORKFLOW_COMMAND = re.compile(r"^::(error|warning|notice)( [^:]*)?::")


def _spec(tmp_path: Path, config: str) -> Path:
    doc = yaml.safe_load((ROOT / "configs" / config).read_text(encoding="utf-8"))
    doc["name"] = NAME
    folder = tmp_path / "::error::dir ##[x]"
    folder.mkdir(exist_ok=True)
    path = folder / f"##[evil]::{config}"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def _run(args: list[str]) -> tuple[int, list[str]]:
    env = {**os.environ, "COLUMNS": "60", "NO_COLOR": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "vramcalc", *args], capture_output=True, text=True, env=env, timeout=120, cwd=ROOT
    )
    return done.returncode, (done.stdout + done.stderr).splitlines()


@pytest.mark.parametrize("config", ["gpt2.yaml", "llama-3-8b-inference.yaml"])
@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_no_line_is_a_workflow_command_or_markup(tmp_path: Path, config: str, command: list[str]) -> None:
    spec = _spec(tmp_path, config)
    code, lines = _run([command[0], str(spec), *command[1:]])
    assert code in (0, 1, 2), lines
    for line in lines:
        assert not line.lstrip(" ").startswith("::"), line
        assert "##[" not in line, line
        assert "Traceback" not in line and "MarkupError" not in line, line
    text = "\n".join(lines)
    if "--json" not in command and command[0] not in ("check", "compare", "fit"):  # those show the file name
        assert "[/]" in text  # the markup is shown as written, not obeyed


def test_github_format_lines_are_well_formed_commands(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "gpt2.yaml")
    code, lines = _run([GITHUB[0], str(spec), *GITHUB[1:]])
    assert code in (0, 1)
    for line in lines:
        if line.lstrip(" ").startswith("::"):
            assert WORKFLOW_COMMAND.match(line), line
            assert "::warning::b" not in line and "::error::a" not in line[2:], line  # the name is escaped
        assert "##[" not in line, line
