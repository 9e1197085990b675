"""vramcalc.files.read_json / parse_json: the one JSON reader of user files (config.json, memory_stats dumps).

Every refusal is one SpecError line naming the source and, for a refused value, the dotted key path;
nothing reaches Python's own limits (recursion, int-to-string digits) or prints a value in full.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramcalc.errors import SpecError
from vramcalc.files import MAX_JSON_DEPTH, MAX_JSON_INT_DIGITS, parse_json, read_json


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def refusal(text: str) -> str:
    with pytest.raises(SpecError) as caught:
        parse_json(text, "f.json")
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_plain_documents_decode() -> None:
    doc = {"a": [1, -2, 3.5, True, None, "x"], "b": {"c": 0}}
    assert parse_json(json.dumps(doc), "f.json") == doc


def test_nesting_up_to_the_limit_is_accepted_and_one_more_level_refused() -> None:
    expected: list[object] = []
    for _ in range(MAX_JSON_DEPTH - 1):
        expected = [expected]
    assert parse_json(nested(MAX_JSON_DEPTH), "f.json") == expected
    assert refusal(nested(MAX_JSON_DEPTH + 1)) == f"f.json: invalid JSON: nested more than {MAX_JSON_DEPTH} levels deep"


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000 + "]" * 100_000,  # far below the size limits, far past the decoder's recursion limit
        "[" * 100_000,  # never closed: the decoder still recurses through every level
        '{"a": [' + '{"b": [' * 40 + "]}" * 40 + "]}",  # 82 levels of objects and arrays
        '["\\\\"' + "[" * 70,  # the JSON string "\\" holds one backslash: the brackets after it count
    ],
)
def test_deep_nesting_is_refused_before_decoding(text: str) -> None:
    assert refusal(text).endswith(f"nested more than {MAX_JSON_DEPTH} levels deep")


@pytest.mark.parametrize(
    "text",
    [
        json.dumps({"x": "[" * 1000}),  # brackets inside a string are text
        '["\\"' + "[" * 1000 + '"]',  # an escaped quote does not end the string
        '["\\\\\\"' + "{" * 1000 + '"]',  # an escaped backslash, then an escaped quote
    ],
)
def test_brackets_inside_strings_do_not_count(text: str) -> None:
    assert isinstance(parse_json(text, "f.json"), (dict, list))


def test_integers_longer_than_the_bound_are_refused_with_their_key() -> None:
    assert parse_json('{"n": -' + "9" * MAX_JSON_INT_DIGITS + "}", "f.json") == {"n": -int("9" * MAX_JSON_INT_DIGITS)}
    # 4,301 digits: past int()'s default limit (sys.get_int_max_str_digits), which would raise ValueError
    assert refusal('{"a": {"n": ' + "7" * 4301 + "}}") == (
        f"f.json: a.n: an integer of 4,301 digits is out of range (at most {MAX_JSON_INT_DIGITS})"
    )
    assert refusal('{"n": ' + "1" + "0" * MAX_JSON_INT_DIGITS + "}").startswith("f.json: n: an integer of 31 digits")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": [1, NaN]}', "f.json: a.1: NaN is not a finite number"),
        ('{"a": Infinity}', "f.json: a: Infinity is not a finite number"),
        ('{"a": -Infinity}', "f.json: a: -Infinity is not a finite number"),
        ('{"a": 1e999}', "f.json: a: '1e999' is out of range (not a finite number)"),  # overflows a double
        ("NaN", "f.json: NaN is not a finite number"),
        ('{"a": 1, "b": {"c": 2, "c": 3}}', "f.json: b.c: duplicate key"),
    ],
)
def test_refused_values_name_their_key(text: str, message: str) -> None:
    assert refusal(text) == message


def test_syntax_errors_give_line_and_column() -> None:
    assert (
        refusal('{\n  "a": 1,\n}')
        == "f.json: invalid JSON (line 3, column 1): Expecting property name enclosed in double quotes"
    )
    assert refusal('"unterminated').startswith("f.json: invalid JSON (line 1, column 1): Unterminated string")


def test_quoted_values_and_keys_are_bounded() -> None:
    long_key = "k" * 500_000
    message = refusal(json.dumps({long_key: 1})[:-1] + ', "' + long_key + '": 2}')
    assert message.startswith("f.json: 'kkk") and message.endswith("': duplicate key")
    assert len(message) < 200
    assert len(refusal('{"a": 1' + "0" * 500_000 + "e999}")) < 200


def test_unprintable_keys_are_escaped() -> None:
    assert refusal('{"\\u001b[31m": NaN}') == "f.json: '\\x1b[31m': NaN is not a finite number"


def test_read_json_reads_through_the_bounded_reader(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('{"a": 1}', encoding="utf-8")
    assert read_json(path, 100, "test files") == {"a": 1}
    with pytest.raises(SpecError, match=r"c\.json: file is 8 bytes; test files are limited to 7 bytes"):
        read_json(path, 7, "test files")
    path.write_bytes(b'{"a": "caf\xe9"}')  # Latin-1, not UTF-8
    with pytest.raises(SpecError, match=r"c\.json: not UTF-8 text"):
        read_json(path, 100, "test files")
    with pytest.raises(SpecError, match=r"missing\.json: no such file"):
        read_json(tmp_path / "missing.json", 100, "test files")
    path.write_text(nested(MAX_JSON_DEPTH + 1), encoding="utf-8")
    with pytest.raises(SpecError, match=rf"^{path}: invalid JSON: nested more than"):
        read_json(path, 1000, "test files")


# --- the YAML loader --------------------------------------------------------------------------------


def test_the_yaml_loader_is_built_once_and_its_bounds_count_per_document() -> None:
    """One loader class serves every parse: its alias, node and nesting counts start afresh with each document."""
    from vramcalc.files import MAX_YAML_ALIASES, MAX_YAML_DEPTH, MAX_YAML_NODES, _yaml_loader, parse_yaml

    assert _yaml_loader() is _yaml_loader()
    aliases = "a: &a 1\n" + "".join(f"b{i}: *a\n" for i in range(MAX_YAML_ALIASES))
    nodes = "[" + ", ".join(["1"] * (MAX_YAML_NODES - 2)) + "]"
    deep = "[" * (MAX_YAML_DEPTH - 1) + "1" + "]" * (MAX_YAML_DEPTH - 1)
    for _ in range(2):
        assert len(parse_yaml(aliases, "f.yaml")) == MAX_YAML_ALIASES + 1
        assert len(parse_yaml(nodes, "f.yaml")) == MAX_YAML_NODES - 2
        assert parse_yaml(deep, "f.yaml") is not None
        with pytest.raises(SpecError, match="nested more than"):
            parse_yaml("[" + deep + "]", "f.yaml")
