"""Rules on what a command prints, shared by the surface targets (output formats, JSON inputs, the
file system, numbers, failing stdout). :func:`fuzz_support.check_result` holds the rules every
invocation follows; these are the stricter ones a machine reading the output relies on:

* JSON is strict RFC 8259: no ``NaN``/``Infinity`` (Python's ``json`` writes and reads them);
* JUnit XML is well-formed (expat refuses U+FFFE, U+FFFF and C0 controls: the XML 1.0 ``Char``
  production);
* a GitHub Actions log gets exactly one workflow command per finding: the runner treats every line
  (split at CR, LF or CRLF) that starts with ``::`` after leading white space as a command
  (``ActionCommand.TryParseV2`` in actions/runner);
* Markdown for a pull-request comment has no raw HTML outside code spans (GitHub renders it);
* HTML reports never carry a tag taken from the input;
* stderr is one line per message, each a ``error:``/``note:``/``wrote`` line of bounded length.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET  # noqa: N817
from collections.abc import Callable
from pathlib import Path
from typing import Any

Fail = Callable[[str], Any]

#: Every line vramcalc writes to stderr starts with one of these (typer's usage panel aside).
STDERR_PREFIXES = ("error: ", "note: ", "warning: ", "wrote ")
#: An error line quotes values shortened (units.quoted): a line past this is a dump of the input.
MAX_STDERR_LINE = 2000
#: The start of an HTML tag, comment or declaration (what a Markdown renderer passes through as HTML).
HTML_TAG = re.compile(r"<[A-Za-z/!?]")
#: Tags the fuzz inputs carry and the HTML report never writes itself.
INJECTED_TAGS = re.compile(r"<(x-fuzz|script|img|iframe)\b", re.IGNORECASE)
_RUNNER_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")


def raw_text(data: bytes) -> str:
    """Bytes as written (CliRunner's ``stdout`` folds CRLF to LF, which hides a CR from the checks)."""
    return data.decode("utf-8", "replace")


def runner_lines(text: str) -> list[str]:
    """Lines as the Actions runner reads a step's output (StreamReader.ReadLine: CR, LF or CRLF)."""
    return _RUNNER_LINE_BREAK.split(text)


def workflow_commands(text: str) -> list[str]:
    return [line for line in runner_lines(text) if line.lstrip().startswith("::")]


def strict_json(text: str, fail: Fail, what: str = "JSON output") -> Any:
    """Parse ``text`` as RFC 8259 JSON; a non-finite number or a syntax error is a failure."""

    def reject(name: str) -> Any:
        fail(f"{what} contains {name} (not JSON: RFC 8259 has no NaN or Infinity)")

    try:
        return json.loads(text, parse_constant=reject)
    except (ValueError, RecursionError) as exc:
        fail(f"{what} does not parse as JSON\n{str(exc)[:200]}")
    return None


def check_junit(data: bytes, fail: Fail) -> None:
    """The bytes of a JUnit report parse as XML (expat enforces well-formedness and the Char production)."""
    if not data.strip():
        return
    try:
        ET.fromstring(data)
    except ET.ParseError as exc:
        fail(f"JUnit output is not well-formed XML\n{exc}")


def findings_of_check_json(doc: Any) -> int:
    """Findings of `check --format json`: each spec/card that does not fit, and each error of a bad spec."""
    if not isinstance(doc, list):
        return 0
    failing = sum(1 for item in doc if isinstance(item, dict) and item.get("fits") is False)
    errors = sum(len(item.get("errors") or []) for item in doc if isinstance(item, dict) and item.get("fits") is None)
    return failing + errors


def check_github(stdout: str, stderr: str, findings: int, fail: Fail) -> None:
    """One workflow command per finding on stdout, none on stderr (the runner reads both)."""
    commands = workflow_commands(stdout)
    if len(commands) != findings:
        fail(f"github output: {len(commands)} workflow commands for {findings} findings\n{commands[:4]!r}")
    injected = workflow_commands(stderr)
    if injected:
        fail(f"a workflow command on stderr\n{injected[0][:200]!r}")


def check_no_workflow_command(stderr: str, fail: Fail) -> None:
    injected = workflow_commands(stderr)
    if injected:
        fail(f"a workflow command on stderr\n{injected[0][:200]!r}")


def outside_code_spans(line: str) -> str:
    """A Markdown line without its code spans (a backtick string closes at the next one of equal length)."""
    return _CODE_SPAN.sub("", line)


def check_markdown(text: str, fail: Fail) -> None:
    """No raw HTML outside code spans, but the ``<sub>...</sub>`` legend line the formatter writes."""
    lines = text.rstrip("\n").split("\n")
    if lines and lines[-1].startswith("<sub>") and lines[-1].endswith("</sub>"):
        lines[-1] = lines[-1][len("<sub>") : -len("</sub>")]
    for line in lines:
        found = HTML_TAG.search(outside_code_spans(line))
        if found:
            fail(f"raw HTML in Markdown output\n{line[max(0, found.start() - 40) : found.start() + 60]!r}")


def check_html(text: str, fail: Fail) -> None:
    found = INJECTED_TAGS.search(text)
    if found:
        fail(f"a tag from the input reached the HTML report unescaped\n{text[found.start() : found.start() + 80]!r}")


def check_stderr(stderr: str, fail: Fail, *, usage: bool = False) -> None:
    """Each stderr line is one whole message (``error:``, ``note:``, ``wrote``), of bounded length.

    ``usage``: typer printed its own usage panel (a malformed command line), whose lines are free-form.
    """
    for line in runner_lines(stderr):
        if len(line) > MAX_STDERR_LINE:
            fail(
                f"a stderr line longer than {MAX_STDERR_LINE:,} characters\n{len(line):,} characters: {line[:120]!r}..."
            )
        if usage or not line.strip():
            continue
        if not line.startswith(STDERR_PREFIXES):
            fail(f"a stderr line that is not a whole message (an error split over lines?)\n{line[:200]!r}")


def snapshot(paths: list[Path]) -> dict[Path, bytes | None]:
    """The bytes of each regular file among ``paths`` (None for anything else), to compare after a run."""
    found: dict[Path, bytes | None] = {}
    for path in paths:
        try:
            found[path] = path.read_bytes() if path.is_file() and not path.is_symlink() else None
        except OSError:
            found[path] = None
    return found


def changed(before: dict[Path, bytes | None]) -> list[Path]:
    """Files of a :func:`snapshot` whose bytes differ now (or that are gone)."""
    after = snapshot(list(before))
    return [path for path, data in before.items() if data is not None and after[path] != data]
