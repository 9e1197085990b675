"""VeRA, LoHa and AdaLoRA: trainable counts, shared projections, what each keeps, the keys each type takes.
Tracer references are in test_adapters.py::test_against_tracer (``llm-peft-vera-*``, ``llm-peft-loha-*``,
``llm-peft-adalora-*``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cli_errors import estimate_error_line
from spec_texts import LLAMA32_3B, TINY_LLAMA

from vramcalc.core import activations as act
from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.families.resolve import resolve_model
from vramcalc.spec.llm import AdapterSpec
from vramcalc.spec.load import parse_spec
from vramcalc.stacks import peft_more

TINY = TINY_LLAMA  # 2 layers, hidden 64, 4 heads of 16, 2 KV heads (K/V width 32), ffn 128
BF16 = act.Dtypes(param=2, compute=2, residual=2, amp=False)
FP32 = act.Dtypes(param=4, compute=4, residual=4, amp=False)
TOKENS = act.Tokens(batch=1, seq=10, target=10)
QV = ["q_proj", "v_proj"]


def spec(model: dict[str, Any], adapter: dict[str, Any], **workload: Any) -> Any:
    wl = {"mode": "train", "batch_size": 1, "seq_len": 10, "precision": "bf16", "adapter": adapter, **workload}
    return parse_spec({"name": "t", "model": model, "workload": wl})


def tiny_shape() -> Any:
    parsed = spec(TINY, {"type": "vera", "rank": 8, "targets": QV})
    return resolve_model(parsed.model, parsed.workload)[0]


@pytest.mark.parametrize(
    ("model", "adapter", "trainable"),
    [
        # VeRA r=8 on q (out 64) and v (out 32): 2 layers x (64 + 8 + 32 + 8)
        (TINY, {"type": "vera", "rank": 8, "targets": QV}, 224),
        # LoHa r=4: 2 x r x (in + out) per linear: 2 layers x (2 x 4 x 128 + 2 x 4 x 96)
        (TINY, {"type": "loha", "rank": 4, "targets": QV}, 3_584),
        # measured.yaml peft-mc-vera--llama-3.2-3B-default: 129,024 = 28 x ((3,072 + 256) + (1,024 + 256))
        (LLAMA32_3B, {"type": "vera", "rank": 256, "targets": QV}, 129_024),
        # peft-mc-loha--llama-3.2-3B-rank32: 18,350,080 = 28 x 2 x 32 x ((3,072 + 3,072) + (3,072 + 1,024))
        (LLAMA32_3B, {"type": "loha", "rank": 32, "targets": QV}, 18_350_080),
    ],
)
def test_trainable_params(model: dict[str, Any], adapter: dict[str, Any], trainable: int) -> None:
    assert estimate(spec(model, adapter)).llm.trainable_params == trainable


def test_vera_by_hand() -> None:
    m, _ = peft_more.vera(tiny_shape(), AdapterSpec(type="vera", rank=8, targets=QV), TOKENS, BF16, 4)
    # shared fp32 projections: vera_A 8 x 64 (largest input), vera_B 64 x 8 (largest output)
    assert m.buffers == (8 * 64 + 64 * 8) * 4
    # per token and layer, fp32: q keeps A(x) (8) and B(.) (64), v 8 and 32: 112 x 4 B x 2 layers x 10 tokens
    assert m.saved == 112 * 4 * 2 * 10
    assert m.saved_per_layer == 112 * 4 * 10


def test_loha_by_hand() -> None:
    adapter = AdapterSpec(type="loha", rank=4, targets=QV)
    m, _ = peft_more.loha(tiny_shape(), adapter, TOKENS, BF16, 4)
    # fp32 input copies on a bf16 base: q and v each 64 wide, 2 layers, 10 tokens: 2,560 x 4 B;
    # the fp32 delta weights of layer 1 only (layer 0's q/v input needs no gradient): 64 x 64 + 32 x 64
    assert m.saved == 2 * 2 * 64 * 10 * 4 + (64 * 64 + 32 * 64) * 4
    # building the largest delta weight (q, 64 x 64): three fp32 matrices; its backward: four
    assert m.forward_transient == 3 * 64 * 64 * 4
    assert m.backward_transient == 4 * 64 * 64 * 4
    # fp32 base: no cast, q and v read the same normed input, kept once per layer
    m32, _ = peft_more.loha(tiny_shape(), adapter, TOKENS, FP32, 4)
    assert m32.saved == 2 * 64 * 10 * 4 + (64 * 64 + 32 * 64) * 4


def test_defaults_are_noted() -> None:
    m, notes = peft_more.vera(tiny_shape(), AdapterSpec(type="vera", targets=QV), TOKENS, BF16, 4)
    assert m.params == 2 * (64 + 256 + 32 + 256)  # PEFT's VeraConfig r=256
    assert any("256" in n for n in notes)


@pytest.mark.parametrize(
    ("adapter", "message"),
    [
        ({"type": "vera", "rank": 8, "alpha": 16}, "alpha: not a key of adapter type vera"),
        ({"type": "loha", "rank": 8, "dropout": 0.1}, "dropout: not a key of adapter type loha"),
        ({"type": "loha", "num_virtual_tokens": 4}, "num_virtual_tokens: not a key of adapter type loha"),
    ],
)
def test_keys_that_do_not_fit(adapter: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        spec(TINY, adapter)


def test_quantized_base_is_refused() -> None:
    with pytest.raises(SpecError, match="workload.quantization"):
        estimate(spec(TINY, {"type": "loha", "rank": 4, "targets": QV}, quantization="nf4"))


# ------------------------------------------------------------------ AdaLoRA


def test_adalora_trainable_and_ranknum() -> None:
    adapter = {"type": "adalora", "init_r": 4, "target_r": 2, "targets": QV}
    ada = estimate(spec(TINY, adapter))
    # lora_A (r x in), lora_E (r x 1), lora_B (out x r) per linear: r (in + 1 + out);
    # q: 4 x (64 + 1 + 64) = 516, v: 4 x (64 + 1 + 32) = 388, 2 layers
    assert ada.llm.trainable_params == 2 * (516 + 388)
    # one frozen ranknum per adapted linear (PEFT counts it among the model's parameters): 2 layers x q, v
    lora = estimate(spec(TINY, {"type": "lora", "rank": 4, "targets": QV}))
    assert ada.params == lora.params + 4
    # the tiny model by hand: embeddings and untied head 2 x 100 x 64; per layer q, o 64 x 64, k, v 32 x 64,
    # gate, up, down 3 x 128 x 64, two norms of 64; the final norm
    assert lora.params == 2 * 6_400 + 2 * (2 * 4_096 + 2 * 2_048 + 3 * 8_192 + 2 * 64) + 64


def test_adalora_llama32_3b_matches_peft_count() -> None:
    # peft method_comparison adalora--llama-3.2-3B-rank32 (init_r 64, target_r 32 on q_proj, v_proj, its
    # experiments/adalora/llama-3.2-3B-rank32/adapter_config.json): num_trainable_params 18,353,664 and
    # num_total_params 3,231,103,544 = 3,212,749,824 (the base) + 18,353,664 + 56 ranknum (28 layers x 2)
    result = estimate(spec(LLAMA32_3B, {"type": "adalora", "init_r": 64, "target_r": 32, "targets": QV}))
    assert result.llm.trainable_params == 18_353_664
    assert result.params + result.llm.trainable_params == 3_231_103_544


def test_adalora_by_hand() -> None:
    adapter = AdapterSpec(type="adalora", init_r=4, targets=QV)
    m, _ = peft_more.adalora(tiny_shape(), adapter, TOKENS, BF16, 4)
    # per token and layer, fp32 on a bf16 base: q and v each keep the input cast to fp32 (64) and
    # x (A E)^T (4): 2 x 68 x 4 B; 2 layers, 10 tokens
    tokens = 2 * 68 * 4 * 2 * 10
    # A * E (4 x 64 fp32) kept by the matmul in layer 1 only (layer 0's q/v input needs no gradient)
    products = 2 * 4 * 64 * 4
    # orthogonality penalty: A A^T - I and B^T B - I (4 x 4 fp32, each a 512-byte allocator block) for each
    # of the 4 linears
    penalty = 4 * 2 * 512
    assert m.saved == tokens + products + penalty
    assert m.saved_per_layer == (tokens + products) // 2
    # ranknum: one per linear, at the base dtype (bf16), each a 512-byte allocator block
    assert (m.frozen_params, m.buffers) == (4, 4 * 512)
    # update_and_allocate: ipt, exp_avg_ipt, exp_avg_unc of every fp32 adapter tensor, each rounded to the
    # allocator's 512-byte blocks; per layer q: A 4 x 64 (1,024 B), E 4 (512), B 64 x 4 (1,024);
    # v: A 4 x 64 (1,024), E 4 (512), B 32 x 4 (512): 4,608 B
    assert m.extra_states == 3 * 2 * 4_608
    # its update of the largest tensor (q's A or B, 256 elements) holds three fp32 temporaries
    assert m.step_transient == 3 * 256 * 4
    # q: the input cast to fp32 (64) and B(...) with its scaled copy (2 x 64), 10 tokens
    assert m.forward_transient == 10 * (64 + 2 * 64) * 4


def test_adalora_states_are_with_the_optimizer() -> None:
    result = estimate(spec(TINY, {"type": "adalora", "init_r": 4, "targets": QV}))
    # AdamW: exp_avg, exp_avg_sq; AdaLoRA's allocator: ipt, exp_avg_ipt, exp_avg_unc; each a copy of every
    # fp32 adapter tensor in 512-byte blocks: 2 layers x 4,608 B (test_adalora_by_hand)
    assert result.component_peaks["optimizer_states"] == 5 * 2 * 4_608


def test_adalora_defaults_are_noted() -> None:
    m, notes = peft_more.adalora(tiny_shape(), AdapterSpec(type="adalora", targets=QV), TOKENS, BF16, 4)
    assert m.params == 12 * 2 * (129 + 97)  # PEFT's AdaLoraConfig init_r=12
    assert any("init_r not given: 12" in n for n in notes)


@pytest.mark.parametrize(
    ("adapter", "message"),
    [
        ({"type": "adalora", "rank": 8}, "rank: not a key of adapter type adalora"),
        ({"type": "adalora", "init_r": 8, "target_r": 16}, "target_r: at most init_r"),
        ({"type": "adalora", "target_r": 16}, "target_r: at most init_r .default 12."),
        ({"type": "adalora", "init_r": 0}, "init_r"),
        ({"type": "lora", "rank": 8, "init_r": 8}, "init_r: not a key of adapter type lora"),
    ],
)
def test_adalora_keys(adapter: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        spec(TINY, adapter)


def test_adalora_bad_key_is_one_error_line_exit_2(tmp_path: Path) -> None:
    line = estimate_error_line(
        tmp_path / "adalora.yaml",
        "model: {preset: llama-3.2-3b}\n"
        "workload: {mode: train, batch_size: 1, seq_len: 128, precision: bf16,\n"
        "  adapter: {type: adalora, init_r: 8, target_r: 12}}\n",
    )
    assert "target_r" in line
