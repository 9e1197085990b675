"""vramcalc: GPU memory (VRAM) budget estimator.

Python API (:mod:`vramcalc.api`), one function per command: :func:`estimate`, :func:`check`,
:func:`max_batch`, :func:`max_seq`, :func:`fit`, :func:`sweep`, :func:`plan`, :func:`bandwidth`,
:func:`models` and :func:`import_config` (``vramcalc import``), with :func:`load_spec` and :func:`gpu`; they
return the models of the CLI's ``--json`` documents (:mod:`vramcalc.results`). Sizes are int bytes. Bad input
raises :class:`VramcalcError` (one message of at most 2,000 characters), a wrong Python type a
:class:`TypeError` naming the argument.
Everything is imported on first use, so ``import vramcalc`` loads only the version; no side effects;
neither typer nor rich. ``dir(vramcalc)`` lists the public names (``__all__``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vramcalc.version import VERSION as __version__

if TYPE_CHECKING:
    from vramcalc.api import (
        bandwidth,
        check,
        estimate,
        fit,
        gpu,
        import_config,
        load_spec,
        max_batch,
        max_seq,
        models,
        plan,
        sweep,
    )
    from vramcalc.errors import VramcalcError
    from vramcalc.families.estimate import Estimate
    from vramcalc.hardware.catalog import GPU
    from vramcalc.results.bandwidth import BandwidthResult
    from vramcalc.results.catalog import ModelResult
    from vramcalc.results.check import CheckResult
    from vramcalc.results.estimate import EstimateResult
    from vramcalc.results.imported import ImportResult
    from vramcalc.results.limits import LimitResult
    from vramcalc.results.planning import FitResult, PlanResult, SweepResult
    from vramcalc.spec.models import Spec

__all__ = [
    "GPU",
    "BandwidthResult",
    "CheckResult",
    "Estimate",
    "EstimateResult",
    "FitResult",
    "ImportResult",
    "LimitResult",
    "ModelResult",
    "PlanResult",
    "Spec",
    "SweepResult",
    "VramcalcError",
    "__version__",
    "bandwidth",
    "check",
    "estimate",
    "fit",
    "gpu",
    "import_config",
    "load_spec",
    "max_batch",
    "max_seq",
    "models",
    "plan",
    "sweep",
]

_LAZY = {
    "bandwidth": "vramcalc.api",
    "check": "vramcalc.api",
    "estimate": "vramcalc.api",
    "fit": "vramcalc.api",
    "gpu": "vramcalc.api",
    "import_config": "vramcalc.api",
    "load_spec": "vramcalc.api",
    "max_batch": "vramcalc.api",
    "max_seq": "vramcalc.api",
    "models": "vramcalc.api",
    "plan": "vramcalc.api",
    "sweep": "vramcalc.api",
    "BandwidthResult": "vramcalc.results.bandwidth",
    "CheckResult": "vramcalc.results.check",
    "Estimate": "vramcalc.families.estimate",
    "EstimateResult": "vramcalc.results.estimate",
    "FitResult": "vramcalc.results.planning",
    "GPU": "vramcalc.hardware.catalog",
    "ImportResult": "vramcalc.results.imported",
    "LimitResult": "vramcalc.results.limits",
    "ModelResult": "vramcalc.results.catalog",
    "PlanResult": "vramcalc.results.planning",
    "Spec": "vramcalc.spec.models",
    "SweepResult": "vramcalc.results.planning",
    "VramcalcError": "vramcalc.errors",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # later look-ups skip this function
        return value
    raise AttributeError(f"module 'vramcalc' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public names: ``__all__`` (``__version__`` included), not the helpers this module imports."""
    return sorted(__all__)
