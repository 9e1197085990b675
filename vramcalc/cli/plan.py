"""Multi-GPU planning command: `vramcalc plan`.

Imported when the CLI starts, so the top level imports only typer, typing, pathlib and the shared options of
:mod:`vramcalc.cli._common`; the search,
the catalog and rich tables are imported inside the command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vramcalc.cli._common import GPU_HELP, GpusFileOpt

SpecArg = Annotated[Path, typer.Argument(help="YAML spec file.", show_default=False)]


def plan(
    spec: SpecArg,
    *,
    gpu: Annotated[str | None, typer.Option("--gpu", help=f"{GPU_HELP} Default: the spec's target.gpu.")] = None,
    gpus_file: GpusFileOpt = None,
    max_gpus: Annotated[int, typer.Option("--max-gpus", min=1, help="Largest GPU count to consider.")] = 64,
    top: Annotated[int, typer.Option(min=1, help="How many fitting plans to list.")] = 10,
    reserve: Annotated[
        str | None, typer.Option(help="Memory kept free on each card: a share (10%) or a size (2GiB).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON (int bytes, per GPU).")] = False,
) -> None:
    """The smallest multi-GPU plans (by GPU count) whose per-GPU peak fits the card.

    Searches ZeRO stage (or FSDP strategy / Megatron distributed optimizer, when SPEC's parallel
    section names that framework), tensor parallelism (divisors of heads, kv_heads and ffn_size, within
    a node), pipeline stages (divisors of layers) and the data-parallel degree. batch_size stays the
    micro-batch per GPU. Every figure is one GPU's total: memory is never pooled across cards.

    Exit codes: 0 = a plan fits within --max-gpus; 1 = none does; 2 = bad input.
    """
    from vramcalc.cli._common import notes_to_stderr, print_json, reserve_flag, stdout, user_errors
    from vramcalc.planning.check import reserve_for, single_budget
    from vramcalc.planning.plan_search import search_plans
    from vramcalc.render.plan import render_plan_search
    from vramcalc.spec.load import load_spec

    with user_errors(str(spec)):
        loaded = load_spec(spec)
        budget, notes = single_budget(loaded, str(spec), gpu, reserve_for(loaded, reserve_flag(reserve)))
        assert budget is not None  # required=True: a card is always named or an error raised
        search = search_plans(loaded, budget, max_gpus=max_gpus, top=top)
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
