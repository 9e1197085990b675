"""The plan searches' budget of estimates: how much of it real specs use, and what it bounds.

    python benchmarks/search_budget.py

* for every bundled config: the estimates `fit` (every catalog card, one shared search) and `plan` (on
  an A10, the smallest data-centre card, so the search goes furthest) compute, with --max-gpus 64 and
  1,024, and whether any search reached the budget (vramcalc.planning.plan_search.SEARCH_ESTIMATES);
* for models of 720,720 and 8,648,640 layers (GPT-2 small's blocks; the divisors of those counts make
  233 and 398 pipeline degrees up to 100,000 GPUs): the CPU seconds of `fit`, `plan` and `check`
  with --max-gpus 100000 as commands, start-up included (the goal for any valid spec: < 5 s).
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vramcalc.hardware.catalog import load_catalog  # noqa: E402
from vramcalc.hardware.lookup import get_gpu  # noqa: E402
from vramcalc.planning import plan_search  # noqa: E402
from vramcalc.planning.budget import budget_for  # noqa: E402
from vramcalc.planning.fit import ShardSearch, fit_cards  # noqa: E402
from vramcalc.planning.plan_layouts import plans_for  # noqa: E402
from vramcalc.spec.load import load_spec  # noqa: E402


def plan_estimates(spec: object, max_gpus: int) -> tuple[int, bool]:
    """Estimates `plan` computes (counted by its allowance), and whether it searched every layout."""
    spent = []
    real = plan_search.Allowance.take

    def take(self: plan_search.Allowance) -> None:
        real(self)
        spent.append(1)

    plan_search.Allowance.take = take  # type: ignore[method-assign]
    try:
        found = plans_for(spec, budget_for(get_gpu("a10")), max_gpus=max_gpus)  # type: ignore[arg-type]
    finally:
        plan_search.Allowance.take = real  # type: ignore[method-assign]
    return len(spent), found.complete


def fit_estimates(spec: object, max_gpus: int) -> tuple[int, bool]:
    search = ShardSearch(spec, max_gpus)  # type: ignore[arg-type]
    fit_cards(search.spec, load_catalog().gpus, search=search)
    return search.allowance.spent, not search.allowance.reached


def command_cpu(args: list[str]) -> float:
    """CPU seconds of one command run (user + system of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "vramcalc", *args], capture_output=True, cwd=ROOT, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    print(f"budget: {plan_search.SEARCH_ESTIMATES:,} estimates per command")
    print(f"{'config':34} {'fit 64':>8} {'fit 1024':>9} {'plan 64':>8} {'plan 1024':>10}")
    most = 0
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        spec = load_spec(path)
        cells, complete = [], True
        for fn in (fit_estimates, plan_estimates):
            for max_gpus in (64, 1024):
                try:
                    n, whole = fn(spec, max_gpus)
                except Exception as exc:  # a spec plan refuses (ResNet, llama.cpp, ...): its one line
                    cells.append(type(exc).__name__[:9])
                    continue
                cells.append(f"{n:,}")
                most, complete = max(most, n), complete and whole
        print(
            f"{path.name:34} {cells[0]:>8} {cells[1]:>9} {cells[2]:>8} {cells[3]:>10}" + ("" if complete else "  CUT")
        )
    print(f"most estimates of any bundled config: {most:,}")
    text = (ROOT / "configs" / "gpt2.yaml").read_text()
    with tempfile.TemporaryDirectory() as tmp:
        for layers in (720_720, 8_648_640):
            path = Path(tmp) / f"gpt2-{layers}.yaml"
            path.write_text(text.replace("layers: 12", f"layers: {layers}"))
            for command in ("fit", "plan", "check"):
                cpu = command_cpu([command, str(path), "--gpu", "h100-sxm", "--max-gpus", "100000"])
                print(f"{layers:,} layers: vramcalc {command} --max-gpus 100000: {cpu:.2f} s CPU")


if __name__ == "__main__":
    main()
