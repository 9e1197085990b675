"""vLLM's own model code: the RoPE cos/sin cache it counts with the weights (vllm/model_executor/layers/
rotary_embedding.py ``RotaryEmbedding.__init__``: ``[max_position, rotary_dim]`` cast to the model's dtype, one per
rotary setting). Each expected figure is the cache's size by hand; the other weights are the same under both
runtimes, so the difference of the parameter bytes is the cache."""

from __future__ import annotations

from typing import Any

from vramcalc.families import estimate
from vramcalc.spec.load import parse_spec


def _parameters(model: Any, runtime: str, **workload: Any) -> int:
    wl = {"mode": "inference", "batch_size": 1, "seq_len": 2048, "precision": "bf16", "runtime": runtime, **workload}
    return estimate(parse_spec({"model": model, "workload": wl}, "test")).components["parameters"]


def test_llama_3_1_rope_cache_is_32_mib() -> None:
    # 131,072 positions (max_position_embeddings) x head_dim 128 x 2 B (bf16)
    assert _parameters("llama-3.1-8b", "vllm") - _parameters("llama-3.1-8b", "hf") == 131_072 * 128 * 2


def test_mla_rotates_only_its_rope_part() -> None:
    # DeepSeek-V2-Lite: 163,840 positions x qk_rope_head_dim 64 x 2 B
    assert _parameters("deepseek-v2-lite", "vllm") - _parameters("deepseek-v2-lite", "hf") == 163_840 * 64 * 2


def test_fp16_cache_and_no_cache_without_rotary_or_positions() -> None:
    assert (
        _parameters("mistral-7b-v0.3", "vllm", precision="fp16")
        - _parameters("mistral-7b-v0.3", "hf", precision="fp16")
        == 32_768 * 128 * 2
    )  # max_position_embeddings 32,768, head_dim 128, fp16
    assert _parameters("gpt2", "vllm", seq_len=512) == _parameters("gpt2", "hf", seq_len=512)  # learned positions
    inline = {
        "architecture": "decoder",
        "layers": 2,
        "hidden_size": 256,
        "heads": 4,
        "ffn_size": 512,
        "vocab_size": 1000,
    }
    assert _parameters(inline, "vllm") == _parameters(inline, "hf")  # no max_position_embeddings given


def test_scaled_caches_by_hand() -> None:
    """vLLM's ``get_rope`` classes (0.11.0): Gemma 3's global layers scale linearly by 8 (``max_position x 8``)
    and its sliding layers rotate with ``rope_local_base_freq``, a second default cache; Phi-3.5's ``longrope``
    keeps a short (``original_max_position_embeddings``) and a long cache; Llama 4 Scout's ``llama3`` type caches
    its whole ``max_position_embeddings``."""
    gemma3_4b = (131_072 * 8 + 131_072) * 256 * 2  # head_dim 256, bf16: 576 MiB
    assert _parameters("gemma-3-4b", "vllm") - _parameters("gemma-3-4b", "hf") == gemma3_4b
    gemma3_27b = (131_072 * 8 + 131_072) * 128 * 2  # head_dim 128: 288 MiB
    assert _parameters("gemma-3-27b", "vllm") - _parameters("gemma-3-27b", "hf") == gemma3_27b
    phi35 = (4_096 + 131_072) * 96 * 2  # head_dim 3,072 / 32
    assert _parameters("phi-3.5-mini", "vllm") - _parameters("phi-3.5-mini", "hf") == phi35
    scout = 10_485_760 * 128 * 2  # 2.5 GiB
    assert _parameters("llama-4-scout", "vllm") - _parameters("llama-4-scout", "hf") == scout
