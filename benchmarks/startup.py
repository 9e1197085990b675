"""Start-up cost of `vramcalc estimate configs/bert-base.yaml` against the smallest program that does
the same job with the same libraries.

    python benchmarks/startup.py [--runs 21]

The floor program (FLOOR below) is what any program built on vramcalc's libraries pays at least: a
one-command typer app takes the spec path, PyYAML reads the file (``yaml.safe_load``, the pure-Python
safe loader that vramcalc's bounded loader also builds on), a pydantic model of the spec's top-level
sections (``name``, and ``model`` and ``workload`` as plain dicts) validates it, and rich prints a
table of the workload through a ``Console``.

Runs are paired and interleaved (floor, vramcalc, floor, vramcalc, ...), each a fresh interpreter with
its output discarded, after one warm-up run of each that also writes the bytecode caches (children may
write them even when PYTHONDONTWRITEBYTECODE is set, as an installed package has them). Prints the
median CPU time (user + system of the child) and wall time of each, and the CPU ratio vramcalc / floor,
the figure to watch: CPU time leaves out the time spent waiting for a core on a busy machine. The median
of the per-pair ratios is printed too; it moves least when the machine's speed drifts during a run.
For scale it also times ``python -c "import typer, rich, pydantic, yaml"``, which loads only those
packages' lazy top levels. Always exits 0: it is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "configs" / "bert-base.yaml"
#: CPU ratio (vramcalc / floor) the start-up is held to.
TARGET_RATIO = 1.15

FLOOR = """
from pathlib import Path
from typing import Any

import typer
import yaml
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table


class Spec(BaseModel):
    name: str | None = None
    model: dict[str, Any]
    workload: dict[str, Any]


def estimate(spec: Path) -> None:
    loaded = Spec.model_validate(yaml.safe_load(spec.read_text(encoding="utf-8")))
    table = Table(title=loaded.name, title_justify="left")
    table.add_column("key")
    table.add_column("value", justify="right")
    for key, value in loaded.workload.items():
        table.add_row(key, str(value))
    Console().print(table)


app = typer.Typer()
app.command()(estimate)
app()
"""

PROGRAMS = {
    "floor program": [sys.executable, "-c", FLOOR, str(SPEC)],
    "vramcalc estimate": [sys.executable, "-m", "vramcalc", "estimate", str(SPEC)],
    "import typer, rich, pydantic, yaml": [sys.executable, "-c", "import typer, rich, pydantic, yaml"],
}
#: Children may write bytecode caches, as an installed package has them: without, every run of an
#: editable install would compile vramcalc's sources while the libraries load their cached bytecode.
ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def run_once(cmd: list[str]) -> tuple[float, float, int]:
    """(CPU seconds of the child, wall seconds, exit code) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    code = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, env=ENV).returncode
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="paired runs (default 21)")
    args = parser.parse_args()
    runs = max(1, args.runs)
    cpu: dict[str, list[float]] = {label: [] for label in PROGRAMS}
    wall: dict[str, list[float]] = {label: [] for label in PROGRAMS}
    failed: set[str] = set()
    for label, cmd in PROGRAMS.items():  # warm the file cache and the bytecode caches
        if run_once(cmd)[2] != 0:
            failed.add(label)
    for _ in range(runs):
        for label, cmd in PROGRAMS.items():
            seconds, elapsed, code = run_once(cmd)
            cpu[label].append(seconds)
            wall[label].append(elapsed)
            if code != 0:
                failed.add(label)

    def ms(values: list[float]) -> float:
        return 1000 * statistics.median(values)

    print(f"medians of {runs} interleaved runs, {sys.executable}")
    print(f"{'':36} {'CPU ms':>8} {'wall ms':>8}")
    for label in PROGRAMS:
        print(f"{label + ':':36} {ms(cpu[label]):8.1f} {ms(wall[label]):8.1f}")
    for label in sorted(failed):
        print(f"warning: {label} exited non-zero in at least one run")
    floor, ours = ms(cpu["floor program"]), ms(cpu["vramcalc estimate"])
    ratio = ours / floor if floor else float("nan")
    wall_ratio = ms(wall["vramcalc estimate"]) / ms(wall["floor program"])
    paired = statistics.median(a / b for a, b in zip(cpu["vramcalc estimate"], cpu["floor program"]) if b)
    print(f"ratio (wall): {wall_ratio:.2f}")
    print(f"median of the {runs} paired CPU ratios: {paired:.2f}")
    print(f"ratio (CPU): {ratio:.2f} (goal <= {TARGET_RATIO:.2f}): {'met' if ratio <= TARGET_RATIO else 'not met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
