"""Agreement with allocator-level references: the CPU tracer's exact max_memory_allocated().

Cases: shared/calibration/tracer_cases.json (ids cited in the output of benchmarks/accuracy.py) and
benchmarks/data/tracer_extra.json (the same tracer run on this repository's configs). The issue's bar
is 10 % per case; the formulas currently land within 1.5 %, so the test holds them to 3 % per case
and 1 % median, which a regression in any component would break.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import accuracy  # noqa: E402

CALIBRATION = ROOT.parent / "shared" / "calibration"
PER_CASE_MAX_PCT = 3.0
MEDIAN_MAX_PCT = 1.0


def test_repository_tracer_runs_of_configs() -> None:
    rows = accuracy.evaluate(accuracy.load_cases(None))
    assert len(rows) >= 4
    for row in rows:
        assert abs(row["error_pct"]) <= PER_CASE_MAX_PCT, row
        assert row["params_match"], row


@pytest.mark.skipif(not (CALIBRATION / "tracer_cases.json").exists(), reason="../shared/calibration not present")
def test_shared_tracer_cases() -> None:
    rows = accuracy.evaluate(accuracy.load_cases(CALIBRATION))
    shared = [r for r in rows if not r["case"].startswith("config-")]
    # all 34 cases: 26 text transformers (BERT, GPT-2, Llama, T5) and 8 vision (ViT, ResNet-50)
    assert len(shared) == 34
    for row in shared:
        assert abs(row["error_pct"]) <= PER_CASE_MAX_PCT, row
        assert row["params_match"], row


@pytest.mark.skipif(not (CALIBRATION / "tracer_cases.json").exists(), reason="../shared/calibration not present")
def test_issue_targets_per_family() -> None:
    # issue 5: median |error| <= 3 %, max <= 10 %, over >= 30 transformer and >= 8 vision cases
    groups = accuracy.groups(accuracy.evaluate(accuracy.load_cases(CALIBRATION)))
    assert len(groups["transformer"]) >= 30 and len(groups["vision"]) >= 8
    assert {"train", "inference"} <= set(groups)
    for name in ("transformer", "vision", "train", "inference"):
        stats = accuracy.summary(groups[name])
        assert stats["median_abs_pct"] <= min(3.0, MEDIAN_MAX_PCT), (name, stats)
        assert stats["max_abs_pct"] <= 10.0, (name, stats)


@pytest.mark.skipif(not (CALIBRATION / "tracer_cases.json").exists(), reason="../shared/calibration not present")
def test_peak_phase_matches_tracer() -> None:
    rows = accuracy.evaluate(accuracy.load_cases(CALIBRATION))
    for row in rows:
        expected = "forward" if row["reference_phase"] == "inference" else row["reference_phase"]
        assert row["estimate_phase"] == expected, row
