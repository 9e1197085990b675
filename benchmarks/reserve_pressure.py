"""How much memory above the allocated peak a step needs when the card is full, against what it reserves
when it is not.

The shared tracer replays each step's allocations through a model of PyTorch's CUDACachingAllocator
(``shared/calibration/tracer/allocsim.py``) on a card with room to spare: segments are never returned, so
its reserved peak is what ``torch.cuda.max_memory_reserved()`` reports on a large card. On a card that is
nearly full the allocator behaves differently: when ``cudaMalloc`` fails it returns every cached segment
that holds no live block (``release_cached_blocks`` in c10/cuda/CUDACachingAllocator.cpp) and tries again,
and only then raises out-of-memory. What the step cannot give back is the free space inside segments that
still hold a live tensor.

This script runs each tracer case of ``shared/calibration/tracer_cases.json`` (its own ``tracer_args``)
again, keeps its allocation trace, and finds by bisection the smallest card (to 2 MiB) on which the replay
with that retry succeeds. It prints, per case, the allocated peak, the reserve on a large card and the
reserve on the smallest card that runs it (both over the allocated peak)::

    /tmp/tracer-venv/bin/python benchmarks/reserve_pressure.py [--only ID ...] [--json]

The tracer venv is the one of ``shared/calibration/tracer/README.md``. The run quoted in docs/design.md is
``benchmarks/data/reserve_pressure.json`` (``--json``, wrapped with its date).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TRACER = ROOT.parent / "shared" / "calibration" / "tracer"
STEP = 2 << 20  # the large pool's segment rounding


def trace_events(tracer_args: str) -> tuple[list[tuple[str, int, int]], dict[str, Any]]:
    """The allocation trace (('a', handle, bytes) / ('f', handle, 0)) of one tracer run, and its result."""
    sys.path.insert(0, str(TRACER))
    import allocsim  # type: ignore[import-not-found]
    import fakecuda  # type: ignore[import-not-found]

    fakecuda.enable()
    import groundtruth  # type: ignore[import-not-found]

    kept: list[list[tuple[str, int, int]]] = []
    replay = allocsim.replay

    def keep(events: Any) -> dict[str, Any]:
        kept.append(list(events))
        result: dict[str, Any] = replay(kept[-1])
        return result

    allocsim.replay = keep
    try:
        argv = [a for a in shlex.split(tracer_args) if a != "--json"]
        result = groundtruth.run(groundtruth.parse_args(argv))
    finally:
        allocsim.replay = replay
    return kept[-1], result


def _pressure_sim(capacity: int) -> Any:
    import allocsim

    class PressureSim(allocsim.CachingAllocatorSim):  # type: ignore[misc, name-defined]
        """The caching allocator on a card of ``capacity`` bytes: a new segment that does not fit first
        makes it return every wholly free segment, then raises MemoryError if it still does not fit."""

        def malloc(self, handle: int, nbytes: int) -> None:
            if nbytes > 0:
                size = allocsim.round_size(nbytes)
                small = size <= allocsim.K_SMALL_SIZE
                pool = self.pools[small]
                import bisect

                fits_cached = bisect.bisect_left(pool, (size, -1, -1)) < len(pool)
                needed = allocsim.allocation_size(size)
                if not fits_cached and self.reserved + needed > capacity:
                    self._release_cached()
                    if self.reserved + needed > capacity:
                        raise MemoryError
            super().malloc(handle, nbytes)

        def _release_cached(self) -> None:
            for small in (True, False):
                for key in list(self.pools[small]):
                    block = self.index[(key[1], key[2])]
                    if block.prev is None and block.next is None:
                        self._remove_free(block)
                        del self.index[(block.seg, block.off)]
                        self.reserved -= block.size

    return PressureSim()


def runs_on(events: list[tuple[str, int, int]], capacity: int) -> bool:
    sim = _pressure_sim(capacity)
    try:
        for kind, handle, nbytes in events:
            if kind == "a":
                sim.malloc(handle, nbytes)
            else:
                sim.free(handle)
    except MemoryError:
        return False
    return True


def smallest_card(events: list[tuple[str, int, int]], low: int, high: int) -> int:
    """The smallest capacity (a multiple of 2 MiB) on which the trace runs; ``high`` must run."""
    low, high = low // STEP, -(-high // STEP)
    while low < high:
        mid = (low + high) // 2
        if runs_on(events, mid * STEP):
            high = mid
        else:
            low = mid + 1
    return high * STEP


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration", type=Path, default=ROOT.parent / "shared" / "calibration")
    parser.add_argument("--only", nargs="*", help="case ids to run (default: all)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    cases = json.loads((args.calibration / "tracer_cases.json").read_text(encoding="utf-8"))
    rows = []
    for case in cases:
        if args.only and case["id"] not in args.only:
            continue
        events, result = trace_events(case["tracer_args"])
        sim = result["allocator_sim"]
        allocated, reserved = sim["est_max_memory_allocated_bytes"], sim["est_max_memory_reserved_bytes"]
        card = smallest_card(events, allocated, reserved)
        rows.append(
            {
                "id": case["id"],
                "mode": case["workload"]["mode"],
                "allocated": allocated,
                "reserved_large_card": reserved,
                "smallest_card": card,
            }
        )
        if not args.json:
            r = rows[-1]
            print(
                f"{r['id'][:45]:45} {r['mode']:9} {allocated / 2**30:9.3f} GiB  large card "
                f"{100 * (reserved / allocated - 1):5.1f} %  full card {100 * (card / allocated - 1):5.1f} %",
                flush=True,
            )
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    for mode in sorted({r["mode"] for r in rows}):
        mine = [r for r in rows if r["mode"] == mode]
        large = statistics.median(r["reserved_large_card"] / r["allocated"] - 1 for r in mine)
        full = statistics.median(r["smallest_card"] / r["allocated"] - 1 for r in mine)
        print(f"median {mode}: large card {100 * large:.1f} %, full card {100 * full:.1f} % ({len(mine)} cases)")


if __name__ == "__main__":
    main()
