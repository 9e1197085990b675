"""GPTQ and AWQ checkpoints (``quantization: gptq``, ``awq``): weights packed in int32 with a scale and a zero
per group of ``group_size`` inputs per output row.

* gptq (AutoGPTQ ``QuantLinear``): ``qweight`` int32 [in x bits/32, out], ``qzeros`` int32
  [ceil(in/g), out x bits/32], ``scales`` fp16 [ceil(in/g), out], ``g_idx`` int32 [in].
* awq (AutoAWQ ``WQLinear_GEMM``): ``qweight`` int32 [in, out x bits/32], ``qzeros`` int32
  [ceil(in/g), out x bits/32], ``scales`` fp16 [ceil(in/g), out].

A matmul over many tokens dequantizes the whole weight to the compute dtype (AutoAWQ above 1,024 tokens).
"""

from __future__ import annotations

import math

from vramcalc.llm.quantization import FP16, INT32, QuantLayout, bits_of, grouped_description, groups_of
from vramcalc.spec.llm import QuantizationSpec


def _zeros_scales(q: QuantizationSpec, out: int, inp: int) -> tuple[int, int]:
    """One row of bits-wide values packed in int32, and the zeros and scales of every group."""
    packed_out = math.ceil(out * bits_of(q) / 32) * INT32
    return packed_out, groups_of(q, inp) * (packed_out + out * FP16)


class GptqLayout(QuantLayout):
    """AutoGPTQ's ``QuantLinear`` (module docstring)."""

    def matrix_bytes(self, q: QuantizationSpec, out: int, inp: int) -> int:
        _, zeros_scales = _zeros_scales(q, out, inp)
        return math.ceil(inp * bits_of(q) / 32) * out * INT32 + zeros_scales + inp * INT32

    def describe(self, q: QuantizationSpec) -> str:
        return grouped_description(q)


class AwqLayout(QuantLayout):
    """AutoAWQ's ``WQLinear_GEMM`` (module docstring)."""

    def matrix_bytes(self, q: QuantizationSpec, out: int, inp: int) -> int:
        packed_out, zeros_scales = _zeros_scales(q, out, inp)
        return inp * packed_out + zeros_scales

    def describe(self, q: QuantizationSpec) -> str:
        return grouped_description(q)


GPTQ = GptqLayout()
AWQ = AwqLayout()
