"""The optional ``parallel`` section of a spec: how one training or inference job is spread
over several GPUs. Kept apart from :mod:`vramcalc.spec.models` (which imports it), like :mod:`vramcalc.spec.llm`.

    parallel:
      gpus: 16                 # total; default: the product of the degrees
      data: 8                  # data-parallel degree; default: gpus / (tensor x pipeline x context)
      tensor: 2                # Megatron-style tensor parallelism (column/row splits)
      pipeline: 1              # pipeline stages
      context: 1               # context parallelism (the sequence split across ranks; torchtitan, Megatron)
      sequence_parallel: true  # Megatron sequence parallelism (needs tensor > 1)
      zero: 3                  # DeepSpeed ZeRO stage 0 | 1 | 2 | 3 ...
      fsdp: full_shard         # ... or PyTorch FSDP: full_shard | shard_grad_op | no_shard | hybrid
      distributed_optimizer: true  # ... or Megatron-LM's distributed optimizer (framework: megatron)
      offload: {optimizer: cpu, params: none, activations: none}
      micro_batches: 8         # micro-batches per step (pipeline schedule / gradient accumulation)
      schedule: 1f1b           # 1f1b | gpipe | interleaved (with virtual_stages)
      uneven_pipeline: false   # true: layers need not divide evenly; stages hold up to ceil(layers / pipeline)
      buckets: {reduce: 500M, prefetch: 50M}   # communication buckets, in elements
      zero3: {max_live_parameters: 1B, max_reuse_distance: 1B, param_persistence_threshold: 100K}

The key names are a public contract, like every spec key. Rules that need the resolved model shape
(heads divisible by ``tensor`` and so on) are checked by :func:`vramcalc.parallel.layout.resolve_plan`.
"""

# Annotations are evaluated when defined (no `from __future__ import annotations`): pydantic would
# otherwise parse each field's annotation string while it builds the models, on every start.

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator

from vramcalc.spec.section import SpecSection
from vramcalc.spec.target import MAX_GPU_COUNT
from vramcalc.units import ParamCount

Degree = Annotated[int, Field(strict=True, gt=0, le=MAX_GPU_COUNT)]
BucketCount = Annotated[ParamCount, Field(ge=0, le=10**12)]


class Framework(StrEnum):
    """Whose memory layout the per-rank model follows (see vramcalc/parallel/layout.py)."""

    deepspeed = "deepspeed"
    fsdp = "fsdp"
    megatron = "megatron"


class FsdpStrategy(StrEnum):
    """PyTorch FSDP sharding strategies (torch.distributed.fsdp.ShardingStrategy)."""

    full_shard = "full_shard"
    shard_grad_op = "shard_grad_op"
    no_shard = "no_shard"
    hybrid = "hybrid"


class Schedule(StrEnum):
    """Pipeline schedules: how many micro-batches' activations the first stage keeps."""

    one_f_one_b = "1f1b"
    gpipe = "gpipe"
    interleaved = "interleaved"


class Offload(SpecSection):
    """What lives in host memory instead of on the GPU (DeepSpeed ZeRO-Offload, FSDP CPUOffload)."""

    model_config = ConfigDict(defer_build=True)  # built when a spec first gives the section

    optimizer: Literal["cpu", "none"] = "none"
    params: Literal["cpu", "none"] = "none"
    # DeepSpeed activation_checkpointing.cpu_checkpointing: the checkpointed block inputs in host memory
    activations: Literal["cpu", "none"] = "none"


class Buckets(SpecSection):
    """Communication buckets, in elements (DeepSpeed's unit: ``reduce_bucket_size``,
    ``prefetch_bucket_size``). Omitted: the framework's default (vramcalc/parallel/layout.py)."""

    model_config = ConfigDict(defer_build=True)  # built when a spec first gives the section

    reduce: BucketCount | None = None
    prefetch: BucketCount | None = None


class Zero3(SpecSection):
    """DeepSpeed ZeRO-3's parameter coordinator, in elements (``stage3_max_live_parameters``,
    ``stage3_max_reuse_distance``, ``stage3_param_persistence_threshold``). Omitted: DeepSpeed's
    defaults, 1e9, 1e9 and 1e5 (vramcalc/stacks/zero3.py)."""

    model_config = ConfigDict(defer_build=True)  # built when a spec first gives the section

    max_live_parameters: BucketCount | None = None
    max_reuse_distance: BucketCount | None = None
    param_persistence_threshold: BucketCount | None = None


class ParallelSpec(SpecSection):
    """How the job is spread over GPUs. Every key is optional; one GPU with no sharding is the default."""

    model_config = ConfigDict(defer_build=True)  # built when a spec first gives the section

    gpus: Degree | None = None
    data: Degree | None = None
    tensor: Degree = 1
    pipeline: Degree = 1
    context: Degree = 1
    sequence_parallel: bool = False
    framework: Framework | None = None
    zero: Literal[0, 1, 2, 3] | None = None
    fsdp: FsdpStrategy | None = None
    shard_size: Degree | None = None
    distributed_optimizer: bool | None = None
    fp32_grads: bool | None = None
    offload: Offload = Offload()
    micro_batches: Degree | None = None
    schedule: Schedule = Schedule.one_f_one_b
    virtual_stages: Degree | None = None
    uneven_pipeline: bool = False
    buckets: Buckets = Buckets()
    zero3: Zero3 = Zero3()
    gpus_per_node: Degree | None = None
    #: How the GPUs of a node talk, which sets NCCL's channels (vramcalc/stacks/nccl.py): ``nvswitch``, an
    #: HGX/DGX board where every GPU pair has NVLink; ``pcie``, GPUs without NVLink.
    interconnect: Literal["nvswitch", "pcie"] | None = None  # None: the card's (nvswitch without one)

    @field_validator("fsdp", mode="before")
    @classmethod
    def _fsdp_aliases(cls, value: object) -> object:
        aliases = {"hybrid_shard": "hybrid", "full-shard": "full_shard", "shard-grad-op": "shard_grad_op"}
        return aliases.get(value, value) if isinstance(value, str) else value

    @property
    def resolved_framework(self) -> Framework:
        """fsdp key -> FSDP; distributed_optimizer key -> Megatron-LM; else the framework key or DeepSpeed."""
        if self.fsdp is not None:
            return Framework.fsdp
        if self.distributed_optimizer is not None:
            return Framework.megatron
        return self.framework or Framework.deepspeed

    @property
    def stage(self) -> int:
        """ZeRO stage equivalent: 1 shards optimizer states, 2 also gradients, 3 also parameters."""
        if self.fsdp is not None:
            return {"full_shard": 3, "hybrid": 3, "shard_grad_op": 2, "no_shard": 0}[self.fsdp.value]
        if self.resolved_framework is Framework.megatron:
            return 1 if self.distributed_optimizer else 0
        if self.resolved_framework is Framework.fsdp:
            return 3
        return self.zero or 0


def check_rules(plan: ParallelSpec) -> None:
    """Rules between the keys of one ``parallel`` section; raises ValueError("parallel.KEY: ...").

    Called by :func:`vramcalc.parallel.layout.resolve_plan` (with the rules that need the model shape), so
    every message names its key as ``parallel.KEY`` whichever rule fails.
    """
    _degree_rules(plan)
    _sharding_rules(plan)


def _degree_rules(p: ParallelSpec) -> None:
    model_parallel = p.tensor * p.pipeline * p.context
    if p.data is not None and p.gpus is not None and p.data * model_parallel != p.gpus:
        raise ValueError(
            f"parallel.gpus: {p.gpus} is not data x tensor x pipeline x context "
            f"({p.data} x {p.tensor} x {p.pipeline} x {p.context} = {p.data * model_parallel})"
        )
    if p.gpus is not None and p.gpus % model_parallel:
        raise ValueError(f"parallel.gpus: {p.gpus} is not a multiple of tensor x pipeline x context ({model_parallel})")
    if p.sequence_parallel and p.tensor == 1:
        raise ValueError("parallel.sequence_parallel: needs tensor > 1 (it splits the sequence over the TP ranks)")
    if p.virtual_stages is not None and p.schedule is not Schedule.interleaved:
        raise ValueError("parallel.virtual_stages: only valid with schedule: interleaved")
    if p.schedule is Schedule.interleaved and (p.pipeline == 1 or p.virtual_stages is None):
        raise ValueError("parallel.schedule: interleaved needs pipeline > 1 and virtual_stages")


def _sharding_rules(p: ParallelSpec) -> None:
    framework = p.resolved_framework
    if p.fsdp is not None and (p.zero is not None or p.distributed_optimizer is not None):
        raise ValueError("parallel.fsdp: give one of zero, fsdp and distributed_optimizer")
    if p.zero is not None and p.distributed_optimizer is not None:
        raise ValueError("parallel.zero: give one of zero, fsdp and distributed_optimizer")
    if p.framework is not None and framework is not p.framework:
        raise ValueError(f"parallel.framework: {p.framework.value} does not match the keys given")
    if p.zero is not None and framework is not Framework.deepspeed:
        raise ValueError(f"parallel.zero: ZeRO stages are DeepSpeed's; framework is {framework.value}")
    if p.zero3.model_fields_set and (framework is not Framework.deepspeed or p.stage != 3):
        raise ValueError("parallel.zero3: only valid with zero: 3 (DeepSpeed's stage-3 parameter coordinator)")
    if p.shard_size is not None and p.fsdp is not FsdpStrategy.hybrid:
        raise ValueError("parallel.shard_size: only valid with fsdp: hybrid")
    if p.zero is not None and p.zero >= 2 and p.pipeline > 1:
        raise ValueError(
            f"parallel.zero: ZeRO-{p.zero} is incompatible with pipeline parallelism in DeepSpeed (use zero 0 or 1)"
        )
    _offload_rules(p)


def _offload_rules(p: ParallelSpec) -> None:
    params, optimizer = p.offload.params == "cpu", p.offload.optimizer == "cpu"
    if params and p.stage < 3:
        raise ValueError("parallel.offload.params: needs sharded parameters (zero: 3 or fsdp: full_shard/hybrid)")
    if optimizer and p.resolved_framework is Framework.deepspeed and p.stage == 0:
        raise ValueError("parallel.offload.optimizer: needs zero 1, 2 or 3 (ZeRO-Offload)")
    if optimizer and p.resolved_framework is Framework.fsdp and not params:
        raise ValueError(
            "parallel.offload.optimizer: FSDP offloads the optimizer only with the parameters (offload.params: cpu)"
        )
    if optimizer and p.resolved_framework is Framework.megatron:
        raise ValueError("parallel.offload.optimizer: not modelled for Megatron-LM")
    if p.offload.activations == "cpu" and p.resolved_framework is not Framework.deepspeed:
        raise ValueError("parallel.offload.activations: DeepSpeed's cpu_checkpointing (needs the DeepSpeed framework)")
