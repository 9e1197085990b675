"""Model shape: defaults for omitted keys (each recorded as an assumption) and exact parameter counts.

Parameter counts follow the Hugging Face implementations the three families are modelled on:
``BertForMaskedLM``/``BertModel`` (encoder), ``GPT2LMHeadModel`` and ``LlamaForCausalLM`` (decoder),
``T5ForConditionalGeneration`` (encoder-decoder). Checked in tests against published totals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vramcalc.choices import Architecture, Head, Mlp, Norm, Position

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
    moe: MoeShape | None = None  # mixture of experts (vramcalc/llm/moe.py)

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


def vit_tokens(image_size: int, patch_size: int) -> int:
    """ViT sequence length: one token per patch plus the class token ((224 / 16)^2 + 1 = 197)."""
    return (image_size // patch_size) ** 2 + 1


#: Mixtral's num_experts_per_tok, the default top-k.
DEFAULT_TOP_K = 2


@dataclass(frozen=True)
class MoeShape:
    """The expert layout of a mixture-of-experts model (all fields filled)."""

    experts: int
    top_k: int
    shared: int
    expert_ffn: int
    frequency: int
    capacity_factor: float | None


def moe_layers(shape: ModelShape) -> int:
    """Number of MoE layers (0 for a dense model)."""
    return shape.layers // shape.moe.frequency if shape.moe else 0


def routed_rows(moe: MoeShape, n_tokens: int) -> int:
    """Token rows the experts of one layer process: T x k (dropless), or experts x capacity."""
    if moe.capacity_factor is None:
        return n_tokens * moe.top_k
    capacity = math.ceil(moe.capacity_factor * n_tokens * moe.top_k / moe.experts)
    return moe.experts * capacity
