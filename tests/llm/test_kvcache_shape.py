"""KV cache of the shape keys: multi-head latent attention's single latent and sliding-window layers."""

from __future__ import annotations

from typing import Any

from vramcalc.choices import KvCacheDtype
from vramcalc.core.params import active_params, count_params
from vramcalc.core.shape import ModelShape
from vramcalc.families.resolve import resolve_model
from vramcalc.llm import kvcache
from vramcalc.spec.models import ModelSpec, Workload

BF16 = 2

# deepseek-ai/DeepSeek-V2-Lite config.json
DEEPSEEK_V2_LITE = {
    "architecture": "decoder",
    "layers": 27,
    "hidden_size": 2048,
    "heads": 16,
    "ffn_size": 10944,
    "mlp": "swiglu",
    "vocab_size": 102400,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "experts": 64,
    "experts_per_token": 6,
    "shared_experts": 2,
    "expert_ffn_size": 1408,
    "first_dense_layers": 1,
    "tie_embeddings": False,
}
# mistralai/Mistral-7B-v0.1 config.json (sliding_window 4096 in every layer)
MISTRAL_7B = {
    "architecture": "decoder",
    "layers": 32,
    "hidden_size": 4096,
    "heads": 32,
    "kv_heads": 8,
    "ffn_size": 14336,
    "mlp": "swiglu",
    "vocab_size": 32000,
    "sliding_window": 4096,
}


def shape_of(**model: Any) -> ModelShape:
    return resolve_model(ModelSpec(**model), Workload(batch_size=1, seq_len=4096))[0]


def test_mla_caches_one_latent_per_layer() -> None:
    # vLLM reports 31,104 B/token for DeepSeek-V2-Lite in bf16: 27 layers x (512 + 64) x 2 B (MLAAttentionSpec:
    # one latent, no separate V); 16 heads x 2 x 128 ... would be 27 x 16 x (192 + 128) x 2 = 276,480
    assert kvcache.shape_bytes_per_token(shape_of(**DEEPSEEK_V2_LITE), KvCacheDtype.auto, BF16) == 31_104
    assert kvcache.shape_bytes_per_token(shape_of(**DEEPSEEK_V2_LITE), KvCacheDtype.fp8, BF16) == 27 * 576


def test_deepseek_v2_lite_parameters_match_the_model_card() -> None:
    # model card: 15.7B total parameters (its 2.4B "activated" follows a convention for the embedding and
    # output tables that the card does not state, so only the total is checked here)
    shape = shape_of(**DEEPSEEK_V2_LITE)
    total = count_params(shape)
    assert round(total / 1e9, 1) == 15.7
    # 6 of 64 routed experts run: the 58 others (3 x 2048 x 1408 each) in 26 MoE layers are idle
    assert active_params(shape, total) == total - 26 * 58 * 3 * 2048 * 1408


def test_sliding_layers_hold_the_window_only() -> None:
    shape = shape_of(**MISTRAL_7B)
    per_token = kvcache.shape_bytes_per_token(shape, KvCacheDtype.auto, BF16)
    assert per_token == 32 * 2 * 8 * 128 * 2  # 131,072 B/token (every layer slides)
    sliding = kvcache.sliding_bytes_per_token(shape, KvCacheDtype.auto, BF16)
    assert sliding == per_token
    # vLLM, blocks of 16: cdiv(4096, 16) + 1 = 257 blocks = 4,112 tokens at 32k context
    assert kvcache.sequence_bytes(per_token, sliding, 4096, 32_768, 16) == 4_112 * 131_072
    # HF DynamicSlidingWindowLayer: 4,095 kept + the new token
    assert kvcache.sequence_bytes(per_token, sliding, 4096, 32_768, 1) == 4_096 * 131_072
    # below the window nothing changes
    assert kvcache.sequence_bytes(per_token, sliding, 4096, 1000, 16) == 1008 * 131_072


def test_alternating_layers_keep_the_global_ones_whole() -> None:
    # Gemma-2-9B-like: 42 layers, pattern 2 -> layers 2, 4, ..., 42 global (21), 21 sliding over 4,096
    shape = shape_of(**{**MISTRAL_7B, "layers": 42, "sliding_window_pattern": 2})
    per_token = kvcache.shape_bytes_per_token(shape, KvCacheDtype.auto, BF16)
    layer = 2 * 8 * 128 * 2
    assert kvcache.sliding_bytes_per_token(shape, KvCacheDtype.auto, BF16) == 21 * layer
    assert kvcache.sequence_bytes(per_token, 21 * layer, 4096, 8192, 1) == 21 * layer * (8192 + 4096)
