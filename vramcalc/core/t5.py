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

FP32 = 4
MASK = 1
TOKEN_ID = 8


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
