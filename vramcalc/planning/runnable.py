"""What a model can run on one card: serving at its checkpoint's dtype, in fp8 and in 4-bit AWQ; LoRA and
QLoRA; full fine-tuning. One row per way of running it, each judged by the one verdict
(:func:`vramcalc.planning.budget.fit_of`), each a spec of its own that reproduces the row
(``vramcalc estimate --model NAME --gpu CARD --emit-spec ROW``).

Pure: neither typer nor rich, no I/O. What each row answers:

* **serving** (vLLM unless another ``runtime`` is given): the longest context one sequence
  can have (up to the model's position table), and the sequences that run at once at a context of
  :data:`SERVING_CONTEXT` tokens (or the model's, when shorter) — what ``max-batch`` answers for the row's
  spec;
* **LoRA, QLoRA** (rank :data:`ADAPTER_RANK` on every linear; QLoRA on an nf4 base, with PEFT's
  ``prepare_model_for_kbit_training``): the largest batch at :data:`TRAIN_SEQ_LEN` tokens (or the model's
  context) with full activation checkpointing, and the longest sequence at batch 1;
* **full fine-tuning** (AdamW, mixed precision's bf16 weights, full checkpointing): the largest batch, and
  when even batch 1 does not fit, the plan over the fewest GPUs of this card that does (``vramcalc plan``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vramcalc.choices import Mode
from vramcalc.errors import SpecError
from vramcalc.planning.budget import Budget, Fit, fit_on
from vramcalc.planning.limits import Limit, largest_fitting, max_batch, with_workload
from vramcalc.planning.plan_search import Candidate
from vramcalc.spec.load import parse_spec
from vramcalc.spec.models import Spec

#: Context of the serving rows' concurrency (prompt and output halves), unless the model's is shorter.
SERVING_CONTEXT = 8192
#: Sequence length of the training rows, unless the model's context is shorter.
TRAIN_SEQ_LEN = 4096
#: LoRA rank of the adapter rows (PEFT's examples use 8 to 64; 16 is the common middle).
ADAPTER_RANK = 16
#: Longest context searched when the model states none.
CONTEXT_CAP = 1 << 20
#: Most GPUs the full fine-tuning row's plan search considers (as ``vramcalc plan``'s default).
PLAN_GPUS = 64


@dataclass(frozen=True)
class Option:
    """One way of running the model on the card: its row's spec and what the card holds of it."""

    name: str  # the row's id for --emit-spec: serve-bf16, serve-fp8, serve-awq, lora, qlora, full
    label: str  # the row in words
    document: dict[str, Any]  # the row's spec as a spec file holds it (--emit-spec)
    spec: Spec | None  # None when the model does not take this way (``refused`` says why)
    verdict: Fit | None = None  # the spec as written: batch 1 (serving: at the serving context)
    longest: int | None = None  # longest context (serving) or sequence at batch 1 (training) that fits
    sequences: int | None = None  # serving: concurrent sequences at the spec's context
    batch: Limit | None = None  # training: the largest batch at the spec's sequence length
    plan: Candidate | None = None  # full fine-tuning that does not fit one card: the fewest GPUs' plan
    refused: str | None = None

    @property
    def fits(self) -> bool:
        return self.verdict is not None and self.verdict.fits


@dataclass(frozen=True)
class Runnable:
    """Every way of running one model on one card."""

    name: str
    budget: Budget
    options: tuple[Option, ...]
    context: int | None  # the model's position table (None: not stated)
    runtime: str = "vllm"  # what serves the serving rows


def _context(spec: Spec) -> int | None:
    return spec.model.max_position_embeddings


def _serving_workload(precision: str, context: int, runtime: str, quantization: Any = None) -> dict[str, Any]:
    prompt = context // 2
    workload = {"mode": "inference", "batch_size": 1, "prompt_len": prompt, "max_new_tokens": context - prompt}
    workload |= {"precision": precision, "runtime": runtime}
    return workload | ({"quantization": quantization} if quantization is not None else {})


def _training_workload(seq: int, adapter: dict[str, Any] | None, quantization: str | None) -> dict[str, Any]:
    workload: dict[str, Any] = {"mode": "train", "batch_size": 1, "seq_len": seq, "gradient_checkpointing": "full"}
    workload["precision"] = "bf16" if adapter is not None else "mixed-bf16"
    workload["optimizer"] = "adamw"
    if adapter is not None:
        workload["adapter"] = adapter
    return workload | ({"quantization": quantization} if quantization is not None else {})


def ways(base: Spec, precision: str, runtime: str = "vllm") -> list[tuple[str, str, dict[str, Any]]]:
    """The rows' ids, labels and workloads for ``base``'s model; ``precision``: its checkpoint's dtype;
    ``runtime``: what serves the serving rows."""
    context = _context(base)
    serving = min(SERVING_CONTEXT, context) if context else SERVING_CONTEXT
    seq = min(TRAIN_SEQ_LEN, context) if context else TRAIN_SEQ_LEN
    lora = {"type": "lora", "rank": ADAPTER_RANK, "targets": "all-linear"}
    return [
        (f"serve-{precision}", f"serve, {precision} weights", _serving_workload(precision, serving, runtime)),
        ("serve-fp8", "serve, fp8 weights", _serving_workload(precision, serving, runtime, "fp8")),
        ("serve-awq", "serve, 4-bit AWQ", _serving_workload("fp16", serving, runtime, "awq")),
        ("lora", f"LoRA r{ADAPTER_RANK}", _training_workload(seq, lora, None)),
        ("qlora", f"QLoRA r{ADAPTER_RANK} (nf4)", _training_workload(seq, lora, "nf4")),
        ("full", "full fine-tune (AdamW)", _training_workload(seq, None, None)),
    ]


def runnable(
    base: Spec, budget: Budget, precision: str, *, model: str | None = None, plan: bool = True, runtime: str = "vllm"
) -> Runnable:
    """Every row for ``base``'s model on ``budget``'s card. ``precision``: the checkpoint's dtype;
    ``model``: the catalog name the rows' specs give as ``model:`` (else the model's keys); ``plan``: search
    a plan for full fine-tuning that does not fit one card; ``runtime``: what serves the serving rows."""
    name = base.name or "model"
    model_keys: Any = model or base.model.model_dump(mode="json", exclude_none=True)
    options = []
    for row, label, workload in ways(base, precision, runtime):
        document = {"name": f"{name}-{row}", "model": model_keys, "workload": workload}
        try:
            spec = parse_spec(document, name)
            options.append(_option(row, label, document, spec, budget, plan))
        except SpecError as exc:
            options.append(Option(row, label, document, None, refused=str(exc)))
    return Runnable(name, budget, tuple(options), _context(base), runtime)


def _option(row: str, label: str, document: dict[str, Any], spec: Spec, budget: Budget, plan: bool) -> Option:
    verdict = fit_on(spec, budget)
    context = _context(spec)
    if spec.workload.mode is Mode.inference:  # serving: vLLM's pool decides, else the batch's total
        longest = _longest(lambda n: _at_context(spec, n), budget, verdict.available_bytes, context)
        pool = verdict.kv_pool
        sequences = pool.max_sequences if pool is not None else max_batch(spec, budget).value
        return Option(row, label, document, spec, verdict, longest, sequences)
    batch = max_batch(spec, budget)
    longest = _longest(lambda n: with_workload(spec, seq_len=n), budget, verdict.available_bytes, context)
    found = _fewest_gpus(spec, budget) if row == "full" and not verdict.fits and plan else None
    return Option(row, label, document, spec, verdict, longest, batch=batch, plan=found)


def option_named(found: Runnable, row: str) -> Option:
    """The row ``row`` (its id); raises SpecError naming the ids."""
    for option in found.options:
        if option.name == row:
            return option
    names = ", ".join(option.name for option in found.options)
    raise SpecError(f"--emit-spec: {row!r} is not a row (one of {names})")


def _at_context(spec: Spec, context: int) -> Spec:
    prompt = max(1, context // 2)
    return with_workload(spec, prompt_len=prompt, max_new_tokens=max(1, context - prompt))


def _longest(at: Callable[[int], Spec], budget: Budget, available: int, context: int | None) -> int:
    """The longest context (or sequence) up to the model's own that fits at batch 1 (0: none)."""

    def needed(n: int) -> float:
        if n < 2:
            n = 2  # a generation has a prompt token and an output token
        try:
            return fit_on(at(n), budget).needed_bytes
        except SpecError:  # past what the spec can take: it does not fit
            return float("inf")

    value, _ = largest_fitting(needed, available, context or CONTEXT_CAP)
    return value


def _fewest_gpus(spec: Spec, budget: Budget) -> Candidate | None:
    from vramcalc.planning.plan_search import search_plans

    try:
        found = search_plans(spec, budget, max_gpus=PLAN_GPUS, top=1)
    except SpecError:
        return None
    return found.plans[0] if found.plans else None
