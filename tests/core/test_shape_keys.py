"""Exact parameter counts of the shape keys (biases per projection, q/k norms, norm counts, embedding
extras, heads, geglu, MLA, MoE shared experts and dense first layers) against transformers.

Reference: every count below is ``sum(p.numel() for p in model.parameters())`` of the named transformers
class built from the named config on the meta device, with transformers 5.24.0 and torch 2.13.0
(``benchmarks/hf_meta_counts.py`` builds the same configs and prints these numbers). Shapes are small on
purpose: vocab_size 1000, hidden_size 64, 2 layers, 4 heads unless said otherwise.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from vramcalc.core.params import active_params, count_params, linear_weight_params, param_tensors
from vramcalc.core.shape import ModelShape
from vramcalc.errors import SpecError
from vramcalc.families.resolve import resolve_model
from vramcalc.spec.models import ModelSpec, Workload

LLAMA = {
    "architecture": "decoder",
    "layers": 2,
    "hidden_size": 64,
    "heads": 4,
    "kv_heads": 2,
    "ffn_size": 160,
    "mlp": "swiglu",
    "vocab_size": 1000,
}
BERT = {
    "architecture": "encoder",
    "layers": 2,
    "hidden_size": 64,
    "heads": 4,
    "ffn_size": 256,
    "vocab_size": 1000,
    "max_position_embeddings": 128,
}
MLA = {
    **LLAMA,
    "layers": 3,
    "tie_embeddings": False,
    "experts": 8,
    "experts_per_token": 2,
    "shared_experts": 2,
    "expert_ffn_size": 32,
    "first_dense_layers": 1,
    "kv_lora_rank": 32,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 16,
    "v_head_dim": 16,
}
del MLA["kv_heads"]
DECODER = {"architecture": "decoder", "layers": 2, "hidden_size": 64, "heads": 4, "vocab_size": 1000}

# The networks: the ``model:`` sections of benchmarks/hf_meta_counts.py, each written next to the transformers
# config class and arguments that build the same network (one home for both sides of the comparison).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from hf_meta_counts import CASES as META_CASES  # noqa: E402  (plain data; imports no torch)

#: Parameters of each case as transformers 5.24.0 (torch 2.13.0, CPU) builds it on the meta device:
#: `PYTHONPATH=. python benchmarks/hf_meta_counts.py --json`, run 2026-12-01; the independent reference.
TRANSFORMERS_COUNTS = {
    "qwen2-qkv-bias": 214_592,
    "qwen3-qk-norm": 175_040,
    "llama-attention-mlp-bias": 215_488,
    "llama-sequence-classification": 150_528,
    "llama-token-classification": 150_661,
    "gemma2-geglu-4-norms": 175_168,
    "gemma3-qk-norm": 397_760,
    "olmo2-projection-qk-norm": 214_528,
    "deepseek-v2-lite-like": 333_856,
    "deepseek-v3-like": 327_016,
    "qwen2-moe-shared-expert": 289_472,
    "qwen3-moe": 252_288,
    "falcon-7b-like-parallel": 150_400,
    "phi2-like-lm-head-bias": 228_840,
    "opt-offset-2": 172_416,
    "opt-350m-like-projections": 144_384,
    "bloom-embedding-norm": 164_224,
    "starcoder2-bias-sliding": 155_776,
    "bert-token-classification": 172_741,
    "bert-question-answering": 172_546,
    "bert-pretraining": 181_994,
    "bert-sequence-classification": 176_771,
    "roberta-classification": 176_835,
    "gpt2-sequence-classification": 172_480,
    "t5-v1.1-geglu": 261_632,
}
CASES: dict[str, tuple[dict[str, Any], int]] = {
    name: ({key: value for key, value in META_CASES[name][3].items() if value is not None}, count)
    for name, count in TRANSFORMERS_COUNTS.items()
}


def test_every_case_of_the_reference_script_is_checked() -> None:
    assert sorted(TRANSFORMERS_COUNTS) == sorted(META_CASES)


def shape_of(seq_len: int = 64, **model: Any) -> tuple[ModelShape, list[str]]:
    return resolve_model(ModelSpec(**model), Workload(batch_size=1, seq_len=seq_len))


@pytest.mark.parametrize("case", sorted(CASES))
def test_count_equals_transformers(case: str) -> None:
    spec, reference = CASES[case]
    shape, _ = shape_of(**spec)
    assert count_params(shape) == reference


@pytest.mark.parametrize("case", sorted(CASES))
def test_param_tensors_add_up(case: str) -> None:
    shape, _ = shape_of(**CASES[case][0])
    assert sum(n * r * c for n, r, c in param_tensors(shape)) == count_params(shape)


def test_qwen2_by_hand() -> None:
    # embeddings 1000 x 64 and an untied head: 128,000. Per layer: q 64 x 64 + 64 = 4,160, k and v
    # 64 x 32 + 32 = 2,080 each, o 64 x 64 = 4,096 (no bias), SwiGLU 3 x 64 x 160 = 30,720, two RMSNorms 128:
    # 43,264; two layers 86,528; final norm 64. Total 214,592 (= transformers' count above).
    shape, _ = shape_of(**CASES["qwen2-qkv-bias"][0])
    assert count_params(shape) == 128_000 + 2 * (4_160 + 2 * 2_080 + 4_096 + 30_720 + 128) + 64


def test_deepseek_v2_lite_like_by_hand() -> None:
    # embeddings + untied head 128,000. Attention per layer: q_proj 64 x 4 x (16 + 8) = 6,144; kv_a_proj_with_mqa
    # 64 x (32 + 8) = 2,560; kv_a_layernorm 32; kv_b_proj 32 x 4 x (16 + 16) = 4,096; o_proj 4 x 16 x 64 = 4,096:
    # 16,928, plus two norms 128, three layers: 51,168. Layer 0 dense SwiGLU 3 x 64 x 160 = 30,720. Layers 1-2:
    # 8 experts x 3 x 64 x 32 = 49,152, router 8 x 64 = 512, shared MLP of 2 x 32: 3 x 64 x 64 = 12,288:
    # 61,952 each. Final norm 64. Total 333,856 (= transformers' count above).
    shape, _ = shape_of(**MLA)
    assert count_params(shape) == 128_000 + 3 * (16_928 + 128) + 30_720 + 2 * 61_952 + 64
    # active: 6 of 8 experts idle in each of the 2 MoE layers: 2 x 6 x 6,144
    assert active_params(shape, count_params(shape)) == 333_856 - 2 * 6 * 6_144


def test_geglu_has_the_tensors_of_swiglu() -> None:
    swiglu, _ = shape_of(**{**LLAMA, "norm": "rmsnorm"})
    geglu, _ = shape_of(**{**LLAMA, "mlp": "geglu", "norm": "rmsnorm"})
    assert count_params(geglu) == count_params(swiglu)
    assert param_tensors(geglu) == param_tensors(swiglu)


def test_qkv_bias_overrides_attention_bias() -> None:
    # q, k, v biases (64 + 32 + 32 per layer) without o's 64: attention_bias true, qkv_bias false leaves o's only
    base, _ = shape_of(**LLAMA)
    only_o, _ = shape_of(**LLAMA, attention_bias=True, qkv_bias=False)
    assert count_params(only_o) - count_params(base) == 2 * 64


def test_linear_weights_include_the_lm_head_bias_and_projections() -> None:
    # OPT-350m-like: project_in (32 -> 64) and project_out (64 -> 32) are linears; the tied head is counted
    shape, _ = shape_of(**CASES["opt-350m-like-projections"][0])
    per_layer = 4 * (64 * 64 + 64) + 2 * 64 * 256 + 256 + 64
    assert linear_weight_params(shape) == 2 * per_layer + 2 * 32 * 64 + 1000 * 32


def test_defaults_are_stated() -> None:
    _, notes = shape_of(**{**MLA, "qk_rope_head_dim": None, "v_head_dim": None})
    assert any(n.startswith("qk_rope_head_dim not given: 64") for n in notes)
    assert any(n.startswith("v_head_dim not given: 128") for n in notes)
    _, notes = shape_of(**LLAMA, sliding_window=4096)
    assert any(n.startswith("sliding_window_pattern not given") for n in notes)
    _, notes = shape_of(**DECODER, parallel_block=True)
    assert any(n.startswith("norms_per_layer not given: 2") for n in notes)
    _, notes = shape_of(**LLAMA, head="classification")
    assert "head_bias not given: false" in notes


def test_vocab_from_params_uses_the_row_width_of_the_head() -> None:
    # Phi-2-like: each vocabulary row holds an embedding row, an untied head row and a head bias: 129 parameters
    spec = {k: v for k, v in CASES["phi2-like-lm-head-bias"][0].items() if k != "vocab_size"}
    shape, _ = shape_of(**spec, params=228_840)
    assert shape.vocab == 1000


@pytest.mark.parametrize(
    "model",
    [
        {**LLAMA, "q_lora_rank": 16},
        {**LLAMA, "sliding_window_pattern": 2},
        {**LLAMA, "shared_expert_gate": True},
        {**LLAMA, "experts": 4, "first_dense_layers": 2},
        {**LLAMA, "kv_lora_rank": 32, "kv_heads": 2},
        {**LLAMA, "position": "rotary", "position_offset": 2},
        {**LLAMA, "norms_per_layer": 5},
    ],
)
def test_invalid_combinations_are_refused(model: dict[str, Any]) -> None:
    with pytest.raises((ValueError, SpecError)):
        shape_of(**model)


def _saved(shape: ModelShape) -> int:
    from vramcalc.choices import Attention
    from vramcalc.core.activations import Dtypes, Tokens, layer_saved_bytes

    return layer_saved_bytes(shape, Tokens(batch=1, seq=8, target=8), Dtypes(2, 2, 2, False), Attention.sdpa)


def test_a_parallel_block_with_one_norm_saves_one_norm_output() -> None:
    # LayerNorm, bf16, 8 tokens x 64. A second norm on the same block input (GPT-NeoX's parallel residual)
    # saves that same input tensor, so it adds its output (2 B) + mean/rstd (8 B) per token = 8 x 136 B
    one, _ = shape_of(**CASES["falcon-7b-like-parallel"][0], seq_len=8)
    two, _ = shape_of(**{**CASES["falcon-7b-like-parallel"][0], "norms_per_layer": 2}, seq_len=8)
    assert _saved(two) - _saved(one) == 8 * (64 * 2 + 8)


def test_qk_norms_save_their_input_and_output() -> None:
    # Qwen3-like: q 4 x 32 and k 2 x 32 wide; fp32 input copy + bf16 output: 8 tokens x 192 x (4 + 2) B
    plain, _ = shape_of(**{**CASES["qwen3-qk-norm"][0], "qk_norm": "none"}, seq_len=8)
    normed, _ = shape_of(**CASES["qwen3-qk-norm"][0], seq_len=8)
    assert _saved(normed) - _saved(plain) == 8 * 192 * 6


def test_mla_saves_its_latents() -> None:
    # the kv latent's RMSNorm (kv_lora_rank 32, bf16), as DeepseekV2RMSNorm keeps it (traced: transformers 5.25,
    # benchmarks/data/tracer_families.json): its fp32 input copy (4 B), normalised 16-bit cast and output (the
    # input of kv_b_proj, 2 B each) and rstd (4 B per token); the split-off rotary key is not kept. 8 tokens x
    # (32 x 8 + 4) B over the plain attention of the same q/k/v widths (head_dim 24 = qk_nope 16 + qk_rope 8)
    mla, _ = shape_of(**MLA, seq_len=8)
    assert mla.head_dim == 24
    plain, _ = shape_of(**{k: v for k, v in MLA.items() if "dim" not in k and "rank" not in k}, head_dim=24, seq_len=8)
    assert _saved(mla) - _saved(plain) == 8 * (32 * 8 + 4)
