"""The stored traces of compiled steps (benchmarks/data/tracer_compile*.json) and the benchmark's own builder of a
case's spec (benchmarks/tracer_compile.py ``traced_spec``, which its ``--score`` uses; it imports torch only to
trace), with the small compiled Llama spec the refusal tests start from."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from vramcalc.spec.models import Spec

ROOT = Path(__file__).resolve().parents[1]
_BENCHMARK = importlib.util.spec_from_file_location("tracer_compile", ROOT / "benchmarks" / "tracer_compile.py")
assert _BENCHMARK is not None and _BENCHMARK.loader is not None
tracer_compile = importlib.util.module_from_spec(_BENCHMARK)
_BENCHMARK.loader.exec_module(tracer_compile)


def cases(name: str) -> list[dict[str, Any]]:
    """The cases of ``benchmarks/data/<name>``."""
    loaded: list[dict[str, Any]] = json.loads((ROOT / "benchmarks" / "data" / name).read_text(encoding="utf-8"))[
        "cases"
    ]
    return loaded


def traced_spec(command: str, compile_: bool = True) -> Spec:
    """The spec of a stored case's tracer command line."""
    spec: Spec = tracer_compile.traced_spec(command, compile_)
    return spec


def small_llama(model: dict[str, Any] | None = None, **workload: Any) -> Spec:
    """A 2-layer Llama (h 256, f 688) compiled, batch 1 x 128, bf16 on SDPA, with ``workload`` and ``model`` keys
    changed."""
    base = {
        **tracer_compile.FAMILIES["llama"],
        "layers": 2,
        "hidden_size": 256,
        "heads": 4,
        "ffn_size": 688,
        "vocab_size": 1000,
    }
    wl = {"batch_size": 1, "seq_len": 128, "precision": "bf16", "attention": "sdpa", "compile": True, **workload}
    return Spec.model_validate({"model": {**base, **(model or {})}, "workload": wl})
