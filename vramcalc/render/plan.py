"""Presentation of per-rank estimates (rich text; their ``--json`` keys are fields of
:class:`vramcalc.results.estimate.EstimateResult`) and of `vramcalc plan` (rich text; its ``--json`` document is
:class:`vramcalc.results.planning.PlanResult`)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from vramcalc.core.estimate import Estimate
from vramcalc.planning.plan_search import PlanSearch
from vramcalc.render.text import gib


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
