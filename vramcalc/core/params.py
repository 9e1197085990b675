"""Exact parameter counts of a resolved :class:`~vramcalc.core.shape.ModelShape`, per part and as
the tensors an optimizer holds.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import TYPE_CHECKING

from vramcalc.choices import Architecture, Head, Norm, Position
from vramcalc.core.shape import ModelShape, moe_layers

if TYPE_CHECKING:
    pass


def has_mlm_head(shape: ModelShape) -> bool:
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
        if has_mlm_head(shape):
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
    h = shape.hidden
    head = _linear(h, h, True) if shape.pooler else 0
    if shape.head is Head.lm:
        head += shape.vocab * h
        if has_mlm_head(shape):
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


def expert_params(shape: ModelShape) -> int:
    """One expert: an MLP of the model's kind at ``expert_ffn`` width (SwiGLU: 3 x hidden x ffn)."""
    assert shape.moe is not None
    return mlp_params(replace(shape, ffn=shape.moe.expert_ffn))


def moe_param_delta(shape: ModelShape) -> int:
    """Parameters a MoE model has beyond the same model with dense MLPs in every layer.

    Per MoE layer: (experts + shared) x expert MLP + router (hidden x experts, no bias) - dense MLP.
    """
    if shape.moe is None:
        return 0
    m = shape.moe
    per_layer = (m.experts + m.shared) * expert_params(shape) + shape.hidden * m.experts
    return moe_layers(shape) * (per_layer - mlp_params(shape))


def active_params(shape: ModelShape, n_params: int) -> int:
    """Parameters a token passes through: all but the (experts - top_k) unused experts of each MoE layer.

    Mixtral-8x7B: 46.7B total, 12.9B active (Mistral AI, "Mixtral of experts", 2023/2024).
    """
    if shape.moe is None:
        return n_params
    return n_params - moe_layers(shape) * (shape.moe.experts - shape.moe.top_k) * expert_params(shape)
