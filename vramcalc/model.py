"""Model shape: defaults for omitted keys (each recorded as an assumption) and exact parameter counts.

Parameter counts follow the Hugging Face implementations the three families are modelled on:
``BertForMaskedLM``/``BertModel`` (encoder), ``GPT2LMHeadModel`` and ``LlamaForCausalLM`` (decoder),
``T5ForConditionalGeneration`` (encoder-decoder). Checked in tests against published totals.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vramcalc.errors import SpecError
from vramcalc.spec import Architecture, Head, Mlp, ModelSpec, Norm, Position, Workload

if TYPE_CHECKING:
    from vramcalc.moe import MoeShape

#: Head dimension assumed when only hidden_size is given (BERT, GPT-2, Llama all use 64 at base size).
DEFAULT_HEAD_DIM = 64
#: Dropout probability of BERT/GPT-2/T5 configs (hidden_dropout_prob, resid_pdrop, dropout_rate).
DEFAULT_DROPOUT = 0.1
#: Learned position tables: BERT ships 512 positions, GPT-2 1024 (their config.json files).
DEFAULT_POSITIONS = {Architecture.encoder: 512, Architecture.decoder: 1024, Architecture.encoder_decoder: 512}
#: T5's relative_attention_num_buckets.
DEFAULT_RELATIVE_BUCKETS = 32
#: ViT defaults (google/vit-base-patch16-224): 16-pixel patches, RGB, ImageNet-1k classes.
DEFAULT_PATCH = 16
DEFAULT_CHANNELS = 3
DEFAULT_IMAGE_CLASSES = 1000
#: BERT's token-type (segment) vocabulary.
DEFAULT_TYPE_VOCAB = 2


@dataclass(frozen=True)
class ModelShape:
    """A model with every shape field filled in."""

    architecture: Architecture
    layers: int
    decoder_layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    mlp: Mlp
    norm: Norm
    position: Position
    vocab: int
    positions: int
    tie_embeddings: bool
    head: Head
    num_labels: int
    bias: bool
    dropout: float
    type_vocab: int
    pooler: bool
    fused_qkv: bool
    relative_buckets: int
    stated_params: int | None
    patch_size: int = 0
    channels: int = 0
    moe: MoeShape | None = None  # mixture of experts (vramcalc/moe.py)

    @property
    def q_width(self) -> int:
        """Width of the query projection output (heads x head_dim)."""
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Width of each of the key and value projection outputs (kv_heads x head_dim)."""
        return self.kv_heads * self.head_dim

    @property
    def gated(self) -> bool:
        return self.mlp is Mlp.swiglu


def _pick(value: object, default: object, note: str, assumptions: list[str]) -> object:
    if value is not None:
        return value
    shown = default.value if hasattr(default, "value") else default
    assumptions.append(note.format(str(shown).lower() if isinstance(shown, bool) else shown))
    return default


def _default_architecture(spec: ModelSpec, assumptions: list[str]) -> Architecture:
    return _pick(spec.architecture, Architecture.decoder, "architecture not given: {}", assumptions)  # type: ignore[return-value]


def resolve_model(spec: ModelSpec, workload: Workload) -> tuple[ModelShape, list[str]]:
    """Fill omitted model keys with documented defaults; return the shape and the assumptions made.

    Memoised on the inputs it reads (the model section and the workload's sequence/image size), so
    sweeps over batch size do not redo it; a fresh notes list is returned each time."""
    try:
        shape, notes = _resolve_cached(spec, workload.seq_len, workload.image_size, workload.channels)
    except TypeError:  # an unhashable model section (not produced by the current spec models)
        shape, notes = _resolve(spec, workload.seq_len, workload.image_size, workload.channels)
    return shape, list(notes)


def _resolve(
    spec: ModelSpec, seq_len: int | None, image_size: int | None, channels: int | None
) -> tuple[ModelShape, tuple[str, ...]]:
    shape, notes = _resolve_uncached(spec, _SizeOnly(seq_len, image_size, channels))
    return shape, tuple(notes)


_resolve_cached = functools.lru_cache(maxsize=256)(_resolve)


@dataclass(frozen=True)
class _SizeOnly:
    """The workload fields the shape depends on."""

    seq_len: int | None
    image_size: int | None
    channels: int | None


def _resolve_uncached(spec: ModelSpec, workload: _SizeOnly) -> tuple[ModelShape, list[str]]:
    notes: list[str] = []
    arch = _default_architecture(spec, notes)
    heads = int(
        _pick(spec.heads, max(1, spec.hidden_size // DEFAULT_HEAD_DIM), "heads not given: {} (hidden_size / 64)", notes)
    )  # type: ignore[arg-type]
    mlp = _pick(spec.mlp, Mlp.gelu, "mlp not given: {}", notes)
    gated = mlp is Mlp.swiglu
    default_norm = Norm.rmsnorm if gated else Norm.layernorm
    if arch is Architecture.encoder_decoder and spec.norm is None:
        default_norm = Norm.rmsnorm
    if arch is Architecture.encoder_decoder:
        default_position = Position.relative
    elif arch is Architecture.decoder and gated:
        default_position = Position.rotary
    else:
        default_position = Position.learned
    position = _pick(spec.position, default_position, "position not given: {}", notes)
    norm = _pick(spec.norm, default_norm, "norm not given: {}", notes)
    head_dim = spec.head_dim or spec.hidden_size // heads
    ffn = _pick(spec.ffn_size, 4 * spec.hidden_size, "ffn_size not given: {} (4 x hidden_size)", notes)
    rms_family = norm is Norm.rmsnorm
    bias = _pick(
        spec.bias, not rms_family, "bias not given: {} (linear biases as in BERT/GPT-2; none in Llama/T5)", notes
    )
    vit = arch is Architecture.vit
    dropout = _pick(spec.dropout, 0.0 if gated or vit else DEFAULT_DROPOUT, "dropout not given: {}", notes)
    if vit:
        positions = vit_tokens(workload.image_size or 0, spec.patch_size or DEFAULT_PATCH)
    else:
        positions = spec.max_position_embeddings or max(DEFAULT_POSITIONS[arch], workload.seq_len or 0)
        if position is Position.learned and spec.max_position_embeddings is None:
            notes.append(f"max_position_embeddings not given: {positions}")
    shape = ModelShape(
        architecture=arch,  # type: ignore[arg-type]
        layers=spec.layers,
        decoder_layers=spec.decoder_layers or spec.layers,
        hidden=spec.hidden_size,
        heads=heads,
        kv_heads=spec.kv_heads or heads,
        head_dim=head_dim,
        ffn=ffn,  # type: ignore[arg-type]
        mlp=mlp,  # type: ignore[arg-type]
        norm=norm,  # type: ignore[arg-type]
        position=position,  # type: ignore[arg-type]
        vocab=spec.vocab_size or 0,
        positions=positions if position is Position.learned else 0,
        tie_embeddings=spec.tie_embeddings if spec.tie_embeddings is not None else not gated,
        head=spec.head or (Head.classification if vit else Head.lm),
        num_labels=spec.num_labels or (DEFAULT_IMAGE_CLASSES if vit else 2),
        bias=bias,  # type: ignore[arg-type]
        dropout=dropout,  # type: ignore[arg-type]
        type_vocab=_type_vocab(spec, arch, position),  # type: ignore[arg-type]
        pooler=bool(spec.pooler),
        fused_qkv=spec.fused_qkv
        if spec.fused_qkv is not None
        else (arch is Architecture.decoder and position is Position.learned),
        relative_buckets=spec.relative_attention_buckets or DEFAULT_RELATIVE_BUCKETS,
        stated_params=spec.params,
        patch_size=(spec.patch_size or DEFAULT_PATCH) if vit else 0,
        channels=(workload.channels or DEFAULT_CHANNELS) if vit else 0,
        moe=_resolve_moe(spec, ffn, notes),  # type: ignore[arg-type]
    )
    return (shape if vit else _with_vocab(shape, spec, notes)), notes


def _resolve_moe(spec: ModelSpec, ffn: object, notes: list[str]) -> MoeShape | None:
    from vramcalc.moe import resolve_moe

    return resolve_moe(spec, int(ffn), notes)  # type: ignore[call-overload]


def vit_tokens(image_size: int, patch_size: int) -> int:
    """ViT sequence length: one token per patch plus the class token ((224 / 16)^2 + 1 = 197)."""
    return (image_size // patch_size) ** 2 + 1


def _type_vocab(spec: ModelSpec, arch: object, position: object) -> int:
    if spec.type_vocab_size is not None:
        return spec.type_vocab_size
    return DEFAULT_TYPE_VOCAB if arch is Architecture.encoder and position is Position.learned else 0


def _with_vocab(shape: ModelShape, spec: ModelSpec, notes: list[str]) -> ModelShape:
    """Derive vocab_size from ``params`` when it is omitted (the design notes' minimal spec)."""
    if spec.vocab_size is not None:
        return shape
    from dataclasses import replace

    assert spec.params is not None  # guaranteed by ModelSpec validation
    body = count_params(replace(shape, vocab=0))
    if spec.params <= body:
        raise SpecError(
            f"model.params: {spec.params:,} is not more than the layers alone ({body:,}); check params and the shape"
        )
    per_row = shape.hidden * (1 if shape.tie_embeddings else 2) + (1 if _mlm_head(shape) else 0)
    vocab = max(0, (spec.params - body) // per_row)
    notes.append(f"vocab_size not given: {vocab:,} (params minus the layers, divided by the embedding width)")
    return replace(shape, vocab=vocab)


def _mlm_head(shape: ModelShape) -> bool:
    return shape.architecture is Architecture.encoder and shape.head is Head.lm


def _linear(n_in: int, n_out: int, bias: bool) -> int:
    return n_in * n_out + (n_out if bias else 0)


def _norm_params(shape: ModelShape) -> int:
    """LayerNorm has weight and bias; RMSNorm (Llama, T5) has a weight only."""
    return shape.hidden * (2 if shape.norm is Norm.layernorm else 1)


def attention_params(shape: ModelShape) -> int:
    """Q, K, V and output projections (K and V at kv_heads width for GQA/MQA)."""
    h, b = shape.hidden, shape.bias
    return _linear(h, shape.q_width, b) + 2 * _linear(h, shape.kv_width, b) + _linear(shape.q_width, h, b)


def mlp_params(shape: ModelShape) -> int:
    """Plain MLP: up and down; gated (SwiGLU): gate, up and down."""
    h, f, b = shape.hidden, shape.ffn, shape.bias
    up = _linear(h, f, b) * (2 if shape.gated else 1)
    return up + _linear(f, h, b)


def layer_params(shape: ModelShape, cross_attention: bool = False) -> int:
    """One transformer block: attention (+ cross-attention), MLP and its norms."""
    n_norms = 3 if cross_attention else 2
    attn = attention_params(shape) * (2 if cross_attention else 1)
    return attn + mlp_params(shape) + n_norms * _norm_params(shape)


def embedding_params(shape: ModelShape) -> int:
    """Token, learned-position and token-type tables, plus BERT's embedding LayerNorm.
    ViT: class token, position table and the patch-embedding convolution (channels x patch^2 x hidden + bias)."""
    if shape.architecture is Architecture.vit:
        return shape.hidden * (1 + shape.positions) + patch_conv_params(shape)
    emb = (shape.vocab + shape.positions + shape.type_vocab) * shape.hidden
    if shape.architecture is Architecture.encoder and shape.position is Position.learned:
        emb += _norm_params(shape)
    return emb


def head_params(shape: ModelShape) -> int:
    """Final norm, pooler, and the output head (an untied LM head adds vocab x hidden)."""
    h = shape.hidden
    total = (
        0 if shape.architecture is Architecture.encoder and shape.position is Position.learned else _norm_params(shape)
    )
    if shape.architecture is Architecture.encoder_decoder:
        total += _norm_params(shape)  # encoder and decoder stacks each end in a norm
    if shape.pooler:
        total += _linear(h, h, True)
    if shape.head is Head.lm:
        if _mlm_head(shape):
            total += _linear(h, h, True) + _norm_params(shape) + shape.vocab  # transform + LN + decoder bias
        if not shape.tie_embeddings:
            total += shape.vocab * h
    elif shape.head is Head.classification:
        total += _linear(h, shape.num_labels, True)
    return total


def relative_bias_params(shape: ModelShape) -> int:
    """T5: one relative-position bias table (buckets x heads) in the first layer of each stack."""
    if shape.position is not Position.relative:
        return 0
    stacks = 2 if shape.architecture is Architecture.encoder_decoder else 1
    return stacks * shape.relative_buckets * shape.heads


@functools.lru_cache(maxsize=512)
def count_params(shape: ModelShape) -> int:
    """Exact parameter count derived from the shape."""
    if shape.architecture is Architecture.encoder_decoder:
        body = shape.layers * layer_params(shape) + shape.decoder_layers * layer_params(shape, cross_attention=True)
    else:
        body = shape.layers * layer_params(shape)
    total = embedding_params(shape) + body + head_params(shape) + relative_bias_params(shape)
    return total + _moe_delta(shape)


def _moe_delta(shape: ModelShape) -> int:
    """Experts and routers beyond dense MLPs (vramcalc/moe.py); 0 for a dense model."""
    if shape.moe is None:
        return 0
    from vramcalc.moe import moe_param_delta

    return moe_param_delta(shape)


def patch_conv_params(shape: ModelShape) -> int:
    """ViT patch embedding: a patch x patch convolution from channels to hidden, with bias."""
    return shape.channels * shape.patch_size**2 * shape.hidden + shape.hidden if shape.patch_size else 0


def linear_weight_params(shape: ModelShape) -> int:
    """Parameters that pass through matmuls (linear weights and biases, and the LM head even when tied).

    Under autocast these are cast to 16 bits once per step and cached (embedding tables and norm
    weights are not: embedding and layer_norm are not on autocast's lower-precision list).
    """
    if shape.architecture is Architecture.encoder_decoder:
        layers = shape.layers * (attention_params(shape) + mlp_params(shape))
        layers += shape.decoder_layers * (2 * attention_params(shape) + mlp_params(shape))
    else:
        layers = shape.layers * (attention_params(shape) + mlp_params(shape))
    h = shape.hidden
    head = _linear(h, h, True) if shape.pooler else 0
    if shape.head is Head.lm:
        head += shape.vocab * h
        if _mlm_head(shape):
            head += _linear(h, h, True) + shape.vocab
    elif shape.head is Head.classification:
        head += _linear(h, shape.num_labels, True)
    return layers + head + patch_conv_params(shape) + _moe_delta(shape)  # conv2d is on autocast's 16-bit list too


@functools.lru_cache(maxsize=512)
def param_tensors(shape: ModelShape) -> tuple[tuple[int, int, int], ...]:
    """Parameter tensors as (how many, rows, columns); vectors have one column.

    Needed where optimizer state depends on tensor shapes (Adafactor's factored moments,
    8-bit AdamW's per-block scales and its 32-bit fallback for small tensors).
    """
    h, q, kv, f = shape.hidden, shape.q_width, shape.kv_width, shape.ffn
    norm = [(2 if shape.norm is Norm.layernorm else 1, h, 1)]
    attn = [(1, q, h), (2, kv, h), (1, h, q)]
    mlp = [(2 if shape.gated else 1, f, h), (1, h, f)]
    bias = [(1, q, 1), (2, kv, 1), (1, h, 1), (2 if shape.gated else 1, f, 1), (1, h, 1)] if shape.bias else []
    block = attn + mlp + bias + norm * 2
    cross_block = block + attn + (bias[:3] if shape.bias else []) + norm
    tensors: list[tuple[int, int, int]] = [(shape.layers * n, r, c) for n, r, c in block]
    if shape.architecture is Architecture.encoder_decoder:
        tensors += [(shape.decoder_layers * n, r, c) for n, r, c in cross_block]
    tensors.append((1, shape.vocab, h))
    if shape.positions:
        tensors.append((1, shape.positions, h))
    if shape.type_vocab:
        tensors.append((1, shape.type_vocab, h))
    if not shape.tie_embeddings and shape.head is Head.lm:
        tensors.append((1, shape.vocab, h))
    rest = count_params(shape) - sum(n * r * c for n, r, c in tensors)
    if rest > 0:  # norms, biases and heads outside the blocks: small, counted as vectors of width h
        tensors.append((rest // h, h, 1))
        if rest % h:
            tensors.append((1, rest % h, 1))
    return tuple(tensors)
