"""Mixture of experts and KV dtype in `vramcalc bandwidth`: a decode step streams the experts its tokens route to.

Reference figures are derived by hand from Mixtral-8x7B's config.json (mistralai/Mixtral-8x7B-v0.1):
32 layers, hidden 4096, 32 heads of 128 with 8 KV heads, 8 SwiGLU experts of 14336 per layer, top-2
routing, vocab 32000, untied embeddings, RMSNorm without bias.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramcalc.core.params import active_params, expert_params
from vramcalc.families.resolve import resolve_model
from vramcalc.hardware.bandwidth import analyse
from vramcalc.hardware.lookup import get_gpu
from vramcalc.hardware.weights import expected_experts
from vramcalc.planning.stream import weights_from_spec
from vramcalc.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[2]
MIXTRAL = ROOT / "configs" / "mixtral-8x7b.yaml"

# --- Mixtral-8x7B by hand --------------------------------------------------------------------------------
EXPERT = 3 * 4096 * 14336  # gate, up, down: 176,160,768 parameters
ATTENTION = 4096 * 4096 * 2 + 1024 * 4096 * 2  # q and o 4096 x 4096; k and v 1024 (8 heads x 128) x 4096
LAYER = ATTENTION + 2 * 4096 + 4096 * 8 + 8 * EXPERT  # + two RMSNorms + router (4096 -> 8) + 8 experts
TOTAL = 32 * LAYER + 2 * 32000 * 4096 + 4096  # + embeddings and LM head (untied) + final norm
assert TOTAL == 46_702_792_704  # "46.7B" (Mistral AI, "Mixtral of experts", 2024)
ACTIVE = TOTAL - 32 * 6 * EXPERT  # 6 of 8 experts unused per token per layer
assert ACTIVE == 12_879_925_248  # "12.9B active" (same source)
BF16 = 2
H100_BYTES_PER_S = 3_350 * 10**9  # H100 SXM5: 3.35 TB/s (NVIDIA datasheet)


def mixtral_report(batch: int):  # type: ignore[no-untyped-def]
    gpu = get_gpu("h100-sxm")
    return analyse(gpu.memory_bus, weights_from_spec(MIXTRAL), gpu=gpu, batch=batch)


def test_vramcalc_split_matches_the_hand_count() -> None:
    spec = load_spec(MIXTRAL)
    shape, _ = resolve_model(spec.model, spec.workload)
    assert expert_params(shape) == EXPERT
    assert active_params(shape, TOTAL) == ACTIVE
    weights = weights_from_spec(MIXTRAL)
    assert (weights.n_params, weights.active_params) == (TOTAL, ACTIVE)
    assert weights.experts is not None
    assert (weights.experts.experts, weights.experts.top_k, weights.experts.moe_layers) == (8, 2, 32)
    assert weights.experts.expert_bytes == EXPERT * BF16


def test_batch_1_streams_the_active_parameters() -> None:
    report = mixtral_report(1)
    assert report.weights is not None and report.streaming is not None
    assert report.weights.weights_bytes == TOTAL * BF16  # every parameter still lives on the card
    assert report.streamed_weights_bytes == ACTIVE * BF16  # 25,759,850,496 bytes
    assert report.streaming.weights_bytes == ACTIVE * BF16
    # 3.35e12 / 25,759,850,496 = 130.05 tokens/s (all 46.7B would give 35.87)
    assert report.streaming.tokens_per_s_upper_bound == pytest.approx(H100_BYTES_PER_S / (ACTIVE * BF16))
    assert report.streaming.tokens_per_s_upper_bound == pytest.approx(130.05, abs=0.01)
    # KV: 32 layers x 2 (K, V) x 8 heads x 128 x 2 bytes = 131,072 bytes per token, 4096 tokens
    step = (ACTIVE * BF16 + 131_072 * 4096) / H100_BYTES_PER_S
    assert report.decode_step_s == pytest.approx(step)
    assert report.roofline is not None
    # 2 x 12.88e9 FLOPs over 2 x 12.88e9 bytes: 1 FLOP per byte, as for a dense bf16 model
    assert report.roofline.intensity == pytest.approx(1.0)


def test_batch_8_reads_7_2_experts_per_layer() -> None:
    # 8 x (1 - (6/8)^8) = 8 x (1 - 0.1001129150390625) = 7.1990966796875
    assert expected_experts(8, 2, 8) == pytest.approx(7.1990966796875)
    report = mixtral_report(8)
    streamed = TOTAL * BF16 - 32 * 8 * EXPERT * BF16 + round(32 * 7.1990966796875 * EXPERT * BF16)
    assert report.streamed_weights_bytes == streamed
    assert report.roofline is not None
    assert report.roofline.bytes_per_step == streamed
    assert report.roofline.intensity == pytest.approx(2 * ACTIVE * 8 / streamed)  # 2.44 FLOP/byte
    assert report.kv is not None and report.decode_step_s is not None
    assert report.decode_step_s == pytest.approx((streamed + 131_072 * 4096 * 8) / H100_BYTES_PER_S)


def test_large_batches_read_every_expert() -> None:
    assert expected_experts(8, 2, 1000) == pytest.approx(8.0)  # (3/4)^1000 is ~1e-125
    report = mixtral_report(1000)
    assert report.streamed_weights_bytes == TOTAL * BF16
    roof = report.roofline
    assert roof is not None
    # Past a few hundred tokens every expert is read, so the crossover is the dense formula with all bytes
    # and the active FLOPs: ridge x total bytes / (2 x active) = (989.4e12 / 3.35e12) x 93.4e9 / 25.76e9
    ridge = 989.4e12 / H100_BYTES_PER_S
    crossover = ridge * TOTAL * BF16 / (2 * ACTIVE)  # 1,070.9
    assert roof.crossover_batch == pytest.approx(crossover, rel=1e-6)
    assert roof.first_compute_bound_batch == 1071
    assert roof.intensity_at(1071) >= ridge > roof.intensity_at(1070)


def test_a_dense_model_is_unchanged(tmp_path: Path) -> None:
    dense = tmp_path / "dense.yaml"
    dense.write_text(
        "model: {architecture: decoder, layers: 32, hidden_size: 4096, heads: 32, ffn_size: 11008, mlp: swiglu,\n"
        "  norm: rmsnorm, position: rotary, vocab_size: 32000}\n"
        "workload: {mode: inference, batch_size: 1, seq_len: 4096, precision: bf16}\n",
        encoding="utf-8",
    )
    weights = weights_from_spec(dense)
    assert weights.experts is None and weights.active_params is None
    gpu = get_gpu("h100-sxm")
    for batch in (1, 8, 1000):
        report = analyse(gpu.memory_bus, weights, gpu=gpu, batch=batch)
        assert report.streamed_weights_bytes == weights.weights_bytes
        assert report.roofline is not None and report.roofline.bytes_per_step == weights.weights_bytes
        # dense: 2 x params x B / (params x 2 bytes) = B FLOP per byte
        assert report.roofline.intensity == pytest.approx(batch)


def test_fp8_kv_halves_the_kv_read(tmp_path: Path) -> None:
    text = MIXTRAL.read_text(encoding="utf-8")
    fp8 = tmp_path / "fp8.yaml"
    fp8.write_text(text.replace("  runtime: vllm\n", "  runtime: vllm\n  kv_cache_dtype: fp8\n"), encoding="utf-8")
    gpu = get_gpu("h100-sxm")
    auto = analyse(gpu.memory_bus, weights_from_spec(MIXTRAL), gpu=gpu, batch=4)
    half = analyse(gpu.memory_bus, weights_from_spec(fp8), gpu=gpu, batch=4)
    assert auto.kv is not None and half.kv is not None
    assert (auto.kv.bytes_per_token, half.kv.bytes_per_token) == (131_072, 65_536)  # 2 bytes -> 1 byte
    assert half.kv.read_bytes_per_step * 2 == auto.kv.read_bytes_per_step
    assert half.streamed_weights_bytes == auto.streamed_weights_bytes  # the weights are unchanged


def test_cli_json_keys_and_batch_flag() -> None:
    from typer.testing import CliRunner

    from vramcalc.cli import app

    docs = {}
    for batch in ("1", "8"):
        result = CliRunner().invoke(
            app, ["bandwidth", "--gpu", "h100-sxm", "--model", "mixtral-8x7b", "--batch", batch, "--json"]
        )
        assert result.exit_code == 0, result.output
        docs[batch] = json.loads(result.stdout)
    one, eight = docs["1"], docs["8"]
    assert one["weights_bytes"] == TOTAL * BF16
    assert one["streamed_weights_bytes"] == ACTIVE * BF16
    assert one["active_params"] == ACTIVE
    assert (one["moe_layers"], one["experts_per_layer"], one["experts_per_token"]) == (32, 8, 2)
    assert one["expected_experts_per_layer"] == 2.0
    assert eight["expected_experts_per_layer"] == pytest.approx(7.1990966796875)
    assert eight["decode_batch"] == 8 and eight["roofline"]["batch"] == 8
    assert eight["roofline"]["weights_read_bytes"] == eight["streamed_weights_bytes"]
    # the batch-1 bound is the same whatever --batch is
    assert one["decode_tokens_per_s_upper_bound"] == eight["decode_tokens_per_s_upper_bound"]
    assert one["decode_tokens_per_s_upper_bound"] == pytest.approx(130.05, abs=0.01)


def test_text_states_the_routing_assumption() -> None:
    from typer.testing import CliRunner

    from vramcalc.cli import app

    result = CliRunner().invoke(
        app, ["bandwidth", "--gpu", "h100-sxm", "--model", "mixtral-8x7b", "--batch", "8"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    assert "uniformly at random, independently" in result.stdout
    assert "= 7.199 distinct experts per layer" in result.stdout
    assert "at most 130.05 tokens/s (batch 1)" in result.stdout
