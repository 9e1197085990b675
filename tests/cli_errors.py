"""The one-line error of ``vramcalc estimate`` on a spec file: exit 2, one line naming the file."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from vramcalc.cli import app


def estimate_error_line(path: Path, spec_text: str) -> str:
    """Write ``spec_text`` to ``path``, run ``vramcalc estimate`` on it and return its one error line, after
    checking the exit status (2), that stderr holds that line only and that it names the file."""
    path.write_text(spec_text, encoding="utf-8")
    result = CliRunner().invoke(app, ["estimate", str(path)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(path) in lines[0], lines
    return lines[0]
