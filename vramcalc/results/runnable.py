"""Every way of running a model on a card (:class:`RunnableResult`, one :class:`OptionResult` per row): the
``what_runs`` key that ``vramcalc estimate --model NAME --gpu CARD --json`` adds when no workload flag is
given. Int bytes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from vramcalc.results.base import Result
from vramcalc.results.planning import BudgetResult

if TYPE_CHECKING:
    from vramcalc.planning.runnable import Option, Runnable


class OptionResult(Result):
    """One way of running the model: its verdict at batch 1 and what the card holds of it."""

    row: str = Field(
        description="The row's id, for --emit-spec: serve-<dtype>, serve-fp8, serve-awq, lora, qlora, full."
    )
    label: str = Field(description="The row in words.")
    mode: str | None = Field(description="inference (served by vLLM) or train; null when refused.")
    fits: bool = Field(description="Whether batch 1 of the row's spec fits the card (the one fit verdict).")
    needed_bytes: int | None = Field(description="What batch 1 needs, as the verdict counts it, bytes.")
    available_bytes: int | None = Field(description="What needed_bytes is compared with, bytes.")
    context_tokens: int | None = Field(description="Tokens per sequence of the row's spec.")
    longest_context_tokens: int | None = Field(
        description="The longest sequence that fits at batch 1 (serving: prompt + output), up to the model's "
        "position table; 0 when none does."
    )
    concurrent_sequences: int | None = Field(
        description="Serving: the sequences of context_tokens vLLM's KV blocks hold at once (null for training)."
    )
    max_batch_size: int | None = Field(
        description="Training: the largest batch of context_tokens that fits (null for serving)."
    )
    plan_gpus: int | None = Field(
        description="Full fine-tuning that does not fit one card: the fewest GPUs of a plan that fits (null "
        "otherwise, or when none fits within 64)."
    )
    plan: dict[str, Any] | None = Field(description="That plan as a spec's parallel section.")
    refused: str | None = Field(description="Why the model cannot run this way (null when it can).")

    @classmethod
    def of(cls, option: Option) -> OptionResult:
        spec, verdict = option.spec, option.verdict
        return cls(
            row=option.name,
            label=option.label,
            mode=None if spec is None else spec.workload.mode.value,
            fits=option.fits,
            needed_bytes=None if verdict is None else verdict.needed_bytes,
            available_bytes=None if verdict is None else verdict.available_bytes,
            context_tokens=None if spec is None else spec.workload.seq_len,
            longest_context_tokens=option.longest,
            concurrent_sequences=option.sequences,
            max_batch_size=None if option.batch is None else option.batch.value,
            plan_gpus=None if option.plan is None else option.plan.gpus,
            plan=None if option.plan is None else option.plan.parallel,
            refused=option.refused,
        )


class RunnableResult(Result):
    """What one model can run on one card, row by row."""

    name: str = Field(description="The model.")
    gpu: BudgetResult = Field(description="The card and the memory the rows may use on it.")
    max_position_embeddings: int | None = Field(description="The model's position table (null: not stated).")
    rows: list[OptionResult] = Field(description="Serving (checkpoint dtype, fp8, 4-bit AWQ), LoRA, QLoRA, full.")

    @classmethod
    def of(cls, runnable: Runnable) -> RunnableResult:
        return cls(
            name=runnable.name,
            gpu=BudgetResult.of(runnable.budget),
            max_position_embeddings=runnable.context,
            rows=[OptionResult.of(option) for option in runnable.options],
        )
