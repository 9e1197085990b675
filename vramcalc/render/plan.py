"""Presentation of per-rank estimates and of `vramcalc plan` (rich text and the --json keys)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from vramcalc.core.estimate import Estimate
from vramcalc.planning.plan_search import Candidate, PlanSearch
from vramcalc.render.text import gib


def parallel_dict(result: Estimate) -> dict[str, Any]:
    """``estimate --json`` keys of multi-GPU plans, present on every estimate: ``per_rank`` (every byte figure is
    one GPU's), ``host_bytes`` (offloaded bytes per GPU's process) and ``parallel`` (the plan, or null)."""
    details = result.parallel
    return {
        "per_rank": details is not None,
        "host_bytes": details.host_bytes if details is not None else 0,
        "parallel": details.as_dict() if details is not None else None,
    }


def render_parallel(result: Estimate, console: Console) -> None:
    """The plan behind a per-GPU table, the pipeline stage reported and the host memory."""
    details = result.parallel
    plan = details.plan
    console.print(f"plan: {plan.summary}", markup=False, highlight=False)
    if len(details.stage_peaks) > 1:
        peaks = ", ".join(f"{stage} {gib(peak)} GiB" for stage, peak in details.stage_peaks.items())
        console.print(f"pipeline stages: {peaks}; the table shows the {details.stage} stage", highlight=False)
    if plan.gpus > 1:
        console.print(
            f"every figure is one GPU's: this rank's share of the model is {details.params_per_rank:,} parameters "
            "(after tensor/pipeline splits, before ZeRO/FSDP sharding); memory is never pooled across cards",
            highlight=False,
        )
    if details.host_bytes:
        nodes = min(plan.gpus, plan.gpus_per_node)
        console.print(
            f"host memory (offload): {gib(details.host_bytes)} GiB per GPU, "
            f"{gib(details.host_bytes_per_node)} GiB per node of {nodes} GPUs",
            highlight=False,
        )


def candidate_dict(c: Candidate) -> dict[str, Any]:
    return {
        "gpus": c.gpus,
        "plan": c.label,
        "parallel": c.parallel,
        "needed_bytes": c.needed_bytes,
        "peak_allocated_bytes": c.peak_allocated_bytes,
        "host_bytes": c.host_bytes,
        "available_bytes": c.available_bytes,
        "headroom_bytes": c.headroom_bytes,
        "fits": c.fits,
    }


def plan_search_dict(search: PlanSearch) -> dict[str, Any]:
    """The ``plan --json`` document (int bytes, per GPU)."""
    return {
        "name": search.name,
        "gpu": {
            "id": search.budget.gpu_id,
            "name": search.budget.gpu_name,
            "usable_bytes": search.budget.usable_bytes,
            "available_bytes": search.budget.available_bytes,
        },
        "max_gpus": search.max_gpus,
        "min_gpus": search.min_gpus,
        "plans": [candidate_dict(c) for c in search.plans],
        "closest": candidate_dict(search.closest) if search.closest else None,
        "n_estimates": search.n_estimates,
    }


def render_plan_search(search: PlanSearch, console: Console) -> None:
    """Fitting plans, fewest GPUs first, with the per-GPU total and headroom."""
    b = search.budget
    if not search.plans:
        console.print(
            f"{search.name}: no plan fits {b.gpu_name} ({gib(b.available_bytes)} GiB available per GPU) "
            f"within {search.max_gpus} GPUs",
            highlight=False,
        )
        if search.closest is not None:
            c = search.closest
            console.print(f"closest: {c.label}: needs {gib(c.needed_bytes)} GiB per GPU", highlight=False)
        return
    table = Table(
        title=f"{search.name} on {b.gpu_name}: {gib(b.available_bytes)} GiB available per GPU", title_justify="left"
    )
    table.add_column("GPUs", justify="right")
    table.add_column("plan")
    table.add_column("per GPU GiB", justify="right")
    table.add_column("headroom GiB", justify="right")
    table.add_column("host GiB per GPU", justify="right")
    for c in search.plans:
        label = c.label.split(", ", 1)[1] if ", " in c.label else c.label
        dims = f"d{c.parallel['data']} t{c.parallel['tensor']} p{c.parallel['pipeline']}"
        table.add_row(str(c.gpus), f"{dims}: {label}", gib(c.needed_bytes), gib(c.headroom_bytes), gib(c.host_bytes))
    console.print(table)
    console.print(
        f"smallest: {search.min_gpus} GPUs ({search.n_estimates} plans estimated; per-GPU totals include the "
        "CUDA context and allocator reserve)",
        highlight=False,
    )
