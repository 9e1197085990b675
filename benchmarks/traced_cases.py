"""What the scripts that run the shared tracer's step with a change of their own share (``tracer_sac.py``,
``tracer_zero_grad.py``): the ``--cases`` mode (trace every case again, print the data file's JSON) and
SiLU's single-kernel backward for every model the tracer builds; and the tracker of the scripts that run
their own loop (``tracer_bert_generate.py``, ``tracer_generate_nocache.py``) and the frozen model of the
generation scripts (``tracer_generate_eager.py``, ``tracer_compile.py``)."""

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


def frozen_model(a: Any, dtype: Any, positions: int) -> tuple[Any, str]:
    """The tracer family's model of the parsed arguments ``a`` built on the fake CUDA device at ``dtype``, for
    generation: in eval mode, no parameter needing a gradient, its ``max_position_embeddings`` at least
    ``positions``; with its description. Call it inside the scripts' ``FakeTensorMode``."""
    import models  # type: ignore[import-not-found]  # the shared tracer's, on sys.path
    import torch

    torch.set_default_dtype(dtype)
    try:
        with torch.device("cuda"):
            model, _, desc = models.build(a.arch, a, dtype)
    finally:
        torch.set_default_dtype(torch.float32)
    model.config.max_position_embeddings = max(getattr(model.config, "max_position_embeddings", 0), positions)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model, desc


def second_run(tracker: Any, generate: Callable[[], Any], desc: str, top: bool) -> dict[str, Any]:
    """``generate`` run twice without grad under ``tracker`` (the first warms up), and the second run's peak: its
    bytes, the op at it, its bytes by category and, with ``top``, the largest tensors alive there."""
    import torch
    import transformers

    with tracker, torch.no_grad():
        for run in (1, 2):
            tracker.set_phase("inference", run)
            generate()
            tracker.set_phase("idle")
    peak = tracker.iter_peaks[2]
    return {
        "transformers": transformers.__version__,
        "model": desc,
        "peak_bytes": int(peak.total),
        "peak_at_op": peak.op,
        "peak_by_category": {k: v for k, v in peak.by_cat.items() if v},
        "top_live_at_peak": tracker.live_at(peak.idx, 40) if top else None,
    }


def print_generation_cases(script: str, cases: dict[str, str], trace: Callable[[list[str]], dict[str, Any]]) -> None:
    """Every generation case of ``script`` traced (:func:`second_run`'s results without the live tensors), printed
    as its data file's JSON: the torch and transformers releases and the cases, each with its command line."""
    import torch

    rows = []
    found: dict[str, str] = {}
    for case_id, command in cases.items():
        result = trace(command.split())
        found = {"transformers": result.pop("transformers")}
        result.pop("top_live_at_peak")
        rows.append({"id": case_id, "command": f"python benchmarks/{script} {command}", **result})
    print(json.dumps({"torch": str(torch.__version__), **found, "cases": rows}, indent=2))


def inference_args(argv: list[str]) -> tuple[Any, Any]:
    """The shared tracer's arguments for an SDPA inference run of ``argv``, with its attention kernels installed,
    and the weights' torch dtype. Call it after ``fakecuda.enable()`` with the tracer's folder on ``sys.path``."""
    import groundtruth  # type: ignore[import-not-found]
    import sdpa_cuda  # type: ignore[import-not-found]
    import torch

    a = groundtruth.parse_args([*argv, "--attn", "sdpa", "--mode", "infer"])
    sdpa_cuda.install(a.sdpa)
    return a, {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.dtype]
