"""Gradient checkpointing's block recomputation, and a selective policy's kept outputs.

Under ``gradient_checkpointing: full`` and a selective policy alike, each transformer block keeps its input
(the checkpoint) and is recomputed in backward, one block at a time. A selective policy also keeps the
outputs of some of the block's ops (:class:`KeptOps`, from the stack: vramcalc/stacks/sac.py). Going down
in backward, each block's kept bytes are freed and its gradients appear, so the top and the bottom block's
backward are moments of their own (:func:`block_backward_moments`).
"""

from __future__ import annotations

from dataclasses import dataclass

from vramcalc.choices import Architecture, Attention, Checkpointing, Position
from vramcalc.core import activations as act
from vramcalc.core.params import layer_params
from vramcalc.core.phases import Phase
from vramcalc.core.shape import ModelShape
from vramcalc.units import FP32


def recomputes_blocks(checkpointing: Checkpointing) -> bool:
    """Full checkpointing and the op-level policy both keep each block's input and recompute the block in
    backward, one block at a time (``selective`` recomputes only the attention scores, inside the block)."""
    return checkpointing is Checkpointing.full or checkpointing is Checkpointing.selective_op


def mm_widths(shape: ModelShape) -> list[int]:
    """Output widths of a block's matmuls in the order they run (one ``aten.mm`` per bias-free linear)."""
    kv = shape.kv_width
    attention = [shape.q_width + 2 * kv] if shape.fused_qkv else [shape.q_width, kv, kv]
    mlp = [shape.ffn, shape.ffn, shape.hidden] if shape.gated else [shape.ffn, shape.hidden]
    return [*attention, shape.hidden, *mlp]


@dataclass(frozen=True)
class KeptOps:
    """What a selective checkpointing policy keeps of each block besides its input: the outputs of every
    ``mm_step``-th of the block's matmuls from the ``first_mm``-th on (counted per block, in the order they
    run: :func:`mm_widths`), and, with ``fused_attention``, the fused SDPA kernels' output and logsumexp."""

    first_mm: int
    mm_step: int
    fused_attention: bool


def kept_per_block_bytes(
    kept: KeptOps | None, shape: ModelShape, n_tokens: int, dt: act.Dtypes, attention: Attention
) -> int:
    """What a selective policy keeps of one block besides its input (0 without one): the kept matmul outputs
    at the compute dtype and, under the fused SDPA kernels, their output and fp32 logsumexp (the math fallback
    runs as ops a policy of matmuls and fused kernels recomputes)."""
    if kept is None:
        return 0
    total = sum(mm_widths(shape)[kept.first_mm :: kept.mm_step]) * n_tokens * dt.compute
    if kept.fused_attention and attention is Attention.sdpa and act.sdpa_kernel(shape, dt) in ("flash", "efficient"):
        total += n_tokens * (shape.q_width * dt.compute + shape.heads * FP32)
    return total


def has_block_moments(shape: ModelShape) -> bool:
    """A decoder: the backward of the top and of the bottom block are moments of their own
    (:func:`block_backward_moments`). Not with T5-style relative position biases, which one block computes and
    the others share."""
    return shape.architecture is Architecture.decoder and shape.position is not Position.relative


def block_backward_steps(
    shape: ModelShape, tk: act.Tokens, dt: act.Dtypes, kept: int
) -> tuple[int, int, int, int, int]:
    """From the moment the top block's recomputation ends: the activations freed (the head's saved tensors),
    the temporaries (:func:`activations.block_backward_temp_bytes`, the gradients of the MLP input and of the
    residual stream) and the gradients added (the block's) at the top block's MLP backward, then the
    activations freed and gradients added down to the bottom block's."""
    grads = layer_params(shape) * dt.param
    below = shape.layers - 1
    per_block = tk.encoder * shape.hidden * dt.residual + kept
    freed, temporaries = act.head_saved_bytes(shape, tk, dt), act.block_backward_temp_bytes(shape, tk, dt)
    return freed, temporaries, grads, below * per_block, below * grads


def block_backward_moments(
    recompute: Phase, shape: ModelShape, tk: act.Tokens, dt: act.Dtypes, kept: int
) -> list[Phase]:
    """The backward of the first block recomputed (the top one) and of the last (the bottom one), from the
    moment the top block's recomputation ends (``recompute``; :func:`block_backward_steps`). Going down, each
    block's input and the ``kept`` bytes the policy keeps of it are freed and its parameters' gradients appear,
    so the larger of the two ends is the peak: the top one when a block keeps more than its gradients take
    (the op-level policy), the bottom one otherwise (full checkpointing)."""
    freed, temporaries, grads, below, below_grads = block_backward_steps(shape, tk, dt, kept)
    top = {**recompute, "activations": recompute["activations"] - freed, "temporaries": temporaries}
    top["gradients"] = recompute.get("gradients", 0) + grads
    bottom = {**top, "activations": top["activations"] - below, "gradients": top["gradients"] + below_grads}
    return [top, bottom]
