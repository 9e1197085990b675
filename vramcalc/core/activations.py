"""Activation bytes of transformer steps: what autograd saves, and the transient peaks.

Counted tensor by tensor from what the Hugging Face implementations save for backward (BERT, GPT-2,
Llama, T5 in transformers 5), in the spirit of Korthikanti et al. 2022 ("Reducing Activation
Recomputation in Large Transformer Models", arXiv 2205.05198, section 4.1), but with the dtypes
PyTorch really uses: autocast keeps norms, softmax and the loss in fp32 and casts every activation
entering a matmul to 16 bits (a saved copy per linear call); HF's RMSNorm upcasts to fp32; dropout
saves a 1-byte mask per element; fused SDPA kernels keep only output and logsumexp (no seq^2 term).
The allocator-level truth these formulas were checked against is ``shared/calibration/tracer``.

Sweeps run these formulas once on a symbolic batch size (:mod:`vramcalc.core.symbolic`), so a maximum of
batch-dependent values is written ``maximum(...)``, never ``max(...)`` (which would compare them).

Notation: ``T`` tokens (batch x sequence), ``h`` hidden, ``f`` ffn width; ``e``, ``c``, ``r`` bytes of the
parameter, compute (2 under autocast) and residual dtypes (4 under autocast: parameters and norms stay fp32).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from vramcalc.choices import Architecture, Attention, Head, Mlp, Norm, Position, QkNorm
from vramcalc.core import t5
from vramcalc.core.code import ModelCode
from vramcalc.core.shape import ModelShape
from vramcalc.core.symbolic import maximum
from vramcalc.units import FP32 as FP32
from vramcalc.units import MASK as MASK
from vramcalc.units import TOKEN_ID as TOKEN_ID
from vramcalc.units import GiB

#: LayerNorm saves mean and rstd (fp32, one per token each); RMSNorm saves rstd only.
LAYERNORM_STATS = 2 * FP32
RMSNORM_STATS = FP32


@dataclass(frozen=True)
class Dtypes:
    """Byte widths of one precision mode."""

    param: int
    compute: int
    residual: int
    amp: bool


@dataclass(frozen=True)
class Tokens:
    """Batch shape: ``batch`` sequences of ``seq`` tokens (``target`` for a decoder stack)."""

    batch: int
    seq: int
    target: int

    @property
    def encoder(self) -> int:
        return self.batch * self.seq

    @property
    def decoder(self) -> int:
        return self.batch * self.target


def norm_saved_bytes(shape: ModelShape, n_tokens: int, dt: Dtypes) -> int:
    """One norm: its saved input and statistics, plus (pure precision) its output, saved by the next linear.

    LayerNorm saves its input (the residual sum) and fp32 mean/rstd. HF's RMSNorm computes in fp32: it saves
    an fp32 copy of its input, the normalised tensor cast back (``e``), and rstd; under autocast the normalised
    tensor stays fp32 and the output is not saved (each linear saves its own 16-bit copy, counted there). Code
    that multiplies the weight into the fp32 normalised tensor (``ModelCode.rmsnorm_normed_fp32``) keeps that one
    in fp32 in pure precision too. On a
    PyTorch whose ``mean`` keeps its input (:func:`rmsnorm_square_bytes`), the squared input too."""
    h = shape.hidden
    if shape.norm is Norm.layernorm:
        saved_input = FP32 if shape.code.layernorm_fp32 else dt.residual
        per_token = h * saved_input + LAYERNORM_STATS + (0 if dt.amp else h * dt.compute)
    else:
        normed = FP32 if dt.amp or shape.code.rmsnorm_normed_fp32 else dt.compute
        per_token = h * FP32 + RMSNORM_STATS + h * normed + (0 if dt.amp else h * dt.compute)
        per_token += t5.norm_input_bytes(shape, dt.residual) + rmsnorm_square_bytes(shape, dt)
    return n_tokens * per_token


def block_norms_saved_bytes(shape: ModelShape, n_tokens: int, dt: Dtypes) -> int:
    """The ``norms_per_layer`` norms of one block. A parallel block's two norms read (and save) the same block
    input. A sandwich block's four (Gemma 2 and 3: a norm before and after attention and the MLP) give two outputs to
    linears; the two after the sublayers feed the residual sum, which saves nothing, so their outputs are not
    counted (in pure precision, where :func:`norm_saved_bytes` counts one)."""
    total = shape.norms_per_layer * norm_saved_bytes(shape, n_tokens, dt)
    if shape.parallel_block and shape.norms_per_layer == 2:
        total -= n_tokens * shape.hidden * dt.residual
    if shape.norms_per_layer == 4 and not dt.amp:
        total -= 2 * n_tokens * shape.hidden * dt.compute
    return total


def rmsnorm_square_bytes(shape: ModelShape, dt: Dtypes) -> int:
    """Per token, the squared input an RMSNorm's ``mean`` keeps for backward where the model's code says so
    (``ModelCode.rmsnorm_square_saved``: PyTorch before 2.2): fp32 for transformers, which squares its fp32
    copy, else at the residual dtype."""
    code = shape.code
    if shape.norm is not Norm.rmsnorm or not code.rmsnorm_square_saved:
        return 0
    return shape.hidden * (FP32 if code.rmsnorm_square_fp32 else dt.residual)


def input_copy_bytes(n_tokens: int, width: int, n_linears: int, dt: Dtypes) -> int:
    """Autocast casts a linear's activation input to 16 bits at every call and saves the copy."""
    return n_tokens * width * n_linears * dt.compute if dt.amp else 0


def _softmax_upcast(shape: ModelShape) -> bool:
    """Llama, T5, ViT, OPT, GPT-NeoX, StarCoder2 and GPT-BigCode compute the eager softmax in fp32 and cast back
    (transformers 5's shared ``eager_attention_forward``: ``softmax(..., dtype=torch.float32).to(query.dtype)``);
    BERT and GPT-2 take the softmax in the activation dtype (checked with the tracer on bf16 and fp16 models)."""
    return (
        (shape.norm is Norm.rmsnorm and not t5.is_t5(shape))
        or shape.architecture is Architecture.vit
        or shape.code.shared_eager_attention
        or shape.code.eager_softmax_upcast
        or shape.code.eager_qk_fp32
    )


def attention_dropout(shape: ModelShape) -> float:
    """Dropout on the attention probabilities: the model's dropout, except for the families whose
    ``attention_dropout`` is 0.0 while their hidden dropout is not (``ModelCode.shared_eager_attention``)."""
    return 0.0 if shape.code.shared_eager_attention else shape.dropout


#: Largest head dimension of PyTorch's flash-attention kernel.
FLASH_MAX_HEAD_DIM = 256


def sdpa_kernel(shape: ModelShape, dt: Dtypes) -> str:
    """The kernel ``scaled_dot_product_attention`` picks on CUDA, in PyTorch's priority order:
    flash (fp16/bf16, head_dim <= 256), memory-efficient (also fp32, but not for grouped K/V),
    else the math fallback, which materialises heads x seq^2 like eager attention.
    """
    if dt.compute != FP32 and shape.head_dim <= FLASH_MAX_HEAD_DIM:
        return "flash"
    if shape.kv_heads == shape.heads:
        return "efficient"
    return "math"


def attention_kernel(shape: ModelShape, dt: Dtypes, attention: Attention) -> str:
    """The kernel the attention runs: ``eager``; SDPA's choice (:func:`sdpa_kernel`); or, for ``attention:
    flash``, a flash kernel of the library the model's code names (``shape.code.flash``), which keeps what
    SDPA's flash kernel keeps (Q, K, V at the K/V width, the output, an fp32 logsumexp per head and query)."""
    if attention is Attention.flash:
        return "flash"
    return sdpa_kernel(shape, dt) if attention is Attention.sdpa else "eager"


def kernel_bytes(shape: ModelShape, dt: Dtypes, attention: Attention) -> int:
    """Bytes per element of the Q, K, V and output a fused kernel saves: the compute dtype's, or for ``attention:
    flash`` the (narrower) dtype its library runs in, to which wider inputs are cast first."""
    flash = shape.code.flash
    if attention is Attention.flash and flash is not None:
        return min(dt.compute, flash.element_bytes)
    return dt.compute


def scores_note(
    shape: ModelShape, tk: Tokens, dt: Dtypes, attention: Attention, flash_runs: bool = False
) -> str | None:
    """Why the attention materialises its heads x seq^2 scores, and what they cost at this length, or None
    when a fused kernel keeps them on chip: eager attention, or SDPA's math fallback (:func:`sdpa_kernel`:
    fp32 inputs or a head wider than the flash kernel takes, with grouped K/V, which the memory-efficient
    kernel does not take). ``flash_runs``: ``attention: flash`` would run this spec, and is suggested."""
    kernel = attention_kernel(shape, dt, attention)
    if kernel in ("flash", "efficient") or not isinstance(tk.batch, int) or shape.heads == 0:
        return None
    scores = tk.batch * shape.heads * tk.seq * tk.seq * dt.compute
    size = f"{scores / GiB:,.2f} GiB per layer at batch {tk.batch:,} x {tk.seq:,} tokens"
    hint = "; attention: flash (flash-attn 2) keeps them on chip" if flash_runs else ""
    if kernel == "eager":
        return f"attention: eager materialises the heads x seq^2 scores: {size}{hint}"
    cause = "fp32 inputs" if dt.compute == FP32 else f"head_dim {shape.head_dim} > {FLASH_MAX_HEAD_DIM}"
    return (
        f"attention: sdpa runs its math kernel ({cause}, and grouped K/V, which the memory-efficient kernel "
        f"does not take), which materialises the heads x seq^2 scores: {size}{hint}"
    )


def score_bytes_per_element(shape: ModelShape, dt: Dtypes, training: bool) -> int:
    """Eager attention: bytes saved per element of the heads x seq_q x seq_kv score matrix."""
    code = shape.code
    if code.eager_clamp:
        return clamped_score_bytes(code.eager_softmax_fp32, code.clamp_attention_dropout, dt.compute, dt.amp, training)
    dropout = training and attention_dropout(shape) > 0
    # soft-capping (Gemma 2: scores / cap, tanh, * cap) saves the tanh output, at the scores' dtype
    softcap = dt.compute if training and shape.attention_softcap else 0
    if dt.amp:
        # softmax runs in fp32 (autocast fp32 list); the matmul with V saves a 16-bit copy
        return softcap + FP32 + dt.compute + (MASK if dropout else 0)
    if _softmax_upcast(shape) and dt.compute != FP32:
        # fp32 softmax saved; its cast back is saved by the matmul only when no dropout follows
        # (dropout keeps its mask, and its own output goes to the matmul)
        return softcap + FP32 + ((dt.compute + MASK) if dropout else dt.compute)
    return softcap + dt.compute + ((dt.compute + MASK) if dropout else 0)


def clamped_score_bytes(softmax_fp32: bool, attention_dropout: float, compute: int, amp: bool, training: bool) -> int:
    """Eager attention that clamps the masked scores (``ModelCode.eager_clamp``; OPT before transformers 4.49):
    ``torch.max`` saves the masked scores (compute dtype); the softmax saves its output (fp32 when it upcasts
    fp16 scores or runs under autocast); the matmul with V saves the probabilities at the compute dtype (the
    softmax output itself when nothing casts or drops it); dropout, when its p > 0, adds its mask."""
    c = compute
    upcast = softmax_fp32 or amp
    dropout = training and attention_dropout > 0
    probs = c if upcast or dropout else 0
    return c + (FP32 if upcast else c) + probs + (MASK if dropout else 0)


def returned_cache_bytes(
    code: ModelCode, fused_qkv: bool, rotary: bool, q_width: int, kv_width: int, compute: int
) -> tuple[int, int]:
    """Per token and layer, code that caches the attention's own K/V (``ModelCode.cache_copied`` false;
    transformers before 4.56): the bytes the cache keeps alive, and the part of them that is a tensor of its
    own (not among those saved for backward). V is a view of the fused QKV output (all of it kept) or its own
    projection's; K a view of that output too, unless the rotary embedding made a new tensor (fp32 where
    ``fp32_rotary_key``, whose 16-bit cast is what the attention saves)."""
    value = (q_width + 2 * kv_width) * compute if fused_qkv else kv_width * compute
    if code.fp32_rotary_key:
        return value + kv_width * FP32, kv_width * FP32
    return value + (kv_width * compute if rotary or not fused_qkv else 0), 0


def attention_saved_bytes(
    shape: ModelShape, tk: Tokens, q_tokens: int, kv_tokens: int, dt: Dtypes, attention: Attention, cross: bool
) -> int:
    """Self- or cross-attention block: Q, K, V (K/V at kv_heads width), the core and its output.

    SDPA flash / memory-efficient kernels save output + logsumexp (fp32, one per head and query); so does
    ``attention: flash``, at the width of the dtype its library runs in (:func:`kernel_bytes`).
    Eager attention saves softmax (and dropout) outputs over heads x seq_q x seq_kv, and K/V
    repeated to all heads for GQA; its permuted context is copied before the output projection. Code that
    expands grouped K/V before SDPA (``ModelCode.kv_expanded``) has the fused kernels save them so too.
    """
    seq_q = q_tokens // tk.batch
    seq_kv = kv_tokens // tk.batch
    kernel = attention_kernel(shape, dt, attention)
    k = kernel_bytes(shape, dt, attention)
    fused = kernel in ("flash", "efficient") and not (shape.code.kv_expanded and not cross)
    kv_width = shape.kv_width if fused else shape.q_width
    qkv = (q_tokens * shape.q_width + 2 * kv_tokens * kv_width) * k
    if cross:
        copies = input_copy_bytes(q_tokens, shape.hidden, 1, dt) + input_copy_bytes(kv_tokens, shape.hidden, 2, dt)
    else:
        copies = input_copy_bytes(q_tokens, shape.hidden, 1 if shape.fused_qkv else 3, dt)
    output = q_tokens * shape.q_width * k
    flash = shape.code.flash if attention is Attention.flash else None
    if kernel == "flash" and (shape.code.head_major_query if flash is None else flash.output_copied):
        output *= 2  # the head-major kernel output, and its copy for the output projection
    if not cross:
        qkv += _attention_extra_saved(shape, q_tokens, dt)
        if fused and shape.code.kv_copies_beside_fused_qkv:
            qkv += 2 * q_tokens * shape.kv_width * k  # the cache's copies, which the fused kernel saves
        if shape.code.rotary_cat_saved(sdpa=kernel != "eager"):
            qkv += q_tokens * (shape.q_width + shape.kv_width) * dt.compute
    scores = tk.batch * shape.heads * seq_q * seq_kv
    if kernel in ("flash", "efficient"):
        core = tk.batch * shape.heads * seq_q * FP32 + t5.sdpa_bias_bytes(shape, seq_q, seq_kv, dt.compute, cross)
        if shape.code.sdpa_mask_saved and not cross and attention is Attention.sdpa:
            core += tk.batch * seq_q * seq_kv * dt.compute  # the mask converted to the query's dtype
    elif kernel == "math":  # softmax output kept at the compute dtype; K/V expanded to all heads
        core = scores * (dt.compute + ((dt.compute + MASK) if attention_dropout(shape) > 0 else 0))
    else:
        core = scores * score_bytes_per_element(shape, dt, training=True)
        if shape.code.eager_qk_fp32 and not cross and dt.compute != FP32:
            core += q_tokens * (shape.q_width + kv_width) * FP32  # the matmul's fp32 Q and K
        if not cross:
            core += disentangled_saved_bytes(shape, tk.batch, seq_q, dt.compute)
    return qkv + copies + output + core


def disentangled_transient_bytes(shape: ModelShape, batch: int, seq: int, compute: int) -> int:
    """DeBERTa's disentangled attention, one no-grad layer at its widest: the content scores, and per score term
    its gathered scores and the running sum, while the last term's raw product with the position side (heads x
    seq x 2 span) is gathered, or its scaled copy made; the int64 relative positions and each term's clamped
    index (seq x seq); both repeated position projections (the keys are shared)."""
    terms, span = shape.relative_attention_terms, shape.relative_attention_span
    if not terms:
        return 0
    square = batch * shape.heads * seq * seq * compute
    raw = batch * shape.heads * seq * 2 * span * compute
    widest = maximum(2 * terms * square + raw, (2 * terms + 1) * square)
    return widest + (1 + terms) * seq * seq * 8 + 2 * batch * 2 * span * shape.q_width * compute


def disentangled_saved_bytes(shape: ModelShape, batch: int, seq: int, compute: int) -> int:
    """DeBERTa's disentangled attention (transformers' ``DisentangledSelfAttention``, read at 4.42 and 5.25), one
    layer, training: per score term (content-to-position, position-to-content), ``torch.gather`` keeps the raw
    product of the queries (keys) with the relative-position keys (queries), heads x seq x 2 span, and its int64
    index of seq x seq positions; the product keeps its repeated position keys (queries), 2 span x hidden per
    sequence. The content scores' matmul keeps its own scaled copy of K."""
    terms, span = shape.relative_attention_terms, shape.relative_attention_span
    if not terms:
        return 0
    raw = batch * shape.heads * seq * 2 * span * compute
    index = seq * seq * 8
    position_side = batch * 2 * span * shape.q_width * compute
    return terms * (raw + index + position_side) + batch * seq * shape.kv_width * compute


def _attention_extra_saved(shape: ModelShape, n_tokens: int, dt: Dtypes) -> int:
    """q/k norms: the fp32 input copy and the output of each (as HF's RMSNorm; statistics are small).
    MLA: the RMSNorms of the compressed KV latent and, with q_lora_rank, of the query latent, each as HF's
    (``DeepseekV2RMSNorm``): its fp32 input copy, its normalised 16-bit cast and its output (the input of
    kv_b_proj or q_b_proj), and rstd (traced: transformers 5.25); the decompressed K/V and the attention at
    qk_nope + qk_rope head width are Q/K/V above (head_dim is that width for MLA)."""
    if shape.mla is not None:
        m = shape.mla
        latents = m.kv_lora_rank + m.q_lora_rank
        return n_tokens * (latents * (FP32 + 2 * dt.compute) + RMSNORM_STATS * (2 if m.q_lora_rank else 1))
    if shape.qk_norm is QkNorm.none:
        return 0
    if shape.qk_norm is QkNorm.l2:  # Llama 4: x.float() is kept; its 16-bit output is the Q or K counted above
        return n_tokens * (shape.q_width + shape.kv_width) * FP32
    normed = FP32 if shape.code.rmsnorm_normed_fp32 else dt.compute
    return n_tokens * (shape.q_width + shape.kv_width) * (FP32 + normed)


def mlp_saved_bytes(shape: ModelShape, n_tokens: int, dt: Dtypes) -> int:
    """MLP block. gelu: fc1 output and gelu output. gelu_tanh (GPT-2's Python gelu_new): five
    ffn-wide tensors (input, 0.5x, tanh, 1 + tanh, product); under autocast pow/tanh run in fp32.
    relu: its output (T5 adds an inner dropout: mask + output). swiglu: gate, silu, up, product.
    """
    f, c = shape.ffn, dt.compute
    t5_gated = t5.gated_mlp_per_element(shape, c, dt.amp)
    if t5_gated is not None:
        inner = f * t5_gated
    elif shape.mlp is Mlp.gelu:
        inner = 2 * f * c
    elif shape.mlp is Mlp.gelu_tanh:
        inner = (3 * FP32 + 2 * c) * f if dt.amp else 5 * f * c
    elif shape.mlp is Mlp.relu:
        inner_dropout = shape.architecture is Architecture.encoder_decoder and shape.dropout > 0
        inner = f * (c + (MASK + c if inner_dropout else 0))
    else:
        inner = 4 * f * c
    n_up = 2 if shape.gated else 1
    return n_tokens * inner + input_copy_bytes(n_tokens, shape.hidden, n_up, dt)


def dropout_mask_bytes(shape: ModelShape, n_tokens: int, n_sites: int) -> int:
    """Residual-branch dropout masks (1 byte per element) when dropout is on."""
    return n_tokens * shape.hidden * MASK * n_sites if shape.dropout > 0 else 0


def layer_saved_bytes(shape: ModelShape, tk: Tokens, dt: Dtypes, attention: Attention, decoder: bool = False) -> int:
    """One block of the stack, training mode, no recomputation."""
    enc_dec_decoder = decoder and shape.architecture is Architecture.encoder_decoder
    n_tokens = tk.decoder if decoder else tk.encoder
    total = block_norms_saved_bytes(shape, n_tokens, dt)
    total += attention_saved_bytes(shape, tk, n_tokens, n_tokens, dt, attention, cross=False)
    total += mlp_saved_bytes(shape, n_tokens, dt)
    total += dropout_mask_bytes(shape, n_tokens, 2)
    if enc_dec_decoder:
        total += norm_saved_bytes(shape, n_tokens, dt)
        total += attention_saved_bytes(shape, tk, n_tokens, tk.encoder, dt, attention, cross=True)
        total += dropout_mask_bytes(shape, n_tokens, 1)
    return total


def layer_replicated_bytes(shape: ModelShape, tk: Tokens, dt: Dtypes, decoder: bool = False) -> int:
    """The part of :func:`layer_saved_bytes` that Megatron-style tensor parallelism does not split:
    hidden-wide tensors every TP rank holds in full. Korthikanti et al. 2022 ("Reducing
    Activation Recomputation in Large Transformer Models", Table 2) count ``10 sbh`` of them for GPT:
    both norms' inputs and outputs (the outputs are the column-parallel linears' inputs), and the two
    residual dropout masks. Here also the norm statistics and, under autocast, the 16-bit copies of the
    column-parallel linears' inputs (QKV, MLP up/gate; cross-attention Q and K/V). Sequence parallelism
    splits exactly this part along the sequence. Depends on the hidden size and tokens only.
    """
    n_tokens = tk.decoder if decoder else tk.encoder
    h = shape.hidden
    total = block_norms_saved_bytes(shape, n_tokens, dt) + dropout_mask_bytes(shape, n_tokens, 2)
    total += input_copy_bytes(n_tokens, h, 1 if shape.fused_qkv else 3, dt)
    total += input_copy_bytes(n_tokens, h, 2 if shape.gated else 1, dt)
    if decoder and shape.architecture is Architecture.encoder_decoder:
        total += norm_saved_bytes(shape, n_tokens, dt) + dropout_mask_bytes(shape, n_tokens, 1)
        total += input_copy_bytes(n_tokens, h, 1, dt) + input_copy_bytes(tk.encoder, h, 2, dt)
    return total


def layer_saved_split(
    shape: ModelShape, tk: Tokens, dt: Dtypes, attention: Attention, decoder: bool = False
) -> tuple[int, int]:
    """(TP-split, replicated) bytes of one block, for ``shape`` as one tensor-parallel rank sees it
    (heads, kv_heads and ffn_size already divided by the TP degree). Their sum is
    :func:`layer_saved_bytes` of that shape: Q, K, V, the attention core and output and the
    ffn-wide MLP tensors are split (Korthikanti et al. Table 2: ``24 sbh / t + 5 a s^2 b / t``);
    :func:`layer_replicated_bytes` is not."""
    replicated = layer_replicated_bytes(shape, tk, dt, decoder)
    return layer_saved_bytes(shape, tk, dt, attention, decoder) - replicated, replicated


def embedding_saved_bytes(shape: ModelShape, tk: Tokens, dt: Dtypes, attention: Attention | None = None) -> int:
    """Embedding stage. BERT (post-LN) saves its embedding-LayerNorm input and the dropout output
    that enters layer 0; pre-LN models only add a dropout mask (their output is layer 0's norm input).
    Rotary models keep cos/sin tables (fp32, seq x head_dim each); T5 its position biases
    (:func:`vramcalc.core.t5.relative_bias_bytes`; ``attention`` None: kept as under checkpointing).
    """
    h = shape.hidden
    total = dropout_mask_bytes(shape, tk.encoder, 1)
    if shape.architecture is Architecture.encoder and shape.position is Position.learned:
        total += tk.encoder * (h * dt.residual + LAYERNORM_STATS + (0 if dt.amp else h * dt.compute))
    if shape.architecture is Architecture.encoder_decoder:
        total += dropout_mask_bytes(shape, tk.decoder, 1)
    if shape.position is Position.rotary:
        total += 2 * tk.seq * shape.head_dim * FP32
    if shape.position is Position.relative:
        kept = "checkpoint" if attention is None else ("eager" if attention is Attention.eager else "sdpa")
        total += t5.relative_bias_bytes(shape, tk.seq, tk.target, (dt.param, dt.compute), kept)
    return total


def head_saved_bytes(shape: ModelShape, tk: Tokens, dt: Dtypes) -> int:
    """Final norm(s) and the output head up to (not including) the logits."""
    h = shape.hidden
    n_tokens = tk.decoder if shape.architecture is Architecture.encoder_decoder else tk.encoder
    total = 0
    post_ln_encoder = shape.architecture is Architecture.encoder and shape.position is Position.learned
    if not post_ln_encoder:
        total += norm_saved_bytes(shape, n_tokens, dt)
    if shape.architecture is Architecture.encoder_decoder:
        # encoder final norm + dropout: its output feeds every cross-attention K/V projection
        total += norm_saved_bytes(shape, tk.encoder, dt) + dropout_mask_bytes(shape, tk.encoder, 1)
        total += dropout_mask_bytes(shape, tk.decoder, 1)
        if shape.tie_embeddings:  # T5 rescales by d_model^-0.5 before the tied LM head
            total += n_tokens * h * dt.compute if not dt.amp else 0
    if shape.head is not Head.lm:
        return total
    if shape.architecture is Architecture.encoder:
        # MLM transform: dense -> gelu -> LayerNorm -> decoder
        pure = 3 * h * dt.compute + LAYERNORM_STATS
        amp = (dt.compute + dt.compute + FP32 + dt.compute) * h + LAYERNORM_STATS
        total += n_tokens * (amp if dt.amp else pure)
    else:
        total += input_copy_bytes(n_tokens, h, 1, dt)
    return total


@dataclass(frozen=True)
class LossBytes:
    """Vocabulary-sized tensors of the loss: saved until backward, transient at the forward end,
    and the gradients alive at the start of backward."""

    saved: int
    forward_transient: int
    backward_temporaries: int


def loss_bytes(shape: ModelShape, tk: Tokens, dt: Dtypes) -> LossBytes:
    """Logits and cross-entropy. HF causal LMs upcast logits to fp32 before the loss
    (``ForCausalLMLoss``: ``logits.float()``): log-softmax output and both gradients are fp32.
    BERT and T5 call CrossEntropyLoss on the logits as they are; under autocast cross_entropy runs
    in fp32 (a saved fp32 copy), its log-softmax output is saved at 16 bits.
    """
    if shape.head is not Head.lm:
        return LossBytes(0, 0, 0)
    n = (tk.decoder if shape.architecture is Architecture.encoder_decoder else tk.encoder) * shape.vocab
    logits = n * dt.compute
    if shape.architecture is Architecture.decoder:
        upcast = n * FP32 if dt.compute != FP32 else 0
        softcap = logits if shape.logit_softcap else 0  # Gemma 2's tanh output, saved for its backward
        return LossBytes(n * FP32 + softcap, logits + upcast, 2 * n * FP32)
    if dt.amp:
        return LossBytes(n * (FP32 + dt.compute), logits, n * FP32)
    return LossBytes(n * dt.compute, logits, 2 * n * dt.compute)


def saved_activation_bytes(shape: ModelShape, tk: Tokens, dt: Dtypes, attention: Attention) -> int:
    """Everything autograd keeps from the forward pass, without the loss tensors."""
    total = embedding_saved_bytes(shape, tk, dt, attention) + head_saved_bytes(shape, tk, dt)
    total += shape.layers * layer_saved_bytes(shape, tk, dt, attention)
    if shape.architecture is Architecture.encoder_decoder:
        total += shape.decoder_layers * layer_saved_bytes(shape, tk, dt, attention, decoder=True)
    return total


def block_backward_temp_bytes(shape: ModelShape, tk: Tokens, dt: Dtypes) -> int:
    """Backward through the last block's MLP: the gradient of its ffn-wide input and the gradient
    flowing in the residual stream (the point where a model without a vocabulary-sized loss, such as
    ViT, peaks: saved activations are still all alive, the head's gradients already exist)."""
    n_tokens = tk.decoder if shape.architecture is Architecture.encoder_decoder else tk.encoder
    return n_tokens * (shape.code.mlp_backward_ffn_tensors * shape.ffn + shape.hidden) * dt.compute


def moe_block_backward(shape: ModelShape, tk: Tokens, dt: Dtypes) -> tuple[int, int, int] | None:
    """The top block's backward through its experts, where the top layer is a mixture of experts run as grouped
    GEMMs over the routed rows (transformers 5's ``grouped_mm_experts_forward``; not the per-expert loop of
    ``ModelCode.experts_per_module``): at the gated product's backward the down projection has freed the product it
    saved (rows x expert ffn), the routing-weight multiply the expert outputs it saved (rows x hidden), and it has
    written every expert's down-projection gradient, and the gradients of the product
    and of both its factors are alive (3 x rows x expert ffn) beside the residual stream's (tokens x hidden). Where
    the shared experts run after the routed ones (``ModelCode.shared_experts_last``), their backward came first.
    Returns (activations freed, gradient parameters written, temporaries), or None for a dense top layer."""
    from vramcalc.core.shape import expert_rows, moe_layers

    m = shape.moe
    if m is None or shape.code.experts_per_module or moe_layers(shape) == 0 or shape.layers % m.frequency:
        return None
    rows, c = expert_rows(shape, tk.encoder), dt.compute
    weighted_outputs = 0 if shape.code.experts_see_all_tokens else shape.hidden  # Llama 4 weights the inputs
    freed = rows * (m.expert_ffn + weighted_outputs) * c
    gradients = m.experts * m.expert_ffn * shape.hidden
    temporaries = rows * 3 * m.expert_ffn * c + tk.encoder * shape.hidden * c
    if m.shared and shape.code.shared_experts_last:  # their backward ran first: saved freed, gradients written
        width = m.shared * m.shared_width
        freed += mlp_saved_bytes(replace(shape, ffn=width), tk.encoder, dt)
        gradients += 3 * shape.hidden * width
        temporaries += tk.encoder * shape.hidden * c
    return freed, gradients, temporaries


def checkpoint_saved_bytes(shape: ModelShape, tk: Tokens, dt: Dtypes) -> int:
    """Full gradient checkpointing (HF, non-reentrant): each block keeps only its input."""
    per_block = tk.encoder * shape.hidden * dt.residual * shape.layers
    if shape.architecture is Architecture.encoder_decoder:
        per_block += tk.decoder * shape.hidden * dt.residual * shape.decoder_layers
    return per_block


def largest_layer_saved_bytes(shape: ModelShape, tk: Tokens, dt: Dtypes, attention: Attention) -> int:
    """The block recomputed at one time during backward under checkpointing."""
    enc = layer_saved_bytes(shape, tk, dt, attention)
    if shape.architecture is Architecture.encoder_decoder:
        return maximum(enc, layer_saved_bytes(shape, tk, dt, attention, decoder=True))
    return enc


def inference_transient_bytes(shape: ModelShape, tk: Tokens, dt: Dtypes, attention: Attention) -> int:
    """No-grad forward: the largest set of tensors alive at once (nothing is saved for backward).

    Inside a block: the embedding output (the HF model's ``forward`` keeps a reference to it for the
    whole encoder), the block input, the norm output, and either Q/K/V and the attention output (eager
    adds the heads x seq^2 scores, their softmax and its cast back from fp32, and K/V expanded to every
    head under GQA) or, in the MLP, the attention residual sum and the ffn-wide intermediates. At the head:
    logits for every position plus the hidden state (and the MLM transform). T5: ``t5.inference_block_bytes``.
    """
    c = dt.compute
    head = inference_head_bytes(shape, tk, dt)
    if t5.is_t5(shape):
        dt_bytes = (dt.param, c, dt.residual, dt.amp)
        block = t5.inference_block_bytes(shape, tk.batch, tk.seq, tk.target, dt_bytes, attention is Attention.eager)
        return maximum(block, head)
    n_tok = maximum(tk.encoder, tk.decoder)
    residual = max(c, dt.residual)
    norm_out = FP32 if dt.amp else c
    attn = n_tok * (2 * shape.q_width + 2 * shape.kv_width) * c
    if attention is Attention.eager:
        seq = max(tk.seq, tk.target)  # masked scores + softmax (an fp32 one cast back while both are alive)
        scores = tk.batch * shape.heads * seq * seq * (c + (FP32 + c if dt.amp or _softmax_upcast(shape) else c))
        attn += maximum(scores, disentangled_transient_bytes(shape, tk.batch, seq, c))
        attn += 2 * n_tok * shape.q_width * c if shape.kv_heads < shape.heads else 0  # repeat_kv's K and V
    mlp = n_tok * shape.ffn * inference_mlp_per_element(shape, dt)
    held = 1 if shape.code.attention_output_held else 0  # the block keeps the attention's output to its end
    block = maximum(
        n_tok * shape.hidden * (2 * residual + norm_out) + attn,
        n_tok * shape.hidden * (3 * residual + norm_out + held * c) + mlp,
    )
    if shape.architecture is Architecture.encoder_decoder:
        block += tk.encoder * shape.hidden * c  # encoder output kept for cross-attention
    return maximum(block, head)


def inference_mlp_per_element(shape: ModelShape, dt: Dtypes) -> int:
    """Bytes per ffn-wide element alive at once in a no-grad MLP: gated, the activation, the up projection and
    their product; otherwise the first linear's output and the activation's. GPT-2's ``gelu_new``
    (``NewGELUActivation``, written out in Python) holds its input, ``0.5 * input`` and two links of the chain
    (``torch.pow(input, 3.0)`` and its product with 0.044715, both fp32 under autocast) at once."""
    c = dt.compute
    if shape.gated:
        return 3 * c
    if shape.mlp is Mlp.gelu_tanh:
        return 2 * c + 2 * (FP32 if dt.amp else c)
    return 2 * c


def inference_head_bytes(shape: ModelShape, tk: Tokens, dt: Dtypes) -> int:
    """A no-grad forward's output: logits for every position at the compute dtype plus the final hidden state
    in and out of the last norm (nothing without an LM head)."""
    if shape.head is not Head.lm:
        return 0
    out_tokens = tk.decoder if shape.architecture is Architecture.encoder_decoder else tk.encoder
    return out_tokens * shape.vocab * dt.compute + 2 * out_tokens * shape.hidden * max(dt.compute, dt.residual)
