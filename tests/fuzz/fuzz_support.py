"""Running vramcalc on fuzz inputs and checking the result (shared by tests/fuzz and benchmarks/fuzz.py).

The rules of the README's "Robustness" section, checked on every input:

* the process exits 0, 1 or 2 and never raises (``result.exception`` is ``None`` or ``SystemExit``);
* exit 2 comes with ``error:`` lines on stderr (or typer's own usage panel for a malformed command
  line); an error about a spec file names the file on each line;
* ``--json`` output parses, has no ``NaN``/``Infinity``, every ``*_bytes`` value is an int and every
  int is non-negative (signed differences such as ``headroom_bytes`` excepted);
* nothing from a file reaches the terminal as a control character (no escape-sequence injection);
* no input takes longer than :data:`TIME_LIMIT_S` (a hang becomes a failure, not a stuck CI job).

Failures in files other developers are still writing are listed in :data:`KNOWN_ISSUES`.
"""

from __future__ import annotations

import atexit
import functools
import json
import math
import os
import re
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

# Deterministic rich output, as tests/conftest.py sets it (benchmarks/fuzz.py imports this module directly).
os.environ["TERMINAL_WIDTH"] = "200"
os.environ["_TYPER_FORCE_DISABLE_TERMINAL"] = "1"
os.environ["NO_COLOR"] = "1"
os.environ["COLUMNS"] = "200"
for _var in ("FORCE_COLOR", "PY_COLORS", "GITHUB_ACTIONS"):
    os.environ.pop(_var, None)

import typer  # noqa: E402
import typer.testing  # noqa: E402
from hypothesis import HealthCheck, Phase, settings  # noqa: E402
from spec_texts import TINY_SPEC  # noqa: E402

from vramcalc.cli import app  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
#: One input may take this long before it counts as a hang (generous: a real spec takes ~50 ms).
TIME_LIMIT_S = 10.0
#: ... and this long when it names a FIFO or a device, which must be refused without reading.
SPECIAL_FILE_LIMIT_S = 2.0
#: JSON keys whose ints may be negative: differences, not sizes.
SIGNED_KEY_PARTS = ("headroom", "difference", "delta", "margin", "error", "slack", "diff", "change")
#: C0/C1 control characters other than newline and tab: must never reach the terminal from a file.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


class FuzzFailure(AssertionError):
    """An input broke one of the robustness rules; the message holds the input and the output."""


class Hang(Exception):  # noqa: N818 - the name says what happened
    """An input ran past :data:`TIME_LIMIT_S`."""


class KnownIssueHit(Exception):  # noqa: N818
    """A failure matching :data:`KNOWN_ISSUES` (raised only when :data:`REPORT_KNOWN` is set)."""

    def __init__(self, issue: KnownIssue) -> None:
        super().__init__(issue.summary)
        self.issue = issue


@dataclass(frozen=True)
class KnownIssue:
    """A failure in a file another developer is still writing: reported to its owner, tolerated by CI
    (the xfail tests in test_fuzz_cli.py keep each one visible) and counted apart by the campaign."""

    module: str  # the vramcalc file the failure comes from (a frame of the traceback, if there is one)
    pattern: str  # regular expression on the failure's first line ("uncaught OSError: ...")
    summary: str
    reproducer: tuple[str, ...]  # CLI arguments; {fixtures} is the fixtures folder
    expect_exit: int | None = None  # the exit code once fixed, where the bug is a wrong exit code


LONG_NAME = "/" + "x" * 300 + "/" + "y" * 4000
KNOWN_ISSUES: tuple[KnownIssue, ...] = ()
#: benchmarks/fuzz.py sets this: known issues are then raised (as KnownIssueHit) to be counted.
REPORT_KNOWN = False


def match_known(first_line: str, exc: BaseException | None) -> KnownIssue | None:
    """The known issue a failure is an instance of, if any."""
    modules: set[str] = set()
    if exc is not None and exc.__traceback__ is not None:
        import traceback

        frames = traceback.extract_tb(exc.__traceback__)
        modules = {Path(f.filename).name for f in frames if "/vramcalc/" in f.filename.replace("\\", "/")}
    for issue in KNOWN_ISSUES:
        if re.search(issue.pattern, first_line) and (exc is None or issue.module in modules):
            return issue
    return None


def ci_settings(max_examples: int, *, shrink: bool = True) -> settings:
    """Hypothesis settings for CI: bounded, reproducible (derandomized, no example database).

    ``shrink=False``: a failing example is reported as generated, without searching for a smaller one
    (for targets whose inputs start processes or run into time limits, where each try costs seconds).
    """
    phases = tuple(Phase) if shrink else (Phase.explicit, Phase.reuse, Phase.generate)
    return settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,
        database=None,
        phases=phases,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


@contextmanager
def time_limit(seconds: float = TIME_LIMIT_S) -> Iterator[None]:
    """Raise :class:`Hang` in the main thread after ``seconds`` (no-op where SIGALRM is unavailable).

    The alarm repeats every half second until the block ends: a Hang raised where Python ignores
    exceptions (a garbage-collector callback, a ``__del__``) is followed by another.
    """
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum: int, frame: Any) -> None:
        raise Hang(f"still running after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.5)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --------------------------------------------------------------------------------------------------
# Workspace: temporary files the targets write and point the CLI at.
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workspace:
    root: Path
    cwd: Path  # the CLI runs here; nothing may appear in it without --output
    inputs: Path  # spec files written per input
    fixtures: Path  # fixed files: valid configs, hostile files

    def spec_file(self, data: bytes | str, name: str = "spec.yaml") -> Path:
        path = self.inputs / name
        path.write_bytes(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)
        return path


@functools.cache
def workspace() -> Workspace:
    """One temporary tree per process, removed at exit."""
    root = Path(tempfile.mkdtemp(prefix="vramcalc-fuzz-"))
    atexit.register(shutil.rmtree, root, True)
    ws = Workspace(root=root, cwd=root / "cwd", inputs=root / "inputs", fixtures=root / "fixtures")
    for folder in (ws.cwd, ws.inputs, ws.fixtures):
        folder.mkdir()
    _write_fixtures(ws.fixtures)
    return ws


def _write_fixtures(folder: Path) -> None:
    for config in sorted(CONFIGS.glob("*.yaml")):
        shutil.copy(config, folder / config.name)
    (folder / "tiny.yaml").write_text(TINY_SPEC, encoding="utf-8")
    (folder / "binary.yaml").write_bytes(bytes(range(256)) * 4)
    (folder / "latin1.yaml").write_bytes("name: caf\xe9\n".encode("latin-1"))
    (folder / "empty.yaml").write_bytes(b"")
    (folder / "stats.json").write_text('{"allocated_bytes.all.peak": 1000, "reserved_bytes.all.peak": 2048}')
    hf_config = ROOT / "tests" / "data" / "hf_configs" / "gpt2.json"
    if hf_config.is_file():
        shutil.copy(hf_config, folder / "config.json")
    else:
        (folder / "config.json").write_text('{"model_type": "gpt2", "n_embd": 64}')
    (folder / "alpha-inf.yaml").write_text(TINY_SPEC + "  adapter: {rank: 8, alpha: .inf}\n", encoding="utf-8")
    (folder / "a_directory").mkdir()
    loop = folder / "loop.yaml"
    loop.symlink_to(loop.name)
    if hasattr(os, "mkfifo"):
        os.mkfifo(folder / "fifo.yaml")


def fixture_paths() -> list[str]:
    ws = workspace()
    names = sorted(p.name for p in ws.fixtures.iterdir())
    return [str(ws.fixtures / name) for name in names] + [
        str(ws.fixtures / "missing.yaml"),
        str(ws.fixtures / "tiny.yaml" / "below-a-file"),
        LONG_NAME,
        "a\x00b.yaml",
        "/dev/zero",
        "",
        "-",
    ]


# --------------------------------------------------------------------------------------------------
# Running the CLI in-process.
# --------------------------------------------------------------------------------------------------


@functools.cache
def command() -> Any:
    """The click command behind the typer app (built once: rebuilding it costs ~60 ms a call)."""
    return typer.main.get_command(app)


def command_names() -> list[str]:
    return sorted(command().commands)


def invoke(args: list[str], cwd: Path | None = None, limit: float | None = None) -> Any:
    """``CliRunner().invoke(app, args)`` in ``cwd``, with the command cached and a time limit (``limit``
    seconds, else :data:`TIME_LIMIT_S`, or :data:`SPECIAL_FILE_LIMIT_S` for a FIFO or a device)."""
    runner = typer.testing.CliRunner()
    original, here = typer.testing._get_command, os.getcwd()
    typer.testing._get_command = lambda _app: command()
    os.chdir(cwd or workspace().cwd)
    special = any(a.endswith(("fifo.yaml", "/dev/zero")) for a in args)
    try:
        with time_limit(limit or (SPECIAL_FILE_LIMIT_S if special else TIME_LIMIT_S)):
            return runner.invoke(app, args, catch_exceptions=True)
    finally:
        os.chdir(here)
        typer.testing._get_command = original


def describe(args: list[str], result: Any) -> str:
    exc = result.exception
    detail = ""
    if exc is not None and not isinstance(exc, SystemExit):
        import traceback

        detail = "".join(traceback.format_exception(exc)[-6:])
    return (
        f"args: {args!r}\nexit: {result.exit_code}\nstdout: {result.stdout[-1500:]!r}\n"
        f"stderr: {result.stderr[-1500:]!r}\n{detail}"
    )


def check_result(args: list[str], result: Any, *, from_file: bool = True, known: bool = True) -> bool:
    """The rules every invocation follows (see the module docstring); ``known=False``: no issue is tolerated.

    Returns False when the result is a known issue (tolerated: the caller should check nothing more).
    """

    exc = result.exception if not isinstance(result.exception, SystemExit) else None

    def fail(why: str) -> NoReturn:
        violation(why, describe(args, result), exc, known=known)

    try:
        _check_result(args, result, from_file, fail)
    except Tolerated:
        return False
    return True


class Tolerated(Exception):  # noqa: N818
    """A known issue was hit; CI goes on (see :func:`tolerating_known_issues`)."""


def violation(why: str, detail: str = "", exc: BaseException | None = None, *, known: bool = True) -> NoReturn:
    """Report a broken rule: FuzzFailure, or for a known issue Tolerated (CI) / KnownIssueHit (campaign)."""
    issue = match_known(why, exc) if known else None
    if issue is None:
        raise FuzzFailure(f"{why}\n{detail}")
    if REPORT_KNOWN:
        raise KnownIssueHit(issue)
    raise Tolerated(issue.summary)


def tolerating_known_issues(check: Callable[..., None]) -> Callable[..., None]:
    """A target's check that returns quietly when the input hit a known issue."""

    @functools.wraps(check)
    def run(example: Any, *args: Any, **kwargs: Any) -> None:
        try:
            check(example, *args, **kwargs)
        except Tolerated:
            return

    return run


def _check_result(args: list[str], result: Any, from_file: bool, fail: Callable[[str], None]) -> None:
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        fail(f"uncaught {type(result.exception).__name__}: {result.exception}")
    if result.exit_code not in (0, 1, 2):
        fail(f"exit code {result.exit_code}")
    if "Traceback (most recent call last)" in result.output:
        fail("a traceback was printed")
    if from_file and _CONTROL.search(result.output):
        fail("a control character reached the terminal")
    if result.exit_code == 2:
        if not usage_error(result) and not error_lines(result):
            fail("exit 2 without an 'error:' line on stderr")
    if result.exit_code in (0, 1) and ("--json" in args or "--format=json" in args):
        check_json(result.stdout, fail)


def usage_error(result: Any) -> bool:
    """A command-line usage error reported by typer itself (its own panel, exit 2)."""
    return any(mark in result.stderr for mark in ("Usage:", "Try '", "─ Error ─"))


def error_lines(result: Any) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error: ")]


def check_json(text: str, fail: Callable[[str], None]) -> None:
    """Parse ``--json`` output: finite numbers, int ``*_bytes``, and no negative ints but differences."""
    if not text.strip():
        return

    def reject_constant(name: str) -> Any:
        fail(f"--json output contains {name}")

    try:
        doc = json.loads(text, parse_constant=reject_constant)
    except json.JSONDecodeError as exc:
        if text.lstrip().startswith(("{", "[")):
            fail(f"--json output does not parse: {exc}")
        return
    for key, value in walk_json(doc):
        signed = any(part in key for part in SIGNED_KEY_PARTS)
        if isinstance(value, bool) or value is None or isinstance(value, str):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            fail(f"--json {key}: {value} is not finite")
        if key.endswith("_bytes") and not isinstance(value, int):
            fail(f"--json {key}: {value!r} is not an int")
        if isinstance(value, int) and value < 0 and not signed:
            fail(f"--json {key}: {value} is negative")


#: Keys whose value is a document vramcalc quotes, not computes: a catalog model's Hugging Face
#: config (``vramcalc models --json``), whose fields keep the config's own meaning (DeBERTa's
#: ``max_relative_positions: -1`` is "use max_position_embeddings").
QUOTED_KEYS = frozenset({"config"})


def walk_json(doc: Any, key: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(doc, dict):
        for name, value in doc.items():
            if name not in QUOTED_KEYS:
                yield from walk_json(value, str(name))
    elif isinstance(doc, list):
        for value in doc:
            yield from walk_json(value, key)
    else:
        yield key, doc


def listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}
