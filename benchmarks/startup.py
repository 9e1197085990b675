"""Start-up cost of `vramcalc estimate configs/bert-base.yaml` against importing its dependencies.

    python benchmarks/startup.py [--runs 15]

Baseline: `python -c "import typer, rich, pydantic, yaml"` on the same interpreter and machine.
Goal (issue 2): estimate wall time <= 1.25 x the baseline. Prints medians in milliseconds.

Two floors show what the libraries themselves cost beyond that baseline, whatever vramcalc does: a
one-command typer app that runs, and a one-field pydantic model validated plus one rich table
printed (the baseline's `import pydantic` and `import rich` load only their lazy top levels).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = [sys.executable, "-c", "import typer, rich, pydantic, yaml"]
ESTIMATE = [sys.executable, "-m", "vramcalc", "estimate", str(ROOT / "configs" / "bert-base.yaml")]
TYPER_FLOOR = """
import typer
app = typer.Typer()
@app.command()
def main(n: int = 1) -> None:
    print(n)
app([], standalone_mode=False)
"""
MODEL_TABLE_FLOOR = """
import typer, rich, pydantic, yaml
from rich.console import Console
from rich.table import Table
class Model(pydantic.BaseModel):
    n: int
table = Table("n")
table.add_row(str(Model.model_validate({"n": 1}).n))
Console().print(table)
"""
FLOORS = {
    "floor: one-command typer app": [sys.executable, "-c", TYPER_FLOOR],
    "floor: pydantic model + rich table": [sys.executable, "-c", MODEL_TABLE_FLOOR],
}


def median_ms(cmd: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    median_ms(ESTIMATE, 2)  # warm the file cache and bytecode
    baseline = median_ms(BASELINE, args.runs)
    estimate = median_ms(ESTIMATE, args.runs)
    print(f"import typer, rich, pydantic, yaml:  {baseline:7.1f} ms (median of {args.runs})")
    print(f"vramcalc estimate bert-base.yaml:    {estimate:7.1f} ms = {estimate / baseline:.2f} x (goal <= 1.25 x)")
    for label, cmd in FLOORS.items():
        floor = median_ms(cmd, args.runs)
        print(f"{label + ':':<36} {floor:7.1f} ms = {floor / baseline:.2f} x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
