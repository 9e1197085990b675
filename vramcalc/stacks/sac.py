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
recomputed at a time, as under full checkpointing (:mod:`vramcalc.core.checkpointing`).
"""

from __future__ import annotations

from dataclasses import replace

from vramcalc.choices import Architecture, Checkpointing, Mode
from vramcalc.core.checkpointing import KeptOps
from vramcalc.core.shape import ModelShape
from vramcalc.core.stack import Stack
from vramcalc.errors import SpecError
from vramcalc.spec.models import Spec, Workload

#: torchtitan's op policy: every other ``aten.mm`` from the first, and the fused SDPA kernels' outputs.
OP_POLICY = KeptOps(first_mm=0, mm_step=2, fused_attention=True)


def kept_ops(workload: Workload) -> KeptOps | None:
    """What the workload's checkpointing keeps of each block beyond its input (None: no selective policy)."""
    return OP_POLICY if workload.gradient_checkpointing is Checkpointing.selective_op else None


def check_spec(spec: Spec, shape: ModelShape) -> None:
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


def refine(stack: Stack, workload: Workload) -> Stack:
    """``stack`` with the policy's kept outputs."""
    return replace(stack, kept_ops=kept_ops(workload))
