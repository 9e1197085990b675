"""Fuzzing the surfaces beyond the spec reader: hostile numerals in every numeric spec key and flag,
mutated config.json and memory_stats() files, and what the commands are pointed at or write onto.

Each target runs bounded and derandomized (fuzz_registry.py: ``ci_examples``), split by surface so a
failure names it; ``python benchmarks/fuzz.py --targets numbers,json-inputs,filesystem`` runs them long.
Inputs that start processes or reach a time limit are not shrunk (each try would cost seconds).
"""

from __future__ import annotations

import pytest
from fuzz_files import WALK_LIMIT_S, TreeCase, check_tree_case, tree_cases
from fuzz_json import JsonInput, check_json_input, json_inputs
from fuzz_numbers import (
    NumberCase,
    check_number_case,
    field_cases,
    flag_cases,
    not_a_number,
    numeric_fields,
    numeric_flags,
    position_cases,
)
from fuzz_registry import TARGETS_BY_NAME
from fuzz_support import ci_settings
from hypothesis import given

#: Mutated JSON holds strings of up to 400,000 characters: hypothesis warns before printing one.
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")
NUMBERS = TARGETS_BY_NAME["numbers"].ci_examples
JSON_INPUTS = TARGETS_BY_NAME["json-inputs"].ci_examples
FILESYSTEM = TARGETS_BY_NAME["filesystem"].ci_examples

# --------------------------------------------------------------------------------------------------
# numbers
# --------------------------------------------------------------------------------------------------


def test_every_numeric_key_and_flag_is_enumerated() -> None:
    fields = {".".join(f.path) for f in numeric_fields()}
    assert {"workload.batch_size", "model.capacity_factor", "target.reserve", "workload.adapter.rank"} <= fields
    assert {"name", "model.architecture", "workload.precision"}.isdisjoint(fields)
    flags = set(numeric_flags())
    assert {("check", "--reserve"), ("bandwidth", "--bus-width"), ("compare", "--tolerance")} <= flags
    assert {("check", "--format"), ("estimate", "--gpu"), ("bandwidth", "--clock-source")}.isdisjoint(flags)


@pytest.mark.parametrize(
    ("numeral", "expected"),
    [("nan", True), (".inf", True), ("true", True), ("1e999999999", True), ("9" * 400, True), ("9" * 399, False),
     ("1e-999999999", False), ("0e999999999", False), ("1_000", False), ("-0", False)],
)  # fmt: skip
def test_numerals_no_value_can_be(numeral: str, expected: bool) -> None:
    """Refused wherever they go: not finite, a boolean, or 400 digits and more (a count bound is ~10^15)."""
    assert not_a_number(numeral) is expected


@ci_settings(NUMBERS, shrink=False)
@given(field_cases())
def test_hostile_numbers_in_every_spec_key(case: NumberCase) -> None:
    check_number_case(case)


@pytest.mark.parametrize(
    "name",
    sorted({name for name, _ in numeric_flags()}),
)
def test_hostile_numbers_in_every_numeric_flag_of(name: str) -> None:
    @ci_settings(max(8, NUMBERS // 8), shrink=False)
    @given(flag_cases(names=(name,)))
    def run(case: NumberCase) -> None:
        check_number_case(case)

    run()


@ci_settings(12, shrink=False)
@given(position_cases())
def test_a_sequence_past_learned_positions_is_refused_or_noted(case: NumberCase) -> None:
    check_number_case(case)


# --------------------------------------------------------------------------------------------------
# json-inputs
# --------------------------------------------------------------------------------------------------


@ci_settings(JSON_INPUTS, shrink=False)
@given(json_inputs(kinds=("config",)))
def test_mutated_config_json_through_import_and_estimate(example: JsonInput) -> None:
    check_json_input(example)


@ci_settings(JSON_INPUTS // 2, shrink=False)
@given(json_inputs(kinds=("stats",)))
def test_mutated_memory_stats_through_compare(example: JsonInput) -> None:
    check_json_input(example)


# --------------------------------------------------------------------------------------------------
# filesystem
# --------------------------------------------------------------------------------------------------


@ci_settings(FILESYSTEM, shrink=False)
@given(tree_cases(outputs=("none",)))
def test_walks_of_trees_with_loops_fifos_and_devices_are_bounded(case: TreeCase) -> None:
    check_tree_case(case)


@ci_settings(FILESYSTEM, shrink=False)
@given(tree_cases(outputs=("input", "input-link", "fifo", "folder", "dev-full", "new", "missing-folder")))
def test_output_never_writes_over_an_input_nor_blocks(case: TreeCase) -> None:
    check_tree_case(case)


@pytest.mark.parametrize("given_path", ["/", "/**/*.yaml"])
def test_checking_the_machine_root_is_refused_or_bounded(given_path: str) -> None:
    """Refused, or a walk with a bound: within fuzz_files.WALK_LIMIT_S of wall time (a bounded walk of
    this machine takes about 1 s of CPU; the margin is for a CI machine busy with other tests)."""
    check_tree_case(TreeCase((), 2, "check", (given_path,), "none"), limit=WALK_LIMIT_S)
