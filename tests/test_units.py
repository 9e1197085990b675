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
