"""Every bundled config loads and estimates (the examples cannot rot)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vramcalc.families import estimate
from vramcalc.spec.load import load_spec

CONFIGS = sorted((Path(__file__).resolve().parent.parent / "configs").glob("*.yaml"))


def test_expected_configs_exist() -> None:
    names = {p.stem for p in CONFIGS}
    assert {"bert-base", "bert-large", "gpt2", "llama-2-7b", "llama-3-8b", "t5-base"} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_config_estimates(path: Path) -> None:
    result = estimate(load_spec(path))
    assert result.peak_allocated_bytes > result.components["parameters"] > 0
    assert result.name == path.stem
