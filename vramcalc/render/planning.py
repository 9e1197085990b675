"""Output of `vramcalc fit`, `max-batch`, `max-seq` and `sweep`: formatters that return strings.

Tables show GiB (2^30 bytes), labelled; JSON carries int bytes. The JSON documents are models (a public
contract): :class:`~vramcalc.results.limits.LimitResult` (``max_batch_size`` / ``max_seq_len``,
``total_bytes_at_max``, ``total_bytes_at_next``), :class:`~vramcalc.results.planning.FitResult` and
:class:`~vramcalc.results.planning.SweepResult`.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from vramcalc.planning.budget import Budget
from vramcalc.planning.limits import Limit
from vramcalc.planning.sweep import Sweep
from vramcalc.render.check import AVAILABLE, NEEDED, SERVING, gib, suggestion_text
from vramcalc.render.escape import terminal_line
from vramcalc.render.text import narrow_table, table_width, terminal_width, wrap
from vramcalc.units import GiB

if TYPE_CHECKING:  # the sharded-plan search is imported only by the fit formatters that show it
    from vramcalc.planning.fit import CardFit, FitReport, ShardSearch


def _render(*items: Any, width: int) -> str:
    """Rich tables and plain lines as text ``width`` columns wide (each line wrapped with a hanging indent)."""
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=False, no_color=True, highlight=False, markup=False)
    for item in items:
        if isinstance(item, str):
            for line in wrap(item, width):
                console.print(line, markup=False, soft_wrap=True)
        else:
            console.print(item)
    return buffer.getvalue()


def sharding_note(search: ShardSearch) -> str:
    """How "cards needed" was found (one line, no final period)."""
    return f"cards needed: {search.sharding}"


def fit_json(source: str, name: str, report: FitReport) -> str:
    """The document of :class:`~vramcalc.results.planning.FitResult`."""
    from vramcalc.results.planning import FitResult

    return FitResult.of(source, name, report).to_json() + "\n"


def cards_needed(card: CardFit, search: ShardSearch) -> str:
    """The table cell: 1, '4: FSDP full_shard', '32: the spec's plan', '> 64', 'not searched' or, when the
    search reached its budget of estimates before this card, 'unknown (search budget spent)'."""
    from vramcalc.planning.fit import plan_text

    if card.plan is not None and card.plan.gpus > 1:
        return f"{card.plan.gpus}: {plan_text(card.plan)}"
    if card.min_cards is not None:
        return str(card.min_cards) + (": the spec's plan" if card.min_cards > 1 else "")
    if search.reason:
        return "not searched"
    return "unknown (search budget spent)" if card.search_cut else f"> {search.max_gpus}"


def fit_table(source: str, name: str, report: FitReport, width: int | None = None) -> str:
    """Every card: available, needed, headroom, fits, cards needed; then what would fit the target
    (``width``: the terminal's, see :func:`~vramcalc.render.text.terminal_width`)."""
    from rich.table import Table

    cards, target, search = report.cards, report.target, report.search
    fits = sum(card.fits for card in cards)
    # a line of its own, wrapped at the terminal's width between words (a table's title wraps at the table's)
    title = terminal_line(f"{name} ({source}): fits on {fits} of {len(cards)} cards")
    table = Table()
    for column in ("GPU", "available GiB", "needed GiB", "headroom GiB", "fits", "cards needed"):
        table.add_column(column, justify="right" if "GiB" in column else "left")
    for card in cards:
        row = (gib(card.available_bytes), gib(card.needed_bytes), gib(card.headroom_bytes))
        table.add_row(card.budget.gpu_id, *row, "yes" if card.fits else "no", cards_needed(card, search))
    width = width or terminal_width()
    if _natural_width(table, width) > width:
        narrow_table(table, flexible=5)
    serving = any(card.verdict.kv_pool is not None for card in cards)  # every row, as they share the spec
    judged = [SERVING + "."] if serving else [NEEDED, AVAILABLE + ": " + USABLE]
    notes = [*judged, sharding_note(search) + "."]
    return _render(title, table, *notes, *target_lines(target), width=width)


#: Where a card's usable memory comes from.
USABLE = "the driver total (nvidia-smi) where the catalog has it, else the nominal size."


def _natural_width(table: Any, width: int) -> int:
    from rich.console import Console

    return table_width(table, Console(file=io.StringIO(), width=width), natural=True)


def target_lines(target: CardFit | None) -> list[str]:
    if target is None:
        return ["Name a card (target.gpu in the spec, or --gpu) to see what would make it fit there."]
    b = target.budget
    head = f"target {b.gpu_id}: needs {gib(target.needed_bytes)} GiB, {gib(target.available_bytes)} GiB available"
    if target.fits:
        fewer = f"; on fewer cards: {target.sharding}" if target.plan else ""
        return [f"{head}: fits (headroom {gib(target.headroom_bytes)} GiB){fewer}."]
    if not target.suggestions:
        return [f"{head}: does not fit, and no single change makes it fit; more GPUs: {target.sharding}."]
    return [f"{head}: does not fit. It would fit with:", *(f"  - {suggestion_text(s)}" for s in target.suggestions)]


def limit_json(source: str, name: str, limit: Limit, fixed: dict[str, int | None]) -> str:
    """The document of :class:`~vramcalc.results.limits.LimitResult`."""
    from vramcalc.results.limits import LimitResult

    return LimitResult.of(source, name, limit, fixed).to_json() + "\n"


def available_text(b: Budget) -> str:
    """'15.20 GiB available = usable 16.00 GiB - reserve 5% (0.80 GiB); usable: <basis>'."""
    reserve = f" - reserve {b.reserve.text} ({gib(b.reserve_bytes)} GiB)" if b.reserve_bytes else ""
    usable = f"usable {gib(b.usable_bytes)} GiB{reserve}; usable: {b.capacity_basis}"
    return f"{gib(b.available_bytes)} GiB available = {usable}"


def _managed(limit: Limit) -> str:
    """For a vLLM serving spec: the share of the available memory vLLM manages (KV pool + profile peak)."""
    from vramcalc.stacks.vllm import UNSEEN_BYTES
    from vramcalc.units import MiB

    if limit.available_bytes == limit.budget.available_bytes:
        return ""
    return (
        f"; vLLM manages {gib(limit.available_bytes)} GiB of it (memory_utilization x the total vLLM sees, "
        f"{UNSEEN_BYTES // MiB} MiB less than usable)"
    )


def limit_text(source: str, name: str, limit: Limit, fixed: dict[str, int | None], width: int | None = None) -> str:
    """The largest value that fits, the memory there and at the next one; lines wrapped at ``width``."""
    others = ", ".join(f"{k} {v:,}" for k, v in fixed.items() if v is not None)
    lines = [
        terminal_line(f"{name} ({source}) on {limit.budget.gpu_id}: {available_text(limit.budget)}" + _managed(limit)),
        f"largest {limit.key} that fits: {limit.value:,}" + (f" ({others})" if others else ""),
    ]
    if limit.total_at_max is not None:
        head = gib(limit.available_bytes - limit.total_at_max)
        lines.append(f"  at {limit.value:,}: needs {gib(limit.total_at_max)} GiB, headroom {head} GiB")
    if limit.total_at_next is not None:
        lines.append(f"  at {limit.value + 1:,}: needs {gib(limit.total_at_next)} GiB: does not fit")
    lines += [f"note: {note}" for note in limit.notes]
    if limit.peak_by_batch:
        lines.append(f"  formula: {peak_formula(limit.peak_by_batch)}")
    lines.append(f"({limit.n_estimates} estimates; {SERVING if _managed(limit) else NEEDED})")
    width = width or terminal_width()
    return "".join(f"{part}\n" for line in lines for part in wrap(line, width))


def peak_formula(polynomials: tuple[tuple[int, ...], ...]) -> str:
    """'allocated peak = max(1.683 + 1.337 b, 2.380) GiB + inputs (b = batch_size)'."""

    def term(power: int, coef: int) -> str:
        return f"{coef / GiB:.3f}" + ("" if power == 0 else " b" if power == 1 else f" b^{power}")

    shown = [" + ".join(term(p, c) for p, c in enumerate(coefs) if c or p == 0) for coefs in polynomials]
    shown = [text.replace("+ -", "- ") for text in shown]
    body = f"max({', '.join(shown)})" if len(shown) > 1 else shown[0]
    return f"allocated peak = {body} GiB + inputs (b = batch_size)"


def _fits(sweep: Sweep, index: int) -> bool | None:
    """Whether point ``index`` fits (None without a card): one verdict, not the grid's list."""
    return None if sweep.verdicts is None else sweep.verdicts[index].fits


def sweep_json(source: str, sweep: Sweep) -> str:
    """The document of :class:`~vramcalc.results.planning.SweepResult`."""
    from vramcalc.results.planning import SweepResult

    return SweepResult.of(source, sweep).to_json() + "\n"


def sweep_csv(sweep: Sweep) -> str:
    """One line per point; ``needed_bytes`` and ``available_bytes`` are the verdict's (empty without a card)."""
    lines = ["batch_size,seq_len,total_bytes,fits,needed_bytes,available_bytes"]
    for i, (b, s, t) in enumerate(sweep.points()):
        fits = _fits(sweep, i)
        verdict = (
            "," if sweep.verdicts is None else f"{sweep.verdicts[i].needed_bytes},{sweep.verdicts[i].available_bytes}"
        )
        lines.append(f"{b},{'' if s is None else s},{t},{'' if fits is None else str(fits).lower()},{verdict}")
    return "\n".join(lines) + "\n"


#: Columns a sweep table spends on each column's borders and padding.
_COLUMN_FRAME = 3


def sweep_table(source: str, sweep: Sweep, width: int | None = None) -> str:
    """Rows: batch sizes; columns: sequence lengths; cells: GiB needed, marked when it does not fit: the
    estimate's total, or for a vLLM serving spec on a card what vLLM needs against the memory it manages
    (the verdict's figures). A grid wider than ``width`` (default: the terminal's) is split into several
    tables of fewer columns."""
    from rich.table import Table

    width = width or terminal_width()
    where = f" on {sweep.budget.gpu_id} ({gib(sweep.budget.available_bytes)} GiB available)" if sweep.budget else ""
    if sweep.serving and sweep.budget and sweep.verdicts:
        managed = gib(sweep.verdicts[0].available_bytes)
        where = (
            f" on {sweep.budget.gpu_id} (vLLM manages {managed} of {gib(sweep.budget.available_bytes)} GiB available)"
        )
    what = "GiB vLLM needs" if sweep.serving else "total GiB"
    title = terminal_line(f"{sweep.name} ({source}): {what}{where}")
    headers = ["spec's" if seq is None else f"{seq:,}" for seq in sweep.seq_lens]
    rows: list[list[str]] = []
    shown = sweep.totals if sweep.verdicts is None else [verdict.needed_bytes for verdict in sweep.verdicts]
    points = iter(enumerate(shown))
    for _ in sweep.batch_sizes:
        cells = []
        for _ in sweep.seq_lens:
            i, needed = next(points)
            fits = _fits(sweep, i)
            cells.append(gib(needed) + ("" if fits is None else (" ok" if fits else " NO")))
        rows.append(cells)
    first = max(len("batch \\"), *(len(f"{batch:,}") for batch in sweep.batch_sizes))
    cell = max(map(len, [*headers, *(c for row in rows for c in row)]))
    per_table = max(1, (width - 1 - first - _COLUMN_FRAME) // (cell + _COLUMN_FRAME))
    tables = []
    for start in range(0, len(headers), per_table):
        table = Table()
        table.add_column("batch \\ seq")
        for header in headers[start : start + per_table]:
            table.add_column(header, justify="right", no_wrap=True)
        for batch, cells in zip(sweep.batch_sizes, rows, strict=True):
            table.add_row(f"{batch:,}", *cells[start : start + per_table])
        tables.append(table)
    legend = "ok: fits; NO: does not fit. " if sweep.budget else "Give --gpu (or target.gpu) to mark what fits. "
    return _render(title, *tables, legend + (SERVING if sweep.serving else NEEDED) + ".", width=width)


#: Format names of `vramcalc sweep --format`.
SWEEP_FORMATS = ("table", "json", "csv")


def format_sweep(source: str, sweep: Sweep, fmt: str, width: int | None = None) -> str:
    """The grid as ``table``, ``json`` or ``csv``."""
    if fmt == "json":
        return sweep_json(source, sweep)
    if fmt == "csv":
        return sweep_csv(sweep)
    return sweep_table(source, sweep, width)
