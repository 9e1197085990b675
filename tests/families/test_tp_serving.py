"""Serving across GPUs (tensor and pipeline parallelism with generation keys): hand-derived figures.

Shapes are the public config.json figures of the catalog's models (Llama-3-8B: 32 layers, hidden 4096,
32 heads, 8 KV heads, head_dim 128, ffn 14336, vocab 128256, untied; Llama-3-70B: 80 layers, hidden 8192,
64 heads, 8 KV heads, ffn 28672, same vocabulary). vLLM's rules: vocabulary padded to a multiple of 64
(``pad_vocab_size``, ``DEFAULT_VOCAB_PADDING_SIZE = 64`` in vllm/model_executor/layers/vocab_parallel_embedding.py)
and split in ``tensor`` equal parts; KV heads per rank ``max(1, kv_heads // tensor)`` (QKVParallelLinear).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from measured_records import measured_case
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.hardware.lookup import get_gpu
from vramcalc.planning.budget import budget_for, fit_of
from vramcalc.planning.stream import weights_from_spec
from vramcalc.spec.load import parse_spec
from vramcalc.units import GiB, MiB

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT.parent / "shared" / "calibration" / "measured.yaml"
runner = CliRunner()


def _spec(model: Any, parallel: dict[str, Any], **workload: Any) -> Any:
    wl = {"mode": "inference", "batch_size": 1, "seq_len": 8192, "precision": "bf16", "runtime": "vllm", **workload}
    return parse_spec({"model": model, "workload": wl, "parallel": parallel})


# Llama-3-70B, one TP-2 rank, by hand:
#   per layer: q 8192x8192 + k,v 2x8192x1024 + o 8192x8192 + MLP 3x8192x28672 = 855,638,016; /2 = 427,819,008
#   x 80 layers = 34,225,520,640 linear weights per rank (fp8: 1 B each, plus one fp32 scale per tensor:
#   7 tensors x 80 layers x 4 B = 2,240 B)
#   embedding and LM head: 128,256 (a multiple of 64) / 2 = 64,128 rows x 8192 = 525,336,576 each, bf16
#   norms (replicated): 80 x 2 x 8192 + 8192 = 1,318,912, bf16
LINEAR_70B_TP2 = 34_225_520_640
KEPT_70B_TP2 = 2 * 525_336_576 + 1_318_912
WEIGHTS_70B_TP2 = LINEAR_70B_TP2 + 2_240 + 2 * KEPT_70B_TP2
# vLLM's RoPE cos/sin cache, counted in its weight figure and replicated on every rank: max_position_embeddings
# 8,192 x head_dim 128 at bf16 (RotaryEmbedding's cos_sin_cache, cast to the model's dtype)
ROPE_CACHE_70B = 8_192 * 128 * 2
# KV per token and rank: 80 layers x 2 (K, V) x 4 KV heads x 128 x 2 B (bf16 cache)
KV_70B_TP2 = 80 * 2 * 4 * 128 * 2


def test_llama3_70b_fp8_tp2_weights_and_kv_per_rank() -> None:
    result = estimate(_spec("llama-3-70b", {"tensor": 2}, quantization={"method": "fp8"}))
    assert result.components["parameters"] == WEIGHTS_70B_TP2 + ROPE_CACHE_70B  # 36,329,507,008 B = 33.83 GiB + 2 MiB
    assert result.llm.kv_cache_bytes_per_token == KV_70B_TP2 == 163_840
    assert result.llm.quantization["quantized_params"] == LINEAR_70B_TP2
    assert result.llm.quantization["kept_params"] == KEPT_70B_TP2


def test_llama3_70b_fp8_tp2_how_many_8k_sequences() -> None:
    """ "Llama-3-70B fp8 on 2 x H100, TP 2: how many 8k sequences?" By hand: vLLM sees the H100's 81,559 MiB
    less 440 MiB = 81,119 MiB (vramcalc/stacks/vllm.py, from published logs); 0.9 x that = 76,553,492,889 B;
    less the rank's weights 36,329,507,008 B (and vLLM's 2 MiB RoPE cache) and 256 MiB outside PyTorch (NCCL,
    custom all-reduce) leaves 39,953,453,273 B = 37.21 GiB before the profile step's activation peak.

    The profile's peak is its sampling step (vLLM's dummy sampler run with top-k and top-p: a sort of the whole
    vocabulary's logits; the logits are all-gathered, so every rank holds all 128,256 columns). With no card
    named, vLLM's defaults are 2,048 batched tokens and 256 sequences, so 256 rows: the bf16 logits (2 B), their
    fp32 copy (4 B), the sorted fp32 values (4 B) and int64 indices (8 B), and PyTorch's segmented-sort scratch
    for 128 rows or more (20 B): 256 x 128,256 x 38 = 1,247,674,368 B, plus the 256 sampled hidden rows in bf16
    (256 x 8,192 x 2 = 4,194,304 B): 1,251,868,672 B = 1.166 GiB. Inputs and the cuBLAS workspace add less
    than 64 MiB. An 8k sequence holds 8,192 x 163,840 B = 1.25 GiB per rank, so 28 sequences for any profile
    peak from 0.96 to 2.21 GiB (37.21 - 29 x 1.25 = 0.96; 37.21 - 28 x 1.25 = 2.21)."""
    gpu = get_gpu("h100-sxm")
    result = estimate(_spec("llama-3-70b", {"tensor": 2}, quantization={"method": "fp8"}))
    fit = fit_of(result, budget_for(gpu))
    cap = fit.kv_pool
    assert cap is not None
    seen = 81_119 * MiB
    before_profile = int(0.9 * seen) - WEIGHTS_70B_TP2 - ROPE_CACHE_70B - 256 * MiB
    assert before_profile == 39_953_453_273
    # the sampling step, inputs and the workspace
    profile = result.llm.kv_pool.non_kv_bytes - WEIGHTS_70B_TP2 - ROPE_CACHE_70B - 256 * MiB
    sampling = 256 * 128_256 * (2 + 4 + 4 + 8 + 20) + 256 * 8_192 * 2
    assert sampling == 1_251_868_672
    assert 0 <= profile - sampling < 64 * MiB
    assert cap.budget_bytes == before_profile - profile
    assert cap.max_sequences == 28
    # fp8 KV cache: 81,920 B/token -> 0.625 GiB per sequence; (37.21 - 1.17..1.23) / 0.625 -> 57
    fp8kv = fit_of(
        estimate(_spec("llama-3-70b", {"tensor": 2}, quantization="fp8", kv_cache_dtype="fp8")), budget_for(gpu)
    )
    assert fp8kv.kv_pool is not None and fp8kv.kv_pool.max_sequences == 57


# Llama-3-8B per-layer shares at TP 4 (heads 8, KV heads 2, ffn 3584):
#   q 4096x1024 + k,v 2x4096x256 + o 1024x4096 + MLP 3x4096x3584 + norms 2x4096 = 54,534,144
#   embedding / head: 128,256 / 4 = 32,064 rows x 4096 = 131,334,144 each; final norm 4096
LLAMA3_8B_TP4 = 32 * 54_534_144 + 2 * 131_334_144 + 4096
# TP 16 (heads 2, KV heads replicated: 1 per rank, ffn 896):
#   q 4096x256 + k,v 2x4096x128 + o 256x4096 + MLP 3x4096x896 + norms 8192 = 14,163,968
#   embedding / head: 128,256 / 16 = 8,016 rows x 4096 = 32,833,536 each
LLAMA3_8B_TP16 = 32 * 14_163_968 + 2 * 32_833_536 + 4096
# vLLM's RoPE cos/sin cache on every rank: 8,192 positions x head_dim 128 x 2 B (bf16)
ROPE_CACHE_8B = 8_192 * 128 * 2


@pytest.mark.parametrize(
    ("tensor", "params", "kv_heads"),
    [(4, LLAMA3_8B_TP4, 2), (16, LLAMA3_8B_TP16, 1)],
)
def test_llama3_8b_kv_heads_split_or_replicated(tensor: int, params: int, kv_heads: int) -> None:
    result = estimate(_spec("llama-3-8b", {"tensor": tensor}))
    assert result.parallel.params_per_rank == params
    assert result.components["parameters"] == 2 * params + ROPE_CACHE_8B  # bf16, + vLLM's RoPE cache
    # 32 layers x 2 x KV heads per rank x 128 x 2 B: 32,768 (2 heads) and 16,384 (1 head, replicated)
    assert result.llm.kv_cache_bytes_per_token == 32 * 2 * kv_heads * 128 * 2


def test_pipeline_stages_hold_their_layers() -> None:
    """TP 2 x PP 2 on Llama-3-8B: each stage 16 layers; per-layer share at TP 2 is q 4096x2048 +
    k,v 2x4096x512 + o 2048x4096 + MLP 3x4096x7168 + norms 8192 = 109,060,096; the last stage adds
    64,128 x 4096 = 262,668,288 (LM head) + 4096 (final norm) and peaks higher (logits)."""
    result = estimate(_spec("llama-3-8b", {"tensor": 2, "pipeline": 2}))
    assert result.parallel.stage == "last"
    assert result.parallel.params_per_rank == 16 * 109_060_096 + 262_668_288 + 4096
    assert result.llm.kv_cache_bytes_per_token == 16 * 2 * 4 * 128 * 2
    assert result.llm.kv_pool.ranks  # the first stage's pool: vLLM keeps the fewest blocks of any rank


def test_hf_runtime_with_tensor_parallel() -> None:
    result = estimate(_spec("llama-3-8b", {"tensor": 2}, runtime="hf"))
    assert result.llm.kv_pool is None
    assert result.llm.kv_cache_bytes_per_token == 32 * 2 * 4 * 128 * 2


@pytest.mark.parametrize(
    ("model", "tensor", "message"),
    [
        # kv_heads 8 with TP 3: 8 % 3 != 0 and 3 % 8 != 0 (24 heads do divide)
        (
            {"architecture": "decoder", "layers": 4, "hidden_size": 1536, "heads": 24, "kv_heads": 8,
             "ffn_size": 3072, "vocab_size": 1024},
            3,
            "parallel.tensor: 3 neither divides kv_heads (8)",
        ),
        # heads 20 with TP 8 (kv_heads 4 would be replicated, but heads do not divide)
        (
            {"architecture": "decoder", "layers": 4, "hidden_size": 1280, "heads": 20, "kv_heads": 4,
             "ffn_size": 2048, "vocab_size": 1024},
            8,
            "parallel.tensor: 8 does not divide heads (20)",
        ),
    ],
)  # fmt: skip
def test_refusals(model: dict[str, Any], tensor: int, message: str, tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        estimate(_spec(model, {"tensor": tensor}))
    path = tmp_path / "spec.yaml"
    wl = {"mode": "inference", "batch_size": 1, "seq_len": 1024, "runtime": "vllm"}
    path.write_text(yaml.safe_dump({"model": model, "workload": wl, "parallel": {"tensor": tensor}}))
    out = runner.invoke(app, ["estimate", str(path), "--gpu", "h100-sxm"])
    assert out.exit_code == 2
    last = out.output.strip().splitlines()[-1]
    assert last.startswith("error: ") and message in last


def test_bandwidth_streams_one_gpus_share(tmp_path: Path) -> None:
    """Each GPU streams its share: the 70B TP-2 rank's 36,329,507,008 B; --tensor-parallel 2 with
    --params 70B --dtype fp8 halves 70e9 B."""
    spec = _spec("llama-3-70b", {"tensor": 2}, quantization={"method": "fp8"})
    w = weights_from_spec(spec)
    assert w.weights_bytes == WEIGHTS_70B_TP2
    assert w.kv_bytes_per_token == KV_70B_TP2
    out = runner.invoke(
        app, ["bandwidth", "--params", "70B", "--dtype", "fp8", "--tensor-parallel", "2", "--gpu", "h100-sxm", "--json"]
    )
    assert out.exit_code == 0, out.output
    assert "35,000,000,000" in out.output or "35000000000" in out.output


@pytest.mark.skipif(not MEASURED.exists(), reason="../shared/calibration not present")
def test_llama31_405b_fp8_tp8_against_vllm_log() -> None:
    """measured.yaml vllm-llama31-405b-fp8-tp8-weights (vllm-project/vllm#6746, vLLM 0.5.3): "Loading model
    weights took 57.752 GB" per worker (GiB, labelled GB). By hand with every linear in fp8: per layer
    q 16384^2 + k,v 2x16384x1024 + o 16384^2 + MLP 3x16384x53248 = 3,187,671,040; /8 x 126 layers =
    50,205,818,880 B (+ 7 x 126 fp32 scales); embedding and head 16,032 rows x 16384 x 2 B each and norms
    (253 x 16384 x 2 B) = 1,058,963,456 B: 51,264,782,336 B + 3,528 = 47.74 GiB, with vLLM's RoPE cache
    (131,072 x 128 x 2 B = 32 MiB) 47.78 GiB, -17.3 % of the log. Meta's
    FP8 checkpoint keeps the attention projections and the first and last layers' MLPs in bf16 (Llama 3
    paper, section 6.2): + (126 x 570,425,344 + 2 x 2,617,245,696) / 8 B = +8.98 GiB -> 56.72 GiB, -1.8 %;
    the spec has no key for layers kept in bf16, so the all-fp8 figure is what it estimates."""
    case = measured_case("vllm-llama31-405b-fp8-tp8-weights")
    measured = case["measured"]["value_bytes"]
    assert measured == round(57.752 * GiB)
    result = estimate(_spec("llama-3.1-405b", {"tensor": 8}, quantization={"method": "fp8"}))
    ours = result.components["parameters"]
    assert ours == 51_264_782_336 + 7 * 126 * 4 + 131_072 * 128 * 2  # + vLLM's RoPE cache (131,072 positions)
    assert round((ours - measured) / measured * 100, 1) == -17.3
    bf16_attention = ours + (126 * 570_425_344 + 2 * 2_617_245_696) // 8
    assert abs(bf16_attention - measured) / measured < 0.02  # -1.8 %
