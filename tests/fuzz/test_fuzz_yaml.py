"""Fuzzing the spec reader: random YAML documents and mutated valid specs, plus the bugs they found.

CI runs each target with a bounded, derandomized number of examples (``Target.ci_examples``);
``python benchmarks/fuzz.py --examples 100000`` runs the same targets for the long campaign.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fuzz_registry import TARGETS_BY_NAME
from fuzz_support import ci_settings, error_lines, invoke
from fuzz_targets import (
    MutatedSpec,
    check_mutated_spec,
    check_yaml_cli,
    check_yaml_library,
    mutated_specs,
    yaml_documents,
)
from hypothesis import given
from spec_texts import TINY_SPEC as GOOD

from vramcalc.errors import SpecError
from vramcalc.files import MAX_YAML_DEPTH, MAX_YAML_NODES, parse_yaml
from vramcalc.spec.load import load_spec


@ci_settings(TARGETS_BY_NAME["yaml-library"].ci_examples)
@given(yaml_documents())
def test_random_yaml_loads_or_fails_with_lines_naming_the_file(data: bytes) -> None:
    check_yaml_library(data)


@ci_settings(TARGETS_BY_NAME["yaml-cli"].ci_examples)
@given(yaml_documents())
def test_random_yaml_through_the_cli_exits_0_or_2(data: bytes) -> None:
    check_yaml_cli(data)


@ci_settings(TARGETS_BY_NAME["mutated-spec"].ci_examples)
@given(mutated_specs())
def test_mutated_specs_estimate_or_fail_with_one_line_per_problem(example: MutatedSpec) -> None:
    check_mutated_spec(example)


# --------------------------------------------------------------------------------------------------
# Regression tests: each input below crashed, hung or misreported before the fix named in its docstring.
# --------------------------------------------------------------------------------------------------


def one_error(path: Path) -> str:
    result = invoke(["estimate", str(path)])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = error_lines(result)
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: "), result.stderr
    return lines[0]


@pytest.mark.parametrize("depth", [MAX_YAML_DEPTH + 1, 1000, 100_000])
@pytest.mark.parametrize(("opener", "closer"), [("[", "]"), ("{a: ", "}")])
def test_deep_nesting_is_an_error_not_a_recursion_error(write_spec, depth: int, opener: str, closer: str) -> None:
    """spec.py BoundedLoader: nesting is bounded (was RecursionError: a traceback)."""
    path = write_spec("model: " + opener * depth + "1" + closer * depth + "\n")
    assert f"nested more than {MAX_YAML_DEPTH} levels deep" in one_error(path)


def test_nesting_up_to_the_limit_is_parsed() -> None:
    depth = MAX_YAML_DEPTH - 1
    assert parse_yaml("[" * depth + "1" + "]" * depth, "<flag>") is not None


def test_many_keys_are_bounded_and_fast(write_spec) -> None:
    """spec.py: duplicate keys were found with list.count (quadratic): 100,000 keys ran for minutes."""
    path = write_spec("\n".join(f"k{i}: 1" for i in range(90_000)))
    start = time.perf_counter()
    message = one_error(path)
    assert time.perf_counter() - start < 5
    assert f"more than {MAX_YAML_NODES:,} values" in message


def test_duplicate_key_names_its_line(write_spec) -> None:
    path = write_spec(GOOD + "  batch_size: 4\n")
    message = one_error(path)
    assert "duplicate key 'batch_size'" in message and "(line 11, column 3)" in message


@pytest.mark.parametrize(
    "text",
    [
        "!!timestamp 2001-12-14>-",  # AttributeError in PyYAML
        "a: !!float ''",  # IndexError
        "a: !!bool maybe",  # KeyError
        "a: !!int 0x",  # ValueError
        "a: !!int 0b",
        "a: !!binary 'a'",
        "!!set\n0x1F",  # ValueError in our own duplicate check
        "a: !!timestamp 2001-13-45",
        "a: " + "9" * 5000,  # int('9' * 5000) exceeds Python's digit limit
    ],
)
def test_malformed_explicit_tags_are_invalid_yaml(write_spec, text: str) -> None:
    """spec.py BoundedLoader.construct_object: PyYAML's constructor errors become 'invalid YAML'."""
    assert "invalid YAML" in one_error(write_spec(text + "\n"))


def test_python_object_tags_are_never_constructed(write_spec, tmp_path: Path) -> None:
    marker = tmp_path / "constructed"
    path = write_spec(f"!!python/object/apply:builtins.open [{str(marker)!r}, 'w']\n")
    assert "invalid YAML" in one_error(path)
    assert not marker.exists()


@pytest.mark.parametrize(("key", "shown"), [("\\e[31m", "'\\x1b[31m'"), ("\\rt", "'\\rt'"), ("a\\nb", "'a\\nb'")])
def test_unprintable_keys_are_quoted_on_one_line(write_spec, key: str, shown: str) -> None:
    """spec._format_validation_error: a key with control characters split the error line or reached the
    terminal raw (an ESC starts an escape sequence)."""
    path = write_spec(GOOD.replace("  layers: 2", f'  layers: 2\n  "{key}": 3'))
    message = one_error(path)
    assert f"model.{shown}: unknown key" in message
    assert "\x1b" not in message and "\r" not in message


def test_padded_and_long_keys_are_quoted(write_spec) -> None:
    path = write_spec(GOOD.replace("  layers: 2", '  layers: 2\n  "layerz ": 3'))
    assert "model.'layerz ': unknown key" in one_error(path)
    path = write_spec(GOOD.replace("  layers: 2", "  layers: 2\n  " + "k" * 500 + ": 3"))
    assert len(one_error(path)) < 300


@pytest.mark.parametrize("name", ["\\e[2J\\e[Hfake", "a\\nb", "\\u202eevil", "tab\\there", "\\x85"])
def test_a_name_with_control_characters_is_rejected(write_spec, name: str) -> None:
    """spec.Spec.name: control, line-break and bidi characters were printed raw in the table title."""
    path = write_spec(GOOD.replace("name: tiny", f'name: "{name}"'))
    assert "name: contains the control character U+" in one_error(path)


def test_rich_markup_in_a_name_is_printed_literally(write_spec) -> None:
    """render.render_estimate: the name went into a rich title unescaped ('[/]' raised MarkupError)."""
    for name in ("[/]", "[bold]x[/bold]", "llama [8B]"):
        path = write_spec(GOOD.replace("name: tiny", f'name: "{name}"'))
        result = invoke(["estimate", str(path)])
        assert result.exit_code == 0, result.output
        assert result.stdout.startswith(f"{name}: "), result.stdout[:200]


def alias_bomb(levels: int, target: str) -> str:
    """Each anchor is a list of two aliases to the previous one: 2**levels items from 2*levels aliases."""
    lines = ["x0: &x0 [q_proj, q_proj]"] + [f"x{i}: &x{i} [*x{i - 1}, *x{i - 1}]" for i in range(1, levels)]
    return "\n".join(lines) + f"\n{target}: *x{levels - 1}\n"


def test_an_alias_bomb_in_a_value_is_quoted_briefly(write_spec) -> None:
    """units.quoted: parse_count's message repr'd a 2**21-item list (380 MB, seconds) and a 2,000-deep
    one raised RecursionError."""
    bomb = alias_bomb(21, "bomb")
    spec = bomb.replace("bomb: ", "model: {layers: 2, hidden_size: 64, heads: 4, vocab_size: 100}\nworkload:\n")
    spec = spec.replace("workload:\n*x20", "workload:\n  seq_len: 8\n  batch_size: *x20")
    start = time.perf_counter()
    result = invoke(["estimate", str(write_spec(spec))])
    assert time.perf_counter() - start < 2
    assert result.exit_code == 2
    line = next(line for line in error_lines(result) if "batch_size" in line)
    assert len(line) < 400 and "..." in line


def test_parse_yaml_names_the_source() -> None:
    with pytest.raises(SpecError, match=r"^--adapter: invalid YAML"):
        parse_yaml("[" * 1000, "--adapter")
    assert parse_yaml("{rank: 8}", "--adapter") == {"rank": 8}


@pytest.mark.parametrize("text", ["\ufeff" + GOOD, GOOD.replace("\n", "\r\n"), "%YAML 1.1\n---\n" + GOOD])
def test_harmless_variants_of_a_good_spec_load(write_spec, text: str) -> None:
    assert load_spec(write_spec(text)).name == "tiny"


def test_a_union_key_reports_one_line(write_spec) -> None:
    """spec._format_validation_error: a union (adapter.targets: a list or 'all-linear') reported one line
    per member for one bad value."""
    spec = GOOD + "  adapter: {rank: 8, targets: [[q_proj]]}\n"
    message = one_error(write_spec(spec))
    assert message.endswith(
        "workload.adapter.targets: 0: Input should be a valid string; or Input should be 'all-linear'"
    )
