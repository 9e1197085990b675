"""Multi-GPU plans: validation and the per-rank layout of parameters, gradients and optimizer states.

Pure (no I/O, neither typer nor rich). Every figure is per GPU ("rank"), never a sum over cards.
:mod:`vramcalc.families.per_rank` turns these figures and the per-rank activations into the step's phases.

Bytes per parameter before sharding (``Layout``), by precision and framework:

=============== ============ ====== ====== ======== ======= ==========================================
precision        framework    param  grad   master   states  source
=============== ============ ====== ====== ======== ======= ==========================================
fp32             any          4      4      0        4 each  torch.optim (state dtype = param dtype)
fp16, bf16       any          2      2      0        2 each  pure 16-bit (no master copy)
amp-*            any          4      4      0        4 each  PyTorch AMP: fp32 params + 16-bit autocast copies
mixed-*          deepspeed    2      2      4        4 each  ZeRO paper (Rajbhandari et al. 2020, sec. 3.1):
                                                              2 + 2 + K with K = 12 for Adam
mixed-*          megatron     2      4      4        4 each  Megatron-LM theoretical_memory_usage.py: 18 =
                                                              bf16 param + fp32 grad + fp32 master + Adam
mixed-*          fsdp         4      4      0        4 each  FSDP MixedPrecision(param_dtype=bf16,
                                                              reduce_dtype=fp32): sharded params are fp32
=============== ============ ====== ====== ======== ======= ==========================================

Sharding over the ``shard`` group (data x context ranks; FSDP hybrid: ``shard_size``), by ZeRO stage
(Rajbhandari et al. 2020, Figure 1): stage 1 divides optimizer states (and the master copy), stage 2
also gradients, stage 3 also parameters. Mixed-precision Adam therefore costs per parameter
ZeRO-1 ``2 + 2 + 12/d``, ZeRO-2 ``2 + (2 + 12)/d``, ZeRO-3 ``(2 + 2 + 12)/d``; Megatron's distributed
optimizer (a ZeRO-1 with fp32 gradients) ``6 + 12/d``; FSDP full_shard ``(4 + 4 + 8)/d``. FSDP
``shard_grad_op`` is stage 2, ``no_shard`` stage 0, ``full_shard``/``hybrid`` stage 3.

Tensor parallelism follows Megatron-LM's splits (Shoeybi et al. 2019): Q/K/V and MLP up/gate are
column-parallel, the attention output and MLP down projections row-parallel (their biases and every
norm replicated), the token embedding and an untied LM head vocabulary-parallel (the vocabulary padded
to a multiple of ``tensor``), learned position tables replicated. One TP rank is modelled as the model
with ``heads``, ``kv_heads``, ``ffn_size`` and ``vocab_size`` divided by ``tensor`` (:func:`tp_local`).
Pipeline stages hold ``layers / pipeline`` blocks; the first stage also the embeddings, the last the
final norm and head (a tied head keeps a copy of the word embeddings there, as Megatron does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from vramcalc.choices import Architecture, Head, Mode, Precision
from vramcalc.core.params import count_params, embedding_params, head_params, layer_params, param_tensors
from vramcalc.core.shape import ModelShape
from vramcalc.errors import SpecError
from vramcalc.parallel.rules import check_shape, check_supported
from vramcalc.spec.models import Spec
from vramcalc.spec.parallel import Framework, FsdpStrategy, ParallelSpec, Schedule, check_rules
from vramcalc.units import FP32, ceil_div

MIXED = (Precision.mixed_fp16, Precision.mixed_bf16)
#: GPUs per node when ``gpus_per_node`` is not given (DGX/HGX H100 and A100 boxes): host memory per node.
DEFAULT_GPUS_PER_NODE = 8
#: DeepSpeed ZeRO defaults, in elements (deepspeed/runtime/zero/config.py; docs "ZeRO" config):
#: ``reduce_bucket_size`` (the contiguous-gradient bucket, allocated at full size) and
#: ``prefetch_bucket_size`` (ZeRO-3 parameters fetched ahead of use).
DEEPSPEED_REDUCE_BUCKET = 500_000_000
DEEPSPEED_PREFETCH_BUCKET = 50_000_000
#: ZeRO-3 steps the optimizer on sub-groups of at most ``sub_group_size`` elements (default 1e9), so its
#: fp32 gradient copy is bounded by one sub-group.
DEEPSPEED_SUB_GROUP = 1_000_000_000
#: DeepSpeed's ZeRO-3 coordinator defaults, in elements (deepspeed/runtime/zero/config.py, DeepSpeedZeroConfig):
#: ``stage3_max_live_parameters``, ``stage3_max_reuse_distance``, ``stage3_param_persistence_threshold``
#: (the defaults of ``parallel.zero3``; the coordinator itself: vramcalc/stacks/zero3.py).
DEEPSPEED_MAX_LIVE = 1_000_000_000
DEEPSPEED_REUSE_DISTANCE = 1_000_000_000
DEEPSPEED_PERSISTENCE = 100_000


@dataclass(frozen=True)
class Layout:
    """Bytes per parameter of each model-state tensor on one rank, before sharding."""

    param: int
    grad: int
    master: int
    state: int
    working: int  # the parameter as compute sees it (gathered by ZeRO-3/FSDP; 16-bit under mixed-*)


@dataclass(frozen=True)
class Plan:
    """A validated plan with every default filled in."""

    gpus: int
    data: int
    tensor: int
    pipeline: int
    context: int
    sequence_parallel: bool
    framework: Framework
    stage: int
    fsdp: FsdpStrategy | None
    shard: int
    offload_optimizer: bool
    offload_params: bool
    micro_batches: int
    schedule: Schedule
    virtual_stages: int
    reduce_bucket: int
    prefetch_bucket: int
    gpus_per_node: int
    fp32_grads: bool
    stage_layers: int = 0  # blocks on the most loaded pipeline stage (layers / pipeline, rounded up)
    offload_activations: bool = False  # DeepSpeed cpu_checkpointing: checkpointed block inputs on the host
    max_live: int = DEEPSPEED_MAX_LIVE  # ZeRO-3's parameter coordinator, in elements (vramcalc/stacks/zero3.py)
    reuse_distance: int = DEEPSPEED_REUSE_DISTANCE
    persistence: int = DEEPSPEED_PERSISTENCE
    gathers_alone: bool = False  # a DeepSpeed release before 0.9.0: ZeRO-3 gathers on one GPU too

    @property
    def whole_weights(self) -> bool:  # every rank holds each weight as its own tensor: no split, no flat shards
        return self.tensor == self.pipeline == 1 and self.stage < 3 and self.fsdp is None and not self.offload_params

    @property
    def label(self) -> str:
        """Short name of the sharding scheme, e.g. ``ZeRO-3``, ``FSDP full_shard``."""
        if self.framework is Framework.fsdp:
            return f"FSDP {(self.fsdp or FsdpStrategy.full_shard).value}"
        if self.framework is Framework.megatron:
            return "Megatron distributed optimizer" if self.stage else "Megatron (no distributed optimizer)"
        if self.stage:
            return f"ZeRO-{self.stage}"
        return "data parallel (no ZeRO)" if self.data * self.context > 1 else "no sharding"

    @property
    def summary(self) -> str:
        """One line: degrees, scheme and offload."""
        parts = [f"{self.gpus} GPUs = data {self.data} x tensor {self.tensor} x pipeline {self.pipeline}"]
        if self.context > 1:
            parts[0] += f" x context {self.context}"
        if self.gpus == 1:
            parts = ["1 GPU"]
        parts.append(self.label + (" + SP" if self.sequence_parallel else ""))
        flags = {"optimizer": self.offload_optimizer, "params": self.offload_params}
        offloaded = [k for k, on in {**flags, "activations": self.offload_activations}.items() if on]
        if offloaded:
            parts.append("offload " + "+".join(offloaded))
        if self.pipeline > 1 or self.micro_batches > 1:
            parts.append(f"{self.micro_batches} micro-batches ({self.schedule.value})")
        return ", ".join(parts)


@dataclass(frozen=True)
class ParallelDetails:
    """The plan behind a per-rank estimate, the stage reported and the host-memory figures."""

    plan: Plan
    stage: str
    stage_peaks: dict[str, int]
    params_per_rank: int
    host_bytes: int

    @property
    def host_bytes_per_node(self) -> int:
        """Host memory of one node: every rank on it holds its own offloaded share."""
        return self.host_bytes * min(self.plan.gpus, self.plan.gpus_per_node)


def resolve_plan(
    spec: Spec, shape: ModelShape, refine: Callable[[Plan], tuple[Plan, list[str]]] | None = None
) -> tuple[Plan, list[str]]:
    """The plan of ``spec`` (a one-GPU plan for ``mixed-*`` precision without a ``parallel`` section),
    checked against the model, and the notes on its defaults; raises :class:`SpecError` naming the
    ``parallel.KEY`` that fails. ``refine``: what the framework's release changes in the plan, with its notes
    (vramcalc/stacks/zero3.py)."""
    # workload.optimizer_offload on one GPU with mixed-* precision: DeepSpeed ZeRO-Offload (stage 1)
    one_gpu = {"zero": 1, "offload": {"optimizer": "cpu"}} if spec.workload.optimizer_offload == "cpu" else {}
    section = spec.parallel or ParallelSpec.model_validate(one_gpu)
    try:
        check_rules(section)
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    check_supported(spec, section)
    check_shape(spec, section, shape)
    plan, notes = _plan(section, shape)
    if refine is not None:
        plan, said = refine(plan)
        notes += said
    if section.micro_batches is None and section.pipeline > 1 and spec.workload.mode is Mode.train:
        notes.append(f"parallel.micro_batches not given: {plan.micro_batches} (= pipeline)")
    _check_micro_batches(plan)
    return plan, notes


def _plan(section: ParallelSpec, shape: ModelShape) -> tuple[Plan, list[str]]:
    """Defaults filled in: data = gpus / (tensor x pipeline x context), the shard group, buckets; with the
    note on the shard group where it is a default."""
    model_parallel = section.tensor * section.pipeline * section.context
    data = section.data or (section.gpus // model_parallel if section.gpus else 1)
    gpus = data * model_parallel
    per_node = section.gpus_per_node or min(gpus, DEFAULT_GPUS_PER_NODE)
    framework = section.resolved_framework
    group = data * section.context
    fsdp_offload = framework is Framework.fsdp and section.offload.params == "cpu"
    shard, notes = _hybrid_shard(section, group, per_node) if section.fsdp is FsdpStrategy.hybrid else (group, [])
    plan = Plan(
        gpus=gpus,
        data=data,
        tensor=section.tensor,
        pipeline=section.pipeline,
        context=section.context,
        sequence_parallel=section.sequence_parallel,
        framework=framework,
        stage=section.stage,
        fsdp=section.fsdp or (FsdpStrategy.full_shard if framework is Framework.fsdp else None),
        shard=shard,
        offload_optimizer=section.offload.optimizer == "cpu" or fsdp_offload,
        offload_params=section.offload.params == "cpu",
        offload_activations=section.offload.activations == "cpu",
        micro_batches=section.micro_batches or section.pipeline,
        schedule=section.schedule,
        virtual_stages=section.virtual_stages or 1,
        reduce_bucket=_bucket(section.buckets.reduce, DEEPSPEED_REDUCE_BUCKET, framework),
        prefetch_bucket=_bucket(section.buckets.prefetch, DEEPSPEED_PREFETCH_BUCKET, framework),
        gpus_per_node=per_node,
        fp32_grads=section.fp32_grads if section.fp32_grads is not None else framework is not Framework.deepspeed,
        stage_layers=ceil_div(shape.layers, section.pipeline),
        max_live=_given(section.zero3.max_live_parameters, DEEPSPEED_MAX_LIVE),
        reuse_distance=_given(section.zero3.max_reuse_distance, DEEPSPEED_REUSE_DISTANCE),
        persistence=_given(section.zero3.param_persistence_threshold, DEEPSPEED_PERSISTENCE),
    )
    return plan, notes


def _given(value: int | None, default: int) -> int:
    return default if value is None else value


def _bucket(given: int | None, default: int, framework: Framework) -> int:
    """DeepSpeed's bucket defaults; FSDP and Megatron communicate in place (units, grad buffers)."""
    if given is not None:
        return given
    return default if framework is Framework.deepspeed else 0


def _hybrid_shard(section: ParallelSpec, group: int, per_node: int) -> tuple[int, list[str]]:
    """FSDP hybrid's shard group: ``shard_size``, else the largest divisor of the group within a node (noted)."""
    if section.shard_size is not None:
        if group % section.shard_size:
            raise SpecError(f"parallel.shard_size: {section.shard_size} does not divide data x context ({group})")
        return section.shard_size, []
    shard = max(d for d in range(1, min(group, per_node) + 1) if group % d == 0)
    return shard, [f"parallel.shard_size not given: {shard} (FSDP hybrid shards within a node of {per_node} GPUs)"]


def _check_micro_batches(plan: Plan) -> None:
    if plan.schedule is Schedule.interleaved and plan.micro_batches % plan.pipeline:
        raise SpecError(
            f"parallel.micro_batches: {plan.micro_batches} is not a multiple of pipeline ({plan.pipeline}), "
            "as the interleaved schedule needs"
        )


def layout(precision: Precision, framework: Framework, fp32_grads: bool, param_bytes: int) -> Layout:
    """Bytes per parameter by precision and framework (the table in the module docstring)."""
    if precision not in MIXED:
        return Layout(param_bytes, param_bytes, 0, param_bytes, param_bytes)
    if framework is Framework.fsdp:
        return Layout(FP32, FP32, 0, FP32, 2)
    return Layout(2, FP32 if fp32_grads else 2, FP32, FP32, 2)


def tp_local(shape: ModelShape, tensor: int) -> ModelShape:
    """The model as one tensor-parallel rank holds it: heads, kv_heads, ffn_size split; vocabulary
    padded to a multiple of ``tensor`` and split (Megatron's vocab-parallel embedding and loss)."""
    if tensor == 1:
        return shape
    vocab = ceil_div(shape.vocab, tensor)
    return replace(
        shape,
        heads=shape.heads // tensor,
        kv_heads=max(1, shape.kv_heads // tensor),  # inference replicates KV heads when fewer than ranks
        ffn=shape.ffn // tensor,
        vocab=vocab,
    )


def stage_params(shape: ModelShape, plan: Plan, stage: str) -> int:
    """Parameters one rank of ``stage`` ("only", "first" or "last") holds before ZeRO/FSDP sharding,
    derived from the shape (Megatron's most loaded shard is the first stage: ``(L/p) layers + embedding``)."""
    local = tp_local(shape, plan.tensor)
    if plan.pipeline == 1:
        return count_params(local)
    blocks = plan.stage_layers * layer_params(local)
    if stage == "first":
        return blocks + embedding_params(local)
    tied_copy = local.vocab * local.hidden if shape.tie_embeddings and shape.head is Head.lm else 0
    return blocks + head_params(local) + tied_copy


def largest_tensor(shape: ModelShape, tensor: int) -> int:
    """Elements of the largest parameter tensor one TP rank holds: the unit DeepSpeed ZeRO-3 gathers
    (it fetches each module's parameters as the module runs; docs "Memory Requirements":
    ``largest_layer_memory = 4 * largest_layer_params``)."""
    return max(r * c for _, r, c in param_tensors(tp_local(shape, tensor)))


def largest_fsdp_unit(shape: ModelShape, tensor: int) -> tuple[int, int]:
    """(largest unit, one block) in elements for FSDP wrapped per transformer block, with the
    embeddings and the final norm + head as units of their own (torchtitan ``apply_fsdp``)."""
    local = tp_local(shape, tensor)
    block = layer_params(local)
    if shape.architecture is Architecture.encoder_decoder:
        block = max(block, layer_params(local, cross_attention=True))
    return max(block, embedding_params(local), head_params(local)), block


def deepspeed_model_states_estimate(
    n_params: int,
    largest_layer: int,
    stage: int,
    gpus_per_node: int,
    nodes: int,
    *,
    offload_optimizer: bool = False,
    offload_params: bool = False,
) -> tuple[int, int]:
    """(host bytes, GPU bytes) per DeepSpeed's own estimators, model states only: a reference line.

    Formulas of DeepSpeed's "Memory Requirements" docs (docs/code-docs/source/memory.rst;
    ``estimate_zero2_model_states_mem_needs`` / ``estimate_zero3_model_states_mem_needs``, ``zero_init``
    and ``additional_buffer_factor`` 1.5 as there). ZeRO-2: GPU ``4 P + 16 P / gpus`` (``2 P`` with
    optimizer offload). ZeRO-3: ``4 L + 18 P / gpus``; ``4 L + 2 P / gpus`` with optimizer offload;
    ``4 L`` with parameters offloaded too. They count full 16-bit gradients for ZeRO-2 and fp32
    gradients in the 18 of ZeRO-3; vramcalc's component model follows the ZeRO paper instead (see the
    README), so the two differ where these accountings do.
    """
    gpus = gpus_per_node * nodes
    opt, params = offload_optimizer, offload_params
    buffer = 1.5
    if stage == 2:
        gpu = 2 * n_params if opt else 4 * n_params + 16 * n_params // gpus
        cpu = n_params * (max(4 * gpus, 16) if opt else 4 * gpus_per_node) * buffer
        return int(cpu), int(gpu)
    layer = 4 * largest_layer
    if params:
        return int(n_params * 18 / nodes * buffer), layer
    if opt:
        return int(n_params * 16 / nodes * buffer), layer + 2 * n_params // gpus
    return int(largest_layer * 4 * gpus_per_node * buffer), layer + 18 * n_params // gpus


def offloaded_bytes(plan: Plan, lay: Layout, states: int, n: int) -> int:
    """Host bytes per rank. DeepSpeed ZeRO-Offload: fp32 master + optimizer states + fp32 gradient
    partition (the "16" of DeepSpeed's estimators), plus the 16-bit parameter partition when parameters
    are offloaded (their "18"). FSDP CPUOffload: sharded parameters, gradients and optimizer states."""
    shard = ceil_div(n, plan.shard)
    host = lay.param * shard if plan.offload_params else 0
    if plan.offload_optimizer:
        host += states + (lay.grad * shard if plan.framework is Framework.fsdp else FP32 * shard)
    return host
