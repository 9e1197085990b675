"""Start-up cost of `vramcalc estimate configs/bert-base.yaml` against the smallest program that does
the same job with the same libraries.

    python benchmarks/startup.py [--runs 21] [--stages]
    python benchmarks/startup.py --instructions

The floor program (FLOOR below) is what any program built on vramcalc's libraries pays at least: a
one-command typer app takes the spec path, PyYAML reads the file (its safe loader over libyaml's parser
where PyYAML has it, as vramcalc's bounded loader reads such a spec), a pydantic model of the spec's
top-level sections (``name``, and ``model`` and ``workload`` as plain dicts) validates it, and rich
prints a table of the workload through a ``Console``.

Runs are paired and interleaved (floor, vramcalc, floor, vramcalc, ...), each a fresh interpreter with
its output discarded, after one warm-up run of each that also writes the bytecode caches (children may
write them even when PYTHONDONTWRITEBYTECODE is set, as an installed package has them). Prints the
median CPU time (user + system of the child) and wall time of each, and the CPU ratio vramcalc / floor,
the figure to watch: CPU time leaves out the time spent waiting for a core on a busy machine. The median
of the per-pair ratios is printed too; it moves least when the machine's speed drifts during a run.
For scale it also times ``python -c "import typer, rich, pydantic, yaml"``, which loads only those
packages' lazy top levels. Always exits 0: it is a measurement, not a test.

Where the difference goes: ``--stages`` also times, in the same rounds, the libraries alone (with one
pydantic model built), then with the command line imported, then with every other module the estimate
command loads (:func:`stages`), each stage's cost being the difference of two medians, and what the
command adds after its imports. On a busy machine those differences are noisy; ``--instructions``
instead counts the instructions of one run of each with valgrind's callgrind (hash randomisation off, so
counts repeat exactly), module by module in the order the command imports them, and names the modules
each step loads first. Counts are a proxy, exact enough to compare changes: the instruction ratio is
higher than the CPU ratio.
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
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    loaded = Spec.model_validate(yaml.load(spec.read_text(encoding="utf-8"), Loader=loader))
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

#: The floor's libraries, imported as the floor imports them, and one pydantic model built (pydantic loads
#: its schema machinery with the first model, which the floor pays for too).
LIBRARIES = (
    "import typer, yaml\nfrom pydantic import BaseModel\nfrom rich.console import Console\n"
    "from rich.table import Table\nclass Model(BaseModel):\n    x: int\n"
)
#: What prints the vramcalc modules ``vramcalc estimate SPEC`` loads, in the order their imports begin.
LOADED = """
import atexit, runpy, sys
names = lambda: ' '.join(m for m in sys.modules if m.startswith('vramcalc') and not m.endswith('__main__'))
atexit.register(lambda: print(names(), file=sys.stderr))
sys.argv = ['vramcalc', 'estimate', sys.argv[1]]
runpy.run_module('vramcalc', run_name='__main__')
"""


def estimate_modules() -> list[str]:
    """The vramcalc modules ``vramcalc estimate SPEC`` loads, in the order their imports begin."""
    done = subprocess.run(
        [sys.executable, "-c", LOADED, str(SPEC)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=ENV,
    )
    return done.stderr.strip().splitlines()[-1].split()


def stages() -> dict[str, str]:
    """``--stages``: the libraries (one pydantic model built), then the command line, then every other
    module the estimate command loads, imported on top (each stage's cost is its median CPU time less the
    previous stage's; what the command then does is the last step)."""
    rest = [name for name in estimate_modules() if not name.startswith("vramcalc.cli")]
    return {
        "the libraries": LIBRARIES,
        "+ vramcalc.cli.main": LIBRARIES + "import vramcalc.cli.main",
        "+ the modules the command imports": LIBRARIES + f"import vramcalc.cli.main, {', '.join(rest)}",
    }


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


def instructions(cmd: list[str]) -> int:
    """Instructions one run executes (valgrind's callgrind; hash randomisation off, so runs repeat exactly)."""
    import re

    env = {**ENV, "PYTHONHASHSEED": "0"}
    subprocess.run(cmd, capture_output=True, cwd=ROOT, env=env)  # the bytecode caches
    tool = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    done = subprocess.run([*tool, *cmd], capture_output=True, text=True, cwd=ROOT, env=env)
    found = re.search(r"refs:\s+([\d,]+)", done.stderr)
    if not found:
        raise SystemExit(f"valgrind failed: {done.stderr[-500:]}")
    return int(found.group(1).replace(",", ""))


#: ``--instructions`` lists the steps that add at least this many instructions, and sums the others.
SHOWN_STEP = 1_000_000


def count_instructions() -> None:
    """``--instructions``: the floor, the libraries, then the modules the estimate command loads, imported
    one after another in the order their imports complete (so each step adds one module's own cost; one
    that imports a package's ``__init__`` first also loads what that imports, named in the last column),
    then the command. The counts run in parallel, one per core: a run under valgrind takes seconds."""
    import shutil
    from concurrent.futures import ThreadPoolExecutor

    if shutil.which("valgrind") is None:
        print("--instructions needs valgrind")
        return
    steps: list[tuple[str, str, list[str]]] = []  # (module, program, modules it loads first)
    seen: set[str] = set()
    for module in estimate_modules():
        if module in seen:
            continue  # loaded by an earlier step
        code = LIBRARIES + f"import {', '.join([*(step[0] for step in steps), module])}"
        listing = code + "\nimport sys\nprint(' '.join(m for m in sys.modules if m.startswith('vramcalc')))"
        names = subprocess.run([sys.executable, "-c", listing], capture_output=True, text=True, cwd=ROOT, env=ENV)
        new = [name for name in names.stdout.split() if name not in seen]
        seen.update(new)
        steps.append((module, code, new))
    programs = [PROGRAMS["floor program"], [sys.executable, "-c", LIBRARIES]]
    programs += [[sys.executable, "-c", code] for _, code, _ in steps] + [PROGRAMS["vramcalc estimate"]]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        floor, libraries, *counts, total = pool.map(instructions, programs)
    print(f"instructions (millions; callgrind){'':20} {'total':>9} {'added':>8}  modules first loaded")
    print(f"{'floor program:':56} {floor / 1e6:9.1f}")
    print(f"{'the libraries:':56} {libraries / 1e6:9.1f}")
    previous, small, small_steps = libraries, 0, 0
    for (module, _, new), count in zip(steps, counts, strict=True):
        added, previous = count - previous, count
        if added < SHOWN_STEP:
            small, small_steps = small + added, small_steps + 1
            continue
        shown = " ".join(sorted(name.removeprefix("vramcalc.") for name in new))
        print(f"{'+ ' + module + ':':56} {count / 1e6:9.1f} {added / 1e6:8.1f}  {shown}")
    print(f"{f'+ {small_steps} more modules, each under {SHOWN_STEP / 1e6:g}:':56} {'':9} {small / 1e6:8.1f}")
    print(f"{'vramcalc estimate (the run itself added):':56} {total / 1e6:9.1f} {(total - previous) / 1e6:8.1f}")
    print(f"{'(the floor program beyond the libraries:':56} {'':9} {(floor - libraries) / 1e6:8.1f})")
    print(f"ratio (instructions): {total / floor:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="paired runs (default 21)")
    parser.add_argument("--stages", action="store_true", help="also time the estimate path's imports stage by stage")
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions module by module instead (valgrind)"
    )
    args = parser.parse_args()
    if args.instructions:
        count_instructions()
        return 0
    runs = max(1, args.runs)
    programs = dict(PROGRAMS)
    staged = stages() if args.stages else {}
    programs.update({label: [sys.executable, "-c", code] for label, code in staged.items()})
    cpu: dict[str, list[float]] = {label: [] for label in programs}
    wall: dict[str, list[float]] = {label: [] for label in programs}
    failed: set[str] = set()
    for label, cmd in programs.items():  # warm the file cache and the bytecode caches
        if run_once(cmd)[2] != 0:
            failed.add(label)
    for _ in range(runs):
        for label, cmd in programs.items():
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
    if args.stages:
        print(f"{'stage':36} {'CPU ms':>8} {'added':>8}")
        previous = None
        for label in [*staged, "vramcalc estimate"]:
            added = "" if previous is None else f"{ms(cpu[label]) - ms(cpu[previous]):8.1f}"
            print(f"{label + ':':36} {ms(cpu[label]):8.1f} {added:>8}")
            previous = label
        floor_work = ms(cpu["floor program"]) - ms(cpu["the libraries"])
        print(f"{'(the floor program beyond its imports:':36} {floor_work:8.1f})")
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
