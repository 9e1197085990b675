"""Quantized weights: exact layouts per method, what stays in 16 bits, and dequantization buffers."""

from __future__ import annotations

from typing import Any

import pytest

from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.llm.quantization import WeightBytes
from vramcalc.spec.llm import QuantizationSpec
from vramcalc.spec.llm import QuantizationSpec as Q
from vramcalc.spec.load import parse_spec
from vramcalc.stacks.layouts import quant_layout


def matrix_bytes(q: QuantizationSpec, out: int, inp: int) -> int:
    """One matrix in the layout the quantization method's stack registers."""
    return quant_layout(q.method).matrix_bytes(q, out, inp)


def weight_bytes(shape: object, q: QuantizationSpec, n_params: int, param_bytes: int) -> WeightBytes:
    return quant_layout(q.method).weights(shape, q, n_params, param_bytes)


N = 4096 * 4096  # one 4096 x 4096 projection: 16,777,216 weights


def test_nf4_without_double_quant_is_4_5_bits() -> None:
    # N/2 packed bytes + one fp32 absmax per 64 weights: 8,388,608 + 262,144 x 4 = 9,437,184 -> 4.5 bits
    assert matrix_bytes(Q(method="nf4"), 4096, 4096) == 9_437_184
    assert 8 * 9_437_184 / N == 4.5


def test_nf4_double_quant_is_about_4_127_bits() -> None:
    # QLoRA paper (Dettmers et al. 2023, sec. 3): 4 + 8/64 + 32/(64 x 256) = 4.126953125 bits, plus one
    # fp32 offset per tensor: 8,388,608 + 262,144 x 1 + 1,024 x 4 + 4 = 8,654,852 B
    b = matrix_bytes(Q(method="nf4", double_quant=True), 4096, 4096)
    assert b == 8_654_852
    assert 8 * b / N == pytest.approx(4 + 8 / 64 + 32 / (64 * 256), abs=1e-5)
    assert 8 * b / N > 4.0  # never "exactly half a byte"


def test_grouped_layouts_gptq_awq_int4() -> None:
    # GPTQ: qweight 4096/8 x 4096 int32 = 8,388,608; 32 groups x (qzeros 4096/8 x 4 + scales 4096 x 2)
    #   = 32 x (2,048 + 8,192) = 327,680; g_idx 4096 x 4 = 16,384 -> 8,732,672 (4.164 bits)
    assert matrix_bytes(Q(method="gptq"), 4096, 4096) == 8_732_672
    # AWQ: the same without g_idx -> 8,716,288 (4.156 bits)
    assert matrix_bytes(Q(method="awq", bits=4, group_size=128), 4096, 4096) == 8_716_288
    # int4 (torchao): 8,388,608 + 32 groups x 4096 rows x (2 + 2) B = 8,912,896 (4.25 bits)
    assert matrix_bytes(Q(method="int4"), 4096, 4096) == 8_912_896
    # one group per row (group_size -1): 8,388,608 + 1 x (2,048 + 8,192) = 8,398,848 (AWQ)
    assert matrix_bytes(Q(method="awq", group_size=-1), 4096, 4096) == 8_398_848


def test_int8_and_fp8() -> None:
    # LLM.int8: int8 weights + fp32 SCB per output row: 16,777,216 + 4,096 x 4 = 16,793,600
    assert matrix_bytes(Q(method="int8"), 4096, 4096) == 16_793_600
    # fp8: 1 B per weight + one fp32 per-tensor scale
    assert matrix_bytes(Q(method="fp8"), 4096, 4096) == N + 4


LLAMA2_7B = {
    "architecture": "decoder", "layers": 32, "hidden_size": 4096, "heads": 32, "ffn_size": 11008,
    "mlp": "swiglu", "vocab_size": 32000, "tie_embeddings": False,
}  # fmt: skip


def spec(**workload: Any) -> Any:
    wl = {"mode": "inference", "batch_size": 1, "seq_len": 1, "precision": "fp16", **workload}
    return parse_spec({"name": "t", "model": LLAMA2_7B, "workload": wl})


def test_embeddings_head_and_norms_stay_16_bit() -> None:
    # Llama-2-7B: 6,738,415,616 params; linear weights per layer 4 x 4096^2 + 3 x 4096 x 11008 = 202,375,168
    # x 32 = 6,476,005,376 quantized; the rest (2 x 32000 x 4096 embeddings/head + norms) = 262,410,240 fp16
    from vramcalc.families.resolve import resolve_model

    s = spec(quantization="nf4")
    shape, _ = resolve_model(s.model, s.workload)
    wb = weight_bytes(shape, Q(method="nf4"), 6_738_415_616, 2)
    assert wb.quantized_params == 6_476_005_376
    assert wb.kept_params == 262_410_240
    assert wb.kept_bytes == 524_820_480
    assert wb.quantized_bytes == 6_476_005_376 * 9 // 16  # exactly 4.5 bits: every matrix is a multiple of 64
    assert estimate(s).components["parameters"] == wb.total_bytes


def test_gguf_is_counted_per_tensor() -> None:
    # Llama-2-7B q8_0: every 2-D tensor (output included) at 34 B per 32 weights, the 266,240 norm weights
    # (32 layers x 2 x 4,096 + 4,096) at F32: 6,738,149,376 x 34 / 32 + 266,240 x 4 = 7,160,348,672
    assert estimate(spec(quantization="q8_0")).components["parameters"] == 7_160_348_672


def test_4bit_below_8bit_below_fp16() -> None:
    params = {m: estimate(spec(quantization=m)).components["parameters"] for m in ("nf4", "gptq", "int8")}
    fp16 = estimate(spec()).components["parameters"]
    assert params["nf4"] < params["int8"] < fp16
    assert params["gptq"] < params["int8"]


def test_dequant_buffer_only_for_multi_token_matmuls() -> None:
    # prefill of 511 tokens: bitsandbytes dequantizes the largest weight (11008 x 4096) to fp16 = 90,177,536 B
    # inside up_proj, where one 511 x 11008 fp16 activation fewer is alive than at the SwiGLU product (the
    # block's peak without it; benchmarks/data/tracer_bnb.json): 90,177,536 - 11,250,176 beyond that peak
    s = spec(quantization="nf4", seq_len=512, max_new_tokens=1, runtime="hf")
    result = estimate(s)
    assert 11008 * 4096 * 2 - 511 * 11008 * 2 == 78_927_360
    assert result.phase_components["prefill"]["temporaries"] == 78_927_360
    # decode, batch 1: one token per matmul -> bitsandbytes' GEMV, no dequantized copy; the temporaries are
    # DynamicCache's one-layer torch.cat: 512 tokens x (2 x 32 heads x 128 x 2 B) = 8,388,608
    assert result.phase_components["decode"]["temporaries"] == 512 * 2 * 32 * 128 * 2


@pytest.mark.parametrize(
    ("quant", "message"),
    [
        ({"method": "nf4", "bits": 4}, "bits: only for"),
        ({"method": "gptq", "double_quant": True}, "double_quant: only for"),
        ({"method": "q9_k"}, "method"),
        ({"method": "gptq", "group_size": 0}, "group_size"),
    ],
)
def test_bad_quantization(quant: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        spec(quantization=quant)


def test_quantized_full_finetune_is_rejected() -> None:
    s = parse_spec(
        {
            "name": "t",
            "model": LLAMA2_7B,
            "workload": {"mode": "train", "batch_size": 1, "seq_len": 8, "quantization": "nf4"},
        }
    )
    with pytest.raises(SpecError, match="needs an adapter"):
        estimate(s)
