"""torchtune's LoRA and QLoRA recipe with ``compile: true`` against the allocator-level tracer
(benchmarks/data/tracer_torchtune_compile.json).

The references are exact ``torch.cuda.max_memory_allocated()`` peaks of the second step of torchtune 0.6.1's
``lora_finetune_single_device`` loop on torchtune's own ``lora_llama3_2`` decoder, each layer and the chunked
loss compiled through AOTAutograd with inductor's decompositions and partitioner (benchmarks/
tracer_torchtune_compile.py, regenerated with ``/tmp/tracer-venv/bin/python benchmarks/tracer_torchtune_compile.py
--regenerate``). No torch is needed here: the test reads the stored results.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from torchtune_traces import error_of, spec_of

from vramcalc.errors import SpecError
from vramcalc.families import estimate

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "tracer_torchtune_compile.json"
#: Each case within 5 %, their median within 2 %.
TOLERANCE, MEDIAN = 0.05, 0.02


def _cases() -> list[dict[str, Any]]:
    cases = json.loads(DATA.read_text(encoding="utf-8"))["cases"]
    return [c for c in cases if "adapter" in c["workload"]]  # the LoRA recipe's (full fine-tuning: its own test)


_spec, _error = spec_of, error_of


def test_cases_cover_lora_qlora_checkpointing_and_offloading() -> None:
    workloads = [c["workload"] for c in _cases()]
    assert len(workloads) >= 6 and all(w["compile"] and w["adapter"]["framework"] == "torchtune" for w in workloads)
    assert any("quantization" in w for w in workloads) and any("quantization" not in w for w in workloads)
    for key in ("gradient_checkpointing", "activation_offloading"):
        assert any(key in w for w in workloads) and any(key not in w for w in workloads)


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["id"])
def test_peak_against_tracer(case: dict[str, Any]) -> None:
    error = _error(case)
    assert abs(error) <= TOLERANCE, (case["id"], error)


def test_median_error() -> None:
    assert statistics.median(abs(_error(c)) for c in _cases()) <= MEDIAN


def test_qlora_layer_keeps_dequantized_weights() -> None:
    """The traced compiled layer under QLoRA keeps, beyond the LoRA layer's tensors, the 16-bit dequantized
    weights of q_proj and output_proj (2048 x 2048 each), k_proj and v_proj (512 x 2048) and two of the MLP's
    (8192 x 2048): 2 x (2 x 4,194,304 + 2 x 1,048,576 + 2 x 16,777,216) = 88,080,384 bytes."""
    by_id = {c["id"]: c["compiled"]["block"]["saved_bytes"] for c in _cases()}
    lora = by_id["compile-1b-qvo-mlp-r64-chunked-b1-s1024"]
    qlora = by_id["compile-1b-qvo-mlp-r64-qlora-chunked-b1-s1024"]
    assert qlora - lora == 2 * (2 * 4_194_304 + 2 * 1_048_576 + 2 * 16_777_216) == 88_080_384


def test_plain_cross_entropy_and_partial_mlp_refused() -> None:
    case = _cases()[0]
    with pytest.raises(SpecError, match="cross_entropy: chunked"):
        estimate(_spec(case, cross_entropy="standard"))
    adapter = {**case["workload"]["adapter"], "targets": ["q_proj", "v_proj", "w1"]}
    with pytest.raises(SpecError, match="w1, w2, w3"):
        estimate(_spec(case, adapter=adapter))


def test_other_adapter_frameworks_still_refused() -> None:
    case = _cases()[0]
    adapter = {"rank": 8, "alpha": 16, "targets": ["q_proj", "v_proj"], "framework": "litgpt"}
    with pytest.raises(SpecError, match="workload.compile"):
        estimate(_spec(case, adapter=adapter, cross_entropy="standard"))


def test_note_describes_the_adapter_layer() -> None:
    """The compile note under torchtune's adapters says what its compiled layer keeps, not the dense block's."""
    notes = " ".join(estimate(_spec(_cases()[0])).assumptions)
    assert "LoRALinear: no frozen base matmul keeps its input" in notes
    assert "norm outputs and statistics" not in notes
