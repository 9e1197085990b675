"""LoRA and QLoRA training across GPUs: one data-parallel rank under DDP, DeepSpeed ZeRO or FSDP. Pure.

Every rank runs the single-GPU LoRA step on its own micro-batch (:func:`vramcalc.families.llm.adapter_phases`:
the same activations, gradient checkpointing, bitsandbytes release rules and dequantization buffers) and
holds its share of the model states, divided as for dense training (:mod:`vramcalc.families.per_rank`):

* **frozen base**: whole on every rank under DDP and ZeRO-1/2; divided over the shard group under ZeRO-3
  and FSDP (full_shard, hybrid; shard_grad_op at rest). A bitsandbytes 4-bit base is divided as its packed
  pairs, which FSDP and ZeRO-3 can flatten only when they are stored in a float dtype
  (``bnb_4bit_quant_storage``, bf16 in FSDP-QLoRA: bitsandbytes docs "FSDP-QLoRA", "FSDP only supports
  sharding float data types"); same bytes, only the element type changes. The quantization statistics
  (absmax, with double quantization the 8-bit absmax and its fp32 scales) are no parameters: each
  ``Linear4bit`` keeps its ``QuantState`` (bitsandbytes ``fix_4bit_weight_quant_state_from_module``,
  "the quant state got lost when the parameter got converted. This happens for example for fsdp"), so
  they stay whole on every rank, on the GPU.
* **unsharded working set** (ZeRO-3, FSDP), at the stored (quantized) bytes. FSDP as the Hugging Face
  stack wraps a PEFT model (PEFT ``fsdp_auto_wrap_policy``: a unit per decoder layer and per trainable
  LoRA linear; the embeddings, final norm and LM head are left to the root unit, which FSDP does not
  reshard after forward: torch ``_post_forward_reshard``, "Do not free the root's parameters in the
  post-forward"): the root plus the running block in forward, plus the prefetched next block in
  backward (``BackwardPrefetch.BACKWARD_PRE``); ``shard_grad_op`` keeps the whole base gathered
  between forward and backward. DeepSpeed: its parameter coordinator replayed on the frozen base
  (:mod:`vramcalc.stacks.zero3`: reuse distance, prefetch, persistence), a 4-bit linear counted in
  elements of its float storage, with the persistent norms, biases and small LoRA matrices whole.
* **adapters**: weights, gradients and optimizer states divided from ZeRO stage 3, 2 and 1 on (FSDP:
  full_shard / hybrid all three, shard_grad_op gradients and states), with the single-GPU dtypes (PEFT
  keeps fp32 adapters on a 16-bit base). DeepSpeed's contiguous gradient bucket is
  ``reduce_bucket_size`` elements of the trainable parameters' dtype (ZeRO-3 ``stage3.py``:
  ``torch.empty(self.reduce_bucket_size, dtype=self.dtype)``), allocated whatever their number.
* **offload**: ``offload.params: cpu`` (FSDP ``CPUOffload(offload_params=True)``, ZeRO-3
  ``offload_param``) moves the rank's shard of the base and of the adapters to host memory; the
  optimizer's states (and, from stage 2, its gradient partitions) go with ``offload.optimizer: cpu``, as
  FSDP's CPU offload always does. The quantization statistics stay on the GPU.
* **prepare_model_for_kbit_training**: TRL's SFTTrainer does not call it for a 4-bit base loaded for
  FSDP or ZeRO-3 ("one should never call peft_module_casting_to_bf16 or prepare_model_for_kbit_training
  when doing QLoRA + FSDP / DS-Zero3", trl/trainer/sft_trainer.py), so ``adapter.prepare_kbit`` defaults
  to false there: embeddings and norms stay 16-bit and gradient checkpointing is what the spec says.

Refused with one line naming the key: tensor, pipeline and context parallelism, Megatron-LM, ``mixed-*``
precision, and sharding (ZeRO-3, FSDP) a base stored as integers (LLM.int8, GPTQ, AWQ, int4, fp8, GGUF,
or 4-bit with ``quant_storage: uint8``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import vramcalc.families.llm as llm
from vramcalc.choices import AdapterType, Checkpointing
from vramcalc.core.allocator import weights_rounding_bytes
from vramcalc.core.params import layer_params
from vramcalc.core.stack import Stack
from vramcalc.core.workload import ResolvedWorkload, input_bytes, workspace_bytes
from vramcalc.errors import SpecError
from vramcalc.families.estimate import Estimate, assemble
from vramcalc.families.per_rank import params_sharded, shard_div, with_nccl
from vramcalc.families.resolve import resolve_workload
from vramcalc.families.target import Target
from vramcalc.llm import adapters, quantization
from vramcalc.parallel.layout import FP32, MIXED, ParallelDetails, Plan, resolve_plan
from vramcalc.spec.llm import BNB_4BIT
from vramcalc.spec.models import Spec
from vramcalc.spec.parallel import Framework, FsdpStrategy
from vramcalc.stacks import zero3
from vramcalc.stacks.registry import technique_notes
from vramcalc.units import ceil_div

Phases = dict[str, dict[str, int]]

#: Bytes per element of bitsandbytes' ``quant_storage`` choices.
STORAGE_BYTES = {"uint8": 1, "bf16": 2, "fp16": 2, "fp32": 4}
#: The storage assumed for a sharded 4-bit base when ``quant_storage`` is not given (FSDP-QLoRA's).
SHARDED_STORAGE = "bf16"


@dataclass(frozen=True)
class FrozenBase:
    """The frozen base's bytes as sharding treats them (whole-model figures, before division)."""

    sharded: int  # what ZeRO-3 / FSDP divide: the packed 4-bit pairs and every unquantized tensor
    replicated: int  # the 4-bit quantization statistics, whole on every rank
    block: int  # one decoder block as stored: FSDP's unit
    root: int  # embeddings, final norm and LM head: FSDP's root unit
    storage: int  # bytes per element of the sharded storage (DeepSpeed counts elements)
    kept_width: int = 2  # bytes per element of the tensors left unquantized
    quantized: bool = False  # the blocks' linears are bitsandbytes 4-bit, packed into ``storage``


@dataclass(frozen=True)
class RankStates:
    """What one rank holds of the model states (int bytes)."""

    params: int
    states: int
    grads: int  # after backward, on the GPU
    persistent_grads: int  # from the start of the step (ZeRO-3's partitions, gradient accumulation)
    gathered_fwd: int
    gathered_bwd: int
    bucket: int
    opt_temps: int
    host: int


def estimate(spec: Spec, stack: Stack, target: Target) -> Estimate:
    """One rank of a LoRA / QLoRA training job across GPUs, NCCL's buffers among its overhead."""
    phases, n_params, assumptions, ranked, details = adapter_rank_estimate(spec, stack, target.hopper_or_newer)
    result = replace(assemble(spec, n_params, phases, assumptions, stack), parallel=ranked, llm=details)
    return with_nccl(result, spec, target)


def adapter_rank_estimate(
    spec: Spec, stack: Stack, hopper_or_newer: bool
) -> tuple[Phases, int, list[str], ParallelDetails, Any]:
    """Phases of one rank of a LoRA / QLoRA training job across GPUs, the model's parameter count,
    assumptions, plan details and the LLM details (trainable parameters, quantization)."""
    wl = spec.workload
    if wl.adapter is None:
        raise SpecError("workload.quantization: training quantized weights needs an adapter (QLoRA: adapter + nf4)")
    if wl.precision in MIXED:
        raise SpecError(
            f"workload.precision: {wl.precision.value} is not modelled with workload.adapter "
            "(LoRA keeps its own dtypes: use bf16, fp16 or amp-bf16)"
        )
    work = resolve_workload(spec, stack)
    plan, plan_notes = resolve_plan(spec, work.shape, zero3.release_refinement(spec))
    check_adapter_plan(spec, plan)
    sharded, said = sharded_defaults(spec, plan)
    notes = [f"per GPU: {plan.summary}", *work.notes, *technique_notes(wl), *plan_notes, *said]
    work = replace(work, spec=sharded)
    base = {
        "parameters": work.n_params * work.dtypes.param,
        "inputs": input_bytes(work.shape, work.tokens, wl.mode, 0, work.dtypes.param),
        "workspace": workspace_bytes(wl.mode, hopper_or_newer),
    }
    if plan.whole_weights and stack.loads_plain_weights:  # the weights' whole blocks (vramcalc/core/allocator.py)
        base["allocator_rounding"] = weights_rounding_bytes(work.shape, work.dtypes.param)
    if not hopper_or_newer:
        notes.append("cuBLAS workspace 8.125 MiB per handle (pre-Hopper GPU)")
    phases, details, said = llm.llm_phases(work, base)
    notes += said
    trainable = details.trainable_params or 0
    adapter_bytes = trainable * adapters.adapter_bytes_per_param(wl.adapter, work.dtypes)
    frozen_total = phases["forward"]["parameters"] - adapter_bytes
    frozen = frozen_base(work, frozen_total, details.quantization)
    rank = rank_states(plan, frozen, frozen_total, adapter_bytes, trainable, phases)
    if params_sharded(plan) and plan.framework is Framework.deepspeed:
        rank = replace(rank, **zero3_gathered(work, plan, frozen, adapter_bytes, trainable))
    if params_sharded(plan) and frozen.replicated:
        notes.append(
            f"4-bit quantization statistics (absmax): {frozen.replicated:,} B whole on every GPU (bitsandbytes keeps "
            "them on each Linear4bit, outside the sharded parameters)"
        )
    if params_sharded(plan) and plan.framework is Framework.fsdp:
        notes.append(
            "FSDP units as PEFT's fsdp_auto_wrap_policy wraps them: one per decoder layer; the embeddings, final "
            "norm and LM head form the root unit, which stays unsharded through forward and backward"
        )
    out = rank_phases(phases, rank, plan)
    peak = max(sum(c.values()) for c in out.values())
    return out, work.n_params, notes, ParallelDetails(plan, "only", {"only": peak}, work.n_params, rank.host), details


def check_adapter_plan(spec: Spec, plan: Plan) -> None:
    """What the per-rank LoRA model does not cover is refused, naming the key."""
    for key, degree in (("tensor", plan.tensor), ("pipeline", plan.pipeline), ("context", plan.context)):
        if degree > 1:
            raise SpecError(
                f"parallel.{key}: not modelled with workload.adapter in training (data parallel, ZeRO and FSDP are)"
            )
    if plan.framework is Framework.megatron:
        raise SpecError("parallel.distributed_optimizer: Megatron-LM is not modelled with workload.adapter")
    if plan.offload_activations:
        raise SpecError("parallel.offload.activations: not modelled with workload.adapter")
    q = spec.workload.quantization
    if q is None or not params_sharded(plan):
        return
    if q.method not in BNB_4BIT:
        raise SpecError(
            f"workload.quantization: {q.method.value} weights are integer tensors that {plan.label} cannot shard; "
            "use nf4/fp4 (bf16 quant_storage), or zero <= 2 / fsdp: no_shard"
        )
    if q.quant_storage == "uint8":
        raise SpecError(
            f"workload.quantization.quant_storage: uint8 cannot be sharded by {plan.label} (it flattens float "
            "tensors only); use bf16 as FSDP-QLoRA does"
        )


def sharded_defaults(spec: Spec, plan: Plan) -> tuple[Spec, list[str]]:
    """The spec with the defaults of a sharded 4-bit base filled in: ``quant_storage`` bf16 and
    ``prepare_kbit`` false (TRL skips prepare_model_for_kbit_training there); with a note on each."""
    wl = spec.workload
    q, adapter = wl.quantization, wl.adapter
    if q is None or adapter is None or q.method not in BNB_4BIT or not params_sharded(plan):
        return spec, []
    notes: list[str] = []
    if q.quant_storage is None:
        notes.append(
            f"quantization.quant_storage not given: {SHARDED_STORAGE} ({plan.label} shards float tensors only; "
            "FSDP-QLoRA's bnb_4bit_quant_storage)"
        )
        q = q.model_copy(update={"quant_storage": SHARDED_STORAGE})
    if adapter.prepare_kbit is None and not adapters.is_litgpt(adapter):
        notes.append(
            f"adapter.prepare_kbit not given: false (TRL's SFTTrainer skips prepare_model_for_kbit_training for a "
            f"4-bit base sharded by {plan.label}: embeddings and norms stay 16-bit)"
        )
        adapter = adapter.model_copy(update={"prepare_kbit": False})
    return spec.model_copy(update={"workload": wl.model_copy(update={"quantization": q, "adapter": adapter})}), notes


def frozen_base(work: ResolvedWorkload, frozen_total: int, qinfo: dict[str, Any] | None) -> FrozenBase:
    """Split the frozen base (``frozen_total`` bytes: weights, plus any prepare_kbit upcast) into what
    ZeRO-3 / FSDP divide and what stays whole, with FSDP's and DeepSpeed's gathering units."""
    shape, q = work.shape, work.spec.workload.quantization
    weights = (
        work.n_params * work.dtypes.param if qinfo is None else int(qinfo["quantized_bytes"] + qinfo["kept_bytes"])
    )
    kept_width = FP32 if frozen_total > weights else work.dtypes.param  # prepare_kbit upcasts the kept tensors
    layers = max(1, shape.layers)
    if q is None or q.method not in BNB_4BIT:
        block = layer_params(shape) * kept_width
        root = max(0, frozen_total - layers * block)
        return FrozenBase(frozen_total, 0, block, root, kept_width, kept_width)
    blocks = quantization.linear_groups(shape, q)[0]
    packed_blocks = sum(m.count * ceil_div(m.out * m.inp, 2) for m in blocks)
    quant_blocks = sum(m.count * m.out * m.inp for m in blocks)
    matrices = quantization.quantized_matrices(shape, q)
    packed = sum(m.count * ceil_div(m.out * m.inp, 2) for m in matrices)
    stats = int(qinfo["quantized_bytes"]) - packed if qinfo is not None else 0
    sharded = frozen_total - stats
    block = (packed_blocks + max(0, layer_params(shape) * layers - quant_blocks) * kept_width) // layers
    storage = STORAGE_BYTES[q.quant_storage or "uint8"]
    root = max(0, sharded - layers * block)
    return FrozenBase(sharded, stats, block, root, storage, kept_width, quantized=True)


def rank_states(
    plan: Plan, frozen: FrozenBase, frozen_total: int, adapter_bytes: int, trainable: int, phases: Phases
) -> RankStates:
    """One rank's share of the base, the adapters, their gradients and optimizer states, its gathered
    working set, DeepSpeed's bucket, the optimizer's temporaries and the host bytes."""
    sharded = params_sharded(plan)
    if sharded:
        on_rank = ceil_div(frozen.sharded, plan.shard) + ceil_div(adapter_bytes, plan.shard)
        params, host = frozen.replicated + on_rank, 0
    else:
        on_rank, params, host = frozen_total + adapter_bytes, frozen_total + adapter_bytes, 0
    if plan.offload_params:
        params, host = frozen.replicated, on_rank
    states = ceil_div(phases["forward"]["optimizer_states"], shard_div(plan, 1))
    grads = ceil_div(adapter_bytes, shard_div(plan, 2))
    if plan.offload_optimizer:
        fsdp = plan.framework is Framework.fsdp
        host += states + (grads if fsdp else FP32 * ceil_div(trainable, shard_div(plan, 2)))
        states = 0
        if plan.stage >= 2:
            grads = 0  # gradient partitions go to the host as they are reduced
    persistent = grads if plan.micro_batches > 1 or (plan.framework is Framework.deepspeed and plan.stage == 3) else 0
    temps = 0 if plan.offload_optimizer else ceil_div(phases["optimizer"].get("temporaries", 0), shard_div(plan, 1))
    uses_bucket = plan.framework is Framework.deepspeed and (plan.stage >= 1 or plan.data > 1)
    bucket = plan.reduce_bucket * (adapter_bytes // max(1, trainable)) if uses_bucket else 0
    fwd, bwd = gathered(plan, frozen) if sharded and plan.framework is Framework.fsdp else (0, 0)
    return RankStates(params, states, grads, persistent, fwd, bwd, bucket, temps, host)


def gathered(plan: Plan, frozen: FrozenBase) -> tuple[int, int]:
    """(forward, backward) bytes of unsharded frozen parameters on one rank under FSDP (module docstring;
    DeepSpeed: :func:`zero3_gathered`)."""
    if plan.fsdp is FsdpStrategy.shard_grad_op:
        return frozen.sharded, frozen.sharded
    return frozen.root + frozen.block, frozen.root + 2 * frozen.block


def zero3_gathered(
    work: ResolvedWorkload, plan: Plan, frozen: FrozenBase, adapter_bytes: int, trainable: int
) -> dict[str, int]:
    """DeepSpeed ZeRO-3's unsharded bytes on one rank: the frozen base as the parameter coordinator holds
    it (:mod:`vramcalc.stacks.zero3`; a 4-bit linear counted in elements of its float storage), plus the
    persistent tensors, whole on every rank: the base's norms and biases and the LoRA matrices of at most
    ``param_persistence_threshold`` elements (and, offloaded, their partitions, which stay on the GPU)."""
    c = zero3.coordinator_of(plan)
    if c.in_place:  # one GPU, DeepSpeed 0.9 or later, nothing offloaded: no gather (vramcalc/stacks/zero3.py)
        return {"gathered_fwd": 0, "gathered_bwd": 0}
    shape, wl = work.shape, work.spec.workload

    def module(key: int, n: int) -> zero3.Module:  # embeddings and head: never quantized by bitsandbytes
        return zero3.Module(key, n, n * frozen.kept_width)

    def linear(key: int, out: int, inp: int) -> zero3.Module:
        if not frozen.quantized:
            return module(key, out * inp)
        n = zero3.packed_numel(out, inp, frozen.storage)
        return zero3.Module(key, n, n * frozen.storage)

    # PEFT / the Trainer make the embeddings' output require a gradient under gradient checkpointing
    # (enable_input_require_grads), so DeepSpeed gathers them in backward only then
    ckpt = wl.gradient_checkpointing is Checkpointing.full
    segments = zero3.model_segments(shape, module, checkpointing=ckpt, embeddings_in_backward=ckpt, linear_of=linear)
    peaks = zero3.gathered_peaks(segments, c)
    whole = peaks.persistent + zero3.persistent_vectors(shape, c.persistence) * frozen.kept_width
    whole += _persistent_adapter_params(work, c.persistence) * (adapter_bytes // max(1, trainable))
    whole += ceil_div(whole, plan.shard) if plan.offload_params else 0
    return {"gathered_fwd": whole + peaks.forward, "gathered_bwd": whole + peaks.backward}


def _persistent_adapter_params(work: ResolvedWorkload, threshold: int) -> int:
    """Elements of the LoRA matrices (lora_A: rank x in, lora_B: out x rank) small enough to persist."""
    adapter = work.spec.workload.adapter
    if adapter is None or adapter.type not in (AdapterType.lora, AdapterType.lora_fa):
        return 0
    targets, _ = adapters.resolve_targets(work.shape, adapter)
    matrices = adapters.lora_matrices(work.shape, targets, adapters.is_litgpt(adapter))
    return sum(n * r * c for n, r, c in adapters.adapter_tensors(matrices, adapter.rank or 0) if r * c <= threshold)


def rank_phases(phases: Phases, r: RankStates, plan: Plan) -> Phases:
    """The single-GPU phases with the model states replaced by one rank's."""
    out: Phases = {}
    for name, comps in phases.items():
        c = {**comps, "parameters": r.params, "optimizer_states": r.states}
        if name == "optimizer":
            c |= {"gradients": r.grads, "temporaries": r.opt_temps}
        else:
            c["gathered_parameters"] = r.gathered_fwd if name == "forward" else r.gathered_bwd
            c["gradients"] = r.grads if "gradients" in comps else r.persistent_grads
        # ZeRO-1..3 keep the bucket through the step; stage 0 all-reduces at the end of backward
        c["communication_buffers"] = r.bucket if plan.stage >= 1 or name != "forward" else 0
        out[name] = c
    return out
