"""bitsandbytes 4-bit compute dtype (``quantization.compute_dtype``, ``bnb_4bit_compute_dtype``).

Rules from bitsandbytes' source (vramcalc/stacks/bnb.py): ``Linear4bit.set_compute_type`` (0.41.0 to 0.46.x)
replaces a given compute dtype by a bf16/fp32 input's dtype and keeps it for fp16 inputs; from 0.47.0 a
given dtype is kept. Up to 0.49.x ``MatMul4Bit.forward`` runs ``dequantize_4bit(B, state).to(A.dtype)``
(the weight at its load dtype, then at the compute dtype); from 0.50.0 the fallback dequantizes straight
into the compute dtype. Expected bytes are worked by hand in each test.
"""

from __future__ import annotations

from typing import Any

import pytest

from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.spec.load import parse_spec
from vramcalc.stacks import bnb


def release(version: str) -> bnb.Release:
    return bnb.release_of({"bitsandbytes": version})


@pytest.mark.parametrize(
    ("version", "given", "input_dtype", "used"),
    [
        ("0.40.2", "fp32", "bf16", "fp32"),  # before set_compute_type: the given dtype
        ("0.41.1", "fp32", "bf16", "bf16"),  # a bf16 input replaces it
        ("0.41.1", "fp32", "fp32", "fp32"),
        ("0.46.1", "fp32", "fp16", "fp32"),  # an fp16 input keeps it
        ("0.47.0", "fp32", "bf16", "fp32"),  # a given dtype is kept from 0.47.0
        ("0.50.1", "bf16", "fp16", "bf16"),
    ],
)
def test_compute_dtype_by_release(version: str, given: str, input_dtype: str, used: str) -> None:
    assert bnb.four_bit_compute(given, release(version), input_dtype) == used


def test_matmul_bytes_by_hand() -> None:
    # weight 8 x 4 = 32 elements, 3 tokens, fp16 weight and input, fp32 compute:
    # 0.41.1: weight at fp16 (64 B) and at fp32 (128 B); input copy 3 x 4 x 4 = 48 B and output 3 x 8 x 4 = 96 B
    # at fp32, less the 16-bit tensor of the wider side the cast output stands in for, 3 x 8 x 2 = 48 B
    assert bnb.four_bit_matmul_bytes(8, 4, 3, "fp16", "fp16", "fp32", release("0.41.1")) == 64 + 128 + 48 + 96 - 48
    # 0.50.1 dequantizes straight into fp32: no fp16 weight
    assert bnb.four_bit_matmul_bytes(8, 4, 3, "fp16", "fp16", "fp32", release("0.50.1")) == 128 + 48 + 96 - 48
    # compute at the input's and weight's dtype: the weight only
    assert bnb.four_bit_matmul_bytes(8, 4, 3, "fp16", "fp16", "fp16", release("0.41.1")) == 64
    # bf16 compute on an fp16 model: a 2-byte copy is still a copy (3 x 12 x 2 - 3 x 8 x 2 = 24 B)
    assert bnb.four_bit_matmul_bytes(8, 4, 3, "fp16", "fp16", "bf16", release("0.41.1")) == 64 + 64 + 24


TINY = {"architecture": "decoder", "layers": 2, "hidden_size": 64, "heads": 4, "ffn_size": 256, "mlp": "swiglu",
        "vocab_size": 100, "tie_embeddings": False}  # fmt: skip


def prefill_temporaries(quantization: Any, versions: dict[str, str] | None = None) -> int:
    workload: dict[str, Any] = {"mode": "inference", "batch_size": 1, "prompt_len": 8, "max_new_tokens": 1,
                                "precision": "fp16", "quantization": quantization, "runtime": "hf"}  # fmt: skip
    if versions:
        workload["versions"] = versions
    result = estimate(parse_spec({"name": "t", "model": TINY, "workload": workload}))
    return result.phase_components["prefill"]["temporaries"]


def test_prefill_buffer_with_an_fp32_compute_dtype() -> None:
    # The largest 4-bit linears are gate/up/down: 256 x 64 = 16,384 weights; 8 prompt tokens.
    # Inside a linear one 8 x 256 fp16 activation fewer is alive than at the MLP's peak (bnb.beyond_ffn):
    # 8 x 256 x 2 = 4,096 B comes off the buffer.
    # Model dtype: 16,384 x 2 = 32,768 B -> 28,672 B.
    assert prefill_temporaries("nf4") == 32_768 - 4_096
    # fp32 on 0.41.1 with fp16 inputs (kept): weight 16,384 x (2 + 4) = 98,304 B; input copy and output at
    # fp32 8 x (64 + 256) x 4 = 10,240 B less the 8 x 256 fp16 output they stand in for, 4,096 B.
    fp32 = {"method": "nf4", "compute_dtype": "fp32"}
    assert prefill_temporaries(fp32, {"bitsandbytes": "0.41.1"}) == 98_304 + 10_240 - 4_096 - 4_096
    # 0.50.1: the weight once, at fp32
    assert prefill_temporaries(fp32, {"bitsandbytes": "0.50.1"}) == 65_536 + 10_240 - 4_096 - 4_096


def test_compute_dtype_is_stated() -> None:
    workload = {"mode": "inference", "batch_size": 1, "seq_len": 8, "precision": "bf16",
                "quantization": {"method": "nf4", "compute_dtype": "fp32"},
                "versions": {"bitsandbytes": "0.45.0"}}  # fmt: skip
    result = estimate(parse_spec({"name": "t", "model": TINY, "workload": workload}))
    line = next(a for a in result.assumptions if "compute_dtype" in a)
    assert "replaces it by the bf16 input's dtype" in line and "compute in bf16" in line


def test_compute_dtype_only_for_4bit() -> None:
    workload = {"mode": "inference", "batch_size": 1, "seq_len": 8, "precision": "fp16",
                "quantization": {"method": "int8", "compute_dtype": "fp32"}}  # fmt: skip
    with pytest.raises(SpecError, match="compute_dtype: only for the bitsandbytes 4-bit methods"):
        parse_spec({"name": "t", "model": TINY, "workload": workload})
