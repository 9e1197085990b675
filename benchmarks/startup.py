"""Start-up cost of `vramcalc estimate configs/bert-base.yaml` against importing its dependencies.

    python benchmarks/startup.py [--runs 15]

Baseline: `python -c "import typer, rich, pydantic, yaml"` on the same interpreter and machine.
Goal (issue 2): estimate wall time <= 1.25 x the baseline. Prints medians in milliseconds.
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
    print(f"import typer, rich, pydantic, yaml: {baseline:7.1f} ms (median of {args.runs})")
    print(f"vramcalc estimate bert-base.yaml:   {estimate:7.1f} ms (median of {args.runs})")
    print(f"ratio: {estimate / baseline:.2f} x (goal <= 1.25 x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
