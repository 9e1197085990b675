"""`vramcalc models`: the bundled model catalog, listed and searched.

Every command that reads a spec takes ``--model NAME`` for a catalog model, and a spec's ``model``
may be a catalog name (see :mod:`vramcalc.spec.presets`). Imported when the CLI starts, so the top
level imports only typer and typing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from vramcalc.spec.presets import ModelEntry

#: Column headers of the list.
HEADERS = ("id", "params", "family", "context", "layers", "kv/heads")


def _row(entry: ModelEntry) -> tuple[str, ...]:
    from vramcalc.spec.presets import format_count

    published = entry.published_params
    params = published if published and "," not in published else format_count(entry.meta_params or 0)
    context = f"{entry.context_length:,}" if entry.context_length else "-"
    heads = f"{entry.kv_heads}/{entry.heads}" if entry.heads else "-"
    return (entry.id, params, entry.family, context, str(entry.layers or "-"), heads)


def models(
    query: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[QUERY]...",
            help="Show the models whose id, alias, name, family or repository holds this text, or each of its "
            "words (qwen 7b).",
            show_default=False,
        ),
    ] = None,
    *,
    json_out: Annotated[bool, typer.Option("--json", help="Print the entries as JSON (configs and sources).")] = False,
) -> None:
    """List the bundled model catalog: popular open models by name, offline.

    A name works as [bold]--model NAME[/] on estimate, bandwidth, fit, max-batch, max-seq, sweep and
    plan, and in a spec as [bold]model: NAME[/] or [bold]model: {preset: NAME, ...}[/] with model keys
    to override. Names compare case- and punctuation-insensitively; aliases and Hub repository ids
    work too. params: the model card's figure, else the count of transformers' own model. Exit codes:
    0 ok; 2 nothing matches QUERY.
    """
    from vramcalc.cli._common import print_json, user_errors
    from vramcalc.spec.presets import matching

    with user_errors():
        found = matching(" ".join(query or []))
    if json_out:
        from vramcalc.results.catalog import ModelResult

        print_json([ModelResult.of(entry).to_dict() for entry in found])
        return
    rows = [HEADERS, *(_row(entry) for entry in found)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADERS))]
    for row in rows:
        pairs = enumerate(zip(row, widths, strict=True))
        cells = [cell.ljust(width) if i in (0, 2) else cell.rjust(width) for i, (cell, width) in pairs]
        typer.echo("  ".join(cells).rstrip())
    typer.echo(f"{len(found)} models; params: the model card's figure, else transformers' count")


def add_commands(app: typer.Typer) -> None:
    """Register ``vramcalc models``."""
    app.command()(models)
