"""One spec estimated on the card a command names: the sequence every command and the Python API run after
loading the spec and resolving the card (its budget), so none of them repeats it. Without a card there is no
verdict, and neither the catalog nor the fit verdict is imported."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from vramcalc.families import estimate

if TYPE_CHECKING:
    from vramcalc.families.estimate import Estimate
    from vramcalc.planning.budget import Budget, Fit
    from vramcalc.spec.models import Spec


@dataclass(frozen=True)
class Outcome:
    """The estimate, for the card's generation where a card is named, and the one verdict on that card."""

    estimate: Estimate
    budget: Budget | None = None
    fit: Fit | None = None


def estimate_outcome(spec: Spec, budget: Budget | None = None) -> Outcome:
    """``spec``'s estimate on ``budget``'s card (its cuBLAS workspace, interconnect and runtime defaults) and
    the verdict there (:func:`vramcalc.planning.budget.fit_of`); without a card, the estimate alone."""
    if budget is None:
        return Outcome(estimate(spec))
    from vramcalc.planning.budget import estimate_on, fit_of

    result = estimate_on(spec, budget)
    return Outcome(result, budget, fit_of(result, budget))
