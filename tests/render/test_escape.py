"""vramcalc.render.escape: one escaping function per output format. Expected values follow the formats'
own rules: Python's string-literal escapes, GitHub's documented workflow-command escaping (and the
runner's parsing: a command is a line that starts with ``::`` after leading white space, or holds
``##[`` anywhere), the XML 1.0 ``Char`` production, CommonMark's backslash escapes and entities."""

from __future__ import annotations

import ast
import re
import time
import xml.etree.ElementTree as ET

import pytest

from vramcalc.render.escape import (
    ELLIPSIS,
    MAX_CHARS,
    github_data,
    github_property,
    html_text,
    markdown_text,
    terminal_line,
    visible,
    xml_text,
)

#: Text a file name, a spec name or an error message may hold.
HOSTILE = [
    "spec\n::add-mask::secret",
    "spec\r::error ::pwned",
    "::stop-commands::token",
    "  ::warning::indented",
    "x ##[error]legacy",
    "\ufffe\uffff",
    "\x1b[31mred\x1b[0m",
    "nul\x00byte",
    "lone \udcff surrogate",
    "bidi \u202eeman\u202c",
    "line\u2028separator\x85next\x0bvt\x0cff",
    "tab\there",
    "<img src=x onerror=alert(1)>",
    "a|b`c`d\\e",
    "x" * 10_000,
    "\n" * 5_000,
]

#: XML 1.0 (fifth edition) section 2.2: Char ::= #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] |
#: [#x10000-#x10FFFF].
XML_CHARS = re.compile("^[\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]*$")


def is_command(line: str) -> bool:
    """Whether the GitHub Actions runner reads ``line`` as a workflow command."""
    return line.lstrip().startswith("::") or "##[" in line


# -- terminal_line ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("a\n::add-mask::secret", "a\\n::add-mask::secret"),
        ("\x1b[31mred", "\\x1b[31mred"),
        ("cr\rlf\ntab\t", "cr\\rlf\\ntab\\t"),
        ("\x00\x7f\x85\xa0", "\\x00\\x7f\\x85\\xa0"),
        ("\u202e\u2028\ufffe\uffff\udcff", "\\u202e\\u2028\\ufffe\\uffff\\udcff"),
        ("\U000e0041", "\\U000e0041"),  # a tag character (format, invisible)
        ("größe ✅ 日本 (ok)", "größe ✅ 日本 (ok)"),
        ("::error::x", "\\x3a:error::x"),
        ("   ::x", "   \\x3a:x"),
        ("a ::x", "a ::x"),
        ("##[error]x", "##\\x5berror]x"),
        ("a ##[ b # #[ #[", "a ##\\x5b b # #[ #["),
    ],
)
def test_terminal_line_shows_what_it_escapes(text: str, shown: str) -> None:
    assert terminal_line(text) == shown


@pytest.mark.parametrize("text", HOSTILE)
def test_terminal_line_is_one_printable_line_that_no_runner_obeys(text: str) -> None:
    line = terminal_line(f"error: {text}")
    assert line.isprintable() and len(line) <= MAX_CHARS
    assert not is_command(line) and not is_command(terminal_line(text))


def test_terminal_line_keeps_start_and_end_of_a_long_text() -> None:
    # 2,000 characters: the first 1,000, the ellipsis, the last 999.
    assert terminal_line("a" * 1_999 + "bc") == "a" * 1_000 + ELLIPSIS + "a" * 997 + "bc"
    assert terminal_line("a" * 2_000) == "a" * 2_000  # at the bound: whole
    assert terminal_line("a" * 5_000, limit=None) == "a" * 5_000


def test_terminal_line_cuts_between_escapes_never_inside_one() -> None:
    # Each line break is written as 2 characters: 500 of them fit the first 1,000, 499 the last 999.
    assert terminal_line("\n" * 3_000) == "\\n" * 500 + ELLIPSIS + "\\n" * 499


def test_terminal_line_reads_only_the_ends_of_a_huge_text() -> None:
    huge = "e" * 3_000_000 + "::" * 1_000 + " end"
    start = time.perf_counter()
    line = terminal_line(huge)
    assert time.perf_counter() - start < 1.0
    assert len(line) == MAX_CHARS and line.endswith(":: end") and line.startswith("eee")


def test_visible_is_a_python_string_literal_escape() -> None:
    for char in "\t\n\r\x00\x1b\x7f\x85\u202e\ufffe\udcff\U000e0041":
        assert ast.literal_eval(f'"{visible(char)}"') == char


# -- GitHub workflow commands ----------------------------------------------------------------------


def github_unescape(value: str, *, prop: bool) -> str:
    """What the runner does to a value: each documented escape back to its character, ``%25`` last."""
    pairs = [("%0D", "\r"), ("%0A", "\n"), *([("%3A", ":"), ("%2C", ",")] if prop else []), ("%25", "%")]
    for escaped, char in pairs:
        value = value.replace(escaped, char)
    return value


def parse_command(line: str) -> tuple[str, dict[str, str], str]:
    """A ``::name key=value,...::data`` line split as the runner splits it."""
    body = line.lstrip()[2:]
    info, data = body.split("::", 1)
    name, _, props = info.partition(" ")
    pairs = (item.split("=", 1) for item in props.split(",") if item)
    return name, {k: github_unescape(v, prop=True) for k, v in pairs}, github_unescape(data, prop=False)


def test_github_escaping_follows_the_documentation() -> None:
    assert github_data("100%\r\nnext: a,b") == "100%25%0D%0Anext: a,b"
    assert github_property("100%\r\nnext: a,b") == "100%25%0D%0Anext%3A a%2Cb"
    assert github_property("%0A") == "%250A"  # a literal "%0A" stays literal
    assert github_data("\x1b[31m\ufffe") == "\\x1b[31m\\ufffe"  # shown, not decoded by GitHub


@pytest.mark.parametrize("text", ["a/b c.yaml", "x\n::add-mask::y", "p%0Aq:r,s=t", "::error ::x", "日本\r"])
def test_github_values_come_back_whole_from_one_command(text: str) -> None:
    line = f"::error file={github_property(text)},title={github_property(text)}::{github_data(text)}"
    assert "\n" not in line and "\r" not in line
    assert parse_command(line) == ("error", {"file": text, "title": text}, text)


@pytest.mark.parametrize("text", HOSTILE)
def test_github_values_are_one_printable_line(text: str) -> None:
    for escaped in (github_data(text), github_property(text)):
        assert escaped.isprintable() and len(escaped) <= MAX_CHARS
    assert "," not in github_property(text) and ":" not in github_property(text)


# -- XML ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", HOSTILE)
def test_xml_text_is_legal_and_survives_a_parser(text: str) -> None:
    shown = xml_text(text)
    assert XML_CHARS.match(shown) and "\n" not in shown and len(shown) <= MAX_CHARS
    element = ET.Element("testcase", {"name": shown})
    element.text = shown
    parsed = ET.fromstring(ET.tostring(element, encoding="unicode").encode("utf-8"))
    assert parsed.get("name") == shown and parsed.text == shown


def test_xml_text_shows_illegal_characters() -> None:
    assert xml_text("a\ufffe\uffff\x00\x1b\udcff") == "a\\ufffe\\uffff\\x00\\x1b\\udcff"
    assert xml_text("<b> & 'q'") == "<b> & 'q'"  # markup is ElementTree's to escape


# -- Markdown ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("<img src=x onerror=alert(1)>", "&lt;img src=x onerror=alert(1)&gt;"),
        ("a|b", "a\\|b"),
        ("`code`", "\\`code\\`"),
        ("&lt;", "&amp;lt;"),
        ("[link](https://example.com)", "\\[link\\](https://example.com)"),
        ("*em* _em_ ~s~ \\", "\\*em\\* \\_em\\_ \\~s\\~ \\\\"),
        ("two\nlines\r", "two\\nlines\\r"),
    ],
)
def test_markdown_text_escapes(text: str, shown: str) -> None:
    assert markdown_text(text) == shown


@pytest.mark.parametrize("text", HOSTILE)
def test_markdown_text_holds_no_html_and_no_cell_break(text: str) -> None:
    shown = markdown_text(text)
    assert "<" not in shown and ">" not in shown and shown.isprintable() and len(shown) <= MAX_CHARS
    assert re.search(r"(?<!\\)(\\\\)*\|", shown) is None  # every pipe escaped
    assert re.search(r"(?<!\\)(\\\\)*`", shown) is None  # every backtick escaped


# -- HTML ------------------------------------------------------------------------------------------


def test_html_text() -> None:
    assert html_text('<a href="x">\'&') == "&lt;a href=&quot;x&quot;&gt;&#x27;&amp;"
    assert html_text("a\n::add-mask::b ##[error]") == "a\\n::add-mask::b ##&#91;error]"
    assert html_text("x" * 5_000) == "x" * 5_000  # the report shows it whole
