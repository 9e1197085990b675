"""bitsandbytes k-bit training per release, PEFT's prepare_model_for_kbit_training, paged optimizers.

Expected bytes are derived by hand from the libraries' source (cited in vramcalc/stacks/bnb.py):
``MatMul4Bit.forward`` keeps ``ctx.tensors = (A, B)`` up to bitsandbytes 0.43.1 and ``(None, B)`` from
0.43.2; ``MatMul8bitLt.forward`` keeps ``(CAt, subA, A)``, with the int8 ``CAt`` computed for a frozen
weight only before 0.45.0.
"""

from __future__ import annotations

from typing import Any

import pytest

from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.spec.load import parse_spec

LLAMA2_7B = {
    "architecture": "decoder", "layers": 32, "hidden_size": 4096, "heads": 32, "ffn_size": 11008,
    "mlp": "swiglu", "vocab_size": 32000, "tie_embeddings": False,
}  # fmt: skip
TOKENS, LAYERS, H, F = 1024, 32, 4096, 11008
#: Llama-2-7B parameters outside the 4-bit linears: embeddings and LM head 2 x 32,000 x 4,096, 65 norms of 4,096
KEPT = 2 * 32_000 * 4_096 + 65 * 4_096


def spec(versions: dict[str, str] | None = None, adapter: dict[str, Any] | None = None, **wl: Any) -> Any:
    workload = {
        "mode": "train", "batch_size": 1, "seq_len": TOKENS, "precision": "bf16",
        "quantization": {"method": "nf4", "double_quant": True},
        "adapter": {"rank": 64, "targets": "all-linear", **(adapter or {})}, **wl,
    }  # fmt: skip
    if versions is not None:
        workload["versions"] = versions
    return parse_spec({"name": "t", "model": LLAMA2_7B, "workload": workload})


def forward(s: Any) -> int:
    return estimate(s).phases["forward"]


def test_bnb_041_keeps_each_4bit_input_once_per_tensor() -> None:
    # bf16 base without prepare_kbit: the norm outputs are bf16, the compute dtype, so Linear4bit's
    # x.to(compute_dtype) returns the same tensor: q, k and v keep one reference to it (PyTorch holds it
    # once), gate and up another; o_proj's input is the output the flash kernel saves anyway; down_proj's
    # input (the SwiGLU product) is kept only by MatMul4Bit. Per token per layer: (4096 + 4096 + 11008) x 2
    per_token_layer = (H + H + F) * 2
    assert per_token_layer == 38_400
    adapter = {"prepare_kbit": False}
    old = forward(spec({"bitsandbytes": "0.41.1"}, adapter))
    new = forward(spec({"bitsandbytes": "0.50.1"}, adapter))
    assert old - new == LAYERS * TOKENS * per_token_layer == 1_258_291_200


def test_4bit_boundary_is_0_43_2() -> None:
    adapter = {"prepare_kbit": False}
    assert forward(spec({"bitsandbytes": "0.43.1"}, adapter)) > forward(spec({"bitsandbytes": "0.43.2"}, adapter))
    assert forward(spec({"bitsandbytes": "0.43.2"}, adapter)) == forward(spec({"bitsandbytes": "0.49.0"}, adapter))


def test_prepare_kbit_under_autocast_copies_per_linear() -> None:
    # prepare_kbit makes the norm weights fp32, so the norm outputs are fp32 and each of q, k, v, gate, up
    # casts its own bf16 copy; o_proj reads the bf16 flash output (autocast), kept anyway; down_proj's
    # fp32 product is cast to bf16 once. Per token per layer: (3 x 4096 + 2 x 4096 + 11008) x 2 = 62,976.
    per_token_layer = (3 * H + 2 * H + F) * 2
    kw = {"precision": "amp-bf16", "gradient_checkpointing": "none"}
    old = forward(spec({"bitsandbytes": "0.41.1"}, **kw))
    new = forward(spec({"bitsandbytes": "0.50.1"}, **kw))
    assert old - new == LAYERS * TOKENS * per_token_layer


def test_prepare_kbit_upcasts_kept_params_and_turns_on_checkpointing() -> None:
    on, off = estimate(spec()), estimate(spec(adapter={"prepare_kbit": False}))
    # the 262,410,240 kept parameters go from bf16 to fp32: +2 bytes each
    assert KEPT == 262_410_240
    assert on.components["parameters"] - off.components["parameters"] == KEPT * 2
    assert any("gradient_checkpointing not given: full" in n for n in on.assumptions)
    explicit = estimate(spec(gradient_checkpointing="none"))
    assert not any("gradient_checkpointing not given" in n for n in explicit.assumptions)


def test_litgpt_is_not_prepared_and_version_is_stated() -> None:
    result = estimate(spec(adapter={"framework": "litgpt"}))
    assert not any("prepare_kbit not given" in n for n in result.assumptions)
    assert any("bitsandbytes version not given" in n and "0.50.1" in n for n in result.assumptions)


def test_int8_lora_keeps_input_and_int8_copy_before_0_45() -> None:
    adapter = {"prepare_kbit": False}
    # today: A only (shared per tensor): (4096 + 4096 + 11008) x 2 bytes per token per layer
    today = (H + H + F) * 2
    # 0.44: + CAt, one int8 byte per input element per linear: 3 x 4096 + 4096 + 2 x 4096 + 11008 = 35,584
    cat = 3 * H + H + 2 * H + F
    assert cat == 35_584
    new = forward(spec({"bitsandbytes": "0.50.1"}, adapter, quantization="int8"))
    old = forward(spec({"bitsandbytes": "0.44.1"}, adapter, quantization="int8"))
    assert old - new == LAYERS * TOKENS * cat
    # today's A alone: int8 at 0.50.1 keeps (4096 + 4096 + 11008) x 2 per token per layer more than
    # nf4 at 0.50.1 (which keeps nothing); the rest is weights and forward transients
    nf4 = estimate(spec({"bitsandbytes": "0.50.1"}, adapter))
    int8 = estimate(spec({"bitsandbytes": "0.50.1"}, adapter, quantization="int8"))
    weights = int8.components["parameters"] - nf4.components["parameters"]
    temps = int8.phases["forward"] - nf4.phases["forward"] - weights
    # forward transients: the last down_proj holds the unsaved SwiGLU product, its output and the method's
    # buffer (nf4: the gate-sized weight dequantized to bf16, 11008 x 4096 x 2; LLM.int8: the int8 input and
    # int32 product, tokens x (4096 + 4 x 11008)): at most 1024 x (11008 x 2 + 4096 + 4 x 11008 + 4096 x 2)
    # = 80,216,064 bytes, below the loss's fp32 logits, log-softmax and bf16 logits (1024 x 32,000 x 10 =
    # 327,680,000), so neither buffer reaches the forward peak
    inside = TOKENS * (F * 2 + H + 4 * F + H * 2)
    assert inside == 80_216_064 < TOKENS * 32_000 * 10
    assert temps == LAYERS * TOKENS * today


#: r=64 all-linear on Llama-2-7B: 159,907,840 fp32 adapter params (test_adapters.py). Every lora_A and lora_B
#: has at least 64 x 4096 = 262,144 elements, above bitsandbytes' paging threshold of 100,000
#: (bitsandbytes/optim/optimizer.py, get_state_buffer: ``p.numel() < 1e5`` stays a device tensor), and a
#: multiple of the allocator's 512 bytes at one byte per element (64 x 4096 = 512 x 512, 64 x 11008 = 512 x 1376).
ADAPTER_PARAMS = 159_907_840


def test_adamw_32bit_states_on_the_device() -> None:
    # two fp32 states per adapter parameter, all through the caching allocator
    result = estimate(spec(optimizer="adamw"))
    assert result.component_peaks["optimizer_states"] == ADAPTER_PARAMS * 8
    assert result.paged_bytes is None


def test_paged_adamw_32bit_states_are_managed_memory() -> None:
    # every adapter tensor is paged: no state on the allocator, 2 x 4 bytes per parameter in managed memory
    result = estimate(spec(optimizer="paged-adamw-32bit"))
    assert result.component_peaks["optimizer_states"] == 0
    assert result.paged_bytes == ADAPTER_PARAMS * 8 == 1_279_262_720
    assert any("managed memory" in n for n in result.assumptions)


def test_paged_adamw_8bit_keeps_only_the_block_scales_on_the_device() -> None:
    # 8-bit: the two uint8 states (1 byte per element each) are paged; the fp32 absmax per block stays
    paged = estimate(spec(optimizer="paged-adamw-8bit"))
    plain = estimate(spec(optimizer="adamw-8bit"))
    assert paged.paged_bytes == 2 * ADAPTER_PARAMS == 319_815_680
    moved = plain.component_peaks["optimizer_states"] - paged.component_peaks["optimizer_states"]
    assert moved == 2 * ADAPTER_PARAMS  # state buffers were whole 512-byte blocks already
    assert paged.peak_allocated_bytes == plain.peak_allocated_bytes - moved


def test_small_lora_tensors_are_not_paged() -> None:
    # r=8 on q and v: lora_A 8 x 4096 = 32,768 and lora_B 4096 x 8 elements, below 100,000: nothing is paged
    result = estimate(spec(optimizer="paged-adamw-32bit", adapter={"rank": 8, "targets": ["q", "v"]}))
    plain = estimate(spec(optimizer="adamw", adapter={"rank": 8, "targets": ["q", "v"]}))
    assert result.paged_bytes == 0
    assert result.component_peaks["optimizer_states"] == plain.component_peaks["optimizer_states"]
    assert any("pages none of its states" in n for n in result.assumptions)


def test_bad_bitsandbytes_version() -> None:
    with pytest.raises(SpecError, match="workload.versions.bitsandbytes"):
        estimate(spec({"bitsandbytes": "latest"}))


def test_8bit_optimizer_blocks_are_the_release_s() -> None:
    """bitsandbytes' 8-bit optimizers keep an fp32 absmax per 2,048 elements up to 0.43.x and per 256 from
    0.44.0 (``init_state``: ``n // 2048`` at tag 0.43.3, ``n // 256`` at 0.44.0). By hand, per state tensor,
    whole 512-byte blocks: q/k/v/o 4096 x 4096 = 16,777,216 elements: 65,536 x 4 = 262,144 B against
    8,192 x 4 = 32,768 (229,376 more); gate/up/down 4096 x 11008: 176,128 x 4 = 704,512 against
    22,016 x 4 = 88,064 (616,448 more); the norms (4,096 elements: 64 B and 8 B) take one 512-byte block
    either way; the embedding and the LM head, 32,000 x 4096: 2,048,000 against 256,000 (1,792,000 more).
    32 x (4 x 229,376 + 3 x 616,448) + 2 x 1,792,000 = 92,123,136 per state, two states: 184,246,272."""

    def states(versions: dict[str, str] | None) -> int:
        workload = {"mode": "train", "batch_size": 1, "seq_len": 128, "precision": "bf16", "optimizer": "adamw-8bit"}
        if versions is not None:
            workload["versions"] = versions
        result = estimate(parse_spec({"name": "t", "model": LLAMA2_7B, "workload": workload}))
        return result.component_peaks["optimizer_states"]

    old, new = states({"bitsandbytes": "0.43.3"}), states({"bitsandbytes": "0.44.0"})
    assert new - old == 184_246_272
    assert states(None) == new == states({"bitsandbytes": "0.50.1"})  # the default release is 0.44 or later
