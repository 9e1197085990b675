"""Run a command of the CLI in-process and read its JSON document."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from vramcalc.cli import app

runner = CliRunner()


def run_json(args: list[str], codes: tuple[int, ...] = (0, 1)) -> Any:
    """The JSON a command prints on stdout; its exit code must be one of ``codes``."""
    result = runner.invoke(app, args)
    assert result.exit_code in codes, result.output
    return json.loads(result.stdout)


def run(*args: object) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of a command."""
    result = runner.invoke(app, [str(arg) for arg in args])
    return result.exit_code, result.stdout, result.stderr


def doc_without_input(*args: object, codes: tuple[int, ...] = (0, 1)) -> Any:
    """The JSON document of a command without the key that names its input (a path or ``--model NAME``), so
    a run on a spec file and a run on ``--model`` and flags compare equal."""
    code, out, err = run(*args)
    assert code in codes, err
    document = json.loads(out)
    if isinstance(document, dict):
        document.pop("spec", None)
    return document


def model_spec(folder: Path, model: str, workload: dict[str, Any], file: str = "spec.yaml", **more: Any) -> Path:
    """The spec a ``--model`` run stands for, written by hand: ``model: NAME`` and the workload keys (and any
    other section, such as ``target``)."""
    path = folder / file
    text = {"name": model, "model": model, "workload": workload, **more}
    path.write_text(yaml.safe_dump(text, sort_keys=False), encoding="utf-8")
    return path
