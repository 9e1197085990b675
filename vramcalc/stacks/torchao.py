"""torchao's quantized weights (``quantization: int4``, ``int8_weight_only``,
``int8_dynamic_activation_int8_weight``; transformers' ``TorchAoConfig`` names), run eagerly.

* int4 weight-only: 4-bit weights + a 16-bit scale and zero per group of ``group_size`` inputs per output
  row: N/2 + 4 x out x ceil(in/g) bytes for N = out x in weights. Its kernels read the packed weight
  (tinygemm's ``_weight_int4pack_mm``, fbgemm's int4 GEMM in ``Int4Tensor``): no dequantized copy.
* int8 configurations (torchao 0.18 ``Int8Tensor``, per-row granularity, quantize/workflows/int8/int8_tensor.py):
  ``qdata`` int8 [out, in], an fp32 ``scale`` and an int8 ``zero_point`` [out, 1]: N + 5 out bytes; what
  each call allocates: :func:`torchao_int8_call_bytes`, at every call, one token too.
"""

from __future__ import annotations

import math

from vramcalc.choices import TORCHAO_INT8, Mode, QuantMethod, Runtime
from vramcalc.core.shape import ModelShape
from vramcalc.errors import SpecError
from vramcalc.llm.quantization import (
    FP16,
    FP32,
    INT32,
    Matrix,
    QuantLayout,
    bits_of,
    grouped_description,
    groups_of,
    head_matrix,
    linear_groups,
)
from vramcalc.spec.llm import QuantizationSpec
from vramcalc.spec.models import Spec, is_generation
from vramcalc.stacks.techniques import one_gpu_only


class Int4Layout(QuantLayout):
    """torchao int4 weight-only (module docstring)."""

    def matrix_bytes(self, q: QuantizationSpec, out: int, inp: int) -> int:
        return math.ceil(out * inp * bits_of(q) / 8) + groups_of(q, inp) * out * 2 * FP16

    def describe(self, q: QuantizationSpec) -> str:
        return grouped_description(q)

    def dequant_bytes(self, q: QuantizationSpec, matrices: list[Matrix], n_tokens: int, compute_bytes: int) -> int:
        return 0


class Int8Layout(QuantLayout):
    """torchao 0.18 ``Int8Tensor`` (module docstring)."""

    def matrix_bytes(self, q: QuantizationSpec, out: int, inp: int) -> int:
        return out * inp + out * (FP32 + 1)

    def describe(self, q: QuantizationSpec) -> str:
        return (
            f"{q.method.value}: torchao 0.18 Int8Tensor, int8 weights with an fp32 scale and an int8 zero per output "
            "row, run eagerly"
        )

    def dequant_bytes(self, q: QuantizationSpec, matrices: list[Matrix], n_tokens: int, compute_bytes: int) -> int:
        # every call, one token too
        return max((torchao_int8_call_bytes(q.method, m, n_tokens, compute_bytes) for m in matrices), default=0)


INT4 = Int4Layout()
INT8 = Int8Layout()


def torchao_int8_call_bytes(method: QuantMethod, m: Matrix, n_tokens: int, compute_bytes: int) -> int:
    """An eager call of a torchao 0.18 ``Int8Tensor`` linear over ``n_tokens`` tokens, beyond its input and
    output (``_linear_impl`` in int8_tensor.py). Weight-only: ``qdata.t().to(output_dtype)``, the whole weight at
    the input's dtype, beside the product ``m``; then ``m`` beside the scaled output (counted here too).
    Dynamic: the activation's per-row quantization (fp32 temporaries, then its int8 copy); ``safe_int_mm``
    makes the transposed int8 weight contiguous, a whole copy, beside the int8 input and the int32 product
    (kernel/intmm.py); then the fp32 rescalings by the input's and the weight's scales, two output-sized
    tensors at a time."""
    n, rows_in, rows_out = m.out * m.inp, n_tokens * m.inp, n_tokens * m.out
    if method is QuantMethod.int8_weight_only:
        return compute_bytes * max(n + rows_out, 2 * rows_out)
    quantize = 2 * FP32 * rows_in + rows_in
    matmul = rows_in + n + INT32 * rows_out
    rescale = rows_in + 2 * FP32 * rows_out
    return max(quantize, matmul, rescale)


def torchao_int8_extra(
    shape: ModelShape,
    q: QuantizationSpec,
    n_tokens: int,
    head_rows: int,
    compute_bytes: int,
    block: int,
    activations: int,
) -> int:
    """torchao int8 calls (:func:`torchao_int8_call_bytes`) beyond a phase's activation peak ``activations``: a
    block linear's call over the phase's tokens beside ``block``, the block's largest transient; a quantized
    LM head's call over ``head_rows`` rows beside its input, the last norm's output; 0 when the activation
    peak is higher (traced with benchmarks/tracer_torchao.py: the LM head's logits often are)."""
    calls = [torchao_int8_call_bytes(q.method, m, n_tokens, compute_bytes) for m in linear_groups(shape, q)[0]]
    moment = block + max(calls, default=0)
    head = head_matrix(shape, q)
    if head is not None:
        head_call = torchao_int8_call_bytes(q.method, head, head_rows, compute_bytes)
        moment = max(moment, head_rows * head.inp * compute_bytes + head_call)
    return max(0, moment - activations)


def check_keys(spec: Spec) -> None:
    """torchao's int8 configurations are modelled as PyTorch runs them eagerly, for inference: a plain forward
    or generation with ``runtime: hf`` or ``hf-legacy`` (vLLM compiles the model and captures CUDA graphs;
    training is not modelled). Nothing trains on a torchao int4 base (``int4``): PEFT's torchao LoRA layers
    refuse it (peft/tuners/lora/torchao.py, ``_check_dtype_supported``). Refused with one line naming the key."""
    wl = spec.workload
    q = wl.quantization
    if q is not None and q.method is QuantMethod.int4 and wl.mode is Mode.train:
        raise SpecError(
            "workload.quantization: training on a torchao int4 base is not run by PEFT (its torchao LoRA layers "
            "take int8 weights only)"
        )
    if q is None or q.method not in TORCHAO_INT8:
        return
    name = q.method.value
    if wl.mode is Mode.train:
        raise SpecError(f"workload.quantization: training on a torchao {name} base is not modelled")
    if is_generation(wl) and wl.runtime not in (Runtime.hf, Runtime.hf_legacy):
        runtime = wl.runtime.value if wl.runtime is not None else "vllm, the default"
        raise SpecError(
            f"workload.runtime: torchao {name} is modelled as transformers runs it eagerly "
            f"(runtime: hf or hf-legacy), not under {runtime}"
        )
    reason = one_gpu_only(wl)
    if spec.parallel is not None and reason is not None:
        raise SpecError(reason)
