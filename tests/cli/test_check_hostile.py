"""`vramcalc check` and friends on hostile file names, spec names and messages, end to end: real files
whose names hold line breaks, workflow commands, escape sequences, non-characters, undecodable bytes
and HTML. GitHub Actions reads stdout and stderr: no line but the one command per finding may be read as
a workflow command (a line starting with ``::`` after white space, or holding ``##[``); JUnit must parse;
Markdown must hold no HTML but its own ``<sub>``; stderr has one printable ``error:`` line per problem."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner, Result

from vramcalc.cli import app
from vramcalc.cli._common import notes_to_stderr, user_errors
from vramcalc.errors import SpecError

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "check"
#: The example specs without their ``name``, so that the file's stem is the spec's name.
FITS_TEXT = re.sub(r"(?m)^name: .*\n", "", (EXAMPLES / "gpt2-a100.yaml").read_text())
TOO_BIG_TEXT = re.sub(r"(?m)^name: .*\n", "", (EXAMPLES / "bert-large-v100.yaml").read_text())
IMG = "<img src=x onerror=alert(1)>"
#: File names (Linux allows every byte but "/" and NUL).
MASK = "a\n::add-mask::secret.yaml"  # fits
HTML = f"::c\r##[error]x{IMG}|\ufffe\uffff.yaml"  # does not fit
ESCAPES = "[red]x[bold]\x1b[31m\u202e.yaml"  # fits
BAD = "b\x1b]0;title\x07 ::warning::x.yaml"  # one problem: an unknown key


def run(*args: str) -> Result:
    return runner.invoke(app, list(args))


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    """A directory of specs with hostile names: three checkable, one with one bad key."""
    for name, text in ((MASK, FITS_TEXT), (HTML, TOO_BIG_TEXT), (ESCAPES, FITS_TEXT)):
        (tmp_path / name).write_text(text)
    (tmp_path / BAD).write_text(FITS_TEXT + f"'{IMG}': 1\n")
    return tmp_path


def check(directory: Path, fmt: str) -> Result:
    result = run("check", str(directory), "--format", fmt)
    assert result.exit_code == 2, result.output  # the bad file: not a pass
    return result


def command_lines(text: str) -> list[str]:
    """Lines the GitHub Actions runner reads as workflow commands."""
    return [line for line in text.splitlines() if line.lstrip().startswith("::") or "##[" in line]


def assert_clean_stderr(stderr: str, n_errors: int) -> None:
    lines = stderr.splitlines()
    assert stderr.endswith("\n") and all(line.isprintable() for line in lines)
    assert all(line.startswith(("error: ", "note: ", "  ")) for line in lines)  # "  ": a wrapped note goes on
    assert sum(line.startswith("error: ") for line in lines) == n_errors
    assert command_lines(stderr) == []


def test_github_format_one_command_per_finding(hostile: Path) -> None:
    result = check(hostile, "github")
    commands = command_lines(result.stdout)
    # Two findings: the spec that does not fit and the bad key; nothing else is a command.
    assert len(commands) == 2 and all(line.startswith("::error file=") for line in commands)
    assert all(line.isprintable() for line in result.stdout.splitlines())
    too_big = next(line for line in commands if "does not fit" in line)
    # The runner splits at the first "::" after the command and turns %0D back into CR, so the file
    # property names the file; the non-characters are shown as escapes, and so is the "[" of "##[",
    # which GitHub reads as a command anywhere in a line.
    shown = str(hostile / HTML).replace("\ufffe", "\\ufffe").replace("\uffff", "\\uffff").replace("##[", "##\\x5b")
    assert too_big.startswith("::error file=" + shown.replace(":", "%3A").replace("\r", "%0D") + ",title=")
    assert "##[" not in too_big
    ok = [line for line in result.stdout.splitlines() if line.startswith("ok: ")]
    assert len(ok) == 2 and any("a\\n::add-mask::secret.yaml" in line for line in ok)
    assert_clean_stderr(result.stderr, 1)
    assert f"{IMG}: unknown key" in result.stderr


def test_junit_format_parses_and_shows_the_names(hostile: Path) -> None:
    result = check(hostile, "junit")
    root = ET.fromstring(result.stdout.encode("utf-8"))
    cases = root.findall("testsuite/testcase")
    names = {case.get("name") for case in cases}
    # The spec's name is its file's stem; U+FFFE and U+FFFF are not XML characters: shown as escapes.
    assert f"::c\\r##[error]x{IMG}|\\ufffe\\uffff on v100-16gb-sxm2" in names
    assert "a\\n::add-mask::secret on a100-80gb-sxm" in names
    error = root.find("testsuite/testcase/error")
    assert error is not None and f"{IMG}: unknown key" in (error.get("message") or "")
    assert_clean_stderr(result.stderr, 1)


def test_markdown_format_holds_no_html(hostile: Path) -> None:
    result = check(hostile, "markdown")
    assert re.findall(r"<[^>]*>", result.stdout) == ["<sub>", "</sub>"]
    assert "&lt;img src=x onerror=alert(1)&gt;" in result.stdout
    rows = [line for line in result.stdout.splitlines() if line.startswith("| ") and "(GiB)" not in line]
    assert len(rows) == 4
    for row in rows:  # 7 cell borders: every other pipe is escaped
        assert len(re.findall(r"(?<!\\)(?:\\\\)*\|", row)) == 7
    assert all(line.isprintable() for line in result.stdout.splitlines())


def test_table_and_json_formats(hostile: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(hostile)  # short paths: the table folds long ones
    table = check(Path("."), "table")
    assert all(line.isprintable() for line in table.stdout.splitlines())
    assert "[red]x[bold]" in table.stdout  # shown, not read as rich markup
    assert command_lines(table.stdout) == []
    docs = json.loads(check(hostile, "json").stdout, parse_constant=lambda name: pytest.fail(name))
    assert {doc["spec"] for doc in docs} == {str(hostile / name) for name in (MASK, HTML, ESCAPES, BAD)}


def test_undecodable_file_name(tmp_path: Path) -> None:
    path = os.path.join(os.fsencode(tmp_path), b"\xff\xfe-bad.yaml")
    with open(path, "wb") as file:
        file.write(b"model: [unclosed\n")
    name = os.fsdecode(path)  # what the command line holds: lone surrogates U+DCFF U+DCFE
    for fmt in ("github", "junit", "markdown", "table"):
        result = run("check", name, "--format", fmt)
        assert result.exit_code == 2
        for stream in (result.stdout, result.stderr):
            stream.encode("utf-8")  # no lone surrogate reaches an output
            assert "\\udcff\\udcfe-bad.yaml" in stream
        assert_clean_stderr(result.stderr, 1)
    doc = json.loads(run("check", name, "--format", "json").stdout)
    assert doc[0]["spec"] == name and doc[0]["fits"] is None


def test_a_line_break_in_a_file_name_never_splits_an_error(tmp_path: Path) -> None:
    path = tmp_path / "bad\n::error ::pwned.yaml"
    path.write_text("model: [unclosed\n")
    for command in ("estimate", "fit", "max-batch", "report"):
        result = run(command, str(path))
        assert result.exit_code == 2, result.output
        (line,) = result.stderr.splitlines()
        assert line.startswith(f"error: {tmp_path}/bad\\n::error ::pwned.yaml: invalid YAML")
    for fmt in ("github", "junit", "markdown", "json"):
        result = run("check", str(path), "--format", fmt)
        assert result.exit_code == 2
        assert command_lines(result.stderr) == []
        assert len(result.stderr.splitlines()) == 1  # one problem: one line, the name shown escaped
        assert len(command_lines(result.stdout)) == (1 if fmt == "github" else 0)


def test_planning_commands_show_names_as_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("[bold]x\n::add-mask::y.yaml").write_text(FITS_TEXT.replace("target:", "name: a[/x]\ntarget:", 1))
    for args in (["fit"], ["max-batch"], ["max-seq"], ["sweep", "--batch-size", "1,2"]):
        result = run(*args, "[bold]x\n::add-mask::y.yaml")  # "[/x]" was read as rich markup: a traceback
        assert result.exit_code in (0, 1), result.output
        assert "a[/x] ([bold]x\\n::add-mask::y.yaml)" in " ".join(result.stdout.split())
        assert command_lines(result.stdout) == []


def test_user_errors_one_bounded_line_per_problem(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit), user_errors("in\n::x.yaml"):
        raise SpecError("in\n::x.yaml: name: " + "v" * 3_000_000 + "\nkey\x1b[2J: unknown key")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and all(line.isprintable() and len(line) <= 2_000 for line in lines)
    assert lines[0].startswith("error: in\\n::x.yaml: name: vvv") and lines[0].endswith("vvv")
    assert lines[1] == "error: in\\n::x.yaml: key\\x1b[2J: unknown key"
    notes_to_stderr(["::add-mask::x", "card\r##[warning]y"])
    assert capsys.readouterr().err == "note: ::add-mask::x\nnote: card\\r##\\x5bwarning]y\n"


def test_usage_errors_are_one_escaped_line() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = ["check", "x.yaml", "--\x1b[31m\n::add-mask::y"]
    result = subprocess.run(
        [sys.executable, "-m", "vramcalc", *args], capture_output=True, text=True, env=env, check=False
    )
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: No such option: --\\x1b[31m") and line.endswith("::add-mask::y")
    assert line.isprintable() and command_lines(line) == []
