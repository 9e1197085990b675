"""Op-level selective activation checkpointing (``gradient_checkpointing: selective-op``), as torchtitan runs it
(``activation_checkpoint.mode = "selective"``, ``selective_ac_option = "op"``; ``_apply_ac_to_transformer_block``
in torchtitan's ``parallelize.py``).

Each transformer block runs under ``torch.utils.checkpoint`` with a policy that keeps the outputs of a short list
of ops and recomputes everything else in backward: of the block's ``aten.mm`` calls the 1st, 3rd, 5th, ... (every
other one, counted per block), and the outputs of the fused SDPA kernels (flash and memory-efficient: the output
and its fp32 logsumexp). A Llama block runs its matmuls in the order q, k, v, o, gate (``w1``), up (``w3``),
down (``w2``), so q, v, gate and down are kept. A linear with a bias runs as ``aten.addmm``, which the policy
does not keep, so models with linear biases are not modelled; neither is tensor parallelism, whose collectives
the policy also keeps.

Per block on the device: its input (the checkpoint) and the kept outputs, for every block; in backward, one block
recomputed at a time, as under full checkpointing.
"""

from __future__ import annotations

from typing import Any

from vramcalc.choices import Architecture, Attention, Checkpointing, Mode, Position
from vramcalc.core import activations as act
from vramcalc.core.estimate import Phase
from vramcalc.core.params import layer_params
from vramcalc.core.shape import ModelShape
from vramcalc.errors import SpecError

FP32 = 4


def recomputes_blocks(checkpointing: Checkpointing) -> bool:
    """Full checkpointing and the op-level policy both keep each block's input and recompute the block in
    backward, one block at a time."""
    return checkpointing is Checkpointing.full or checkpointing is Checkpointing.selective_op


def mm_widths(shape: ModelShape) -> list[int]:
    """Output widths of a block's matmuls in the order they run (one ``aten.mm`` per bias-free linear)."""
    kv = shape.kv_width
    attention = [shape.q_width + 2 * kv] if shape.fused_qkv else [shape.q_width, kv, kv]
    mlp = [shape.ffn, shape.ffn, shape.hidden] if shape.gated else [shape.ffn, shape.hidden]
    return [*attention, shape.hidden, *mlp]


def kept_per_block_bytes(
    checkpointing: Checkpointing, shape: ModelShape, n_tokens: int, dt: act.Dtypes, attention: Attention
) -> int:
    """What the op policy keeps of one block besides its input (0 under any other checkpointing): the 1st, 3rd,
    ... matmul outputs at the compute dtype and, under the fused SDPA kernels, their output and fp32
    logsumexp (the math fallback runs as ops the policy recomputes)."""
    if checkpointing is not Checkpointing.selective_op:
        return 0
    kept = sum(mm_widths(shape)[0::2]) * n_tokens * dt.compute
    if attention is Attention.sdpa and act.sdpa_kernel(shape, dt) in ("flash", "efficient"):
        kept += n_tokens * (shape.q_width * dt.compute + shape.heads * FP32)
    return kept


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


def check(spec: Any, shape: ModelShape) -> None:
    """What ``selective-op`` is not modelled with, refused with one line naming the key."""
    wl = spec.workload
    if wl.gradient_checkpointing is not Checkpointing.selective_op or wl.mode is not Mode.train:
        return
    key = "workload.gradient_checkpointing: selective-op"
    if shape.architecture is not Architecture.decoder:
        raise SpecError(f"{key} is modelled for decoder models (torchtitan's transformer blocks)")
    if shape.moe is not None or shape.mla is not None:
        raise SpecError(f"{key} is not modelled for mixture-of-experts or latent-attention models")
    if shape.has_qkv_bias or shape.has_o_bias or shape.has_mlp_bias:
        raise SpecError(f"{key}: the policy keeps aten.mm outputs; linears with biases run as addmm (set bias: false)")
    given = [k for k in ("adapter", "quantization") if getattr(wl, k) is not None]
    given += [k for k in ("activation_offloading", "keep_outputs") if getattr(wl, k)]
    if given:
        raise SpecError(f"{key} is not modelled together with workload.{given[0]}")
    parallel = spec.parallel
    if parallel is not None and (parallel.tensor > 1 or parallel.offload.activations == "cpu"):
        what = "parallel.tensor > 1" if parallel.tensor > 1 else "parallel.offload.activations"
        raise SpecError(f"{key} is not modelled with {what}")
