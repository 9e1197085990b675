"""The long campaign's bookkeeping (benchmarks/fuzz.py): failures sorted into tracebacks, hangs and
violations, and each input held to a CPU and a memory bound."""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing
import sys
import time
import warnings
from multiprocessing.connection import Connection
from types import ModuleType

import pytest
from fuzz_registry import TARGETS
from fuzz_support import ROOT, FuzzFailure, Hang


@pytest.fixture(scope="module")
def campaign() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fuzz_campaign", ROOT / "benchmarks" / "fuzz.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def busy(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_an_input_over_the_cpu_limit_is_a_hang(campaign: ModuleType) -> None:
    tally = campaign.Tally("t")
    campaign.measure(tally, busy, 0.3, cpu_limit=0.1)
    campaign.measure(tally, busy, 0.0, cpu_limit=0.1)
    assert (tally.tried, tally.hangs, tally.tracebacks, tally.violations) == (2, 1, 0, 0)
    assert 0.3 <= tally.max_cpu_s < 2
    assert list(tally.counts) == ["hang: one input took more than 0.1 s of CPU"]


def test_the_input_that_pushes_the_worker_past_the_memory_limit_is_a_violation(campaign: ModuleType) -> None:
    """The peak RSS is ru_maxrss, a high-water mark. In the test process, earlier tests leave it far above
    the resident memory of now (and a child process they waited for can have peaked higher still), so 80
    MiB more need not pass "peak + 40 MiB". The inputs are measured where the campaign measures them, in
    a worker of their own: a process forked for this test, whose high-water mark starts at its resident
    memory at the fork and whose children's starts at zero."""

    def allocate(mib: int) -> None:
        block = bytearray(mib * 2**20)
        block[::4096] = b"x" * len(block[::4096])  # touch every page, so it is resident

    def worker(send: Connection) -> None:
        tally = campaign.Tally("t")
        limit = campaign.peak_rss_mib() + 40
        campaign.measure(tally, allocate, 1, rss_limit=limit)
        campaign.measure(tally, allocate, 80, rss_limit=limit)
        campaign.measure(tally, allocate, 80, rss_limit=limit)  # already past: not the one that pushed it over
        send.send((limit, tally.violations, tally.max_rss_mib, list(tally.counts)))

    context = multiprocessing.get_context("fork")  # a fresh worker that needs nothing pickled
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=worker, args=(send,))
    with warnings.catch_warnings():  # Python 3.12+: the xdist worker has a thread; the child runs only `worker`
        warnings.filterwarnings(
            "ignore", message=r".*use of fork\(\) may lead to deadlocks", category=DeprecationWarning
        )
        process.start()
    send.close()
    try:
        assert receive.poll(60), "the forked worker sent nothing"
        limit, violations, max_rss_mib, counts = receive.recv()
    finally:
        process.join(60)
    assert process.exitcode == 0
    assert violations == 1 and max_rss_mib > limit
    assert "memory" in counts[0]


def test_failures_are_sorted_by_kind(campaign: ModuleType) -> None:
    tally = campaign.Tally("t")

    def raising(exc: BaseException) -> None:
        raise exc

    for exc in (
        FuzzFailure("uncaught Overflow: x\nargs: ['estimate', 'a.yaml']"),
        FuzzFailure("uncaught Hang: still running after 5 s\nargs: ['check', '/']"),
        Hang("still running after 10 s"),
        FuzzFailure("a workflow command on stderr\nargs: ['check', 'a.yaml']"),
        ZeroDivisionError("integer division by zero"),
    ):
        campaign.measure(tally, raising, exc)
    assert (tally.tracebacks, tally.hangs, tally.violations) == (2, 2, 1)
    assert "[estimate] uncaught Overflow: x" in tally.counts
    assert "[check] a workflow command on stderr" in tally.counts


def test_a_hang_is_named_by_the_vramcalc_frame_it_was_in(campaign: ModuleType) -> None:
    """Where a walk was interrupted varies (pathlib, glob, posixpath); the vramcalc frame does not."""
    text = "uncaught Hang: still running after 5 s\nargs: ['check', '/']\n"
    frames = [("/src/vramcalc/planning/check.py", 89, "expand_paths"), ("/usr/lib/pathlib.py", 356, "_select_from"),
              ("/usr/lib/pathlib.py", 1044, "open"), ("/src/tests/fuzz/fuzz_support.py", 134, "_raise")]  # fmt: skip
    text += "".join(f'  File "{path}", line {line}, in {name}\n' for path, line, name in frames)  # outermost first
    key, kind = campaign.signature(FuzzFailure(text))
    assert (key, kind) == (
        "[check] uncaught Hang: still running after 5 s at vramcalc/planning/check.py:89 in expand_paths",
        "hangs",
    )


def test_batches_are_seeded_in_order(campaign: ModuleType) -> None:
    args = argparse.Namespace(examples=5, batch=2, seed=7, cpu_limit=5.0, rss_limit=1024.0)
    assert [(name, n, seed) for name, n, seed, *_ in campaign.jobs_for(["a", "b"], args)] == [
        ("a", 2, 7), ("a", 2, 8), ("a", 1, 9), ("b", 2, 7), ("b", 2, 8), ("b", 1, 9),
    ]  # fmt: skip


def test_json_summary_names_every_figure(campaign: ModuleType) -> None:
    tally = campaign.Tally("numbers")
    campaign.measure(tally, busy, 0.0)
    args = argparse.Namespace(examples=1, seed=3, batch=2000, jobs=1, cpu_limit=5.0, rss_limit=1024.0)
    doc = json.loads(json.dumps(campaign.summary({"numbers": tally}, 1.0, args)))
    row = doc["targets"]["numbers"]
    assert set(row) >= {"inputs", "tracebacks", "hangs", "violations", "distinct", "max_cpu_s_per_input"}
    assert row["max_worker_rss_mib"] > 0 and doc["total"]["inputs"] == 1 and doc["seed"] == 3


def test_every_target_is_registered_once() -> None:
    names = [t.name for t in TARGETS]
    assert len(names) == len(set(names))
    assert {"numbers", "json-inputs", "output-formats", "filesystem", "stdout-failures", "argv"} <= set(names)
