"""torchtune's LoRA and QLoRA recipe and its full fine-tuning against the allocator-level tracer
(benchmarks/data/tracer_torchtune.json, tracer_torchtune_full.json).

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
from torchtune_traces import error_of

from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.spec.load import parse_spec

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "tracer_torchtune.json"
#: Full fine-tuning (``runtime: torchtune``, ``mode: train``): ``full_finetune_single_device`` on torchtune's own
#: ``llama3_2`` decoder (``benchmarks/tracer_torchtune.py --regenerate-full``).
DATA_FULL = DATA.with_name("tracer_torchtune_full.json")
#: Each case within 5 %, their median within 2 %.
TOLERANCE, MEDIAN = 0.05, 0.02


def _cases() -> list[dict[str, Any]]:
    return json.loads(DATA.read_text(encoding="utf-8"))["cases"]


def _full_cases() -> list[dict[str, Any]]:
    return json.loads(DATA_FULL.read_text(encoding="utf-8"))["cases"]


_error = error_of


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


def test_full_cases_cover_both_widths_and_the_recipes_techniques() -> None:
    cases = _full_cases()
    workloads = [c["workload"] for c in cases]
    assert len(cases) >= 6 and {c["model"]["hidden_size"] for c in cases} == {2048, 3072}
    for key in ("gradient_checkpointing", "cross_entropy", "activation_offloading", "optimizer_in_backward"):
        assert any(key in w for w in workloads) and any(key not in w for w in workloads)
    assert all(w["runtime"] == "torchtune" and "adapter" not in w for w in workloads)


@pytest.mark.parametrize("case", _full_cases(), ids=lambda c: c["id"])
def test_full_fine_tuning_peak_against_tracer(case: dict[str, Any]) -> None:
    assert abs(_error(case)) <= TOLERANCE, case["id"]


def test_full_fine_tuning_median_error() -> None:
    assert statistics.median(abs(_error(c)) for c in _full_cases()) <= MEDIAN


def test_traced_trainable_parameters_are_the_whole_model() -> None:
    """Every parameter trains: for the 1B-width case (4 layers) the tied embedding 128256 x 2048, per layer
    q and output_proj 2048 x 2048 each, k and v 512 x 2048 each (8 K/V heads of 64), w1, w2, w3 8192 x 2048
    each, two norms of 2048; the final norm 2048 (torchtune/models/llama3_2/_component_builders.py ``llama3_2``):
    262,668,288 + 4 x (2 x 4,194,304 + 2 x 1,048,576 + 3 x 16,777,216 + 4,096) + 2,048 = 505,956,352."""
    case = next(c for c in _full_cases() if c["model"]["hidden_size"] == 2048)
    assert case["trainable"] == 262_668_288 + 4 * (2 * 4_194_304 + 2 * 1_048_576 + 3 * 16_777_216 + 4_096) + 2_048


def _spec(**workload: Any) -> dict[str, Any]:
    model = {
        "architecture": "decoder", "layers": 2, "hidden_size": 2048, "heads": 32, "kv_heads": 8, "ffn_size": 8192,
        "mlp": "swiglu", "norm": "rmsnorm", "position": "rotary", "vocab_size": 128256, "tie_embeddings": True,
    }  # fmt: skip
    base = {"mode": "train", "batch_size": 1, "seq_len": 512, "precision": "bf16", "runtime": "torchtune"}
    return {"name": "t", "model": model, "workload": base | workload}


@pytest.mark.parametrize(
    ("workload", "field"),
    [
        ({"compile": True}, "workload.compile"),
        ({"attention": "eager"}, "workload.attention"),
        ({"precision": "fp32"}, "workload.precision"),
        ({"adapter": {"framework": "peft", "rank": 8}}, "workload.adapter.framework"),
        ({"keep_outputs": True}, "workload.keep_outputs"),
    ],
)
def test_full_fine_tuning_refused_in_one_line(workload: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError, match=field):
        estimate(parse_spec(_spec(**workload)))


def test_rope_cache_counted_with_the_parameters() -> None:
    """The fp32 RoPE cache of 131,072 positions x head_dim 64 x 4 B = 33,554,432 B and theta (32 x 4 B, one
    512-byte block) sit beside the parameters (``RotaryPositionalEmbeddings.build_rope_cache``)."""
    spec = _spec()
    spec["model"]["max_position_embeddings"] = 131072
    with_cache = estimate(parse_spec(spec)).component_peaks["parameters"]
    spec["workload"].pop("runtime")
    assert with_cache - estimate(parse_spec(spec)).component_peaks["parameters"] == 33_554_432 + 512
