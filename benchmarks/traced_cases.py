"""What the scripts that run the shared tracer's step with a change of their own share (``tracer_sac.py``,
``tracer_zero_grad.py``): the ``--cases`` mode (trace every case again, print the data file's JSON) and
SiLU's single-kernel backward for every model the tracer builds; and the tracker of the scripts that run
their own loop (``tracer_bert_generate.py``, ``tracer_generate_nocache.py``)."""

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


def native_silu_everywhere() -> None:
    """Every model the tracer builds gets the SiLU backward a GPU runs, one kernel with one output
    (:func:`tracer_bnb.native_silu_backward`: a CPU-only build runs its composite form on fake CUDA tensors)."""
    import models  # type: ignore[import-not-found]  # the shared tracer's, on sys.path
    from tracer_bnb import native_silu_backward

    build = models.build
    if getattr(build, "native_silu", False):
        return

    def build_native(*args: Any, **kwargs: Any) -> Any:
        built = build(*args, **kwargs)
        native_silu_backward(built[0])
        return built

    build_native.native_silu = True  # type: ignore[attr-defined]
    models.build = build_native


def a100_tracker(model: Any, *inputs: Any) -> Any:
    """The shared tracer's ``StorageTracker`` with the modelled cuBLAS workspace of an A100 (8.125 MiB per
    handle) and the attention kernels' transients, ``model``'s parameters and ``inputs`` registered. Call it
    after ``fakecuda.enable()`` with the tracer's folder on ``sys.path``."""
    return card_tracker("a100", model, *inputs)


def card_tracker(gpu: str, model: Any, *inputs: Any) -> Any:
    """:func:`a100_tracker` with the cuBLAS workspace of ``gpu`` (the tracer's card names)."""
    import memtrack  # type: ignore[import-not-found]
    import workspace  # type: ignore[import-not-found]

    tracker = memtrack.StorageTracker(
        device_type="cuda",
        block=512,
        workspace_fn=workspace.make_workspace_fn(),
        persistent_fn=workspace.make_persistent_fn(gpu),
    )
    tracker.register_module(model)
    for tensor in inputs:
        tracker.register(tensor, "input")
    return tracker
