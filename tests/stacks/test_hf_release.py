"""What older transformers releases allocated (``workload.versions.transformers``), on tiny models.

Every expected figure is derived by hand from the released wheels' source (cited in
vramcalc/stacks/transformers.py): ``transformers/models/opt/modeling_opt.py`` (the ``torch.max`` clamp up to
4.48.x), the ``register_buffer("bias", torch.tril(torch.ones((max_positions, max_positions),
dtype=torch.bool)) ...)`` of GPT-J (up to 4.44.x), GPT-NeoX (up to 4.48.x) and GPT-2 (still in 5.0.0), and
``transformers/generation/utils.py`` (``outputs.logits.clone()[:, -1, :].float()`` in 4.45 and 4.46).
"""

from __future__ import annotations

from typing import Any

import pytest

from vramcalc.core import activations as act
from vramcalc.core import training
from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.families.resolve import resolve_workload
from vramcalc.llm.generation import release_head_bytes
from vramcalc.spec.load import parse_spec
from vramcalc.stacks import transformers as hf_release

LAYERS, HIDDEN, HEADS, VOCAB, POSITIONS = 2, 64, 4, 1000, 64
TINY_OPT = {
    "architecture": "decoder", "layers": LAYERS, "hidden_size": HIDDEN, "heads": HEADS, "ffn_size": 256,
    "mlp": "relu", "norm": "layernorm", "position": "learned", "position_offset": 2, "vocab_size": VOCAB,
    "max_position_embeddings": POSITIONS, "dropout": 0.1, "fused_qkv": False, "model_type": "opt",
}  # fmt: skip
TINY_NEOX = {
    "architecture": "decoder", "layers": LAYERS, "hidden_size": HIDDEN, "heads": HEADS, "ffn_size": 256,
    "mlp": "gelu", "norm": "layernorm", "position": "rotary", "vocab_size": VOCAB, "tie_embeddings": False,
    "fused_qkv": True, "parallel_block": True, "max_position_embeddings": POSITIONS, "model_type": "gpt_neox",
}  # fmt: skip
TINY_LLAMA = {
    "architecture": "decoder", "layers": LAYERS, "hidden_size": HIDDEN, "heads": HEADS, "ffn_size": 256,
    "mlp": "swiglu", "vocab_size": VOCAB, "model_type": "llama",
}  # fmt: skip


def spec(model: dict[str, Any], version: str | None = None, **workload: Any) -> Any:
    wl = {"mode": "train", "batch_size": 1, "seq_len": 32, "precision": "fp16", "optimizer": "none", **workload}
    if version is not None:
        wl["versions"] = {"transformers": version}
    return parse_spec({"name": "t", "model": model, "workload": wl})


def test_opt_before_4_49_saves_8_bytes_per_fp16_score() -> None:
    # OPTAttention up to 4.48: torch.max saves the fp16 masked scores (2), softmax(dtype=float32) saves its
    # fp32 output (4), dropout p = attention_dropout = 0.0 returns its input, bmm saves the fp16
    # probabilities (2): 8 bytes per element
    work = resolve_workload(spec(TINY_OPT, "4.46.0", attention="eager"))
    assert act.score_bytes_per_element(work.shape, work.dtypes, training=True) == 2 + 4 + 2
    # bf16 scores are not upcast: the clamp input (2) and the softmax output, which bmm saves too (2)
    work = resolve_workload(spec(TINY_OPT, "4.46.0", attention="eager", precision="bf16"))
    assert act.score_bytes_per_element(work.shape, work.dtypes, training=True) == 2 + 2


def test_opt_clamp_boundary_is_4_49_in_the_forward_activations() -> None:
    # 4.49.0 falls back to today's formula for OPT in fp16: the fp32 softmax output (4) and the fp16
    # probabilities the matmul saves (2), attention dropout 0.0 (its hidden dropout 0.1 does not apply
    # here) = 6 bytes; 4.48.x keeps 8. Score elements per layer: batch 1 x 4 heads x 32 x 32 = 4,096;
    # 2 layers: 8,192 elements x 2 bytes = 16,384 bytes.
    def forward_activations(version: str) -> int:
        return estimate(spec(TINY_OPT, version, attention="eager")).phase_components["forward"]["activations"]

    assert forward_activations("4.48.2") - forward_activations("4.49.0") == 2 * 4 * 32 * 32 * 2 == 16_384


def test_no_loss_keeps_logits_and_one_logits_sized_gradient() -> None:
    # logits.sum().backward(): 32 tokens x 1,000 vocab fp16 logits held by the caller (64,000 bytes) and
    # the LM head's contiguous copy of the expanded gradient (64,000 bytes); no fp32 copy, no log-softmax
    work = resolve_workload(spec(TINY_OPT, cross_entropy="none"))
    loss = training.no_loss_bytes(work.shape, work.tokens, work.dtypes)
    assert loss == act.LossBytes(saved=64_000, forward_transient=0, backward_temporaries=64_000)


def test_no_loss_is_accepted_for_an_encoder_lm_head() -> None:
    bert = {"architecture": "encoder", "layers": 2, "hidden_size": 64, "heads": 4, "vocab_size": 1000}
    result = estimate(spec(bert, cross_entropy="none"))
    assert result.peak_phase in ("forward", "backward")


@pytest.mark.parametrize(
    ("model_type", "before", "after"),
    [("gpt_neox", "4.48.0", "4.49.0"), ("gptj", "4.44.2", "4.45.0")],
)
def test_causal_mask_buffers_until_their_release(model_type: str, before: str, after: str) -> None:
    # one bool max_positions x max_positions buffer per layer: 2 x 64 x 64 = 8,192 bytes
    model = {**TINY_NEOX, "model_type": model_type}

    def parameters(version: str) -> int:
        return estimate(spec(model, version, mode="inference")).phase_components["forward"]["parameters"]

    assert parameters(before) - parameters(after) == LAYERS * POSITIONS * POSITIONS == 8_192
    assert parameters(after) == estimate(spec(model, mode="inference")).phase_components["forward"]["parameters"]


def test_gpt2_buffer_defaults_to_1024_positions_in_every_release_checked() -> None:
    # GPT2Attention registers bias of n_positions (1,024 by default) squared in 4.40 and 5.0.0 alike
    for version in ("4.40.0", "5.0.0"):
        release = hf_release.resolve(version, "gpt2", layers=12, positions=0, fp16_scores=True, llama_like=False)
        assert release.buffer_bytes == 12 * 1024 * 1024


def prefill_head(model: dict[str, Any], version: str) -> int:
    wl = {"mode": "inference", "batch_size": 2, "seq_len": 20, "prompt_len": 16, "max_new_tokens": 4, "runtime": "hf"}
    work = resolve_workload(spec(model, version, **wl))
    return release_head_bytes(work.shape, 2 * 16, 2, work.dtypes)


#: The final hidden states in and out of the last norm: 2 x 32 tokens x 64 x 2 bytes.
HIDDEN_BYTES = 2 * 32 * 64 * 2
#: The sampled last positions' fp32 copy: 2 sequences x 1,000 x 4 bytes.
LAST = 2 * 1000 * 4


def test_generation_logits_per_family_and_release() -> None:
    # GPT-NeoX 4.42: fp16 logits of all 32 prompt positions, no upcast, last position cloned (small)
    assert prefill_head(TINY_NEOX, "4.42.0") == 32 * 1000 * 2 + LAST + HIDDEN_BYTES
    # OPT 4.46: all positions (no num_logits_to_keep) and _sample's full clone of them
    assert prefill_head(TINY_OPT, "4.46.0") == 32 * 1000 * (2 + 2) + LAST + HIDDEN_BYTES
    # Llama 4.44: all positions, upcast in forward (logits.float())
    assert prefill_head(TINY_LLAMA, "4.44.0") == 32 * 1000 * (2 + 4) + LAST + HIDDEN_BYTES
    # Llama 4.45: num_logits_to_keep=1 (2 rows), still upcast, and the 4.45 clone
    assert prefill_head(TINY_LLAMA, "4.45.0") == 2 * 1000 * (2 + 4 + 2) + LAST + HIDDEN_BYTES
    # GPT-NeoX 4.49 (logits_to_keep since its refactor): last positions only
    assert prefill_head(TINY_NEOX, "4.49.0") == 2 * 1000 * 2 + LAST + HIDDEN_BYTES
    # OPT 4.57: still every position (no logits_to_keep before 5.0)
    assert prefill_head(TINY_OPT, "4.57.0") == 32 * 1000 * 2 + LAST + HIDDEN_BYTES
    # OPT 5.x: last positions only, no upcast, no clone
    assert prefill_head(TINY_OPT, "5.0.0") == 2 * 1000 * 2 + LAST + HIDDEN_BYTES


def test_default_model_type_only_changes_opt_eager_scores() -> None:
    # Without a pinned release, model_type opt selects transformers 5's shared eager attention: the fp32
    # softmax (4) and its fp16 cast the matmul saves (2), attention dropout 0.0, against 5 bytes (fp16
    # softmax 2, dropout mask 1 and output 2) for an unnamed LayerNorm model with dropout 0.1.
    # 1 x 4 heads x 32 x 32 x 2 layers = 8,192 elements, 1 byte each more.
    plain = {key: value for key, value in TINY_OPT.items() if key != "model_type"}
    eager = {"attention": "eager"}
    delta = estimate(spec(TINY_OPT, **eager)).phases["forward"] - estimate(spec(plain, **eager)).phases["forward"]
    assert delta == 8_192
    for workload in ({"attention": "sdpa"}, {"mode": "inference"}):
        assert estimate(spec(plain, **workload)).phases == estimate(spec(TINY_OPT, **workload)).phases
    assert not resolve_workload(spec(TINY_OPT)).shape.code.pinned


def test_dev_suffix_is_the_release_it_became() -> None:
    assert hf_release.parse_version("4.46.0.dev0") == (4, 46, 0)
    assert hf_release.parse_version("v4.42") == (4, 42, 0)


def test_bad_release_names_the_field() -> None:
    with pytest.raises(SpecError, match=r"workload\.versions\.transformers: 'banana'"):
        estimate(spec(TINY_OPT, "banana"))


def generation(model: dict[str, Any], version: str, runtime: str = "hf-legacy") -> Any:
    wl = {
        "mode": "inference",
        "batch_size": 2,
        "seq_len": 20,
        "prompt_len": 16,
        "max_new_tokens": 4,
        "runtime": runtime,
    }
    return estimate(spec(model, version, **wl), hopper_or_newer=False)


def test_gpt_neox_4_42_caches_its_fused_qkv_then_fp32_keys() -> None:
    # GPTNeoXAttention in 4.42 returns present = (key, value): V a view of the fused QKV output (3 x 64 x 2 B
    # = 384 B per token and layer, all kept) and K the fp32 rotary result (64 x 4 = 256 B). Each decode step's
    # torch.cat makes compact copies: K fp32 + V fp16 = 64 x (4 + 2) = 384 B. 2 layers, 2 sequences.
    result = generation(TINY_NEOX, "4.42.0")
    prefill_cache = 2 * 16 * LAYERS * (384 + 256)
    assert result.phase_components["prefill"]["kv_cache"] == prefill_cache == 40_960
    # decode, hf-legacy: the first step holds the prefill's cache until its forward has built the compact one
    # (17 tokens); later steps hold two compact caches of at most 20 + 19 tokens: 2 x 39 x 2 x 384 = 59,904,
    # below 40,960 + 2 x 17 x 2 x 384 = 67,072
    decode = result.phase_components["decode"]
    assert decode["temporaries"] == prefill_cache
    assert decode["kv_cache"] == 2 * 17 * LAYERS * 384
    # 4.49 (GPT-NeoX's refactor into DynamicCache, cos/sin at the activations' dtype): K and V of 64 x 2 B each
    # appended as made: V still a view of the fused output, K the concatenated rotary result
    refactored = generation(TINY_NEOX, "4.49.0")
    assert refactored.phase_components["prefill"]["kv_cache"] == 2 * 16 * LAYERS * (384 + 128)
    # the causal-mask buffers of 4.42 (2 layers x 64 x 64 bool) load with the weights on this path too
    weights = {r.phase_components["prefill"]["parameters"] for r in (result, refactored)}
    assert max(weights) - min(weights) == LAYERS * POSITIONS * POSITIONS == 8_192


def test_a_copying_cache_and_today_cache_compact_k_and_v() -> None:
    # from 4.56 DynamicLayer concatenates onto an empty tensor: K and V of 64 x 2 B, 256 B per token and layer
    for version in ("4.56.0", None):
        wl = {"mode": "inference", "batch_size": 2, "seq_len": 20, "prompt_len": 16, "max_new_tokens": 4,
              "runtime": "hf"}  # fmt: skip
        result = estimate(spec(TINY_NEOX, version, **wl), hopper_or_newer=False)
        assert result.phase_components["prefill"]["kv_cache"] == 2 * 16 * LAYERS * 256
