"""Unit parsing: decimal vs binary sizes, counts with suffixes, rejected unitless sizes."""

from __future__ import annotations

import pytest

from vramcalc.errors import UnitError
from vramcalc.units import dtype_bytes, format_bytes, parse_count, parse_fraction, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("16GiB", 16 * 2**30),  # binary: 2^30
        ("80GB", 80 * 10**9),  # decimal: 10^9
        ("512 MiB", 512 * 2**20),
        ("1.5KB", 1500),
        ("3b", 3),
    ],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["80", 80, "GB", "-1GB", "1e400GB", "5 parsecs", True, None, "2EiB"])
def test_parse_size_rejects(bad: object) -> None:
    with pytest.raises(UnitError):
        parse_size(bad)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("110M", 110_000_000), ("7B", 7_000_000_000), ("1.5T", 1_500_000_000_000), (6738415616, 6738415616), ("8k", 8000)],
)
def test_parse_count(text: object, expected: int) -> None:
    assert parse_count(text) == expected


@pytest.mark.parametrize("bad", ["1.5", "7X", float("nan"), float("inf"), True, "1e30B", [1]])
def test_parse_count_rejects(bad: object) -> None:
    with pytest.raises(UnitError):
        parse_count(bad)


def test_parse_fraction() -> None:
    assert parse_fraction("10%") == pytest.approx(0.10)
    assert parse_fraction(0.25) == 0.25
    with pytest.raises(UnitError):
        parse_fraction("150%")


def test_int4_bytes_round_up() -> None:
    # 3 int4 elements = 12 bits -> 2 whole bytes (llm-analysis's BYTES_INT4 = 4 // 8 = 0 would give 0)
    assert dtype_bytes("int4", 3) == 2
    assert dtype_bytes("bf16", 10) == 20


def test_format_bytes_labels_unit() -> None:
    assert format_bytes(2**30) == "1.00 GiB"
    assert format_bytes(10**9, "GB") == "1.00 GB"


# -- hostile numerals: one bounded reader for every field and flag ------------------------------------


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        (parse_count, "1e999999999"),  # YAML reads this as a string; Decimal holds it, arithmetic overflowed
        (parse_count, "1e999999999B"),
        (parse_size, "1e999999999GiB"),
        (parse_size, "1e-999999999GiB"),
        (parse_fraction, "1e999999999%"),
        (parse_fraction, "1e-320%"),
        (parse_count, "9" * 400),
        (parse_count, 10**5000),  # an int past Python's 4,300-digit repr limit
        (parse_fraction, -(10**400)),  # a YAML int too large for a float (found by the fuzz campaign)
    ],
    ids=["count", "count-suffix", "size-huge", "size-tiny", "pct-huge", "pct-tiny", "400-nines", "int", "share"],
)
def test_huge_and_tiny_numerals_are_out_of_range(parse: object, text: object) -> None:
    with pytest.raises(UnitError, match="out of range|longer than any number|below 100%"):
        parse(text, "field")  # type: ignore[operator]


def test_error_quotes_a_huge_int_briefly() -> None:
    with pytest.raises(UnitError) as caught:
        parse_count(10**5000, "params")
    # 10^5000 has 5,001 digits; the message says so instead of printing them (or failing to)
    assert "about 5,001 digits" in str(caught.value) and len(str(caught.value)) < 120


def test_unit_arithmetic_is_exact() -> None:
    # 1 GiB + 2^30 x 10^-30 bytes: the fraction of a byte rounds up to one more byte (a 28-digit
    # Decimal context would have rounded the numeral to exactly 1 first)
    assert parse_size("1.000000000000000000000000000001GiB") == 2**30 + 1
    assert parse_count("1.5e9") == 1_500_000_000
    assert parse_count("0.000001T") == 1_000_000
