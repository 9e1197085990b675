"""One entry of ``vramcalc check --format json`` as a model: :class:`CheckResult` for a spec checked on a
card, :class:`CheckErrorResult` for a spec that could not be checked, :class:`CheckSkippedResult` for a
YAML file skipped as not a vramcalc spec. The first six keys (``spec``,
``gpu``, ``needed_bytes``, ``available_bytes``, ``headroom_bytes``, ``fits``) are on both. Int bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from vramcalc.results.base import Result

if TYPE_CHECKING:
    from vramcalc.planning.check import CheckError, CheckRow, Skipped
    from vramcalc.planning.suggest import Suggestion


class SuggestionResult(Result):
    """One change that makes the spec fit the card, with the (per-GPU) total it leads to."""

    change: str = Field(description="The change, e.g. 'gradient_checkpointing: full' or 'shard over 4 GPUs: ...'.")
    detail: str = Field(description="What the change does (one line).")
    total_bytes: int = Field(description="The estimate's total with the change, bytes (per GPU for a sharded plan).")
    headroom_bytes: int = Field(description="Available bytes minus total_bytes with the change.")
    parallel: dict[str, Any] | None = Field(
        description="The parallel section of a sharded plan ('shard over N GPUs'), else null."
    )

    @classmethod
    def of(cls, item: Suggestion) -> SuggestionResult:
        return cls(
            change=item.change,
            detail=item.detail,
            total_bytes=item.total_bytes,
            headroom_bytes=item.headroom_bytes,
            parallel=item.parallel,
        )


class CheckResult(Result):
    """A spec on a card: the verdict every command uses, and what would make it fit when it does not."""

    spec: str = Field(description="The spec file checked.")
    gpu: str = Field(description="Catalog id of the card.")
    needed_bytes: int = Field(
        description="Bytes the spec needs: the estimate's total_bytes (for a vLLM serving spec its profile peak "
        "outside the KV cache plus the batch's KV cache)."
    )
    available_bytes: int = Field(
        description="Bytes available: usable_bytes - reserve_bytes (for a vLLM serving spec memory_utilization x that)."
    )
    headroom_bytes: int = Field(description="available_bytes - needed_bytes (negative when it does not fit).")
    fits: bool = Field(description="needed_bytes <= available_bytes.")
    name: str = Field(description="The spec's name (its file name when it has none).")
    gpu_name: str = Field(description="Full name of the card.")
    count: int = Field(description="GPUs the run is planned for (figures are per GPU).")
    usable_bytes: int = Field(description="Usable memory of the card, bytes.")
    reserve_bytes: int = Field(description="Memory kept free on the card, bytes.")
    capacity_basis: str = Field(description="Where usable_bytes comes from (one line).")
    suggestions: list[SuggestionResult] = Field(
        description="Single changes that make it fit, most headroom first (empty when it fits)."
    )
    min_cards: int | None = Field(
        description="The fewest cards of this kind that hold the spec (null when none within the search)."
    )
    min_cards_note: str | None = Field(description="What more cards of this kind would do (null when it fits).")

    @classmethod
    def of(cls, row: CheckRow) -> CheckResult:
        fit, b = row.fit, row.fit.budget
        return cls(
            spec=row.source,
            gpu=b.gpu_id,
            needed_bytes=fit.needed_bytes,
            available_bytes=fit.available_bytes,
            headroom_bytes=fit.headroom_bytes,
            fits=fit.fits,
            name=row.name,
            gpu_name=b.gpu_name,
            count=b.count,
            usable_bytes=b.usable_bytes,
            reserve_bytes=b.reserve_bytes,
            capacity_basis=b.capacity_basis,
            suggestions=[SuggestionResult.of(s) for s in fit.suggestions],
            min_cards=fit.min_cards,
            min_cards_note=None if fit.fits else fit.sharding,
        )


class CheckErrorResult(Result):
    """A spec that could not be checked (bad input): no card and no verdict, only its errors."""

    spec: str = Field(description="The spec file, directory or pattern given.")
    gpu: None = Field(description="Always null: no card was checked.")
    needed_bytes: None = Field(description="Always null.")
    available_bytes: None = Field(description="Always null.")
    headroom_bytes: None = Field(description="Always null.")
    fits: None = Field(description="Always null: neither a pass nor a failure (the run exits 2).")
    errors: list[str] = Field(description="The problems, one line each, naming the file and the key.")

    @classmethod
    def of(cls, error: CheckError) -> CheckErrorResult:
        return cls(
            spec=error.source,
            gpu=None,
            needed_bytes=None,
            available_bytes=None,
            headroom_bytes=None,
            fits=None,
            errors=list(error.messages),
        )


class CheckSkippedResult(Result):
    """A YAML file that is not a vramcalc spec, skipped (found by a directory or pattern search, or
    named with ``--skip-non-specs``): neither a pass nor a failure, and not bad input (no ``errors``)."""

    spec: str = Field(description="The file skipped.")
    gpu: None = Field(description="Always null: no card was checked.")
    needed_bytes: None = Field(description="Always null.")
    available_bytes: None = Field(description="Always null.")
    headroom_bytes: None = Field(description="Always null.")
    fits: None = Field(description="Always null: the file was not checked.")
    skipped: str = Field(description="What the file is instead of a spec, e.g. 'an accelerate config'.")

    @classmethod
    def of(cls, item: Skipped) -> CheckSkippedResult:
        return cls(
            spec=item.source,
            gpu=None,
            needed_bytes=None,
            available_bytes=None,
            headroom_bytes=None,
            fits=None,
            skipped=item.reason,
        )
