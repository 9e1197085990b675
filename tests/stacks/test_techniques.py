"""Training-technique keys (vramcalc/stacks/techniques.py): deltas derived by hand on a small decoder.

The model: GPT-2 style decoder (defaults: LayerNorm, gelu, tied LM head, 1024 learned positions),
2 layers, hidden 256, ffn 1024, vocab 32000, bf16 (2 B per parameter, gradient and Adam state), batch 2 x 512.
Parameters by hand: wte 32000 x 256 = 8,192,000; wpe 1024 x 256 = 262,144; per layer attention 4 x 256^2 +
4 x 256 = 263,168, MLP 2 x 256 x 1024 + 1024 + 256 = 525,568, two LayerNorms 1,024 (789,760); final
LayerNorm 512: 8,192,000 + 262,144 + 2 x 789,760 + 512 = 10,034,176.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from vramcalc.core import activations as act
from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.families.resolve import resolve_workload
from vramcalc.spec.models import Spec

N_PARAMS = 10_034_176
LARGEST = 32000 * 256 * 2  # the tied embedding, bf16: 16,384,000 B (a multiple of 512)
TOKENS = 2 * 512
VOCAB = 32000


def spec(**workload: Any) -> Spec:
    model = {"architecture": "decoder", "layers": 2, "hidden_size": 256, "heads": 4, "vocab_size": VOCAB}
    wl = {"batch_size": 2, "seq_len": 512, "precision": "bf16", "optimizer": "adamw", **workload}
    return Spec.model_validate({"model": model, "workload": wl})


def test_optimizer_in_backward_keeps_one_gradient() -> None:
    # fused AdamW: no step temporaries, so the optimizer moment differs by the gradients only:
    # all of them (2 B x 10,034,176 = 20,068,352) against the largest parameter's (16,384,000).
    base = estimate(spec(optimizer_impl="fused"))
    inbwd = estimate(spec(optimizer_impl="fused", optimizer_in_backward=True))
    assert base.phase_components["optimizer"]["gradients"] == 2 * N_PARAMS
    assert inbwd.phase_components["optimizer"]["gradients"] == LARGEST
    assert base.phases["optimizer"] - inbwd.phases["optimizer"] == 2 * N_PARAMS - LARGEST
    # the backward peak is its start (no gradient exists yet): unchanged
    assert inbwd.phases["backward"] == base.phases["backward"]


def test_optimizer_in_backward_foreach_temporary_is_one_parameter() -> None:
    # foreach AdamW on a one-parameter optimizer: sqrt(exp_avg_sq) of that parameter, the largest: 16,384,000
    inbwd = estimate(spec(optimizer_in_backward=True))
    assert inbwd.phase_components["optimizer"]["temporaries"] == LARGEST


def test_cpu_offload_optimizer_moves_large_tensors_states() -> None:
    # torchao keeps tensors under 4096 elements on the GPU: per layer the attention biases 4 x 256, the MLP
    # biases 1024 + 256 and two LayerNorms 4 x 256 (3,328), x 2, plus the final LayerNorm 512: 7,168.
    large = N_PARAMS - 7_168  # 10,027,008
    base = estimate(spec())
    off = estimate(spec(optimizer_offload="cpu"))
    # AdamW states of the large tensors (2 x 2 B) leave the GPU
    assert base.components["optimizer_states"] - off.components["optimizer_states"] == 4 * large
    # host: parameter copy 2 B + gradient copy 2 B + exp_avg and exp_avg_sq 4 B per large parameter
    assert off.host_bytes == 8 * large == 80_216_064
    # gradients stay on the GPU (offload_gradients is off by default)
    assert off.components["gradients"] == base.components["gradients"]


def test_zero_offload_with_mixed_precision_moves_12_bytes_per_param() -> None:
    # DeepSpeed ZeRO-Offload (mixed-bf16): fp32 master 4 B + Adam 8 B per parameter leave the GPU; the host
    # also holds the fp32 gradient partition (4 B): 16 B per parameter (DeepSpeed's estimators' "16").
    base = estimate(spec(precision="mixed-bf16"))
    off = estimate(spec(precision="mixed-bf16", optimizer_offload="cpu"))
    assert base.component_peaks["optimizer_states"] - off.component_peaks["optimizer_states"] == 12 * N_PARAMS
    assert off.parallel.host_bytes == 16 * N_PARAMS


def test_activation_offloading_keeps_head_and_one_block() -> None:
    # Without offloading the forward peak holds embedding + 2 blocks + head saved tensors; with it, the head's
    # and one block's (the stash): the reduction is the embedding's and one block's saved bytes, and the host
    # holds everything but the head's.
    s = spec()
    work = resolve_workload(s)
    emb = act.embedding_saved_bytes(work.shape, work.tokens, work.dtypes)
    layer = act.layer_saved_bytes(work.shape, work.tokens, work.dtypes, s.workload.attention)
    base = estimate(s)
    off = estimate(spec(activation_offloading=True))
    assert base.phases["forward"] - off.phases["forward"] == emb + layer
    assert off.host_bytes == emb + 2 * layer


def test_chunked_cross_entropy() -> None:
    # torchtune, 8 chunks of 64 positions (x 2 sequences = 128 tokens): the fp32 upcast of all 1024 x 32000
    # logits becomes one chunk's: forward peak lower by 4 B x 32000 x (1024 - 128) = 114,688,000; the two fp32
    # loss gradients at the start of backward likewise: 2 x 114,688,000.
    base = estimate(spec())
    chunked = estimate(spec(cross_entropy="chunked"))
    assert base.phases["forward"] - chunked.phases["forward"] == 114_688_000
    assert base.phases["backward"] - chunked.phases["backward"] == 229_376_000


def test_fused_linear_cross_entropy() -> None:
    # Liger: chunk = next_pow2(ceil(1024 / ceil(32000 / 256))) = next_pow2(9) = 16 tokens.
    # Standard loss at the forward end: log-softmax 4 B x n + logits 2 B x n + upcast 4 B x n, n = 1024 x 32000:
    # 327,680,000. Liger: grad_input 1024 x 256 x 2 = 524,288 + grad_weight (tied head) 16,384,000 + one chunk of
    # logits 16 x 32000 x 2 = 1,024,000 + fp32 losses 1024 x 4 = 4,096: 17,936,384.
    base = estimate(spec())
    fused = estimate(spec(cross_entropy="fused_linear"))
    assert base.phases["forward"] - fused.phases["forward"] == 327_680_000 - 17_936_384


@pytest.mark.parametrize(
    ("workload", "extra", "message"),
    [
        ({"optimizer_in_backward": True}, {"parallel": {"micro_batches": 2}}, "micro_batches 2"),
        ({"optimizer_in_backward": True, "mode": "inference", "optimizer": None}, {}, "only valid with mode: train"),
        ({"activation_offloading": True}, {"parallel": {"data": 2}}, "not modelled with parallel:"),
        ({"optimizer_offload": "cpu"}, {"parallel": {"data": 2}}, "parallel.offload.optimizer"),
        ({"optimizer_in_backward": True, "optimizer_offload": "cpu"}, {}, "optimizer_offload"),
    ],
)
def test_refused_combinations(workload: dict[str, Any], extra: dict[str, Any], message: str) -> None:
    model = {"architecture": "decoder", "layers": 2, "hidden_size": 256, "heads": 4, "vocab_size": VOCAB}
    wl = {"batch_size": 2, "seq_len": 512, "precision": "bf16", "optimizer": "adamw", **workload}
    wl = {k: v for k, v in wl.items() if v is not None}
    with pytest.raises(SpecError, match=message):  # refused when the spec is estimated
        estimate(Spec.model_validate({"model": model, "workload": wl, **extra}))


def test_cross_entropy_needs_a_decoder() -> None:
    model = {"architecture": "encoder", "layers": 2, "hidden_size": 256, "heads": 4, "vocab_size": VOCAB}
    spec = Spec.model_validate(
        {"model": model, "workload": {"batch_size": 2, "seq_len": 64, "cross_entropy": "chunked"}}
    )
    with pytest.raises(SpecError, match="decoder language models only"):
        estimate(spec)


def test_cross_entropy_with_an_adapter_is_refused_not_ignored() -> None:
    """The LoRA/QLoRA path computes the standard loss: a chunked or fused loss there would be a number for
    a setting vramcalc does not model, so it is one error line instead."""
    import pytest
    import yaml

    from vramcalc.errors import SpecError
    from vramcalc.spec.load import parse_spec

    path = Path(__file__).resolve().parents[2] / "configs" / "qwen2.5-7b-lora.yaml"
    spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    spec["workload"]["cross_entropy"] = "chunked"
    with pytest.raises(SpecError, match=r"cross_entropy: only modelled for full fine-tuning \(not with adapter\)"):
        estimate(parse_spec(spec, "lora.yaml"))
