"""`vramcalc examples`: the example specs installed with vramcalc, listed or printed.

Every command that takes a SPEC file, but ``check``, also takes an example's name when no file has
that name (``vramcalc estimate bert-base.yaml`` in an empty directory), with a note on stderr saying
so; ``check``, a CI gate, reads only files that exist.
Imported when the CLI starts, so the top level imports only typer and typing.
"""

from __future__ import annotations

from typing import Annotated

import typer


def examples(
    name: Annotated[
        str | None,
        typer.Argument(
            metavar="[NAME]",
            help="An example to print (bert-base.yaml or bert-base); without it, the list.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """List the bundled example specs, or print one to start your own.

    [bold]vramcalc examples bert-base > my-model.yaml[/] writes a spec to edit. Any command but check
    also takes an example's name where a SPEC file goes, when no file of that name is here
    (vramcalc estimate bert-base.yaml); check reads only files that exist. Exit codes: 0 ok; 2 no
    example has that name.
    """
    from vramcalc.cli._common import user_errors
    from vramcalc.errors import SpecError
    from vramcalc.spec.load import bundled_examples, example_description, find_example, unknown_example

    if name is None:
        found = bundled_examples()
        if not found:
            with user_errors():
                raise SpecError("no bundled examples found: this installation of vramcalc lacks them")
        from vramcalc.render.text import terminal_width, wrap

        width = max(len(file) for file in found)
        for file, item in found.items():
            description = example_description(item.read_text(encoding="utf-8"))
            # wrapped at the terminal's width, continuation lines under the description
            for line in wrap(f"{file:<{width}}  {description}".rstrip(), terminal_width(), hang=width + 2):
                typer.echo(line)
        return
    example = find_example(name)
    if example is None:
        with user_errors():
            close = unknown_example(name) or "; 'vramcalc examples' lists them"
            raise SpecError(f"{name}: no bundled example of that name{close}")
    typer.echo(example[1], nl=False)


def add_commands(app: typer.Typer) -> None:
    """Register ``vramcalc examples``."""
    app.command()(examples)
