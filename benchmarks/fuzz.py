"""The long fuzz campaign: the targets of tests/fuzz with many more examples, and resource bounds.

    python benchmarks/fuzz.py --examples 100000            # every target, 100,000 inputs each
    python benchmarks/fuzz.py --examples 20000 --jobs 2 --targets argv,mutated-spec
    python benchmarks/fuzz.py --examples 300 --seed 7 --json fuzz-summary.json

CI runs the same targets (tests/fuzz/fuzz_registry.py) with a few dozen to a few hundred examples
each and stops at the first failure. Here every failure is recorded and the campaign goes on; inputs
are generated in batches of --batch examples, each batch with its own seed (--seed + batch number)
and in a fresh worker process, so a campaign is reproducible and each worker's memory is its own.

Every input is also held to resource bounds: the CPU time it takes (the worker's and its child
processes', from resource.getrusage) must stay under --cpu-limit seconds (default 5), else it counts
as a hang; and the worker's peak resident memory (ru_maxrss) must stay under --rss-limit MiB (default
1024), else the input that pushed it over is a violation.

Failures are counted three ways: "tracebacks" are uncaught exceptions; "hangs" are inputs past the
wall-clock limit of tests/fuzz (fuzz_support.TIME_LIMIT_S, or a target's own) or the CPU limit;
"violations" are the other broken rules (exit code, error lines, output formats, files written,
memory). At the end it prints, per target, the inputs, each count, the distinct failures, the most
CPU one input took and the largest worker peak RSS, then one example of each failure. The exit status
is 1 when anything failed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import re
import resource
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "fuzz"), str(ROOT / "tests")]  # the targets, and tests/spec_texts.py

CPU_LIMIT_S = 5.0
RSS_LIMIT_MIB = 1024.0
KINDS = ("tracebacks", "hangs", "violations")


@dataclass
class Tally:
    """Counts of one target (or one batch of it)."""

    target: str
    tried: int = 0
    tracebacks: int = 0
    hangs: int = 0
    violations: int = 0
    seconds: float = 0.0  # wall time
    cpu_s: float = 0.0  # CPU time of the checks (worker and child processes)
    max_cpu_s: float = 0.0  # the most CPU one input took
    max_rss_mib: float = 0.0  # the largest peak RSS of a worker (or a child process it started)
    examples: dict[str, str] = field(default_factory=dict)  # failure signature -> one input and report
    counts: Counter[str] = field(default_factory=Counter)
    kinds: dict[str, str] = field(default_factory=dict)  # failure signature -> tracebacks | hangs | violations
    known: Counter[str] = field(default_factory=Counter)  # hits of tests/fuzz KNOWN_ISSUES, by summary

    def add(self, other: Tally) -> None:
        self.tried += other.tried
        self.tracebacks += other.tracebacks
        self.hangs += other.hangs
        self.violations += other.violations
        self.seconds += other.seconds
        self.cpu_s += other.cpu_s
        self.max_cpu_s = max(self.max_cpu_s, other.max_cpu_s)
        self.max_rss_mib = max(self.max_rss_mib, other.max_rss_mib)
        self.counts.update(other.counts)
        self.known.update(other.known)
        for key, text in other.examples.items():
            self.examples.setdefault(key, text)
            self.kinds.setdefault(key, other.kinds[key])

    def record(self, key: str, kind: str, example: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        self.counts[key] += 1
        self.kinds.setdefault(key, kind)
        self.examples.setdefault(key, example)

    def summary(self) -> dict[str, Any]:
        return {
            "inputs": self.tried,
            **{kind: getattr(self, kind) for kind in KINDS},
            "known": sum(self.known.values()),
            "distinct": len(self.counts),
            "cpu_s": round(self.cpu_s, 1),
            "max_cpu_s_per_input": round(self.max_cpu_s, 3),
            "max_worker_rss_mib": round(self.max_rss_mib, 1),
            "failures": [
                {"signature": key, "kind": self.kinds[key], "count": count, "example": self.examples[key]}
                for key, count in self.counts.most_common()
            ],
        }


def cpu_seconds() -> float:
    """CPU time of this process and of the child processes it has waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def peak_rss_mib() -> float:
    """The peak resident memory of this process or of its largest child (ru_maxrss: KiB on Linux)."""
    scale = 1 if sys.platform == "darwin" else 1024
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return max(own.ru_maxrss, children.ru_maxrss) * scale / 2**20


def _command_of(text: str) -> str:
    """The command a failure report names ("args: ['check', ...]"), for its signature."""
    for line in text.splitlines():
        if line.startswith("args: [") or line.startswith("args: ("):
            return line[7:].split(",")[0].strip("'\"[]() ")
    return ""


def _frame_label(line: str) -> str:
    """'File "/x/vramcalc/units.py", line 158, in parse_count' -> 'vramcalc/units.py:158 in parse_count'."""
    found = re.match(r'File "(.*)", line (\d+), in (.*)', line)
    if not found:
        return line
    path, lineno, function = found.groups()
    short = "vramcalc/" + path.split("/vramcalc/")[-1] if "/vramcalc/" in path else Path(path).name
    return f"{short}:{lineno} in {function}"


def signature(exc: BaseException) -> tuple[str, str]:
    """(a short name of the failure, its kind: tracebacks | hangs | violations) so repeats count once."""
    import fuzz_support

    if isinstance(exc, fuzz_support.Hang):
        return f"Hang: {exc}", "hangs"
    if isinstance(exc, fuzz_support.FuzzFailure):
        text = str(exc)
        first = text.splitlines()[0] if text else "failure"
        if "Hang" in first:
            kind = "hangs"
        elif first.startswith("uncaught") or "traceback" in first.lower():
            kind = "tracebacks"
        else:
            kind = "violations"
        where = ""
        cause = exc.__cause__
        if cause is not None and cause.__traceback__ is not None:
            frame = traceback.extract_tb(cause.__traceback__)[-1]
            where = f" at {Path(frame.filename).name}:{frame.lineno}"
        if "\n  File " in text:  # an in-process CLI traceback: name its innermost frame in vramcalc
            frames = [line.strip() for line in text.splitlines() if line.strip().startswith("File ")]
            ours = [f for f in frames if "/vramcalc/" in f]
            frames = ours or [f for f in frames if "/tests/fuzz/" not in f] or frames
            where = " at " + _frame_label(frames[-1]) if frames else ""
        command = _command_of(text)
        # Numbers (positions, process ids, line counts) vary between repeats of one failure.
        return (f"[{command}] " if command else "") + re.sub(r"\d{2,}", "N", first[:160]) + where, kind
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" at {Path(frame.filename).name}:{frame.lineno}" if frame else ""
    return f"{type(exc).__name__}: {str(exc)[:120]}{where}", "tracebacks"


def measure(
    tally: Tally, check: Any, example: object, cpu_limit: float = CPU_LIMIT_S, rss_limit: float = RSS_LIMIT_MIB
) -> None:
    """Run one input's check, record its failure (if any) and its CPU time and memory against the limits."""
    import fuzz_support

    tally.tried += 1
    rss_before, cpu_before = peak_rss_mib(), cpu_seconds()
    failed = False
    try:
        check(example)
    except fuzz_support.KnownIssueHit as hit:
        tally.known[hit.issue.summary] += 1
    except Exception as exc:  # noqa: BLE001 - a campaign records every failure and goes on
        key, kind = signature(exc)
        tally.record(key, kind, f"{example!r}"[:1500] + "\n" + str(exc)[:3000])
        failed = True
    cpu = cpu_seconds() - cpu_before
    rss = peak_rss_mib()
    tally.cpu_s += cpu
    tally.max_cpu_s = max(tally.max_cpu_s, cpu)
    tally.max_rss_mib = max(tally.max_rss_mib, rss)
    if cpu > cpu_limit and not failed:
        tally.record(f"hang: one input took more than {cpu_limit:g} s of CPU", "hangs", f"{example!r}"[:1500])
    if rss > rss_limit >= rss_before:
        tally.record(f"memory: the worker's peak RSS passed {rss_limit:g} MiB", "violations", f"{example!r}"[:1500])


def run_batch(job: tuple[str, int, int, float, float]) -> Tally:
    """Run ``n`` inputs of one target with one seed; record every failure instead of stopping."""
    name, n, seed, cpu_limit, rss_limit = job
    import fuzz_registry
    import fuzz_support
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as with_seed

    fuzz_support.REPORT_KNOWN = True
    target = fuzz_registry.TARGETS_BY_NAME[name]
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
        measure(tally, target.check, example, cpu_limit, rss_limit)

    start = time.perf_counter()
    one()
    tally.seconds = time.perf_counter() - start
    return tally


def jobs_for(names: list[str], args: argparse.Namespace) -> list[tuple[str, int, int, float, float]]:
    """One job per batch: (target, inputs, seed, CPU limit, RSS limit), in a fixed order."""
    jobs = []
    for name in names:
        left, batch = args.examples, 0
        while left > 0:
            size = min(args.batch, left)
            jobs.append((name, size, args.seed + batch, args.cpu_limit, args.rss_limit))
            left -= size
            batch += 1
    return jobs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2000, help="inputs per target (default 2000)")
    parser.add_argument("--targets", default="", help="comma-separated target names (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first batch (default 0)")
    parser.add_argument("--batch", type=int, default=2000, help="inputs per batch (default 2000)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--cpu-limit", type=float, default=CPU_LIMIT_S, help="CPU seconds per input (default 5)")
    parser.add_argument("--rss-limit", type=float, default=RSS_LIMIT_MIB, help="worker peak RSS, MiB (default 1024)")
    parser.add_argument("--json", metavar="FILE", help="also write a JSON summary to FILE")
    parser.add_argument("--list", action="store_true", help="list the targets and exit")
    args = parser.parse_args(argv)

    import fuzz_registry

    names = [t.name for t in fuzz_registry.TARGETS]
    if args.list:
        print("\n".join(names))
        return 0
    chosen = [n.strip() for n in args.targets.split(",") if n.strip()] or names
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        parser.error(f"unknown target(s) {', '.join(unknown)}; one of {', '.join(names)}")
    jobs = jobs_for(chosen, args)
    start = time.perf_counter()
    results: dict[tuple[str, int], Tally] = {}
    # A fresh process per batch (spawned, never forked), also with one job: each peak RSS is one batch's.
    with multiprocessing.get_context("spawn").Pool(max(1, args.jobs), maxtasksperchild=1) as pool:
        for job, result in zip(jobs, pool.imap(run_batch, jobs), strict=True):
            results[(job[0], job[2])] = result
            print(f"  {result.target}: +{result.tried} inputs (seed {job[2]})", file=sys.stderr, flush=True)
    totals = {name: Tally(name) for name in chosen}
    for job in jobs:  # merged in job order, so the example kept for each failure does not depend on timing
        totals[job[0]].add(results[(job[0], job[2])])
    wall = time.perf_counter() - start
    if args.json:
        Path(args.json).write_text(json.dumps(summary(totals, wall, args), indent=2) + "\n", encoding="utf-8")
    return report(totals, wall, args)


def summary(totals: dict[str, Tally], wall_s: float, args: argparse.Namespace) -> dict[str, Any]:
    """The campaign as a JSON document (for the docs): settings, limits, and each target's tally."""
    targets = {name: tally.summary() for name, tally in totals.items()}
    return {
        "examples_per_target": args.examples,
        "seed": args.seed,
        "batch": args.batch,
        "jobs": args.jobs,
        "limits": {"cpu_s_per_input": args.cpu_limit, "worker_rss_mib": args.rss_limit},
        "wall_s": round(wall_s, 1),
        "targets": targets,
        "total": {key: sum(t[key] for t in targets.values()) for key in ("inputs", *KINDS, "known", "distinct")},
    }


def report(totals: dict[str, Tally], wall_s: float, args: argparse.Namespace) -> int:
    print(
        f"fuzz campaign: --examples {args.examples} per target, seeds from {args.seed}, {args.jobs} job(s); "
        f"limits {args.cpu_limit:g} s CPU per input, {args.rss_limit:g} MiB per worker"
    )
    header = (
        f"{'target':<16}{'inputs':>9}{'tracebacks':>11}{'hangs':>7}{'violations':>11}{'known':>7}"
        f"{'distinct':>9}{'max cpu s':>10}{'max MiB':>9}{'cpu s':>7}"
    )
    print(header)
    for t in totals.values():
        print(
            f"{t.target:<16}{t.tried:>9,}{t.tracebacks:>11,}{t.hangs:>7,}{t.violations:>11,}"
            f"{sum(t.known.values()):>7,}{len(t.counts):>9,}{t.max_cpu_s:>10.2f}{t.max_rss_mib:>9.0f}{t.cpu_s:>7.0f}"
        )
    sums = {kind: sum(getattr(t, kind) for t in totals.values()) for kind in ("tried", *KINDS)}
    known: Counter[str] = Counter()
    for t in totals.values():
        known.update(t.known)
    print(
        f"{'total':<16}{sums['tried']:>9,}{sums['tracebacks']:>11,}{sums['hangs']:>7,}{sums['violations']:>11,}"
        f"{sum(known.values()):>7,}"
    )
    print(
        f"inputs tried: {sums['tried']:,}; tracebacks: {sums['tracebacks']:,}; hangs: {sums['hangs']:,}; "
        f"rule violations: {sums['violations']:,}"
    )
    print(f"known issues hit (tests/fuzz/fuzz_support.py KNOWN_ISSUES): {sum(known.values()):,}; wall {wall_s:.0f} s")
    for summary_line, count in known.most_common():
        print(f"  {count:>6,} x {summary_line}")
    for t in totals.values():
        for key, count in t.counts.most_common():
            print(f"\n--- {t.target}: {count} x {key}\n{t.examples[key]}")
    return 1 if any(sums[kind] for kind in KINDS) else 0


if __name__ == "__main__":
    sys.exit(main())
