"""The workload keys a command's flags give: :class:`WorkloadFlags`, typed, each None where the flag is not
given. With a spec file they override its keys (:func:`vramcalc.spec.load.override_workload`); with a model
alone (``--model``) or a transformers config they are the workload."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from vramcalc.choices import Attention, Checkpointing, KvCacheDtype, Mode, Optimizer, OptimizerImpl, Precision, Runtime


@dataclass(frozen=True)
class WorkloadFlags:
    """Workload keys from the command line (None: not given). ``quantization`` and ``adapter`` hold what the
    flag's text reads as: a method or type name, or a mapping of the section's keys."""

    batch_size: int | None = None
    seq_len: int | None = None
    precision: Precision | None = None
    optimizer: Optimizer | None = None
    mode: Mode | None = None
    target_len: int | None = None
    optimizer_impl: OptimizerImpl | None = None
    gradient_checkpointing: Checkpointing | None = None
    attention: Attention | None = None
    image_size: int | None = None
    channels: int | None = None
    prompt_len: int | None = None
    max_new_tokens: int | None = None
    use_cache: bool | None = None
    runtime: Runtime | None = None
    kv_cache_dtype: KvCacheDtype | None = None
    kv_block_size: int | None = None
    memory_utilization: float | None = None
    quantization: dict[str, Any] | None = None
    adapter: dict[str, Any] | None = None

    def given(self) -> dict[str, Any]:
        """The keys given, in the order of the workload's flags."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}
