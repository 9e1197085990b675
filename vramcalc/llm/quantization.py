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
* int8_weight_only, int8_dynamic_activation_int8_weight (torchao 0.18 ``Int8Tensor``, per-row granularity,
  quantize/workflows/int8/int8_tensor.py): ``qdata`` int8 [out, in], an fp32 ``scale`` and an int8
  ``zero_point`` [out, 1]: N + 5 out.
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

from vramcalc.choices import TORCHAO_INT8, QuantMethod
from vramcalc.llm import gguf
from vramcalc.llm.quant_skip import kept_layers, resolve_skips
from vramcalc.spec.llm import BNB_4BIT, GGUF, GROUPED, QuantizationSpec
from vramcalc.units import ceil_div

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
    if m in TORCHAO_INT8:
        return n + out * (FP32 + 1)
    packed_out = math.ceil(out * bits / 32) * INT32  # one row of bits-wide values packed in int32
    zeros_scales = groups * (packed_out + out * FP16)
    if m is QuantMethod.gptq:
        return math.ceil(inp * bits / 32) * out * INT32 + zeros_scales + inp * INT32
    if m is QuantMethod.awq:
        return inp * packed_out + zeros_scales
    raise AssertionError(f"no layout for {m}")  # GGUF is counted per model, not per matrix


def block_linears(shape: object) -> list[tuple[str, Matrix]]:
    """Every block's linear weights, keyed by projection (q, k, v, o, qkv, gate, up, down); ``count`` is
    per block and ``Matrix`` rows of the same key and block kind follow each other (layers in ``_layers``)."""
    from vramcalc.core.shape import ModelShape

    assert isinstance(shape, ModelShape)
    h, q, kv, f = shape.hidden, shape.q_width, shape.kv_width, shape.ffn
    if shape.fused_qkv:
        attn = [("qkv", Matrix(1, q + 2 * kv, h))]
    else:
        attn = [("q", Matrix(1, q, h)), ("k", Matrix(1, kv, h)), ("v", Matrix(1, kv, h))]
    attn.append(("o", Matrix(1, h, q)))
    ups = ["gate", "up"] if shape.gated else ["up"]
    return [*attn, *[(k, Matrix(1, f, h)) for k in ups], ("down", Matrix(1, h, f))]


def linear_groups(shape: object, q: QuantizationSpec | None = None) -> tuple[list[Matrix], list[Matrix]]:
    """The linear weights a loader quantizes and those ``skip_modules`` keeps: every block's projections
    and every expert's MLP (the LM head is :func:`head_matrix`)."""
    from vramcalc.choices import Architecture
    from vramcalc.core.shape import ModelShape, moe_layers

    assert isinstance(shape, ModelShape)
    skips = resolve_skips(shape, q) if q is not None and q.skip_modules else []
    linears = block_linears(shape)
    n_moe = moe_layers(shape)
    groups: list[tuple[str, Matrix, int]] = []  # key, matrix per block, blocks
    for key, m in linears:
        mlp = key in ("gate", "up", "down")
        groups.append((key, m, shape.layers - n_moe if mlp else shape.layers))
        if mlp and shape.moe is not None and n_moe:
            fe = shape.moe.expert_ffn
            n = shape.moe.experts + shape.moe.shared
            groups.append((key, Matrix(n, fe, m.inp) if key != "down" else Matrix(n, m.out, fe), n_moe))
    quant: list[Matrix] = []
    kept: list[Matrix] = []
    for key, m, blocks in groups:
        k = kept_layers(skips, key, blocks)
        quant.append(Matrix(m.count * (blocks - k), m.out, m.inp))
        kept.append(Matrix(m.count * k, m.out, m.inp))
    if shape.architecture is Architecture.encoder_decoder:  # decoder: self- and cross-attention + MLP
        for key, m in linears:
            n = (2 if key not in ("gate", "up", "down") else 1) * shape.decoder_layers
            k = kept_layers(skips, key, n)
            quant.append(Matrix(m.count * (n - k), m.out, m.inp))
            kept.append(Matrix(m.count * k, m.out, m.inp))
    return [m for m in quant if m.count], [m for m in kept if m.count]


def quantized_matrices(shape: object, q: QuantizationSpec | None = None) -> list[Matrix]:
    """The linear weights a loader quantizes: every block's projections and every expert's MLP, less
    ``skip_modules``; with ``lm_head: true`` the output layer too."""
    head = head_matrix(shape, q)
    return linear_groups(shape, q)[0] + ([head] if head is not None else [])


def head_matrix(shape: object, q: QuantizationSpec | None) -> Matrix | None:
    """The LM head as a quantized matrix when ``lm_head: true`` (None otherwise, or without a vocabulary head)."""
    from vramcalc.core.params import has_vocab_head

    if q is None or not q.lm_head or not has_vocab_head(shape):  # type: ignore[arg-type]
        return None
    return Matrix(1, shape.vocab, shape.embed_width)  # type: ignore[attr-defined]


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


def litgpt_gptq_tensors(out: int, inp: int, param_bytes: int) -> tuple[int, int, int]:
    """The tensors of one weight in litgpt's ``gptq.int4`` (``ColBlockQuantizedLinear`` with 4 bits and one
    tile per row, quantize/gptq.py of litgpt 2023), in the order it makes them: ``quant_weight`` uint8
    [out, in/2], then float ``scales`` and ``zeros`` [out, 1] at the model's dtype; no ``g_idx`` (the
    act-order permutation is undone before saving)."""
    return out * ceil_div(inp, 2), out * param_bytes, out * param_bytes


def litgpt_gptq_bytes(out: int, inp: int, param_bytes: int) -> int:
    """Bytes of one weight in litgpt's ``gptq.int4`` (:func:`litgpt_gptq_tensors`)."""
    return sum(litgpt_gptq_tensors(out, inp, param_bytes))


def weight_bytes(
    shape: object, q: QuantizationSpec, n_params: int, param_bytes: int, litgpt: bool = False
) -> WeightBytes:
    """All parameter bytes of ``shape`` with its linear layers stored as ``q`` (the rest at ``param_bytes``);
    ``litgpt``: a ``gptq`` quantization is litgpt's own layout (:func:`litgpt_gptq_bytes`)."""
    if q.method in GGUF:
        gw = gguf_weights(shape, q, n_params)
        (qp, qb), (kp, kb) = gw.part(quantized=True), gw.part(quantized=False)
        return WeightBytes(gw.total_bytes, qp, qb, kp, kb)
    matrices = quantized_matrices(shape, q)
    n_quant = sum(m.count * m.out * m.inp for m in matrices)
    if litgpt and q.method is QuantMethod.gptq:
        quant = sum(m.count * litgpt_gptq_bytes(m.out, m.inp, param_bytes) for m in matrices)
    else:
        quant = sum(m.count * matrix_bytes(q, m.out, m.inp) for m in matrices)
    kept = max(0, n_params - n_quant)
    head = head_matrix(shape, q)
    if head is not None and getattr(shape, "tie_embeddings", False):
        kept += head.out * head.inp  # a tied head is untied: the embedding keeps its 16-bit table
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


def dequant_buffer_bytes(
    shape: object, q: QuantizationSpec, n_tokens: int, compute_bytes: int, blocks_only: bool = False
) -> int:
    """Transient bytes of a multi-token matmul on quantized weights (the largest layer).

    4-bit methods and GGUF dequantize the whole weight to the compute dtype for matmuls over many
    tokens (bitsandbytes ``MatMul4Bit``: ``dequantize_4bit(...).t()``; AutoAWQ above 1,024 tokens;
    llama.cpp's cuBLAS path); a single token uses a fused GEMV kernel (none). torchao's int4 weight-only
    never does: its kernels read the packed weight (tinygemm's ``_weight_int4pack_mm``, fbgemm's int4 GEMM
    in ``Int4Tensor``). LLM.int8 quantizes the input to int8 and accumulates in int32
    (``n_tokens x (in + 4 out)``); fp8 quantizes the input (``n_tokens x in``); torchao's int8 configurations:
    :func:`torchao_int8_call_bytes`, at every call. ``blocks_only``: the largest of the blocks' linears,
    leaving out a quantized LM head.
    """
    matrices = linear_groups(shape, q)[0] if blocks_only else quantized_matrices(shape, q)
    if q.method in TORCHAO_INT8:  # every call, one token too
        return max((torchao_int8_call_bytes(q.method, m, n_tokens, compute_bytes) for m in matrices), default=0)
    if n_tokens <= 1 or q.method is QuantMethod.int4:
        return 0
    if not matrices:  # every block linear skipped (skip_modules), only the LM head quantized
        return 0
    largest = max(matrices, key=lambda m: m.out * m.inp)
    if q.method is QuantMethod.int8:
        return n_tokens * (largest.inp + INT32 * largest.out)
    if q.method is QuantMethod.fp8:
        return n_tokens * largest.inp
    return largest.out * largest.inp * compute_bytes


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
    shape: object, q: QuantizationSpec, n_tokens: int, head_rows: int, compute_bytes: int, block: int, activations: int
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


def requantize_bytes(q: QuantizationSpec, elements: int) -> int:
    """Transient bytes of quantizing one weight of ``elements`` from its fp16 copy on the GPU (Lightning's
    ``_quantize_weight``): LLM.int8's ``double_quant`` makes the row-major and the transposed int8 copies
    (``CB``, ``CBt``) beside the fp16 weight, 4 B per element; 4-bit's ``quantize_4bit`` the packed weight
    and one fp32 absmax per block beside it."""
    fp16 = 2 * elements
    if q.method is QuantMethod.int8:
        return fp16 + 2 * elements
    return fp16 + ceil_div(elements, 2) + FP32 * ceil_div(elements, q.block_size or BNB_BLOCK)


def describe(q: QuantizationSpec, litgpt: bool = False) -> str:
    """One line naming the method and the layout parameters in force (defaults included); ``litgpt``: a
    ``gptq`` quantization is litgpt's ``gptq.int4``."""
    m = q.method
    if litgpt and m is QuantMethod.gptq:
        return "gptq: litgpt's gptq.int4, 4-bit, a scale and a zero per output row at the model's dtype"
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
    if m in TORCHAO_INT8:
        return (
            f"{m.value}: torchao 0.18 Int8Tensor, int8 weights with an fp32 scale and an int8 zero per output row, "
            "run eagerly"
        )
    return "fp8: 1 byte per weight, one fp32 scale per tensor"


def kept_line(shape: object, q: QuantizationSpec, kept_params: int, precision: str) -> str:
    """The assumption line naming what stays at the parameter dtype."""
    line = (
        "embeddings, norms and biases are not quantized"
        if q.lm_head
        else ("embeddings, LM head, norms and biases are not quantized")
    )
    if q.skip_modules:
        kept = sum(m.count * m.out * m.inp for m in linear_groups(shape, q)[1])
        line += f"; skip_modules keeps {kept:,} linear weights"
    line += f": {kept_params:,} parameters, loaded as {precision}"
    if q.lm_head:
        tied = getattr(shape, "tie_embeddings", False)
        line += "; lm_head: true quantizes the output layer" + (
            " (tied: quantize_ gives the head its own quantized copy, the embedding keeps the 16-bit table)"
            if tied
            else ""
        )
    return line
