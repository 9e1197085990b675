"""Presentation of the LLM numbers: extra ``--json`` keys and lines under the estimate table.

``--json`` keys (a public contract, added only when they apply):
``kv_cache_bytes``, ``kv_cache_bytes_per_token``, ``kv_block_size``, ``context_tokens`` (inference);
with ``--gpu`` and a vLLM serving spec also ``memory_utilization``, ``kv_cache_budget_bytes``,
``kv_cache_tokens``, ``max_concurrency`` (KV tokens / context, as vLLM prints it) and
``max_concurrent_sequences`` (the largest ``batch_size`` that fits: what ``max-batch`` answers);
``trainable_params`` (adapter); ``active_params`` (experts); ``quantization`` (method and layout figures).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console

from vramcalc.core.estimate import Estimate
from vramcalc.units import GiB

if TYPE_CHECKING:
    from vramcalc.planning.budget import Budget, Fit


def llm_dict(result: Estimate, fit: Fit | None) -> dict[str, Any]:
    """The LLM keys of the ``--json`` document (empty for other workloads)."""
    info = result.llm
    if info is None:
        return {}
    doc: dict[str, Any] = {}
    if info.kv_cache_bytes_per_token is not None:
        doc["kv_cache_bytes"] = info.kv_cache_bytes or 0
        doc["kv_cache_bytes_per_token"] = info.kv_cache_bytes_per_token
        doc["kv_block_size"] = info.kv_block_size
        doc["context_tokens"] = info.context_tokens
        cap = fit.kv_pool if fit is not None else None
        if cap is not None:
            doc["memory_utilization"] = cap.memory_utilization
            doc["kv_cache_budget_bytes"] = cap.budget_bytes
            doc["kv_cache_tokens"] = cap.tokens
            doc["max_concurrency"] = cap.max_concurrency
            doc["max_concurrent_sequences"] = cap.max_sequences
    if info.trainable_params is not None:
        doc["trainable_params"] = info.trainable_params
    if info.active_params is not None:
        doc["active_params"] = info.active_params
    if info.quantization is not None:
        doc["quantization"] = dict(info.quantization)
    return doc


def render_llm(result: Estimate, console: Console, budget: Budget | None, fit: Fit | None) -> None:
    """Lines for the KV cache, its capacity on the card, trainable and active parameters."""
    info = result.llm
    if info is None:
        return
    if info.trainable_params is not None:
        total = result.params + info.trainable_params
        share = 100 * info.trainable_params / total
        console.print(
            f"trainable params: {info.trainable_params:,} || all params: {total:,} || trainable%: {share:.4f}"
        )
    if info.active_params is not None:
        console.print(f"experts: {result.params:,} parameters in total, {info.active_params:,} active per token")
    if info.quantization is not None:
        q = info.quantization
        console.print(
            f"quantized weights: {q['quantized_params']:,} params at {q['bits_per_weight']:g} bits "
            f"({q['method']}); {q['kept_params']:,} kept at the model dtype"
        )
    if info.kv_cache_bytes_per_token:
        console.print(
            f"KV cache: {info.kv_cache_bytes_per_token:,} B/token; {(info.kv_cache_bytes or 0) / GiB:,.3f} GiB "
            f"for this batch at {info.context_tokens:,} tokens of context"
        )
        cap = fit.kv_pool if fit is not None else None
        if cap is not None and budget is not None:
            console.print(
                f"{budget.gpu_name} at memory_utilization {cap.memory_utilization:g}: KV budget "
                f"{cap.budget_bytes / GiB:,.3f} GiB -> GPU KV cache size: {cap.tokens:,} tokens; "
                f"maximum concurrency for {cap.context_tokens:,} tokens per request: {cap.max_concurrency:.2f}x"
            )
