"""FP8 checkpoints (``quantization: fp8``; vLLM's and transformers' FP8 weights): 1 byte per weight and one
fp32 scale per tensor. A matmul quantizes its input to fp8 (``n_tokens x in`` bytes)."""

from __future__ import annotations

from vramcalc.llm.quantization import FP32, Matrix, QuantLayout
from vramcalc.spec.llm import QuantizationSpec


class Fp8Layout(QuantLayout):
    """One byte per weight, one fp32 scale per tensor."""

    def matrix_bytes(self, q: QuantizationSpec, out: int, inp: int) -> int:
        return out * inp + FP32

    def describe(self, q: QuantizationSpec) -> str:
        return "fp8: 1 byte per weight, one fp32 scale per tensor"

    def largest_dequant_bytes(self, largest: Matrix, n_tokens: int, compute_bytes: int) -> int:
        return n_tokens * largest.inp


FP8 = Fp8Layout()
