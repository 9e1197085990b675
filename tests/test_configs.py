"""Every bundled config loads and estimates (the examples cannot rot)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vramcalc.families import estimate
from vramcalc.spec.load import load_spec

CONFIGS_DIR = Path(__file__).resolve().parent.parent / "configs"
CONFIGS = sorted(CONFIGS_DIR.glob("*.yaml"))


def test_expected_configs_exist() -> None:
    names = {p.stem for p in CONFIGS}
    assert {"bert-base", "bert-large", "gpt2", "llama-2-7b", "llama-3-8b", "t5-base"} <= names


def test_the_flagship_example_runs_clean() -> None:
    # The README's first command: exit 0, nothing on stderr, no warning among the assumptions.
    from typer.testing import CliRunner

    from vramcalc.cli import app

    result = CliRunner().invoke(app, ["estimate", "configs/bert-base.yaml"])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert "warning" not in result.stdout.lower()


def test_the_flagship_example_is_pure_fp16() -> None:
    # The design notes' worked example: pure fp16 weights, gradients and Adam states (2 + 2 + 4 B/param),
    # the same step as precision: fp16.
    spec = load_spec(CONFIGS_DIR / "bert-base.yaml")
    assert spec.workload.precision.value == "fp16" and spec.workload.pure_meant
    result = estimate(spec)
    n = result.params
    assert result.components["parameters"] == 2 * n
    assert result.component_peaks["gradients"] == 2 * n
    # exp_avg and exp_avg_sq in fp16, each tensor rounded up to the allocator's 512-byte blocks
    assert 4 * n <= result.component_peaks["optimizer_states"] < 4 * n + 512 * 2 * 210


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_config_estimates(path: Path) -> None:
    result = estimate(load_spec(path))
    assert result.peak_allocated_bytes > result.components["parameters"] > 0
    assert result.name == path.stem
