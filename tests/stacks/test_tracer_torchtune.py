"""torchtune's LoRA and QLoRA recipe against the allocator-level tracer (benchmarks/data/tracer_torchtune.json).

The references are exact ``torch.cuda.max_memory_allocated()`` peaks of two steps of torchtune 0.6.1's
``lora_finetune_single_device`` loop on torchtune's own ``lora_llama3_2`` decoder (torchao 0.14.1's
``NF4Tensor`` for QLoRA) on fake CUDA tensors (benchmarks/tracer_torchtune.py, regenerated with
``/tmp/tracer-venv/bin/python benchmarks/tracer_torchtune.py --regenerate``). No torch is needed here: the test
reads the stored results.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from vramcalc.families import estimate
from vramcalc.spec.load import parse_spec

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "tracer_torchtune.json"
#: Each case within 5 %, their median within 2 %.
TOLERANCE, MEDIAN = 0.05, 0.02


def _cases() -> list[dict[str, Any]]:
    return json.loads(DATA.read_text(encoding="utf-8"))["cases"]


def _error(case: dict[str, Any]) -> float:
    spec = parse_spec({"name": case["id"], "model": case["model"], "workload": case["workload"]})
    got = estimate(spec, hopper_or_newer=True).peak_allocated_bytes  # the cases' cuBLAS workspace is an H100's
    return float(got / case["peak_bytes"] - 1)


def test_cases_cover_lora_qlora_checkpointing_chunked_loss_and_offloading() -> None:
    cases = _cases()
    workloads = [c["workload"] for c in cases]
    assert len(cases) >= 8 and len({c["model"]["hidden_size"] for c in cases}) == 2
    assert any("quantization" in w for w in workloads) and any("quantization" not in w for w in workloads)
    for key in ("gradient_checkpointing", "cross_entropy", "activation_offloading"):
        assert any(key in w for w in workloads) and any(key not in w for w in workloads)
    assert all(w["adapter"]["framework"] == "torchtune" for w in workloads)


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["id"])
def test_peak_against_tracer(case: dict[str, Any]) -> None:
    error = _error(case)
    assert abs(error) <= TOLERANCE, (case["id"], error)


def test_median_error() -> None:
    assert statistics.median(abs(_error(c)) for c in _cases()) <= MEDIAN


def test_traced_trainable_parameters_are_the_adapters() -> None:
    """torchtune's trainable count is rank x (in + out) per adapted linear (Hu et al.; ``LoRALinear``'s
    lora_a: rank x in, lora_b: out x rank), for the 1B-width r64 case: q (2048 -> 2048), v (2048 -> 512),
    output_proj (2048 -> 2048), w1 and w3 (2048 -> 8192), w2 (8192 -> 2048), in 4 layers:
    64 x (4096 + 2560 + 4096 + 10240 + 10240 + 10240) x 4 = 10,616,832."""
    case = next(c for c in _cases() if c["id"].startswith("1b-qvo-mlp-r64-plain"))
    assert case["trainable"] == 64 * (4096 + 2560 + 4096 + 3 * 10240) * 4 == 10_616_832
