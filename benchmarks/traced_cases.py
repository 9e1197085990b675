"""The ``--cases`` mode shared by the scripts that run the shared tracer's step with a change of their own
(``tracer_sac.py``, ``tracer_zero_grad.py``): trace every case again and print the data file's JSON."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def main(argv: list[str], script: str, cases: dict[str, str], trace: Callable[[list[str]], dict[str, Any]]) -> None:
    """``--cases``: every case traced, as ``{"torch": ..., "cases": [...]}`` (each case with its command line,
    peak, peak phase, per-phase peaks and parameter count); otherwise the tracer's result for ``argv``."""
    if argv != ["--cases"]:
        print(json.dumps(trace(argv), indent=2, default=str))
        return
    rows = []
    for case_id, command in cases.items():
        result = trace(command.split())
        rows.append(
            {
                "id": case_id,
                "command": f"python benchmarks/{script} {command}",
                "peak_bytes": result["peak_bytes"],
                "peak_phase": result["peak_phase"],
                "phase_peaks": {k: v["peak_bytes"] for k, v in result["phases"].items()},
                "params": result["params"],
            }
        )
    import torch

    print(json.dumps({"torch": str(torch.__version__), "cases": rows}, indent=2))
