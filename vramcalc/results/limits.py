"""The ``vramcalc max-batch --json`` and ``max-seq --json`` document as a model: :class:`LimitResult`.

One model for both: ``max_batch_size`` and ``seq_len`` (the spec's, held fixed) are present for max-batch,
``max_seq_len`` and ``batch_size`` for max-seq. Int bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from vramcalc.results.base import Result

if TYPE_CHECKING:
    from vramcalc.planning.limits import Limit

#: The limit's workload key -> its key in the document.
LIMIT_KEYS = {"batch_size": "max_batch_size", "seq_len": "max_seq_len"}


class LimitResult(Result):
    """The largest batch size (or sequence length) that fits the card, with the totals there and one past it."""

    spec: str = Field(description="The spec file.")
    name: str = Field(description="The spec's name (its file name when it has none).")
    max_batch_size: int | None = Field(
        None, description="Largest batch_size that fits (0 when even 1 does not; max-batch only)."
    )
    max_seq_len: int | None = Field(
        None, description="Largest seq_len that fits (0 when even 1 does not; max-seq only)."
    )
    total_bytes_at_max: int | None = Field(
        description="Bytes needed at the largest value that fits (null when none fits)."
    )
    total_bytes_at_next: int | None = Field(
        description="Bytes needed at one past it (which does not fit); null where the spec is not valid there."
    )
    seq_len: int | None = Field(None, description="The spec's seq_len, held fixed (max-batch only).")
    batch_size: int | None = Field(None, description="The spec's batch_size, held fixed (max-seq only).")
    gpu: str = Field(description="Catalog id of the card.")
    gpu_name: str = Field(description="Full name of the card.")
    usable_bytes: int = Field(description="Usable memory of the card, bytes.")
    reserve_bytes: int = Field(description="Memory kept free on the card, bytes.")
    available_bytes: int = Field(description="usable_bytes - reserve_bytes: what the totals are compared with.")
    capacity_basis: str = Field(description="Where usable_bytes comes from (one line).")
    n_estimates: int = Field(description="Estimates the search computed.")
    notes: list[str] = Field(description="How the answer was found or what bounds it, one line each.")
    peak_bytes_by_batch: list[list[int]] | None = Field(
        description="max-batch: the allocated peak without the inputs is the largest of these polynomials in the "
        "batch size (int byte coefficients, constant first); null when not computed that way."
    )

    @property
    def value(self) -> int:
        """The answer: max_batch_size or max_seq_len, whichever this document holds."""
        return self.max_batch_size if self.max_batch_size is not None else self.max_seq_len or 0

    @classmethod
    def of(cls, source: str, name: str, limit: Limit, fixed: dict[str, int | None]) -> LimitResult:
        """The document of ``limit`` for the spec ``source``; ``fixed``: the other workload key and its value."""
        b = limit.budget
        doc: dict[str, Any] = {
            "spec": source,
            "name": name,
            LIMIT_KEYS[limit.key]: limit.value,
            "total_bytes_at_max": limit.total_at_max,
            "total_bytes_at_next": limit.total_at_next,
            **fixed,
            "gpu": b.gpu_id,
            "gpu_name": b.gpu_name,
            "usable_bytes": b.usable_bytes,
            "reserve_bytes": b.reserve_bytes,
            "available_bytes": b.available_bytes,
            "capacity_basis": b.capacity_basis,
            "n_estimates": limit.n_estimates,
            "notes": list(limit.notes),
            "peak_bytes_by_batch": [list(coefs) for coefs in limit.peak_by_batch] or None,
        }
        return cls(**doc)
