"""Per-rank phases of one step of a multi-GPU plan: what one GPU holds, phase by phase.

Pure (no I/O, neither typer nor rich). The phases mirror :func:`vramcalc.core.dense.training_phases`
moment by moment (forward at the loss; start of backward or the last block's backward; end of
backward; optimizer step), with every component replaced by what one rank holds:

* parameters, gradients, optimizer states: :mod:`vramcalc.parallel.layout` (by precision and framework,
  divided over the shard group; offloaded ones, and offloaded checkpoints, move to ``host_bytes``);
* gathered parameters (ZeRO-3, FSDP): unsharded 16-bit parameters -- DeepSpeed's parameter coordinator
  (:mod:`vramcalc.stacks.zero3`); FSDP the largest unit plus the next block (``BACKWARD_PRE``; FSDP2
  prefetches one unit), in backward also that unit's gradient before its reduce-scatter (and in fp32 when
  the reduce dtype is fp32). With pipeline stages FSDP keeps the whole stage unsharded (torchtitan:
  ``reshard_after_forward = not pp_enabled``), as ``shard_grad_op`` does between forward and backward;
* communication buffers: DeepSpeed's contiguous gradient bucket (``reduce_bucket_size`` 16-bit elements);
* activations: one TP rank's share (:func:`vramcalc.core.activations.layer_saved_split`: the split part divided
  by ``tensor``, the replicated part also, along the sequence, under sequence parallelism; Korthikanti et al.
  2022, Table 2), ``seq_len / context`` tokens per rank, loss and logits vocabulary-parallel; on the first
  pipeline stage for as many micro-batches as the schedule keeps in flight: 1F1B ``min(micro_batches,
  pipeline)``, GPipe ``micro_batches``, interleaved ``pipeline x (1 + (pipeline - 1) / (pipeline x
  virtual_stages))`` (Megatron-LM theoretical_memory_usage.py);
* gradients during the forward pass: Megatron's fp32 gradient buffer lives through the whole step,
  DeepSpeed ZeRO-3 allocates its gradient partitions up front, and with several micro-batches every scheme
  keeps the accumulated gradients (FSDP with pipeline stages unsharded, in the reduce dtype);
* DeepSpeed under ``mixed-*`` converts each rank's 16-bit gradient partition to fp32 for the update.
The most loaded stage is reported: the first (embeddings, most micro-batches in flight) or the last.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from vramcalc.choices import Mode, Optimizer, OptimizerImpl
from vramcalc.core import activations as act
from vramcalc.core.allocator import weights_rounding_bytes
from vramcalc.core.checkpointing import KeptOps, recomputes_blocks
from vramcalc.core.dense import head_gradient_params, tied_gradient_sum_bytes
from vramcalc.core.optimizer import (
    DEFAULT_OPTIMIZER,
    DEFAULT_OPTIMIZER_NOTE,
    optimizer_state_bytes,
    optimizer_temp_bytes,
)
from vramcalc.core.params import count_params, layer_params, linear_weight_params
from vramcalc.core.shape import ModelShape
from vramcalc.core.stack import Stack
from vramcalc.core.workload import DTYPES, image_elements, input_bytes, workspace_bytes
from vramcalc.families.estimate import Estimate, assemble
from vramcalc.families.resolve import resolve_workload
from vramcalc.families.target import Target
from vramcalc.parallel.activations import in_flight, rank_tokens, stage_activations
from vramcalc.parallel.layout import (
    DEEPSPEED_SUB_GROUP,
    FP32,
    MIXED,
    Layout,
    ParallelDetails,
    Plan,
    largest_fsdp_unit,
    largest_tensor,
    layout,
    offloaded_bytes,
    resolve_plan,
    stage_params,
    tp_local,
)
from vramcalc.parallel.rules import check_supported
from vramcalc.spec.models import Spec
from vramcalc.spec.parallel import Framework, FsdpStrategy, ParallelSpec
from vramcalc.stacks import zero3
from vramcalc.units import ceil_div

Phases = dict[str, dict[str, int]]


@dataclass(frozen=True)
class RankParts:
    """Everything one rank of one stage holds, by moment of the step (int bytes; see :func:`phases_of`)."""

    base: dict[str, int]
    params: int = 0
    states: int = 0
    grads_persistent: int = 0  # allocated from the start of the step
    grads_stored: int = 0  # after backward, on the GPU
    partial_grads: int = 0  # the head's and last block's, early in backward
    head_grads: int = 0  # the LM head's, while recomputing under checkpointing
    buckets: int = 0  # communication buffers kept through the step
    end_bucket: int = 0  # communication buffer at the end of backward only
    tied_sum: int = 0  # see vramcalc.core.dense.tied_gradient_sum_bytes
    gathered_fwd: int = 0
    gathered_bwd: int = 0
    copies: int = 0  # autocast copies of the linear weights
    head_copy: int = 0
    n_blocks: int = 1
    acts: int = 0  # saved activations of every micro-batch in flight, without the loss
    head: int = 0
    layer: int = 0  # one block, recomputed under checkpointing
    checkpointing: bool = False
    loss: act.LossBytes = act.LossBytes(0, 0, 0)
    block_temps: int = 0
    block_moments: tuple[int, int, int, int, int] | None = None  # see parallel.activations.StageActivations
    opt_temps: int = 0
    host: int = 0  # offloaded states and gradients
    host_activations: int = 0  # offloaded checkpoints (DeepSpeed cpu_checkpointing)
    n_stage: int = 0


def estimate(spec: Spec, stack: Stack, target: Target) -> Estimate:
    """The most loaded rank of a plan across GPUs (or of a ``mixed-*`` step on one), NCCL's buffers among its
    overhead."""
    phases, n_params, assumptions, ranked = per_rank_estimate(spec, stack, target.hopper_or_newer)
    return with_nccl(replace(assemble(spec, n_params, phases, assumptions, stack), parallel=ranked), spec, target)


def with_nccl(result: Estimate, spec: Spec, target: Target) -> Estimate:
    """A training estimate across GPUs with NCCL's buffers among its overhead (vramcalc/stacks/nccl.py)."""
    from vramcalc.stacks.nccl import nccl_overhead

    assert result.parallel is not None  # the per-rank paths
    nccl, note = nccl_overhead(spec, result.parallel.plan, target.hopper_or_newer, target.interconnect)
    if not note:
        return result
    overhead = {**result.overhead, "nccl": nccl} if nccl else result.overhead
    return replace(result, overhead=overhead, assumptions=[*result.assumptions, note])


def per_rank_estimate(
    spec: Spec, stack: Stack, hopper_or_newer: bool
) -> tuple[Phases, int, list[str], ParallelDetails]:
    """Phases of the most loaded rank, the model's parameter count, assumptions and plan details."""
    check_supported(spec, spec.parallel or ParallelSpec())  # before the shape: ResNet has none
    work = resolve_workload(spec, stack)
    shape, n_params = work.shape, work.n_params
    plan, plan_notes = resolve_plan(spec, shape, zero3.release_refinement(spec))
    notes = [*work.notes, *plan_notes]
    stages = ("only",) if plan.pipeline == 1 else ("first", "last")
    built = {s: _stage(spec, shape, plan, s, n_params, hopper_or_newer, stack) for s in stages}
    peaks = {s: max(sum(c.values()) for c in phases.values()) for s, (phases, _) in built.items()}
    stage = max(peaks, key=lambda s: peaks[s])
    phases, parts = built[stage]
    notes = _notes(spec, plan, stage if len(stages) > 1 else "", hopper_or_newer) + notes
    host = parts.host + parts.host_activations
    return phases, n_params, notes, ParallelDetails(plan, stage, peaks, parts.n_stage, host)


def _notes(spec: Spec, plan: Plan, stage: str, hopper: bool) -> list[str]:
    """Assumptions of a per-rank estimate: the plan first, then the defaults it filled in."""
    wl = spec.workload
    if spec.parallel is not None:
        notes = [f"per GPU: {plan.summary}" + (f"; most loaded pipeline stage: {stage}" if stage else "")]
    else:
        notes = [
            f"{wl.precision.value}: 16-bit parameters and gradients, fp32 master weights and optimizer states "
            "(DeepSpeed's layout; a parallel section selects Megatron-LM or FSDP)"
        ]
    if wl.mode is Mode.train and wl.optimizer is None:
        notes.append(DEFAULT_OPTIMIZER_NOTE)
    if wl.mode is Mode.train and optimizer_impl(spec, plan) is not wl.optimizer_impl:
        notes.append(f"optimizer_impl not given: fused ({plan.framework.value}'s fused Adam)")
    if not hopper:
        notes.append("cuBLAS workspace 8.125 MiB per handle (pre-Hopper GPU)")
    return notes


def _stage(
    spec: Spec, shape: ModelShape, plan: Plan, stage: str, n_params: int, hopper: bool, stack: Stack
) -> tuple[Phases, Any]:
    wl = spec.workload
    dt = DTYPES[wl.precision]
    tk = rank_tokens(spec, shape, plan)
    derived = stage_params(shape, plan, stage)
    full = count_params(shape)
    n = derived if n_params == full else (derived * n_params + full // 2) // full
    k = in_flight(plan, stage)
    inputs = input_bytes(shape, tk, wl.mode, image_elements(spec), dt.param)
    base = {"inputs": inputs * (k if stage == "first" else 1), "workspace": workspace_bytes(wl.mode, hopper)}
    if plan.whole_weights and stack.loads_plain_weights:  # the weights' whole blocks (vramcalc/core/allocator.py)
        base["allocator_rounding"] = weights_rounding_bytes(shape, dt.param)
    local = tp_local(shape, plan.tensor)
    if wl.mode is Mode.inference:
        transient = act.inference_transient_bytes(local, tk, dt, wl.attention)
        parts = RankParts(base, params=n * dt.param, n_stage=n)
        return {"forward": {**base, "parameters": n * dt.param, "activations": transient}}, parts
    optimizer = wl.optimizer or DEFAULT_OPTIMIZER
    parts = rank_parts(
        spec, shape, plan, stage, n, derived, optimizer, base, stack.kept_ops, stack.optimizer_state_block
    )
    return phases_of(parts), parts


def rank_parts(
    spec: Spec,
    shape: ModelShape,
    plan: Plan,
    stage: str,
    n: int,
    derived: int,
    optimizer: Optimizer,
    base: dict[str, int],
    kept: KeptOps | None = None,
    block: int | None = None,
) -> RankParts:
    """Model states, working sets and activations of one rank of ``stage`` (training); ``kept``: what a
    selective checkpointing policy keeps of each block besides its input."""
    states = _state_parts(spec, shape, plan, stage, n, derived, optimizer, block)
    return RankParts(base=base, n_stage=n, **states, **_activation_parts(spec, shape, plan, stage, derived, kept))


def _state_parts(
    spec: Spec,
    shape: ModelShape,
    plan: Plan,
    stage: str,
    n: int,
    derived: int,
    optimizer: Optimizer,
    block: int | None = None,
) -> dict[str, Any]:
    """Parameters, gradients, optimizer states, gathered working set, buckets and host bytes."""
    lay = layout(spec.workload.precision, plan.framework, plan.fp32_grads, DTYPES[spec.workload.precision].param)
    local = tp_local(shape, plan.tensor)
    states = _states(plan, lay, optimizer, local, n, derived, block)
    persistent, stored = _grads(plan, lay, n)
    gathered_fwd, gathered_bwd, _ = _gathered(plan, lay, shape, n, _checkpointing(spec))
    partial, head_grads = _early_grads(plan, lay, local, stage in ("only", "last"), persistent)
    # DeepSpeed's ZeRO optimizers allocate the contiguous gradient bucket whatever the data degree
    # (ZeRO-Offload copies gradients to the host through it); stage 0 only all-reduces with data parallelism
    uses_bucket = plan.framework is Framework.deepspeed and (plan.stage >= 1 or plan.data * plan.context > 1)
    bucket = plan.reduce_bucket * lay.working if uses_bucket else 0
    return {
        "params": 0 if plan.offload_params else ceil_div(lay.param * n, shard_div(plan, 3)),
        "states": 0 if plan.offload_optimizer else states,
        "grads_persistent": persistent,
        "grads_stored": stored,
        "partial_grads": partial,
        "head_grads": head_grads,
        "buckets": bucket if plan.stage >= 1 else 0,
        "end_bucket": bucket if plan.stage == 0 else 0,
        "tied_sum": tied_gradient_sum_bytes(local, lay.working) if plan.pipeline == 1 else 0,  # stages: 2 copies
        "gathered_fwd": gathered_fwd,
        "gathered_bwd": gathered_bwd,
        "opt_temps": _optimizer_temps(spec, plan, lay, optimizer, local, n),
        "host": offloaded_bytes(plan, lay, states, n),
    }


def _activation_parts(
    spec: Spec, shape: ModelShape, plan: Plan, stage: str, derived: int, kept: KeptOps | None
) -> dict[str, Any]:
    """Saved activations, loss tensors, block temporaries and autocast weight copies of the stage."""
    wl = spec.workload
    dt = DTYPES[wl.precision]
    local = tp_local(shape, plan.tensor)
    acts = stage_activations(spec, shape, plan, stage, kept)
    if params_sharded(plan):  # autocast caches copies of the gathered units only
        lay = layout(wl.precision, plan.framework, plan.fp32_grads, dt.param)
        copies = _gathered(plan, lay, shape, 0, _checkpointing(spec))[2]
    else:
        copies = linear_weight_params(local) * derived // count_params(local)
    last = stage in ("only", "last")
    return {
        "copies": copies * dt.compute if dt.amp else 0,
        "head_copy": local.vocab * local.hidden * dt.compute if dt.amp and last else 0,
        "n_blocks": max(1, acts.n_blocks),
        "acts": acts.total,
        "head": acts.head,
        "layer": acts.layer,
        "checkpointing": recomputes_blocks(wl.gradient_checkpointing),
        "loss": acts.loss,
        "block_temps": acts.block_temps,
        "block_moments": acts.block_moments,
        "host_activations": acts.host,
    }


def _checkpointing(spec: Spec) -> bool:
    return recomputes_blocks(spec.workload.gradient_checkpointing)


def _early_grads(plan: Plan, lay: Layout, local: ModelShape, last: bool, persistent: int) -> tuple[int, int]:
    """Gradients allocated early in backward, as the single-GPU estimator counts them: the head's and
    the last block's (without checkpointing), the LM head's (recomputing under checkpointing). None
    extra when gradients are already allocated (Megatron's buffer, accumulation) or go through the
    sharded path (ZeRO-2/3 and FSDP buckets and units, counted there)."""
    if plan.stage >= 2 or persistent:
        return 0, 0
    head = head_gradient_params(local) if last else 0  # the head's (and a tied LM head's embedding)
    return (layer_params(local) + head) * lay.grad, head * lay.grad


def shard_div(plan: Plan, stage: int) -> int:
    """Ranks sharing one copy of what ZeRO stage ``stage`` shards (1 = states, 2 = grads, 3 = params)."""
    sharded = plan.stage >= stage or (stage == 3 and params_sharded(plan))
    return plan.shard if sharded else 1


def params_sharded(plan: Plan) -> bool:
    """ZeRO-3 / FSDP full_shard and hybrid; FSDP shard_grad_op also shards parameters at rest."""
    return plan.stage >= 3 or plan.fsdp is FsdpStrategy.shard_grad_op


def _states(
    plan: Plan, lay: Layout, optimizer: Optimizer, local: ModelShape, n: int, derived: int, block: int | None
) -> int:
    """Optimizer states (shaped like the stage's parameters, at the state width; ``block``: the stack's
    absmax block of quantized states) plus the fp32 master copy, divided over the shard group from ZeRO
    stage 1 on."""
    states = optimizer_state_bytes(optimizer, local, lay.state, block) * derived // count_params(local)
    return ceil_div(states + lay.master * n, shard_div(plan, 1))


def _grads(plan: Plan, lay: Layout, n: int) -> tuple[int, int]:
    """(gradients alive from the start of the step, gradients alive after backward) on the GPU."""
    stored = ceil_div(lay.grad * n, shard_div(plan, 2))
    if plan.offload_optimizer and plan.stage >= 2:
        stored = 0  # gradient partitions are copied to the host as they are reduced (ZeRO-Offload)
    persistent = 0
    if plan.framework is Framework.megatron or (plan.framework is Framework.deepspeed and plan.stage == 3):
        persistent = stored  # Megatron's contiguous fp32 grad buffer; ZeRO-3's partition buffer
    if plan.micro_batches > 1:
        persistent = stored
        if plan.framework is Framework.fsdp and plan.pipeline > 1:
            # pipelined FSDP2 turns gradient sync off until the last micro-batch and accumulates the
            # unsharded gradients in the reduce dtype (torch/distributed/fsdp/_fully_shard/_fsdp_param.py,
            # FSDPParam.to_accumulated_grad_if_needed)
            persistent += lay.grad * n
    return persistent, stored


def _gathered(plan: Plan, lay: Layout, shape: ModelShape, n: int, checkpointing: bool) -> tuple[int, int, int]:
    """(forward, backward) bytes of unsharded parameters (and their unit's gradients), and the elements
    gathered at once. Zero when parameters are not sharded. DeepSpeed: :mod:`vramcalc.stacks.zero3`
    (the coordinator's reuse-distance rule and prefetch, plus the persistent small parameters)."""
    if not params_sharded(plan):
        return 0, 0, 0
    if plan.framework is Framework.fsdp:
        unit, block = largest_fsdp_unit(shape, plan.tensor)
        whole = plan.pipeline > 1 or plan.fsdp is FsdpStrategy.shard_grad_op
        elements = n if whole else unit + block
        fwd = bwd = elements * lay.working
    else:
        unit = largest_tensor(shape, plan.tensor)
        local = tp_local(shape, plan.tensor)
        c, offload = zero3.coordinator_of(plan), plan.offload_params
        fwd, bwd, elements = zero3.dense_unsharded(local, lay.working, lay.param, plan.shard, offload, checkpointing, c)
    unit_grads = unit * lay.working + (unit * FP32 if lay.grad == FP32 and lay.working < FP32 else 0)
    return fwd, bwd + unit_grads, elements


def _optimizer_temps(spec: Spec, plan: Plan, lay: Layout, optimizer: Optimizer, local: ModelShape, n: int) -> int:
    """The step's temporaries on the GPU: the torch implementation's (foreach: one list the size of the
    updated shard), and DeepSpeed's fp32 copy of a 16-bit gradient partition. None when offloaded."""
    if plan.offload_optimizer:
        return 0
    updated = ceil_div((lay.master or lay.param) * n, shard_div(plan, 1))
    temps = optimizer_temp_bytes(optimizer, optimizer_impl(spec, plan), local, updated, lay.master or lay.param)
    if plan.framework is Framework.deepspeed and spec.workload.precision in MIXED and lay.grad < FP32:
        partition = ceil_div(n, shard_div(plan, 1))
        temps += FP32 * (min(partition, DEEPSPEED_SUB_GROUP) if plan.stage == 3 else partition)
    return temps


def optimizer_impl(spec: Spec, plan: Plan) -> OptimizerImpl:
    """The spec's ``optimizer_impl``; when it is not given, DeepSpeed's and Megatron-LM's own fused Adam
    (deepspeed.ops.adam.FusedAdam, Apex/Transformer Engine FusedAdam) for those frameworks, named
    explicitly or implied by ``mixed-*`` precision."""
    wl = spec.workload
    if "optimizer_impl" in wl.model_fields_set or plan.framework is Framework.fsdp:
        return wl.optimizer_impl
    section = spec.parallel
    explicit = section is not None and (
        section.zero is not None or section.distributed_optimizer is not None or section.framework is not None
    )
    return OptimizerImpl.fused if explicit or wl.precision in MIXED else wl.optimizer_impl


def _total(components: dict[str, int]) -> int:
    return sum(components.values())


def phases_of(r: RankParts) -> Phases:
    """The step's phases for one rank, moment by moment as the single-GPU estimator builds them."""
    live = {
        **r.base,
        "parameters": r.params,
        "optimizer_states": r.states,
        "gradients": r.grads_persistent,
        "communication_buffers": r.buckets,
    }
    loss = r.loss
    forward = {
        **live,
        "gathered_parameters": r.gathered_fwd,
        "autocast_weight_copies": r.copies,
        "activations": r.acts + loss.saved + loss.forward_transient,
    }
    backward = _backward(r, {**live, "gathered_parameters": r.gathered_bwd})
    end = {**live, "gradients": r.grads_stored, "communication_buffers": r.buckets + r.end_bucket}
    end["temporaries"] = r.tied_sum  # a tied LM head's two gradient contributions at their sum
    if _total(end) > _total(backward):
        backward = end
    step = {**live, "gradients": r.grads_stored, "temporaries": r.opt_temps}
    return {"forward": forward, "backward": backward, "optimizer": step}


def _backward(r: RankParts, bwd: dict[str, int]) -> dict[str, int]:
    """The larger of the backward moments: its start (activations, loss gradients) and, under
    checkpointing, the recomputation of one block; without it, the last block's backward."""
    loss = r.loss
    if r.checkpointing:
        start = {
            **bwd,
            "autocast_weight_copies": r.head_copy,
            "activations": r.acts + loss.saved,
            "temporaries": loss.backward_temporaries,
        }
        recompute = {
            **bwd,
            "autocast_weight_copies": r.head_copy + (r.copies - r.head_copy) // r.n_blocks,
            "activations": r.acts + r.layer,
            "gradients": r.grads_persistent + r.head_grads,
        }
        moments = [start, recompute]
        if r.block_moments is not None:  # the top and the bottom block's backward (vramcalc/core/checkpointing.py)
            freed, temps, grads, below, params_below = r.block_moments
            top = {**recompute, "activations": r.acts + r.layer - freed, "temporaries": temps}
            top |= {
                "gradients": top["gradients"] + grads,
                "gathered_parameters": r.gathered_fwd,
            }  # no unit gradient yet
            stored = 0 if r.grads_persistent else r.grads_stored * params_below // max(1, r.n_stage)
            moments += [top, {**top, "activations": top["activations"] - below, "gradients": top["gradients"] + stored}]
        return max(moments, key=_total)
    start = {
        **bwd,
        "autocast_weight_copies": r.copies,
        "activations": r.acts + loss.saved,
        "temporaries": loss.backward_temporaries,
    }
    last_block = {
        **bwd,
        "autocast_weight_copies": r.copies,
        "activations": r.acts - r.head,
        "gradients": r.grads_persistent + r.partial_grads,
        "temporaries": r.block_temps,
    }
    return max(start, last_block, key=_total)
