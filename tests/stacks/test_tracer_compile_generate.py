"""``workload.compile: true`` with transformers' static-cache generation (``runtime: hf``, ``cache: static``): the
"static cache and torch.compile" recipe, ``model.forward`` compiled, so the prefill and every decode step run one
compiled graph each (transformers 5.25 ``generation/utils.py`` ``_prefill`` calls ``self(...)``, whose ``forward``
the recipe replaced; ``_sample``'s decode steps call ``get_compiled_call`` or ``self``). Checked against the traces
in ``benchmarks/data/tracer_compile_generate.json`` (``/tmp/tracer-venv/bin/python benchmarks/tracer_compile.py
--generate-cases``: AOTAutograd with inductor's decompositions, fusion emulated, the cache updated in place as
inductor's re-inplacing leaves it; mode default, no CUDA graphs). No torch is needed here."""

from __future__ import annotations

import statistics
from typing import Any

import pytest
from compile_traces import cases, small_llama, traced_spec

from vramcalc.core import activations as act
from vramcalc.core import compiled
from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.families.resolve import resolve_workload

GENERATE = cases("tracer_compile_generate.json")


def _case(case_id: str) -> dict[str, Any]:
    return next(c for c in GENERATE if c["id"] == case_id)


@pytest.mark.parametrize("case", GENERATE, ids=[c["id"] for c in GENERATE])
def test_against_the_traced_compiled_generation(case: dict[str, Any]) -> None:
    """Each traced generation (Llama with and without GQA, GPT-2; batch 1 and 4; short and long prompts, 8 to 1,024
    new tokens; bf16, fp16, fp32) within 3.5 %."""
    result = estimate(traced_spec(case["command"]))
    assert result.params == case["params"]
    assert abs(result.peak_allocated_bytes / case["peak_bytes"] - 1) <= 0.035, case["id"]


def test_generation_quality_bar() -> None:
    """Compiled generation: median |error| at most 2 %, the largest at most 5 %."""
    absolute = [abs(estimate(traced_spec(c["command"])).peak_allocated_bytes / c["peak_bytes"] - 1) for c in GENERATE]
    assert statistics.median(absolute) <= 0.02
    assert max(absolute) <= 0.05


def test_prefill_mlp_by_hand() -> None:
    """The GQA Llama in fp16, 4 x 2,048 prompt tokens (h = 512, f = 1,376), peaks in the last layer's MLP; the
    traced peak's live tensors beyond the cache: the embedding output, the block input, one more hidden-wide
    residual buffer and the o_proj output (4 x 512 x 2 per token), gate, up and silu(gate) x up (3 x 1,376 x 2)."""
    case = _case("compile-gen-llama_l3_h512_gqa_b4_p2048_n8_fp16")
    work = resolve_workload(traced_spec(case["command"]))
    tk = act.Tokens(batch=4, seq=2048, target=2048)
    expected = 4 * 2048 * (4 * 512 + 3 * 1376) * 2
    assert compiled.compiled_static_step_bytes(work.shape, tk, work.dtypes, 2048 + 8 - 1) == expected
    # with the cache (3 layers, K and V of (4, 2, 2,055, 64) fp16) the traced peak's activation bytes, to the
    # allocator's small blocks (the ids, the position table: 2,560 B)
    cache = 3 * 2 * 4 * 2 * 2055 * 64 * 2
    assert case["peak_by_category"]["activation"] - (expected + cache) == 2560


def test_prefill_attention_over_a_long_cache_by_hand() -> None:
    """A 64-token prompt generating 1,024 tokens (cache 1,087 tokens) peaks in a layer's attention: the embedding
    output, block input and residual buffer (3 x 64 x 512 x 2), Q and the output (2 x 64 x 512 x 2), the fp16 mask
    of 64 x 1,088 (1,087 padded to 8), K and V expanded to the 8 query heads over the cache (2 x 1,087 x 512 x 2)
    and the fp32 logsumexp (8 heads x 64)."""
    case = _case("compile-gen-llama_l3_h512_gqa_b1_p64_n1024_bf16")
    work = resolve_workload(traced_spec(case["command"]))
    tk = act.Tokens(batch=1, seq=64, target=64)
    expected = 3 * 64 * 512 * 2 + 2 * 64 * 512 * 2 + 64 * 1088 * 2 + 2 * 1087 * 512 * 2 + 8 * 64 * 4
    assert expected == 2_695_168
    assert compiled.compiled_static_step_bytes(work.shape, tk, work.dtypes, 1087) == expected
    cache = 3 * 2 * 1 * 2 * 1087 * 64 * 2
    assert abs(case["peak_by_category"]["activation"] - (expected + cache)) <= 4096


def test_compiled_prefill_expands_where_the_eager_one_does_not() -> None:
    """Under compile the prefill builds its mask (the cache's position is a traced tensor), so a GQA model reads K
    and V expanded over the whole cache in the prefill too: with a long cache the compiled prefill is above the
    eager one."""
    case = _case("compile-gen-llama_l3_h512_gqa_b1_p64_n1024_bf16")
    compiled_prefill = estimate(traced_spec(case["command"])).phase_components["prefill"]["activations"]
    eager_prefill = estimate(traced_spec(case["command"], False)).phase_components["prefill"]["activations"]
    assert compiled_prefill > eager_prefill


GEN = {"mode": "inference", "prompt_len": 64, "max_new_tokens": 16, "seq_len": None}


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ({"runtime": "hf"}, "give cache: static"),
        ({"runtime": "hf", "cache": "dynamic"}, "give cache: static"),
        ({"runtime": "hf", "cache": "static", "precision": "amp-bf16"}, "not amp-bf16"),
        ({"runtime": "hf-legacy"}, "no static cache"),
        ({"runtime": "vllm"}, "vLLM compiles"),
        ({"runtime": "gpt-fast"}, "gpt-fast compiles"),
        ({"runtime": "torchtune"}, "torchtune's generation recipe"),
        ({"runtime": "litgpt"}, "litgpt's generate"),
    ],
)
def test_generation_refused(workload: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match="workload.compile") as err:
        estimate(small_llama(**GEN, **workload))
    assert message in str(err.value)
