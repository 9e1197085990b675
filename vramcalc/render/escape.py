"""One escaping function per output format, for every string a user controls: a spec's name, a file
path, an error message that quotes a key or a value, a note. Such text is shown, never obeyed.

* :func:`terminal_line`: a line of terminal text (stderr, the table format): one physical line, no raw
  control, line-break or bidi character, at most :data:`MAX_CHARS` characters; safe in a CI log too,
  where GitHub Actions reads both streams (it never starts with ``::`` and holds no ``##[``);
* :func:`github_data` and :func:`github_property`: the message and the properties of a GitHub workflow
  command (``::error file=PROPERTY,title=PROPERTY::DATA``), escaped as GitHub documents;
* :func:`xml_text`: text or attribute values for ElementTree (which escapes ``&``, ``<``, ``>`` and
  quotes itself): every character is one the XML 1.0 ``Char`` production allows;
* :func:`markdown_text`: text in a Markdown table cell or list item: no raw HTML, no broken cell;
* :func:`html_text`: text or attribute values in an HTML document (which may be printed to a CI log);
* :func:`workflow_safe`: the last line of defence, applied to every line standard output and error carry:
  whatever a renderer made of a user's text, wrapping included, no line reads as a workflow command.

A character that cannot be shown as itself is written as in a Python string literal (``\\n``,
``\\x1b``, ``\\u202e``, ``\\udcff``), so it stays visible. A text longer than the bound keeps its
beginning and its end, joined by :data:`ELLIPSIS` (a file name at the front, the problem at the back).
"""

from __future__ import annotations

from collections.abc import Callable

#: The most characters one escaped value (a whole line, for :func:`terminal_line`) may take.
MAX_CHARS = 2000
#: What stands for the middle of a text cut to :data:`MAX_CHARS`.
ELLIPSIS = "…"

#: Maps ``(text, index)`` to what the character at ``index`` is written as.
Piece = Callable[[str, int], str]

_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
_GITHUB_DATA = {"%": "%25", "\r": "%0D", "\n": "%0A"}
_GITHUB_PROPERTY = {**_GITHUB_DATA, ":": "%3A", ",": "%2C"}
_MARKDOWN = {"&": "&amp;", "<": "&lt;", ">": "&gt;", **{c: "\\" + c for c in "\\`*_[]|~"}}
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#x27;", "[": "&#91;"}


def visible(char: str) -> str:
    """``char`` as a Python string literal writes it: ``\\n``, ``\\x1b``, ``\\u202e``, ``\\U000e0041``."""
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _bounded(text: str, piece: Piece, limit: int | None) -> str:
    """``text`` written piece by piece; over ``limit`` characters, its start and end around
    :data:`ELLIPSIS` (cut between pieces, never inside an escape). Reads O(limit) characters."""
    pieces, size = [], 0
    for index in range(len(text)):
        pieces.append(piece(text, index))
        size += len(pieces[-1])
        if limit is not None and size > limit:
            break
    else:
        return "".join(pieces)
    assert limit is not None
    head_room = (limit - len(ELLIPSIS) + 1) // 2
    head, used = [], 0
    for item in pieces:
        if used + len(item) > head_room:
            break
        head.append(item)
        used += len(item)
    tail_room, tail, used = limit - len(ELLIPSIS) - head_room, [], 0
    for index in range(len(text) - 1, -1, -1):
        item = piece(text, index)
        if used + len(item) > tail_room:
            break
        tail.append(item)
        used += len(item)
    return "".join(head) + ELLIPSIS + "".join(reversed(tail))


def terminal_line(text: str, limit: int | None = MAX_CHARS) -> str:
    """One physical line of terminal text: every character that is not printable (controls, line and
    paragraph breaks, bidi overrides, non-characters, lone surrogates, spaces other than U+0020)
    escaped, at most ``limit`` characters (None: no bound). GitHub Actions reads a line as a workflow
    command when it starts with ``::`` (after spaces) or holds ``##[`` anywhere (the legacy syntax): the
    first ``:`` of a leading ``::`` and the ``[`` of ``##[`` are escaped too."""
    lead = len(text) - len(text.lstrip(" "))
    leading_colons = text[lead : lead + 2] == "::"

    def piece(text: str, index: int) -> str:
        char = text[index]
        if not char.isprintable():
            return visible(char)
        if char == "[" and index >= 2 and text[index - 2 : index] == "##":
            return visible(char)
        if char == ":" and index == lead and leading_colons:
            return visible(char)
        return char

    return _bounded(text, piece, limit)


def workflow_safe(line: str) -> str:
    """One physical line as any output stream may carry it into a CI log: a leading ``::`` (after spaces)
    and every ``##[`` neutralised as in :func:`terminal_line` (their ``:`` and ``[`` escaped), nothing else
    changed, so terminal colours and the rest of the line pass as they are. The standard streams apply it
    to every line they write (:class:`vramcalc.cli.output.LineSink`), wrapped lines included."""
    lead = len(line) - len(line.lstrip(" "))
    if line[lead : lead + 2] == "::":
        line = line[:lead] + visible(":") + line[lead + 1 :]
    return line.replace("##[", "##" + visible("["))


def _github_piece(table: dict[str, str]) -> Piece:
    def piece(text: str, index: int) -> str:
        char = text[index]
        if char in table:
            return table[char]
        if char == "[" and index >= 2 and text[index - 2 : index] == "##":  # the legacy ``##[`` syntax
            return visible(char)
        return char if char.isprintable() else visible(char)

    return piece


_github_data_piece = _github_piece(_GITHUB_DATA)
_github_property_piece = _github_piece(_GITHUB_PROPERTY)


def github_data(text: str, limit: int | None = MAX_CHARS) -> str:
    """The message of a workflow command: ``%`` -> ``%25``, CR -> ``%0D``, LF -> ``%0A`` (GitHub turns
    these back into the characters); other unprintable characters, and the ``[`` of a ``##[`` (which
    GitHub reads as a command anywhere in a line), escaped as by :func:`visible`."""
    return _bounded(text, _github_data_piece, limit)


def github_property(text: str, limit: int | None = MAX_CHARS) -> str:
    """A property value of a workflow command (``file=``, ``title=``): as :func:`github_data`, and
    ``:`` -> ``%3A``, ``,`` -> ``%2C``, which would otherwise end the value."""
    return _bounded(text, _github_property_piece, limit)


def _xml_piece(text: str, index: int) -> str:
    char = text[index]
    return char if char.isprintable() else visible(char)


def xml_text(text: str, limit: int | None = MAX_CHARS) -> str:
    """Text for an ElementTree element or attribute, one line: every unprintable character escaped as by
    :func:`visible` (those outside XML 1.0's ``Char``, such as U+0000, U+001B, U+FFFE, U+FFFF and lone
    surrogates, and the legal but invisible or line-breaking ones); ElementTree escapes the markup."""
    return _bounded(text, _xml_piece, limit)


def _markdown_piece(text: str, index: int) -> str:
    char = text[index]
    if char in _MARKDOWN:
        return _MARKDOWN[char]
    return char if char.isprintable() else visible(char)


def markdown_text(text: str, limit: int | None = MAX_CHARS) -> str:
    """Text for a Markdown table cell or list item: ``&``, ``<``, ``>`` as entities (no raw HTML),
    ``|``, backticks, ``\\``, ``*``, ``_``, ``[``, ``]``, ``~`` backslash-escaped (no broken cell, code
    span, emphasis or link), line breaks and other unprintable characters escaped as by :func:`visible`."""
    return _bounded(text, _markdown_piece, limit)


def _html_piece(text: str, index: int) -> str:
    char = text[index]
    if char in _HTML:
        return _HTML[char]
    return char if char.isprintable() else visible(char)


def html_text(text: str) -> str:
    """Text or an attribute value in an HTML document: ``&``, ``<``, ``>``, ``"`` and ``'`` as
    references (as :func:`html.escape` writes them), and ``[`` too (a report printed to a CI log never
    holds ``##[``); line breaks and other unprintable characters escaped as by :func:`visible`, so
    no line of the document starts with the user's text. Not bounded: the report shows it whole."""
    return _bounded(text, _html_piece, None)
