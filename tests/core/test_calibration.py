"""Agreement with allocator-level references: the CPU tracer's exact max_memory_allocated().

Cases: shared/calibration/tracer_cases.json (ids cited in the output of benchmarks/accuracy.py) and
benchmarks/data/tracer_extra.json (the same tracer run on this repository's configs). The accuracy bar
is 10 % per case; the formulas currently land within 1.5 % on transformers and within 4 % on vision,
so the test holds every case to 5 % and the median to 1 %, which a regression in any component
would break. The largest error (+3.8 %, extra-resnet50_b32_img320_fp32_infer) is exactly the 32 MiB
cuBLAS workspace: the tracer runs one inference iteration, whose peak comes before the classifier's
first matmul allocates it; vramcalc models the steady state, where it is already allocated.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import accuracy  # noqa: E402

CALIBRATION = ROOT.parent / "shared" / "calibration"
PER_CASE_MAX_PCT = 5.0
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
    shared = [r for r in rows if not r["case"].startswith(("config-", "extra-"))]
    # all 34 cases: 26 text transformers (BERT, GPT-2, Llama, T5) and 8 vision (ViT, ResNet-50)
    assert len(shared) == 34  # 26 text + 8 vision
    for row in shared:
        assert abs(row["error_pct"]) <= PER_CASE_MAX_PCT, row
        assert row["params_match"], row


@pytest.mark.skipif(not (CALIBRATION / "tracer_cases.json").exists(), reason="../shared/calibration not present")
def test_accuracy_targets_per_family() -> None:
    # the bar: median |error| <= 3 %, max <= 10 %, over >= 30 transformer and >= 8 vision cases
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


def test_real_gpu_runs_are_consistent() -> None:
    # benchmarks/data/measured_bert_large_v100.yaml: nvml_used after HF Trainer runs on a V100 (cases
    # hf-perf-bert-large-*, transformers docs perf_train_gpu_one.mdx). NVML counts reserved memory plus
    # the measured 1343 MiB CUDA context, so the allocated peak + context must not exceed it, and the
    # implied reserved/allocated ratio must be plausible for the caching allocator (1.0 to 1.5).
    rows = accuracy.evaluate_measured()
    assert len(rows) == 9
    for row in rows:
        assert row["consistent"], row
        assert 1.0 <= row["implied_reserve_ratio"] <= 1.5, row
