"""A moment of a step: component -> bytes allocated (an int, or a polynomial in a symbolic batch size), and
the choice of each phase's largest moment."""

from __future__ import annotations

from typing import Any

Phase = dict[str, Any]  # component -> bytes (an int, or a polynomial in a symbolic batch size)


def phase_total(components: Phase) -> Any:
    """Bytes allocated at one moment: the sum of its components."""
    return sum(components.values())


def select_phases(candidates: dict[str, list[Phase]]) -> dict[str, Phase]:
    """Each phase's largest moment (the first of equals)."""
    return {name: max(moments, key=phase_total) for name, moments in candidates.items()}
