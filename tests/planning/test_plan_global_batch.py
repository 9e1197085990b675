"""`vramcalc plan --global-batch N`: every row holds N sequences per optimizer step (data-parallel degree x
micro-batch x micro-batches per step), its figures are check's for the spec the row describes, and a global
batch no layout can divide is one error line."""

from __future__ import annotations

from typing import Any

import pytest
from cli_json import run_json

from vramcalc.errors import SpecError
from vramcalc.hardware.lookup import get_gpu
from vramcalc.planning.budget import budget_for, fit_on
from vramcalc.planning.plan_layouts import best_plans
from vramcalc.spec.load import parse_spec

TRAIN = {"mode": "train", "batch_size": 1, "seq_len": 2048, "precision": "mixed-bf16", "optimizer": "adamw"}


def _spec(model: Any = "llama-2-7b", **workload: Any) -> Any:
    return parse_spec({"name": "pretrain", "model": model, "workload": TRAIN | workload})


@pytest.mark.parametrize("global_batch", [512, 96, 8])
def test_every_row_holds_the_global_batch_on_eight_gpus(global_batch: int) -> None:
    search = best_plans(_spec(), budget_for(get_gpu("h100-sxm")), gpus=8, global_batch=global_batch)
    assert search.plans and search.global_batch == global_batch
    for row in search.plans:
        p = row.parallel
        assert p["data"] * p["tensor"] * p["pipeline"] * p["context"] == 8 == row.gpus
        assert row.micro_batch is not None and row.grad_accumulation is not None
        assert p["data"] * row.micro_batch * row.grad_accumulation == global_batch


def test_a_row_is_what_check_says_of_the_spec_it_describes() -> None:
    budget = budget_for(get_gpu("h100-sxm"), count=8, sharded=True)
    search = best_plans(_spec(), budget_for(get_gpu("h100-sxm")), gpus=8, global_batch=256)
    for row in search.plans[:4]:
        assert row.micro_batch is not None and row.checkpointing is not None
        workload = {"batch_size": row.micro_batch, "gradient_checkpointing": row.checkpointing}
        doc = {"name": "row", "model": "llama-2-7b", "workload": TRAIN | workload, "parallel": row.parallel}
        verdict = fit_on(parse_spec(doc), budget)
        assert (verdict.needed_bytes, verdict.fits) == (row.needed_bytes, True)


def test_fewest_gpus_first_with_the_smallest_data_degree_that_fits() -> None:
    search = best_plans(_spec(), budget_for(get_gpu("h100-sxm")), max_gpus=64, global_batch=64)
    gpus = [row.gpus for row in search.plans]
    assert gpus == sorted(gpus)
    for row in search.plans:
        assert 64 % row.parallel["data"] == 0


#: Three heads, three layers: tensor and pipeline degrees 1 and 3 only, so on 8 GPUs the data degree is 8.
SMALL = {
    "architecture": "decoder", "layers": 3, "hidden_size": 192, "heads": 3, "kv_heads": 3, "ffn_size": 768,
    "vocab_size": 1000,
}  # fmt: skip


def test_a_global_batch_no_layout_divides_is_one_error() -> None:
    with pytest.raises(SpecError, match=r"--global-batch: 12 is not a multiple of the data-parallel degree of any "):
        best_plans(_spec(SMALL), budget_for(get_gpu("h100-sxm")), gpus=8, global_batch=12)
    found = best_plans(_spec(SMALL), budget_for(get_gpu("h100-sxm")), gpus=8, global_batch=16)
    assert {row.parallel["data"] for row in found.plans} == {8}


def test_serving_specs_have_no_global_batch() -> None:
    serving = {"mode": "inference", "batch_size": 1, "prompt_len": 8, "max_new_tokens": 8, "runtime": "vllm"}
    spec = parse_spec({"name": "s", "model": "llama-2-7b", "workload": serving})
    with pytest.raises(SpecError, match="--global-batch: only for training"):
        best_plans(spec, budget_for(get_gpu("h100-sxm")), gpus=2, global_batch=8)


def test_the_cli_holds_it_and_says_so(tmp_path: Any) -> None:
    doc = run_json(
        ["plan", "--model", "llama-2-7b", "--gpu", "h100-sxm", "--gpus", "8", "--global-batch", "512", "--json"]
    )
    assert doc["global_batch"] == 512 and doc["batch_per_data_rank"] is None
    for row in doc["plans"]:
        assert row["parallel"]["data"] * row["micro_batch"] * row["grad_accumulation"] == 512
