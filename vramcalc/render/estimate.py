"""Presentation of an estimate: rich tables. The only place bytes become "GiB" text.

The ``--json`` document is :class:`vramcalc.results.estimate.EstimateResult`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from vramcalc.families.estimate import COMPONENTS, Estimate
from vramcalc.render.escape import terminal_line
from vramcalc.render.text import LABELS, gib, print_wrapped
from vramcalc.units import GB

if TYPE_CHECKING:  # the planning modules load only when a card is named
    from vramcalc.llm.kvcache import Capacity
    from vramcalc.planning.budget import Budget, Fit

#: Widest share bar; narrower when the terminal is (never under MIN_BAR_WIDTH).
BAR_WIDTH = 24
MIN_BAR_WIDTH = 8
#: Widest text of the share column besides the bar ("max_memory_allocated()").
SHARE_TEXT = 22
#: Columns the component table spends on borders and padding (4 columns).
TABLE_FRAME = 13


def _bar(n_bytes: int, total: int, width: int = BAR_WIDTH) -> str:
    filled = round(width * n_bytes / total) if total else 0
    return "█" * filled + "·" * (width - filled)


def _bar_width(result: Estimate, console_width: int) -> int:
    """The share bar's width: BAR_WIDTH, less what the console lacks for the other columns."""
    labels = [LABELS[key] for key in COMPONENTS if result.components[key] or result.component_peaks[key]]
    labels += [f"+ {LABELS[key]}" for key in result.overhead] + ["peak allocated"]
    figures = [gib(v) for v in (*result.components.values(), *result.component_peaks.values(), result.total_bytes)]
    number = max(len("own max GiB"), *map(len, figures))
    spare = console_width - TABLE_FRAME - max(map(len, labels)) - 2 * number
    return max(MIN_BAR_WIDTH, min(BAR_WIDTH, spare))


def render_estimate(
    result: Estimate, console: Console, budget: Budget | None = None, fit: Fit | None = None, *, explain: bool = False
) -> None:
    """Component table (at the peak and each component's own maximum), phases, overhead, the assumptions
    (compact, or with their reasons when ``explain``), verdict."""
    peak = result.peak_allocated_bytes
    per_gpu = f", per GPU of {result.parallel.plan.gpus}" if result.parallel and result.parallel.plan.gpus > 1 else ""
    title = Text(terminal_line(f"{result.name}: {result.params:,} parameters, {result.mode}{per_gpu}"))
    table = Table(title=title, title_justify="left")
    bar_width = _bar_width(result, console.width)
    table.add_column("component")
    table.add_column("at peak GiB", justify="right")
    table.add_column("own max GiB", justify="right")
    table.add_column(f"share of peak ({result.peak_phase})", min_width=min(bar_width, SHARE_TEXT))
    for key in COMPONENTS:
        at_peak, own = result.components[key], result.component_peaks[key]
        if at_peak == 0 and own == 0:
            continue
        table.add_row(LABELS[key], gib(at_peak), gib(own), _bar(at_peak, peak, bar_width))
    table.add_section()
    table.add_row(Text("peak allocated", style="bold"), Text(gib(peak), style="bold"), "", "max_memory_allocated()")
    for key, value in result.overhead.items():
        table.add_row(f"+ {LABELS[key]}", gib(value), "", "outside the allocator")
    total = Text(gib(result.total_bytes), style="bold")
    table.add_row(Text("total", style="bold"), total, "", f"{result.total_bytes / GB:,.2f} GB")
    if result.paged_bytes:
        counted = "in the verdict (paged_states: device)" if result.paged_in_fit else "may page to the host"
        table.add_section()
        table.add_row("paged optimizer states", gib(result.paged_bytes), "", f"managed memory, {counted}")
    console.print(table)
    phases = ", ".join(f"{name} {gib(value)} GiB" for name, value in result.phases.items())
    print_wrapped(console, Text.assemble("peak phase: ", (result.peak_phase, "bold"), f" (phases: {phases})"))
    if result.component_peaks["gradients"] > result.components["gradients"]:
        print_wrapped(
            console,
            f"note: gradients are {gib(result.component_peaks['gradients'])} GiB once allocated; "
            f"at the {result.peak_phase} peak only {gib(result.components['gradients'])} GiB of them exist.",
        )
    if result.llm is not None:
        from vramcalc.render.llm import render_llm

        render_llm(result, console, budget, fit)
    if result.parallel is not None:
        from vramcalc.render.plan import render_parallel

        render_parallel(result, console)
    if result.assumptions:
        print_wrapped(console, assumptions_line(result.assumptions, explain))
    if budget is not None and fit is not None:
        print_wrapped(console, verdict_line(budget, fit))


#: A "key not given: value" note, the form of most assumptions.
_NOT_GIVEN = " not given: "


def _without_asides(text: str) -> str:
    """``text`` without its parenthesised asides (the reasons), nested ones included."""
    out, depth = [], 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")" and depth:
            depth -= 1
        elif not depth:
            out.append(char)
    return " ".join("".join(out).split()).replace(" ,", ",").replace(" ;", ";").replace(" :", ":")


def compact(note: str) -> str:
    """One assumption without its reasons: ``bias not given: false (linear biases as in ...)`` ->
    ``bias=false``; other notes lose their parenthesised asides."""
    return _without_asides(note).replace(_NOT_GIVEN, "=")


def assumptions_line(notes: list[str], explain: bool = False) -> str:
    """The assumptions in one line: compact (``key=value``, no reasons) unless ``explain``."""
    if explain:
        return "assumptions: " + "; ".join(notes)
    return "assumptions: " + "; ".join(compact(note) for note in notes) + " (--explain: the reasons)"


def refusal(pool: Capacity) -> str:
    """What vLLM says when one request of max_model_len does not fit its KV budget ("" when it starts)."""
    if not pool.refused:
        return ""
    if not pool.budget_bytes:
        return " (vLLM would refuse to start: no memory is left for the KV cache blocks after its profile)"
    longest = pool.longest_request or 0
    fits = f"; the largest max_model_len that fits is {longest:,}" if longest else "; not even one token fits"
    return (
        f" (vLLM would refuse to start: one request of max_model_len {pool.max_model_len:,} needs "
        f"{gib(pool.startup_bytes)} GiB of KV cache, more than the {gib(pool.budget_bytes)} GiB available{fits})"
    )


def verdict_line(budget: Budget, fit: Fit) -> Text:
    """The card, what is available on it and the verdict (the verdict coloured; the card's names as text)."""
    verdict = ("fits", "green") if fit.fits else ("does not fit", "red")
    reserve = f" - reserve {gib(budget.reserve_bytes)} GiB ({budget.reserve.text})" if budget.reserve_bytes else ""
    card = terminal_line(f"{budget.gpu_name}: {gib(budget.usable_bytes)} GiB usable ({budget.capacity_basis}){reserve}")
    if fit.kv_pool is not None:
        pool = fit.kv_pool
        return Text.assemble(
            f"{card}; vLLM manages {gib(fit.available_bytes)} GiB (memory_utilization {pool.memory_utilization:g}); "
            f"needs {gib(fit.needed_bytes)} GiB (profile peak + KV cache of the batch) -> ",
            verdict,
            f", headroom {gib(fit.headroom_bytes)} GiB; at most {pool.max_sequences:,} concurrent sequences",
            refusal(pool),
        )
    return Text.assemble(
        f"{card}; needs {gib(fit.needed_bytes)} GiB -> ", verdict, f", headroom {gib(fit.headroom_bytes)} GiB"
    )
