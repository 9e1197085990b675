"""shared/calibration/measured.yaml, read once per test process.

Several test modules compare against its cases; parsing its ~850 kB with PyYAML's pure-Python loader
takes ~1.5 s, once per module before. The records are parsed once (with libyaml's loader where PyYAML
has it, which builds the same Python objects) and every caller gets its own deep copy, so no test can
change what another one reads.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import yaml

#: shared/ lies beside the project root (on developer machines and in CI), as tests/conftest.py has it.
MEASURED = Path(__file__).resolve().parents[2] / "shared" / "calibration" / "measured.yaml"


@functools.cache
def _parsed() -> list[dict[str, Any]]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    records: list[dict[str, Any]] = yaml.load(MEASURED.read_text(encoding="utf-8"), Loader=loader)
    return records


def measured_records() -> list[dict[str, Any]]:
    """Every case of measured.yaml, in file order (a fresh copy)."""
    return copy.deepcopy(_parsed())


def measured_case(case_id: str) -> dict[str, Any]:
    """The case of measured.yaml with that id (a fresh copy)."""
    return copy.deepcopy(next(case for case in _parsed() if case["id"] == case_id))
