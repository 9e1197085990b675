"""LoRA on encoder-decoder models (T5, Flan-T5, mT5, T0): what a frozen base saves for backward.

The rules of a frozen decoder (:mod:`vramcalc.llm.adapters`) carry over stack by stack, as
``T5ForConditionalGeneration`` runs them (transformers 5, eager attention):

* encoder blocks over ``batch x seq_len`` tokens; decoder blocks over ``batch x target_len`` tokens, each
  with a self-attention, a cross-attention whose K and V project the encoder output (``batch x seq_len``
  rows), and the MLP;
* T5's norm with a frozen weight saves its fp32 input copy, its 16-bit input and rstd; a frozen linear
  saves nothing of its input;
  ReLU saves its output; T5's gated GELU (``gelu_new``, written out in Python) saves the gate output,
  ``tanh``'s output, ``0.5 x``, ``1 + tanh``, the GELU output and the ``wi_1`` output; dropout its 1-byte
  mask; the eager attention Q, K (for each other's gradient), the softmax output (T5's own
  ``eager_attention_forward`` takes it in the activation dtype), the dropout mask and output, and V;
* the frozen embedding needs no gradient: its dropout and layer 0's first norm save nothing, and in
  layer 0 of each stack Q is saved only when ``k`` is adapted (K only when ``q`` is), V only when the
  attention probabilities need a gradient; the relative position bias (a frozen embedding) saves nothing;
* the encoder output is one tensor: the adapters of every cross-attention ``k`` / ``v`` read it, so
  without a cast or LoRA dropout it is kept once.

Checked against the CPU tracer (``benchmarks/data/tracer_llm.json``, ``t5-lora-*`` cases).
"""

from __future__ import annotations

from vramcalc.choices import Attention, Mlp
from vramcalc.core import activations as act
from vramcalc.core.shape import ModelShape
from vramcalc.core.symbolic import maximum
from vramcalc.llm import lora_targets
from vramcalc.llm.adapters import LoraMatrix

ATTENTION = ("q", "k", "v", "o")


def frozen_norm_bytes(shape: ModelShape, n_tokens: int, dt: act.Dtypes) -> int:
    """T5LayerNorm with a frozen weight: ``pow`` saves the fp32 copy of its input, the multiplication by
    rstd saves the input itself (a second tensor when the residual stream is 16-bit) and rstd."""
    h = shape.hidden
    own = h * dt.residual if dt.residual != act.FP32 else 0
    return n_tokens * (h * act.FP32 + own + act.RMSNORM_STATS)


def matrix_tokens(m: LoraMatrix, tk: act.Tokens) -> int:
    """Rows an adapted linear reads: decoder tokens, except the encoder and cross-attention K/V."""
    if m.stack == "encoder" or (m.stack == "cross" and m.name in ("k", "v")):
        return tk.encoder
    return tk.decoder


def lora_saved_bytes(
    matrices: list[LoraMatrix], rank: int, a: int, dt: act.Dtypes, dropout: float, tk: act.Tokens
) -> int:
    """What all adapters save (:func:`vramcalc.llm.adapters.lora_saved_per_token`, token counts per stack):
    lora_A's output; its input as a cast copy or a dropout output (with the mask) per module, or else the
    activation itself, once per block and source (the encoder output, which all cross-attention K/V read,
    is counted by :func:`encoder_output_kept`)."""
    total = 0
    shared: dict[object, int] = {}
    for m in matrices:
        t = matrix_tokens(m, tk)
        total += t * m.passes * rank * m.blocks * a
        if dropout > 0:
            total += t * m.passes * m.inp * (a + act.MASK)
        elif a != dt.compute or dt.amp:
            total += t * m.passes * m.inp * (dt.compute if dt.amp else a)
        elif m.stack == "cross" and m.name in ("k", "v"):
            continue  # the encoder output itself (:func:`encoder_output_kept`)
        else:
            key = (m.stack, lora_targets.INPUT_SOURCE[m.name], m.inp)
            shared[key] = max(shared.get(key, 0), t * m.passes * m.inp * a)
    return total + sum(shared.values())


def stack_lora_bytes(
    matrices: list[LoraMatrix], rank: int, a: int, dt: act.Dtypes, dropout: float, tk: act.Tokens, stack: str
) -> int:
    """:func:`lora_saved_bytes` of one stack's blocks (the decoder's: with its cross-attention)."""
    names = ("decoder", "cross") if stack == "decoder" else (stack,)
    return lora_saved_bytes([m for m in matrices if m.stack in names], rank, a, dt, dropout, tk)


def _eager_core_per_element(shape: ModelShape, dt: act.Dtypes, probs_grad: bool, v_grad: bool) -> int:
    """Per heads x seq_q x seq_kv element: the softmax output (when the probabilities need a gradient), the
    dropout mask and output (the output as the matmul with V's saved input, when V needs a gradient)."""
    c = dt.compute
    if shape.dropout > 0:
        return (c + act.MASK if probs_grad else 0) + (c if v_grad else 0)
    return c if probs_grad or v_grad else 0


def attention_bytes(
    shape: ModelShape,
    tk: act.Tokens,
    dt: act.Dtypes,
    attention: Attention,
    q_tokens: int,
    kv_tokens: int,
    grads: tuple[bool, bool, bool] = (True, True, True),
) -> int:
    """A frozen attention core: Q, K, V and what the core keeps; ``grads``: whether q, k and v need a
    gradient (all do past the first adapted module; layer 0 of a stack: only the adapted ones)."""
    q_grad, k_grad, v_grad = grads
    probs_grad = q_grad or k_grad
    if attention is Attention.sdpa:  # + the position-bias mask SDPA takes (a copy per self-attention)
        qkv = (q_tokens * shape.q_width + 2 * kv_tokens * shape.kv_width) * dt.compute
        lse = tk.batch * shape.heads * (q_tokens // tk.batch) * act.FP32
        bias = shape.heads * (q_tokens // tk.batch) * (kv_tokens // tk.batch) * dt.compute
        bias = bias if q_tokens == kv_tokens else 0  # cross-attention: one zero bias for all layers
        return qkv + q_tokens * shape.q_width * dt.compute + lse + bias if probs_grad or v_grad else 0
    width = shape.q_width
    saved = (q_tokens * width if k_grad else 0) + (kv_tokens * width if q_grad else 0)
    saved += kv_tokens * width if probs_grad else 0
    scores = tk.batch * shape.heads * (q_tokens // tk.batch) * (kv_tokens // tk.batch)
    return saved * dt.compute + scores * _eager_core_per_element(shape, dt, probs_grad, v_grad)


def mlp_bytes(shape: ModelShape, n_tokens: int, dt: act.Dtypes) -> int:
    """T5's frozen MLP: the ReLU output (or GELU input), the six ffn-wide tensors of the gated ``gelu_new``
    (gated SiLU: its input, its output and ``wi_1``'s), the inner dropout mask; not the input of ``wo``."""
    c = dt.compute
    per = {Mlp.relu: c, Mlp.gelu: c, Mlp.swiglu: 3 * c}.get(shape.mlp, 6 * c)
    return n_tokens * shape.ffn * (per + (act.MASK if shape.dropout > 0 else 0))


def layer_bytes(
    shape: ModelShape,
    tk: act.Tokens,
    dt: act.Dtypes,
    attention: Attention,
    decoder: bool,
    first: frozenset[str] | None = None,
) -> int:
    """One frozen block: norms, attention(s), the MLP, residual dropout masks. ``first``: for layer 0 of a
    stack, the adapted self-attention projections (its input needs no gradient); None for other blocks."""
    t = tk.decoder if decoder else tk.encoder
    grads = (True, True, True)
    norm = frozen_norm_bytes(shape, t, dt)
    if first is not None:
        grads = ("q" in first, "k" in first, "v" in first)
        norm = 0
    total = norm + attention_bytes(shape, tk, dt, attention, t, t, grads)
    if decoder:
        total += frozen_norm_bytes(shape, t, dt) + attention_bytes(shape, tk, dt, attention, t, tk.encoder)
    total += frozen_norm_bytes(shape, t, dt) + mlp_bytes(shape, t, dt)
    return total + act.dropout_mask_bytes(shape, t, 3 if decoder else 2)


def first_adapted(matrices: list[LoraMatrix], stack: str) -> frozenset[str]:
    """The attention projections adapted in a stack's self-attention."""
    return frozenset(m.name for m in matrices if m.stack == stack and m.name in ATTENTION)


def frozen_saved_bytes(
    shape: ModelShape, tk: act.Tokens, dt: act.Dtypes, attention: Attention, matrices: list[LoraMatrix]
) -> int:
    """Everything the frozen encoder-decoder saves, without the adapters and the loss: both stacks (layer 0
    of each as its adapters make it), each stack's final norm and the dropout after it."""
    enc = layer_bytes(shape, tk, dt, attention, False)
    dec = layer_bytes(shape, tk, dt, attention, True)
    total = (shape.layers - 1) * enc + (shape.decoder_layers - 1) * dec
    total += layer_bytes(shape, tk, dt, attention, False, first_adapted(matrices, "encoder"))
    total += layer_bytes(shape, tk, dt, attention, True, first_adapted(matrices, "decoder"))
    for t in (tk.encoder, tk.decoder):
        total += frozen_norm_bytes(shape, t, dt) + act.dropout_mask_bytes(shape, t, 1)
    if attention is Attention.sdpa:  # the cross-attention's zero position bias, saved by every layer's SDPA
        total += shape.heads * tk.target * tk.seq * dt.compute
    return total


def checkpointed_bytes(shape: ModelShape, tk: act.Tokens, dt: act.Dtypes) -> int:
    """Full checkpointing: each block's input, the final norms and dropouts; the stack's position biases
    (heads x seq x seq and heads x target x target, and the cross-attention's zero bias) stay referenced
    by the checkpointed blocks until their backward."""
    kept = act.checkpoint_saved_bytes(shape, tk, dt)
    for t in (tk.encoder, tk.decoder):
        kept += frozen_norm_bytes(shape, t, dt) + act.dropout_mask_bytes(shape, t, 1)
    s, g = tk.seq, tk.target
    return kept + shape.heads * (s * s + g * g + g * s) * dt.compute


def recomputed_layer_bytes(
    shape: ModelShape, tk: act.Tokens, dt: act.Dtypes, attention: Attention, enc_lora: int, dec_lora: int
) -> int:
    """The largest block recomputed under checkpointing, with its adapters' saved tensors."""
    enc = layer_bytes(shape, tk, dt, attention, False) + enc_lora
    dec = layer_bytes(shape, tk, dt, attention, True) + dec_lora
    return maximum(enc, dec)


def encoder_output_kept(matrices: list[LoraMatrix], a: int, dt: act.Dtypes, dropout: float) -> bool:
    """Whether the adapters of the cross-attention K/V save the encoder output itself (no cast, no LoRA
    dropout), which keeps it through backward; else it lives through the forward only."""
    reads = any(m.stack == "cross" and m.name in ("k", "v") for m in matrices)
    return reads and dropout == 0 and a == dt.compute and not dt.amp


def stack_locals(shape: ModelShape, tk: act.Tokens, dt: act.Dtypes) -> int:
    """What the decoder stack holds while its blocks run: the token embeddings, the self-attention position
    bias (heads x target^2), the cross-attention's zero bias (heads x target x seq_len) and the causal mask."""
    g, c = tk.target, dt.compute
    return tk.decoder * shape.hidden * c + shape.heads * g * (g + tk.seq) * c + tk.batch * g * g * c


def forward_inside(shape: ModelShape, tk: act.Tokens, dt: act.Dtypes, ckpt: bool, encoder_out: int) -> int:
    """The forward's peak at the end of the decoder beyond what the whole step saves (its final norm and
    dropout are not all saved yet): the stack's locals and the encoder output (``encoder_out``, when no
    adapter saves it), with either the last ``wo``'s input where nothing saves it (the dropout output, or
    the gated product) and its output, or the final norm's fp32 product and its output; under
    checkpointing the last block's own tensors besides."""
    t, c, h = tk.decoder, dt.compute, shape.hidden
    unsaved = shape.dropout > 0 or shape.mlp is not Mlp.relu
    wo = (t * shape.ffn * c if unsaved else 0) + t * h * c - frozen_norm_bytes(shape, t, dt)
    if ckpt:
        wo += t * shape.ffn * c * (3 if shape.gated else 2)
    norm = t * h * (act.FP32 + c)
    return stack_locals(shape, tk, dt) + encoder_out + max(wo, norm) - act.dropout_mask_bytes(shape, t, 1)


def backward_through(shape: ModelShape, tk: act.Tokens, dt: act.Dtypes, attention: Attention, dec_lora: int) -> int:
    """Gradients alive while autograd runs back through the last decoder block beyond the saved tensors: the
    MLP's (the output gradient and two or three ffn-wide gradients) with the whole block saved, or the eager
    cross-attention's (the gradients of its probabilities and scores, heads x target x seq_len) once the MLP
    half and the final norm are freed."""
    t, c = tk.decoder, dt.compute
    mlp = t * shape.ffn * c * (3 if shape.gated else 2) + t * shape.hidden * c
    if attention is Attention.sdpa:
        attn = t * 4 * shape.q_width * c
    else:
        attn = 2 * tk.batch * shape.heads * tk.target * max(tk.seq, tk.target) * c
    freed = frozen_norm_bytes(shape, t, dt) * 2 + mlp_bytes(shape, t, dt) + act.dropout_mask_bytes(shape, t, 2)
    return max(mlp, attn - freed - dec_lora)


def step_bytes(
    shape: ModelShape,
    tk: act.Tokens,
    dt: act.Dtypes,
    attention: Attention,
    matrices: list[LoraMatrix],
    lora: tuple[int, int, float],
    ckpt: bool,
) -> tuple[int, int, int, int]:
    """(saved through the forward, the block recomputed under checkpointing, the backward transient of the
    last decoder block, the forward's transient inside it) of a LoRA step; ``lora``: rank, adapter bytes per
    element, LoRA dropout."""
    rank, a, dropout = lora
    adapters_saved = lora_saved_bytes(matrices, rank, a, dt, dropout, tk)
    dec_mlp = [m for m in matrices if m.stack == "decoder" and m.name not in ATTENTION]
    dec_mlp_lora = lora_saved_bytes(dec_mlp, rank, a, dt, dropout, tk) // max(1, shape.decoder_layers)
    through = backward_through(shape, tk, dt, attention, dec_mlp_lora)
    encoder_out = tk.encoder * shape.hidden * dt.compute
    kept = encoder_output_kept(matrices, a, dt, dropout)
    inside = forward_inside(shape, tk, dt, ckpt, 0 if kept else encoder_out)
    adapters_saved += encoder_out if kept else 0
    if not ckpt:
        return frozen_saved_bytes(shape, tk, dt, attention, matrices) + adapters_saved, 0, through, inside
    enc_lora = stack_lora_bytes(matrices, rank, a, dt, dropout, tk, "encoder") // max(1, shape.layers)
    dec_lora = stack_lora_bytes(matrices, rank, a, dt, dropout, tk, "decoder") // max(1, shape.decoder_layers)
    recompute = recomputed_layer_bytes(shape, tk, dt, attention, enc_lora, dec_lora)
    return checkpointed_bytes(shape, tk, dt), recompute, through, inside
