"""Estimator: hand-derived tiny cases, contract invariants, and monotonicity properties."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spec_texts import TINY_MODEL

from vramcalc.choices import Optimizer, Precision
from vramcalc.core import activations as act
from vramcalc.core.optimizer import optimizer_state_bytes
from vramcalc.core.params import linear_weight_params
from vramcalc.core.workload import DTYPES
from vramcalc.families import estimate
from vramcalc.families.estimate import COMPONENTS
from vramcalc.families.resolve import resolve_model
from vramcalc.spec.load import parse_spec

MiB = 2**20


def spec(model: dict[str, Any] | None = None, **workload: Any) -> Any:
    wl = {"batch_size": 2, "seq_len": 4, "precision": "fp32", "optimizer": "sgd", **workload}
    return parse_spec({"name": "t", "model": model or TINY_MODEL, "workload": wl})


def test_tiny_decoder_saved_activations_by_hand() -> None:
    # T = 2 x 4 = 8 tokens, h = 64, f = 256, fp32 (4 bytes), dropout 0, sdpa -> efficient (fp32, no GQA)
    # each LayerNorm: input 64*4 + mean/rstd 8 + output 64*4 (saved by the next linear) = 520 B/token
    # block: 2 norms 2*8*520 = 8,320; Q,K,V 8*192*4 = 6,144; attention output 8*64*4 = 2,048;
    #   logsumexp 2 seqs x 1 head x 4 queries x 4 B = 32; MLP fc1 + gelu outputs 2*8*256*4 = 16,384
    #   -> 32,928
    # final LayerNorm 8*520 = 4,160; total 37,088
    s = spec()
    shape, _ = resolve_model(s.model, s.workload)
    tokens = act.Tokens(batch=2, seq=4, target=4)
    assert act.saved_activation_bytes(shape, tokens, DTYPES[Precision.fp32], s.workload.attention) == 37_088


def test_tiny_decoder_phases_by_hand() -> None:
    # parameters 51,264 x 4 B = 205,056; input ids 8 x 8 B = 64 -> one 512 B block;
    # cuBLAS workspaces 2 x 32 MiB = 67,108,864 (training, Hopper default); SGD has no state.
    # forward: + saved 37,088 + log-softmax 80*4 + logits 80*4 = 37,728  -> 67,352,160
    # backward start: + saved 37,088 + log-softmax 320 + its two gradients 640 -> 67,352,480
    # backward in the last block (the moment that peaks for models without a vocabulary loss):
    #   saved minus the final LayerNorm's 4,160 = 32,928; gradients of the head (final LN 128, and the
    #   tied embedding 10 x 64 = 640, written by the LM head's backward) and of one block (49,984)
    #   = 50,752 x 4 = 203,008; temporaries: MLP input gradient and residual gradient
    #   8 x (256 + 64) x 4 = 10,240 -> 205,056 + 512 + 67,108,864 + 32,928 + 203,008 + 10,240 = 67,560,608
    # end of backward (all gradients): 205,056 * 2 + 512 + 67,108,864 = 67,519,488
    # optimizer (SGD, in place): 67,519,488
    result = estimate(spec())
    assert result.phases == {"forward": 67_352_160, "backward": 67_560_608, "optimizer": 67_519_488}
    assert result.params == 51_264
    assert result.peak_allocated_bytes == 67_560_608


def test_tiny_inference_by_hand() -> None:
    # no-grad forward: params 205,056 + input 512 + one workspace 33,554,432 + largest transient:
    # attention moment: embedding output, block input, norm output 8*64*(4+4+4) = 6,144 + Q,K,V and
    #   attention output (2*64 + 2*64)*8*4 = 8,192 -> 14,336
    # MLP moment: embedding output, block input, attention sum, norm output 8*64*16 = 8,192 + fc1 and
    #   gelu outputs 2*8*256*4 = 16,384 -> 24,576
    # head: logits 8*10*4 = 320 + 2 hidden 2*8*64*4 = 4,096 -> 4,416. Largest: 24,576
    result = estimate(spec(mode="inference"))
    assert result.phases == {"forward": 205_056 + 512 + 33_554_432 + 24_576}
    assert result.components["gradients"] == 0


def test_amp_caches_16bit_copies_of_linear_weights() -> None:
    # linear weights and biases: attention 16,640 + MLP 33,088 + tied LM head 10*64 = 50,368 -> x 2 B
    s = spec(precision="amp-bf16")
    shape, _ = resolve_model(s.model, s.workload)
    assert linear_weight_params(shape) == 50_368
    assert estimate(s).component_peaks["autocast_weight_copies"] == 100_736


def test_design_notes_model_states_are_exact() -> None:
    # BERT-base in pure fp16 with Adam: parameters 2 B x 109,514,298 = 219,028,596 (design notes: 220 MB);
    # gradients the same once allocated; Adam's two fp16 states 4 B/param = 438,057,192, plus the
    # caching allocator's 512 B rounding of each of the 2 x 204 state tensors = 438,057,984, which is
    # exactly the tracer's optimizer_state (shared/calibration: groundtruth.py --arch bert --batch 32
    # --seq 512 --dtype fp16 --optimizer adamw, run 2026-11-29)
    from pathlib import Path

    from vramcalc.spec.load import load_spec

    result = estimate(load_spec(Path(__file__).resolve().parents[2] / "configs" / "bert-base.yaml"))
    assert result.component_peaks["parameters"] == 219_028_596
    assert result.component_peaks["gradients"] == 219_028_596
    assert result.component_peaks["optimizer_states"] == 438_057_984


@pytest.mark.parametrize(
    ("optimizer", "per_param"),
    [(Optimizer.sgd, 0), (Optimizer.sgd_momentum, 4), (Optimizer.lion, 4), (Optimizer.adamw, 8), (Optimizer.adam, 8)],
)
def test_optimizer_state_per_parameter(optimizer: Optimizer, per_param: int) -> None:
    # torch.optim allocates states like the fp32 param: momentum/Lion one buffer, Adam exp_avg + exp_avg_sq.
    # Model with no layers: a tied 1024 x 1024 embedding and a 1024-wide final RMSNorm = 1,049,600
    # fp32 parameters, both tensors multiples of 512 B (no allocator rounding)
    model = {
        "architecture": "decoder",
        "layers": 1,
        "hidden_size": 1024,
        "vocab_size": 1024,
        "mlp": "swiglu",
        "ffn_size": 1024,
    }
    s = spec(model)
    shape, _ = resolve_model(s.model, s.workload)
    from dataclasses import replace

    one = replace(shape, layers=0, tie_embeddings=True)
    assert optimizer_state_bytes(optimizer, one, 4) == 1_049_600 * per_param


@pytest.mark.parametrize(("block", "embedding"), [(None, 2_129_920), (256, 2_129_920), (2048, 2_101_248)])
def test_adamw_8bit_block_layout(block: int | None, embedding: int) -> None:
    # bitsandbytes: tensors >= 4096 elements: 2 states x (1 B/element + an fp32 absmax per block of 256
    # elements from 0.44.0, the default; 2048 before). A 1024 x 1024 embedding: 2 x (1,048,576 + 4,096 x 4)
    # = 2,129,920 with 256-element blocks, 2 x (1,048,576 + 512 x 4) = 2,101,248 with 2048; the 1024-wide
    # final RMSNorm (< 4096 elements) stays 32-bit: 2 x 4,096 = 8,192
    model = {
        "architecture": "decoder",
        "layers": 1,
        "hidden_size": 1024,
        "vocab_size": 1024,
        "mlp": "swiglu",
        "ffn_size": 1024,
    }
    s = spec(model)
    shape, _ = resolve_model(s.model, s.workload)
    from dataclasses import replace

    one = replace(shape, layers=0, tie_embeddings=True)
    assert optimizer_state_bytes(Optimizer.adamw_8bit, one, 4, block) == embedding + 8_192


CONTRACT_SPECS = [
    {},
    {"precision": "amp-bf16", "optimizer": "adamw"},
    {"mode": "inference"},
    {"gradient_checkpointing": "full", "optimizer": "adamw"},
    {"attention": "eager", "precision": "bf16"},
]


@pytest.mark.parametrize("workload", CONTRACT_SPECS)
def test_components_sum_to_peak_and_total(workload: dict[str, Any]) -> None:
    result = estimate(spec(**workload))
    assert set(result.components) == set(COMPONENTS) == set(result.component_peaks)
    assert sum(result.components.values()) == result.peak_allocated_bytes == max(result.phases.values())
    assert result.total_bytes == result.peak_allocated_bytes + sum(result.overhead.values())
    assert all(result.component_peaks[k] >= result.components[k] for k in COMPONENTS)


LLAMA_SMALL = {
    "architecture": "decoder",
    "layers": 4,
    "hidden_size": 256,
    "heads": 4,
    "kv_heads": 2,
    "mlp": "swiglu",
    "ffn_size": 688,
    "vocab_size": 32000,
}
BERT_SMALL = {"architecture": "encoder", "layers": 4, "hidden_size": 256, "heads": 4, "vocab_size": 30522}
T5_SMALL = {
    "architecture": "encoder-decoder",
    "layers": 2,
    "hidden_size": 256,
    "heads": 4,
    "mlp": "relu",
    "vocab_size": 32128,
}


@settings(max_examples=150, deadline=None)
@given(
    model=st.sampled_from([LLAMA_SMALL, BERT_SMALL, T5_SMALL]),
    batch=st.integers(1, 64),
    seq=st.integers(1, 2048),
    precision=st.sampled_from([p.value for p in Precision]),
    attention=st.sampled_from(["sdpa", "eager"]),
    mode=st.sampled_from(["train", "inference"]),
)
def test_monotone_in_batch_and_sequence(
    model: dict[str, Any], batch: int, seq: int, precision: str, attention: str, mode: str
) -> None:
    optimizer = "adamw" if mode == "train" else "none"
    base = {"precision": precision, "attention": attention, "mode": mode, "optimizer": optimizer}
    peak = estimate(spec(model, batch_size=batch, seq_len=seq, **base)).peak_allocated_bytes
    assert estimate(spec(model, batch_size=batch + 1, seq_len=seq, **base)).peak_allocated_bytes >= peak
    assert estimate(spec(model, batch_size=batch, seq_len=seq + 1, **base)).peak_allocated_bytes >= peak


@settings(max_examples=100, deadline=None)
@given(
    model=st.sampled_from([LLAMA_SMALL, BERT_SMALL, T5_SMALL]),
    batch=st.integers(1, 32),
    seq=st.integers(16, 2048),
    precision=st.sampled_from([p.value for p in Precision]),
)
def test_checkpointing_never_increases_and_inference_never_exceeds_training(
    model: dict[str, Any], batch: int, seq: int, precision: str
) -> None:
    kw = {"batch_size": batch, "seq_len": seq, "precision": precision, "optimizer": "adamw"}
    plain = estimate(spec(model, **kw)).peak_allocated_bytes
    assert estimate(spec(model, gradient_checkpointing="full", **kw)).peak_allocated_bytes <= plain
    kw.pop("optimizer")
    assert estimate(spec(model, mode="inference", **kw)).peak_allocated_bytes <= plain


def test_sdpa_kernel_choice_follows_pytorch() -> None:
    # flash needs fp16/bf16; memory-efficient takes fp32 but not grouped K/V; else math (seq^2 saved)
    shape, _ = resolve_model(
        parse_spec({"model": LLAMA_SMALL, "workload": {"batch_size": 1, "seq_len": 8}}).model, spec().workload
    )
    assert act.sdpa_kernel(shape, DTYPES[Precision.bf16]) == "flash"
    assert act.sdpa_kernel(shape, DTYPES[Precision.fp32]) == "math"
    bert, _ = resolve_model(
        parse_spec({"model": BERT_SMALL, "workload": {"batch_size": 1, "seq_len": 8}}).model, spec().workload
    )
    assert act.sdpa_kernel(bert, DTYPES[Precision.fp32]) == "efficient"


def test_minimal_spec_states_assumptions() -> None:
    s = parse_spec(
        {
            "model": {"params": "110M", "layers": 12, "hidden_size": 768},
            "workload": {"batch_size": 32, "seq_len": 512, "precision": "fp16", "optimizer": "adam"},
        }
    )
    result = estimate(s)
    text = "; ".join(result.assumptions)
    for key in ("architecture", "heads", "ffn_size", "vocab_size"):
        assert f"{key} not given" in text
    assert result.params == 110_000_000
