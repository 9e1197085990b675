"""Layering: the core imports neither typer nor rich (checked in a fresh interpreter)."""

from __future__ import annotations

import subprocess
import sys

CORE = [
    "vramcalc",
    "vramcalc.units",
    "vramcalc.errors",
    "vramcalc.spec.models",
    "vramcalc.files",
    "vramcalc.core.shape",
    "vramcalc.core.activations",
    "vramcalc.core.dense",
    "vramcalc.core.optimizer",
    "vramcalc.core.symbolic",
    "vramcalc.planning.batch_totals",
    "vramcalc.planning.limits",
    "vramcalc.hardware.catalog",
    "vramcalc.core.timeline",
    "vramcalc.planning.compare",
    "vramcalc.hardware.local",
]


def test_core_does_not_import_cli_libraries() -> None:
    code = (
        f"import sys; import {', '.join(CORE)}; "
        "bad = [m for m in ('typer', 'rich', 'click', 'torch') if m in sys.modules]; print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_estimate_path_does_not_import_yaml_catalog_or_torch_eagerly() -> None:
    code = "import sys, vramcalc.cli.app; print(','.join(m for m in ('torch', 'numpy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
