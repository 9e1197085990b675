"""LoRA / QLoRA: trainable parameters as peft counts them, frozen-base memory, tracer references."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.spec.load import parse_spec

ROOT = Path(__file__).resolve().parents[2]
TRACER_LLM = ROOT / "benchmarks" / "data" / "tracer_llm.json"
LLAMA32_3B = {
    "architecture": "decoder", "layers": 28, "hidden_size": 3072, "heads": 24, "kv_heads": 8, "ffn_size": 8192,
    "mlp": "swiglu", "vocab_size": 128256, "tie_embeddings": True,
}  # fmt: skip
LLAMA2_7B = {
    "architecture": "decoder", "layers": 32, "hidden_size": 4096, "heads": 32, "ffn_size": 11008,
    "mlp": "swiglu", "vocab_size": 32000, "tie_embeddings": False,
}  # fmt: skip


def spec(model: dict[str, Any], adapter: dict[str, Any], **workload: Any) -> Any:
    wl = {"mode": "train", "batch_size": 4, "seq_len": 768, "precision": "bf16", "adapter": adapter, **workload}
    return parse_spec({"name": "t", "model": model, "workload": wl})


@pytest.mark.parametrize(
    ("adapter", "trainable"),
    [
        # measured.yaml peft-mc-lora--llama-3.2-3B-rank32: q,v rank 32 -> 9,175,040
        #   28 x 32 x ((3072 + 3072) + (3072 + 1024)) = 9,175,040
        ({"rank": 32, "targets": ["v_proj", "q_proj"]}, 9_175_040),
        # peft-mc-lora--llama-3.2-3B-rank10-target-mlp: 28 x 10 x 3 x (3072 + 8192) = 9,461,760
        ({"rank": 10, "targets": ["up_proj", "gate_proj", "down_proj"]}, 9_461_760),
        # torchtune-llama32-3b-lora-init (recipe defaults r=64 on q, v, output_proj, w1, w2, w3) = 89,915,392
        ({"rank": 64, "targets": ["q_proj", "v_proj", "output_proj", "w1", "w2", "w3"]}, 89_915_392),
    ],
)
def test_trainable_params_match_peft(adapter: dict[str, Any], trainable: int) -> None:
    assert estimate(spec(LLAMA32_3B, adapter)).llm.trainable_params == trainable


def test_all_linear_llama2_7b_rank64() -> None:
    # 32 layers x 64 x [4 x (4096 + 4096) + 3 x (4096 + 11008)] = 32 x 64 x 78,080 = 159,907,840
    result = estimate(spec(LLAMA2_7B, {"rank": 64, "targets": "all-linear"}))
    assert result.llm.trainable_params == 159_907_840


def test_frozen_base_has_no_gradients_or_states_and_adapters_are_fp32() -> None:
    # q,v rank 32 on Llama-3.2-3B: 9,175,040 fp32 params (PEFT autocasts the adapter of a bf16 base)
    result = estimate(spec(LLAMA32_3B, {"rank": 32, "targets": ["q_proj", "v_proj"]}, optimizer="adamw"))
    assert result.component_peaks["gradients"] == 9_175_040 * 4
    # AdamW: exp_avg + exp_avg_sq per adapter tensor (fp32, multiples of 512 B here) = 2 x 4 x 9,175,040
    assert result.component_peaks["optimizer_states"] == 2 * 4 * 9_175_040
    base = 3_212_749_824 * 2  # measured.yaml params of Llama-3.2-3B, bf16
    assert result.components["parameters"] == base + 9_175_040 * 4


def test_qlora_below_lora() -> None:
    lora = estimate(spec(LLAMA2_7B, {"rank": 64, "targets": "all-linear"}, gradient_checkpointing="full"))
    qlora = estimate(
        spec(
            LLAMA2_7B,
            {"rank": 64, "targets": "all-linear"},
            gradient_checkpointing="full",
            quantization={"method": "nf4", "double_quant": True},
        )
    )
    assert qlora.peak_allocated_bytes < lora.peak_allocated_bytes
    assert qlora.llm.trainable_params == lora.llm.trainable_params
    # the difference is the weights: 6,476,005,376 linear weights at 16 vs ~4.127 bits, less PEFT's
    # prepare_model_for_kbit_training upcast of the 262,410,240 other parameters from bf16 to fp32
    saved = lora.components["parameters"] - qlora.components["parameters"]
    assert saved == pytest.approx(6_476_005_376 * (16 - 4.127) / 8 - 262_410_240 * 2, rel=1e-3)


def test_lora_activations_below_full_finetune() -> None:
    lora = estimate(spec(LLAMA2_7B, {"rank": 8, "targets": ["q_proj", "v_proj"]}, batch_size=1))
    full = estimate(
        parse_spec(
            {
                "name": "t",
                "model": LLAMA2_7B,
                "workload": {
                    "mode": "train",
                    "batch_size": 1,
                    "seq_len": 768,
                    "precision": "bf16",
                    "optimizer": "adamw",
                },
            }
        )
    )
    assert lora.component_peaks["activations"] < full.component_peaks["activations"]


def _tracer_cases() -> list[dict[str, Any]]:
    return json.loads(TRACER_LLM.read_text(encoding="utf-8"))["cases"]


def _marked(case: dict[str, Any]) -> Any:
    """A case whose disagreement is understood but not modelled stays visible as a strict xfail."""
    if "known_gap" in case:
        return pytest.param(case, marks=pytest.mark.xfail(strict=True, reason=case["known_gap"]))
    return case


@pytest.mark.parametrize("case", [_marked(c) for c in _tracer_cases()], ids=lambda c: c["id"])
def test_against_tracer(case: dict[str, Any]) -> None:
    """benchmarks/data/tracer_llm.json: exact allocator peaks of real transformers + peft steps (CPU tracer).

    All within 3.5 %, LoRA on an fp32 GQA model (SDPA's math fallback) included: its peak is the attention
    backward, after the MLP half's saved tensors are freed. The other PEFT methods (DoRA, IA3, prompt,
    prefix and LN tuning, VeRA, LoHa, AdaLoRA, TinyLoRA, OSF, BOFT) are held to the same 3.5 %; a case
    marked ``known_gap`` would not be. The tracer's step never calls AdaLoRA's ``update_and_allocate``, so its
    importance scores (``ipt``, ``exp_avg_ipt``, ``exp_avg_unc``: three copies of every fp32 adapter tensor,
    live in every phase) are left out of the comparison: that term is not checked by the tracer.
    """
    result = estimate(parse_spec({"name": case["id"], "model": case["model"], "workload": case["workload"]}))
    trainable = result.llm.trainable_params or 0
    assert result.params + trainable == case["params"]  # peft's parameter count, independently
    adalora = case["workload"].get("adapter", {}).get("type") == "adalora"
    # fp32 adapters in every AdaLoRA case (their 512-byte rounding, a few KiB, stays in the comparison)
    untraced = 3 * trainable * 4 if adalora else 0
    error = (result.peak_allocated_bytes - untraced - case["peak_bytes"]) / case["peak_bytes"]
    assert abs(error) <= 0.035, (case["id"], error)


@pytest.mark.parametrize(
    ("adapter", "message"),
    [
        ({"rank": 8, "targets": ["query_key_value"]}, "separate q/k/v"),
        ({"rank": 8, "targets": ["nope_proj"]}, "unknown module 'nope_proj'"),
        ({"rank": 0}, "rank"),
        ({"rank": 8, "targets": []}, "empty list"),
    ],
)
def test_bad_adapter(adapter: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        estimate(spec(LLAMA2_7B, adapter))


def test_adapter_in_inference_is_rejected() -> None:
    with pytest.raises(SpecError, match="adapter: only valid with mode: train"):
        spec(LLAMA2_7B, {"rank": 8}, mode="inference")
