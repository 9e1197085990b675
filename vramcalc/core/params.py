"""Exact parameter counts of a resolved :class:`~vramcalc.core.shape.ModelShape`, per part and as
the tensors an optimizer holds.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import TYPE_CHECKING

from vramcalc.choices import Architecture, Head, Norm, Position, QkNorm
from vramcalc.core.shape import ModelShape, moe_layers

if TYPE_CHECKING:
    pass

#: Heads that end in BERT's masked-LM prediction head (transform + LayerNorm + vocabulary decoder).
MLM_HEADS = (Head.lm, Head.pretraining)


def has_mlm_head(shape: ModelShape) -> bool:
    return shape.architecture is Architecture.encoder and shape.head in MLM_HEADS


def has_vocab_head(shape: ModelShape) -> bool:
    """A vocabulary-wide output (an LM head, or BERT's pre-training MLM decoder)."""
    return shape.head is Head.lm or shape.head is Head.pretraining


def _linear(n_in: int, n_out: int, bias: bool) -> int:
    return n_in * n_out + (n_out if bias else 0)


def _norm_vectors(shape: ModelShape) -> int:
    """Parameter vectors of one norm: LayerNorm's weight and bias, RMSNorm's (Llama, T5) weight; none where the
    norms have no weights (``norm_weights: false``, OLMo 1)."""
    if not shape.norm_weights:
        return 0
    return 2 if shape.norm is Norm.layernorm else 1


def _norm_params(shape: ModelShape, width: int = 0) -> int:
    """One norm's parameters, of ``width`` (default hidden)."""
    return (width or shape.hidden) * _norm_vectors(shape)


def attention_params(shape: ModelShape) -> int:
    """The attention block's linears: Q, K, V and output projections (K and V at kv_heads width for
    GQA/MQA; biases per projection), or multi-head latent attention's projections."""
    h = shape.hidden
    if shape.mla is not None:
        return _mla_linear_params(shape)
    qkv_b = shape.has_qkv_bias
    return (
        _linear(h, shape.q_width, qkv_b)
        + 2 * _linear(h, shape.kv_width, qkv_b)
        + _linear(shape.q_width, h, shape.has_o_bias)
    )


def _mla_linear_params(shape: ModelShape) -> int:
    """DeepSeek V2/V3 (``DeepseekV2Attention``): q_a/q_b (or q_proj), kv_a_proj_with_mqa, kv_b_proj,
    o_proj; ``attention_bias`` on q_a, kv_a and o only."""
    assert shape.mla is not None
    m, h, n, b = shape.mla, shape.hidden, shape.heads, shape.has_o_bias
    q_out = n * m.qk_head_dim
    q = _linear(h, m.q_lora_rank, b) + _linear(m.q_lora_rank, q_out, False) if m.q_lora_rank else h * q_out
    kv = _linear(h, m.latent, b) + _linear(m.kv_lora_rank, n * (m.nope_dim + m.v_dim), False)
    return q + kv + _linear(n * m.v_dim, h, b)


def attention_norm_params(shape: ModelShape) -> int:
    """Norm weights inside attention: q/k norms (per head: two of head_dim; per projection: over the q and
    k widths), MLA's q_a_layernorm and kv_a_layernorm (RMSNorm weights)."""
    if shape.mla is not None:
        return shape.mla.kv_lora_rank + shape.mla.q_lora_rank
    if shape.qk_norm is QkNorm.head:
        return 2 * _norm_params(shape, shape.head_dim)
    if shape.qk_norm is QkNorm.projection:
        return _norm_params(shape, shape.q_width) + _norm_params(shape, shape.kv_width)
    return 0


def mlp_params(shape: ModelShape) -> int:
    """Plain MLP: up and down; gated (SwiGLU, GeGLU): gate, up and down."""
    h, f, b = shape.hidden, shape.ffn, shape.has_mlp_bias
    up = _linear(h, f, b) * (2 if shape.gated else 1)
    return up + _linear(f, h, b)


def layer_params(shape: ModelShape, cross_attention: bool = False) -> int:
    """One transformer block: attention (+ cross-attention and its norm), MLP and ``norms_per_layer`` norms."""
    n_norms = shape.norms_per_layer + (1 if cross_attention else 0)
    attn = attention_params(shape) * (2 if cross_attention else 1) + attention_norm_params(shape)
    return attn + mlp_params(shape) + n_norms * _norm_params(shape)


def embedding_params(shape: ModelShape) -> int:
    """Token, learned-position and token-type tables, plus BERT's embedding LayerNorm.
    ViT: class token, position table and the patch-embedding convolution (channels x patch^2 x hidden + bias)."""
    if shape.architecture is Architecture.vit:
        return shape.hidden * (1 + shape.positions) + patch_conv_params(shape)
    h = shape.hidden
    emb = shape.vocab * shape.embed_width + (shape.positions + shape.position_offset + shape.type_vocab) * h
    if shape.embedding_dim:
        emb += shape.embedding_dim * h  # OPT's project_in (bias-free)
    if shape.architecture is Architecture.encoder and shape.position is Position.learned:
        emb += _norm_params(shape)
    if shape.embedding_norm:
        emb += _norm_params(shape)  # BLOOM's word_embeddings_layernorm
    return emb


def final_norm_params(shape: ModelShape) -> int:
    """The norm after the last block (a post-LN BERT encoder has none; encoder-decoders have one per stack)."""
    if not shape.final_norm or (shape.architecture is Architecture.encoder and shape.position is Position.learned):
        return 0
    return _norm_params(shape) * (2 if shape.architecture is Architecture.encoder_decoder else 1)


def output_head_linear_params(shape: ModelShape) -> int:
    """The head's matmul parameters: pooler, MLM transform and decoder bias, classifiers, the LM head
    weight (even when tied: it is multiplied all the same) and its bias, OPT's project_out."""
    h, b = shape.hidden, shape.head_bias
    total = _linear(h, h, True) if shape.pooler else 0
    if shape.embedding_dim and has_vocab_head(shape):
        total += h * shape.embedding_dim  # OPT's project_out (bias-free)
    if has_vocab_head(shape):
        total += shape.vocab * shape.embed_width + (shape.vocab if shape.lm_head_bias else 0)
        if has_mlm_head(shape):
            total += _linear(h, h, True) + shape.vocab  # transform dense + decoder bias
    if shape.head is Head.pretraining:
        total += _linear(h, 2, True)  # next-sentence classifier (seq_relationship)
    elif shape.head is Head.classification or shape.head is Head.token_classification:
        total += _linear(h, shape.num_labels, b)
    elif shape.head is Head.question_answering:
        total += _linear(h, shape.num_labels, b)  # qa_outputs: start and end logits (num_labels 2 by default)
    return total


def head_params(shape: ModelShape) -> int:
    """Final norm, pooler, and the output head (an untied LM head adds vocab x hidden)."""
    total = final_norm_params(shape) + output_head_linear_params(shape)
    if has_mlm_head(shape):
        total += _norm_params(shape)  # the MLM transform's LayerNorm
    if has_vocab_head(shape) and shape.tie_embeddings:
        total -= shape.vocab * shape.embed_width  # the weight is the embedding table's
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
    return total + _moe_delta(shape) + vision_params(shape)


def vision_params(shape: ModelShape) -> int:
    """A multimodal model's vision tower and projector (0 without one)."""
    return shape.vision.params if shape.vision is not None else 0


def _moe_delta(shape: ModelShape) -> int:
    """Experts and routers beyond dense MLPs (vramcalc/llm/moe.py); 0 for a dense model."""
    if shape.moe is None:
        return 0
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
    head = output_head_linear_params(shape) + (shape.embedding_dim * shape.hidden if shape.embedding_dim else 0)
    return layers + head + patch_conv_params(shape) + _moe_delta(shape)  # conv2d is on autocast's 16-bit list too


@functools.lru_cache(maxsize=512)
def param_tensors(shape: ModelShape) -> tuple[tuple[int, int, int], ...]:
    """Parameter tensors as (how many, rows, columns); vectors have one column.

    Needed where optimizer state depends on tensor shapes (Adafactor's factored moments,
    8-bit AdamW's per-block scales and its 32-bit fallback for small tensors).
    """
    h = shape.hidden
    norm = [(_norm_vectors(shape), h, 1)]
    attn = _attention_tensors(shape)
    block = attn + norm * shape.norms_per_layer + _attention_norm_tensors(shape)
    tensors: list[tuple[int, int, int]] = [(shape.layers * n, r, c) for n, r, c in block]
    dense_layers = shape.layers - moe_layers(shape)
    tensors += [(dense_layers * n, r, c) for n, r, c in _mlp_tensors(shape, shape.ffn)]
    if shape.architecture is Architecture.encoder_decoder:
        cross_block = block + attn + norm + _mlp_tensors(shape, shape.ffn)
        tensors += [(shape.decoder_layers * n, r, c) for n, r, c in cross_block]
    tensors += _moe_tensors(shape)
    tensors.append((1, shape.vocab, shape.embed_width))
    if shape.embedding_dim:
        tensors.append((1, h, shape.embedding_dim))  # project_in
    if shape.positions:
        tensors.append((1, shape.positions + shape.position_offset, h))
    if shape.type_vocab:
        tensors.append((1, shape.type_vocab, h))
    if not shape.tie_embeddings and has_vocab_head(shape):
        tensors.append((1, shape.vocab, shape.embed_width))
    if shape.vision is not None:
        tensors += shape.vision.tensors()
    rest = count_params(shape) - sum(n * r * c for n, r, c in tensors)
    if rest > 0:  # norms, biases and heads outside the blocks: small, counted as vectors of width h
        tensors.append((rest // h, h, 1))
        if rest % h:
            tensors.append((1, rest % h, 1))
    return tuple(t for t in tensors if t[0] and t[1] and t[2])


def load_order(shape: ModelShape) -> tuple[tuple[tuple[int, ...], int], ...]:
    """The parameter tensors in the order ``from_pretrained`` / ``.to("cuda")`` places them, as groups
    (element counts of each tensor, how many times the group repeats): embeddings, each block's attention,
    norms and MLP, the head. Experts are one tensor per projection and layer (transformers 5 stores them
    so), or one per expert and projection under an older pinned release. Norms and biases not placed
    are listed last as hidden-wide vectors."""
    h = shape.hidden
    if shape.architecture is Architecture.vit:  # the patch convolution's weight and bias, class token, positions
        first = [patch_conv_params(shape) - h, h, h, h * shape.positions]
    else:  # token table, OPT's project_in, position and token-type tables
        first = [shape.vocab * shape.embed_width, h * shape.embedding_dim]
        first += [n * h for n in (shape.positions + shape.position_offset, shape.type_vocab)]
    attn = _attention_tensors(shape)
    if shape.fused_qkv and shape.mla is None:
        qkv, bias = shape.q_width + 2 * shape.kv_width, shape.has_qkv_bias
        attn = [(1, qkv, h), (1, qkv * bias, 1), (1, h, shape.q_width), (1, h * shape.has_o_bias, 1)]
    norms = [(_norm_vectors(shape), h, 1)] * shape.norms_per_layer
    block = attn + _attention_norm_tensors(shape) + norms
    per_expert = shape.code.experts_per_module
    layers = [
        (block + _load_mlp(shape), shape.layers - moe_layers(shape)),
        (block + _moe_layer_tensors(shape, per_expert), moe_layers(shape)),
    ]
    if shape.architecture is Architecture.encoder_decoder:
        layers.append((block + attn + norms[:1] + _mlp_tensors(shape, shape.ffn), shape.decoder_layers))
    last = [h * h] * (shape.pooler + has_mlm_head(shape))  # pooler, MLM transform
    if has_vocab_head(shape) and not shape.tie_embeddings:
        last.append(shape.vocab * shape.embed_width)
    if shape.head is Head.classification or shape.head is Head.token_classification:
        last.append(shape.num_labels * h)
    groups = [(tuple(first), 1)]
    groups += [(tuple(r * c for n, r, c in layer for _ in range(n)), count) for layer, count in layers]
    groups.append((tuple(last), 1))
    if shape.vision is not None:  # loaded before the language model (the tower comes first in the files)
        groups[:0] = [((r * c,), n) for n, r, c in shape.vision.tensors()]
    rest = count_params(shape) - sum(sum(tensors) * count for tensors, count in groups)
    groups += [((h,), max(rest, 0) // h), ((max(rest, 0) % h,), 1)]
    return tuple((t, count) for tensors, count in groups if count and (t := tuple(n for n in tensors if n)))


def _load_mlp(shape: ModelShape) -> list[tuple[int, int, int]]:
    """A block's MLP tensors as loaded: a fused QKV model with a gated MLP (Phi-3) fuses gate and up too."""
    mlp = _mlp_tensors(shape, shape.ffn)
    return [(1, 2 * shape.ffn, shape.hidden), *mlp[1:]] if shape.fused_qkv and shape.gated else mlp


def _moe_layer_tensors(shape: ModelShape, per_expert: bool) -> list[tuple[int, int, int]]:
    """One MoE layer's router, experts (``per_expert``: each expert's own projections; else one tensor per
    projection for all experts), shared experts and their gate."""
    m = shape.moe
    if m is None:
        return []
    if per_expert:
        experts = [(m.experts * n, r, c) for n, r, c in _mlp_tensors(shape, m.expert_ffn)]
    else:
        experts = [(1, m.experts * n * r, c) for n, r, c in _mlp_tensors(shape, m.expert_ffn)]
    out = [(1, m.experts, shape.hidden), *experts]
    if m.shared:
        out += _mlp_tensors(shape, m.shared * m.shared_width)
    return out + [(1, shape.hidden * m.shared_gate, 1)]


def _attention_tensors(shape: ModelShape) -> list[tuple[int, int, int]]:
    h, q, kv = shape.hidden, shape.q_width, shape.kv_width
    if shape.mla is not None:
        m, n, b = shape.mla, shape.heads, shape.has_o_bias
        q_out = n * m.qk_head_dim
        qs = [(1, m.q_lora_rank, h), (1, q_out, m.q_lora_rank)] if m.q_lora_rank else [(1, q_out, h)]
        out = qs + [(1, m.latent, h), (1, n * (m.nope_dim + m.v_dim), m.kv_lora_rank), (1, h, n * m.v_dim)]
        if b:
            out += [(1, m.q_lora_rank, 1), (1, m.latent, 1), (1, h, 1)]
        return out
    out = [(1, q, h), (2, kv, h), (1, h, q)]
    if shape.has_qkv_bias:
        out += [(1, q, 1), (2, kv, 1)]
    if shape.has_o_bias:
        out.append((1, h, 1))
    return out


def _attention_norm_tensors(shape: ModelShape) -> list[tuple[int, int, int]]:
    n = _norm_vectors(shape)
    if shape.mla is not None:
        return [(1, shape.mla.kv_lora_rank, 1), (1, shape.mla.q_lora_rank, 1)]
    if shape.qk_norm is QkNorm.head:
        return [(2 * n, shape.head_dim, 1)]
    if shape.qk_norm is QkNorm.projection:
        return [(n, shape.q_width, 1), (n, shape.kv_width, 1)]
    return []


def _mlp_tensors(shape: ModelShape, ffn: int, bias: bool | None = None) -> list[tuple[int, int, int]]:
    h, n_up = shape.hidden, 2 if shape.gated else 1
    out = [(n_up, ffn, h), (1, h, ffn)]
    if shape.has_mlp_bias if bias is None else bias:
        out += [(n_up, ffn, 1), (1, h, 1)]
    return out


def _moe_tensors(shape: ModelShape) -> list[tuple[int, int, int]]:
    """Experts, router, shared experts and their gate of every MoE layer (as :func:`moe_param_delta`)."""
    if shape.moe is None:
        return []
    m, n = shape.moe, moe_layers(shape)
    per_layer = [(m.experts * k, r, c) for k, r, c in _mlp_tensors(shape, m.expert_ffn)] + [
        (1, m.experts, shape.hidden)
    ]
    if m.shared:
        per_layer += _mlp_tensors(shape, m.shared * m.shared_width)
    if m.shared_gate:
        per_layer.append((1, 1, shape.hidden))
    return [(n * k, r, c) for k, r, c in per_layer]


def expert_params(shape: ModelShape) -> int:
    """One expert: an MLP of the model's kind at ``expert_ffn`` width (SwiGLU: 3 x hidden x ffn)."""
    assert shape.moe is not None
    return mlp_params(replace(shape, ffn=shape.moe.expert_ffn))


def moe_param_delta(shape: ModelShape) -> int:
    """Parameters a MoE model has beyond the same model with dense MLPs in every layer.

    Per MoE layer: experts x expert MLP + router (hidden x experts, no bias) + the shared experts (one MLP
    of shared x their width, as DeepSeek's ``shared_experts`` and Qwen2-MoE's ``shared_expert``) and
    Qwen2-MoE's ``shared_expert_gate`` (hidden -> 1, no bias) - the dense MLP it replaces.
    """
    if shape.moe is None:
        return 0
    m = shape.moe
    per_layer = m.experts * expert_params(shape) + shape.hidden * m.experts
    if m.shared:
        per_layer += mlp_params(replace(shape, ffn=m.shared * m.shared_width))
    if m.shared_gate:
        per_layer += shape.hidden
    return moe_layers(shape) * (per_layer - mlp_params(shape))


def active_params(shape: ModelShape, n_params: int) -> int:
    """Parameters a token passes through: all but the (experts - top_k) unused experts of each MoE layer.

    Mixtral-8x7B: 46.7B total, 12.9B active (Mistral AI, "Mixtral of experts", 2023/2024).
    """
    if shape.moe is None:
        return n_params
    unused = moe_layers(shape) * (shape.moe.experts - shape.moe.top_k) * expert_params(shape)
    if unused < n_params:
        return n_params - unused
    # ``n_params`` is not the modelled layers' count (a checkpoint's files holding fewer weights than its
    # config's experts): the share of the modelled parameters a token passes through, of the files' count
    modelled = count_params(replace(shape, stated_params=None))
    return max(1, n_params * max(0, modelled - unused) // modelled)
