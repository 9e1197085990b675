"""A spec's ``model`` section resolved into a :class:`~vramcalc.core.shape.ModelShape`: defaults
filled (each noted), the vocabulary derived from ``params`` when omitted, the expert layout.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import TypeVar

from vramcalc.choices import Architecture, Head, Mlp, Mode, Norm, Optimizer, Position, Precision
from vramcalc.core.details import DEFAULT_QK_NOPE_HEAD_DIM, DEFAULT_QK_ROPE_HEAD_DIM, resolve_details
from vramcalc.core.params import count_params
from vramcalc.core.shape import (
    DEFAULT_CHANNELS,
    DEFAULT_DROPOUT,
    DEFAULT_HEAD_DIM,
    DEFAULT_IMAGE_CLASSES,
    DEFAULT_PATCH,
    DEFAULT_POSITIONS,
    DEFAULT_RELATIVE_BUCKETS,
    DEFAULT_TOP_K,
    DEFAULT_TYPE_VOCAB,
    ModelShape,
    MoeShape,
    VisionTower,
    vit_tokens,
)
from vramcalc.errors import SpecError
from vramcalc.spec.models import ModelSpec, Workload

T = TypeVar("T")


def _pick(value: T | None, default: T, note: str) -> tuple[T, list[str]]:
    """``value``, else ``default`` with the assumption ``note`` that says so."""
    if value is not None:
        return value, []
    shown = default.value if hasattr(default, "value") else default
    return default, [note.format(str(shown).lower() if isinstance(shown, bool) else shown)]


def resolve_shape(spec: ModelSpec, workload: Workload) -> tuple[ModelShape, list[str]]:
    """Fill omitted model keys with documented defaults; return the shape and the assumptions made. The
    shape's code facts are today's (a stack module replaces them: vramcalc/stacks/).

    Memoised on the inputs it reads (the model section and the workload's sequence/image size), so
    sweeps over batch size do not redo it; a fresh notes list is returned each time."""
    try:
        shape, notes = _resolve_cached(spec, workload.seq_len, workload.image_size, workload.channels)
    except TypeError:  # an unhashable model section (not produced by the current spec models)
        shape, notes = _resolve(spec, workload.seq_len, workload.image_size, workload.channels)
    return shape, list(notes)


#: Workload keys whose default fills a gap worth stating (optimizer: stated where it is chosen).
_STATED_DEFAULTS = ("mode", "precision", "attention")


def workload_notes(wl: Workload, pinned: tuple[str, ...] = ()) -> list[str]:
    """The workload defaults used (each a stated assumption), what the stack changes in them (``pinned``:
    a pinned PyTorch's, :attr:`vramcalc.core.stack.Stack.workload_notes`) and warnings on choices that run
    but are likely not what was meant: a full fine-tune in pure 16-bit."""
    notes = [f"{key} not given: {getattr(wl, key).value}" for key in _STATED_DEFAULTS if key not in wl.model_fields_set]
    train = wl.mode is Mode.train
    if train and "gradient_checkpointing" not in wl.model_fields_set:
        notes.append(f"gradient_checkpointing not given: {wl.gradient_checkpointing.value}")
    notes += pinned
    pure = {Precision.bf16: "bf16", Precision.fp16: "fp16"}.get(wl.precision)
    if train and pure and not wl.pure_meant and wl.adapter is None and wl.optimizer is not Optimizer.none:
        adam = wl.optimizer in (None, Optimizer.adam, Optimizer.adamw)
        notes.append(
            f"warning: precision {pure} trains with 16-bit weights, gradients"
            + (" and Adam states (8 B/param)" if adam else " and optimizer states")
            + f", no fp32 master weights; Hugging Face Trainer's {pure}=True is precision: amp-{pure} "
            f"(precision: pure-{pure} says pure {pure} is meant)"
        )
    return notes


def vision_notes(spec: ModelSpec, wl: Workload) -> list[str]:
    """What a multimodal model's vision tower adds: its parameters with the weights, the image tokens in the
    sequence, and what is not counted."""
    vision = spec.vision
    if vision is None:
        return []
    what = f" ({vision.encoder}, {vision.layers} layers)" if vision.encoder else f" ({vision.layers} layers)"
    notes = [f"vision tower and projector{what}: {vision.params:,} parameters, counted with the weights"]
    if wl.quantization is not None:
        notes.append("the vision tower is counted at the unquantized dtype (the quantization is the language model's)")
    if vision.cross_attention_layers and wl.cross_attention_tokens:
        notes.append(
            f"{vision.cross_attention_layers} cross-attention layers attend to and cache the images' "
            f"{wl.cross_attention_tokens:,} states per sequence; the other layers the sequence"
        )
    if wl.image_tokens:
        notes.append(
            f"seq_len {wl.seq_len or 0:,} includes {wl.image_tokens:,} image tokens; the vision tower's own "
            "activations while it encodes the images are not counted"
        )
    return notes


def _resolve(
    spec: ModelSpec, seq_len: int | None, image_size: int | None, channels: int | None
) -> tuple[ModelShape, tuple[str, ...]]:
    shape, notes = _resolve_uncached(spec, _SizeOnly(seq_len, image_size, channels))
    return shape, tuple(notes)


_resolve_cached = functools.lru_cache(maxsize=256)(_resolve)


def _check_context(spec: ModelSpec, position: Position, seq_len: int | None) -> list[str]:
    """A sequence past the positions a model was built for: an error where the positions are a learned
    table (there is no embedding for position ``max_position_embeddings``), a note otherwise."""
    limit = spec.max_position_embeddings
    if limit is None or seq_len is None or seq_len <= limit:
        return []
    if position is Position.learned:
        raise SpecError(
            f"workload.seq_len: {seq_len:,} is past model.max_position_embeddings ({limit:,}); "
            "learned position embeddings have no row for the positions beyond"
        )
    return [
        f"warning: seq_len {seq_len:,} is past max_position_embeddings {limit:,} ({position.value} positions: "
        "it runs and memory is counted as given; quality past the trained context depends on the model)"
    ]


def _check_default_positions(arch: Architecture, position: Position, seq_len: int | None) -> list[str]:
    """A learned table of unstated size grows to seq_len: say so when that is past the usual default."""
    default = DEFAULT_POSITIONS.get(arch)
    if position is Position.learned and default is not None and seq_len is not None and seq_len > default:
        return [
            f"warning: seq_len {seq_len:,} is past the usual learned position table ({default:,} rows); "
            f"counted with {seq_len:,} rows (give model.max_position_embeddings)"
        ]
    return []


def _check_mlp_default(spec: ModelSpec, heads: int, position: Position) -> list[str]:
    """The non-gated MLP default on a shape that looks Llama-like (grouped KV heads or rotary positions)."""
    if spec.mlp is not None:
        return []
    grouped = spec.kv_heads is not None and spec.kv_heads < heads
    if grouped or position is Position.rotary:
        why = "grouped KV heads" if grouped else "rotary positions"
        return [
            f"warning: mlp not given: GPT-2 style MLP assumed on a shape with {why}; Llama-like models use mlp: swiglu"
        ]
    return []


@dataclass(frozen=True)
class _SizeOnly:
    """The workload fields the shape depends on."""

    seq_len: int | None
    image_size: int | None
    channels: int | None


def _resolve_uncached(spec: ModelSpec, workload: _SizeOnly) -> tuple[ModelShape, list[str]]:
    arch, notes = _pick(spec.architecture, Architecture.decoder, "architecture not given: {}")
    # ModelSpec's validation guarantees both for every transformer (ResNet never reaches this)
    assert spec.layers is not None and spec.hidden_size is not None
    default_heads = max(1, spec.hidden_size // DEFAULT_HEAD_DIM)
    heads, said = _pick(spec.heads, default_heads, "heads not given: {} (hidden_size / 64)")
    notes += said
    mlp, said = _pick(spec.mlp, Mlp.gelu, "mlp not given: {}")
    notes += said
    gated = mlp in (Mlp.swiglu, Mlp.geglu)
    default_norm = Norm.rmsnorm if gated else Norm.layernorm
    if arch is Architecture.encoder_decoder and spec.norm is None:
        default_norm = Norm.rmsnorm
    if arch is Architecture.encoder_decoder:
        default_position = Position.relative
    elif arch is Architecture.decoder and gated:
        default_position = Position.rotary
    else:
        default_position = Position.learned
    position, said = _pick(spec.position, default_position, "position not given: {}")
    notes += said
    norm, said = _pick(spec.norm, default_norm, "norm not given: {}")
    notes += said
    head_dim = spec.head_dim or spec.hidden_size // heads
    if spec.kv_lora_rank is not None and spec.head_dim is None:  # MLA attends at qk_nope + qk_rope width
        head_dim = (spec.qk_nope_head_dim or DEFAULT_QK_NOPE_HEAD_DIM) + (
            spec.qk_rope_head_dim or DEFAULT_QK_ROPE_HEAD_DIM
        )
    ffn, said = _pick(spec.ffn_size, 4 * spec.hidden_size, "ffn_size not given: {} (4 x hidden_size)")
    notes += said
    rms_family = norm is Norm.rmsnorm
    bias, said = _pick(
        spec.bias, not rms_family, "bias not given: {} (linear biases as in BERT/GPT-2; none in Llama/T5)"
    )
    notes += said
    vit = arch is Architecture.vit
    dropout, said = _pick(spec.dropout, 0.0 if gated or vit else DEFAULT_DROPOUT, "dropout not given: {}")
    notes += said
    if vit:
        positions = vit_tokens(workload.image_size or 0, spec.patch_size or DEFAULT_PATCH)
    else:
        positions = spec.max_position_embeddings or max(DEFAULT_POSITIONS[arch], workload.seq_len or 0)
        if position is Position.learned and spec.max_position_embeddings is None:
            notes.append(f"max_position_embeddings not given: {positions}")
            notes += _check_default_positions(arch, position, workload.seq_len)
        notes += _check_context(spec, position, workload.seq_len)
    notes += _check_mlp_default(spec, heads, position)
    head = spec.head or (Head.classification if vit else Head.lm)
    moe, said = resolve_moe(spec, ffn)
    notes += said
    details, said = resolve_details(spec, arch, head)
    notes += said
    shape = ModelShape(
        architecture=arch,
        layers=spec.layers,
        decoder_layers=spec.decoder_layers or spec.layers,
        hidden=spec.hidden_size,
        heads=heads,
        kv_heads=spec.kv_heads or heads,
        head_dim=head_dim,
        ffn=ffn,
        mlp=mlp,
        norm=norm,
        position=position,
        vocab=spec.vocab_size or 0,
        positions=positions if position is Position.learned else 0,
        tie_embeddings=spec.tie_embeddings if spec.tie_embeddings is not None else not gated,
        head=head,
        num_labels=spec.num_labels or (DEFAULT_IMAGE_CLASSES if vit else 2),
        bias=bias,
        dropout=dropout,
        type_vocab=_type_vocab(spec, arch, position),
        pooler=spec.pooler if spec.pooler is not None else head is Head.pretraining,
        fused_qkv=spec.fused_qkv
        if spec.fused_qkv is not None
        else (arch is Architecture.decoder and position is Position.learned),
        relative_buckets=spec.relative_attention_buckets or DEFAULT_RELATIVE_BUCKETS,
        stated_params=spec.params,
        patch_size=(spec.patch_size or DEFAULT_PATCH) if vit else 0,
        channels=(workload.channels or DEFAULT_CHANNELS) if vit else 0,
        moe=moe,
        vision=_vision(spec),
        **details,
    )
    if vit:
        return shape, notes
    shape, said = _with_vocab(shape, spec)
    return shape, notes + said


def _vision(spec: ModelSpec) -> VisionTower | None:
    v = spec.vision
    if v is None:
        return None
    cross = (v.cross_attention_layers or 0, v.cross_attention_tokens or 0)
    return VisionTower(v.params, v.hidden_size, v.layers, v.image_tokens, *cross)


def _type_vocab(spec: ModelSpec, arch: object, position: object) -> int:
    if spec.type_vocab_size is not None:
        return spec.type_vocab_size
    return DEFAULT_TYPE_VOCAB if arch is Architecture.encoder and position is Position.learned else 0


def _with_vocab(shape: ModelShape, spec: ModelSpec) -> tuple[ModelShape, list[str]]:
    """Derive vocab_size from ``params`` when it is omitted (the design notes' minimal spec)."""
    if spec.vocab_size is not None:
        return shape, []

    assert spec.params is not None  # guaranteed by ModelSpec validation
    body = count_params(replace(shape, vocab=0))
    if spec.params <= body:
        raise SpecError(
            f"model.params: {spec.params:,} is not more than the layers alone ({body:,}); check params and the shape"
        )
    per_row = count_params(replace(shape, vocab=1)) - body
    vocab = max(0, (spec.params - body) // per_row)
    note = f"vocab_size not given: {vocab:,} (params minus the layers, divided by the embedding width)"
    return replace(shape, vocab=vocab), [note]


def resolve_moe(spec: ModelSpec, ffn: int) -> tuple[MoeShape | None, list[str]]:
    """MoE keys of the spec with defaults (each recorded); None for a dense model."""
    if spec.experts is None:
        return None, []
    notes: list[str] = []
    top_k = spec.experts_per_token
    if top_k is None:
        top_k = min(DEFAULT_TOP_K, spec.experts)
        notes.append(f"experts_per_token not given: {top_k} (Mixtral's top-2)")
    expert_ffn = spec.expert_ffn_size or ffn
    if spec.expert_ffn_size is None:
        notes.append(f"expert_ffn_size not given: {expert_ffn} (ffn_size)")
    moe = MoeShape(
        experts=spec.experts,
        top_k=top_k,
        shared=spec.shared_experts if spec.shared_experts is not None else int(spec.shared_expert_ffn_size is not None),
        expert_ffn=expert_ffn,
        frequency=spec.moe_layer_frequency or 1,
        capacity_factor=spec.capacity_factor,
        first_dense=spec.first_dense_layers or 0,
        shared_ffn=spec.shared_expert_ffn_size or 0,
        shared_gate=bool(spec.shared_expert_gate),
    )
    if spec.layers is not None and moe.frequency > spec.layers:
        raise SpecError(f"model.moe_layer_frequency: {moe.frequency} is more than layers ({spec.layers}): no MoE layer")
    return moe, notes
