"""LoRA on encoder-decoder models (T5): hand-derived bytes of a tiny T5, PEFT's count, the refusals.

The allocator-level comparisons (real T5 + PEFT steps on the CPU tracer) are the ``t5-lora-*`` and
``t5v11-lora-*`` cases of benchmarks/data/tracer_llm.json, run by tests/llm/test_adapters.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from vramcalc.choices import Attention
from vramcalc.core import activations as act
from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.llm import adapters, lora_encdec
from vramcalc.spec.load import parse_spec

#: One encoder and one decoder block, hidden 8, 2 heads of 4, ReLU MLP of 16, no dropout.
TINY = {
    "architecture": "encoder-decoder", "layers": 1, "decoder_layers": 1, "hidden_size": 8, "heads": 2,
    "head_dim": 4, "ffn_size": 16, "mlp": "relu", "norm": "rmsnorm", "position": "relative", "vocab_size": 10,
    "tie_embeddings": True, "bias": False, "dropout": 0.0,
}  # fmt: skip
FP32 = act.Dtypes(param=4, compute=4, residual=4, amp=False)
BF16 = act.Dtypes(param=2, compute=2, residual=2, amp=False)
TOKENS = act.Tokens(batch=1, seq=4, target=2)  # 4 encoder tokens, 2 decoder tokens


def _spec(model: dict[str, Any], adapter: dict[str, Any], **workload: Any) -> Any:
    wl = {"mode": "train", "batch_size": 1, "seq_len": 4, "target_len": 2, "precision": "fp32", "adapter": adapter}
    return parse_spec({"name": "t", "model": model, "workload": {**wl, "attention": "eager", **workload}})


def _shape_and_matrices(targets: tuple[str, ...]) -> tuple[Any, list[adapters.LoraMatrix]]:
    from vramcalc.families.resolve import resolve_model

    spec = _spec(TINY, {"rank": 2, "targets": list(targets)})
    shape, _ = resolve_model(spec.model, spec.workload)
    return shape, adapters.lora_matrices(shape, targets)


def test_trainable_params_of_both_stacks() -> None:
    # q and v in the encoder self-attention, the decoder self-attention and the cross-attention:
    # 2 targets x 3 modules x rank 2 x (8 + 8) = 192
    result = estimate(_spec(TINY, {"rank": 2, "targets": ["q", "v"]}))
    assert result.llm.trainable_params == 192


def test_mt0_large_matches_peft_readme() -> None:
    # PEFT README (Dec 2022) quick tour, bigscience/mt0-large with LoraConfig(r=8) on q and v:
    # "trainable params: 2359296" = (24 encoder x 2 + 24 decoder x 4 modules) x 8 x (1024 + 1024)
    mt0_large = {
        "architecture": "encoder-decoder", "layers": 24, "decoder_layers": 24, "hidden_size": 1024, "heads": 16,
        "head_dim": 64, "ffn_size": 2816, "mlp": "geglu", "norm": "rmsnorm", "position": "relative",
        "vocab_size": 250112, "tie_embeddings": False, "bias": False,
    }  # fmt: skip
    result = estimate(_spec(mt0_large, {"rank": 8, "targets": ["q", "v"]}))
    assert result.llm.trainable_params == 2_359_296


def test_frozen_tiny_t5_by_hand() -> None:
    shape, matrices = _shape_and_matrices(("q", "v"))
    # encoder layer 0 (input: the frozen embedding): first norm 0; k is frozen, so Q is not saved;
    #   K and V 4 tokens x 8 x 4 B = 128 each; softmax output 1 x 2 heads x 4 x 4 x 4 B = 128 -> 384
    #   MLP norm: 4 x (8 x 4 fp32 input + 4 rstd) = 144; ReLU output 4 x 16 x 4 = 256 -> 784
    # decoder layer 0: self-attention K, V 2 x 8 x 4 = 64 each, softmax 2 x 2 x 2 x 4 = 32 -> 160;
    #   cross norm 2 x 36 = 72, Q 64, K and V over 4 encoder tokens 128 each, softmax 2 x 2 x 4 x 4 = 64 -> 456;
    #   MLP norm 72 + ReLU 2 x 16 x 4 = 128 -> 200; layer 816
    # final norms: encoder 144, decoder 72 -> 784 + 816 + 144 + 72 = 1,816
    assert lora_encdec.frozen_saved_bytes(shape, TOKENS, FP32, Attention.eager, matrices) == 1_816


def test_adapters_tiny_t5_by_hand() -> None:
    _, matrices = _shape_and_matrices(("q", "v"))
    # lora_A outputs (rank 2, fp32): encoder q, v 4 x 2 x 4 = 32 each; decoder q, v 2 x 2 x 4 = 16 each;
    #   cross q 16, cross v over the encoder output 32 -> 144
    # inputs (fp32 adapters on fp32 activations, no dropout: the activation itself, once per block):
    #   encoder attention input 4 x 8 x 4 = 128, decoder 64, cross-attention query input 64 -> 256;
    #   the encoder output, read by cross v, is counted apart (encoder_output_kept)
    assert lora_encdec.lora_saved_bytes(matrices, 2, 4, FP32, 0.0, TOKENS) == 400
    assert lora_encdec.encoder_output_kept(matrices, 4, FP32, 0.0)
    # LoRA dropout: every module saves its own dropout output and mask, 5 B per input element:
    #   encoder q, v 4 x 8 x 5 = 160 each, decoder q, v 80 each, cross q 80, cross v 160 -> 720 + 144
    assert lora_encdec.lora_saved_bytes(matrices, 2, 4, FP32, 0.1, TOKENS) == 864
    assert not lora_encdec.encoder_output_kept(matrices, 4, FP32, 0.1)


def test_step_saves_frozen_adapters_and_encoder_output() -> None:
    shape, matrices = _shape_and_matrices(("q", "v"))
    saved, recompute, _, _ = lora_encdec.step_bytes(
        shape, TOKENS, FP32, Attention.eager, matrices, (2, 4, 0.0), ckpt=False
    )
    # 1,816 frozen + 400 adapters + the encoder output 4 x 8 x 4 = 128
    assert (saved, recompute) == (2_344, 0)


def test_t5_norm_keeps_its_16bit_input() -> None:
    shape, _ = _shape_and_matrices(("q",))
    # T5LayerNorm: pow saves the fp32 copy (8 x 4), the multiplication by rstd the bf16 input (8 x 2), rstd 4
    assert lora_encdec.frozen_norm_bytes(shape, 4, BF16) == 4 * (32 + 16 + 4)
    # fp32: the copy is the input itself
    assert lora_encdec.frozen_norm_bytes(shape, 4, FP32) == 4 * (32 + 4)


def test_lora_below_full_finetune() -> None:
    lora = estimate(_spec(TINY, {"rank": 2, "targets": ["q", "v"]}, batch_size=8, seq_len=512, target_len=128))
    full = estimate(
        parse_spec(
            {
                "name": "t",
                "model": TINY,
                "workload": {
                    "mode": "train",
                    "batch_size": 8,
                    "seq_len": 512,
                    "target_len": 128,
                    "precision": "fp32",
                    "attention": "eager",
                },
            }
        )
    )
    assert lora.component_peaks["activations"] < full.component_peaks["activations"]


@pytest.mark.parametrize(
    ("adapter", "workload", "message"),
    [
        ({"rank": 8}, {"quantization": {"method": "nf4"}}, "QLoRA .* encoder-decoder"),
        ({"rank": 8, "framework": "litgpt"}, {}, "litgpt has no encoder-decoder"),
    ],
)
def test_refused(adapter: dict[str, Any], workload: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        estimate(_spec(TINY, adapter, precision="bf16", **workload))
