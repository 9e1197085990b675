"""Fuzz target ``output-formats``: hostile spec names, file paths and unknown keys through every format
a machine reads: ``check --format table|json|github|junit|markdown``, ``estimate --json`` and ``report``.

Each input is a small folder of specs (one that fits, one that does not, one with a bad key), whose
names, file and folder names and unknown keys carry workflow commands (``\\n::error::``), markup
(``<x-fuzz>``, backticks, pipes), characters XML refuses (U+FFFE, U+FFFF, C0 controls), line
separators, escape sequences and undecodable bytes. The rules are those of :mod:`fuzz_checks`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuzz_checks import (
    check_github,
    check_html,
    check_junit,
    check_markdown,
    check_stderr,
    findings_of_check_json,
    raw_text,
    strict_json,
    workflow_commands,
)
from fuzz_support import (
    FuzzFailure,
    Tolerated,
    check_result,
    describe,
    invoke,
    tolerating_known_issues,
    usage_error,
    workspace,
)
from fuzz_values import yaml_text
from hypothesis import strategies as st

#: Text that means something to a reader of the output: workflow commands, markup, XML-invalid and
#: control characters, line separators.
INJECTIONS = [
    "\n::error::injected", "::warning file=x::y", "a\nb", "\r::error::cr", "x\r\n::notice::crlf", "<x-fuzz>",
    "<img src=x onerror=alert(1)>", "</sub><script>x</script>", "`<x-fuzz>`", "``", "a|b", "%0A::error::x",
    "\ufffe", "\uffff", "\x1b[31m", "\x01", "\x7f", "\x85", "\u2028", "\u202e", "]]>", '"', "'", "&amp;", "<!--",
    " ", "-", "é", "🤖", "[bold]x[/]", "\t", "\x0b", "\x0c", "\n", "\n\n", "  ::error::indented",
]  # fmt: skip
#: In file names only: an undecodable byte (a surrogate escape in Python's str).
PATH_ONLY = ["\udcff", "\udc80x"]
FORMATS = ["table", "json", "github", "junit", "markdown"]
RUNS = [*(f"check-{fmt}" for fmt in FORMATS), "estimate-json", "report"]
GPUS = ["h100", "rtx-3080"]

TINY_MODEL = {"architecture": "decoder", "layers": 2, "hidden_size": 64, "heads": 4, "vocab_size": 100}


def injection(extra: list[str] | None = None) -> st.SearchStrategy[str]:
    fixed = st.sampled_from(INJECTIONS + (extra or []))
    return st.one_of(fixed, fixed, st.builds(lambda a, b: a + b, fixed, fixed), st.text(min_size=1, max_size=12))


def file_part(text: str) -> str:
    """``text`` usable as one file name component (no slash, no NUL, not . or ..)."""
    text = text.replace("/", "_").replace("\x00", "_")
    return "_" + text if text in ("", ".", "..") else text[:60]


@dataclass(frozen=True)
class SpecFile:
    folder: str  # "" or one folder name
    name: str  # file name, .yaml added
    kind: str  # fits | too-big | bad-key
    spec_name: str
    key: str = ""
    value: Any = None

    def text(self) -> str:
        big = self.kind == "too-big"
        workload = {"batch_size": 100_000 if big else 2, "seq_len": 4096 if big else 16}
        model: dict[Any, Any] = dict(TINY_MODEL)
        if self.kind == "bad-key":
            model[self.key] = self.value
        try:
            return yaml_text({"name": self.spec_name, "model": model, "workload": workload}, flow=False)
        except UnicodeEncodeError:
            return yaml_text({"name": "unencodable", "model": TINY_MODEL, "workload": workload}, flow=False)


@dataclass(frozen=True)
class OutputCase:
    files: tuple[SpecFile, ...]
    runs: tuple[str, ...]
    gpu: str
    given: str  # folder | files | glob

    def __repr__(self) -> str:
        return f"OutputCase(files={self.files!r}, runs={self.runs!r}, gpu={self.gpu!r}, given={self.given!r})"


@st.composite
def spec_files(draw: st.DrawFn) -> SpecFile:
    kind = draw(st.sampled_from(["fits", "too-big", "bad-key"]))
    folder = file_part(draw(injection(PATH_ONLY))) if draw(st.integers(0, 3)) == 0 else ""
    name = file_part(draw(injection(PATH_ONLY)))
    spec_name = draw(st.one_of(injection(), st.sampled_from(["tiny", "llama [8B]"])))
    key = draw(injection()) if kind == "bad-key" else ""
    value = draw(st.one_of(injection(), st.integers())) if kind == "bad-key" else None
    return SpecFile(folder, name, kind, spec_name, key, value)


@st.composite
def output_cases(draw: st.DrawFn, runs_from: tuple[str, ...] = tuple(RUNS)) -> OutputCase:
    files = draw(st.lists(spec_files(), min_size=1, max_size=3, unique_by=lambda f: (f.folder, f.name)))
    runs = draw(st.lists(st.sampled_from(runs_from), min_size=1, max_size=2, unique=True))
    given = draw(st.sampled_from(["folder", "files", "glob"]))
    return OutputCase(tuple(files), tuple(runs), draw(st.sampled_from(GPUS)), given)


def write_case(case: OutputCase) -> tuple[Path, list[str]]:
    """Write the specs under a fresh folder; returns it and the spec paths."""
    root = workspace().root / "outputs"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    paths = []
    for spec in case.files:
        folder = root / spec.folder if spec.folder else root
        folder.mkdir(exist_ok=True)
        path = folder / (spec.name + ".yaml")
        try:
            path.write_bytes(spec.text().encode("utf-8"))
        except OSError:  # a name too long for the file system once encoded
            continue
        paths.append(str(path))
    return root, paths


def check_args(case: OutputCase, root: Path, paths: list[str], fmt: str) -> list[str]:
    given = {"folder": [str(root)], "files": paths, "glob": [str(root / "**" / "*.yaml")]}[case.given]
    return ["check", *given, "--gpu", case.gpu, "--format", fmt, "--max-gpus", "8"]


Rules = Callable[[Any, Callable[[str], None]], None]


@tolerating_known_issues
def check_output_case(case: OutputCase) -> None:
    root, paths = write_case(case)
    if not paths:
        return
    for run in case.runs:
        if run.startswith("check-"):
            fmt = run.removeprefix("check-")
            _run(
                case,
                check_args(case, root, paths, fmt),
                _format_rules(case, fmt, check_args(case, root, paths, "json")),
            )
        elif run == "estimate-json":
            for path in paths:
                _run(case, ["estimate", path, "--json", "--gpu", case.gpu], _json_rules)
        else:
            _run(case, ["report", *paths, "--gpu", case.gpu], lambda result, fail: check_html(result.stdout, fail))


def _json_rules(result: Any, fail: Callable[[str], None]) -> None:
    if result.stdout.strip() and result.exit_code in (0, 1):
        strict_json(result.stdout, fail)


def _format_rules(case: OutputCase, fmt: str, json_args: list[str]) -> Rules:
    def rules(result: Any, fail: Callable[[str], None]) -> None:
        stdout = raw_text(result.stdout_bytes)
        if fmt == "json" and result.stdout.strip():  # check prints its JSON for bad input too (exit 2)
            strict_json(result.stdout, fail)
        elif fmt == "junit":
            check_junit(result.stdout_bytes, fail)
        elif fmt == "markdown":
            check_markdown(stdout, fail)
        elif fmt == "github":
            listing = _run(case, json_args, None)
            findings = findings_of_check_json(strict_json(listing.stdout, fail)) if listing.stdout.strip() else 0
            check_github(stdout, raw_text(result.stderr_bytes), findings, fail)

    return rules


def _run(case: OutputCase, args: list[str], rules: Rules | None) -> Any:
    """Run ``args``; the format's own rules first (a machine reads them), then the rules of every run."""
    result = invoke(args)
    fail = _failer(case, args, result)
    if result.exception is None or isinstance(result.exception, SystemExit):
        if rules is not None:
            rules(result, fail)
        stderr = raw_text(result.stderr_bytes)
        fmt = args[args.index("--format") + 1] if "--format" in args else args[0]
        streams = {"stderr": stderr}
        if fmt not in ("github", "report"):  # github's are counted by its rules; an HTML page goes to a file
            streams["stdout"] = raw_text(result.stdout_bytes)
        for stream, text in streams.items():
            injected = workflow_commands(text)
            if injected:
                fail(f"a workflow command from the input on {stream} ({fmt})\n{injected[0][:200]!r}")
        check_stderr(stderr, fail, usage=usage_error(result))
    if not check_result(args, result):
        raise Tolerated("a known issue")
    return result


def _failer(case: OutputCase, args: list[str], result: Any) -> Any:
    def fail(why: str) -> None:
        raise FuzzFailure(f"{why}\n{case!r}\n" + describe([os.fsdecode(a) for a in args], result))

    return fail
