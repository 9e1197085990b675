"""vLLM V1's KV pool with sliding windows and mixed layers, reproduced by hand from vLLM's formulas.

The formulas (vllm/v1/kv_cache_interface.py, vllm/v1/core/kv_cache_utils.py):

* page of one layer = block x kv_heads x (K head + V head) x dtype bytes (``AttentionSpec.page_size_bytes``);
* groups: one group when every layer has the same spec; mixed sliding and full layers in groups of the
  smaller count (the larger below 1.5 times it), the last group of each kind padded
  (``_get_kv_cache_groups_uniform_page_size``);
* ``num_blocks = available // page // group_size`` (``get_num_blocks``); "GPU KV cache size" =
  ``num_blocks // groups x block`` (``_report_kv_cache_config``);
* one request: ``cdiv(max_model_len, block)`` blocks per full group (``FullAttentionSpec``) and
  ``cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), block) + 1`` per sliding group
  (``SlidingWindowSpec.max_memory_usage_bytes``);
* "Maximum concurrency" = ``num_blocks / request blocks`` (``get_max_concurrency_for_kv_cache_config``).

The model shapes are those of each model's config.json on the Hub (the catalog, vramcalc/spec/models.yaml,
holds them): Mistral-7B-v0.1 (mistralai/Mistral-7B-v0.1: 32 layers, 32 heads of 4,096 / 32 = 128, 8 KV
heads, sliding_window 4,096 on every layer), Gemma-2-9B (google/gemma-2-9b: 42 layers, 8 KV heads,
head_dim 256, sliding_window 4,096 on every other layer), Gemma-3-27B (google/gemma-3-27b-it text config: 62
layers, 16 KV heads, head_dim 128, sliding_window 1,024, every 6th layer global), DeepSeek-V2-Lite
(deepseek-ai/DeepSeek-V2-Lite: 27 layers, kv_lora_rank 512 + qk_rope_head_dim 64). The KV budget is read
from the estimate (what vLLM's profile leaves, unchanged by this layout); everything after it is by hand.
On an H100 (80 GB, not an A100) V1 ``vllm serve`` schedules 8,192 tokens per step by default.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_errors import estimate_error_line
from cli_json import run_json
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.hardware.lookup import get_gpu
from vramcalc.planning.budget import budget_for, fit_on
from vramcalc.planning.limits import max_batch
from vramcalc.spec.load import parse_spec
from vramcalc.stacks import vllm

runner = CliRunner()
H100_BATCHED_TOKENS = 8192  # EngineArgs.get_batch_defaults: 70 GiB or more, not an A100
BLOCK = 16


def _doc(model: str, context: int, **workload: Any) -> dict[str, Any]:
    prompt = context // 2
    base = {
        "mode": "inference",
        "batch_size": 1,
        "prompt_len": prompt,
        "max_new_tokens": context - prompt,
        "runtime": "vllm",
        "precision": "bf16",
    }
    return {"name": model, "model": model, "workload": base | workload}


def _estimate(tmp_path: Path, doc: dict[str, Any]) -> dict[str, Any]:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return run_json(["estimate", str(path), "--gpu", "h100-sxm", "--json"])


# (model, context, page of one layer in bytes, group size, full groups, sliding groups, blocks per request)
CASES = [
    # Mistral: 16 x 8 x (128 + 128) x 2 = 65,536 B; all 32 layers slide: one group of 32.
    # 32k: cdiv(min(4,095 + 8,192, 32,768), 16) + 1 = cdiv(12,287, 16) + 1 = 768 + 1 = 769
    ("mistral-7b-v0.1", 32768, 65536, 32, 0, 1, 769),
    # 2k: cdiv(min(12,287, 2,048), 16) + 1 = 128 + 1 = 129
    ("mistral-7b-v0.1", 2048, 65536, 32, 0, 1, 129),
    # Gemma 2: 16 x 8 x (256 + 256) x 2 = 131,072 B; 21 sliding + 21 full layers: groups of 21, none padded.
    # 32k: 2,048 (full) + 769 (sliding) = 2,817
    ("gemma-2-9b", 32768, 131072, 21, 1, 1, 2817),
    # 2k: 128 + 129 = 257
    ("gemma-2-9b", 2048, 131072, 21, 1, 1, 257),
    # Gemma 3: 16 x 16 x (128 + 128) x 2 = 131,072 B; 62 // 6 = 10 full, 52 sliding: 52 >= 1.5 x 10, so
    # groups of 10: 1 full group, cdiv(52, 10) = 6 sliding groups (60 slots for 52 layers: 8 padding).
    # 32k: 2,048 + 6 x (cdiv(min(1,023 + 8,192, 32,768), 16) + 1) = 2,048 + 6 x (576 + 1) = 5,510
    ("gemma-3-27b", 32768, 131072, 10, 1, 6, 5510),
    # 2k: 128 + 6 x (cdiv(2,048, 16) + 1) = 128 + 6 x 129 = 902
    ("gemma-3-27b", 2048, 131072, 10, 1, 6, 902),
    # DeepSeek-V2-Lite (MLA): one latent of 512 + 64 = 576 per token and layer: 16 x 576 x 2 = 18,432 B;
    # 27 full-attention layers, one group. 32k: cdiv(32,768, 16) = 2,048
    ("deepseek-v2-lite", 32768, 18432, 27, 1, 0, 2048),
]


@pytest.mark.parametrize(("model", "context", "page", "size", "full", "sliding", "per_request"), CASES)
def test_pool_by_hand(
    tmp_path: Path, model: str, context: int, page: int, size: int, full: int, sliding: int, per_request: int
) -> None:
    doc = _estimate(tmp_path, _doc(model, context))
    assert doc["vllm"]["max_num_batched_tokens"] == H100_BATCHED_TOKENS
    budget = doc["kv_cache_budget_bytes"]
    blocks = budget // page // size  # get_num_blocks
    assert doc["kv_cache_blocks"] == blocks
    assert doc["kv_cache_tokens"] == blocks // (full + sliding) * BLOCK  # "GPU KV cache size"
    assert doc["max_concurrency"] == math.floor(blocks * 100 / per_request) / 100  # cut to two decimals
    assert doc["max_concurrent_sequences"] == blocks // per_request
    # one request of the context reserves its blocks in every group: the batch's KV cache
    assert doc["kv_cache_bytes"] == per_request * page * size
    assert doc["kv_cache_startup_bytes"] == per_request * page * size
    assert doc["max_model_len_that_fits"] is None


def test_mistral_concurrency_is_vllm_s_figure(tmp_path: Path) -> None:
    """Mistral-7B-v0.1 at 32k on an H100: vLLM's concurrency counts 769 blocks per request, not 2,048: the
    same pool gives 2,048 / 769 = 2.66 times the full-context figure."""
    doc = _estimate(tmp_path, _doc("mistral-7b-v0.1", 32768))
    blocks = doc["kv_cache_blocks"]
    assert doc["max_concurrency"] == math.floor(blocks * 100 / 769) / 100
    assert doc["max_concurrency"] > 2.6 * math.floor(blocks * 100 / 2048) / 100


def test_gemma3_tokens_count_the_padding(tmp_path: Path) -> None:
    """Gemma-3-27B: the pool's tokens are its blocks over 7 groups of 10 layer slots (70 slots for 62 layers).
    Counting the 62 layers alone gives 70 / 62 - 1 = 12.9 % more tokens."""
    doc = _estimate(tmp_path, _doc("gemma-3-27b", 32768))
    budget = doc["kv_cache_budget_bytes"]
    unpadded = budget // (BLOCK * 62 * 8192) * BLOCK  # 8,192 B per token and layer (131,072 / 16)
    assert doc["kv_cache_tokens"] == budget // 131072 // 10 // 7 * BLOCK
    assert 0.10 < unpadded / doc["kv_cache_tokens"] - 1 < 0.14
    assert vllm.group_size(10, 52) == 10


def test_group_size_rule() -> None:
    """``_get_kv_cache_groups_uniform_page_size``: the smaller count, or the larger below 1.5 times it
    (gpt-oss-20b with an EAGLE draft: 12 sliding + 13 full -> groups of 13); one kind: one group of all."""
    assert vllm.group_size(13, 12) == 13
    assert vllm.group_size(10, 15) == 10  # 15 is not below 1.5 x 10
    assert vllm.group_size(21, 21) == 21
    assert vllm.group_size(32, 0) == 32 and vllm.group_size(0, 32) == 32


def test_start_up_refusal_says_what_vllm_says(tmp_path: Path) -> None:
    """Gemma-3-27B with max_model_len 131,072 at memory_utilization 0.85 on an H100: one request needs
    1 x 8,192 + 6 x (cdiv(min(1,023 + 8,192, 131,072), 16) + 1) = 8,192 + 6 x 577 = 11,654 blocks of
    10 x 131,072 = 1,310,720 B: 15,275,130,880 B, more than the budget, so vLLM refuses to start
    (``_check_enough_kv_cache_memory``) and names the longest max_model_len that fits:
    cdiv(L, 16) + 3,462 <= budget // 1,310,720."""
    doc = _doc("gemma-3-27b", 131072, memory_utilization=0.85)
    estimate = _estimate(tmp_path, doc)
    budget = estimate["kv_cache_budget_bytes"]
    assert estimate["kv_cache_startup_bytes"] == 11654 * 1310720 > budget
    longest = (budget // 1310720 - 3462) * BLOCK
    assert estimate["max_model_len_that_fits"] == longest
    assert estimate["max_concurrent_sequences"] == 0 and not estimate["gpu"]["fits"]
    path = tmp_path / "spec.yaml"
    text = " ".join(runner.invoke(app, ["estimate", str(path), "--gpu", "h100-sxm"]).stdout.split())
    assert "vLLM would refuse to start: one request of max_model_len 131,072" in text
    assert f"the largest max_model_len that fits is {longest:,}" in text
    # a spec whose request fits but whose max_model_len does not: vLLM still refuses, nothing fits
    short = _doc("gemma-3-27b", 4096, memory_utilization=0.75, max_model_len=131072)
    spec = parse_spec(short)
    budget_card = budget_for(get_gpu("h100-sxm"))
    verdict = fit_on(spec, budget_card)
    assert verdict.kv_pool is not None and verdict.kv_pool.refused and not verdict.fits
    assert max_batch(spec, budget_card).value == 0


def test_pinned_v0_release_keeps_one_block_over_every_layer(tmp_path: Path) -> None:
    """vLLM 0.6.4 (V0) has no groups of layers: its blocks cover all 32 layers (2 MiB each for Mistral) and
    its concurrency is tokens over the context, as before."""
    doc = _estimate(tmp_path, _doc("mistral-7b-v0.1", 32768, versions={"vllm": "0.6.4"}))
    assert doc["kv_cache_blocks"] == doc["kv_cache_budget_bytes"] // (BLOCK * 32 * 4096)
    assert "kv_cache_startup_bytes" not in doc or doc["kv_cache_startup_bytes"] is None


#: Qwen2-7B's shape (Qwen/Qwen2-7B config.json: 28 layers, hidden 3,584, 28 heads of 128, 4 KV heads) with
#: its sliding window switched on: ``use_sliding_window: true``, ``sliding_window: 4096``, ``max_window_layers:
#: 21``. transformers and vLLM slide on the layers whose index is at least max_window_layers
#: (``layer_idx >= config.max_window_layers``): the first 21 attend in full, the last 7 slide.
QWEN2_WINDOWED = {
    "architecture": "decoder", "layers": 28, "hidden_size": 3584, "heads": 28, "kv_heads": 4, "ffn_size": 18944,
    "mlp": "swiglu", "vocab_size": 152064, "sliding_window": 4096, "full_attention_layers": 21,
}  # fmt: skip


@pytest.mark.parametrize(("context", "per_request"), [(32768, 6913), (2048, 513)])
def test_qwen2_max_window_layers_by_hand(tmp_path: Path, context: int, per_request: int) -> None:
    """Page of one layer: 16 x 4 x (128 + 128) x 2 = 32,768 B. 21 full and 7 sliding layers: 21 >= 1.5 x 7, so
    groups of 7: 3 full groups and 1 sliding group, none padded. One request at 32k: 3 x cdiv(32,768, 16)
    = 6,144 + cdiv(min(4,095 + 8,192, 32,768), 16) + 1 = 769: 6,913 blocks; at 2k: 3 x 128 + 129 = 513."""
    doc = _estimate(tmp_path, {**_doc("qwen2", context), "model": QWEN2_WINDOWED})
    blocks = doc["kv_cache_budget_bytes"] // 32768 // 7
    assert doc["kv_cache_blocks"] == blocks
    assert doc["kv_cache_tokens"] == blocks // 4 * BLOCK
    assert doc["max_concurrency"] == math.floor(blocks * 100 / per_request) / 100
    assert doc["max_concurrent_sequences"] == blocks // per_request
    assert doc["kv_cache_bytes"] == per_request * 32768 * 7


def test_qwen2_window_keys_from_the_config() -> None:
    """The importer reads use_sliding_window / max_window_layers (and transformers 5's layer_types) into
    full_attention_layers; a max_window_layers past the last layer leaves no layer sliding."""
    from vramcalc.spec.hf_import import model_from_config

    config = {
        "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584, "intermediate_size": 18944,
        "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
        "max_position_embeddings": 32768, "sliding_window": 4096, "tie_word_embeddings": False,
    }  # fmt: skip
    windowed = {**config, "use_sliding_window": True, "max_window_layers": 21}
    model, _ = model_from_config(windowed, "x")
    assert (model["sliding_window"], model["full_attention_layers"]) == (4096, 21)
    types = {**config, "layer_types": ["full_attention"] * 21 + ["sliding_attention"] * 7}
    assert model_from_config(types, "x")[0]["full_attention_layers"] == 21
    assert "sliding_window" not in model_from_config({**windowed, "max_window_layers": 28}, "x")[0]
    assert "sliding_window" not in model_from_config({**config, "use_sliding_window": False}, "x")[0]


def test_full_attention_layers_needs_a_window(tmp_path: Path) -> None:
    for extra, message in [
        ({"sliding_window": None}, "full_attention_layers: only valid with sliding_window"),
        ({"sliding_window_pattern": 2}, "full_attention_layers: give it or sliding_window_pattern, not both"),
        ({"full_attention_layers": 29}, "full_attention_layers: 29 is more than the 28 layers"),
    ]:
        model = {k: v for k, v in {**QWEN2_WINDOWED, **extra}.items() if v is not None}
        text = yaml.safe_dump({**_doc("qwen2", 2048), "model": model})
        assert message in estimate_error_line(tmp_path / "bad.yaml", text)
