"""Bytes as text: the component labels and GiB with three decimals, shared by every renderer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vramcalc.units import GiB

if TYPE_CHECKING:  # the catalog and NVML modules load only when a card is named
    pass


LABELS = {
    "parameters": "parameters",
    "gradients": "gradients",
    "optimizer_states": "optimizer states",
    "activations": "activations",
    "inputs": "inputs",
    "autocast_weight_copies": "autocast weight copies",
    "temporaries": "temporaries",
    "workspace": "cuBLAS workspace",
    "kv_cache": "KV cache",
    "gathered_parameters": "gathered parameters",
    "communication_buffers": "communication buffers",
    "cuda_context": "CUDA context",
    "allocator_reserve": "allocator reserve",
}


def gib(n_bytes: int) -> str:
    return f"{n_bytes / GiB:,.3f}"
