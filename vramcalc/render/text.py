"""Bytes as text: the component labels and GiB with three decimals, shared by every renderer; and the
width of terminal output, with the wrapping of long lines to it.

Long lines (notes, assumptions, suggestions, verdicts) are wrapped with a hanging indent, broken only at
spaces: never inside a number, nor between a number and its unit ("12.34 GiB" stays on one line). A
word longer than the line (a file path) is kept whole.
"""

from __future__ import annotations

import os
import re
import sys
from typing import TYPE_CHECKING

from vramcalc.units import GiB

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text


LABELS = {
    "parameters": "parameters",
    "allocator_rounding": "allocator rounding",
    "gradients": "gradients",
    "optimizer_states": "optimizer states",
    "activations": "activations",
    "inputs": "inputs",
    "autocast_weight_copies": "autocast weight copies",
    "temporaries": "temporaries",
    "workspace": "cuBLAS workspace",
    "kv_cache": "KV cache",
    "gathered_parameters": "gathered parameters",
    "communication_buffers": "communication buffers",
    "cuda_context": "CUDA context",
    "allocator_reserve": "allocator reserve",
    "nccl": "NCCL buffers",
}

#: Width of text output when neither COLUMNS nor a terminal gives one (a pipe, a file).
DEFAULT_WIDTH = 120
#: Narrowest width lines are wrapped to (a narrower request is taken as this).
MIN_WIDTH = 40
#: Extra indent of a wrapped line's continuation lines.
HANG = 2
#: A space that is not a place to break a line: between a number and the unit after it.
_GLUE = re.compile(r"(?<=\d) (?=(?:[KMGTP]i?B|B|GB/s|TB/s|Gbps|bit|bytes|tokens|GPUs|cards|ms|µs|s|%)(?:\b|$|[^\w]))")


def gib(n_bytes: int) -> str:
    return f"{n_bytes / GiB:,.3f}"


def terminal_width(default: int = DEFAULT_WIDTH) -> int:
    """The width to lay text out at: ``COLUMNS`` when it is set, else the terminal's width when standard
    output is one, else ``default``."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        if sys.stdout.isatty():
            return os.get_terminal_size(sys.stdout.fileno()).columns
    except (AttributeError, OSError, ValueError):
        pass
    return default


def _spans(text: str, width: int, hang: int) -> tuple[list[tuple[int, int]], str]:
    """Where each line of ``text`` wrapped at ``width`` starts and ends, and the continuation indent
    (the text's own leading spaces plus ``hang``)."""
    lead = len(text) - len(text.lstrip(" "))
    indent = " " * (lead + hang)
    width = max(width, MIN_WIDTH)
    glue = {m.start() for m in _GLUE.finditer(text)}
    words: list[tuple[int, int]] = []
    start = None
    for i, char in enumerate(text):
        breakable = char == " " and i not in glue and i >= lead
        if breakable and start is not None:
            words.append((start, i))
            start = None
        elif not breakable and start is None:
            start = i
    if start is not None:
        words.append((start, len(text)))
    if not words:
        return [(0, len(text))], indent
    lines = [(0, words[0][1])]
    for begin, end in words[1:]:
        first = len(lines) == 1
        room = width - (0 if first else len(indent))
        if end - lines[-1][0] <= room:
            lines[-1] = (lines[-1][0], end)
        else:
            lines.append((begin, end))
    return lines, indent


def wrap(text: str, width: int, hang: int = HANG) -> list[str]:
    """``text`` as lines of at most ``width`` characters (a word longer than that stays whole), each
    continuation line indented by the text's own indent plus ``hang``."""
    spans, indent = _spans(text, width, hang)
    return [("" if i == 0 else indent) + text[a:b] for i, (a, b) in enumerate(spans)]


def wrap_text(text: Text, width: int, hang: int = HANG) -> Text:
    """A rich :class:`~rich.text.Text` wrapped like :func:`wrap`, its styles kept."""
    from rich.text import Text as RichText

    spans, indent = _spans(text.plain, width, hang)
    lines = [text[a:b] if i == 0 else RichText(indent) + text[a:b] for i, (a, b) in enumerate(spans)]
    return RichText("\n").join(lines)


def print_wrapped(console: Console, line: str | Text, *, hang: int = HANG) -> None:
    """Print one long line wrapped at the console's width with a hanging indent (a string is plain text,
    never rich markup)."""
    from rich.text import Text as RichText

    text = line if isinstance(line, RichText) else RichText(line)
    console.print(wrap_text(text, console.width, hang), soft_wrap=True)


def table_width(table: Table, console: Console, *, natural: bool = False) -> int:
    """The width of ``table`` unwrapped (``natural``), or at its narrowest that cuts no cell."""
    from rich.measure import Measurement

    measured = Measurement.get(console, console.options.update_width(10_000), table)
    return measured.maximum if natural else measured.minimum


def narrow_table(table: Table, flexible: int, wrapping: tuple[int, ...] = ()) -> None:
    """Lay ``table`` out for a narrow console: each column but ``flexible`` gets a fixed width, that of
    its longest cell (of its longest word for the ``wrapping`` columns, and for every header), so no
    figure is cut; the ``flexible`` column, which wraps, gets what is left (a word longer than that is
    folded, not cut)."""
    from rich.text import Text as RichText

    def plain(cell: object) -> str:
        if isinstance(cell, RichText):
            return cell.plain
        return RichText.from_markup(cell).plain if isinstance(cell, str) else ""

    for index, column in enumerate(table.columns):
        if index == flexible:
            continue
        cells = [plain(cell) for cell in column.cells]
        words = [
            word for text in [plain(column.header), *(cells if index in wrapping else [])] for word in text.split()
        ]
        whole = [] if index in wrapping else [line for cell in cells for line in cell.splitlines()]
        column.width = max([*map(len, words), *map(len, whole), 1])
    # a word longer than what is left for the flexible column is folded onto the next line, never cut
    table.columns[flexible].overflow = "fold"
