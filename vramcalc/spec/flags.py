"""The workload keys a command's flags give: :class:`WorkloadFlags`, typed, each None where the flag is not
given. With a spec file they override its keys (:func:`vramcalc.spec.load.override_workload`); with a model
alone (``--model``) or a transformers config they are the workload. A TypedDict, for the type checker only:
at run time the flags are a plain dict, and this module is not imported."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from vramcalc.choices import (
        Attention,
        Checkpointing,
        KvCacheDtype,
        Mode,
        Optimizer,
        OptimizerImpl,
        Precision,
        Runtime,
    )


class WorkloadFlags(TypedDict):
    """Workload keys from the command line (None: not given). ``quantization`` and ``adapter`` hold what the
    flag's text reads as: a method or type name, or a mapping of the section's keys."""

    batch_size: int | None
    seq_len: int | None
    precision: Precision | str | None  # a Precision, or pure-fp16/pure-bf16 (vramcalc.spec.models.PURE_PRECISIONS)
    optimizer: Optimizer | None
    mode: Mode | None
    target_len: int | None
    optimizer_impl: OptimizerImpl | None
    gradient_checkpointing: Checkpointing | None
    attention: Attention | None
    image_size: int | None
    channels: int | None
    images: int | None
    image_resolution: list[int] | None
    prompt_len: int | None
    max_new_tokens: int | None
    use_cache: bool | None
    runtime: Runtime | None
    kv_cache_dtype: KvCacheDtype | None
    kv_block_size: int | None
    memory_utilization: float | None
    quantization: dict[str, Any] | None
    adapter: dict[str, Any] | None
