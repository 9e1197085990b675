"""Deterministic rich output for CLI tests; set before vramcalc.cli.app (and typer) are imported.

Layout: tests/<sub-package>/ holds the tests of vramcalc/<sub-package>/, tests/ itself those of the
top-level modules. The folders have no __init__.py (pytest's default "prepend" import mode), so every
test file's basename must be unique across folders. Loading this conftest puts tests/ on sys.path, which
is how test modules in any folder import tests/spec_texts.py.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ["TERMINAL_WIDTH"] = "200"
os.environ["_TYPER_FORCE_DISABLE_TERMINAL"] = "1"
os.environ["NO_COLOR"] = "1"
os.environ["COLUMNS"] = "200"
for var in ("FORCE_COLOR", "PY_COLORS", "GITHUB_ACTIONS"):
    os.environ.pop(var, None)

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"
#: shared/ lies beside the project root (on developer machines and in CI).
CALIBRATION = ROOT.parent / "shared" / "calibration"


@pytest.fixture
def write_spec(tmp_path: Path):
    """Write a YAML text to a file and return its path."""

    def write(text: str, name: str = "spec.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write
