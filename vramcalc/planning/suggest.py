"""What would make a spec fit a card: single workload changes and a smaller batch with gradient
accumulation, best first, chosen by the kind of workload:

* training: gradient checkpointing, sdpa, flash attention, mixed or 16-bit precision, 8-bit AdamW or Adafactor, a
  smaller batch with gradient accumulation; a LoRA spec also QLoRA (the frozen base in 4-bit NF4);
* inference (serving): sdpa, flash attention, 16-bit precision, 4-bit AWQ weights, an fp8 KV cache (vLLM generation
  specs), the longest context that fits, a smaller batch; never a training setting.

Each change is applied to the spec, validated as a spec file would be, and estimated on the card: only
changes that make it fit are listed, each with its total. Sharding over more GPUs comes from
:mod:`vramcalc.planning.fit`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from vramcalc.choices import Attention, Checkpointing, KvCacheDtype, Mode, Optimizer, Precision, QuantMethod, Runtime
from vramcalc.core.optimizer import DEFAULT_OPTIMIZER
from vramcalc.core.stack import overhead_terms
from vramcalc.errors import SpecError
from vramcalc.families.estimate import Estimate
from vramcalc.families.resolve import stack_of
from vramcalc.planning.budget import Budget, estimate_on, fit_of, fit_on
from vramcalc.planning.limits import largest_fitting, max_batch, with_workload
from vramcalc.spec.models import Spec, is_generation


@dataclass(frozen=True)
class Suggestion:
    """One change that makes the spec fit, with the (per-GPU) total it leads to."""

    change: str
    detail: str
    total_bytes: int
    headroom_bytes: int
    parallel: dict[str, Any] | None = None  # the plan's parallel section, for "shard over N GPUs"


PRECISION_NOTES = {
    Precision.amp_bf16: "autocast to bf16 with fp32 master weights (bf16 needs an Ampere-class or newer GPU)",
    Precision.amp_fp16: "autocast to fp16 with fp32 master weights and loss scaling",
    Precision.bf16: "pure bf16 weights, gradients and optimizer states (no fp32 master copy)",
}


OPTIMIZER_NOTES = {
    Optimizer.adamw_8bit: "bitsandbytes 8-bit AdamW: 1-byte states in 256-element blocks (2,048 before 0.44)",
    Optimizer.adafactor: "factored second moments (a row and a column vector per matrix), no first moment",
}


SERVING_PRECISION_NOTES = {
    Precision.bf16: "bf16 weights and activations: half the bytes of fp32 (bf16 needs an Ampere-class or newer GPU)",
    Precision.fp16: "fp16 weights and activations: half the bytes of fp32",
}
#: QLoRA (Dettmers et al., 2023): the frozen base in 4-bit NormalFloat with double quantization.
QLORA = {"method": QuantMethod.nf4, "double_quant": True}
#: A 4-bit AWQ checkpoint as AutoAWQ writes it (group size 128); GPTQ's 4-bit layout is about the same size.
AWQ_4BIT = {"method": QuantMethod.awq, "bits": 4, "group_size": 128}
#: Weight formats of more than 4 bits, for which 4-bit weights are suggested.
WIDE_QUANT = (QuantMethod.int8, QuantMethod.fp8, QuantMethod.q8_0)
#: KV cache dtypes wider than fp8.
WIDE_KV = (None, KvCacheDtype.auto, KvCacheDtype.fp32, KvCacheDtype.fp16, KvCacheDtype.bf16)

#: What check and fit try, by kind of workload (one line, for "no single change makes it fit").
TRIED_TRAINING = "smaller batch, checkpointing, sdpa, flash attention, amp/bf16, 8-bit AdamW, Adafactor"
TRIED_LORA = TRIED_TRAINING + ", QLoRA (nf4 base), prepare_kbit: false"
TRIED_SERVING = (
    "smaller batch, sdpa, flash attention, 16-bit precision, 4-bit AWQ weights, fp8 KV cache (vLLM), shorter context"
)


def tried(spec: Spec) -> str:
    """The kinds of change tried for ``spec``, in words."""
    if spec.workload.mode is not Mode.train:
        return TRIED_SERVING
    return TRIED_LORA if spec.workload.adapter is not None else TRIED_TRAINING


def _candidates(spec: Spec, budget: Budget) -> list[tuple[str, str, dict[str, Any]]]:
    """Single workload changes that may reduce memory: (label, why, workload keys)."""
    wl = spec.workload
    training = wl.mode is Mode.train
    out: list[tuple[str, str, dict[str, Any]]] = []
    if training and wl.gradient_checkpointing is not Checkpointing.full:
        why = "keep one input per block and recompute it in backward (about a third more compute)"
        out.append(("gradient_checkpointing: full", why, {"gradient_checkpointing": Checkpointing.full}))
    if wl.attention is Attention.eager:
        why = "fused attention kernels keep no heads x seq^2 score matrices"
        out.append(("attention: sdpa", why, {"attention": Attention.sdpa}))
    if wl.attention is not Attention.flash:
        why = (
            "transformers' flash_attention_2 (flash-attn 2): casts fp32 inputs to 16 bits and reads grouped K/V "
            "as they are, so no heads x seq^2 scores, even where SDPA falls back to its math kernel"
        )
        out.append(("attention: flash", why, {"attention": Attention.flash}))
    if wl.precision is Precision.fp32:
        notes = PRECISION_NOTES if training else SERVING_PRECISION_NOTES
        usable = [p for p in notes if budget.bf16 or p not in (Precision.bf16, Precision.amp_bf16)]
        out += [(f"precision: {p.value}", notes[p], {"precision": p}) for p in usable]
    optimizer = wl.optimizer or (DEFAULT_OPTIMIZER if training else Optimizer.none)
    if training and optimizer in (Optimizer.adam, Optimizer.adamw):
        out += [(f"optimizer: {o.value}", why, {"optimizer": o}) for o, why in OPTIMIZER_NOTES.items()]
    if training and wl.adapter is not None and (wl.quantization is None or wl.quantization.method in WIDE_QUANT):
        why = "QLoRA: the frozen base model in 4-bit NF4 with double quantization; the adapters train as before"
        out.append(("quantization: {method: nf4, double_quant: true} (QLoRA)", why, {"quantization": QLORA}))
    if training and wl.adapter is not None and wl.quantization is not None and wl.adapter.prepare_kbit is not False:
        why = (
            "skip PEFT's prepare_model_for_kbit_training: the activations stay 16-bit, so attention keeps its "
            "fused kernel instead of materialising the scores in fp32 (enable gradient checkpointing yourself)"
        )
        adapter = {**wl.adapter.model_dump(exclude_none=True, exclude_unset=True), "prepare_kbit": False}
        keys: dict[str, Any] = {"adapter": adapter}
        if "gradient_checkpointing" not in wl.model_fields_set:  # what prepare_kbit turned on stays on
            keys["gradient_checkpointing"] = Checkpointing.full
        out.append(("adapter.prepare_kbit: false", why, keys))
    return out + ([] if training else _serving_candidates(spec))


def _serving_candidates(spec: Spec) -> list[tuple[str, str, dict[str, Any]]]:
    """Changes for an inference spec: 4-bit weights and, for a vLLM generation spec, an fp8 KV cache."""
    wl = spec.workload
    out: list[tuple[str, str, dict[str, Any]]] = []
    if wl.quantization is None or wl.quantization.method in WIDE_QUANT:
        why = "a 4-bit AWQ checkpoint, group size 128 (a 4-bit GPTQ one is about the same size)"
        out.append(("quantization: {method: awq, bits: 4, group_size: 128}", why, {"quantization": AWQ_4BIT}))
    if is_generation(wl) and (wl.runtime or Runtime.vllm) is Runtime.vllm and wl.kv_cache_dtype in WIDE_KV:
        why = "vLLM --kv-cache-dtype fp8: one byte per cached key and value, twice the tokens in the same memory"
        out.append(("kv_cache_dtype: fp8", why, {"kv_cache_dtype": KvCacheDtype.fp8}))
    return out


def suggestions(spec: Spec, budget: Budget) -> list[Suggestion]:
    """The single workload changes that make ``spec`` fit ``budget``, most headroom first
    (:func:`vramcalc.planning.fit.check_on` adds "shard over N GPUs")."""
    found = []
    for change, why, keys in _candidates(spec, budget):
        try:
            verdict = fit_on(with_workload(spec, **keys), budget)
        except SpecError:  # a change the spec's other keys (or its model) do not allow is not suggested
            continue
        if verdict.fits:
            found.append(Suggestion(change, why, verdict.needed_bytes, verdict.headroom_bytes))
    extra = [_smaller_batch(spec, budget)]
    if spec.workload.mode is not Mode.train:
        extra.append(shorter_context(spec, budget))
    return best_first(found + [item for item in extra if item is not None])


def shorter_context(spec: Spec, budget: Budget) -> Suggestion | None:
    """The longest context that fits an inference spec: ``seq_len``, or with ``prompt_len`` the prompt
    (the tokens generated stay as they are). None when even one prompt token does not fit."""
    wl = spec.workload
    if wl.seq_len is None:
        return None
    new = wl.seq_len - wl.prompt_len if wl.prompt_len is not None else 0
    key, now = ("prompt_len", wl.prompt_len) if wl.prompt_len is not None else ("seq_len", wl.seq_len)

    def changed(n: int) -> Spec:
        keys: dict[str, Any] = {key: n}
        if key == "prompt_len" and wl.max_new_tokens is None:
            keys["seq_len"] = n + new  # seq_len was given: the generated tokens stay seq_len - prompt_len
        return with_workload(spec, **keys)

    def misses(n: int) -> float:
        """0 when ``n`` fits (the one verdict: for vLLM, against memory_utilization x available), else inf."""
        try:
            return 0 if fit_on(changed(n), budget).fits else math.inf
        except SpecError:  # a length the model cannot take (a position table derived from params)
            return math.inf

    value, _ = largest_fitting(misses, 0, cap=now - 1)
    if value == 0:
        return None
    verdict = fit_on(changed(value), budget)
    context = value + new
    change = f"{key}: {value}" + (f" (context {context} with {new} new tokens)" if key == "prompt_len" else "")
    why = f"the longest {'prompt' if key == 'prompt_len' else 'context'} that fits (now {now})"
    return Suggestion(change, why, verdict.needed_bytes, verdict.headroom_bytes)


def best_first(found: list[Suggestion]) -> list[Suggestion]:
    """Least total (most headroom) first; ties by the change's text."""
    return sorted(found, key=lambda s: (s.total_bytes, s.change))


def _largest_divisor_at_most(n: int, k: int) -> int:
    divisors = set()
    for i in range(1, math.isqrt(n) + 1):
        if n % i == 0:
            divisors |= {i, n // i}
    return max(d for d in divisors if d <= k)


def _smaller_batch(spec: Spec, budget: Budget) -> Suggestion | None:
    """The largest divisor of the batch that fits, with accumulation steps keeping the effective batch.

    Gradient accumulation keeps the gradients allocated between micro-batches, so the total is
    re-computed with param-sized gradients alive in every phase (:func:`accumulation_total`)."""
    batch = spec.workload.batch_size
    limit = max_batch(spec, budget)
    if not 0 < limit.value < batch:
        return None
    micro = _largest_divisor_at_most(batch, limit.value)
    steps = batch // micro
    result = estimate_on(with_workload(spec, batch_size=micro), budget)
    verdict = fit_of(result, budget)
    if spec.workload.mode is not Mode.train:
        change, why = f"batch_size: {micro}", f"runs the {batch} samples as {steps} batches"
        total = verdict.needed_bytes
    else:
        change = f"batch_size: {micro} with {steps} gradient accumulation steps"
        why = f"keeps the effective batch of {batch}; gradients stay allocated between micro-batches"
        total = accumulation_total(result, spec)
    if total > verdict.available_bytes:
        return None
    why += f"; the largest batch that fits is {limit.value}"
    return Suggestion(change, why, total, verdict.available_bytes - total)


def accumulation_total(result: Estimate, spec: Spec) -> int:
    """Total bytes of a step under gradient accumulation: every phase also holds the gradients
    (``component_peaks['gradients']``), which ``zero_grad`` only frees after the optimizer step."""
    grads = result.component_peaks["gradients"]
    moments = [comps | {"gradients": grads} for comps in result.phase_components.values()]
    totals = [result.phases[name] - comps["gradients"] + grads for name, comps in result.phase_components.items()]
    peak = totals.index(max(totals))  # the first of equals, as estimate picks its peak phase
    _, reserve, _ = overhead_terms(spec.overhead, stack_of(spec))
    outside = sum(bytes_ for key, bytes_ in result.overhead.items() if key != "allocator_reserve")
    return totals[peak] + outside + reserve.of_base(reserve.base_of(moments[peak], totals[peak]))
