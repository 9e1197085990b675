"""transformers' eager generation (``runtime: hf``) with a static cache (``cache: static``) and with the dynamic one,
against the traces in ``benchmarks/data/tracer_generate_eager.json`` (``/tmp/tracer-venv/bin/python
benchmarks/tracer_generate_eager.py --cases``: real transformers 5.25 models on the shared tracer's fake CUDA tensors,
``generate``'s greedy loop, the masks' skip checks answered as an all-ones prompt mask gives them). No torch is
needed here."""

from __future__ import annotations

import importlib.util
import statistics
from typing import Any

import pytest
from compile_traces import ROOT, cases

from vramcalc.choices import Mlp
from vramcalc.core import activations as act
from vramcalc.families import estimate
from vramcalc.families.resolve import resolve_workload

_SCRIPT = importlib.util.spec_from_file_location(
    "tracer_generate_eager", ROOT / "benchmarks" / "tracer_generate_eager.py"
)
assert _SCRIPT is not None and _SCRIPT.loader is not None
tracer_generate_eager = importlib.util.module_from_spec(_SCRIPT)
_SCRIPT.loader.exec_module(tracer_generate_eager)

CASES = cases("tracer_generate_eager.json")
STATIC = [c for c in CASES if "--cache static" in c["command"]]
DYNAMIC = [c for c in CASES if "--cache static" not in c["command"]]


def _error(case: dict[str, Any]) -> float:
    got: int = estimate(tracer_generate_eager.traced_spec(case["command"])).peak_allocated_bytes
    return got / case["peak_bytes"] - 1


@pytest.mark.parametrize("case", STATIC, ids=[c["id"] for c in STATIC])
def test_static_cache_against_the_trace(case: dict[str, Any]) -> None:
    """Each static-cache generation (Llama with and without GQA, GPT-2; prompts of 16 to 1,024 tokens, caches of
    263 to 4,096; bf16, fp16, fp32) within 2 %."""
    assert abs(_error(case)) <= 0.02, case["id"]


def test_static_cache_quality_bar() -> None:
    """Static caches: median |error| at most 2 %, the largest at most 5 %."""
    absolute = [abs(_error(c)) for c in STATIC]
    assert statistics.median(absolute) <= 0.02
    assert max(absolute) <= 0.05


@pytest.mark.parametrize("case", DYNAMIC, ids=[c["id"] for c in DYNAMIC])
def test_dynamic_cache_is_never_below_the_trace(case: dict[str, Any]) -> None:
    """The dynamic cache's decode steps get no mask, so SDPA runs with ``enable_gqa`` and the flash kernel the trace
    picks reads the grouped K/V; vramcalc counts them expanded (what SDPA's math kernel and transformers before 4.54
    hold), an upper bound: within 0.5 % below the trace (the prefill peaks) and 5 % above it."""
    assert -0.005 <= _error(case) <= 0.05, case["id"]


def test_a_long_static_cache_peaks_in_the_prefill() -> None:
    """GQA Llama (3 layers, 2 KV heads of 64 for 8 query heads, h 512), 2 x 16 prompt tokens, a cache of 4,096. The
    cache is 3 layers x K and V x 2 x 2 x 4,096 x 64 x 2 B = 12 MiB, allocated in the prefill. Had each decode step
    expanded K and V (``repeat_kv``, 2 x 2 x 4,096 x 512 x 2 B = 16 MiB), it would peak there; with the query packed
    by KV head (``pack_gqa``) what the trace holds beyond the cache is under 1 MiB, and so is vramcalc's."""
    case = next(c for c in STATIC if c["id"] == "gen-static-llama_gqa_b2_p16_n8_c4096_bf16")
    cache = 3 * 2 * 2 * 2 * 4096 * 64 * 2
    assert cache == 12 * 2**20
    assert case["peak_by_category"]["activation"] - cache < 2**20
    result = estimate(tracer_generate_eager.traced_spec(case["command"]))
    assert result.peak_phase == "prefill"
    assert result.phase_components["decode"]["activations"] < 2**20


def test_gelu_new_holds_four_ffn_wide_tensors_in_a_no_grad_forward() -> None:
    """``NewGELUActivation``: ``0.5 * input * (1.0 + torch.tanh(c * (input + 0.044715 * torch.pow(input, 3.0))))``.
    Python keeps ``input`` and ``0.5 * input`` while it evaluates the right factor, whose links each free the
    previous one: the fc output, ``0.5 * input``, ``pow`` and its product, 4 x 4 B per element in fp32 (the trace
    of the fp32 GPT-2 case peaks at that ``mul``); under autocast ``pow`` runs in fp32: 2 x 2 + 2 x 4 B."""
    case = next(c for c in STATIC if c["id"] == "gen-static-gpt2_b2_p256_n128_fp32")
    work = resolve_workload(tracer_generate_eager.traced_spec(case["command"]))
    assert work.shape.mlp is Mlp.gelu_tanh
    assert act.inference_mlp_per_element(work.shape, work.dtypes) == 4 * 4
    amp = act.Dtypes(param=4, compute=2, residual=4, amp=True)
    assert act.inference_mlp_per_element(work.shape, amp) == 2 * 2 + 2 * 4
