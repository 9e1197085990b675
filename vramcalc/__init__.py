"""vramcalc: GPU memory (VRAM) budget estimator.

Public API: :func:`load_spec`, :func:`estimate` (imported on first use, so ``vramcalc --version``
and the catalog commands do not pay for the spec models). No side effects; neither typer nor rich.
"""

from __future__ import annotations

from typing import Any

from vramcalc.version import VERSION as __version__

__all__ = ["Estimate", "Spec", "__version__", "estimate", "load_spec"]

_LAZY = {
    "Estimate": "vramcalc.core.estimate",
    "estimate": "vramcalc.engine",
    "Spec": "vramcalc.spec.models",
    "load_spec": "vramcalc.spec.load",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'vramcalc' has no attribute {name!r}")
