"""`vramcalc plan --gpus N`, and the checkpointing / micro-batch / cost dimensions of the plan search."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from plan_shapes import SMALL_DECODER as SMALL
from plan_shapes import card
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.families import estimate
from vramcalc.hardware.lookup import get_gpu
from vramcalc.planning.budget import budget_for
from vramcalc.planning.plan_cost import step_cost
from vramcalc.planning.plan_layouts import best_plans, micro_batch_sizes
from vramcalc.spec.load import parse_spec
from vramcalc.spec.parallel import ParallelSpec

runner = CliRunner()
GiB = 2**30

#: GPT-3 XL shape (Brown et al. 2020, Table 2.1: 1.3B, d_model 2048, 24 layers, 16 heads, context 2048)
#: with GPT-2's vocabulary and a tied head.
GPT_1_3B = {
    "architecture": "decoder",
    "layers": 24,
    "hidden_size": 2048,
    "heads": 16,
    "vocab_size": 50257,
    "position": "learned",
    "max_position_embeddings": 2048,
    "tie_embeddings": True,
    "mlp": "gelu_tanh",
}
GPT_WORKLOAD = {"batch_size": 8, "seq_len": 2048, "precision": "mixed-bf16", "optimizer": "adamw"}

#: tests/plan_shapes.py's decoder, with eager attention so selective checkpointing counts.
SMALL_WORKLOAD = {
    "batch_size": 4,
    "seq_len": 1024,
    "precision": "mixed-bf16",
    "optimizer": "adamw",
    "attention": "eager",
}


def gpt() -> Any:
    return parse_spec({"name": "gpt-1.3b", "model": GPT_1_3B, "workload": GPT_WORKLOAD})


def small() -> Any:
    return parse_spec({"name": "small", "model": SMALL, "workload": SMALL_WORKLOAD})


def sharded(parallel: dict[str, Any]) -> bool:
    return bool(parallel.get("zero")) or parallel.get("fsdp") not in (None, "no_shard")


@pytest.mark.parametrize("n", [1, 2, 4, 6, 8])
def test_gpus_n_gives_only_n_gpu_plans(n: int) -> None:
    result = best_plans(small(), card(6.0), gpus=n, top=100)
    assert result.plans and result.gpus == n
    assert {c.gpus for c in result.plans} == {n}
    for c in result.plans:
        p = c.parallel
        assert p["data"] * p["tensor"] * p["pipeline"] * p["context"] == n
        assert c.fits and c.needed_bytes <= card(6.0).available_bytes


def test_no_sharded_row_over_one_data_rank() -> None:
    # ZeRO/FSDP over one rank shards nothing: the same plan with more buffers; only stage 0 / no_shard there
    for spec in (
        small(),
        parse_spec({"name": "f", "model": SMALL, "workload": SMALL_WORKLOAD, "parallel": {"fsdp": "full_shard"}}),
    ):
        for gpus in (None, 1, 2, 8):
            result = best_plans(spec, card(6.0), gpus=gpus, max_gpus=16, top=1000)
            assert result.plans
            for c in result.plans:
                assert not (sharded(c.parallel) and c.parallel["data"] * c.parallel["context"] == 1), c.label


def test_gpt_1_3b_on_8_a100_40gb_is_data_parallel_with_a_smaller_micro_batch() -> None:
    """Why plain data parallelism fits on a 40 GB card (hand derivation, GPT-3 XL shape above):

    parameters: 24 layers x (12 h^2 + 13 h) = 24 x 50,358,272 = 1,208,598,528, plus embeddings
    50,257 x 2048 = 102,926,336 and positions 2048 x 2048 = 4,194,304 -> 1.316e9 (tied head).
    Model states under mixed-precision Adam without ZeRO (Rajbhandari et al. 2020, sec. 3.1):
    2 + 2 + 12 = 16 B/param -> 21.1 GB (19.6 GiB) on every GPU, half of the A100's 40 GiB (40,960 MiB
    driver total). So activations decide. Per layer and sequence, with flash/SDPA attention (no
    score matrices), Korthikanti et al. 2022 (Table 2, no parallelism) give 34 s h bytes = 34 x 2048 x
    2048 = 142.6 MB; over 24 layers 3.42 GB per sequence. The whole batch of 8 at once: 27.4 GB of
    activations + 21.1 GB of states = 48.5 GB > 42.9 GB (40 GiB): it does not fit, on one card or on
    eight (plain data parallelism never divides per-GPU memory). One or two sequences per micro-batch
    (3.4-6.8 GB) with accumulation to 8 fit (with the logits and buffers), and so does full
    checkpointing (2 s h bytes per layer kept). ZeRO-3 fits too, but adds two parameter all-gathers per
    micro-batch on top of the same gradient traffic: it must not come first.
    """
    budget = budget_for(get_gpu("a100-40gb-sxm"))
    assert budget.available_bytes == 40 * GiB  # catalog: 40,960 MiB, no reserve
    result = best_plans(gpt(), budget, gpus=8, top=100)
    assert result.plans and result.batch_per_rank == 8
    first = result.plans[0]
    assert first.parallel.get("zero") != 3
    assert (first.parallel["data"], first.parallel["tensor"], first.parallel["pipeline"]) == (8, 1, 1)
    assert first.micro_batch is not None and (first.micro_batch < 8 or first.checkpointing != "none")
    plain = [c for c in result.plans if c.parallel.get("zero") == 0 and c.parallel["data"] == 8]
    assert len(plain) == 1  # one row per layout: plain data parallelism on 8 ranks
    dp = plain[0]
    assert dp.micro_batch is not None and dp.grad_accumulation is not None
    assert dp.micro_batch * dp.grad_accumulation == 8
    assert dp.micro_batch < 8 or dp.checkpointing == "full"
    # the derivation: the whole batch without checkpointing does not fit, one sequence at a time does
    whole = parse_spec({"name": "g", "model": GPT_1_3B, "workload": GPT_WORKLOAD, "parallel": {"data": 8, "zero": 0}})
    assert estimate(whole).total_bytes > budget.available_bytes
    one = parse_spec(
        {
            "name": "g",
            "model": GPT_1_3B,
            "workload": {**GPT_WORKLOAD, "batch_size": 1},
            "parallel": {"data": 8, "zero": 0, "micro_batches": 8},
        }
    )
    assert estimate(one).total_bytes <= budget.available_bytes
    zero3 = [c for c in result.plans if c.parallel.get("zero") == 3]
    assert zero3 and all((c.relative_cost or 0) > (first.relative_cost or 0) for c in zero3)


def test_checkpointing_and_micro_batch_rows_appear() -> None:
    # a 4.5 GiB card: 16 B x 235M params = 3.8 GB of states at d = 1 leaves too little for the batch of
    # 4 without help; many layouts then need full checkpointing or a smaller micro-batch
    result = best_plans(small(), card(4.5), max_gpus=8, top=1000)
    assert result.plans
    assert any(c.checkpointing == "full" for c in result.plans)
    assert any((c.micro_batch or 0) < 4 for c in result.plans)
    assert {c.checkpointing for c in result.plans} <= {"none", "selective", "full"}
    for c in result.plans:  # every row is the plan it claims, estimated again from scratch
        workload = {**SMALL_WORKLOAD, "batch_size": c.micro_batch, "gradient_checkpointing": c.checkpointing}
        again = estimate(parse_spec({"name": "s", "model": SMALL, "workload": workload, "parallel": c.parallel}))
        assert again.total_bytes == c.needed_bytes
        assert (c.micro_batch or 0) * (c.grad_accumulation or 0) == 4  # the batch per data rank is held
        assert c.parallel["micro_batches"] == c.grad_accumulation


def test_selective_only_where_it_changes_memory() -> None:
    eager = best_plans(small(), card(64.0), gpus=1, top=1000)
    sdpa = parse_spec({"name": "s", "model": SMALL, "workload": {**SMALL_WORKLOAD, "attention": "sdpa"}})
    # with SDPA the scores are never saved: selective would cost time and save nothing
    assert all(c.checkpointing != "selective" for c in best_plans(sdpa, card(4.5), max_gpus=8, top=1000).plans)
    # on a card that holds everything, the cheapest row has no recomputation and the whole batch at once
    assert (eager.plans[0].checkpointing, eager.plans[0].micro_batch) == ("none", 4)


def test_ranking_follows_the_stated_cost() -> None:
    for gpus in (None, 4):
        result = best_plans(small(), card(4.5), gpus=gpus, max_gpus=8, top=1000)
        keys = [((c.gpus if gpus is None else 0), c.relative_cost, -c.headroom_bytes) for c in result.plans]
        assert keys == sorted(keys)
        assert "cost" in result.criterion and result.criterion.startswith("fewest GPUs") == (gpus is None)


def test_cost_model_terms_by_hand() -> None:
    base = {"data": 8, "tensor": 1, "pipeline": 1, "context": 1, "zero": 0}
    # plain data parallelism, one micro-batch of 2048 tokens, h = 2048:
    # micro-batch 1 + 128/2048 = 1.0625; sync (7/8) x 2 copies x 500 tokens / 2048 = 0.4272 ... per step
    c = step_cost(base, "none", 2048, 1, 2048)  # type: ignore[arg-type]
    assert c.micro_batch == pytest.approx(1.0625)
    assert c.gradient_sync == pytest.approx(7 / 8 * 1000 / 2048)
    assert (c.bubble, c.parameter_gathers, c.tensor_parallel) == (1.0, 0.0, 0.0)
    # full checkpointing recomputes the forward: +1/3 of the compute
    assert step_cost(base, "full", 2048, 1, 2048).compute == pytest.approx(4 / 3)  # type: ignore[arg-type]
    # ZeRO-3 gathers the parameters twice per micro-batch: 2 x (7/8) x 500 / 2048
    z3 = step_cost({**base, "zero": 3}, "none", 2048, 1, 2048)  # type: ignore[arg-type]
    assert z3.parameter_gathers == pytest.approx(2 * 7 / 8 * 500 / 2048)
    # pipeline of 4 stages, 4 micro-batches: bubble (p - 1)/(m + p - 1) = 3/7 of the step -> x 7/4
    pp = step_cost({**base, "data": 1, "pipeline": 4}, "none", 2048, 4, 2048)  # type: ignore[arg-type]
    assert pp.bubble == pytest.approx(7 / 4) and pp.gradient_sync == 0
    # TP 2 at h = 2048: (t - 1) x 2 x 1500 / (9 h) = 3000 / 18432
    tp = step_cost({**base, "data": 4, "tensor": 2}, "none", 2048, 1, 2048)  # type: ignore[arg-type]
    assert tp.tensor_parallel == pytest.approx(3000 / 18432)


def test_micro_batch_sizes_halve() -> None:
    assert micro_batch_sizes(8) == [8, 4, 2, 1]
    assert micro_batch_sizes(24) == [24, 12, 6, 3, 1]
    assert micro_batch_sizes(1) == [1]
    assert micro_batch_sizes(7) == [7, 1]


# -- CLI ----------------------------------------------------------------------------------------------------------


def _spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "gpt.yaml"
    path.write_text(json.dumps({"name": "gpt-1.3b", "model": GPT_1_3B, "workload": GPT_WORKLOAD}), encoding="utf-8")
    return path


def test_cli_gpus_json_keys(tmp_path: Path) -> None:
    path = _spec_file(tmp_path)
    result = runner.invoke(app, ["plan", str(path), "--gpu", "a100-40gb-sxm", "--gpus", "8", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["gpus"] == doc["max_gpus"] == doc["min_gpus"] == 8 and doc["batch_per_data_rank"] == 8
    assert "relative step-time cost" in doc["criterion"]
    for plan in doc["plans"]:
        assert plan["gpus"] == 8
        assert {"checkpointing", "micro_batch", "grad_accumulation", "relative_cost", "headroom_bytes"} <= plan.keys()
        assert plan["micro_batch"] * plan["grad_accumulation"] == 8
    costs = [p["relative_cost"] for p in doc["plans"]]
    assert costs == sorted(costs)


def test_cli_gpus_with_max_gpus_is_one_error_line(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["plan", str(_spec_file(tmp_path)), "--gpu", "a100-40gb-sxm", "--gpus", "8", "--max-gpus", "16"]
    )
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("error: --gpus and --max-gpus: give one (")
    assert len(result.stderr.splitlines()) == 1


def test_cli_bad_gpus_value_is_one_error_line(tmp_path: Path) -> None:
    # the installed entry point (vramcalc.cli.main:run) turns typer's range check into one line
    path = str(_spec_file(tmp_path))
    for value in ("0", "100001", "x", "-3"):
        done = subprocess.run(
            [sys.executable, "-m", "vramcalc", "plan", path, "--gpu", "a100-40gb-sxm", "--gpus", value],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: Invalid value for '--gpus'"), done.stderr
        assert done.stdout == ""


def test_cli_nothing_fits_on_exactly_n(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plan", str(_spec_file(tmp_path)), "--gpu", "t4", "--gpus", "1"])
    assert result.exit_code == 1, result.output
    assert "no plan fits" in result.stdout and "on 1 GPUs" in result.stdout and "closest:" in result.stdout


@pytest.mark.parametrize(
    ("config", "args"),
    [
        ("llama-2-70b-fsdp.yaml", ["--top", "10"]),
        ("gpt-megatron-tp.yaml", ["--max-gpus", "512"]),
        ("bert-base.yaml", ["--gpu", "t4", "--gpus", "8"]),
    ],
)
def test_plan_table_fits_80_columns(config: str, args: list[str]) -> None:
    configs = Path(__file__).resolve().parents[2] / "configs"
    result = runner.invoke(app, ["plan", str(configs / config), *args], env={"COLUMNS": "80", "TERMINAL_WIDTH": "80"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in result.stdout and "..." not in result.stdout
    assert any(line.startswith("order: ") for line in lines)


@pytest.mark.parametrize("usable_gib", [2.75, 3.5, 4.5])
def test_fewest_gpus_matches_an_exhaustive_search(usable_gib: float) -> None:
    """The pruned search (screen by the least-memory variants, bisection from their data degree) finds
    the fewest GPUs that every combination x checkpointing x micro-batch x data degree gives, and each
    row's data degree is the smallest that fits its own variant. The card counts as Hopper on an NVSwitch
    board: NCCL's buffers grow with the data degree up to a node (NVLS), so per-GPU bytes are not
    monotonic there (4, 2 and 1 GPUs at these sizes)."""
    from vramcalc.planning.plan_layouts import batch_per_rank, workload_variants
    from vramcalc.planning.plan_search import combinations

    spec, budget, limit = small(), card(usable_gib), 6
    best = None
    for variant in workload_variants(spec, batch_per_rank(spec)):
        for base in combinations(spec, limit):
            ranks = base["tensor"] * base["pipeline"] * base["context"]
            for data in range(1, limit // ranks + 1):
                parallel = {**base, "data": data, "micro_batches": variant.micro_batches}
                changed = variant.spec.model_copy(update={"parallel": ParallelSpec.model_validate(parallel)})
                if estimate(changed).total_bytes <= budget.available_bytes:
                    best = data * ranks if best is None else min(best, data * ranks)
                    break
    result = best_plans(spec, budget, max_gpus=limit, top=1000)
    assert best is not None and result.min_gpus == best
    for c in result.plans:
        p = c.parallel
        workload = {**SMALL_WORKLOAD, "batch_size": c.micro_batch, "gradient_checkpointing": c.checkpointing}
        for fewer in range(2 if sharded(p) else 1, p["data"]):
            smaller = parse_spec({"name": "s", "model": SMALL, "workload": workload, "parallel": {**p, "data": fewer}})
            assert estimate(smaller).total_bytes > budget.available_bytes, (c.label, fewer)
