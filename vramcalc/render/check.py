"""Output formats of `vramcalc check`: each formatter returns a string; the CLI picks the sink.

* ``table``: a rich table (spec, GPU, needed, available, headroom, verdict) with the fixes below it;
* ``json``: a list, one object per spec and card (``spec``, ``gpu``, ``needed_bytes``,
  ``available_bytes``, ``headroom_bytes``, ``fits`` first: a public contract); a bad spec is an
  object with ``fits: null`` and its ``errors``; a file skipped as not a spec, ``fits: null`` and
  ``skipped`` (what it is) but no ``errors``;
* ``github``: workflow commands (``::error file=...,title=...::``) that mark the failing spec in a
  pull request, exactly one per finding, and a plain line per spec that fits (no other line can be
  read as a command);
* ``junit``: XML, one testcase per spec/GPU pair, a ``failure`` for a spec that does not fit and an
  ``error`` for a spec that could not be checked, ``skipped`` for a file that is not a spec;
* ``markdown``: a table for a pull-request comment.

Memory is shown in GiB (2^30 bytes), labelled; JSON carries int bytes (strict RFC 8259 JSON). What a
user controls (file paths, spec names, error messages) goes through the format's function of
:mod:`vramcalc.render.escape`.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from vramcalc.planning.budget import Budget
from vramcalc.planning.check import CheckReport, CheckRow
from vramcalc.planning.suggest import Suggestion
from vramcalc.render.escape import github_data, github_property, markdown_text, terminal_line, xml_text
from vramcalc.render.text import narrow_table, table_width, terminal_width, wrap_text
from vramcalc.stacks.vllm import UNSEEN_BYTES
from vramcalc.units import GiB, MiB

if TYPE_CHECKING:
    from rich.table import Table
    from rich.text import Text

NEEDED = (
    "needed = the estimate's total_bytes: allocated peak + CUDA context + allocator reserve "
    "(+ NCCL buffers across GPUs)"
)
AVAILABLE = "available = the card's usable memory (below) minus the reserve"
#: How a vLLM serving spec is judged (added to the notes when one is shown).
SERVING = (
    "vLLM serving spec: needed = its profiling step's non-KV peak + the batch's KV cache; "
    "available = memory_utilization x (the total vLLM sees - reserve), where vLLM sees the usable memory "
    f"less {UNSEEN_BYTES // MiB} MiB (its start-up logs)"
)


def legend(report: CheckReport) -> list[str]:
    """What "needed" and "available" mean, with the serving rule when a vLLM serving spec is shown."""
    serving = any(row.fit.verdict.kv_pool is not None for row in report.rows)
    return [NEEDED, AVAILABLE, *([SERVING] if serving else [])]


def gib(n_bytes: int) -> str:
    return f"{n_bytes / GiB:,.2f}"


#: The verdict of a row that does not fit, as CI logs are searched for it.
DOES_NOT_FIT = "DOES NOT FIT"


def verdict(row: CheckRow) -> str:
    return "fits" if row.fit.fits else DOES_NOT_FIT


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def summary(report: CheckReport) -> str:
    """'2 fit, 1 does not fit, 1 file could not be checked (exit 2: bad input, not a pass)'."""
    n_fit = sum(row.fit.fits for row in report.rows)
    n_not = len(report.rows) - n_fit
    parts = [f"{n_fit} fit{'s' if n_fit == 1 else ''}", f"{n_not} {'does' if n_not == 1 else 'do'} not fit"]
    if report.errors:
        parts.append(f"{_count(len(report.errors), 'file')} could not be checked")
    if report.skipped:
        parts.append(f"{_count(len(report.skipped), 'file')} skipped (not vramcalc specs)")
    meaning = {0: "every spec fits", 1: "at least one spec does not fit", 2: "bad input, not a pass"}
    code = report.exit_code
    return f"{_count(len(report.rows), 'check')}: {', '.join(parts)} (exit {code}: {meaning[code]})"


def suggestion_text(item: Suggestion) -> str:
    return f"{item.change} -> {gib(item.total_bytes)} GiB (headroom {gib(item.headroom_bytes)} GiB): {item.detail}"


def fixes(row: CheckRow) -> list[str]:
    """Lines saying what would make a failing row fit (nothing for a row that fits)."""
    if row.fit.fits:
        return []
    if not row.fit.suggestions:
        tried = row.fit.tried or "smaller batch, checkpointing, sdpa, amp/bf16, 8-bit AdamW, Adafactor"
        return [f"no single change makes it fit (tried: {tried}); more GPUs: {row.fit.sharding}"]
    return [suggestion_text(item) for item in row.fit.suggestions]


def basis_lines(report: CheckReport) -> list[str]:
    """One line per card: which capacity is used, the reserve and the count."""
    budgets: dict[tuple[str, str, int, bool], Budget] = {}
    for row in report.rows:
        b = row.fit.budget
        budgets.setdefault((b.gpu_id, b.reserve.text, b.count, b.sharded), b)
    lines = []
    for b in budgets.values():
        line = f"{b.gpu_id}: usable {gib(b.usable_bytes)} GiB = {b.capacity_basis}"
        if b.reserve_bytes:
            line += f"; reserve {b.reserve.text} = {gib(b.reserve_bytes)} GiB"
        if b.count > 1 and b.sharded:
            line += f"; planned for {b.count} GPUs as the spec's parallel section lays out (figures per GPU)"
        elif b.count > 1:
            line += f"; planned for {b.count} GPUs, per-card memory unchanged (no sharding in the spec)"
        lines.append(line)
    return lines


def format_json(report: CheckReport) -> str:
    """The rows (:class:`~vramcalc.results.check.CheckResult`), then the specs that could not be checked
    (:class:`~vramcalc.results.check.CheckErrorResult`)."""
    from vramcalc.results.check import CheckErrorResult, CheckResult, CheckSkippedResult

    docs = [CheckResult.of(row).to_dict() for row in report.rows]
    docs += [CheckErrorResult.of(error).to_dict() for error in report.errors]
    docs += [CheckSkippedResult.of(item).to_dict() for item in report.skipped]
    return json.dumps(docs, indent=2, allow_nan=False) + "\n"


def _command(kind: str, file: str, title: str, lines: list[str]) -> str:
    """One workflow command line; ``lines`` become the annotation's lines (each escaped and bounded)."""
    message = "%0A".join(github_data(line) for line in lines)
    return f"::{kind} file={github_property(file)},title={github_property(title)}::{message}"


def format_github(report: CheckReport) -> str:
    """GitHub Actions workflow commands: an error annotation on each failing or bad spec file."""
    lines = []
    for row in report.rows:
        b = row.fit.budget
        numbers = f"needs {gib(row.fit.needed_bytes)} GiB, {gib(row.fit.available_bytes)} GiB available on {b.gpu_name}"
        if row.fit.fits:
            lines.append(terminal_line(f"ok: {row.source}: fits on {b.gpu_id}: {numbers}"))
            continue
        message = [
            f"{numbers} (headroom {gib(row.fit.headroom_bytes)} GiB).",
            "Would fit with:",
            *(f"- {line}" for line in fixes(row)),
        ]
        lines.append(_command("error", row.source, f"vramcalc: {row.name} does not fit on {b.gpu_id}", message))
    for error in report.errors:
        lines += [_command("error", error.source, "vramcalc: bad input", [m]) for m in error.messages]
    return "\n".join([*lines, terminal_line(summary(report))]) + "\n"


def format_junit(report: CheckReport) -> str:
    """JUnit XML: one testcase per spec/GPU pair; failures for specs that do not fit, errors for bad input."""
    n_fail = sum(not row.fit.fits for row in report.rows)
    counts = {
        "tests": str(len(report.rows) + len(report.errors) + len(report.skipped)),
        "failures": str(n_fail),
        "errors": str(len(report.errors)),
    }
    import xml.etree.ElementTree as ET  # noqa: N817 (only the junit format needs it)

    root = ET.Element("testsuites", {"name": "vramcalc check", **counts})
    suite = ET.SubElement(root, "testsuite", {"name": "vramcalc check", **counts, "skipped": str(len(report.skipped))})
    for row in report.rows:
        b, source = row.fit.budget, xml_text(row.source)
        name = xml_text(f"{row.name} on {b.gpu_id}")
        case = ET.SubElement(suite, "testcase", {"name": name, "classname": source, "file": source})
        numbers = f"needs {gib(row.fit.needed_bytes)} GiB, {gib(row.fit.available_bytes)} GiB available"
        if row.fit.fits:
            ET.SubElement(case, "system-out").text = xml_text(f"{numbers}; {b.capacity_basis}")
        else:
            failure = ET.SubElement(case, "failure", {"type": "DoesNotFit", "message": f"does not fit: {numbers}"})
            failure.text = "\n".join(xml_text(line) for line in [b.capacity_basis, *fixes(row)])
    for error in report.errors:
        source, messages = xml_text(error.source), [xml_text(m) for m in error.messages]
        case = ET.SubElement(suite, "testcase", {"name": source, "classname": source, "file": source})
        ET.SubElement(case, "error", {"type": "BadInput", "message": messages[0]}).text = "\n".join(messages)
    for item in report.skipped:
        source = xml_text(item.source)
        case = ET.SubElement(suite, "testcase", {"name": source, "classname": source, "file": source})
        ET.SubElement(case, "skipped", {"message": xml_text(f"{item.reason}, not a vramcalc spec")})
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def format_markdown(report: CheckReport) -> str:
    """A Markdown table for a pull-request comment."""
    lines = [
        "### vramcalc check",
        "",
        "| spec | GPU | needed (GiB) | available (GiB) | headroom (GiB) | verdict |",
        "|---|---|---:|---:|---:|---|",
    ]
    for row in report.rows:
        b, mark = row.fit.budget, ("✅ fits" if row.fit.fits else "❌ does not fit")
        lines.append(
            f"| {markdown_text(row.source)} | {b.gpu_id} | {gib(row.fit.needed_bytes)} | "
            f"{gib(row.fit.available_bytes)} | {gib(row.fit.headroom_bytes)} | {mark} |"
        )
    lines += [
        f"| {markdown_text(e.source)} | | | | | ⚠️ bad input: {markdown_text(e.messages[0])} |" for e in report.errors
    ]
    failing = [row for row in report.rows if not row.fit.fits]
    if failing:
        lines += ["", "**What would make it fit** (single changes, most headroom first)", ""]
        for row in failing:
            lines.append(f"- {markdown_text(row.source)} on {row.fit.budget.gpu_id}:")
            lines += [f"  - {markdown_text(line)}" for line in fixes(row)]
    lines += ["", f"{markdown_text(summary(report))}.", "", f"<sub>{markdown_text('; '.join(legend(report)))}. "]
    lines[-1] += " ".join(f"{markdown_text(line)}." for line in basis_lines(report)) + "</sub>"
    return "\n".join(lines) + "\n"


#: One row of the check table: its cells, rich Text or plain strings.
Cells = tuple["Text | str", ...]


def _table_rows(report: CheckReport, *, stacked: bool) -> list[Cells]:
    """The cells of the table's rows; ``stacked`` puts the GPU under the spec (one column fewer)."""
    from rich.text import Text

    rows: list[Cells] = []
    for row in report.rows:
        b, style = row.fit.budget, ("green" if row.fit.fits else "bold red")
        where = [Text(terminal_line(row.source)), Text(b.gpu_id)]
        if stacked:
            where = [Text("\n").join([where[0], Text(f"on {b.gpu_id}")])]
        figures = (gib(row.fit.needed_bytes), gib(row.fit.available_bytes), gib(row.fit.headroom_bytes))
        rows.append((*where, *figures, Text(verdict(row), style=style)))
    for error in report.errors:
        where = [Text(terminal_line(error.source))] + ([] if stacked else [Text("-")])
        rows.append((*where, "", "", "", Text("bad input (see stderr)", style="yellow")))
    return rows


def _check_table(rows: list[Cells], *, stacked: bool) -> Table:
    """The rows as a rich table; ``stacked``: rows of :func:`_table_rows` with the GPU under the spec."""
    from rich.table import Table

    table = Table(title="vramcalc check", title_justify="left")
    columns = [("spec", "left"), ("GPU", "left"), ("needed GiB", "right"), ("available GiB", "right")]
    columns += [("headroom GiB", "right"), ("verdict", "left")]
    if stacked:
        columns = [("spec on GPU", "left"), *columns[2:]]
    for name, justify in columns:
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for cells in rows:
        table.add_row(*cells)
    return table


def _widest_rows(rows: list[Cells]) -> list[Cells]:
    """The rows that hold some column's widest cell. A table's natural width is its columns' widest cells
    (with padding and borders), so a table of these few rows is as wide as the whole one: rich measures
    each of its cells instead of each of the thousand rows of a large check (a Text cell's width is its
    longest line, as rich measures it; the strings are figures, without markup or emoji codes)."""
    from rich.cells import cell_len
    from rich.text import Text

    def width(cell: Text | str) -> int:
        plain = cell.plain if isinstance(cell, Text) else cell
        return max((cell_len(line) for line in plain.splitlines()), default=0)

    if not rows:
        return rows
    chosen = {max(range(len(rows)), key=lambda index: width(rows[index][column])) for column in range(len(rows[0]))}
    return [rows[index] for index in sorted(chosen)]


def format_table(report: CheckReport, *, color: bool = False, width: int | None = None) -> str:
    """The rich table, rendered to text ``width`` columns wide (default: the terminal's; the GPU goes
    under the spec when the table is wider), ANSI colours only when ``color``."""
    from rich.console import Console
    from rich.text import Text

    width = width or terminal_width()
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=color, no_color=not color, highlight=False, markup=False)
    rows = _table_rows(report, stacked=False)
    if table_width(_check_table(_widest_rows(rows), stacked=False), console, natural=True) > width:
        table = _check_table(_table_rows(report, stacked=True), stacked=True)
        narrow_table(table, flexible=0, wrapping=(4,))
        if any(not row.fit.fits for row in report.rows):  # never split: a log is searched for DOES_NOT_FIT
            verdict_column = table.columns[4]
            verdict_column.width = max(verdict_column.width or 0, len(DOES_NOT_FIT))
    else:
        table = _check_table(rows, stacked=False)
    console.print(table)

    def say(line: str) -> None:
        console.print(wrap_text(Text(terminal_line(line)), width), soft_wrap=True)

    for row in report.rows:
        if not row.fit.fits:
            say(f"{row.source} on {row.fit.budget.gpu_id} would fit with:")
            for line in fixes(row):
                say(f"  - {line}")
    for line in [*legend(report), *basis_lines(report), summary(report)]:
        say(line)
    return buffer.getvalue()


#: Format name -> formatter (the CLI's ``--format`` choices are these names).
FORMATTERS: dict[str, Callable[[CheckReport], str]] = {
    "table": format_table,
    "json": format_json,
    "github": format_github,
    "junit": format_junit,
    "markdown": format_markdown,
}


def format_check(report: CheckReport, fmt: str, *, color: bool = False, width: int | None = None) -> str:
    """The report in format ``fmt`` (a key of :data:`FORMATTERS`; ``color`` and ``width`` apply to the table)."""
    if fmt == "table":
        return format_table(report, color=color, width=width)
    return FORMATTERS[fmt](report)
