"""The ``vramcalc fit --json``, ``sweep --json`` and ``plan --json`` documents as models: :class:`FitResult`
(one :class:`CardResult` per card), :class:`SweepResult` (:class:`BudgetResult`: its card) and
:class:`PlanResult`. Int bytes, per GPU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from vramcalc.results.base import Result
from vramcalc.results.check import SuggestionResult

if TYPE_CHECKING:
    from vramcalc.planning.budget import Budget
    from vramcalc.planning.fit import CardFit, FitReport
    from vramcalc.planning.plan_search import Candidate, PlanSearch
    from vramcalc.planning.sweep import Sweep


class BudgetResult(Result):
    """A card and the memory a spec may use on it."""

    gpu: str = Field(description="Catalog id of the card.")
    gpu_name: str = Field(description="Full name of the card.")
    usable_bytes: int = Field(description="Usable memory of the card, bytes.")
    reserve_bytes: int = Field(description="Memory kept free on the card, bytes.")
    available_bytes: int = Field(description="usable_bytes - reserve_bytes, bytes.")
    capacity_basis: str = Field(description="Where usable_bytes comes from (one line).")

    @classmethod
    def of(cls, budget: Budget) -> BudgetResult:
        return cls(**_budget_keys(budget))


def _budget_keys(budget: Budget) -> dict[str, Any]:
    return {
        "gpu": budget.gpu_id,
        "gpu_name": budget.gpu_name,
        "usable_bytes": budget.usable_bytes,
        "reserve_bytes": budget.reserve_bytes,
        "available_bytes": budget.available_bytes,
        "capacity_basis": budget.capacity_basis,
    }


class CardResult(Result):
    """The spec on one card: the verdict, and how many cards of the kind it would take."""

    gpu: str = Field(description="Catalog id of the card.")
    gpu_name: str = Field(description="Full name of the card.")
    usable_bytes: int = Field(description="Usable memory of the card, bytes.")
    reserve_bytes: int = Field(description="Memory kept free on the card, bytes.")
    available_bytes: int = Field(
        description="Bytes available to the spec: usable_bytes - reserve_bytes (for a vLLM serving spec "
        "memory_utilization x that)."
    )
    capacity_basis: str = Field(description="Where usable_bytes comes from (one line).")
    needed_bytes: int = Field(
        description="Bytes the spec needs on the card: the estimate's total_bytes; for a vLLM serving spec, "
        "vLLM's profiling step's non-KV peak + the batch's KV cache."
    )
    headroom_bytes: int = Field(description="available_bytes - needed_bytes (negative when it does not fit).")
    fits: bool = Field(description="needed_bytes <= available_bytes.")
    min_cards: int | None = Field(
        description="The fewest cards of this kind that hold the spec (null when none within the search)."
    )
    min_cards_note: str | None = Field(description="How min_cards was found (null when it is 1).")
    suggestions: list[SuggestionResult] = Field(
        description="Single changes that make it fit (the target card only; most headroom first)."
    )
    min_cards_plan: str | None = Field(description="The sharded plan on min_cards cards, e.g. 'FSDP full_shard'.")
    min_cards_parallel: dict[str, Any] | None = Field(description="That plan's parallel section.")
    min_cards_needed_bytes: int | None = Field(description="Bytes that plan needs per GPU.")
    min_cards_search_complete: bool = Field(
        description="False when the sharded-plan search reached its budget of estimates before it tried "
        "every layout for this card: min_cards is then the best found, or null (see min_cards_note)."
    )

    @classmethod
    def of(cls, card: CardFit) -> CardResult:
        from vramcalc.planning.fit import plan_text

        return cls(
            **{**_budget_keys(card.budget), "available_bytes": card.available_bytes},
            needed_bytes=card.needed_bytes,
            headroom_bytes=card.headroom_bytes,
            fits=card.fits,
            min_cards=card.min_cards,
            min_cards_note=None if card.min_cards == 1 else card.sharding,
            suggestions=[SuggestionResult.of(s) for s in card.suggestions],
            min_cards_plan=plan_text(card.plan) if card.plan else None,
            min_cards_parallel=card.plan.parallel if card.plan else None,
            min_cards_needed_bytes=card.plan.needed_bytes if card.plan else None,
            min_cards_search_complete=not card.search_cut,
        )


class FitResult(Result):
    """Every catalog card a spec fits on (``vramcalc fit --json``): those it fits first, smallest first."""

    spec: str = Field(description="The spec file.")
    name: str = Field(description="The spec's name (its file name when it has none).")
    cards: list[CardResult] = Field(description="Every card of the catalog.")
    target: CardResult | None = Field(description="The spec's target card (target.gpu or the card named), or null.")
    sharding: str = Field(description="How min_cards is searched (one line).")
    max_gpus: int = Field(description="Largest GPU count the sharded-plan search considers.")

    @classmethod
    def of(cls, source: str, name: str, report: FitReport) -> FitResult:
        return cls(
            spec=source,
            name=name,
            cards=[CardResult.of(card) for card in report.cards],
            target=CardResult.of(report.target) if report.target else None,
            sharding=report.search.sharding,
            max_gpus=report.search.max_gpus,
        )


class SweepPoint(Result):
    """One point of the grid."""

    batch_size: int = Field(description="Batch size at this point.")
    seq_len: int | None = Field(description="Sequence length at this point (null: the spec's own).")
    total_bytes: int = Field(description="The estimate's total at this point, bytes.")
    fits: bool | None = Field(description="Whether it fits the card (null without a card).")
    needed_bytes: int | None = Field(
        description="What the fit verdict compares, bytes: total_bytes, or for a vLLM serving spec vLLM's "
        "profiling step's non-KV peak + the batch's KV cache (null without a card)."
    )
    available_bytes: int | None = Field(
        description="What needed_bytes is compared with, bytes: the card's available bytes, or the memory vLLM "
        "manages (null without a card)."
    )


class SweepResult(Result):
    """Totals over batch sizes x sequence lengths (``vramcalc sweep --json``), batch outer."""

    spec: str = Field(description="The spec file.")
    name: str = Field(description="The spec's name.")
    gpu: BudgetResult | None = Field(description="The card the points are judged on (null without one).")
    points: list[SweepPoint] = Field(description="Every grid point, batch size outer, sequence length inner.")

    @classmethod
    def of(cls, source: str, sweep: Sweep) -> SweepResult:
        verdicts = sweep.verdicts
        points = [
            SweepPoint(
                batch_size=b,
                seq_len=s,
                total_bytes=t,
                fits=None if verdicts is None else verdicts[i].fits,
                needed_bytes=None if verdicts is None else verdicts[i].needed_bytes,
                available_bytes=None if verdicts is None else verdicts[i].available_bytes,
            )
            for i, (b, s, t) in enumerate(sweep.points())
        ]
        gpu = BudgetResult.of(sweep.budget) if sweep.budget else None
        return cls(spec=source, name=sweep.name, gpu=gpu, points=points)


class PlanCandidate(Result):
    """One multi-GPU plan that was estimated (figures per GPU)."""

    gpus: int = Field(description="GPUs of the plan.")
    plan: str = Field(description="The plan in words: degrees and sharding scheme.")
    parallel: dict[str, Any] = Field(description="The plan as a spec's parallel section.")
    needed_bytes: int = Field(
        description="Bytes one GPU needs, as the fit verdict counts them: its estimate's total_bytes; for a "
        "vLLM serving spec, vLLM's profiling step's non-KV peak + the batch's KV cache."
    )
    total_bytes: int = Field(
        description="One GPU's estimate: total_bytes (equal to needed_bytes unless vLLM's pool decides)."
    )
    peak_allocated_bytes: int = Field(description="One GPU's allocated peak, bytes.")
    host_bytes: int = Field(description="Host memory per GPU's process for offloaded states, bytes.")
    available_bytes: int = Field(
        description="Bytes available on one card (for a vLLM serving spec, the memory vLLM manages: "
        "memory_utilization x the total it sees)."
    )
    headroom_bytes: int = Field(description="available_bytes - needed_bytes.")
    fits: bool = Field(description="needed_bytes <= available_bytes.")
    max_concurrent_sequences: int | None = Field(
        description="A vLLM serving plan: the sequences of the spec's context one replica's KV blocks hold "
        "at once (null for other specs)."
    )
    checkpointing: str | None = Field(description="Activation checkpointing of the plan: none, selective or full.")
    micro_batch: int | None = Field(description="Sequences per micro-batch on one data-parallel rank.")
    grad_accumulation: int | None = Field(
        description="Micro-batches per optimizer step (gradient accumulation; the pipeline's micro-batches "
        "when pipeline > 1): micro_batch x grad_accumulation = batch_per_data_rank."
    )
    relative_cost: float | None = Field(
        description="Estimated step time relative to every GPU computing its share once at full speed "
        "(1.0); lower is faster. See criterion."
    )
    cost_terms: dict[str, float] | None = Field(
        description="The terms of relative_cost: compute x micro_batch x bubble + gradient_sync + "
        "parameter_gathers + tensor_parallel."
    )

    @classmethod
    def of(cls, c: Candidate) -> PlanCandidate:
        return cls(
            gpus=c.gpus,
            plan=c.label,
            parallel=c.parallel,
            needed_bytes=c.needed_bytes,
            total_bytes=c.total_bytes,
            peak_allocated_bytes=c.peak_allocated_bytes,
            host_bytes=c.host_bytes,
            available_bytes=c.available_bytes,
            headroom_bytes=c.headroom_bytes,
            fits=c.fits,
            max_concurrent_sequences=c.max_sequences,
            checkpointing=c.checkpointing,
            micro_batch=c.micro_batch,
            grad_accumulation=c.grad_accumulation,
            relative_cost=None if c.cost is None else round(c.cost.total, 4),
            cost_terms=None if c.cost is None else c.cost.as_dict(),
        )


class PlanCard(Result):
    """The card the plans are for."""

    id: str = Field(description="Catalog id of the card.")
    name: str = Field(description="Full name of the card.")
    usable_bytes: int = Field(description="Usable memory of the card, bytes.")
    available_bytes: int = Field(description="usable_bytes - the reserve, bytes.")


class PlanResult(Result):
    """The multi-GPU plans whose per-GPU total fits the card, on exactly ``gpus`` GPUs or the fewest
    first, then by relative step-time cost (``vramcalc plan --json``)."""

    name: str = Field(description="The spec's name.")
    gpu: PlanCard = Field(description="The card.")
    max_gpus: int = Field(description="Largest GPU count searched (with --gpus: that count).")
    min_gpus: int | None = Field(description="The fewest GPUs any plan listed needs (null when none fits).")
    plans: list[PlanCandidate] = Field(description="Plans that fit, one per layout, in the order of criterion.")
    closest: PlanCandidate | None = Field(description="When none fits, the plan needing the least per GPU.")
    n_estimates: int = Field(description="Estimates the search computed.")
    search_complete: bool = Field(
        description="False when the search reached max_estimates before it tried every layout: plans (or "
        "closest) are then the best of the layouts estimated, those with the fewest tensor x pipeline GPUs first."
    )
    max_estimates: int = Field(description="The search's budget of estimates.")
    gpus: int | None = Field(description="The exact GPU count asked for with --gpus (null: fewest GPUs first).")
    criterion: str = Field(description="How plans are ordered (one line).")
    batch_per_data_rank: int | None = Field(
        description="Sequences per data-parallel rank per optimizer step, held by every plan "
        "(micro_batch x grad_accumulation); null when the global batch is held instead."
    )
    global_batch: int | None = Field(
        description="Sequences per optimizer step over all data-parallel ranks, held by every plan "
        "(--global-batch: data x micro_batch x grad_accumulation); null otherwise."
    )

    @classmethod
    def of(cls, search: PlanSearch) -> PlanResult:
        from vramcalc.planning.plan_search import SEARCH_ESTIMATES

        b = search.budget
        return cls(
            name=search.name,
            gpu=PlanCard(id=b.gpu_id, name=b.gpu_name, usable_bytes=b.usable_bytes, available_bytes=b.available_bytes),
            max_gpus=search.max_gpus,
            min_gpus=search.min_gpus,
            plans=[PlanCandidate.of(c) for c in search.plans],
            closest=PlanCandidate.of(search.closest) if search.closest else None,
            n_estimates=search.n_estimates,
            search_complete=search.complete,
            max_estimates=SEARCH_ESTIMATES,
            gpus=search.gpus,
            criterion=search.criterion,
            batch_per_data_rank=search.batch_per_rank,
            global_batch=search.global_batch,
        )
