"""Every case of shared/calibration/measured.yaml that a spec expresses, scored per kind.

The measured numbers are published GPU measurements (sources and caveats in
shared/calibration/README.md; each case cites its repository, path and commit). The scoring is
``benchmarks/measured_score.py``; the rule per kind is the project's accuracy bar:

* the signed median error of the two-sided cases is within +-5 %, their median |error| at most 6 %;
* every fit/OOM label is predicted right, every one-sided bound holds;
* at least 85 % of the cases (suspect values left out) are expressible as a spec.

Kinds that miss the bar today are marked ``xfail(strict=True)`` with what is missing, so the gap stays
visible and a fix that closes it makes the mark fail until it is removed. Skipped without ../shared.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
CALIBRATION = ROOT.parent / "shared" / "calibration"
sys.path.insert(0, str(ROOT / "benchmarks"))

pytestmark = pytest.mark.skipif(
    not (CALIBRATION / "measured.yaml").exists(), reason="../shared/calibration not present"
)

SIGNED_MEDIAN_PCT = 5.0
MEDIAN_ABS_PCT = 6.0
EXPRESSIBLE_PCT = 85.0

#: Kinds that do not meet the bar yet, and why (the mechanisms the estimate does not model).
KNOWN_GAPS = {
    "training_lora": "bloomz-7b1 LoRA (PEFT README, 2022) measured 2.7 % above the estimate at the example "
    "scripts' 64 tokens, their loop's kept outputs counted (the README's GB/GiB reading is itself uncertain "
    "by up to 6.9 %); with DeepSpeed 0.8's ZeRO-3 CPU offload on one GPU (its gather's staging copy and "
    "flat buffer modelled) it is 6.5 % low: both about 1 GiB, which points at BLOOM under transformers 4.25",
}


@pytest.fixture(scope="module")
def scored() -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    import measured_score

    rows = [measured_score.score(r) for r in measured_score.load(CALIBRATION)]
    return rows, measured_score.summary(rows)


def test_every_case_is_scored_or_says_why(scored: tuple[list[dict[str, Any]], dict[str, Any]]) -> None:
    rows, _ = scored
    assert len(rows) == 257  # the cases of measured.yaml (README: "257 measured GPU-memory numbers")
    for row in rows:
        assert row["status"] in ("scored", "bound", "label", "not_expressible", "suspect"), row
        if row["status"] in ("not_expressible", "suspect"):
            assert row["reason"], row


def test_share_expressible(scored: tuple[list[dict[str, Any]], dict[str, Any]]) -> None:
    _, table = scored
    assert table["all"]["expressible_pct"] >= EXPRESSIBLE_PCT, table["all"]


def _kinds() -> list[Any]:
    kinds = [
        "training_full",
        "training_lora",
        "training_peft",
        "training_qlora",
        "training_fwd_bwd",
        "training_pretrain",
        "inference_forward",
        "inference_generation",
        "inference_kv_capacity",
        "weights_load",
        "fit_oom",
    ]
    return [
        pytest.param(k, marks=pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[k])) if k in KNOWN_GAPS else k
        for k in kinds
    ]


@pytest.mark.parametrize("kind", _kinds())
def test_kind_meets_the_bar(kind: str, scored: tuple[list[dict[str, Any]], dict[str, Any]]) -> None:
    _, table = scored
    s = table[kind]
    if s["scored"]:
        assert abs(s["signed_median_pct"]) <= SIGNED_MEDIAN_PCT, s
        assert s["median_abs_pct"] <= MEDIAN_ABS_PCT, s
    assert s["labels_right"] == s["labels"], s
    assert s["bounds_held"] == s["bounds"], s
    assert s["scored"] + s["labels"] + s["bounds"] > 0, s
