"""Speed of the planning commands: `max-batch` wall time and sweep throughput.

    python benchmarks/planning_speed.py [--runs 15] [--profile]

* max-batch in-process: median time of :func:`vramcalc.planning.limits.max_batch` (goal: < 50 ms);
* max-batch beyond start-up: median wall time of `vramcalc max-batch SPEC --gpu CARD` minus that of
  `vramcalc estimate SPEC --gpu CARD` (same imports, spec, catalog and one estimate);
* sweep throughput: estimates per second of :func:`vramcalc.planning.limits.grid_totals` on a
  10,000-point grid (100 batch sizes x 100 sequence lengths), in-process (goal: >= 100,000/s), for
  the first sweep in the process (what one `vramcalc sweep` pays) and a second one (caches warm);
  checked equal to a full estimate at each of 1,000 points, and compared with a full estimate per
  point and with a spec off the symbolic path (vramcalc/planning/batch_totals.py);
* --profile: where a grid point's time goes (cProfile, cumulative share of the top functions).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vramcalc.families import estimate  # noqa: E402
from vramcalc.hardware.lookup import get_gpu  # noqa: E402
from vramcalc.planning.budget import budget_for  # noqa: E402
from vramcalc.planning.limits import max_batch, with_workload  # noqa: E402
from vramcalc.planning.sweep import grid_totals  # noqa: E402
from vramcalc.spec.load import load_spec  # noqa: E402

CASES = [("bert-base.yaml", "a100-80gb-sxm"), ("llama-2-7b.yaml", "h100-sxm"), ("gpt2.yaml", "rtx-4090")]
GRID_SPEC = "gpt2.yaml"
SWEEP_SPECS = ["gpt2.yaml", "bert-base.yaml", "llama-3-8b.yaml", "t5-base.yaml"]
FALLBACK_SPEC = "llama-2-7b-qlora.yaml"
BATCHES = list(range(1, 101))
SEQS = list(range(64, 64 * 101, 64))


def seqs_for(spec: object) -> list[int]:
    """100 sequence lengths: 64 to 6,400, or evenly up to a learned position table's rows (GPT-2: 1,024,
    BERT: 512), which has no row for a longer sequence."""
    model = spec.model  # type: ignore[attr-defined]
    if model.position == "learned" or (model.position is None and model.max_position_embeddings):
        step = model.max_position_embeddings // 100
        return list(range(step, step * 101, step))
    return SEQS


def median_s(fn: object, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def in_process(runs: int) -> None:
    for config, card in CASES:
        spec, budget = load_spec(ROOT / "configs" / config), budget_for(get_gpu(card))
        limit = max_batch(spec, budget)
        ms = 1000 * median_s(lambda s=spec, b=budget: max_batch(s, b), runs)
        print(f"max-batch {config} on {card}: {limit.value} ({limit.n_estimates} estimates), {ms:.1f} ms in-process")


def _wall_s(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, check=False)
    return time.perf_counter() - start


def beyond_startup(runs: int) -> None:
    """Both commands alternate, so load on a shared machine hits them alike; medians are compared."""
    config, card = CASES[0]
    base = [sys.executable, "-m", "vramcalc"]
    args = [str(ROOT / "configs" / config), "--gpu", card]
    plan, baseline = base + ["max-batch", *args], base + ["estimate", *args]
    _wall_s(plan), _wall_s(baseline)  # warm the file cache and bytecode
    plan_s, base_s = [], []
    for _ in range(runs):
        plan_s.append(_wall_s(plan))
        base_s.append(_wall_s(baseline))
    plan_ms, base_ms = 1000 * statistics.median(plan_s), 1000 * statistics.median(base_s)
    print(
        f"vramcalc max-batch {config}: {plan_ms:.0f} ms wall, vramcalc estimate: {base_ms:.0f} ms; "
        f"beyond start-up: {plan_ms - base_ms:.1f} ms (goal < 50 ms, medians of {runs})"
    )


def _grid_rate(config: str) -> tuple[int, float, float]:
    """Points, and estimates per second of the first and of a second sweep in this process."""
    spec = load_spec(ROOT / "configs" / config)
    rates = []
    for _ in range(2):
        start = time.perf_counter()
        totals = grid_totals(spec, BATCHES, seqs_for(spec), hopper_or_newer=True)
        rates.append(len(totals) / (time.perf_counter() - start))
    return len(totals), rates[0], rates[1]


def sweep_rate() -> None:
    """The 10,000-point grid on the symbolic path, checked point by point against full estimates
    on a 1,000-point part of it, then the rate of a full estimate per point for comparison."""
    for config in SWEEP_SPECS:
        points, first, again = _grid_rate(config)
        print(f"sweep {config}: {points:,} points, {first:,.0f} estimates/s (second sweep: {again:,.0f}/s)")
    spec = load_spec(ROOT / "configs" / GRID_SPEC)
    batches, seqs = BATCHES[:20], seqs_for(spec)[:50]
    specs = [with_workload(spec, batch_size=b, seq_len=s) for b in batches for s in seqs]
    start = time.perf_counter()
    full = [estimate(point).total_bytes for point in specs]
    rate = len(specs) / (time.perf_counter() - start)
    same = full == grid_totals(spec, batches, seqs, hopper_or_newer=True)
    print(f"  {GRID_SPEC}: the sweep equals a full estimate at all {len(full):,} points checked: {same}")
    print(f"  a full estimate() per point instead (specs validated beforehand): {rate:,.0f} estimates/s")
    points, first, _ = _grid_rate(FALLBACK_SPEC)
    print(f"  off the symbolic path ({FALLBACK_SPEC}: LLM keys, one full estimate per point): {first:,.0f}/s")


def profile() -> None:
    spec = load_spec(ROOT / "configs" / GRID_SPEC)
    profiler = cProfile.Profile()
    profiler.enable()
    grid_totals(spec, BATCHES[:20], SEQS[:50], hopper_or_newer=True)
    profiler.disable()
    stats = pstats.Stats(profiler)
    total = max(row[3] for row in stats.stats.values())  # type: ignore[attr-defined]
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][3])  # type: ignore[attr-defined]
    print("profile of 1,000 grid points (cumulative share of the sweep):")
    for (path, line, name), (_, calls, _, cum, _) in rows[:16]:
        print(f"  {100 * cum / total:5.1f} %  {calls:>7,} calls  {Path(path).name}:{line}({name})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    in_process(args.runs)
    beyond_startup(args.runs)
    sweep_rate()
    if args.profile:
        profile()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
