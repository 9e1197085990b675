"""The step timeline of ``vramcalc estimate --json --timeline`` as a model: :class:`TimelineResult` (int bytes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from vramcalc.results.base import Result

if TYPE_CHECKING:
    from vramcalc.families.timeline import Point, Timeline


class TimelinePoint(Result):
    """One moment of the step: the bytes of each component allocated then."""

    label: str = Field(description="The moment (e.g. 'start of backward').")
    phase: str = Field(description="The phase it belongs to (forward, backward, optimizer...).")
    note: str = Field(description="What is alive then (empty when nothing needs saying).")
    components: dict[str, int] = Field(description="Bytes of each component allocated at this moment.")
    total_bytes: int = Field(description="Allocated bytes at this moment: the sum of components.")

    @classmethod
    def of(cls, point: Point) -> TimelinePoint:
        return cls(
            label=point.label,
            phase=point.phase,
            note=point.note,
            components=dict(point.components),
            total_bytes=point.total_bytes,
        )


class TimelineResult(Result):
    """The moments of one step in order, the peak marked."""

    detailed: bool = Field(description="Per-layer moments (true) or one moment per phase (false).")
    series: list[str] = Field(description="The components that are non-zero at some moment, in stacking order.")
    peak_index: int = Field(description="Index in points of the first moment with the largest total.")
    peak_reason: str = Field(description="The peak's phase, moment and what is alive then (one line).")
    points: list[TimelinePoint] = Field(description="The moments of the step, in order.")
    notes: list[str] = Field(description="How the timeline was built, one line each.")

    @classmethod
    def of(cls, timeline: Timeline) -> TimelineResult:
        return cls(
            detailed=timeline.detailed,
            series=list(timeline.series),
            peak_index=timeline.peak_index,
            peak_reason=timeline.peak_reason,
            points=[TimelinePoint.of(p) for p in timeline.points],
            notes=list(timeline.notes),
        )
