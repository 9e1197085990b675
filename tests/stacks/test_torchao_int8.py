"""torchao's int8 configurations (``quantization: int8_weight_only`` and
``int8_dynamic_activation_int8_weight``), run eagerly for inference (vramcalc/llm/quantization.py).

Expected values are worked out by hand from torchao 0.18's source: the stored tensors of ``Int8Tensor``
(torchao/quantization/quantize_/workflows/int8/int8_tensor.py lines 198-211: int8 ``qdata`` [out, in], fp32
``scale`` and int8 ``zero_point`` [out, 1]), its linear (the same file, lines 286-359: the weight-only path
casts the transposed int8 weight to the input's dtype for ``torch.mm``; the dynamic path quantizes the input
per row, then ``safe_int_mm`` makes the transposed weight contiguous, torchao/kernel/intmm.py lines 72-82).
Llama-2-7B's shapes: hidden 4,096, MLP 11,008, 32 layers.
"""

from __future__ import annotations

from typing import Any

import pytest

from vramcalc.choices import QuantMethod
from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.llm.quantization import Matrix
from vramcalc.spec.load import parse_spec
from vramcalc.stacks.torchao import torchao_int8_call_bytes

H, FFN, LAYERS = 4_096, 11_008, 32
#: q, k, v, o (4,096 x 4,096), gate and up (11,008 x 4,096), down (4,096 x 11,008) as (out, in)
LINEARS = [(H, H)] * 4 + [(FFN, H)] * 2 + [(H, FFN)]
DYNAMIC = QuantMethod.int8_dynamic_activation_int8_weight


def llama(method: str, **workload: Any) -> Any:
    wl: dict[str, Any] = {"mode": "inference", "batch_size": 1, "seq_len": 6, "precision": "bf16"}
    wl |= {"quantization": method, **workload}
    return estimate(parse_spec({"name": "t", "model": {"preset": "llama-2-7b"}, "workload": wl}))


@pytest.mark.parametrize("method", ["int8_weight_only", "int8_dynamic_activation_int8_weight"])
def test_a_byte_per_weight_and_five_per_output_row(method: str) -> None:
    per_layer = sum(out * inp + out * (4 + 1) for out, inp in LINEARS)
    info = llama(method).llm.quantization
    assert info["quantized_bytes"] == LAYERS * per_layer
    assert info["quantized_params"] == LAYERS * sum(out * inp for out, inp in LINEARS)


def test_weight_only_casts_the_whole_weight_every_call() -> None:
    # qdata.t().to(bf16): gate (11,008 x 4,096) at 2 B beside the bf16 product of 6 tokens x 11,008; one token
    # too (no fused kernel in eager mode); 4,096 tokens: the product and the scaled output, 2 x 2 B per element
    gate = Matrix(1, FFN, H)
    assert torchao_int8_call_bytes(QuantMethod.int8_weight_only, gate, 6, 2) == 2 * (FFN * H + 6 * FFN)
    assert torchao_int8_call_bytes(QuantMethod.int8_weight_only, gate, 1, 2) == 2 * (FFN * H + FFN)
    assert torchao_int8_call_bytes(QuantMethod.int8_weight_only, gate, 8_192, 2) == 2 * 2 * 8_192 * FFN


def test_dynamic_copies_the_int8_weight_beside_the_int32_product() -> None:
    # one token: its int8 copy (4,096 B), the contiguous transposed int8 weight and the int32 product
    gate = Matrix(1, FFN, H)
    assert torchao_int8_call_bytes(DYNAMIC, gate, 1, 2) == H + FFN * H + 4 * FFN


def test_dynamic_quantizes_a_long_input_in_fp32() -> None:
    # 4,096 tokens into the down projection (11,008 wide): two fp32 temporaries and the int8 copy, 9 B per
    # element, more than the matmul stage (int8 input, the weight copy, the 4 B product) or the rescaling
    # (int8 input beside two fp32 4,096 x 4,096 tensors)
    down = Matrix(1, H, FFN)
    assert torchao_int8_call_bytes(DYNAMIC, down, 4_096, 2) == 9 * 4_096 * FFN


def test_a_quantized_lm_head_is_the_largest_call_at_one_token() -> None:
    # lm_head: true, one token: the head (32,000 x 4,096) cast to bf16 beside its input (the last norm's
    # output) outweighs any block linear's call beside the block's transient
    one = llama({"method": "int8_weight_only", "lm_head": True}, seq_len=1)
    plain = llama("int8_weight_only", seq_len=1)
    head_call = 2 * (32_000 * H + 32_000) + 2 * H
    forward = one.phase_components["forward"]
    assert forward["temporaries"] + forward["activations"] == head_call
    assert plain.phase_components["forward"]["temporaries"] < head_call


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ({"mode": "train", "adapter": {"rank": 8}}, r"workload\.quantization: training on a torchao"),
        ({"seq_len": None, "prompt_len": 6, "max_new_tokens": 4}, r"workload\.runtime: torchao .* not under vllm"),
        (
            {"seq_len": None, "prompt_len": 6, "max_new_tokens": 4, "runtime": "vllm"},
            r"runtime: hf or hf-legacy\), not under vllm$",
        ),
        ({"quantization": {"method": "int8_weight_only", "bits": 8}}, r"bits: only for"),
    ],
)
def test_what_is_not_modelled_is_refused(workload: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        llama("int8_weight_only", **workload)


def test_several_gpus_are_refused() -> None:
    wl = {"mode": "inference", "batch_size": 1, "seq_len": 6, "quantization": "int8_weight_only"}
    spec = {"name": "t", "model": {"preset": "llama-2-7b"}, "workload": wl, "parallel": {"tensor": 2}}
    with pytest.raises(SpecError, match=r"across several GPUs"):
        estimate(parse_spec(spec))


def test_training_on_a_torchao_int4_base_is_refused() -> None:
    # PEFT's torchao LoRA layers raise TypeError for anything but int8 weights (peft/tuners/lora/torchao.py)
    with pytest.raises(SpecError, match=r"training on a torchao int4 base is not run by PEFT"):
        llama("int4", mode="train", adapter={"rank": 8})
