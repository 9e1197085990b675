"""Fuzzing the GGUF header reader with mutated real GGUF files (fuzz_gguf.py has the rules), bounded and
derandomized; ``python benchmarks/fuzz.py --targets gguf-header`` runs it long."""

from __future__ import annotations

from fuzz_gguf import GGUFCase, check_gguf_header, gguf_headers, seeds
from fuzz_registry import TARGETS_BY_NAME
from fuzz_support import ci_settings
from hypothesis import given

GGUF_HEADER = TARGETS_BY_NAME["gguf-header"].ci_examples


def test_the_seeds_are_read_whole() -> None:
    for index, seed in enumerate(seeds()):
        check_gguf_header(GGUFCase(index, seed.data, via_file=False))
        check_gguf_header(GGUFCase(index, seed.data, via_file=True))
        assert len(seed.fields) > 10


@ci_settings(GGUF_HEADER)
@given(gguf_headers())
def test_mutated_gguf_headers(case: GGUFCase) -> None:
    check_gguf_header(case)
