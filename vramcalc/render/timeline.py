"""Terminal timeline (``vramcalc estimate SPEC --timeline``; its JSON form is
:class:`vramcalc.results.timeline.TimelineResult`).

One row per point of :mod:`vramcalc.families.timeline`, time running down the page; each bar is stacked by
component (a glyph and a colour each, so it reads without colour too), the peak row is marked with
its phase and reason, and with ``--gpu`` a ``│`` marks the allocation budget (usable - overhead).
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from vramcalc.families.timeline import Timeline
from vramcalc.render.text import LABELS, gib, print_wrapped

#: Widest bar; narrower when the terminal is (never under MIN_BAR_WIDTH).
BAR_WIDTH = 48
MIN_BAR_WIDTH = 12
#: Columns the table spends outside the bar: phase, GiB, peak mark and the padding between columns.
OTHER_COLUMNS = 10 + 8 + 7 + 10
#: Glyph and rich style of each component (unknown components get "?").
GLYPHS: dict[str, tuple[str, str]] = {
    "parameters": ("█", "blue"),
    "allocator_rounding": ("r", "blue"),
    "gradients": ("▓", "magenta"),
    "optimizer_states": ("▒", "yellow"),
    "activations": ("░", "green"),
    "inputs": ("i", "white"),
    "autocast_weight_copies": ("=", "cyan"),
    "temporaries": ("×", "red"),
    "workspace": ("w", "bright_black"),
    "kv_cache": ("k", "bright_magenta"),
    "gathered_parameters": ("g", "bright_blue"),
    "communication_buffers": ("c", "bright_cyan"),
}
BUDGET_MARK = "│"


def _bar(components: dict[str, int], series: tuple[str, ...], scale: int, budget_col: int | None, width: int) -> Text:
    """Stacked bar: each segment ends at round(cumulative bytes / scale x width) columns."""
    text = Text()
    cumulative, col = 0, 0
    for key in series:
        cumulative += components.get(key, 0)
        end = round(cumulative * width / scale) if scale else 0
        glyph, style = GLYPHS.get(key, ("?", "white"))
        text.append(glyph * (end - col), style=style)
        col = end
    text.append(" " * (width - col))
    if budget_col is not None:
        text = text[:budget_col] + Text(BUDGET_MARK, style="bold red") + text[budget_col + 1 :]
    return text


def render_timeline(timeline: Timeline, console: Console, budget_bytes: int | None = None, card: str = "") -> None:
    """Rows of stacked bars (GiB), the peak marked, a legend, and the budget line when given."""
    scale = max(timeline.peak_bytes, budget_bytes or 0)
    label_width = max(len(p.label) for p in timeline.points)
    width = max(MIN_BAR_WIDTH, min(BAR_WIDTH, console.width - label_width - OTHER_COLUMNS))
    budget_col = None
    if budget_bytes is not None and scale:
        budget_col = min(width - 1, max(0, round(budget_bytes * width / scale)))
    table = Table(title=f"{timeline.name}: allocated memory through one step", title_justify="left", box=None)
    table.add_column("phase")
    table.add_column("point")
    table.add_column("GiB", justify="right")
    table.add_column("")
    table.add_column("")
    previous = ""
    peak = timeline.peak_index
    for i, point in enumerate(timeline.points):
        phase = point.phase if point.phase != previous else ""
        previous = point.phase
        mark = "◀ peak" if i == peak else ""
        bar = _bar(point.components, timeline.series, scale, budget_col, width)
        table.add_row(phase, point.label, gib(point.total_bytes), bar, mark)
    console.print(table)
    _footer(timeline, console, budget_bytes, card)


def _footer(timeline: Timeline, console: Console, budget_bytes: int | None, card: str) -> None:
    """Legend (glyph per component), the peak and its reason, the budget line, notes."""
    console.print(_legend(timeline, console.width), soft_wrap=True)
    print_wrapped(console, f"peak {gib(timeline.peak_bytes)} GiB at {timeline.peak_reason}")
    if budget_bytes is not None:
        print_wrapped(
            console,
            f"{BUDGET_MARK} {card}: {gib(budget_bytes)} GiB for tensors (usable - CUDA context - allocator reserve)",
        )
    for note in timeline.notes:
        print_wrapped(console, f"note: {note}")


def _legend(timeline: Timeline, width: int) -> Text:
    """'legend: ' and a glyph and label per component, a line broken only between two entries."""
    head = "legend: "
    legend, column = Text(head), len(head)
    for key in timeline.series:
        glyph, style = GLYPHS.get(key, ("?", "white"))
        entry = f" {LABELS.get(key, key)}"
        if column > len(head) and column + 1 + len(entry) > width:
            legend.rstrip()
            legend.append("\n" + " " * len(head))
            column = len(head)
        legend.append(glyph, style=style).append(entry + "  ")
        column += 1 + len(entry) + 2
    legend.rstrip()
    return legend
