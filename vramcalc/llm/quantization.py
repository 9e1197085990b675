"""Quantized weight bytes, counted exactly from each method's storage layout (int bytes).

What is quantized: the linear layers of the transformer blocks (attention and MLP projections, every
expert's MLP). What stays in the spec's ``precision``: embeddings, the LM head, norms, biases and MoE
routers. This is what the common loaders do: transformers' bitsandbytes integration skips the output
embedding (``get_keys_to_not_convert``) and only replaces ``nn.Linear``; AutoGPTQ/AutoAWQ quantize the
decoder layers' linears and keep ``lm_head`` in fp16; vLLM's fp8 keeps embeddings and ``lm_head`` in
16 bits; MoE routers are left unquantized (AutoAWQ/GPTQ ``modules_to_not_convert: [gate]``).
GGUF files are the exception: llama.cpp gives every tensor its own type (token embedding and output
included), chosen per file type, tensor and layer; :mod:`vramcalc.llm.gguf` applies those rules to the
model's own tensors.

Layouts per quantized matrix of ``out`` rows and ``in`` columns (N = out x in weights):

* int8 (bitsandbytes LLM.int8, ``Int8Params``): int8 ``CB`` + fp32 ``SCB`` per output row: N + 4 out.
* int4 (torchao int4 weight-only): 4-bit weights + a 16-bit scale and zero per group of ``group_size``
  inputs per output row: N/2 + 4 x out x ceil(in/g).
* gptq (AutoGPTQ ``QuantLinear``): ``qweight`` int32 [in x bits/32, out], ``qzeros`` int32
  [ceil(in/g), out x bits/32], ``scales`` fp16 [ceil(in/g), out], ``g_idx`` int32 [in].
* awq (AutoAWQ ``WQLinear_GEMM``): ``qweight`` int32 [in, out x bits/32], ``qzeros`` int32
  [ceil(in/g), out x bits/32], ``scales`` fp16 [ceil(in/g), out].
* nf4 / fp4 (bitsandbytes ``Params4bit``): 4-bit pairs packed in uint8 + one fp32 absmax per block of
  64; with double quantization (QLoRA, Dettmers et al. 2023, section 3) the absmax values are 8-bit with
  one fp32 absmax per 256 of them plus an fp32 offset per tensor: 4 + 32/64 = 4.5 bits per weight
  without, 4 + 8/64 + 32/(64 x 256) = 4.127 with.
* fp8 (vLLM / transformers FP8 checkpoints): 1 byte per weight + one fp32 scale per tensor.
* GGUF: per tensor, see :mod:`vramcalc.llm.gguf`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vramcalc.choices import QuantMethod
from vramcalc.llm import gguf
from vramcalc.spec.llm import BNB_4BIT, GGUF, GROUPED, QuantizationSpec

DEFAULT_GROUP = 128
DEFAULT_BITS = 4
BNB_BLOCK = 64
BNB_NESTED_BLOCK = 256
FP32, FP16, INT32 = 4, 2, 4


@dataclass(frozen=True)
class Matrix:
    """``count`` linear weight matrices of ``out`` x ``inp`` (PyTorch's [out_features, in_features])."""

    count: int
    out: int
    inp: int


def _bits(q: QuantizationSpec) -> int:
    return q.bits if q.bits is not None else DEFAULT_BITS


def _groups(q: QuantizationSpec, inp: int) -> int:
    group = q.group_size if q.group_size is not None else DEFAULT_GROUP
    return 1 if group == -1 else math.ceil(inp / group)


def _bnb4_bytes(q: QuantizationSpec, n: int) -> int:
    block = q.block_size or BNB_BLOCK
    blocks = math.ceil(n / block)
    if q.double_quant:
        stats = blocks + math.ceil(blocks / BNB_NESTED_BLOCK) * FP32 + FP32
    else:
        stats = blocks * FP32
    return math.ceil(n / 2) + stats


def matrix_bytes(q: QuantizationSpec, out: int, inp: int) -> int:
    """Bytes of one quantized ``out`` x ``inp`` weight matrix (layouts in the module docstring)."""
    n, m = out * inp, q.method
    if m is QuantMethod.int8:
        return n + out * FP32
    if m is QuantMethod.fp8:
        return n + FP32
    if m in BNB_4BIT:
        return _bnb4_bytes(q, n)
    bits, groups = _bits(q), _groups(q, inp)
    if m is QuantMethod.int4:
        return math.ceil(n * bits / 8) + groups * out * 2 * FP16
    packed_out = math.ceil(out * bits / 32) * INT32  # one row of bits-wide values packed in int32
    zeros_scales = groups * (packed_out + out * FP16)
    if m is QuantMethod.gptq:
        return math.ceil(inp * bits / 32) * out * INT32 + zeros_scales + inp * INT32
    if m is QuantMethod.awq:
        return inp * packed_out + zeros_scales
    raise AssertionError(f"no layout for {m}")  # GGUF is counted per model, not per matrix


def quantized_matrices(shape: object) -> list[Matrix]:
    """The linear weights a loader quantizes: every block's projections and every expert's MLP."""
    from vramcalc.choices import Architecture
    from vramcalc.core.shape import ModelShape, moe_layers

    assert isinstance(shape, ModelShape)
    h, q, kv, f = shape.hidden, shape.q_width, shape.kv_width, shape.ffn
    attn = [Matrix(1, q + 2 * kv, h)] if shape.fused_qkv else [Matrix(1, q, h), Matrix(2, kv, h)]
    attn.append(Matrix(1, h, q))
    n_up = 2 if shape.gated else 1
    n_moe = moe_layers(shape)
    out = [Matrix(m.count * shape.layers, m.out, m.inp) for m in attn]
    dense_layers = shape.layers - n_moe
    out += [Matrix(n_up * dense_layers, f, h), Matrix(dense_layers, h, f)]
    if shape.moe is not None and n_moe:
        per_layer = shape.moe.experts + shape.moe.shared
        fe = shape.moe.expert_ffn
        out += [Matrix(n_up * per_layer * n_moe, fe, h), Matrix(per_layer * n_moe, h, fe)]
    if shape.architecture is Architecture.encoder_decoder:  # decoder: self- and cross-attention + MLP
        out += [Matrix(2 * m.count * shape.decoder_layers, m.out, m.inp) for m in attn]
        out += [Matrix(n_up * shape.decoder_layers, f, h), Matrix(shape.decoder_layers, h, f)]
    return [m for m in out if m.count]


@dataclass(frozen=True)
class WeightBytes:
    """Weights of a quantized model: the quantized part and what stays at the parameter dtype."""

    total_bytes: int
    quantized_params: int
    quantized_bytes: int
    kept_params: int
    kept_bytes: int

    @property
    def bits_per_quantized_weight(self) -> float:
        return 8 * self.quantized_bytes / self.quantized_params if self.quantized_params else 0.0


def weight_bytes(shape: object, q: QuantizationSpec, n_params: int, param_bytes: int) -> WeightBytes:
    """All parameter bytes of ``shape`` with its linear layers stored as ``q`` (the rest at ``param_bytes``)."""
    if q.method in GGUF:
        gw = gguf_weights(shape, q, n_params)
        (qp, qb), (kp, kb) = gw.part(quantized=True), gw.part(quantized=False)
        return WeightBytes(gw.total_bytes, qp, qb, kp, kb)
    matrices = quantized_matrices(shape)
    n_quant = sum(m.count * m.out * m.inp for m in matrices)
    quant = sum(m.count * matrix_bytes(q, m.out, m.inp) for m in matrices)
    kept = max(0, n_params - n_quant)
    return WeightBytes(quant + kept * param_bytes, n_quant, quant, kept, kept * param_bytes)


def gguf_weights(shape: object, q: QuantizationSpec, n_params: int) -> gguf.GgufWeights:
    """The GGUF file's weights, per ggml type, for a spec's GGUF quantization."""
    from vramcalc.core.shape import ModelShape

    assert isinstance(shape, ModelShape)
    opts = gguf.Overrides(
        output_type=gguf.ggml_name(q.output_tensor_type),
        embedding_type=gguf.ggml_name(q.token_embedding_type),
        imatrix=bool(q.imatrix),
    )
    return gguf.file_weights(shape, q.method.value, n_params, opts)


def dequant_buffer_bytes(shape: object, q: QuantizationSpec, n_tokens: int, compute_bytes: int) -> int:
    """Transient bytes of a multi-token matmul on quantized weights (the largest layer).

    4-bit methods and GGUF dequantize the whole weight to the compute dtype for matmuls over many
    tokens (bitsandbytes ``MatMul4Bit``: ``dequantize_4bit(...).t()``; AutoAWQ above 1,024 tokens;
    llama.cpp's cuBLAS path); a single token uses a fused GEMV kernel (none). LLM.int8 quantizes the
    input to int8 and accumulates in int32 (``n_tokens x (in + 4 out)``); fp8 quantizes the input (``n_tokens x in``).
    """
    if n_tokens <= 1:
        return 0
    largest = max(quantized_matrices(shape), key=lambda m: m.out * m.inp)
    if q.method is QuantMethod.int8:
        return n_tokens * (largest.inp + INT32 * largest.out)
    if q.method is QuantMethod.fp8:
        return n_tokens * largest.inp
    return largest.out * largest.inp * compute_bytes


def describe(q: QuantizationSpec) -> str:
    """One line naming the method and the layout parameters in force (defaults included)."""
    m = q.method
    if m in GGUF:
        return f"{m.value}: GGUF, llama.cpp's per-tensor types (llama_tensor_get_type)"
    if m in BNB_4BIT:
        dq = "with" if q.double_quant else "without"
        return f"{m.value}: bitsandbytes 4-bit, blocks of {q.block_size or BNB_BLOCK}, {dq} double quantization"
    if m in GROUPED:
        group = q.group_size if q.group_size is not None else DEFAULT_GROUP
        return f"{m.value}: {_bits(q)}-bit, group size {group}, fp16 scales and zeros"
    if m is QuantMethod.int8:
        return "int8: bitsandbytes LLM.int8, an fp32 scale per output row"
    return "fp8: 1 byte per weight, one fp32 scale per tensor"
