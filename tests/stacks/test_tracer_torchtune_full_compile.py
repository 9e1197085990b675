"""torchtune's full fine-tuning with ``compile: true`` (``runtime: torchtune``) against the allocator-level
tracer (benchmarks/data/tracer_torchtune_compile.json, the cases without an adapter).

The references are exact ``torch.cuda.max_memory_allocated()`` peaks of the second step of torchtune 0.6.1's
``full_finetune_single_device`` loop on torchtune's own ``llama3_2`` decoder, each layer and the chunked loss
compiled through AOTAutograd with inductor's decompositions and partitioner (``benchmarks/
tracer_torchtune_compile.py --regenerate-full``). No torch is needed here: the test reads the stored results.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from torchtune_traces import error_of, spec_of

from vramcalc.errors import SpecError
from vramcalc.families import estimate

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "tracer_torchtune_compile.json"
#: Each case within 5 %, their median within 2 %.
TOLERANCE, MEDIAN = 0.05, 0.02


def _full_cases() -> list[dict[str, Any]]:
    cases = json.loads(DATA.read_text(encoding="utf-8"))["cases"]
    return [c for c in cases if "adapter" not in c["workload"]]


def _modelled() -> list[dict[str, Any]]:
    return [c for c in _full_cases() if not c["workload"].get("optimizer_in_backward")]


_spec, _error = spec_of, error_of


def test_cases_cover_widths_and_techniques() -> None:
    workloads = [c["workload"] for c in _full_cases()]
    assert len(workloads) >= 6 and all(w["compile"] and w["runtime"] == "torchtune" for w in workloads)
    assert {c["model"]["hidden_size"] for c in _full_cases()} == {2048, 3072}
    for key in ("gradient_checkpointing", "activation_offloading", "optimizer_in_backward"):
        assert any(key in w for w in workloads) and any(key not in w for w in workloads)


@pytest.mark.parametrize("case", _modelled(), ids=lambda c: c["id"])
def test_peak_against_tracer(case: dict[str, Any]) -> None:
    error = _error(case)
    assert abs(error) <= TOLERANCE, (case["id"], error)


def test_median_error() -> None:
    assert statistics.median(abs(_error(c)) for c in _modelled()) <= MEDIAN


def test_layer_saved_set() -> None:
    """The traced compiled layer at Llama-3.2-1B widths, batch 2 x 1,024 (T = 2,048 tokens, h = 2,048, 32 query
    heads of 64, f = 8,192, bf16), without its input (``saved_bytes`` leaves the placeholder out): two norm
    outputs, Q, K and V expanded to 32 heads, the attention output and two h-wide matmul outputs, 8 x T x h x 2 B
    = 67,108,864; an up-projection output and the product, 2 x T x f x 2 B = 67,108,864; two fp32 norm
    statistics, 2 x T x 4 B = 16,384; the logsumexp, 2 x 32 x 1,024 x 4 B = 262,144; the RNG seed and offset,
    16 + 8 bytes: 134,496,280."""
    case = next(c for c in _full_cases() if c["id"] == "compile-1b-full-chunked-b2-s1024")
    assert case["compiled"]["block"]["saved_bytes"] == 67_108_864 + 67_108_864 + 16_384 + 262_144 + 24


def test_refused_combinations() -> None:
    case = _modelled()[0]
    with pytest.raises(SpecError, match="cross_entropy: chunked"):
        estimate(_spec(case, cross_entropy="standard"))
    with pytest.raises(SpecError, match="optimizer_in_backward"):
        estimate(_spec(case, optimizer_in_backward=True))
