"""Presentation of the LLM numbers: the lines under the estimate table (KV cache, its capacity on the
card, trainable and active parameters, quantization). Their ``--json`` keys are fields of
:class:`vramcalc.results.estimate.EstimateResult`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

from vramcalc.families.estimate import Estimate
from vramcalc.render.text import print_wrapped
from vramcalc.units import GiB

if TYPE_CHECKING:
    from vramcalc.planning.budget import Budget, Fit


def render_llm(result: Estimate, console: Console, budget: Budget | None, fit: Fit | None) -> None:
    """Lines for the KV cache, its capacity on the card, trainable and active parameters."""
    info = result.llm
    if info is None:
        return
    if info.trainable_params is not None:
        total = result.params + info.trainable_params
        share = 100 * info.trainable_params / total
        print_wrapped(
            console, f"trainable params: {info.trainable_params:,} || all params: {total:,} || trainable%: {share:.4f}"
        )
    if info.active_params is not None:
        print_wrapped(
            console, f"experts: {result.params:,} parameters in total, {info.active_params:,} active per token"
        )
    if info.quantization is not None:
        q = info.quantization
        print_wrapped(
            console,
            f"quantized weights: {q['quantized_params']:,} params at {q['bits_per_weight']:g} bits "
            f"({q['method']}); {q['kept_params']:,} kept at "
            + ("F32/F16 (GGUF)" if q.get("gguf_types") else "the model dtype"),
        )
    if info.kv_cache_bytes_per_token:
        print_wrapped(
            console,
            f"KV cache: {info.kv_cache_bytes_per_token:,} B/token; {(info.kv_cache_bytes or 0) / GiB:,.3f} GiB "
            f"for this batch at {info.context_tokens:,} tokens of context",
        )
        cap = fit.kv_pool if fit is not None else None
        if cap is not None and budget is not None:
            print_wrapped(
                console,
                f"{budget.gpu_name} at memory_utilization {cap.memory_utilization:g}: KV budget "
                f"{cap.budget_bytes / GiB:,.3f} GiB -> GPU KV cache size: {cap.tokens:,} tokens; "
                f"maximum concurrency for {cap.context_tokens:,} tokens per request: {cap.max_concurrency:.2f}x",
            )
