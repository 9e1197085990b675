"""The stored traces of torchtune's own training loop (benchmarks/data/tracer_torchtune*.json): each case keeps
the spec vramcalc runs for it and the peak the shared tracer measured on fake CUDA tensors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vramcalc.families import estimate
from vramcalc.spec.load import parse_spec
from vramcalc.spec.models import Spec

DATA = Path(__file__).resolve().parents[1] / "benchmarks" / "data"


def cases(name: str) -> list[dict[str, Any]]:
    """The cases of ``benchmarks/data/<name>``."""
    loaded: list[dict[str, Any]] = json.loads((DATA / name).read_text(encoding="utf-8"))["cases"]
    return loaded


def spec_of(case: dict[str, Any], **workload: Any) -> Spec:
    """The case's spec, with ``workload`` keys changed."""
    return parse_spec({"name": case["id"], "model": case["model"], "workload": {**case["workload"], **workload}})


def error_of(case: dict[str, Any]) -> float:
    """vramcalc's allocated peak against the traced one (the traces' cuBLAS workspaces are an H100's)."""
    got = estimate(spec_of(case), hopper_or_newer=True).peak_allocated_bytes
    return float(got / case["peak_bytes"] - 1)
