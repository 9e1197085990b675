"""`vramcalc report`: a self-contained HTML file (inline SVG, no network, no JavaScript), checked as
markup and rendered in a real headless Chromium (skipped where /usr/bin/chromium is absent)."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.families import estimate
from vramcalc.families.timeline import build_timeline
from vramcalc.hardware.lookup import get_gpu
from vramcalc.planning.budget import budget_for, fit_of
from vramcalc.render.html_report import COLOURS, ReportEntry, axis_max_bytes, render_report, tick_step_gib
from vramcalc.spec.load import load_spec, parse_spec
from vramcalc.units import GiB

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
SPECS = [CONFIGS / "bert-base.yaml", CONFIGS / "gpt2.yaml", CONFIGS / "llama-2-7b.yaml"]
CHROMIUM = Path("/usr/bin/chromium")
runner = CliRunner()


def entry(path: Path, gpu: str | None = None) -> ReportEntry:
    """One report entry, on a card (with the spec's verdict there) when ``gpu`` names one."""
    spec = load_spec(path)
    budget = budget_for(get_gpu(gpu)) if gpu else None
    result = estimate(spec, hopper_or_newer=budget.hopper_or_newer if budget else True)
    fit = fit_of(result, budget) if budget else None
    return ReportEntry(str(path.name), spec, result, build_timeline(spec, result), budget, fit)


class Svgs(HTMLParser):
    """Counts, per <svg class="timeline">, its data-series attribute and its <g class="series"> groups."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: list[dict[str, int]] = []
        self.tags: set[str] = set()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        self.tags.add(tag)
        self.urls += [v or "" for k, v in attrs if k in ("src", "href", "xlink:href", "action")]
        if tag == "svg" and values.get("class") == "timeline":
            self.charts.append({"declared": int(values.get("data-series") or -1), "groups": 0})
        if tag == "g" and values.get("class") == "series":
            self.charts[-1]["groups"] += 1


def parse(html: str) -> Svgs:
    parser = Svgs()
    parser.feed(html)
    return parser


def test_axis_ticks_by_hand() -> None:
    # 8.39 GiB: six 1-GiB steps are too few (6 < 8.39), six 2-GiB steps suffice -> step 2, top 10 GiB
    assert tick_step_gib(round(8.39 * GiB)) == 2
    # H100 SXM usable 81,559 MiB = 79.65 GiB: step 20 (6 x 10 = 60 is too low), top 4 x 20 = 80 GiB
    assert axis_max_bytes([entry(CONFIGS / "bert-base.yaml", "h100-sxm")]) == 80 * GiB
    assert axis_max_bytes([entry(CONFIGS / "bert-base.yaml")]) == 10 * GiB


def test_report_markup() -> None:
    entries = [entry(path, "a100-40gb-sxm") for path in SPECS]
    html = render_report(entries, version="test")
    parsed = parse(html)
    assert [c["groups"] for c in parsed.charts] == [len(e.timeline.series) for e in entries]
    assert [c["declared"] for c in parsed.charts] == [c["groups"] for c in parsed.charts]
    assert "script" not in parsed.tags and "link" not in parsed.tags and "img" not in parsed.tags
    assert parsed.urls == [] and "url(" not in html and "@import" not in html
    assert html.count('class="capacity"') == 3 and html.count('class="budget"') == 3
    assert html.count('<g class="peak">') == 3
    assert "Side by side" in html and "start of backward" in html and "Assumptions" in html
    # llama-2-7b needs 70.8 GiB with overhead; an A100 40GB exposes 40,960 MiB (40 GiB); BERT needs 9.8 GiB
    assert html.count("does not fit") == 2 and "(fits)" in html  # summary table and llama's own table


def test_single_spec_has_no_summary_and_no_capacity_without_gpu() -> None:
    html = render_report([entry(CONFIGS / "bert-base.yaml")])
    assert "Side by side" not in html and 'class="capacity"' not in html


def test_user_text_is_escaped() -> None:
    data = {
        "name": "<script>alert(1)</script>",
        "model": {"architecture": "decoder", "layers": 2, "hidden_size": 64, "heads": 4, "vocab_size": 100},
        "workload": {"batch_size": 2, "seq_len": 16},
    }
    spec = parse_spec(data, "x")
    result = estimate(spec)
    html = render_report([ReportEntry('a"b.yaml', spec, result, build_timeline(spec, result))])
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "a&quot;b.yaml" in html


def test_cli_report_to_file_and_stdout(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = runner.invoke(app, ["report", *map(str, SPECS[:2]), "-o", str(out), "--gpu", "a100-80gb-sxm"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "" and f"wrote {out}" in result.stderr
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    printed = runner.invoke(app, ["report", str(SPECS[0])])
    assert printed.exit_code == 0 and printed.stdout.startswith("<!DOCTYPE html>")


def test_cli_report_bad_input_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmodel: {layers: 2}\n", encoding="utf-8")
    result = runner.invoke(app, ["report", str(SPECS[0]), str(bad), "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {bad}")
    assert not out.exists()
    unwritable = runner.invoke(app, ["report", str(SPECS[0]), "-o", str(tmp_path / "no" / "dir" / "r.html")])
    assert unwritable.exit_code == 2 and "cannot write" in unwritable.stderr


def png_pixels(data: bytes) -> tuple[int, int, set[tuple[int, int, int]]]:
    """Width, height and the set of RGB colours of an 8-bit, non-interlaced RGB/RGBA PNG (stdlib only)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        chunk = data[pos + 8 : pos + 8 + length]
        header = chunk if kind == b"IHDR" else header
        idat += chunk if kind == b"IDAT" else b""
        pos += 12 + length
    width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour_type in (2, 6) and interlace == 0
    bpp = 3 if colour_type == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a, b, c = line[i - bpp] if i >= bpp else 0, prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            else:
                pred = (0, a, b, (a + b) // 2)[kind] if kind < 4 else 0
            line[i] = (line[i] + pred) & 0xFF
        rows.append(line)
        prev = line
    colours = {tuple(row[i : i + 3]) for row in rows for i in range(0, stride, bpp)}
    return width, height, colours  # type: ignore[return-value]


def chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    flags = [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-sync", f"--user-data-dir={profile}",
        "--force-color-profile=srgb", "--hide-scrollbars",
    ]  # fmt: skip
    return subprocess.run([str(CHROMIUM), *flags, *args], capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium not installed (apt-get install chromium)")
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    entries = [entry(path, "h100-sxm") for path in SPECS]
    page = tmp_path / "report.html"
    page.write_text(render_report(entries, version="test"), encoding="utf-8")
    dom = chromium(["--dump-dom", page.as_uri()], tmp_path / "profile-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    charts = parse(dom.stdout).charts  # the DOM after Chromium parsed and laid out the page
    assert [c["groups"] for c in charts] == [len(e.timeline.series) for e in entries]
    shot = tmp_path / "report.png"
    run = chromium([f"--screenshot={shot}", "--window-size=1400,1800", page.as_uri()], tmp_path / "profile-shot")
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    width, height, colours = png_pixels(shot.read_bytes())
    assert (width, height) == (1400, 1800)
    for key in ("parameters", "optimizer_states", "activations", "gradients", "temporaries"):
        rgb = tuple(int(COLOURS[key][i : i + 2], 16) for i in (1, 3, 5))
        assert any(max(abs(p - q) for p, q in zip(rgb, c, strict=True)) <= 3 for c in colours), key
    artifacts = os.environ.get("VRAMCALC_TEST_ARTIFACTS")
    if artifacts:  # keep the screenshot (and the page) where CI collects test artifacts
        Path(artifacts).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(artifacts) / "report.png")
        shutil.copy(page, Path(artifacts) / "report.html")
    assert re.search(r"<svg[^>]*class=\"timeline\"", dom.stdout)
