"""Multi-GPU planning command: `vramcalc plan`.

Imported when the CLI starts, so the top level imports only typer, typing, pathlib and the shared options of
:mod:`vramcalc.cli._common`; the search,
the catalog and rich tables are imported inside the command.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from vramcalc.cli._common import GpuOpt, GpusFileOpt, ModelOpt
from vramcalc.cli.workload import workload_options

if TYPE_CHECKING:
    from vramcalc.cli.workload import WorkloadArgs

SpecArg = Annotated[Path | None, typer.Argument(help="YAML spec file (or give --model).", show_default=False)]


#: The most GPUs a search may consider: vramcalc.planning.plan_search.MAX_SEARCH_GPUS (not imported: the CLI
#: starts without the core).
MAX_GPUS = 100_000


@workload_options()
def plan(
    spec: SpecArg = None,
    *,
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    gpus_file: GpusFileOpt = None,
    gpus: Annotated[
        int | None,
        typer.Option(
            "--gpus",
            min=1,
            max=MAX_GPUS,
            help="Plans on exactly this many GPUs, cheapest first (instead of the fewest GPUs up to --max-gpus).",
            show_default=False,
        ),
    ] = None,
    global_batch: Annotated[
        int | None,
        typer.Option(
            "--global-batch",
            min=1,
            help="Hold this many sequences per optimizer step over all GPUs (data-parallel degree x "
            "micro-batch x accumulation; training) instead of the spec's batch per GPU.",
            show_default=False,
        ),
    ] = None,
    max_gpus: Annotated[
        int | None,
        typer.Option(
            "--max-gpus",
            min=1,
            max=MAX_GPUS,
            help="Largest GPU count to consider when --gpus is not given. [default: 64]",
            show_default=False,
        ),
    ] = None,
    top: Annotated[int, typer.Option(min=1, help="How many fitting plans to list.")] = 10,
    reserve: Annotated[
        str | None, typer.Option(help="Memory kept free on each card: a share (10%) or a size (2GiB).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON (int bytes, per GPU).")] = False,
    workload: WorkloadArgs,
) -> None:
    """Multi-GPU plans whose per-GPU total fits the card: on exactly --gpus N GPUs, or the fewest GPUs.

    Searches, for training, ZeRO stage (or FSDP strategy / Megatron distributed optimizer, when SPEC's
    parallel section names that framework; sharding only over two or more data-parallel ranks); tensor
    parallelism (divisors of heads, kv_heads and ffn_size, within a node), pipeline stages (divisors of
    layers) and the data-parallel degree (replicas when serving); and for training activation
    checkpointing (none, full; selective with eager attention) and the micro-batch: the batch per
    data-parallel rank (batch_size x the spec's micro-batches) is held, split into micro-batches of it and
    its divisors (gradient accumulation); with --global-batch N the sequences per step over all GPUs are
    held instead (the data-parallel degree divides N).

    Lists plans that fit (per-GPU total <= usable memory - reserve), one row per layout with its cheapest
    checkpointing and micro-batch, ordered by: fewest GPUs (without --gpus); then a relative step-time
    cost (1.00 = every GPU computing its share once at full speed: full checkpointing +33 %, selective
    +3 %, a fixed cost per micro-batch, pipeline bubble (p-1)/(m+p-1), gradient sync, ZeRO-3/FSDP
    parameter all-gathers, TP all-reduces); then the most headroom. Every figure is one GPU's total:
    memory is never pooled across cards. A search estimates at most 4,000 plans, layouts with the fewest
    tensor x pipeline GPUs first; one that reaches that budget lists the best of those it estimated and
    says so (the bundled configs need at most about 1,000, up to 1,024 GPUs).

    Exit codes: 0 = a plan fits; 1 = none does; 2 = bad input.
    """
    from vramcalc.cli._common import input_name, notes_to_stderr, print_json, reserve_flag, stdout, user_errors
    from vramcalc.cli.inputs import load_workload_spec
    from vramcalc.planning.check import reserve_for, single_budget
    from vramcalc.planning.plan_layouts import plans_for
    from vramcalc.render.plan import render_plan_search

    source = input_name(spec, model)
    with user_errors(source):
        loaded, _ = load_workload_spec(spec, model, workload)
        budget, notes = single_budget(loaded, source, gpu, reserve_for(loaded, reserve_flag(reserve)))
        assert budget is not None  # required=True: a card is always named or an error raised
        search = plans_for(loaded, budget, gpus=gpus, max_gpus=max_gpus, top=top, global_batch=global_batch)
    notes_to_stderr(notes)
    if json_out:
        from vramcalc.results.planning import PlanResult

        print_json(PlanResult.of(search).to_dict())
    else:
        render_plan_search(search, stdout())
    raise typer.Exit(0 if search.plans else 1)


def add_commands(app: typer.Typer) -> None:
    """Register this module's commands on the app."""
    app.command()(plan)
