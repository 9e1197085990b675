"""vramcalc: GPU memory (VRAM) budget estimator.

Public API: :func:`load_spec`, :func:`estimate`. Importing this package has no side effects and
pulls in neither typer nor rich.
"""

from __future__ import annotations

__version__ = "0.1.0"

from vramcalc.estimator import Estimate, estimate
from vramcalc.spec import Spec, load_spec

__all__ = ["Estimate", "Spec", "__version__", "estimate", "load_spec"]
