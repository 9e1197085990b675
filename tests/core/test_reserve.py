"""The allocator reserve (a quarter of the peak's transient bytes) and the CUDA context by PyTorch release.

The reserve's share is calibrated on published reserved/allocated pairs (benchmarks/reserve_models.py);
these tests check what it applies to, by hand, and that the override keeps its meaning.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from spec_texts import TINY_MODEL

from vramcalc.choices import Runtime
from vramcalc.core.reserve import DEFAULT_CUDA_CONTEXT, TRANSIENT_RESERVE, ReserveRule
from vramcalc.families import estimate
from vramcalc.families.resolve import stack_of
from vramcalc.spec.load import load_spec, parse_spec
from vramcalc.stacks.torch import EAGER_LOADING_CUDA_CONTEXT

ROOT = Path(__file__).resolve().parents[2]
MiB = 2**20


def tiny(overhead: dict[str, Any] | None = None, **workload: Any) -> Any:
    wl = {"batch_size": 2, "seq_len": 4, "precision": "fp32", "optimizer": "sgd", **workload}
    return parse_spec({"name": "t", "model": TINY_MODEL, "workload": wl, "overhead": overhead or {}})


def test_tiny_inference_reserve_by_hand() -> None:
    # tests/core/test_dense.py::test_tiny_inference_by_hand: params 205,056 + input 512 + one workspace
    # 33,554,432 + the MLP moment's 24,576. Transient: the input and the MLP moment, 25,088 B -> a quarter 6,272.
    result = estimate(tiny(mode="inference"))
    assert result.peak_allocated_bytes == 205_056 + 512 + 33_554_432 + 24_576
    assert result.overhead["allocator_reserve"] == 6_272
    assert TRANSIENT_RESERVE == 0.25


def test_a_given_share_applies_to_the_whole_peak() -> None:
    # overhead.allocator_reserve keeps its meaning: a share of the allocated peak (33,784,576 B x 10 %,
    # rounded up to a whole byte)
    result = estimate(tiny({"allocator_reserve": "10%"}, mode="inference"))
    assert result.overhead["allocator_reserve"] == 3_378_458
    assert "allocator reserve 25 %" not in " ".join(result.assumptions)


def test_the_rule_counts_long_lived_components_out() -> None:
    rule = ReserveRule(TRANSIENT_RESERVE)
    moment = {
        "parameters": 1000,
        "allocator_rounding": 24,
        "gradients": 400,
        "optimizer_states": 800,
        "workspace": 64,
        "communication_buffers": 100,
        "activations": 399,
        "temporaries": 1,
    }
    assert rule.bytes_of(moment) == 100  # (399 + 1) / 4
    assert rule.bytes_of({**moment, "activations": 400}) == 101  # 401 / 4 = 100.25, rounded up
    assert ReserveRule(TRANSIENT_RESERVE, of_transient=False).bytes_of(moment) == 697  # 2,788 / 4


def test_served_weights_and_the_vllm_pool_add_no_reserve() -> None:
    # configs/llama-3-8b-inference.yaml: vLLM serves 15 GiB of bf16 weights; the weights and the KV cache
    # (vLLM allocates its pool once) are long-lived, so only the forward's activations and inputs count
    result = estimate(load_spec(ROOT / "configs" / "llama-3-8b-inference.yaml"))
    c = result.components
    assert c["parameters"] > 15 * 2**30 * 0.99 and c["kv_cache"] == 2**30
    assert result.overhead["allocator_reserve"] == -(-(c["activations"] + c["inputs"] + c["temporaries"]) // 4)
    assert result.overhead["allocator_reserve"] < 0.01 * result.peak_allocated_bytes


def test_llamacpp_keeps_no_reserve() -> None:
    spec = load_spec(ROOT / "configs" / "llama-3-8b-q4km-llamacpp.yaml")
    assert estimate(spec).overhead["allocator_reserve"] == 0
    # a GGUF file type without a runtime runs in llama.cpp, never in vLLM
    unset = spec.model_copy(update={"workload": spec.workload.model_copy(update={"runtime": None})})
    assert stack_of(unset).runtime is Runtime.llama_cpp
    assert stack_of(load_spec(ROOT / "configs" / "llama-3-8b-inference.yaml")).runtime is Runtime.vllm


@pytest.mark.parametrize(
    ("torch", "context"),
    [(None, DEFAULT_CUDA_CONTEXT), ("1.11", EAGER_LOADING_CUDA_CONTEXT), ("1.12.1", EAGER_LOADING_CUDA_CONTEXT),
     ("1.13", DEFAULT_CUDA_CONTEXT), ("2.4", DEFAULT_CUDA_CONTEXT)],
)  # fmt: skip
def test_cuda_context_by_release(torch: str | None, context: int) -> None:
    # PyTorch 1.13 sets CUDA_MODULE_LOADING=LAZY when the user has not (pytorch/pytorch#86509): before it,
    # every kernel module is loaded at start-up, 1,343 MiB on a V100 (measured.yaml,
    # hf-perf-bert-large-load-context-only); with lazy loading vramcalc's default is 512 MiB
    versions = {"versions": {"torch": torch}} if torch else {}
    result = estimate(tiny(attention="eager", **versions))
    assert result.overhead["cuda_context"] == context
    assert EAGER_LOADING_CUDA_CONTEXT == 1343 * MiB and DEFAULT_CUDA_CONTEXT == 512 * MiB


def test_a_given_context_wins_over_the_release() -> None:
    result = estimate(tiny({"cuda_context": "300MiB"}, attention="eager", versions={"torch": "1.11"}))
    assert result.overhead["cuda_context"] == 300 * MiB
