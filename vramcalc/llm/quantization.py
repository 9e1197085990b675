"""Quantized weights, generically: which linears a loader quantizes and which it keeps, and the weight
bytes of a model whose quantized linears are stored in a method's layout (:class:`QuantLayout`).

What is quantized: the linear layers of the transformer blocks (attention and MLP projections, every
expert's MLP). What stays in the spec's ``precision``: embeddings, the LM head, norms, biases and MoE
routers. This is what the common loaders do: transformers' bitsandbytes integration skips the output
embedding (``get_keys_to_not_convert``) and only replaces ``nn.Linear``; AutoGPTQ/AutoAWQ quantize the
decoder layers' linears and keep ``lm_head`` in fp16; vLLM's fp8 keeps embeddings and ``lm_head`` in
16 bits; MoE routers are left unquantized (AutoAWQ/GPTQ ``modules_to_not_convert: [gate]``).

Each method's storage layout and matmul transients are its library's, in the stacks wing: bitsandbytes
(``int8``, ``nf4``, ``fp4``: vramcalc/stacks/bnb.py), torchao (``int4`` and the int8 configurations:
vramcalc/stacks/torchao.py), GPTQ and AWQ checkpoints (vramcalc/stacks/gptq.py), FP8 checkpoints
(vramcalc/stacks/fp8.py) and GGUF files, whose every tensor has its own type (vramcalc/stacks/gguf.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vramcalc.core.shape import ModelShape, moe_layers
from vramcalc.llm.quant_skip import kept_layers, resolve_skips
from vramcalc.spec.llm import QuantizationSpec
from vramcalc.units import FP16 as FP16
from vramcalc.units import FP32 as FP32
from vramcalc.units import INT32 as INT32

#: Grouped layouts (4-bit weights with a scale and zero per group of inputs): their defaults.
DEFAULT_GROUP = 128
DEFAULT_BITS = 4


def bits_of(q: QuantizationSpec) -> int:
    """The bits per weight of a grouped layout (``bits``, default 4)."""
    return q.bits if q.bits is not None else DEFAULT_BITS


def groups_of(q: QuantizationSpec, inp: int) -> int:
    """Scale groups per output row of a grouped layout (``group_size``, default 128; -1: one per row)."""
    group = q.group_size if q.group_size is not None else DEFAULT_GROUP
    return 1 if group == -1 else math.ceil(inp / group)


def grouped_description(q: QuantizationSpec) -> str:
    """A grouped layout's line: its bits and group size."""
    group = q.group_size if q.group_size is not None else DEFAULT_GROUP
    return f"{q.method.value}: {bits_of(q)}-bit, group size {group}, fp16 scales and zeros"


@dataclass(frozen=True)
class Matrix:
    """``count`` linear weight matrices of ``out`` x ``inp`` (PyTorch's [out_features, in_features])."""

    count: int
    out: int
    inp: int


def block_linears(shape: ModelShape) -> list[tuple[str, Matrix]]:
    """Every block's linear weights, keyed by projection (q, k, v, o, qkv, gate, up, down); ``count`` is
    per block and ``Matrix`` rows of the same key and block kind follow each other (layers in ``_layers``)."""
    h, q, kv, f = shape.hidden, shape.q_width, shape.kv_width, shape.ffn
    if shape.fused_qkv:
        attn = [("qkv", Matrix(1, q + 2 * kv, h))]
    else:
        attn = [("q", Matrix(1, q, h)), ("k", Matrix(1, kv, h)), ("v", Matrix(1, kv, h))]
    attn.append(("o", Matrix(1, h, q)))
    ups = ["gate", "up"] if shape.gated else ["up"]
    return [*attn, *[(k, Matrix(1, f, h)) for k in ups], ("down", Matrix(1, h, f))]


def linear_groups(shape: ModelShape, q: QuantizationSpec | None = None) -> tuple[list[Matrix], list[Matrix]]:
    """The linear weights a loader quantizes and those ``skip_modules`` keeps: every block's projections
    and every expert's MLP (the LM head is :func:`head_matrix`)."""
    from vramcalc.choices import Architecture

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


def quantized_matrices(shape: ModelShape, q: QuantizationSpec | None = None) -> list[Matrix]:
    """The linear weights a loader quantizes: every block's projections and every expert's MLP, less
    ``skip_modules``; with ``lm_head: true`` the output layer too."""
    head = head_matrix(shape, q)
    return linear_groups(shape, q)[0] + ([head] if head is not None else [])


def head_matrix(shape: ModelShape, q: QuantizationSpec | None) -> Matrix | None:
    """The LM head as a quantized matrix when ``lm_head: true`` (None otherwise, or without a vocabulary head)."""
    from vramcalc.core.params import has_vocab_head

    if q is None or not q.lm_head or not has_vocab_head(shape):
        return None
    return Matrix(1, shape.vocab, shape.embed_width)


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


class QuantLayout:
    """How one quantization method stores a model's quantized linears, and what its matmuls hold beyond their
    inputs and outputs. A stack module subclasses it for each method it loads (registered in
    vramcalc/stacks/__init__.py, one row per method)."""

    def matrix_bytes(self, q: QuantizationSpec, out: int, inp: int) -> int:
        """Bytes of one quantized ``out`` x ``inp`` weight matrix."""
        raise NotImplementedError

    def describe(self, q: QuantizationSpec) -> str:
        """One line naming the method and the layout parameters in force (defaults included)."""
        raise NotImplementedError

    def stored_bytes(self, q: QuantizationSpec, out: int, inp: int, param_bytes: int) -> int:
        """Bytes of one quantized matrix in a model whose other parameters take ``param_bytes`` each (a layout
        whose scales follow the model's dtype reads it; by default :meth:`matrix_bytes`)."""
        return self.matrix_bytes(q, out, inp)

    def weights(self, shape: ModelShape, q: QuantizationSpec, n_params: int, param_bytes: int) -> WeightBytes:
        """All parameter bytes of ``shape`` with its quantized linears in this layout, the rest at ``param_bytes``
        (a tied LM head that is quantized is untied: the embedding keeps its 16-bit table)."""
        matrices = quantized_matrices(shape, q)
        n_quant = sum(m.count * m.out * m.inp for m in matrices)
        quant = sum(m.count * self.stored_bytes(q, m.out, m.inp, param_bytes) for m in matrices)
        kept = max(0, n_params - n_quant)
        head = head_matrix(shape, q)
        if head is not None and getattr(shape, "tie_embeddings", False):
            kept += head.out * head.inp
        return WeightBytes(quant + kept * param_bytes, n_quant, quant, kept, kept * param_bytes)

    def dequant_bytes(self, q: QuantizationSpec, matrices: list[Matrix], n_tokens: int, compute_bytes: int) -> int:
        """Transient bytes of a multi-token matmul on the largest of ``matrices``: by default the whole weight
        dequantized to the compute dtype (4-bit methods' matmuls over many tokens); a single token runs a fused
        GEMV kernel (none)."""
        if n_tokens <= 1 or not matrices:  # no matrix: every block linear skipped, only the LM head quantized
            return 0
        largest = max(matrices, key=lambda m: m.out * m.inp)
        return self.largest_dequant_bytes(largest, n_tokens, compute_bytes)

    def largest_dequant_bytes(self, largest: Matrix, n_tokens: int, compute_bytes: int) -> int:
        """:meth:`dequant_bytes` of the largest matrix: the whole weight at the compute dtype."""
        return largest.out * largest.inp * compute_bytes


def weight_bytes(
    shape: ModelShape, q: QuantizationSpec, n_params: int, param_bytes: int, layout: QuantLayout
) -> WeightBytes:
    """All parameter bytes of ``shape`` with its linear layers stored as ``q`` in ``layout`` (the rest at
    ``param_bytes``)."""
    return layout.weights(shape, q, n_params, param_bytes)


def dequant_buffer_bytes(
    shape: ModelShape,
    q: QuantizationSpec,
    n_tokens: int,
    compute_bytes: int,
    layout: QuantLayout,
    blocks_only: bool = False,
) -> int:
    """Transient bytes of a multi-token matmul on quantized weights (the largest layer, as ``layout`` runs
    it); ``blocks_only``: the largest of the blocks' linears, leaving out a quantized LM head."""
    matrices = linear_groups(shape, q)[0] if blocks_only else quantized_matrices(shape, q)
    return layout.dequant_bytes(q, matrices, n_tokens, compute_bytes)


def kept_line(shape: ModelShape, q: QuantizationSpec, kept_params: int, precision: str) -> str:
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
