"""Fuzzing what the commands print: hostile names, paths and keys through every machine-read format,
and a standard output that fails (a full device, a closed pipe, an ASCII-only encoding). Below, the
rules themselves (fuzz_checks.py) on hand-made output, so a rule that could never fail is caught.
"""

from __future__ import annotations

from typing import NoReturn

import pytest
from fuzz_checks import (
    MAX_STDERR_LINE,
    check_github,
    check_html,
    check_junit,
    check_markdown,
    check_stderr,
    findings_of_check_json,
    strict_json,
    workflow_commands,
)
from fuzz_outputs import RUNS, OutputCase, check_output_case, output_cases
from fuzz_process import SinkCase, check_sink_case, sink_cases
from fuzz_registry import TARGETS_BY_NAME
from fuzz_support import ci_settings
from hypothesis import given

OUTPUT_FORMATS = TARGETS_BY_NAME["output-formats"].ci_examples
STDOUT_FAILURES = TARGETS_BY_NAME["stdout-failures"].ci_examples


@pytest.mark.parametrize("run", RUNS)
def test_hostile_names_paths_and_keys_through(run: str) -> None:
    @ci_settings(max(4, OUTPUT_FORMATS // len(RUNS)), shrink=False)
    @given(output_cases(runs_from=(run,)))
    def one(case: OutputCase) -> None:
        check_output_case(case)

    one()


@ci_settings(STDOUT_FAILURES, shrink=False)
@given(sink_cases())
def test_a_failing_stdout_is_one_error_line(case: SinkCase) -> None:
    """Each input starts a process (about half a second): a few here, the rest in the campaign."""
    check_sink_case(case)


# --------------------------------------------------------------------------------------------------
# The rules on hand-made output.
# --------------------------------------------------------------------------------------------------


class Broken(AssertionError):
    pass


def fail(why: str) -> NoReturn:
    raise Broken(why)


@pytest.mark.parametrize("text", ['{"a": NaN}', "[Infinity]", "[-Infinity]", '{"a": 1', ""])
def test_strict_json_refuses_what_rfc_8259_does_not_define(text: str) -> None:
    with pytest.raises(Broken):
        strict_json(text, fail)


def test_strict_json_reads_json() -> None:
    assert strict_json('{"a": [1, 2.5e300, "x"]}', fail) == {"a": [1, 2.5e300, "x"]}


@pytest.mark.parametrize(
    "data",
    ["<a>\ufffe</a>".encode(), "<a>\uffff</a>".encode(), b"<a>\x01</a>", b'<a b="\x1b"/>', b"<a>", b"<a></b>"],
)
def test_junit_rule_applies_the_xml_char_production(data: bytes) -> None:
    """XML 1.0 section 2.2: Char excludes C0 controls but tab, LF and CR, and U+FFFE and U+FFFF."""
    with pytest.raises(Broken):
        check_junit(data, fail)


def test_junit_rule_accepts_well_formed_xml() -> None:
    check_junit('<?xml version="1.0" encoding="UTF-8"?>\n<a b="é\t">x &lt;y&gt;\n</a>\n'.encode(), fail)


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("ok: a.yaml\n::error::x", 1),
        ("ok: a\r::error::cr", 1),  # the runner's ReadLine ends a line at a lone CR
        ("  ::warning::indented", 1),  # TryParseV2 trims leading white space
        ("\u2028::error::x", 1),  # U+2028 is white space to .NET's TrimStart, not a line break
        ("ok: a ::error::x", 0),
        ("::error file=a%0A::error::b::m", 1),  # an escaped newline stays in its line
    ],
)
def test_workflow_commands_are_lines_the_runner_parses(text: str, count: int) -> None:
    assert len(workflow_commands(text)) == count


def test_github_rule_wants_one_command_per_finding_and_none_on_stderr() -> None:
    stdout = "::error file=a.yaml,title=t::m\n1 check: 0 fit, 1 does not fit (exit 1: ...)\n"
    check_github(stdout, "note: x\n", 1, fail)
    with pytest.raises(Broken):
        check_github(stdout, "", 2, fail)
    with pytest.raises(Broken):
        check_github(stdout + "ok: b\n::error::injected\n", "", 1, fail)
    with pytest.raises(Broken):
        check_github(stdout, "error: a\n::error::injected\n", 1, fail)


def test_findings_of_check_json_count_failing_rows_and_error_lines() -> None:
    doc = [{"fits": True}, {"fits": False}, {"fits": None, "errors": ["a", "b"]}]
    assert findings_of_check_json(doc) == 3


@pytest.mark.parametrize(
    "text",
    [
        "| `a.yaml` | | ⚠️ bad input: model.<x-fuzz>: unknown key |\n",
        "- `a`<img src=x>`b` on h100:\n",  # a backtick in the path ends the code span early
        "<!-- hidden -->\n",
        "| a |\n<sub>x</sub>\nlast line\n",  # <sub> is allowed on the legend line only
    ],
)
def test_markdown_rule_finds_raw_html_outside_code_spans(text: str) -> None:
    with pytest.raises(Broken):
        check_markdown(text, fail)


def test_markdown_rule_allows_code_spans_and_the_legend() -> None:
    check_markdown("| `<x-fuzz>.yaml` | ``a`<b>`` |\n\n<sub>needed = ...; available = ...</sub>\n", fail)


def test_html_rule_finds_tags_from_the_input() -> None:
    check_html("<td>&lt;x-fuzz&gt;</td><td>&lt;script&gt;</td>", fail)
    for tag in ("<x-fuzz>", "<SCRIPT>", "<img src=x>"):
        with pytest.raises(Broken):
            check_html(f"<td>{tag}</td>", fail)


def test_stderr_rule_wants_whole_bounded_lines() -> None:
    check_stderr("error: a.yaml: model.x: unknown key\nnote: y\nwrote out.html (10 bytes)\n", fail)
    for text in ("error: a\nb.yaml: unknown key\n", "error: a\rb\n", "error: " + "x" * MAX_STDERR_LINE + "\n"):
        with pytest.raises(Broken):
            check_stderr(text, fail)
    check_stderr("Usage: vramcalc check [OPTIONS]\nTry 'vramcalc check -h'\n", fail, usage=True)
