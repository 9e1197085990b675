"""Presentation of per-rank estimates (rich text; their ``--json`` keys are fields of
:class:`vramcalc.results.estimate.EstimateResult`) and of `vramcalc plan` (rich text; its ``--json`` document is
:class:`vramcalc.results.planning.PlanResult`)."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from vramcalc.families.estimate import Estimate
from vramcalc.planning.plan_search import SEARCH_ESTIMATES, Candidate, PlanSearch
from vramcalc.render.escape import terminal_line
from vramcalc.render.text import gib, print_wrapped


def render_parallel(result: Estimate, console: Console) -> None:
    """The plan behind a per-GPU table, the pipeline stage reported and the host memory."""
    details = result.parallel
    assert details is not None  # a per-rank estimate
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
    """Fitting plans in the search's order (its ``criterion``), one row per layout; what the columns
    mean and the order in lines below the table. Narrow terminals wrap the layout column; no cell is
    cut short. A vLLM serving spec's rows are replicas judged by vLLM's pool: tensor and pipeline degrees,
    replicas and the concurrent sequences of each, against the memory vLLM manages. The title is a line of
    its own, wrapped at the terminal's width between words (a table's title would wrap at the table's
    width)."""
    b = search.budget
    where = f"on {search.gpus} GPUs" if search.gpus is not None else f"within {search.max_gpus} GPUs"
    shown = search.plans[0] if search.plans else search.closest
    serving = shown is not None and shown.max_sequences is not None
    available = f"{gib(shown.available_bytes)} GiB vLLM manages" if serving and shown else None
    available = available or f"{gib(b.available_bytes)} GiB available"
    if not search.plans:
        console.print(f"{search.name}: no plan fits {b.gpu_name} ({available} per GPU) {where}", highlight=False)
        if search.closest is not None:
            c = search.closest
            console.print(f"closest: {c.label}: needs {gib(c.needed_bytes)} GiB per GPU", highlight=False)
        if not search.complete:
            console.print(cut_note(search, "no plan among those estimated fits"), highlight=False)
        return
    title = terminal_line(f"{search.name} on {b.gpu_name}: {available} per GPU")
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    table.add_column("GPUs", justify="right", no_wrap=True)
    if serving:
        for column in ("TP", "PP", "replicas"):
            table.add_column(column, justify="right", no_wrap=True)
        table.add_column("GiB/GPU", justify="right", no_wrap=True)
        table.add_column("free GiB", justify="right", no_wrap=True)
        table.add_column("seqs/replica", justify="right", no_wrap=True)
        table.add_column("seqs", justify="right", no_wrap=True)
        for c in search.plans:
            p, per_replica = c.parallel, c.max_sequences or 0
            degrees = [str(p["tensor"]), str(p["pipeline"]), str(p["data"])]
            figures = [gib(c.needed_bytes), gib(c.headroom_bytes), f"{per_replica:,}", f"{per_replica * p['data']:,}"]
            table.add_row(str(c.gpus), *degrees, *figures)
        print_wrapped(console, title)
        console.print(table)
        for line in _serving_footer(search) + _cut(search):
            console.print(line, highlight=False, markup=False)
        return
    table.add_column("layout", overflow="fold")
    varied = search.plans[0].cost is not None
    if varied:
        table.add_column("ckpt", no_wrap=True)
        table.add_column("mb x acc", justify="right", no_wrap=True)
    table.add_column("GiB/GPU", justify="right", no_wrap=True)
    table.add_column("free GiB", justify="right", no_wrap=True)
    host = any(c.host_bytes for c in search.plans)
    if host:
        table.add_column("host GiB", justify="right", no_wrap=True)
    if varied:
        table.add_column("cost", justify="right", no_wrap=True)
    for c in search.plans:
        row = [str(c.gpus), layout_text(c)]
        if varied:
            row += [c.checkpointing or "", f"{c.micro_batch} x {c.grad_accumulation}"]
        row += [gib(c.needed_bytes), gib(c.headroom_bytes)]
        row += [gib(c.host_bytes)] if host else []
        row += [f"{c.relative_cost:.2f}"] if c.relative_cost is not None else []
        table.add_row(*row)
    print_wrapped(console, title)
    console.print(table)
    for line in _footer(search) + _cut(search):
        console.print(line, highlight=False, markup=False)


def cut_note(search: PlanSearch, outcome: str) -> str:
    """The line of a search that reached its budget of estimates (one line, no final period)."""
    more = "" if search.gpus is not None else f"; a smaller --max-gpus than {search.max_gpus} searches more of them"
    return (
        f"the search stopped at its budget of {SEARCH_ESTIMATES:,} estimates: {outcome} (layouts with the fewest "
        f"tensor x pipeline GPUs are estimated first){more}"
    )


def _cut(search: PlanSearch) -> list[str]:
    return [] if search.complete else [cut_note(search, "these plans are the best of the layouts estimated")]


def layout_text(c: Candidate) -> str:
    """'d8 t1 p1 ZeRO-1', 'd2 t8 p1 FSDP full_shard +SP', 'd1 t1 p4 none'."""
    p = c.parallel
    dims = f"d{p['data']} t{p['tensor']} p{p['pipeline']}" + (f" c{p['context']}" if p["context"] > 1 else "")
    scheme = c.label.split(", ")[1] if ", " in c.label else c.label
    for long, short in SCHEMES.items():
        scheme = scheme.replace(long, short)
    return f"{dims} {scheme}".replace(" + SP", " +SP")


#: Scheme names as a narrow table shows them.
SCHEMES = {
    "data parallel (no ZeRO)": "no ZeRO",
    "no sharding": "none",
    "Megatron distributed optimizer": "Megatron dist-opt",
    "Megatron (no distributed optimizer)": "Megatron",
}


def _serving_footer(search: PlanSearch) -> list[str]:
    first = "" if search.gpus is not None else "fewest GPUs, then "
    return [
        f"order: {first}cost, then most free memory; TP, PP: tensor and pipeline parallel degrees of one "
        "replica; replicas: copies of the model serving requests side by side",
        "GiB/GPU: what vLLM needs on each GPU (its profiling step's non-KV peak + the spec's batch of KV cache); "
        "free: what vLLM manages (memory_utilization x the total it sees) minus that; seqs/replica: the "
        "concurrent sequences of the spec's context that the KV blocks of one replica hold; seqs: all replicas "
        "together",
        f"{search.n_estimates} plans estimated",
    ]


def _footer(search: PlanSearch) -> list[str]:
    totals = "per-GPU totals include the CUDA context, allocator reserve and NCCL buffers"
    if search.plans[0].cost is None:
        return [f"smallest: {search.min_gpus} GPUs ({search.n_estimates} plans estimated; {totals})"]
    n = search.batch_per_rank or 0
    first = "" if search.gpus is not None else "fewest GPUs, then "
    held = f"{n:,} sequence{'s' if n != 1 else ''} per data-parallel rank per step"
    if search.global_batch is not None:
        held = f"d x mb x acc = the global batch of {search.global_batch:,} sequences per step"
    return [
        f"order: {first}cost, then most free memory; cost: relative step time, 1.00 = every GPU computing "
        "its share once at full speed (recomputation, per-micro-batch overhead, pipeline bubble, "
        "communication; see --help)",
        f"mb x acc: micro-batch x micro-batches per step (accumulated; the pipeline's when p > 1), "
        f"{held}; +SP: sequence parallelism",
        f"{totals}; {search.n_estimates} plans estimated",
    ]
