"""T5-family specifics of the activation formulas (T5, T5 v1.1, Flan-T5, mT5, T0: ``T5ForConditionalGeneration``
in transformers 5, ``transformers/models/t5/modeling_t5.py``).

* ``T5LayerNorm.forward``: ``variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)``, then
  ``hidden_states * torch.rsqrt(variance + eps)`` multiplies the *input itself* (not its fp32 copy) by rstd:
  with a 16-bit residual stream (pure bf16 / fp16) autograd keeps the 16-bit input besides the fp32 copy
  that ``pow`` saves (Llama's RMSNorm multiplies the fp32 copy, so it keeps one tensor).
* T5's own ``eager_attention_forward`` takes ``nn.functional.softmax(attn_weights, dim=-1)`` in the dtype of
  the scores: bf16 for a bf16 model (the shared eager attention of other families upcasts to fp32).
* ``T5DenseGatedActDense`` with ``gelu_new`` (``feed_forward_proj: gated-gelu``): ``NewGELUActivation`` is
  ``0.5 * x * (1.0 + tanh(sqrt(2 / pi) * (x + 0.044715 * pow(x, 3.0))))`` written out in Python, so autograd
  keeps ``x`` (for ``pow``), ``tanh``'s output, ``1 + tanh``, ``0.5 * x``; then ``hidden_gelu * hidden_linear``
  keeps the GELU output and ``wi_1``'s output, and ``wo`` its input (the product, or the output of the inner
  dropout, which keeps its 1-byte mask): seven ffn-wide tensors. Under autocast ``pow`` runs in fp32 (its
  fp32 copy of ``x`` is kept, not ``x``), so ``tanh``, ``1 + tanh``, the GELU output and the product are fp32,
  ``0.5 * x`` and ``wi_1``'s output 16-bit, and ``wo`` keeps a 16-bit cast of its input.
"""

from __future__ import annotations

from vramcalc.choices import Architecture, Mlp, Norm, Position
from vramcalc.core.shape import ModelShape
from vramcalc.core.symbolic import maximum
from vramcalc.units import FP32, MASK, TOKEN_ID


def is_t5(shape: ModelShape) -> bool:
    """T5's modeling code: relative position buckets and T5LayerNorm (the only such models vramcalc knows)."""
    return shape.position is Position.relative and shape.norm is Norm.rmsnorm


def norm_input_bytes(shape: ModelShape, residual: int) -> int:
    """Per token: the 16-bit input ``T5LayerNorm`` keeps besides its fp32 copy (0 for an fp32 residual)."""
    return shape.hidden * residual if is_t5(shape) and residual != FP32 else 0


def gated_mlp_per_element(shape: ModelShape, compute: int, amp: bool) -> int | None:
    """Bytes per ffn-wide element of T5's gated MLP (``T5DenseGatedActDense``), the inner dropout mask
    included; None when the model is not a gated T5."""
    if not (is_t5(shape) and shape.gated):
        return None
    mask = MASK if shape.dropout > 0 else 0
    if shape.mlp is Mlp.swiglu:  # gated-silu: silu's input and output, wi_1's output, wo's input
        return (FP32 + 3 * compute if amp else 4 * compute) + mask
    if amp:  # fp32: pow's copy of x, tanh, 1 + tanh, GELU output; 16-bit: 0.5 x, wi_1's output, wo's cast input
        return 4 * FP32 + 3 * compute + mask
    return 7 * compute + mask


def relative_bias_bytes(shape: ModelShape, seq: int, target: int, dt_bytes: tuple[int, int], kept: str) -> int:
    """What the relative position biases leave saved (``dt_bytes``: parameter and compute dtype widths).
    Each stack's ``relative_attention_bias`` embedding keeps its int64 bucket index (seq x seq) for backward.
    ``kept`` "eager": eager attention adds the bias to the scores (``add`` keeps neither input), so nothing
    else. "sdpa": SDPA takes the bias as its mask and each self-attention keeps its own copy
    (:func:`sdpa_bias_bytes`); the decoder's cross-attention zero bias (``torch.zeros((1, n_heads, target,
    seq), dtype=query_states.dtype)``) is one tensor for all its layers. "checkpoint": the checkpointed
    blocks take the biases as inputs and keep them all (each stack's heads x seq x seq, parameter dtype)."""
    param, compute = dt_bytes
    enc_dec = shape.architecture is Architecture.encoder_decoder
    total = seq * seq * TOKEN_ID + (target * target * TOKEN_ID if enc_dec else 0)
    if kept == "eager":
        return total
    total += shape.heads * target * seq * compute if enc_dec else 0
    if kept == "sdpa":
        return total
    return total + shape.heads * (seq * seq + (target * target if enc_dec else 0)) * param


def sdpa_bias_bytes(shape: ModelShape, seq_q: int, seq_kv: int, compute: int, cross: bool) -> int:
    """T5 self-attention under SDPA: the position bias enters as ``attn_mask`` and each layer keeps a copy
    of it (1 x heads x seq x seq, compute dtype) for the memory-efficient kernel's backward."""
    return shape.heads * seq_q * seq_kv * compute if is_t5(shape) and not cross else 0


def recomputed_mlp_transient_bytes(shape: ModelShape, n_tokens: int, compute: int, amp: bool) -> int:
    """The gated MLP's tensors alive, besides what it saves, at the largest moment of its recompute under
    non-reentrant checkpointing (``torch.utils.checkpoint``'s early stop ends the recompute once the block's
    last saved tensor, the outer ``T5LayerFF.dropout``'s mask, exists: the residual add never runs).

    With dropout, either the inner ``T5DenseGatedActDense.dropout`` (its input, the product ``hidden_gelu *
    hidden_linear``, alive beside its output; under autocast both are fp32 and ``wo``'s 16-bit cast does not
    exist yet; the outer mask does not exist yet) or the outer dropout (``wo``'s output and the dropout's
    output). Without dropout the dropouts are the identity: under autocast the fp32 product is alive while
    ``wo`` saves its 16-bit cast, in pure precision nothing is. Under autocast ``T5LayerFF.forward`` also
    holds the fp32 norm output (its local ``forwarded_states``) through the MLP: the linears saved 16-bit
    casts of it, not it."""
    f, h = shape.ffn, shape.hidden
    norm_out = n_tokens * h * FP32 if amp else 0
    if shape.dropout <= 0:
        return norm_out + (n_tokens * f * FP32 if amp else 0)
    inner = n_tokens * (f * (2 * FP32 - compute if amp else compute) - h * MASK)
    outer = n_tokens * 2 * h * compute
    return norm_out + maximum(inner, outer)


def first_block_recompute_bytes(
    shape: ModelShape, seq: int, target: int, n_tokens: int, dt_bytes: tuple[int, int, int]
) -> int:
    """Activations alive while full checkpointing recomputes the encoder's first block, the last block of
    the backward pass (``dt_bytes``: parameter, compute and residual widths), besides the block's saved
    tensors and the MLP transient (:func:`recomputed_mlp_transient_bytes`). Every other checkpoint is freed.

    * the block's input, the embedding dropout's output, with its mask, and the gradient of its output
      (under autocast also its 16-bit cast: the block's last node, the residual add, ran before the
      recompute and cast the gradient of its 16-bit operand, the outer dropout's output);
    * ``T5Attention.compute_bias`` recomputed: the int64 bucket index (seq x seq) and the
      ``relative_attention_bias`` embedding output (seq x seq x heads, parameter dtype) that
      ``position_bias`` views; the gradient of that bias from the encoder's later blocks (which took it as
      their input, parameter dtype);
    * the decoder's cross-attention zero bias (``T5Attention.forward``: ``torch.zeros((1, n_heads,
      target, seq), dtype=query_states.dtype)`` with ``requires_grad = True`` under checkpointing, an input
      of every decoder checkpoint) and the gradient it accumulates, both in the compute dtype.
    """
    param, compute, residual = dt_bytes
    total = n_tokens * shape.hidden * (2 * residual + (MASK if shape.dropout > 0 else 0))
    total += n_tokens * shape.hidden * compute if residual != compute else 0
    total += seq * seq * (TOKEN_ID + shape.heads * param)
    if shape.layers > 1:
        total += shape.heads * seq * seq * param
    if shape.architecture is Architecture.encoder_decoder:
        total += 2 * shape.heads * target * seq * compute
    return total


def first_block_copies(shape: ModelShape, compute: int) -> int:
    """Autocast's 16-bit weight copies alive in the encoder's first block at its recompute's largest moment
    (the inner dropout): q, k, v, o, ``wi_0`` and ``wi_1``; ``wo``'s copy is not made yet."""
    return (4 * shape.hidden * shape.q_width + 2 * shape.hidden * shape.ffn) * compute


def inference_block_bytes(
    shape: ModelShape, batch: int, seq: int, target: int, dt_bytes: tuple[int, int, int, bool], eager: bool
) -> int:
    """No-grad forward of a T5 stack: the most bytes alive inside a block (``dt_bytes``: parameter,
    compute and residual widths, autocast). Alive through each stack: the embedding output
    (``T5Stack.forward``'s ``inputs_embeds``, parameter dtype), the ``relative_attention_bias`` output that
    every layer's ``position_bias`` views (heads x seq x seq, parameter dtype), the block's input; in the
    decoder also the encoder's output and the cross-attention zero bias that layer 0 creates and passes on.

    * attention: the norm output, Q, K, V and either (eager, ``eager_attention_forward``) two score-sized
      tensors (``matmul`` and ``* scaling``; under autocast the sum with the fp32 bias and the softmax are
      fp32: two fp32 tensors) or (SDPA) the kernel's copy of the bias and the output;
    * MLP: the norm output, the attention's residual sum, eager attention's weights (``T5Attention``
      returns them and ``T5Block`` holds them to its end), and ``T5DenseGatedActDense``'s ffn-wide tensors:
      ``gelu_new`` in Python holds ``x``, ``0.5 * x``, ``pow(x, 3)`` and its product at once (under autocast
      ``pow`` and its product are fp32), a gated SiLU ``act(x)``, ``wi_1``'s output and their product, a
      ReLU (``T5DenseActDense``) ``x`` and ``relu(x)``.
    """
    param, c, residual, amp = dt_bytes
    h, f, heads, qw = shape.hidden, shape.ffn, shape.heads, shape.q_width
    norm_out = FP32 if amp else c
    if shape.gated and shape.mlp is not Mlp.swiglu:
        mlp = f * (2 * c + 2 * FP32 if amp else 4 * c)
    else:
        mlp = f * (3 if shape.gated else 2) * c
    weights_kept = FP32 if amp else c

    def block(q_tok: int, s_q: int, kept: int, cross_len: int) -> int:
        base = q_tok * h * (param + residual + norm_out) + kept
        if eager:
            score = batch * heads * s_q * (2 * FP32 if amp else 2 * c)
            self_attn = base + 3 * q_tok * qw * c + score * s_q
            weights = batch * heads * s_q * s_q * weights_kept
        else:
            self_attn = base + 4 * q_tok * qw * c + heads * s_q * s_q * c
            weights = 0
        mlp_phase = base + q_tok * (h * residual + mlp) + weights
        if not cross_len:
            return maximum(self_attn, mlp_phase)
        cross_kv = batch * cross_len
        if eager:
            cross = base + q_tok * h * residual + weights + (q_tok + 2 * cross_kv) * qw * c + score * cross_len
            mlp_phase += batch * heads * s_q * cross_len * weights_kept
        else:
            cross = base + q_tok * h * residual + (2 * q_tok + 2 * cross_kv) * qw * c
        return maximum(maximum(self_attn, cross), mlp_phase)

    encoder = block(batch * seq, seq, heads * seq * seq * param, 0)
    if shape.architecture is not Architecture.encoder_decoder:
        return encoder
    decoder_kept = heads * target * (target * param + seq * c) + batch * seq * h * norm_out
    return maximum(encoder, block(batch * target, target, decoder_kept, seq))
