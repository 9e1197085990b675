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
    cached: Annotated[
        bool,
        typer.Option("--cached", help="List the models in the local Hugging Face cache instead (offline)."),
    ] = False,
    hub: Annotated[
        bool,
        typer.Option("--hub", help="Search the Hugging Face Hub for QUERY instead (online; most downloaded first)."),
    ] = False,
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

    text = " ".join(query or [])
    if cached and hub:
        raise typer.BadParameter("give one of --cached and --hub", param_hint="--cached")
    if cached:
        _cached(text, json_out)
        return
    if hub:
        _hub(text, json_out)
        return
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


def _table(rows: list[tuple[str, ...]], left: tuple[int, ...]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        pairs = enumerate(zip(row, widths, strict=True))
        typer.echo("  ".join(cell.ljust(w) if i in left else cell.rjust(w) for i, (cell, w) in pairs).rstrip())


def _cached(query: str, json_out: bool) -> None:
    """``models --cached``: the model repositories in the local Hugging Face cache whose id holds QUERY."""
    from vramcalc.cli._common import print_json
    from vramcalc.render.escape import terminal_line
    from vramcalc.sources.hf_cache import cached_models, hub_cache_dir
    from vramcalc.spec.presets import find_named

    found = [model for model in cached_models() if query.lower() in model.repo.lower()]
    if json_out:
        print_json(
            [
                {
                    "repo": model.repo,
                    "commits": list(model.commits),
                    "refs": model.refs,
                    "size_on_disk_bytes": model.size_on_disk,
                    "has_weights": model.has_weights,
                    "has_config": model.has_config,
                }
                for model in found
            ]
        )
        return
    rows: list[tuple[str, ...]] = [("repo", "on disk GB", "holds", "catalog")]
    for model in found:
        named = find_named(model.repo)
        holds = "weights" if model.has_weights else "config" if model.has_config else "-"
        rows.append(
            (terminal_line(model.repo), f"{model.size_on_disk / 1e9:,.2f}", holds, named[0].id if named else "-")
        )
    if found:
        _table(rows, (0, 2, 3))
    where = terminal_line(str(hub_cache_dir()))
    typer.echo(f"{len(found)} models in {where}; any of them works as --model REPO, offline")


def _hub(query: str, json_out: bool) -> None:
    """``models --hub QUERY``: the Hub's search, most downloaded first."""
    from vramcalc.cli._common import print_json, user_errors
    from vramcalc.render.escape import terminal_line
    from vramcalc.sources.hub import search_hub

    if not query.strip():
        raise typer.BadParameter("give a QUERY to search the Hub for", param_hint="--hub")
    with user_errors():
        found = search_hub(query)
    if json_out:
        print_json([vars(model) for model in found])
        return
    rows: list[tuple[str, ...]] = [("repo", "downloads", "likes", "task", "library")]
    rows += [
        (terminal_line(m.repo), f"{m.downloads:,}", f"{m.likes:,}", m.pipeline_tag or "-", m.library or "-")
        for m in found
    ]
    if found:
        _table(rows, (0, 3, 4))
    typer.echo(f"{len(found)} models on the Hub; any of them works as --model REPO")


def add_commands(app: typer.Typer) -> None:
    """Register ``vramcalc models``."""
    app.command()(models)
