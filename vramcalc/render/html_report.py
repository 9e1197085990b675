"""Self-contained HTML report: step timelines as inline SVG, component tables, assumptions, headroom.

One file, no network and no JavaScript: styles are inline, every chart is an ``<svg>`` drawn here,
hover text uses SVG ``<title>``. Several specs share one y-scale and sit side by side, after a summary
table, so fp32, mixed precision and checkpointing can be compared at a glance. Returns a string;
the CLI decides where it goes.

Chart markup (relied on by tests): each chart is ``<svg class="timeline" data-series="N">`` with one
``<g class="series" data-component="KEY">`` per stacked component, a ``polyline.total``, a
``g.peak`` marker and, with a card, ``line.capacity`` (usable bytes) and ``line.budget`` (usable -
CUDA context - allocator reserve: the peak must stay under it to fit).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from vramcalc.families.estimate import COMPONENTS, Estimate
from vramcalc.families.timeline import Timeline, allocation_budget_bytes
from vramcalc.planning.budget import Budget, Fit
from vramcalc.render.escape import html_text
from vramcalc.render.estimate import refusal
from vramcalc.render.text import LABELS, gib
from vramcalc.spec.models import Spec
from vramcalc.units import GB, GiB

#: Fill colour of each component (colour-blind-safe Tableau 10); unknown components are grey.
COLOURS = {
    "parameters": "#4e79a7",
    "allocator_rounding": "#a0cbe8",
    "gradients": "#b07aa1",
    "optimizer_states": "#edc948",
    "activations": "#59a14f",
    "inputs": "#bab0ac",
    "autocast_weight_copies": "#76b7b2",
    "temporaries": "#e15759",
    "workspace": "#9c755f",
}
OTHER_COLOUR = "#888888"
#: Maps a point index or a byte count to an SVG coordinate.
Scale = Callable[[int], float]
WIDTH, HEIGHT = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 60, 16, 44, 42
#: Baseline of the peak label, above the plot and the capacity labels.
PEAK_LABEL_Y = 14
#: Candidate y-axis steps in GiB: the smallest giving at most six intervals is used.
TICK_STEPS = (0.1, 0.2, 0.25, 0.5, 1, 2, 2.5, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000)

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:22px;margin:0 0 4px} h2{font-size:18px;margin:0 0 2px} .muted{color:#666}
.specs{display:grid;grid-template-columns:repeat(auto-fit,minmax(560px,1fr));gap:24px;margin-top:16px}
.spec{border:1px solid #ddd;border-radius:6px;padding:14px}
table{border-collapse:collapse;margin:8px 0} td,th{padding:2px 10px;border-bottom:1px solid #eee;text-align:left}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.legend span{display:inline-block;margin-right:14px} .swatch{display:inline-block;width:12px;height:12px;
vertical-align:-1px;margin-right:4px;border-radius:2px} .fits{color:#1a7f37} .over{color:#c62828}
svg.timeline{width:100%;height:auto;max-width:760px;overflow:visible} svg text{font:11px system-ui,sans-serif;fill:#333}
figure{margin:8px 0} figcaption{color:#444;font-size:13px}
"""


@dataclass(frozen=True)
class ReportEntry:
    """One spec of the report: where it came from, what it says, its estimate and timeline."""

    source: str
    spec: Spec
    estimate: Estimate
    timeline: Timeline
    budget: Budget | None = None  # the card, with the spec's reserve
    fit: Fit | None = None  # the verdict on that card (vramcalc.planning.budget.fit_of)


def esc(text: object) -> str:
    """``text`` for the document, through :func:`vramcalc.render.escape.html_text`."""
    return html_text(str(text))


def colour(key: str) -> str:
    return COLOURS.get(key, OTHER_COLOUR)


def axis_max_bytes(entries: list[ReportEntry]) -> int:
    """Shared y-axis top: the largest peak (or the card's usable bytes), rounded up to a tick."""
    top = max(e.timeline.peak_bytes for e in entries)
    for e in entries:
        if e.budget is not None:
            top = max(top, e.budget.usable_bytes)
    step = tick_bytes(top)
    return max(1, math.ceil(top / step)) * step


def tick_bytes(top_bytes: int) -> int:
    """The y-axis step in bytes (a round number of GiB, see :data:`TICK_STEPS`)."""
    return round(tick_step_gib(top_bytes) * GiB)


def tick_step_gib(top_bytes: int) -> float:
    """The smallest step (GiB) that covers ``top_bytes`` in at most six intervals."""
    for step in TICK_STEPS:
        if top_bytes <= 6 * step * GiB:
            return step
    return TICK_STEPS[-1] * (top_bytes // (6 * TICK_STEPS[-1] * GiB) + 1)


def render_report(entries: list[ReportEntry], *, version: str = "") -> str:
    """The whole HTML document (UTF-8 text); with a card, each entry carries its budget and verdict."""
    y_max = axis_max_bytes(entries)
    first = entries[0].budget if entries else None
    card = f" on {esc(first.gpu_name)}" if first is not None else ""
    with_card = first is not None
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>vramcalc report: {esc(', '.join(e.estimate.name for e in entries))}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>GPU memory of one step{card}</h1>",
        f'<p class="muted">vramcalc {esc(version)}; memory in GiB (2<sup>30</sup> bytes). Allocated memory is '
        "what <code>torch.cuda.max_memory_allocated()</code> reports; total adds the CUDA context and the "
        "caching allocator's reserve.</p>",
        _summary_table(entries, with_card) if len(entries) > 1 else "",
        _legend(entries),
        '<div class="specs">',
        *(_section(entry, y_max) for entry in entries),
        "</div>",
        _measure_note(),
        "</body></html>",
    ]
    return "\n".join(p for p in parts if p) + "\n"


def _legend(entries: list[ReportEntry]) -> str:
    keys = [k for k in COMPONENTS if any(k in e.timeline.series for e in entries)]
    keys += sorted({k for e in entries for k in e.timeline.series if k not in COMPONENTS})
    items = "".join(
        f'<span><i class="swatch" style="background:{colour(k)}"></i>{esc(LABELS.get(k, k))}</span>' for k in keys
    )
    return f'<p class="legend">{items}</p>'


def _workload_text(spec: Spec) -> str:
    wl = spec.workload
    shape = f"batch {wl.batch_size}" + (f" x seq {wl.seq_len}" if wl.seq_len else "")
    optimizer = wl.optimizer.value if wl.optimizer is not None else "default"
    return (
        f"{wl.mode.value}, {wl.precision.value}, {shape}, optimizer {optimizer} ({wl.optimizer_impl.value}), "
        f"checkpointing {wl.gradient_checkpointing.value}, attention {wl.attention.value}"
    )


def _headroom_cell(fit: Fit | None) -> str:
    if fit is None:
        return ""
    css, word = ("fits", "fits") if fit.fits else ("over", "does not fit")
    return f'<td class="num {css}">{gib(fit.headroom_bytes)} ({word})</td>'


def _summary_table(entries: list[ReportEntry], with_card: bool) -> str:
    head = "<th>spec</th><th>workload</th><th>peak phase</th><th class='num'>peak allocated GiB</th>"
    head += "<th class='num'>total GiB</th>" + ("<th class='num'>headroom GiB</th>" if with_card else "")
    rows = [
        f"<tr><td>{esc(e.estimate.name)}<br><span class='muted'>{esc(e.source)}</span></td>"
        f"<td>{esc(_workload_text(e.spec))}</td><td>{esc(e.timeline.peak_reason)}</td>"
        f"<td class='num'>{gib(e.estimate.peak_allocated_bytes)}</td><td class='num'>{gib(e.estimate.total_bytes)}</td>"
        f"{_headroom_cell(e.fit)}</tr>"
        for e in entries
    ]
    return f"<h2>Side by side</h2><table class='summary'><tr>{head}</tr>{''.join(rows)}</table>"


def _section(entry: ReportEntry, y_max: int) -> str:
    est, tl = entry.estimate, entry.timeline
    caption = f"Peak {gib(tl.peak_bytes)} GiB at {tl.peak_reason}."
    if not tl.detailed:
        caption += " " + " ".join(tl.notes)
    return (
        f'<section class="spec"><h2>{esc(est.name)}</h2>'
        f'<p class="muted">{esc(entry.source)}: {est.params:,} parameters; {esc(_workload_text(entry.spec))}</p>'
        f"<figure>{timeline_svg(tl, est, y_max, entry.budget)}<figcaption>{esc(caption)}</figcaption></figure>"
        f"{_component_table(est, entry.budget, entry.fit)}{_phase_list(est)}{_assumptions(est)}</section>"
    )


def _component_table(est: Estimate, budget: Budget | None, fit: Fit | None) -> str:
    rows = [
        f"<tr><td><i class='swatch' style='background:{colour(k)}'></i>{esc(LABELS.get(k, k))}</td>"
        f"<td class='num'>{gib(est.components.get(k, 0))}</td>"
        f"<td class='num'>{gib(est.component_peaks.get(k, 0))}</td></tr>"
        for k in est.components
        if est.components.get(k, 0) or est.component_peaks.get(k, 0)
    ]
    rows.append(f"<tr><th>peak allocated</th><th class='num'>{gib(est.peak_allocated_bytes)}</th><th></th></tr>")
    rows += [
        f"<tr><td>+ {esc(LABELS.get(k, k))}</td><td class='num'>{gib(v)}</td><td>outside the allocator</td></tr>"
        for k, v in est.overhead.items()
    ]
    rows.append(
        f"<tr><th>total</th><th class='num'>{gib(est.total_bytes)}</th><th>{est.total_bytes / GB:,.2f} GB</th></tr>"
    )
    if budget is not None and fit is not None:
        css = "fits" if fit.fits else "over"
        rows.append(
            f"<tr><td>{esc(budget.gpu_name)} usable</td><td class='num'>{gib(budget.usable_bytes)}</td>"
            f"<td>{esc(budget.capacity_basis)}</td></tr>"
        )
        if budget.reserve_bytes:
            rows.append(
                f"<tr><td>- reserve</td><td class='num'>{gib(budget.reserve_bytes)}</td>"
                f"<td>{esc(budget.reserve.text)} kept free</td></tr>"
            )
        if fit.kv_pool is not None:
            rows.append(
                f"<tr><td>vLLM manages</td><td class='num'>{gib(fit.available_bytes)}</td>"
                f"<td>memory_utilization {fit.kv_pool.memory_utilization:g}; needs {gib(fit.needed_bytes)} GiB; "
                f"at most {fit.kv_pool.max_sequences:,} concurrent sequences{esc(refusal(fit.kv_pool))}</td></tr>"
            )
        rows.append(
            f"<tr><th>headroom</th><th class='num {css}'>{gib(fit.headroom_bytes)}</th>"
            f"<th class='{css}'>{'fits' if fit.fits else 'does not fit'}</th></tr>"
        )
    head = (
        f"<tr><th>component</th><th class='num'>at peak ({esc(est.peak_phase)}) GiB</th>"
        "<th class='num'>own max GiB</th></tr>"
    )
    return f"<table class='components'>{head}{''.join(rows)}</table>"


def _phase_list(est: Estimate) -> str:
    items = ", ".join(f"{esc(name)} {gib(value)} GiB" for name, value in est.phases.items())
    return f"<p>Phases (allocated at each phase's peak): {items}.</p>"


def _assumptions(est: Estimate) -> str:
    if not est.assumptions:
        return ""
    items = "".join(f"<li>{esc(a)}</li>" for a in est.assumptions)
    return f"<details open><summary>Assumptions</summary><ul>{items}</ul></details>"


def _measure_note() -> str:
    return (
        "<h2>Measure it yourself</h2><p>After two or more training steps, dump PyTorch's own statistics and "
        "compare: <code>json.dump(torch.cuda.memory_stats(), open('stats.json', 'w'))</code>, then "
        '<code>vramcalc compare SPEC --measured stats.json --nvidia-smi-used "$(nvidia-smi '
        '--query-gpu=memory.used --format=csv,noheader)"</code>.</p>'
    )


def timeline_svg(tl: Timeline, est: Estimate, y_max: int, budget: Budget | None = None) -> str:
    """The stacked-area chart of one timeline (inline SVG; y from 0 to ``y_max`` bytes)."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    n = len(tl.points)

    def x(i: int) -> float:
        return LEFT + (plot_w * i / (n - 1) if n > 1 else plot_w / 2)

    def y(n_bytes: int) -> float:
        return TOP + plot_h - plot_h * n_bytes / y_max

    body = [_phase_bands(tl, x), _y_axis(y_max, y), _areas(tl, x, y), _total_line(tl, x, y)]
    if budget is not None:
        body.append(_capacity_lines(budget, est, y))
    body.append(_peak_marker(tl, x, y))
    title = f"{tl.name}: allocated memory through one step, peak {gib(tl.peak_bytes)} GiB"
    return (
        f'<svg class="timeline" data-series="{len(tl.series)}" role="img" '
        f'width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}"><title>{esc(title)}</title>'
        + "".join(body)
        + "</svg>"
    )


def _phase_bands(tl: Timeline, x: Scale) -> str:
    """Alternating background bands and a label under each phase's run of points."""
    out: list[str] = []
    start = 0
    points = tl.points
    for i in range(1, len(points) + 1):
        if i < len(points) and points[i].phase == points[start].phase:
            continue
        x0, x1 = x(start), x(i - 1)
        fill = "#f4f6fa" if len(out) % 2 == 0 else "#ffffff"
        out.append(
            f'<g class="phase" data-phase="{esc(points[start].phase)}"><rect x="{x0:.1f}" y="{TOP}" '
            f'width="{max(x1 - x0, 1):.1f}" height="{HEIGHT - TOP - BOTTOM}" fill="{fill}"/>'
            f'<text x="{(x0 + x1) / 2:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">'
            f"{esc(points[start].phase)}</text></g>"
        )
        start = i
    return "".join(out)


def _y_axis(y_max: int, y: Scale) -> str:
    step = tick_bytes(y_max)
    out = []
    for tick in range(0, y_max + 1, step):
        ty = y(tick)
        out.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{ty:.1f}" y2="{ty:.1f}" stroke="#e3e3e3"/>'
            f'<text x="{LEFT - 6}" y="{ty + 4:.1f}" text-anchor="end">{tick / GiB:g}</text>'
        )
    out.append(f'<text x="{LEFT - 6}" y="{TOP - 14}" text-anchor="end">GiB</text>')
    return '<g class="y-axis">' + "".join(out) + "</g>"


def _areas(tl: Timeline, x: Scale, y: Scale) -> str:
    """One stacked polygon per series: the running sum up to it, back along the sum below it."""
    below = [0] * len(tl.points)
    out = []
    for key in tl.series:
        above = [b + p.components.get(key, 0) for b, p in zip(below, tl.points, strict=True)]
        upper = [f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(above)]
        lower = [f"{x(i):.1f},{y(v):.1f}" for i, v in reversed(list(enumerate(below)))]
        label = f"{LABELS.get(key, key)}: up to {gib(max(p.components.get(key, 0) for p in tl.points))} GiB"
        out.append(
            f'<g class="series" data-component="{esc(key)}"><polygon points="{" ".join(upper + lower)}" '
            f'fill="{colour(key)}" fill-opacity="0.9"><title>{esc(label)}</title></polygon></g>'
        )
        below = above
    return "".join(out)


def _total_line(tl: Timeline, x: Scale, y: Scale) -> str:
    coords = " ".join(f"{x(i):.1f},{y(p.total_bytes):.1f}" for i, p in enumerate(tl.points))
    dots = "".join(
        f'<circle cx="{x(i):.1f}" cy="{y(p.total_bytes):.1f}" r="2.5" fill="#222">'
        f"<title>{esc(p.phase)}: {esc(p.label)}: {gib(p.total_bytes)} GiB</title></circle>"
        for i, p in enumerate(tl.points)
    )
    return f'<polyline class="total" points="{coords}" fill="none" stroke="#222" stroke-width="1.2"/>{dots}'


def _capacity_lines(budget: Budget, est: Estimate, y: Scale) -> str:
    """The card's usable bytes, and under it the allocation budget (usable - kept free - overhead)."""
    out = []
    tensors = allocation_budget_bytes(budget.available_bytes, est)
    kept = " - kept free" if budget.reserve_bytes else ""
    for css, value, text, dash, dy in (
        ("capacity", budget.usable_bytes, f"{budget.gpu_name}: {gib(budget.usable_bytes)} GiB usable", "6 3", -4),
        ("budget", tensors, f"for tensors (usable{kept} - context - reserve): {gib(tensors)} GiB", "2 3", 12),
    ):
        ly = y(max(value, 0))
        out.append(
            f'<line class="{css}" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{ly:.1f}" y2="{ly:.1f}" stroke="#c62828" '
            f'stroke-dasharray="{dash}"/><text x="{LEFT + 4}" y="{ly + dy:.1f}" fill="#c62828">{esc(text)}</text>'
        )
    return "".join(out)


def _peak_marker(tl: Timeline, x: Scale, y: Scale) -> str:
    i, peak = tl.peak_index, tl.peak
    px, py = x(i), y(peak.total_bytes)
    anchor = "end" if px > LEFT + (WIDTH - LEFT - RIGHT) * 0.6 else "start"
    dx = -6 if anchor == "end" else 6
    return (
        f'<g class="peak"><line x1="{px:.1f}" x2="{px:.1f}" y1="{PEAK_LABEL_Y + 4}" y2="{HEIGHT - BOTTOM}" '
        'stroke="#222" '
        f'stroke-dasharray="3 3"/><circle cx="{px:.1f}" cy="{py:.1f}" r="5" fill="none" stroke="#222" '
        'stroke-width="2"/>'
        f'<text x="{px + dx:.1f}" y="{PEAK_LABEL_Y}" text-anchor="{anchor}" font-weight="bold">'
        f"peak {gib(peak.total_bytes)} GiB: {esc(peak.phase)}, {esc(peak.label)}</text></g>"
    )
