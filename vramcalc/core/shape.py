"""Model shape: defaults for omitted keys (each recorded as an assumption) and exact parameter counts.

Parameter counts follow the Hugging Face implementations the three families are modelled on:
``BertForMaskedLM``/``BertModel`` (encoder), ``GPT2LMHeadModel`` and ``LlamaForCausalLM`` (decoder),
``T5ForConditionalGeneration`` (encoder-decoder). Checked in tests against published totals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vramcalc.choices import Architecture, Head, Mlp, Norm, Position, QkNorm
from vramcalc.core.code import TODAY, ModelCode

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
    # Per-projection biases: None means "as ``bias``" (attention_bias, qkv_bias, mlp_bias of the spec).
    attention_bias: bool | None = None
    qkv_bias: bool | None = None
    mlp_bias: bool | None = None
    lm_head_bias: bool = False
    head_bias: bool = True
    qk_norm: QkNorm = QkNorm.none
    norms_per_layer: int = 2
    parallel_block: bool = False
    final_norm: bool = True
    norm_weights: bool = True  # False: the norms have no weight or bias
    embedding_norm: bool = False
    attention_softcap: bool = False  # tanh soft-capping of the attention scores (eager attention keeps it)
    relative_attention_span: int = 0  # DeBERTa: relative positions each side (0: no disentangled attention)
    relative_attention_terms: int = 0  # DeBERTa: content-to-position and position-to-content terms (0 to 2)
    logit_softcap: bool = False  # tanh soft-capping of the output logits
    position_offset: int = 0
    embedding_dim: int = 0  # 0: the token embedding is hidden wide
    sliding_window: int = 0  # 0: global attention in every layer
    sliding_window_pattern: int = 0  # N: layers N, 2N, ... are global; 0: every layer slides
    full_attention_layers: int = 0  # N: the first N layers are global, the rest slide (Qwen2's max_window_layers)
    mla: MlaShape | None = None  # multi-head latent attention (DeepSeek V2/V3)
    vision: VisionTower | None = None  # a multimodal model's vision tower and projector
    #: How the code that runs the model allocates beyond its shape (a library release's facts; vramcalc/stacks/)
    code: ModelCode = TODAY

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
        """Gate, up and down projections (SwiGLU, GeGLU)."""
        return self.mlp is Mlp.swiglu or self.mlp is Mlp.geglu

    @property
    def has_qkv_bias(self) -> bool:
        """Biases on q, k and v: ``qkv_bias``, else ``attention_bias``, else ``bias``."""
        if self.qkv_bias is not None:
            return self.qkv_bias
        return self.bias if self.attention_bias is None else self.attention_bias

    @property
    def has_o_bias(self) -> bool:
        """A bias on the attention output projection: ``attention_bias``, else ``bias``."""
        return self.bias if self.attention_bias is None else self.attention_bias

    @property
    def has_mlp_bias(self) -> bool:
        return self.bias if self.mlp_bias is None else self.mlp_bias

    @property
    def embed_width(self) -> int:
        """Width of the token embedding (``embedding_dim``, else hidden)."""
        return self.embedding_dim or self.hidden

    def sliding_layers(self, layers: int) -> int:
        """How many of ``layers`` attend over the last ``sliding_window`` tokens only."""
        if not self.sliding_window:
            return 0
        if self.full_attention_layers:
            return max(0, layers - self.full_attention_layers)
        if not self.sliding_window_pattern:
            return layers
        return layers - layers // self.sliding_window_pattern


@dataclass(frozen=True)
class MlaShape:
    """Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434; transformers ``DeepseekV2Attention``).

    q: ``q_proj`` (hidden -> heads x (nope + rope)), or with ``q_lora_rank``: ``q_a_proj`` (hidden -> q_lora_rank),
    ``q_a_layernorm``, ``q_b_proj`` (q_lora_rank -> heads x (nope + rope)). kv: ``kv_a_proj_with_mqa``
    (hidden -> kv_lora_rank + rope), ``kv_a_layernorm`` (kv_lora_rank), ``kv_b_proj`` (kv_lora_rank ->
    heads x (nope + v)); ``o_proj`` (heads x v -> hidden).
    """

    kv_lora_rank: int
    q_lora_rank: int  # 0: q is not compressed
    rope_dim: int
    nope_dim: int
    v_dim: int

    @property
    def qk_head_dim(self) -> int:
        return self.nope_dim + self.rope_dim

    @property
    def latent(self) -> int:
        """What one token caches per layer: the compressed KV latent plus the shared rotary key."""
        return self.kv_lora_rank + self.rope_dim


@dataclass(frozen=True)
class VisionTower:
    """A multimodal model's vision tower and projector, as its weights: ``params`` (exact, from the family's
    ``vision_config``: vramcalc/spec/hf_vision.py), listed as ``hidden`` x ``hidden`` matrices for the
    per-tensor rules (8-bit optimizer blocks, ZeRO-3's persistence threshold, the largest tensor), and the
    language-model tokens one image becomes. Where the images enter by cross-attention, ``cross_layers`` of the
    decoder's layers attend to ``cross_tokens`` states per image (and cache those, not the sequence)."""

    params: int
    hidden: int
    layers: int
    image_tokens: int
    cross_layers: int = 0  # decoder layers that attend to the images' states instead of the sequence
    cross_tokens: int = 0  # one image's states those layers attend to

    def tensors(self) -> list[tuple[int, int, int]]:
        """(how many, rows, columns): the largest square matrices the parameters fill, then vectors."""
        square = self.hidden * self.hidden
        matrices, rest = divmod(self.params, square)
        vectors, last = divmod(rest, self.hidden)
        return [
            t for t in ((matrices, self.hidden, self.hidden), (vectors, self.hidden, 1), (1, last, 1)) if t[0] and t[1]
        ]


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
    first_dense: int = 0  # the first n layers keep a dense MLP (DeepSeek first_k_dense_replace)
    shared_ffn: int = 0  # width of each shared expert (0: expert_ffn)
    shared_gate: bool = False  # Qwen2-MoE's hidden -> 1 shared_expert_gate

    @property
    def shared_width(self) -> int:
        return self.shared_ffn or self.expert_ffn


def moe_layers(shape: ModelShape) -> int:
    """Number of MoE layers (0 for a dense model): layer i (0-based) is one when i >= first_dense and
    (i + 1) % frequency == 0 (Qwen2-MoE's decoder_sparse_step, DeepSeek's first_k_dense_replace)."""
    if not shape.moe:
        return 0
    m = shape.moe
    return shape.layers // m.frequency - m.first_dense // m.frequency


def expert_rows(shape: ModelShape, n_tokens: int) -> int:
    """Token rows one MoE layer's experts process in transformers' classes: every token for every expert where the
    model's code runs them all (``ModelCode.experts_see_all_tokens``, Llama 4), else :func:`routed_rows`."""
    assert shape.moe is not None
    if shape.code.experts_see_all_tokens:
        return shape.moe.experts * n_tokens
    return routed_rows(shape.moe, n_tokens)


def routed_rows(moe: MoeShape, n_tokens: int) -> int:
    """Token rows the experts of one layer process: T x k (dropless), or experts x capacity."""
    if moe.capacity_factor is None:
        return n_tokens * moe.top_k
    capacity = math.ceil(moe.capacity_factor * n_tokens * moe.top_k / moe.experts)
    return moe.experts * capacity
