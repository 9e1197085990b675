"""The long fuzz campaign: the targets of tests/fuzz with many more examples.

    python benchmarks/fuzz.py --examples 100000            # every target, 100,000 inputs each
    python benchmarks/fuzz.py --examples 20000 --jobs 2 --targets argv,mutated-spec

CI runs the same targets (tests/fuzz/fuzz_targets.py) with a few hundred examples each and stops at
the first failure. Here every failure is recorded and the campaign goes on; inputs are generated
in batches of --batch examples, each batch with its own seed (--seed + batch number), so a
campaign is reproducible and its memory stays bounded. At the end it prints, per target, the
inputs tried, the inputs that failed and the distinct failures, then one example of each failure.

Failures are counted two ways: "tracebacks" are uncaught exceptions (including hangs past the time
limit); "rule violations" are the other broken rules (exit code, error lines, --json numbers, files
written). The exit status is 1 when either is non-zero.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "fuzz"), str(ROOT / "tests")]  # the targets, and tests/spec_texts.py


@dataclass
class Tally:
    """Counts of one target (or one batch of it)."""

    target: str
    tried: int = 0
    tracebacks: int = 0
    violations: int = 0
    seconds: float = 0.0
    examples: dict[str, str] = field(default_factory=dict)  # failure signature -> one input and report
    counts: Counter[str] = field(default_factory=Counter)
    known: Counter[str] = field(default_factory=Counter)  # hits of tests/fuzz KNOWN_ISSUES, by summary

    def add(self, other: Tally) -> None:
        self.tried += other.tried
        self.tracebacks += other.tracebacks
        self.violations += other.violations
        self.seconds += other.seconds
        self.counts.update(other.counts)
        self.known.update(other.known)
        for key, text in other.examples.items():
            self.examples.setdefault(key, text)


def signature(exc: BaseException) -> tuple[str, bool]:
    """(a short name of the failure, whether it is a traceback) so repeats are counted once."""
    import fuzz_support

    if isinstance(exc, fuzz_support.FuzzFailure):
        first = str(exc).splitlines()[0] if str(exc) else "failure"
        is_traceback = first.startswith("uncaught") or "Traceback" in first or "Hang" in first
        cause = exc.__cause__
        where = ""
        if cause is not None and cause.__traceback__ is not None:
            frame = traceback.extract_tb(cause.__traceback__)[-1]
            where = f" at {Path(frame.filename).name}:{frame.lineno}"
        text = str(exc)
        if "\n  File " in text:  # an in-process CLI traceback: name its innermost frame
            frames = [line for line in text.splitlines() if line.strip().startswith("File ")]
            where = " at " + frames[-1].strip() if frames else ""
        return first[:160] + where, is_traceback
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" at {Path(frame.filename).name}:{frame.lineno}" if frame else ""
    return f"{type(exc).__name__}: {str(exc)[:120]}{where}", True


def run_batch(job: tuple[str, int, int]) -> Tally:
    """Run ``n`` inputs of one target with one seed; record every failure instead of stopping."""
    name, n, seed = job
    import fuzz_support
    import fuzz_targets
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as with_seed

    fuzz_support.REPORT_KNOWN = True
    target = fuzz_targets.TARGETS_BY_NAME[name]
    tally = Tally(name)

    @with_seed(seed)
    @settings(
        max_examples=n,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(target.strategy())
    def one(example: object) -> None:
        tally.tried += 1
        try:
            target.check(example)
        except fuzz_support.KnownIssueHit as hit:
            tally.known[hit.issue.summary] += 1
        except Exception as exc:  # noqa: BLE001 - a campaign records every failure and goes on
            key, is_traceback = signature(exc)
            if is_traceback:
                tally.tracebacks += 1
            else:
                tally.violations += 1
            tally.counts[key] += 1
            tally.examples.setdefault(key, f"{example!r}"[:1500] + "\n" + str(exc)[:3000])

    start = time.perf_counter()
    one()
    tally.seconds = time.perf_counter() - start
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2000, help="inputs per target (default 2000)")
    parser.add_argument("--targets", default="", help="comma-separated target names (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first batch (default 0)")
    parser.add_argument("--batch", type=int, default=2000, help="inputs per batch (default 2000)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--list", action="store_true", help="list the targets and exit")
    args = parser.parse_args(argv)

    import fuzz_targets

    names = [t.name for t in fuzz_targets.TARGETS]
    if args.list:
        print("\n".join(names))
        return 0
    chosen = [n.strip() for n in args.targets.split(",") if n.strip()] or names
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        parser.error(f"unknown target(s) {', '.join(unknown)}; one of {', '.join(names)}")
    jobs = []
    for name in chosen:
        left, batch = args.examples, 0
        while left > 0:
            size = min(args.batch, left)
            jobs.append((name, size, args.seed + batch))
            left -= size
            batch += 1
    start = time.perf_counter()
    totals = {name: Tally(name) for name in chosen}
    if args.jobs > 1:
        with multiprocessing.get_context("spawn").Pool(args.jobs, maxtasksperchild=1) as pool:
            for result in pool.imap_unordered(run_batch, jobs):
                totals[result.target].add(result)
                print(f"  {result.target}: +{result.tried} inputs", file=sys.stderr, flush=True)
    else:
        for job in jobs:
            result = run_batch(job)
            totals[result.target].add(result)
            print(f"  {result.target}: +{result.tried} inputs", file=sys.stderr, flush=True)
    return report(totals, time.perf_counter() - start, args)


def report(totals: dict[str, Tally], wall_s: float, args: argparse.Namespace) -> int:
    print(f"fuzz campaign: --examples {args.examples} per target, seeds from {args.seed}, {args.jobs} job(s)")
    header = f"{'target':<16}{'inputs':>10}{'tracebacks':>12}{'violations':>12}{'known':>8}{'distinct':>10}{'cpu s':>8}"
    print(header)
    for t in totals.values():
        print(
            f"{t.target:<16}{t.tried:>10,}{t.tracebacks:>12,}{t.violations:>12,}{sum(t.known.values()):>8,}"
            f"{len(t.counts):>10,}{t.seconds:>8.0f}"
        )
    tried = sum(t.tried for t in totals.values())
    tracebacks = sum(t.tracebacks for t in totals.values())
    violations = sum(t.violations for t in totals.values())
    known: Counter[str] = Counter()
    for t in totals.values():
        known.update(t.known)
    print(f"{'total':<16}{tried:>10,}{tracebacks:>12,}{violations:>12,}{sum(known.values()):>8,}")
    print(f"inputs tried: {tried:,}; tracebacks found: {tracebacks:,}; rule violations: {violations:,}")
    print(f"known issues hit (tests/fuzz/fuzz_support.py KNOWN_ISSUES): {sum(known.values()):,}; wall {wall_s:.0f} s")
    for summary, count in known.most_common():
        print(f"  {count:>6,} x {summary}")
    for t in totals.values():
        for key, count in t.counts.most_common():
            print(f"\n--- {t.target}: {count} x {key}\n{t.examples[key]}")
    return 1 if tracebacks or violations else 0


if __name__ == "__main__":
    sys.exit(main())
