"""What an LLM estimate reports beyond its component table: the KV cache and its pool, an adapter's trainable
parameters, a MoE's active parameters, the quantization's layout."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vramcalc.llm.kvcache import KvPool


@dataclass(frozen=True)
class LlmDetails:
    """Numbers beyond the component table (None where they do not apply)."""

    kv_cache_bytes: int | None = None
    kv_cache_bytes_per_token: int | None = None
    kv_block_size: int | None = None
    context_tokens: int | None = None
    memory_utilization: float | None = None
    non_kv_peak_bytes: int | None = None
    trainable_params: int | None = None
    #: Frozen parameters an adapter adds to the model's (AdaLoRA's ``ranknum``, one per adapted linear;
    #: LoRA-FA's lora_A matrices).
    frozen_adapter_params: int = 0
    active_params: int | None = None
    quantization: dict[str, Any] | None = None
    kv_pool: KvPool | None = None  # vLLM serving: what its KV pool depends on
    #: A LoRA step's paged optimizer states in CUDA managed memory (None: counted on the GPU, other PEFT methods).
    paged_optimizer_bytes: int | None = 0
