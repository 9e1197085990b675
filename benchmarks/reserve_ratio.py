"""The caching allocator's reserve above the allocated peak, per tracer case, by how static the peak is.

Reads ``shared/calibration/tracer_cases.json``: each case has the exact allocated peak of a real PyTorch step
traced on fake CUDA tensors and ``est_reserved_bytes``, the tracer's replay of that step's allocations
through PyTorch's CUDACachingAllocator rules (``shared/calibration/tracer/allocsim.py``: the whole run,
iteration 1 included, with default allocator settings; a model of the allocator, not checked on a GPU).
For each case it
prints reserved / allocated - 1 and the share of the peak that is long-lived state (parameters, buffers,
gradients, optimizer states), then the median per mode. These replays reserve less than published real
runs for training without checkpointing, and far more for inference and checkpointed steps on a large card;
``benchmarks/reserve_models.py`` scores vramcalc's reserve rule against both.

    python benchmarks/reserve_ratio.py [--calibration ../shared/calibration]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STATIC = ("parameter", "buffer", "gradient", "optimizer_state")


def rows(calibration: Path) -> list[tuple[str, str, float, float]]:
    """(case, mode, reserve over allocated, static share of the peak) per tracer case."""
    out = []
    for case in json.loads((calibration / "tracer_cases.json").read_text(encoding="utf-8")):
        m = case["measured"]
        peak = m["peak_allocated_bytes"]
        static = sum(m.get("at_peak_bytes", {}).get(k, 0) for k in STATIC)
        out.append((case["id"], case["workload"]["mode"], m["est_reserved_bytes"] / peak - 1, static / peak))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration", type=Path, default=ROOT.parent / "shared" / "calibration")
    args = parser.parse_args(argv)
    table = rows(args.calibration)
    print(f"{'case':45} {'mode':9} {'reserve':>8} {'static':>7}")
    for case, mode, reserve, static in table:
        print(f"{case[:45]:45} {mode:9} {100 * reserve:7.1f}% {static:7.2f}")
    for mode in sorted({r[1] for r in table}):
        picked = [r for r in table if r[1] == mode]
        print(
            f"median {mode}: reserve {100 * statistics.median(r[2] for r in picked):.1f} % "
            f"({len(picked)} cases, static share median {statistics.median(r[3] for r in picked):.2f})"
        )
    heavy = [r for r in table if r[3] >= 0.5]
    print(
        f"static share >= 0.5: reserve median {100 * statistics.median(r[2] for r in heavy):.1f} % ({len(heavy)} cases)"
    )


if __name__ == "__main__":
    main()
