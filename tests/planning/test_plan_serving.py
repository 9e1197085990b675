"""`vramcalc plan` on serving specs: tensor x pipeline x replicas, nothing sharded, and the same verdict as
`check` for the one-GPU layout (for vLLM: its pool, not the total); specs modelled on one GPU only are refused
with their reason."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.hardware.lookup import get_gpu
from vramcalc.planning.budget import budget_for, estimate_on, fit_on
from vramcalc.planning.plan_layouts import best_plans
from vramcalc.spec.load import parse_spec

runner = CliRunner()
SERVING = {"mode": "inference", "batch_size": 1, "prompt_len": 6, "max_new_tokens": 200, "precision": "bf16"}


def spec(**workload: Any) -> Any:
    return parse_spec({"name": "s", "model": {"preset": "llama-3-8b"}, "workload": SERVING | workload})


@pytest.mark.parametrize("runtime", ["vllm", "hf"])
def test_one_card_is_the_first_plan_and_agrees_with_the_estimate(runtime: str) -> None:
    serving = spec(runtime=runtime)
    budget = budget_for(get_gpu("h100-sxm"))
    search = best_plans(serving, budget)
    first = search.plans[0]
    assert first.gpus == 1
    verdict = fit_on(serving, budget)  # what `check` compares, and with what
    assert (first.needed_bytes, first.available_bytes) == (verdict.needed_bytes, verdict.available_bytes)
    assert first.total_bytes == estimate_on(serving, budget).total_bytes
    if runtime == "vllm":  # vLLM's pool decides: its needed bytes are not the total, nor its available the card's
        assert verdict.kv_pool is not None and first.max_sequences == verdict.kv_pool.max_sequences
        assert first.available_bytes < budget.available_bytes
    else:
        assert first.needed_bytes == estimate(serving).total_bytes and first.max_sequences is None
    for plan in search.plans:
        assert not {"zero", "fsdp", "distributed_optimizer"} & set(plan.parallel)
        assert plan.parallel["sequence_parallel"] is False


def test_tensor_parallelism_halves_the_weights_per_gpu() -> None:
    # Llama-3-8B in bf16: 16.06 GB of weights; TP 2 holds half of every block and of the embedding and head
    plans = best_plans(spec(), budget_for(get_gpu("h100-sxm"))).plans
    one = next(p for p in plans if p.gpus == 1)
    two = next(p for p in plans if p.parallel["tensor"] == 2 and p.parallel["pipeline"] == 1)
    assert two.peak_allocated_bytes < 0.55 * one.peak_allocated_bytes


@pytest.mark.parametrize(
    ("workload", "reason"),
    [
        ({"runtime": "litgpt"}, "workload.runtime: litgpt across several GPUs"),
        ({"runtime": "hf", "quantization": "int8_weight_only"}, "workload.quantization: torchao int8_weight_only"),
        ({"quantization": "q4_k_m"}, "workload.quantization: GGUF files are not split across GPUs"),
    ],
)
def test_one_gpu_only_specs_are_refused_with_their_reason(workload: dict[str, Any], reason: str) -> None:
    with pytest.raises(SpecError, match=reason + r".*plan searches multi-GPU layouts"):
        best_plans(spec(**workload), budget_for(get_gpu("h100-sxm")))


def test_the_cli_says_it_in_one_line_with_exit_2(tmp_path: Any) -> None:
    path = tmp_path / "litgpt.yaml"
    path.write_text(
        "model: {preset: llama-3-8b}\n"
        "workload: {mode: inference, batch_size: 1, prompt_len: 6, max_new_tokens: 8, runtime: litgpt}\n"
    )
    result = runner.invoke(app, ["plan", str(path), "--gpu", "h100-sxm"])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "plan searches multi-GPU layouts" in result.output


@pytest.mark.parametrize(
    ("technique", "reason"),
    [
        ({"activation_offloading": True, "gradient_checkpointing": "full"}, "workload.activation_offloading"),
        ({"optimizer_offload": "cpu"}, "workload.optimizer_offload: one GPU only"),
    ],
)
def test_one_gpu_techniques_are_not_planned_without_them(technique: dict[str, Any], reason: str) -> None:
    # plan's layouts used to drop the technique (a parallel section added after the spec was read), so its
    # one-GPU row disagreed with check's total for the same spec
    wl = {"mode": "train", "batch_size": 1, "seq_len": 1024, "precision": "bf16", "optimizer": "adamw"} | technique
    training = parse_spec({"name": "t", "model": {"preset": "llama-3-8b"}, "workload": wl})
    with pytest.raises(SpecError, match=reason + r".*plan searches multi-GPU layouts"):
        best_plans(training, budget_for(get_gpu("h100-sxm")))


def test_experts_are_refused_with_their_reason() -> None:
    # no expert parallelism is modelled: plan says so instead of "no plan fits"
    mixtral = parse_spec({"name": "m", "model": {"preset": "mixtral-8x7b"}, "workload": SERVING})
    with pytest.raises(SpecError, match=r"mixture-of-experts models.*plan searches multi-GPU layouts"):
        best_plans(mixtral, budget_for(get_gpu("h100-sxm")))


def test_a_context_parallel_spec_on_one_gpu_is_no_plan_not_an_error() -> None:
    # parallel.context 2 needs two GPUs: on exactly one there is no layout to try, and no refusal either
    wl = {"mode": "train", "batch_size": 1, "seq_len": 8192, "precision": "bf16", "optimizer": "adamw"}
    ring = parse_spec({"name": "c", "model": {"preset": "llama-3-8b"}, "workload": wl, "parallel": {"context": 2}})
    search = best_plans(ring, budget_for(get_gpu("h100-sxm")), gpus=1)
    assert search.plans == () and search.closest is None
