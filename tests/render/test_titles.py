"""The titles of `plan` and `fit` are lines of their own: whole on one line when they fit the terminal,
else wrapped between words at the terminal's width (never at the narrower table's), continuation lines
indented."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from vramcalc.cli import app

runner = CliRunner()
CONFIGS = Path(__file__).resolve().parents[2] / "configs"
LLAMA = str(CONFIGS / "llama-3-8b.yaml")
#: The plan title of llama-3-8b on an A100 80GB SXM4: the spec's name, the card's name, its usable memory.
PLAN_TITLE = "llama-3-8b on NVIDIA A100 80GB SXM4: 80.000 GiB available per GPU"


def _lines(args: list[str], width: int) -> list[str]:
    result = runner.invoke(app, args, env={"COLUMNS": str(width), "TERMINAL_WIDTH": str(width)})
    assert result.exit_code in (0, 1), result.output
    return [line.rstrip() for line in result.stdout.splitlines()]


def _title(lines: list[str]) -> tuple[str, list[str]]:
    """The title's lines (the first and its indented continuations) joined as one text, and the lines."""
    taken = [lines[0], *_continuations(lines[1:])]
    return " ".join(line.strip() for line in taken), taken


def _continuations(lines: list[str]) -> list[str]:
    found = []
    for line in lines:
        if not line.startswith("  ") or not line.strip():
            break
        found.append(line)
    return found


@pytest.mark.parametrize("width", [80, 120])
def test_plan_title_is_one_line_at_80_and_120_columns(width: int) -> None:
    lines = _lines(["plan", LLAMA, "--gpu", "a100-80gb-sxm"], width)
    assert lines[0] == PLAN_TITLE
    assert not lines[1].strip()  # the table follows: nothing of the title on the next line


@pytest.mark.parametrize("width", [80, 120])
def test_fit_title_is_one_line_at_80_and_120_columns(width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(CONFIGS)  # fit names the file: a short relative path, whatever the checkout's depth
    lines = _lines(["fit", "llama-3-8b.yaml"], width)
    assert lines[0].startswith("llama-3-8b (")
    assert lines[0].endswith(": fits on 52 of 72 cards")
    assert lines[1].startswith("┏")  # the table's top border: the title took one line


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("command", ["plan", "fit"])
def test_a_long_title_wraps_between_words_at_the_terminal_width(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, width: int, command: str
) -> None:
    # A spec name of 10 words (169 characters): the title is longer than either width, so it wraps; every line holds
    # whole words and is at most the terminal's width, and the words come back in order.
    name = " ".join(f"word{i:02d}-long-name" for i in range(10))
    text = (CONFIGS / "llama-3-8b.yaml").read_text(encoding="utf-8").replace("name: llama-3-8b", f"name: {name}")
    (tmp_path / "long.yaml").write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # fit names the file: a short relative path, no word wider than the terminal
    args = ["plan", "long.yaml", "--gpu", "a100-80gb-sxm"] if command == "plan" else ["fit", "long.yaml"]
    lines = _lines(args, width)
    joined, taken = _title(lines)
    assert len(taken) > 1
    assert joined.startswith(name + " ")
    assert all(len(line) <= width for line in taken)
    words = joined.split()
    assert all(word.startswith("word") and word.endswith("-long-name") for word in words[:10])
    # wrapped at the terminal's width, not a table's: each line but the last has no room for the next word
    for line, following in zip(taken, taken[1:], strict=False):
        assert len(line) + 1 + len(following.split()[0]) > width
