"""Deterministic rich output for CLI tests; set before vramcalc.cli.main (and typer) are imported.

Layout: tests/<sub-package>/ holds the tests of vramcalc/<sub-package>/, tests/ itself those of the
top-level modules. The folders have no __init__.py (pytest's default "prepend" import mode), so every
test file's basename must be unique across folders. Loading this conftest puts tests/ on sys.path, which
is how test modules in any folder import tests/spec_texts.py.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

os.environ["TERMINAL_WIDTH"] = "200"
os.environ["_TYPER_FORCE_DISABLE_TERMINAL"] = "1"
os.environ["NO_COLOR"] = "1"
os.environ["COLUMNS"] = "200"
for var in ("FORCE_COLOR", "PY_COLORS", "GITHUB_ACTIONS"):
    os.environ.pop(var, None)
# No test reaches the Hub: its address is a local port where nothing listens (a look-up fails at once), and
# the Hugging Face and vramcalc caches are this run's own, empty, never the machine's. The Hub's own tests
# (tests/sources/) start a local stand-in and point HF_ENDPOINT at it.
_CACHES = tempfile.mkdtemp(prefix="vramcalc-tests-")
os.environ |= {
    "HF_ENDPOINT": "http://127.0.0.1:9",
    "HF_HOME": os.path.join(_CACHES, "hf"),
    "HF_HUB_CACHE": os.path.join(_CACHES, "hf", "hub"),
    "VRAMCALC_CACHE": os.path.join(_CACHES, "vramcalc"),
    "HF_HUB_DISABLE_TELEMETRY": "1",
}
for var in ("HF_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HUGGINGFACE_HUB_CACHE"):
    os.environ.pop(var, None)

import pytest  # noqa: E402
import typer.testing  # noqa: E402

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


# -- CliRunner().invoke(app, ...) builds the click command behind a typer app once ------------------------
# typer's CliRunner rebuilds the whole command tree (every command's parameters, from its signature and
# type hints) on each invoke: ~16 ms, some 1,500 times a run. The tree depends only on what is registered
# on the app, which is fixed once vramcalc.cli is imported; vramcalc's own entry point (run()) builds it
# once per process too. So the tree is built once per app, and again if a command, group or callback is
# registered on that app later. (tests/fuzz/fuzz_support.invoke keeps a cache of its own for the same
# reason.)
_build_command = typer.testing._get_command
_built: dict[int, tuple[typer.Typer, tuple[object, ...], Any]] = {}


def _registrations(app: typer.Typer) -> tuple[object, ...]:
    return (app.registered_callback, app.info.callback, *app.registered_commands, None, *app.registered_groups)


def _command_of(app: typer.Typer) -> Any:
    registrations = _registrations(app)
    seen = _built.get(id(app))
    if seen is not None and seen[0] is app and len(seen[1]) == len(registrations):
        if all(old is new for old, new in zip(seen[1], registrations, strict=True)):
            return seen[2]
    command = _build_command(app)
    _built[id(app)] = (app, registrations, command)  # holding the app keeps its id from being reused
    return command


typer.testing._get_command = _command_of
