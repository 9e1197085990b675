"""Activation bytes of a transformer block compiled as one graph: what a graph partitioner keeps for backward.

A compiler that traces a block's forward and backward together (one joint graph) chooses the tensors the forward
hands to the backward; everything else the backward needs is recomputed there from them. What it chooses is its
stack module's fact (:class:`CompiledBlock`, set on the stack by ``vramcalc/stacks/inductor.py``); this module
counts the bytes of that choice for the blocks :mod:`vramcalc.core.activations` models, tensor by tensor:

* the block's input, and the outputs of the tensors the rules name as saved: each norm's output (a matmul reads it
  in backward), its statistics, the attention's Q, K and V at the kernel's width, its output and logsumexp, the
  attention output projection's output (the residual stream is recomputed from it), each matmul output of the MLP
  and the activation's output (the down projection's input);
* a dropout's mask at one byte per element, where the model drops out on the residual branches.

Under autocast the block input is the fp32 residual stream, the saved norm outputs, Q/K/V and matmul outputs are
the 16-bit casts the matmuls read, and each weight's 16-bit cast is saved beside them (counted with the eager
step's autocast weight copies, not here).

A no-grad forward of compiled blocks (:func:`compiled_inference_bytes`) keeps nothing for backward; with pointwise
chains fused, a block's working set is the matmul and attention inputs and outputs alive at once (a fused chain's
inputs stay alive until the kernel that reads them has run).

A no-grad forward of a whole model compiled as one graph over a static KV cache (:func:`compiled_static_step_bytes`:
the prompt's forward, or a decode step's) writes the new K and V into the cache in place and reads the whole
cache: each layer's attention gets a float mask of ``batch x tokens x cache`` (the last dimension padded to the
kernel's alignment), and with grouped KV heads reads K and V expanded to every query head over the whole cache;
the residual stream's adds are realized where many kernels read them, one more hidden-wide buffer beside the
block input.

Notation as in :mod:`vramcalc.core.activations` (``T`` tokens, ``h`` hidden, ``f`` ffn width, ``c`` compute bytes).
"""

from __future__ import annotations

from dataclasses import dataclass

from vramcalc.choices import Attention, Norm, Position
from vramcalc.core import activations as act
from vramcalc.core.shape import ModelShape
from vramcalc.units import ceil_div


@dataclass(frozen=True)
class CompiledBlock:
    """What a compiled block keeps for backward, as its compiler's partitioner chooses (every field a tensor kind
    of the block, true where it is saved), and whether the compiler fuses pointwise intermediates away."""

    #: Each norm's output is saved (a matmul reads it in backward); its input is recomputed from the block input
    #: and the saved matmul outputs.
    norm_output: bool
    #: Each norm's statistics (LayerNorm: mean and rstd; RMSNorm: rstd; fp32, one per token).
    norm_stats: bool
    #: The attention output projection's output (the residual sum after attention is recomputed from it; a post-LN
    #: block keeps that sum, the second norm's input, instead: the same bytes).
    projection_output: bool
    #: Every matmul output of the MLP, and the activation's output (the down projection's input).
    mlp_matmul_outputs: bool
    mlp_activation_output: bool
    #: Bytes per element of a saved dropout mask (the mask of each residual-branch dropout).
    dropout_mask_bytes: int
    #: Pointwise intermediates are fused into the kernels that read them: none is allocated.
    fuses_pointwise: bool
    #: Under autocast, each weight's 16-bit cast is a node of the graph, kept for backward as the block's other
    #: saved tensors are (the same bytes as autocast's weight-cast cache), not held by the cache: a checkpointed
    #: block's forward keeps none of them.
    weight_casts_in_graph: bool = False
    #: How many of the MLP's up-projection outputs are kept where the partitioner keeps fewer than every one
    #: (None: ``mlp_matmul_outputs`` says), and how many further hidden-wide matmul outputs it keeps.
    mlp_up_outputs: int | None = None
    hidden_matmul_outputs: int = 0


def compiled_layer_saved_bytes(
    shape: ModelShape, tk: act.Tokens, dt: act.Dtypes, attention: Attention, block: CompiledBlock
) -> int:
    """One compiled block, training mode, no recomputation: its input and what ``block`` says it saves. The
    attention kernel is a fused one (flash or memory-efficient: Q, K and V at the K/V heads' width, the output,
    an fp32 logsumexp per head and query); the stack module refuses the others."""
    n_tokens = tk.encoder
    h, c = shape.hidden, dt.compute
    stats = act.LAYERNORM_STATS if shape.norm is Norm.layernorm else act.RMSNORM_STATS
    per_token = h * dt.residual  # the block input
    per_token += shape.norms_per_layer * ((h * c if block.norm_output else 0) + (stats if block.norm_stats else 0))
    per_token += h * c if block.projection_output else 0
    k = act.kernel_bytes(shape, dt, attention)
    kv = shape.q_width if shape.code.kv_expanded else shape.kv_width  # K and V as the kernel reads them
    per_token += (2 * shape.q_width + 2 * kv) * k  # Q, K, V and the output
    n_up = 2 if shape.gated else 1
    ups = block.mlp_up_outputs if block.mlp_up_outputs is not None else n_up if block.mlp_matmul_outputs else 0
    per_token += shape.ffn * c * (ups + int(block.mlp_activation_output))
    per_token += block.hidden_matmul_outputs * h * c
    if shape.dropout > 0:
        per_token += 2 * h * block.dropout_mask_bytes
    logsumexp = tk.batch * shape.heads * tk.seq * act.FP32
    return n_tokens * per_token + logsumexp


def unneeded_input_bytes(shape: ModelShape, tk: act.Tokens, dt: act.Dtypes) -> int:
    """What a compiled block whose input needs no gradient (the first block over a frozen embedding) does not keep
    beside the others: its input and its first norm's statistics (the backward computes no gradient through that
    norm)."""
    stats = act.LAYERNORM_STATS if shape.norm is Norm.layernorm else act.RMSNORM_STATS
    return tk.encoder * (shape.hidden * dt.residual + stats)


def compiled_saved_activation_bytes(
    shape: ModelShape, tk: act.Tokens, dt: act.Dtypes, attention: Attention, block: CompiledBlock
) -> int:
    """Everything autograd keeps from the forward pass when each block is compiled (the embedding and the head
    run eagerly, as :mod:`vramcalc.core.activations` counts them), without the loss tensors."""
    outside = act.embedding_saved_bytes(shape, tk, dt, attention) + act.head_saved_bytes(shape, tk, dt)
    return outside + shape.layers * compiled_layer_saved_bytes(shape, tk, dt, attention, block)


def compiled_inference_block_bytes(shape: ModelShape, tk: act.Tokens, dt: act.Dtypes) -> int:
    """The largest set of tensors alive in one compiled block of a no-grad forward, pointwise chains fused, with the
    block input (kept for the residual add) at the residual dtype:

    * attention: the norm output beside Q, K and V as the projections write them (``T (h + q + 2 kv) c``), or Q, K,
      V and the attention output (or a rotated copy of Q or K beside the three: ``T (2 q + 2 kv) c``), plus the
      kernel's fp32 logsumexp;
    * MLP: the attention output projection's output (the residual add after attention is fused into its readers,
      so the block input and that output stay alive until the block's last add) with the second norm's output
      beside the up projections' outputs (``T (h + n_up f) c``), or those outputs and the activation's output, the
      down projection's input (``T (n_up + 1) f c``).

    Under autocast each matmul also reads its weight's 16-bit cast, made just before it (``h q c`` in attention,
    ``h f c`` in the MLP).
    """
    n_tokens, h, c = tk.encoder, shape.hidden, dt.compute
    block_input = n_tokens * h * max(c, dt.residual)
    q, kv = shape.q_width, shape.kv_width
    logsumexp = tk.batch * shape.heads * tk.seq * act.FP32
    attention = n_tokens * c * max(h + q + 2 * kv, 2 * q + 2 * kv) + logsumexp + (h * q * c if dt.amp else 0)
    n_up = 2 if shape.gated else 1
    mlp = n_tokens * c * (h + max(h + n_up * shape.ffn, (n_up + 1) * shape.ffn)) + (h * shape.ffn * c if dt.amp else 0)
    return block_input + max(attention, mlp)


def compiled_inference_bytes(shape: ModelShape, tk: act.Tokens, dt: act.Dtypes) -> int:
    """A no-grad forward with each block compiled: the embedding output (the model's ``forward`` keeps a reference
    to it for the whole stack) and the rotary tables (at the embedding output's dtype: fp32 under autocast) beside
    the largest block, or the eager head's output."""
    outside = tk.encoder * shape.hidden * max(dt.compute, dt.residual)
    if shape.position is Position.rotary:
        outside += 2 * tk.seq * shape.head_dim * dt.residual  # cos and sin at the hidden states' dtype, per position
    return max(outside + compiled_inference_block_bytes(shape, tk, dt), act.inference_head_bytes(shape, tk, dt))


#: The attention mask's last dimension is padded to a multiple of this many elements for the memory-efficient
#: kernel (the alignment of its attention bias: a ``constant_pad_nd`` before the kernel in the traced graphs of
#: ``benchmarks/tracer_compile.py --generate-cases``).
MASK_ALIGNMENT = 8


def compiled_static_step_bytes(shape: ModelShape, tk: act.Tokens, dt: act.Dtypes, cache_tokens: int) -> int:
    """The largest set of tensors alive in a forward of ``tk`` new tokens per sequence compiled as one graph over a
    static cache of ``cache_tokens`` tokens per sequence (module docstring), beyond the cache itself:

    * the embedding output, the block input and one more hidden-wide residual buffer (``T 3 h c``);
    * attention: Q and the attention output (``T 2 q c``), the float mask of ``batch x tokens x cache`` rounded
      up to :data:`MASK_ALIGNMENT`, K and V expanded to every query head over the cache where the KV heads are
      grouped (``2 batch cache q c``), and the kernel's fp32 logsumexp;
    * MLP: as :func:`compiled_inference_block_bytes` counts it (the attention output projection's output, the
      second norm's output and the up projections' outputs, or those and the activation's output).
    """
    n_tokens, h, c = tk.encoder, shape.hidden, dt.compute
    residual = 3 * n_tokens * h * max(c, dt.residual)
    aligned = ceil_div(cache_tokens, MASK_ALIGNMENT) * MASK_ALIGNMENT
    mask = tk.batch * tk.seq * aligned * c
    expanded = 2 * tk.batch * cache_tokens * shape.q_width * c if shape.kv_heads < shape.heads else 0
    logsumexp = tk.batch * shape.heads * tk.seq * act.FP32
    attention = 2 * n_tokens * shape.q_width * c + mask + expanded + logsumexp
    n_up = 2 if shape.gated else 1
    mlp = n_tokens * c * (h + max(h + n_up * shape.ffn, (n_up + 1) * shape.ffn))
    return residual + max(attention, mlp)
