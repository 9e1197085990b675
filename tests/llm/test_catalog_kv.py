"""KV-cache bytes per token of catalog models, as vLLM allocates them: layers x 2 (K, V) x kv_heads x
head_dim x dtype bytes; with MLA (DeepSeek) one latent of kv_lora_rank + qk_rope_head_dim per layer
(vllm/v1/kv_cache_interface.py: AttentionSpec.page_size_bytes, MLAAttentionSpec). The shapes are the
models' config.json values; each expected figure is worked out by hand in its comment."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from vramcalc.cli import app


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("llama-3.1-8b", 32 * 2 * 8 * 128 * 2),  # 131,072: 32 layers, 8 KV heads of 128, bf16
        ("mistral-7b-v0.1", 32 * 2 * 8 * 128 * 2),  # 131,072 (sliding window: fewer tokens, same bytes each)
        ("gemma-2-9b", 42 * 2 * 8 * 256 * 2),  # 344,064: head_dim 256
        ("qwen2.5-7b", 28 * 2 * 4 * 128 * 2),  # 57,344: 4 KV heads
        ("phi-3-mini-4k", 32 * 2 * 32 * 96 * 2),  # 393,216: no GQA, head_dim 96
        ("falcon-7b", 32 * 2 * 1 * 64 * 2),  # 8,192: multi-query
        ("gemma-3-27b", 62 * 2 * 16 * 128 * 2),  # 507,904
        ("deepseek-v2-lite", 27 * (512 + 64) * 2),  # 31,104: MLA latent, vLLM's figure
        ("deepseek-v3", 61 * (512 + 64) * 2),  # 70,272
        ("gpt2", 12 * 2 * 12 * 64 * 4),  # 73,728: its config.json's torch_dtype is float32
    ],
)
def test_kv_bytes_per_token_of_catalog_models(model: str, expected: int) -> None:
    result = CliRunner().invoke(app, ["bandwidth", "--model", model, "--gpu", "h100-sxm", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["kv_cache_bytes_per_token"] == expected
