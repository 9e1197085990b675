"""KV cache: bytes per token (GQA), paged blocks, generation phases, vLLM-style capacity, --json keys."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from measured_records import measured_case
from typer.testing import CliRunner

from vramcalc.choices import KvCacheDtype
from vramcalc.cli import app
from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.llm import kvcache
from vramcalc.spec.load import parse_spec

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT.parent / "shared" / "calibration" / "measured.yaml"
LLAMA3_8B = {
    "architecture": "decoder", "layers": 32, "hidden_size": 4096, "heads": 32, "kv_heads": 8, "ffn_size": 14336,
    "mlp": "swiglu", "vocab_size": 128256, "tie_embeddings": False,
}  # fmt: skip
TINY = {"architecture": "decoder", "layers": 2, "hidden_size": 64, "heads": 4, "kv_heads": 2, "vocab_size": 100}


def spec(model: dict[str, Any], **workload: Any) -> Any:
    return parse_spec({"name": "t", "model": model, "workload": {"mode": "inference", "batch_size": 1, **workload}})


def test_llama3_8b_bytes_per_token_counts_kv_heads_not_heads() -> None:
    # 2 (K, V) x 32 layers x 8 KV heads x 128 head_dim x 2 B (bf16) = 131,072 B/token;
    # with all 32 query heads it would be 524,288 (the GQA over-count peers make)
    assert kvcache.bytes_per_token(32, 8, 128, KvCacheDtype.auto, 2) == 131_072
    assert kvcache.bytes_per_token(32, 32, 128, KvCacheDtype.auto, 2) == 524_288
    result = estimate(spec(LLAMA3_8B, seq_len=8192, precision="bf16", max_new_tokens=1))
    assert result.llm.kv_cache_bytes_per_token == 131_072


def test_kv_dtypes_fp8_and_int8_scale_overhead() -> None:
    # fp8: 1 B/element, per-tensor scales only: 2 x 32 x 8 x 128 x 1 = 65,536
    assert kvcache.bytes_per_token(32, 8, 128, KvCacheDtype.fp8, 2) == 65_536
    # int8 with an fp16 scale and zero per token, head and K/V: 2 x 32 x 8 x (128 + 4) = 67,584
    assert kvcache.bytes_per_token(32, 8, 128, KvCacheDtype.int8, 2) == 67_584
    # separate K and V head dims: 32 x 8 x (192 + 128) x 2 = 163,840
    assert kvcache.bytes_per_token(32, 8, 192, KvCacheDtype.bf16, 4, v_head_dim=128) == 163_840


def test_paged_blocks_round_up_per_sequence() -> None:
    # 1,000 tokens in 16-token blocks -> 63 blocks = 1,008 tokens
    assert kvcache.paged_tokens(1000, 16) == 1008
    # batch 3 x 1,008 tokens x 131,072 B = 396,361,728
    result = estimate(spec(LLAMA3_8B, prompt_len=900, max_new_tokens=100, batch_size=3, precision="bf16"))
    assert result.components["kv_cache"] == 396_361_728
    assert set(result.phases) == {"prefill", "decode"}


def test_tiny_generation_kv_cache_by_hand() -> None:
    # tiny: 2 layers, 2 KV heads of 16 dims, fp32 -> 2 x 2 x 2 x 16 x 4 = 512 B/token
    # hf runtime (no blocks): prefill caches the 10-token prompt, decode the full 30 tokens (batch 2)
    s = spec(TINY, batch_size=2, prompt_len=10, max_new_tokens=20, runtime="hf")
    result = estimate(s)
    assert result.llm.kv_cache_bytes_per_token == 512
    assert result.phase_components["prefill"]["kv_cache"] == 2 * 10 * 512
    assert result.phase_components["decode"]["kv_cache"] == 2 * 30 * 512
    # DynamicCache's torch.cat: one layer's old cache alive with the new one: 30,720 / 2 layers
    assert result.phase_components["decode"]["temporaries"] == 15_360
    legacy = estimate(spec(TINY, batch_size=2, prompt_len=10, max_new_tokens=20, runtime="hf-legacy"))
    assert legacy.phase_components["decode"]["temporaries"] == 2 * 29 * 512  # the previous step's cache


def test_plain_inference_unchanged_and_use_cache_adds_the_forward_cache() -> None:
    plain = estimate(spec(TINY, seq_len=32, batch_size=2))
    assert plain.components["kv_cache"] == 0 and plain.peak_phase == "forward"
    cached = estimate(spec(TINY, seq_len=32, batch_size=2, use_cache=True))
    # 2 sequences x 32 tokens x 512 B (fp32) = 32,768 on top of the same forward
    assert cached.peak_allocated_bytes - plain.peak_allocated_bytes == 32_768


def test_capacity_formula_by_hand() -> None:
    # budget = floor(0.5 x 10,000,000) - 1,000,000 = 4,000,000; block = 16 x 1,000 B = 16,000 B
    # -> 250 blocks = 4,000 tokens; a 1,000-token sequence takes ceil(1,000 / 16) = 63 blocks -> 3 sequences;
    # vLLM V1's concurrency: 250 / 63 = 3.968 -> 3.96x (V0 printed 4,000 tokens / 1,000 = 4.0x, though only
    # three whole sequences fit)
    cap = kvcache.capacity(10_000_000, 0.5, 1_000_000, 1000, 16, 1000)
    assert (cap.budget_bytes, cap.blocks, cap.tokens, cap.max_concurrency, cap.max_sequences) == (
        4_000_000, 250, 4000, 3.96, 3,
    )  # fmt: skip


def _vllm_case() -> dict[str, Any]:
    return measured_case("vllm-qwen2.5-1.5b-t4-util0.5")


@pytest.mark.skipif(not MEASURED.exists(), reason="../shared/calibration not present")
def test_vllm_qwen25_kv_capacity_case() -> None:
    # measured.yaml case vllm-qwen2.5-1.5b-t4-util0.5: "# GPU blocks 5519" x 16 = 88,304 tokens, 2.69x at 32,768
    case = _vllm_case()
    model = {
        "architecture": "decoder", "layers": 28, "hidden_size": 1536, "heads": 12, "kv_heads": 2, "ffn_size": 8960,
        "mlp": "swiglu", "vocab_size": 151936, "tie_embeddings": True,
    }  # fmt: skip
    result = estimate(spec(model, seq_len=32768, precision="fp16", memory_utilization=0.5))
    # 2 x 28 layers x 2 KV heads x 128 x 2 B = 28,672 B/token (the case's own check)
    assert result.llm.kv_cache_bytes_per_token == 28_672
    also = {a["quantity"]: a["value_bytes"] for a in case["measured"]["also"]}
    # vLLM's printed KV memory (2.36 GiB, two decimals: +-0.005 GiB) brackets the block count exactly
    lo, hi = (also["kv_cache"] - 2**30 // 200) // (16 * 28_672), (also["kv_cache"] + 2**30 // 200) // (16 * 28_672)
    assert lo <= case["measured"]["value"] // 16 <= hi
    # the capacity formula on vLLM's printed budget components lands within the printing precision (0.2 %)
    non_kv = also["weights"] + also["activation_peak"] + also["non_torch"]
    cap = kvcache.capacity(case["gpu"]["vram_usable_bytes"], 0.5, non_kv, 28_672, 16, 32768)
    assert abs(cap.tokens - case["measured"]["value"]) <= 0.002 * case["measured"]["value"]
    # vLLM's "maximum concurrency" is KV tokens / max_model_len: 88,304 / 32,768 = 2.69x
    measured = kvcache.capacity(case["gpu"]["vram_usable_bytes"], 0.5, non_kv, 28_672, 16, 32768)
    assert round(case["measured"]["value"] / 32768, 2) == case["measured"]["max_concurrency_at_max_model_len"]
    assert abs(measured.max_concurrency - case["measured"]["max_concurrency_at_max_model_len"]) <= 0.02


def test_encoder_only_model_cannot_generate() -> None:
    bert = {"architecture": "encoder", "layers": 2, "hidden_size": 64, "heads": 4, "vocab_size": 100}
    with pytest.raises(SpecError, match="encoder-only"):
        estimate(spec(bert, prompt_len=8, max_new_tokens=8))


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ({"prompt_len": 10, "max_new_tokens": 5, "seq_len": 20}, "seq_len: 20 is not prompt_len"),
        ({"seq_len": 8, "prompt_len": 9}, "prompt_len: 9 is longer"),
        ({"mode": "train", "seq_len": 8, "prompt_len": 4}, "prompt_len: only valid with mode: inference"),
        ({"seq_len": 8, "memory_utilization": 1.5}, "memory_utilization"),
        ({"seq_len": 8, "kv_cache_dtype": "int3"}, "kv_cache_dtype"),
    ],
)
def test_bad_generation_keys(workload: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        spec(TINY, **workload)


def test_cli_json_contract_with_card(write_spec: Any) -> None:
    path = write_spec(
        yaml.safe_dump(
            {
                "name": "l3",
                "model": LLAMA3_8B,
                "workload": {
                    "mode": "inference",
                    "batch_size": 2,
                    "prompt_len": 8000,
                    "max_new_tokens": 192,
                    "precision": "bf16",
                },
            }
        )
    )
    result = runner.invoke(app, ["estimate", str(path), "--json", "--gpu", "h100-sxm"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    for key in (
        "kv_cache_bytes",
        "kv_cache_bytes_per_token",
        "kv_cache_budget_bytes",
        "kv_cache_tokens",
        "max_concurrency",
    ):
        assert key in doc
    # 2 sequences x 8,192 tokens (512 blocks of 16) x 131,072 B = 2 GiB
    assert doc["kv_cache_bytes"] == 2 * 8192 * 131_072
    assert doc["kv_cache_tokens"] % 16 == 0
    per_block = 16 * 131_072
    assert doc["kv_cache_tokens"] == doc["kv_cache_budget_bytes"] // per_block * 16
    assert doc["max_concurrency"] == doc["kv_cache_tokens"] * 100 // 8192 / 100  # cut, not rounded
    assert doc["memory_utilization"] == 0.9


def test_cli_text_reports_capacity(write_spec: Any) -> None:
    path = write_spec(
        yaml.safe_dump(
            {
                "name": "l3",
                "model": LLAMA3_8B,
                "workload": {
                    "mode": "inference",
                    "batch_size": 1,
                    "seq_len": 8192,
                    "max_new_tokens": 1024,
                    "precision": "bf16",
                },
            }
        )
    )
    result = runner.invoke(app, ["estimate", str(path), "--gpu", "h100-sxm"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "131,072 B/token" in text and "GPU KV cache size" in text and "maximum concurrency" in text
