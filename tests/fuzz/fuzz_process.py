"""Fuzz target ``stdout-failures``: the installed command (a real process, not CliRunner) with a
standard output that fails: ``/dev/full`` (every write fails with ENOSPC), a pipe whose reader has
gone (EPIPE), or an ASCII-only encoding (``PYTHONIOENCODING=ascii``).

Rules: no traceback (nor Python's "Exception ignored" report at exit); exit 0, 1 or 2, or for a
closed pipe the broken-pipe convention (killed by SIGPIPE: -13 or 141); at most one ``error:`` line;
and a write that failed is never a silent success: with ``/dev/full`` the command reports it (an
``error:`` line and a non-zero exit), as ``echo x > /dev/full`` does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass

from fuzz_checks import STDERR_PREFIXES
from fuzz_support import ROOT, FuzzFailure, command_names, workspace
from hypothesis import strategies as st

SINKS = ["dev-full", "closed-pipe", "ascii"]
#: Command lines that print to stdout, for every command (a command added later runs with --help).
INVOCATIONS = [
    ["estimate", "{spec}"], ["estimate", "{spec}", "--json"], ["estimate", "{spec}", "--timeline", "--gpu", "h100"],
    ["check", "{spec}", "--gpu", "h100"], ["check", "{spec}", "--gpu", "h100", "--format", "github"],
    ["check", "{spec}", "--gpu", "h100", "--format", "markdown"], ["check", "{spec}", "--format", "junit",
    "--gpu", "h100"], ["fit", "{spec}", "--gpu", "h100", "--max-gpus", "8"], ["max-batch", "{spec}", "--gpu", "h100"],
    ["max-seq", "{spec}", "--gpu", "h100", "--json"], ["sweep", "{spec}", "--batch-size", "1,2", "--format", "csv"],
    ["plan", "{spec}", "--gpu", "h100", "--max-gpus", "8"], ["report", "{spec}", "--gpu", "h100"], ["gpus"],
    ["gpus", "--json"], ["schema"], ["bandwidth", "--gpu", "h100", "--params", "7B"], ["import", "{config}"],
    ["compare", "{spec}", "--measured", "{stats}"], ["estimate", "--help"],
]  # fmt: skip
#: Exit statuses of a process killed by SIGPIPE (as subprocess reports it, and as a shell does).
BROKEN_PIPE = (-signal.SIGPIPE, 128 + signal.SIGPIPE)
PROCESS_TIMEOUT_S = 60


def invocations() -> list[list[str]]:
    covered = {args[0] for args in INVOCATIONS}
    return INVOCATIONS + [[name, "--help"] for name in command_names() if name not in covered]


@dataclass(frozen=True)
class SinkCase:
    args: tuple[str, ...]
    sink: str


@st.composite
def sink_cases(draw: st.DrawFn, sinks: tuple[str, ...] = tuple(SINKS)) -> SinkCase:
    return SinkCase(tuple(draw(st.sampled_from(invocations()))), draw(st.sampled_from(sinks)))


def environment(sink: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "PY_COLORS", "GITHUB_ACTIONS")}
    env.update(NO_COLOR="1", COLUMNS="200", TERMINAL_WIDTH="200")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.pop("PYTHONIOENCODING", None)
    if sink == "ascii":
        env["PYTHONIOENCODING"] = "ascii"
    return env


def run_with_sink(args: list[str], sink: str) -> subprocess.CompletedProcess[bytes]:
    """``python -m vramcalc ARGS`` with stdout sent to the sink; stderr captured."""
    command = [sys.executable, "-m", "vramcalc", *args]
    kwargs = {"stderr": subprocess.PIPE, "env": environment(sink), "timeout": PROCESS_TIMEOUT_S, "check": False}
    cwd = str(workspace().cwd)
    if sink == "dev-full":
        with open("/dev/full", "wb") as full:
            return subprocess.run(command, stdout=full, cwd=cwd, **kwargs)  # type: ignore[call-overload]
    if sink == "closed-pipe":
        read_end, write_end = os.pipe()
        os.close(read_end)  # no reader: every write fails with EPIPE
        try:
            return subprocess.run(command, stdout=write_end, cwd=cwd, **kwargs)  # type: ignore[call-overload]
        finally:
            os.close(write_end)
    return subprocess.run(command, stdout=subprocess.PIPE, cwd=cwd, **kwargs)  # type: ignore[call-overload]


def check_sink_case(case: SinkCase) -> None:
    fixtures = workspace().fixtures
    places = {"{spec}": "tiny.yaml", "{config}": "config.json", "{stats}": "stats.json"}
    args = [str(fixtures / places[a]) if a in places else a for a in case.args]
    try:
        done = run_with_sink(args, case.sink)
    except subprocess.TimeoutExpired:
        raise FuzzFailure(f"Hang: still running after {PROCESS_TIMEOUT_S} s\n{case!r}") from None
    stderr = done.stderr.decode("utf-8", "replace")
    code = done.returncode

    def fail(why: str) -> None:
        raise FuzzFailure(f"{why}\nargs: {args!r}\n{case!r}\nexit: {code}\nstderr: {stderr[-1500:]!r}")

    if "Traceback (most recent call last)" in stderr or "Exception ignored" in stderr:
        fail(f"a traceback with stdout to {case.sink}")
    allowed = (0, 1, 2, *BROKEN_PIPE) if case.sink == "closed-pipe" else (0, 1, 2)
    if code not in allowed:
        fail(f"exit code {code} with stdout to {case.sink}")
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    if len(errors) > 1:
        fail(f"more than one error line with stdout to {case.sink}")
    others = [line for line in stderr.splitlines() if line.strip() and not line.startswith(STDERR_PREFIXES)]
    if others:
        fail(f"a stderr line that is no message with stdout to {case.sink}\n{others[0][:200]!r}")
    if case.sink == "dev-full" and (code == 0 or not errors):
        fail("a write to a full device was a silent success (exit 0 or no error line)")
