"""litgpt's LoRA and QLoRA fine-tuning (``adapter.framework: litgpt``) against the allocator-level tracer
running litgpt's own model code (benchmarks/data/tracer_litgpt.json, made with benchmarks/tracer_litgpt.py
on litgpt at commit 8641822, the version of its published resource tables, with ``--as-published``). The
references are exact ``torch.cuda.max_memory_allocated()`` peaks of one training step on fake CUDA tensors;
no torch is needed here: the test reads the stored results.
"""

from __future__ import annotations

import copy
import functools
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from vramcalc.families import estimate
from vramcalc.spec.load import parse_spec

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
DATA = BENCHMARKS / "data" / "tracer_litgpt.json"
sys.path.insert(0, str(BENCHMARKS))
import litgpt_score  # noqa: E402  (the spec of each row, as the score script writes it)

#: Every case at most 4 % below the tracer run as published (``--as-published``: Fabric's float32 output
#: cast, PyTorch 2.1's mean). Above it, at most 6 %: vramcalc counts every loss tensor alive when a quantized
#: LM head dequantizes at the start of backward, an over-count seen on phi-1.5's QLoRA steps (docs/accuracy.md).
UNDER, OVER = 0.04, 0.06


def _cases() -> dict[str, dict[str, Any]]:
    cases: dict[str, dict[str, Any]] = json.loads(DATA.read_text(encoding="utf-8"))["cases"]
    return cases


@functools.cache
def _rows() -> tuple[dict[str, Any], ...]:
    """benchmarks/data/measured_litgpt.yaml, parsed once for all the cases below instead of once a case."""
    return tuple(yaml.safe_load((BENCHMARKS / "data" / "measured_litgpt.yaml").read_text(encoding="utf-8")))


def _spec(case_id: str) -> Any:
    row = copy.deepcopy(next(row for row in _rows() if row["id"] == case_id))
    return parse_spec(litgpt_score.spec_of(row))


def test_cases_cover_lora_and_qlora_on_three_families() -> None:
    cases = _cases().values()
    assert {c["quant"] for c in cases} == {None, "nf4", "nf4-dq"}
    models = {"phi-1_5", "stablelm-base-alpha-3b", "Llama-2-7b-hf", "Llama-2-13b-hf"}
    assert {c["litgpt_model"] for c in cases} == models


@pytest.mark.parametrize("case_id", sorted(_cases()))
def test_estimate_matches_the_traced_litgpt_step(case_id: str) -> None:
    case = _cases()[case_id]
    result = estimate(_spec(case_id), hopper_or_newer=False)  # the tracer ran A100 workspaces
    assert -UNDER <= result.peak_allocated_bytes / case["peak_bytes"] - 1 <= OVER, (
        result.peak_allocated_bytes,
        case["peak_bytes"],
    )


@pytest.mark.parametrize("case_id", sorted(_cases()))
def test_trainable_counts_are_litgpts(case_id: str) -> None:
    # litgpt's own count (LoRAQKVLinear: one lora_A of r x 2 parts, lora_B of the q and v widths), which its
    # resource tables also print: 1,572,864 for phi-1.5, 4,194,304 for Llama 2 7B
    case = _cases()[case_id]
    result = estimate(_spec(case_id))
    assert result.llm is not None and result.llm.trainable_params == case["trainable"]
