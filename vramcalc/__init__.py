"""vramcalc: GPU memory (VRAM) budget estimator.

Python API (:mod:`vramcalc.api`): :func:`load_spec`, :func:`estimate`, :func:`max_batch`, :func:`max_seq`,
:func:`check`, :func:`gpu` and :func:`bandwidth`; they return the models of the CLI's ``--json`` documents
(:mod:`vramcalc.results`). Sizes are int bytes. Everything is imported on first use, so ``import vramcalc``
loads only the version; no side effects; neither typer nor rich.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vramcalc.version import VERSION as __version__

if TYPE_CHECKING:
    from vramcalc.api import bandwidth, check, estimate, gpu, load_spec, max_batch, max_seq
    from vramcalc.families.estimate import Estimate
    from vramcalc.hardware.catalog import GPU
    from vramcalc.results.bandwidth import BandwidthResult
    from vramcalc.results.check import CheckResult
    from vramcalc.results.estimate import EstimateResult
    from vramcalc.results.limits import LimitResult
    from vramcalc.spec.models import Spec

__all__ = [
    "GPU",
    "BandwidthResult",
    "CheckResult",
    "Estimate",
    "EstimateResult",
    "LimitResult",
    "Spec",
    "__version__",
    "bandwidth",
    "check",
    "estimate",
    "gpu",
    "load_spec",
    "max_batch",
    "max_seq",
]

_LAZY = {
    "bandwidth": "vramcalc.api",
    "check": "vramcalc.api",
    "estimate": "vramcalc.api",
    "gpu": "vramcalc.api",
    "load_spec": "vramcalc.api",
    "max_batch": "vramcalc.api",
    "max_seq": "vramcalc.api",
    "BandwidthResult": "vramcalc.results.bandwidth",
    "CheckResult": "vramcalc.results.check",
    "Estimate": "vramcalc.families.estimate",
    "EstimateResult": "vramcalc.results.estimate",
    "GPU": "vramcalc.hardware.catalog",
    "LimitResult": "vramcalc.results.limits",
    "Spec": "vramcalc.spec.models",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # later look-ups skip this function
        return value
    raise AttributeError(f"module 'vramcalc' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
