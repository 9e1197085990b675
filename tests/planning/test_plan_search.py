"""`vramcalc plan` and the per-rank CLI/JSON contract.

The search (bisection over the data degree) is checked against an independent exhaustive search that
estimates every plan with up to ``max_gpus`` GPUs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from plan_shapes import SMALL_DECODER as MODEL
from plan_shapes import SMALL_WORKLOAD as WORKLOAD
from plan_shapes import card
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.families import estimate
from vramcalc.planning.budget import Budget
from vramcalc.planning.plan_search import combinations, search_plans
from vramcalc.spec.load import parse_spec

runner = CliRunner()
GiB = 2**30
CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def brute_force_min_gpus(spec: Any, budget: Budget, max_gpus: int) -> int | None:
    """Every combination with every data degree: the fewest GPUs of any plan that fits."""
    best = None
    for base in combinations(spec, max_gpus):
        ranks = base["tensor"] * base["pipeline"] * base["context"]
        for data in range(1, max_gpus // ranks + 1):
            candidate = parse_spec(
                {**spec.model_dump(mode="json", exclude_unset=True), "parallel": {**base, "data": data}}
            )
            if estimate(candidate).total_bytes <= budget.available_bytes:
                gpus = data * ranks
                best = gpus if best is None else min(best, gpus)
                break
    return best


# a Hopper card on an NVSwitch board: NCCL's buffers grow with the data degree up to a node (NVLS), so per-GPU
# bytes are not monotonic there; 4, 2 and 2 GPUs at these sizes
@pytest.mark.parametrize("usable_gib", [2.7, 3.4, 4.0])
def test_search_finds_the_fewest_gpus_an_exhaustive_search_finds(usable_gib: float) -> None:
    spec = parse_spec({"name": "m", "model": MODEL, "workload": WORKLOAD})
    budget = card(usable_gib)
    result = search_plans(spec, budget, max_gpus=16, top=50)
    assert result.min_gpus == brute_force_min_gpus(spec, budget, 16)
    assert result.min_gpus is not None and result.min_gpus > 1  # one card is too small for 16 B/param
    gpus = [c.gpus for c in result.plans]
    assert gpus == sorted(gpus) and all(c.fits for c in result.plans)
    for c in result.plans:  # every proposal is the plan it claims, estimated again from scratch
        again = estimate(parse_spec({"name": "m", "model": MODEL, "workload": WORKLOAD, "parallel": c.parallel}))
        assert again.total_bytes == c.needed_bytes and again.parallel.plan.gpus == c.gpus


def test_search_respects_the_spec_framework_and_model_shape() -> None:
    spec = parse_spec({"name": "m", "model": MODEL, "workload": WORKLOAD, "parallel": {"fsdp": "full_shard"}})
    bases = combinations(spec, 64)
    assert {b.get("fsdp") for b in bases} == {"no_shard", "shard_grad_op", "full_shard"}
    assert {b["tensor"] for b in bases} == {1, 2, 4}  # divisors of heads 8, kv_heads 4 and ffn 4096
    assert {b["pipeline"] for b in bases} == {1, 2, 4, 8}  # divisors of 8 layers
    deepspeed = combinations(parse_spec({"name": "m", "model": MODEL, "workload": WORKLOAD}), 64)
    assert {(b["zero"], b["pipeline"] > 1) for b in deepspeed} == {
        (0, False),
        (1, False),
        (2, False),
        (3, False),
        (0, True),
        (1, True),
    }


def test_nothing_fits_reports_the_closest_plan() -> None:
    spec = parse_spec({"name": "m", "model": MODEL, "workload": WORKLOAD})
    result = search_plans(spec, card(0.5), max_gpus=2)
    assert result.plans == () and result.min_gpus is None
    assert result.closest is not None and not result.closest.fits


# -- CLI ----------------------------------------------------------------------------------------------------------


def test_plan_command_json(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plan", str(CONFIGS / "llama-2-70b-fsdp.yaml"), "--max-gpus", "64", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["min_gpus"] == doc["plans"][0]["gpus"] > 1
    first = doc["plans"][0]
    assert first["fits"] and first["needed_bytes"] <= doc["gpu"]["available_bytes"]
    assert first["parallel"]["fsdp"] in ("no_shard", "shard_grad_op", "full_shard")


def test_plan_command_exit_codes(write_spec: Any) -> None:
    path = write_spec(
        "name: m\nmodel: {architecture: decoder, layers: 8, hidden_size: 1024, heads: 8, vocab_size: 32000}\n"
        "workload: {batch_size: 1, seq_len: 512, precision: mixed-bf16}\n"
    )
    none = runner.invoke(app, ["plan", str(path), "--gpu", "t4", "--max-gpus", "1"])
    assert none.exit_code == 0, none.output  # 1 x T4 (15 GiB) holds 16 B x 168M params
    missing = runner.invoke(app, ["plan", str(path)])
    assert missing.exit_code == 2 and missing.stderr.startswith("error: ") and "target.gpu" in missing.stderr
    bad = runner.invoke(app, ["plan", str(path), "--gpu", "t4", "--max-gpus", "0"])
    assert bad.exit_code == 2


def test_plan_command_exit_1_when_nothing_fits(write_spec: Any) -> None:
    path = write_spec(
        "name: big\nmodel: {architecture: decoder, layers: 80, hidden_size: 8192, heads: 64, vocab_size: 32000}\n"
        "workload: {batch_size: 1, seq_len: 4096, precision: mixed-bf16}\n"
    )
    result = runner.invoke(app, ["plan", str(path), "--gpu", "t4", "--max-gpus", "2"])
    assert result.exit_code == 1, result.output
    assert "no plan fits" in result.stdout and "closest:" in result.stdout


def test_bad_plan_is_one_error_line_naming_file_and_key(write_spec: Any) -> None:
    path = write_spec(
        "name: m\nmodel: {architecture: decoder, layers: 32, hidden_size: 4096, heads: 32, vocab_size: 32000}\n"
        "workload: {batch_size: 1, seq_len: 512}\nparallel: {tensor: 3}\n"
    )
    result = runner.invoke(app, ["estimate", str(path)])
    assert result.exit_code == 2
    assert result.stderr == f"error: {path}: parallel.tensor: 3 does not divide heads (32)\n"
    assert result.stdout == ""


def test_estimate_json_per_rank_keys() -> None:
    result = runner.invoke(app, ["estimate", str(CONFIGS / "gpt-megatron-tp.yaml"), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["per_rank"] is True and doc["host_bytes"] == 0
    par = doc["parallel"]
    assert (par["gpus"], par["data"], par["tensor"], par["pipeline"]) == (256, 4, 8, 8)
    assert par["stage"] == "first" and set(par["stage_peaks"]) == {"first", "last"}
    assert doc["peak_allocated_bytes"] == sum(doc["components"].values()) == max(par["stage_peaks"].values())
    plain = json.loads(runner.invoke(app, ["estimate", str(CONFIGS / "bert-base.yaml"), "--json"]).stdout)
    assert (plain["per_rank"], plain["host_bytes"], plain["parallel"]) == (False, 0, None)
    assert plain["components"]["gathered_parameters"] == plain["components"]["communication_buffers"] == 0


def test_estimate_table_says_per_gpu_and_host_memory(write_spec: Any) -> None:
    path = write_spec(
        "name: offload-test\n"
        "model: {architecture: decoder, layers: 8, hidden_size: 1024, heads: 8, vocab_size: 32000}\n"
        "workload: {batch_size: 1, seq_len: 512, precision: mixed-bf16}\n"
        "parallel: {gpus: 4, zero: 3, offload: {optimizer: cpu, params: cpu}}\n"
    )
    result = runner.invoke(app, ["estimate", str(path)])
    assert result.exit_code == 0, result.output
    assert "per GPU of 4" in result.stdout
    assert "plan: 4 GPUs = data 4 x tensor 1 x pipeline 1, ZeRO-3, offload optimizer+params" in result.stdout
    assert "host memory (offload):" in result.stdout and "per node of 4 GPUs" in result.stdout


def test_core_modules_do_not_import_cli_libraries() -> None:
    modules = (
        "vramcalc.parallel.layout, vramcalc.families.per_rank, vramcalc.parallel.activations, "
        "vramcalc.planning.plan_search"
    )
    code = (
        f"import sys; import {modules}; "
        "print(','.join(m for m in ('typer', 'rich', 'click', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_plan_refuses_what_estimate_refuses(tmp_path: Path) -> None:
    # configs/llama-2-7b-qlora.yaml without its adapter: training 4-bit weights needs one. The search
    # must not turn every combination's error into "no plan fits" (exit 1): the spec is invalid (exit 2)
    text = (CONFIGS / "llama-2-7b-qlora.yaml").read_text(encoding="utf-8")
    path = tmp_path / "no-adapter.yaml"
    path.write_text("\n".join(line for line in text.splitlines() if "adapter:" not in line) + "\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["plan", str(path), "--gpu", "a100-80gb-sxm"])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {path}: workload.quantization: ")
