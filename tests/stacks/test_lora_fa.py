"""LoRA-FA (``adapter.type: lora_fa``): lora_A frozen at its initialisation, lora_B trained by PEFT's
``LoraFAOptimizer`` (``peft.optimizers.create_lorafa_optimizer``).

Expected values are worked out by hand for a 2-layer Llama (hidden 512, 8 heads, 2 KV heads of 64, so
q_proj 512 -> 512 and v_proj 512 -> 128) with rank-16 fp32 adapters on q_proj and v_proj over a bf16
base; the same model is traced with PEFT's own optimizer in ``benchmarks/data/tracer_llm.json``
(``llm-lorafa-*``, checked to 3.5 % by tests/llm/test_adapters.py), whose peaks confirm the differences.
"""

from __future__ import annotations

from typing import Any

import pytest

from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.spec.load import parse_spec

MODEL = {
    "architecture": "decoder", "layers": 2, "hidden_size": 512, "heads": 8, "kv_heads": 2, "ffn_size": 1408,
    "mlp": "swiglu", "norm": "rmsnorm", "position": "rotary", "vocab_size": 1000, "tie_embeddings": False,
}  # fmt: skip


def run(adapter: dict[str, Any], seq: int = 256, model: dict[str, Any] = MODEL) -> Any:
    wl = {"mode": "train", "batch_size": 2, "seq_len": seq, "precision": "bf16", "optimizer": "adamw"}
    return estimate(parse_spec({"name": "t", "model": model, "workload": {**wl, "adapter": adapter}}))


QV = {"rank": 16, "targets": ["q_proj", "v_proj"]}


def test_only_lora_b_trains() -> None:
    fa, lora = run({**QV, "type": "lora_fa"}), run(QV)
    # lora_B: (512 + 128) x 16 per layer, 2 layers = 20,480; lora_A: 16 x 512 twice per layer = 32,768
    assert fa.llm.trainable_params == 20_480
    assert fa.llm.frozen_adapter_params == 32_768
    assert fa.params == lora.params + 32_768  # the model's count plus the frozen lora_A
    # AdamW states of lora_B only, fp32: 2 x 20,480 x 4 = 163,840 B (traced: 163,840)
    assert fa.component_peaks["optimizer_states"] == 163_840
    assert lora.component_peaks["optimizer_states"] == 2 * (20_480 + 32_768) * 4
    # the frozen lora_A is stored all the same: the parameters are equal
    assert fa.components["parameters"] == lora.components["parameters"]


def test_a_frozen_lora_a_saves_no_input_cast() -> None:
    # A trained lora_A saves its input cast to fp32, one copy per adapted module: 2 x 256 tokens x 512 x 4 B
    # = 1 MiB for q_proj and for v_proj in each of 2 layers, 4 MiB; with the 262,144 B of lora_A's AdamW
    # states that is the whole difference at the backward peak. The tracer's peaks differ by the same
    # 4,456,448 B (108,186,624 with LoRA, 103,730,176 with LoRA-FA).
    fa, lora = run({**QV, "type": "lora_fa"}), run(QV)
    assert fa.peak_phase == lora.peak_phase == "backward"
    assert lora.peak_allocated_bytes - fa.peak_allocated_bytes == 4 * 2 * 256 * 512 * 4 + 262_144


def test_dropout_keeps_only_its_mask() -> None:
    # with dropout a trained lora_A saves the dropout output (fp32) and the bool mask; a frozen one the mask
    fa = run({**QV, "type": "lora_fa", "dropout": 0.05}, seq=1024)
    fa_plain = run({**QV, "type": "lora_fa"}, seq=1024)
    masks = 4 * 2 * 1024 * 512  # q and v in 2 layers, one byte per element
    assert fa.phase_components["backward"]["activations"] - fa_plain.phase_components["backward"]["activations"] == (
        masks
    )


@pytest.mark.parametrize(
    ("adapter", "model", "message"),
    [
        ({**QV, "type": "lora_fa", "framework": "litgpt"}, MODEL, "framework"),
        ({"type": "lora_fa", "targets": ["q_proj"]}, MODEL, "rank"),
        ({**QV, "type": "lora_fa"}, {"preset": "t5-small"}, "lora_fa is modelled for decoder models"),
    ],
)
def test_refused(adapter: dict[str, Any], model: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        run(adapter, model=model)
