"""llama.cpp GGUF files: the type llama.cpp gives each tensor of a model, and the bytes that makes.

A GGUF "file type" (``llama-quantize ... Q4_K_M``) is a recipe, not one type: ``llama_tensor_get_type``
(``src/llama-quant.cpp``) starts every 2-D weight at the file type's default ggml type
(``llama_ftype_get_default_type``: Q4_K for Q4_K_S/M, Q3_K for Q3_K_S/M/L, ...) and changes some by
tensor and layer. The rules modelled here, for the file types vramcalc names:

* ``output.weight``, or ``token_embd.weight`` when the output is tied to it: Q6_K, or Q8_0 when the
  default is Q8_0 or the row width is not a multiple of the default's block.
* ``attn_v`` (and a fused ``attn_qkv`` or MLA ``attn_kv_b``), counted in file order as the
  i-th of n: Q2_K -> Q4_K when ``n_gqa = heads / kv_heads >= 4``, else Q3_K; Q3_K_M -> Q5_K for i < 2, else
  Q4_K; Q3_K_L -> Q5_K; Q4_K_M and Q5_K_M -> Q6_K where ``use_more_bits(i, n)`` (i < n/8, i >= 7n/8, or
  (i - n/8) % 3 == 2); Q4_K_S -> Q5_K for i < 4. An 80-layer model (llama.cpp's 70B type) moves a
  Q3_K/Q4_K ``attn_v`` to Q5_K; a model of exactly 8 experts keeps ``attn_v`` and ``attn_k`` at Q8_0.
* ``ffn_down`` of layer i of n: Q2_K -> Q3_K; Q3_K_M -> Q5_K for i < n/16, else Q4_K; Q3_K_L -> Q5_K;
  Q4_K_M and Q5_K_M -> Q6_K where ``use_more_bits(i, n)``; Q4_K_S -> Q5_K for i < n/8; Q4_0 and Q5_0 made
  with an importance matrix -> Q4_1 / Q5_1 for i < n/8.
* ``attn_output``: Q2_K -> Q3_K, Q3_K_M -> Q4_K, Q3_K_L -> Q5_K; with 8 experts, Q5_K for Q2_K, Q3_K_S,
  Q3_K_M, Q4_K_S and Q4_K_M.
* A tensor whose row (``ne[0]``, the input width) is not a multiple of its type's block falls back
  (``tensor_type_fallback``): Q2_K/Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, then F16.
* Not quantized: 1-D tensors (norms, biases) stay F32, as ``convert_hf_to_gguf.py`` writes them, and so
  does the MoE router ``ffn_gate_inp``. F16/BF16 files store every 2-D weight in 16 bits.

A tensor of ``rows`` x ``cols`` weights stores ``rows x cols / block`` blocks (ggml ``ggml_row_size``);
block sizes and bytes are ggml's (``ggml/src/ggml-common.h``): Q4_0 18 B / 32, Q4_1 20 / 32,
Q5_0 22 / 32, Q5_1 24 / 32, Q8_0 34 / 32, Q2_K 84 / 256, Q3_K 110 / 256, Q4_K 144 / 256, Q5_K 176 / 256,
Q6_K 210 / 256. The file adds its header (metadata and vocabulary, a few MB) and pads each tensor to
32 bytes; neither is weight memory, so neither is counted.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vramcalc.choices import Architecture, QuantMethod
from vramcalc.errors import SpecError
from vramcalc.llm.quantization import QuantLayout, WeightBytes
from vramcalc.spec.llm import QuantizationSpec

if TYPE_CHECKING:
    from vramcalc.core.shape import ModelShape


@dataclass(frozen=True)
class GgmlType:
    """A ggml storage type: ``nbytes`` per block of ``block`` weights."""

    name: str
    block: int
    nbytes: int


TYPES = {
    t.name: t
    for t in (
        GgmlType("f32", 1, 4),
        GgmlType("f16", 1, 2),
        GgmlType("bf16", 1, 2),
        GgmlType("q4_0", 32, 18),
        GgmlType("q4_1", 32, 20),
        GgmlType("q5_0", 32, 22),
        GgmlType("q5_1", 32, 24),
        GgmlType("q8_0", 32, 34),
        GgmlType("q2_K", 256, 84),
        GgmlType("q3_K", 256, 110),
        GgmlType("q4_K", 256, 144),
        GgmlType("q5_K", 256, 176),
        GgmlType("q6_K", 256, 210),
    )
}
QUANTIZED = frozenset(n for n, t in TYPES.items() if t.block > 1)

#: File type -> its default tensor type (``llama_ftype_get_default_type``).
DEFAULT_TYPE: dict[str, str] = {
    "q4_0": "q4_0", "q4_1": "q4_1", "q5_0": "q5_0", "q5_1": "q5_1", "q8_0": "q8_0",
    "q2_k": "q2_K", "q3_k_s": "q3_K", "q3_k_m": "q3_K", "q3_k_l": "q3_K",
    "q4_k_s": "q4_K", "q4_k_m": "q4_K", "q5_k_s": "q5_K", "q5_k_m": "q5_K", "q6_k": "q6_K",
    "f16": "f16", "bf16": "bf16",
}  # fmt: skip
#: The quantization methods that name a GGUF file type.
GGUF_METHODS = frozenset(m for m in QuantMethod if m.value in DEFAULT_TYPE)

#: ``tensor_type_fallback``: the type used when a row is not a multiple of the chosen type's block.
FALLBACK = {"q2_K": "q4_0", "q3_K": "q4_0", "q4_K": "q5_0", "q5_K": "q5_1", "q6_K": "q8_0"}


def ggml_name(spec_name: str | None) -> str | None:
    """A spec's type name (``q6_k``) as ggml spells it (``q6_K``)."""
    if spec_name is None:
        return None
    return spec_name[:-1] + "K" if spec_name.endswith("_k") else spec_name


def row_bytes(type_name: str, cols: int) -> int:
    """Bytes of one row of ``cols`` weights (ggml ``ggml_row_size``: whole blocks only)."""
    t = TYPES[type_name]
    if cols % t.block:
        raise ValueError(f"{cols} weights are not whole {t.name} blocks of {t.block}")
    return cols // t.block * t.nbytes


@dataclass(frozen=True)
class Tensor:
    """One GGUF tensor: ``rows`` rows of ``cols`` weights (``ne[0]`` = cols); ``layer`` -1 outside blocks."""

    name: str
    category: str  # token_embd, output, attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down, other
    cols: int
    rows: int
    layer: int = -1
    quantize: bool = True  # False: kept as converted (F32)

    @property
    def params(self) -> int:
        return self.rows * self.cols


def _attention(shape: ModelShape, i: int) -> list[Tensor]:
    h, blk = shape.hidden, f"blk.{i}."
    mla = shape.mla
    if mla is not None:
        q_out = shape.heads * mla.qk_head_dim
        if mla.q_lora_rank:
            q_proj = [
                Tensor(blk + "attn_q_a", "other", h, mla.q_lora_rank, i),
                Tensor(blk + "attn_q_b", "other", mla.q_lora_rank, q_out, i),
            ]
        else:
            q_proj = [Tensor(blk + "attn_q", "attn_q", h, q_out, i)]
        return [
            *q_proj,
            Tensor(blk + "attn_kv_a_mqa", "other", h, mla.latent, i),
            Tensor(blk + "attn_kv_b", "attn_v", mla.kv_lora_rank, shape.heads * (mla.nope_dim + mla.v_dim), i),
            Tensor(blk + "attn_output", "attn_output", shape.heads * mla.v_dim, h, i),
        ]
    q, kv = shape.q_width, shape.kv_width
    if shape.fused_qkv:
        qkv = [Tensor(blk + "attn_qkv", "attn_v", h, q + 2 * kv, i)]
    else:
        qkv = [
            Tensor(blk + "attn_q", "attn_q", h, q, i),
            Tensor(blk + "attn_k", "attn_k", h, kv, i),
            Tensor(blk + "attn_v", "attn_v", h, kv, i),
        ]
    return [*qkv, Tensor(blk + "attn_output", "attn_output", q, h, i)]


def _mlp(shape: ModelShape, i: int, suffix: str, width: int, count: int) -> list[Tensor]:
    h, blk = shape.hidden, f"blk.{i}."
    rows = width * count  # ffn_*_exps: [cols, width, experts] -> width x experts rows
    up = [Tensor(f"{blk}ffn_up{suffix}", "ffn_up", h, rows, i)]
    if shape.gated:
        up.insert(0, Tensor(f"{blk}ffn_gate{suffix}", "ffn_gate", h, rows, i))
    return [*up, Tensor(f"{blk}ffn_down{suffix}", "ffn_down", width, h * count, i)]


def model_tensors(shape: ModelShape, n_params: int) -> list[Tensor]:
    """The weights of a GGUF file of a decoder-only model, in file order (llama.cpp's tensor names).

    Parameters the 2-D tensors do not cover (norms, biases, the MoE router, learned positions) are one
    trailing ``other`` entry kept at F32, as llama.cpp's converter stores 1-D tensors.
    """
    if shape.architecture is not Architecture.decoder:
        raise SpecError(
            "workload.quantization: GGUF file types are modelled for decoder-only models "
            f"(llama.cpp's language models), not {shape.architecture.value}"
        )
    tensors = [Tensor("token_embd", "token_embd", shape.embed_width, shape.vocab)]
    for i in range(shape.layers):
        tensors += _block(shape, i)
    if not shape.tie_embeddings:
        tensors.append(Tensor("output", "output", shape.hidden, shape.vocab))
    rest = n_params - sum(t.params for t in tensors)
    if rest > 0:
        tensors.append(Tensor("norms, biases and other 1-D tensors", "other", 1, rest, quantize=False))
    return tensors


def model_kinds(shape: ModelShape, n_params: int) -> list[tuple[Tensor, int]]:
    """:func:`model_tensors` grouped: each kind of tensor once, with how many of it the file holds. The
    blocks of one group of :func:`layer_kinds` get the same types, so one block stands for all of them
    (its tensors named after the group's first block); the work does not grow with the layers."""
    if shape.architecture is not Architecture.decoder:
        model_tensors(shape, n_params)  # the one error line
    kinds = [(Tensor("token_embd", "token_embd", shape.embed_width, shape.vocab), 1)]
    for first, count in layer_kinds(shape):
        kinds += [(t, count) for t in _block(shape, first)]
    if not shape.tie_embeddings:
        kinds.append((Tensor("output", "output", shape.hidden, shape.vocab), 1))
    rest = n_params - sum(t.params * count for t, count in kinds)
    if rest > 0:
        kinds.append((Tensor("norms, biases and other 1-D tensors", "other", 1, rest, quantize=False), 1))
    return kinds


def _block(shape: ModelShape, i: int) -> list[Tensor]:
    """The 2-D tensors of block ``i``: attention, then its MLP or (a layer with experts) router and experts."""
    from vramcalc.core.shape import moe_layers

    moe = shape.moe
    tensors = _attention(shape, i)
    if moe is not None and moe_layers(shape) and i >= moe.first_dense and (i + 1) % moe.frequency == 0:
        tensors.append(Tensor(f"blk.{i}.ffn_gate_inp", "other", shape.hidden, moe.experts, i, quantize=False))
        tensors += _mlp(shape, i, "_exps", moe.expert_ffn, moe.experts)
        if moe.shared:
            tensors += _mlp(shape, i, "_shexp", moe.shared_width, moe.shared)
    else:
        tensors += _mlp(shape, i, "", shape.ffn, 1)
    return tensors


def _counted(lo: int, hi: int, conditions: list[tuple[int, int]]) -> tuple[int, int]:
    """(how many, the first) of the layers ``lo <= i < hi`` with ``i % modulus == residue`` for every
    (modulus, residue) of ``conditions`` (two at most: each residue class of the first is tried against the
    second, so the work is the first modulus, never the range)."""
    start, step = lo, 1
    for modulus, residue in conditions:
        for k in range(modulus):  # the first i >= start, i = start + j * step, with i % modulus == residue
            if (start + k * step) % modulus == residue:
                start += k * step
                break
        else:
            return 0, -1
        step = step * modulus // math.gcd(step, modulus)
    if start >= hi:
        return 0, -1
    return (hi - 1 - start) // step + 1, start


def layer_kinds(shape: ModelShape) -> list[tuple[int, int]]:
    """The model's blocks grouped by the types llama.cpp gives their tensors: (the first block of a group,
    how many blocks it holds). A block's types depend on its index ``i`` of ``n`` only through ``i < 2``,
    ``i < 4``, ``i < n // 16``, ``i < n // 8``, :func:`use_more_bits` (``i >= 7n/8`` and ``(i - n // 8) % 3``)
    and whether it holds experts (``i >= first_dense`` and ``(i + 1) % frequency``); between the thresholds
    the groups are residue classes, counted, not listed."""
    from vramcalc.core.shape import moe_layers

    n, moe = shape.layers, shape.moe
    experts = moe is not None and moe_layers(shape) > 0
    cuts = {0, n, 2, 4, n // 16, n // 8, 7 * n // 8}
    if experts and moe is not None:
        cuts.add(moe.first_dense)
    bounds = sorted(c for c in cuts if 0 <= c <= n)
    out: list[tuple[int, int]] = []
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        if lo >= hi:
            continue
        thirds = [[(3, (n // 8 + r) % 3)] for r in range(3)] if n // 8 <= lo < 7 * n // 8 else [[]]
        for third in thirds:
            if experts and moe is not None and lo >= moe.first_dense:
                sparse = third + [(moe.frequency, moe.frequency - 1)]
                count, first = _counted(lo, hi, sparse)
                total, first_any = _counted(lo, hi, third)
                if count:
                    out.append((first, count))
                if total - count:
                    out.append((_first_dense_in(lo, hi, third, moe.frequency), total - count))
                continue
            count, first = _counted(lo, hi, third)
            if count:
                out.append((first, count))
    return out


def _first_dense_in(lo: int, hi: int, third: list[tuple[int, int]], frequency: int) -> int:
    """The first layer of ``lo <= i < hi`` in the residue class ``third`` without experts ((i + 1) % frequency
    != 0): among the class's first ``frequency`` members one is (``frequency`` > 1; a dense layer exists)."""
    _, i = _counted(lo, hi, third)
    step = 3 if third else 1
    while (i + 1) % frequency == 0:
        i += step
    return i


def use_more_bits(i: int, n: int) -> bool:
    """llama.cpp's layers that get more bits: the first and last eighth, and every third in between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


@dataclass(frozen=True)
class _Model:
    layers: int
    n_gqa: int
    experts: int
    tied: bool
    n_attention_wv: int
    imatrix: bool


def _output_type(ftype: str, default: str, cols: int) -> str:
    if cols % TYPES[default].block or default == "q8_0":
        return "q8_0"
    return "q6_K"


def _attn_v(ftype: str, new: str, i: int, m: _Model) -> str:
    if ftype == "q2_k":
        new = "q4_K" if m.n_gqa >= 4 else "q3_K"
    elif ftype == "q3_k_m":
        new = "q5_K" if i < 2 else "q4_K"
    elif ftype == "q3_k_l":
        new = "q5_K"
    elif ftype in ("q4_k_m", "q5_k_m") and use_more_bits(i, m.n_attention_wv):
        new = "q6_K"
    elif ftype == "q4_k_s" and i < 4:
        new = "q5_K"
    if m.layers == 80 and new in ("q3_K", "q4_K"):  # llama.cpp's LLM_TYPE_70B
        new = "q5_K"
    return "q8_0" if m.experts == 8 else new


def _ffn_down(ftype: str, new: str, i: int, m: _Model) -> str:
    n = m.layers
    if ftype == "q2_k":
        return "q3_K"
    if ftype == "q3_k_m":
        return "q5_K" if i < n // 16 else "q4_K"
    if ftype == "q3_k_l":
        return "q5_K"
    if ftype in ("q4_k_m", "q5_k_m"):
        return "q6_K" if use_more_bits(i, n) else new
    if ftype == "q4_k_s" and i < n // 8:
        return "q5_K"
    if ftype in ("q4_0", "q5_0") and m.imatrix and i < n // 8:
        return "q4_1" if ftype == "q4_0" else "q5_1"
    return new


def _attn_output(ftype: str, new: str, m: _Model) -> str:
    if m.experts == 8:
        return "q5_K" if ftype in ("q2_k", "q3_k_s", "q3_k_m", "q4_k_s", "q4_k_m") else new
    return {"q2_k": "q3_K", "q3_k_m": "q4_K", "q3_k_l": "q5_K"}.get(ftype, new)


def _fallback(new: str, cols: int) -> str:
    if cols % TYPES[new].block == 0:
        return new
    new = FALLBACK.get(new, "f16")
    return new if cols % TYPES[new].block == 0 else "f16"


@dataclass(frozen=True)
class Overrides:
    """``llama-quantize`` options that change the mix (``--output-tensor-type``, ``--token-embedding-type``,
    ``--imatrix``, ``--pure``)."""

    output_type: str | None = None
    embedding_type: str | None = None
    imatrix: bool = False
    pure: bool = False


def _model(shape: ModelShape, counted: list[tuple[Tensor, int]], opts: Overrides) -> _Model:
    """What llama.cpp's type rules read of the whole model, from its tensors and how many of each there are."""
    return _Model(
        layers=shape.layers,
        n_gqa=shape.heads // shape.kv_heads if shape.kv_heads else 0,
        experts=shape.moe.experts if shape.moe is not None else 0,
        tied=not any(t.category == "output" for t, _ in counted),
        n_attention_wv=sum(count for t, count in counted if t.category == "attn_v"),
        imatrix=opts.imatrix,
    )


def tensor_types(
    shape: ModelShape, ftype: str, n_params: int, opts: Overrides | None = None
) -> list[tuple[Tensor, str]]:
    """Each tensor of the model with the ggml type llama.cpp stores it in for file type ``ftype``."""
    opts = opts or Overrides()
    default = DEFAULT_TYPE[ftype]
    tensors = model_tensors(shape, n_params)
    m = _model(shape, [(t, 1) for t in tensors], opts)
    out: list[tuple[Tensor, str]] = []
    i_wv = 0
    for t in tensors:
        out.append((t, _choose(t, ftype, default, i_wv, m, opts)))
        i_wv += t.category == "attn_v"
    return out


def kind_types(
    shape: ModelShape, ftype: str, n_params: int, opts: Overrides | None = None
) -> list[tuple[Tensor, str, int]]:
    """:func:`tensor_types` grouped (:func:`model_kinds`): each kind of tensor with its ggml type and how
    many of it the file holds. Each block holds one ``attn_v`` (or fused ``attn_qkv``, MLA ``attn_kv_b``),
    so the i-th ``attn_v`` of the file is block i's."""
    opts = opts or Overrides()
    default = DEFAULT_TYPE[ftype]
    kinds = model_kinds(shape, n_params)
    m = _model(shape, kinds, opts)
    return [(t, _choose(t, ftype, default, t.layer, m, opts), count) for t, count in kinds]


def _choose(t: Tensor, ftype: str, default: str, i_wv: int, m: _Model, opts: Overrides) -> str:
    if not t.quantize:
        return "f32"
    is_output = t.category == "output" or (m.tied and t.category == "token_embd")
    if t.category == "token_embd" and opts.embedding_type:
        return opts.embedding_type
    if t.category == "output" and opts.output_type:
        return opts.output_type
    if default not in QUANTIZED:
        return default
    new = default
    if opts.pure:
        pass
    elif is_output:
        new = opts.output_type or _output_type(ftype, default, t.cols)
    elif t.category == "attn_v":
        new = _attn_v(ftype, new, i_wv, m)
    elif t.category == "attn_k" and m.experts == 8:
        new = "q8_0"
    elif t.category == "ffn_down":
        new = _ffn_down(ftype, new, t.layer, m)
    elif t.category == "attn_output":
        new = _attn_output(ftype, new, m)
    return _fallback(new, t.cols)


@dataclass(frozen=True)
class TypeShare:
    """The tensors of one ggml type in a file."""

    tensors: int
    params: int
    bytes: int


@dataclass(frozen=True)
class GgufWeights:
    """The weight bytes of a GGUF file, in total and per ggml type."""

    ftype: str
    total_bytes: int
    by_type: dict[str, TypeShare]

    def part(self, quantized: bool) -> tuple[int, int]:
        """(params, bytes) of the quantized types, or of the F32/F16/BF16 ones."""
        shares = [s for n, s in self.by_type.items() if (n in QUANTIZED) == quantized]
        return sum(s.params for s in shares), sum(s.bytes for s in shares)

    def describe(self) -> str:
        """One line: the mix, largest share first (``q4_K 193 tensors 3.71 GB, ...``)."""
        parts = sorted(self.by_type.items(), key=lambda kv: -kv[1].bytes)
        mix = ", ".join(f"{n} {_size(s.bytes)} ({_count(s)})" for n, s in parts)
        return f"{self.ftype}: GGUF, llama.cpp's per-tensor types: {mix}"


def _size(nbytes: int) -> str:
    return f"{nbytes / 1e9:.2f} GB" if nbytes >= 10**7 else f"{nbytes / 1e6:.2f} MB"


def _count(share: TypeShare) -> str:
    if not share.tensors:
        return "norms and biases"
    return f"{share.tensors} tensor{'s' if share.tensors != 1 else ''}"


def file_weights(shape: ModelShape, ftype: str, n_params: int, opts: Overrides | None = None) -> GgufWeights:
    """Weight bytes of the model stored as GGUF file type ``ftype`` (``q4_k_m``, ``q8_0``, ``f16``, ...)."""
    if ftype not in DEFAULT_TYPE:
        raise ValueError(f"not a GGUF file type: {ftype}")
    count: Counter[str] = Counter()
    params: Counter[str] = Counter()
    nbytes: Counter[str] = Counter()
    for t, type_name, n in kind_types(shape, ftype, n_params, opts):
        count[type_name] += n if t.cols > 1 else 0
        params[type_name] += t.params * n
        nbytes[type_name] += t.rows * row_bytes(type_name, t.cols) * n
    shares = {n: TypeShare(count[n], params[n], nbytes[n]) for n in nbytes}
    return GgufWeights(ftype, sum(nbytes.values()), shares)


def spec_weights(shape: ModelShape, q: QuantizationSpec, n_params: int) -> GgufWeights:
    """The GGUF file's weights, per ggml type, for a spec's GGUF quantization (its output and token-embedding
    type overrides and importance matrix included)."""
    opts = Overrides(
        output_type=ggml_name(q.output_tensor_type),
        embedding_type=ggml_name(q.token_embedding_type),
        imatrix=bool(q.imatrix),
    )
    return file_weights(shape, q.method.value, n_params, opts)


class GgufLayout(QuantLayout):
    """A GGUF file: every tensor of the model has its own type (:func:`tensor_types`), so the weights are
    counted per model, not per matrix. A matmul over many tokens dequantizes the weight (llama.cpp's cuBLAS
    path)."""

    def matrix_bytes(self, q: QuantizationSpec, out: int, inp: int) -> int:
        raise NotImplementedError("a GGUF file's tensors are counted per model (weights)")

    def describe(self, q: QuantizationSpec) -> str:
        return f"{q.method.value}: GGUF, llama.cpp's per-tensor types (llama_tensor_get_type)"

    def weights(self, shape: ModelShape, q: QuantizationSpec, n_params: int, param_bytes: int) -> WeightBytes:
        gw = spec_weights(shape, q, n_params)
        (qp, qb), (kp, kb) = gw.part(quantized=True), gw.part(quantized=False)
        return WeightBytes(gw.total_bytes, qp, qb, kp, kb)


GGUF = GgufLayout()
