"""torchtune's published "Optimization flags" table (README v0.6.1, Llama-3.2-3B): every row listed, and the
LoRA and QLoRA rows, now scored with compile as the published runs were, within 5 % of the published
"Peak Memory Active" (benchmarks/data/measured_torchtune_lora.yaml, benchmarks/torchtune_lora_score.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location("torchtune_lora_score", ROOT / "benchmarks" / "torchtune_lora_score.py")
assert _SPEC is not None and _SPEC.loader is not None
score = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(score)


def test_every_row_of_the_table_is_listed() -> None:
    """The README's table has ten rows, Baseline to QLoRA (published GiB as printed there)."""
    published = [row["published_gib"] for row in score.rows()]
    assert published == [25.5, 60.0, 51.0, 42.9, 24.9, 23.1, 21.8, 17.6, 8.5, 4.6]


def test_lora_and_qlora_rows_within_five_percent() -> None:
    rows = {row["id"]: row for row in score.rows()}
    for name in ("lora", "qlora"):
        row = rows[f"torchtune-readme-v0.6.1-llama32-3b-{name}"]
        assert row["spec"]["workload"].get("compile") is True
        assert abs(score.error(row)) <= score.TOLERANCE, (name, score.error(row))


def test_published_rows_rule_out_the_foreach_adamw_step() -> None:
    """PyTorch's foreach AdamW step (torch/optim/adam.py ``_multi_tensor_adam``: ``torch._foreach_sqrt`` of every
    ``exp_avg_sq``) holds the parameters, their gradients, both states and a temporary of their size: five bf16
    copies of llama3_2_3b's 3,212,749,824 parameters (embedding 128,256 x 3,072 tied to the output; 28 layers of
    q/o 3,072 x 3,072, k/v 1,024 x 3,072, w1/w2/w3 8,192 x 3,072 and two norms of 3,072; the final norm), above
    the Baseline's and "+ Activation Checkpointing"'s published peaks, so the scored rows use a fused step."""
    layer = 2 * 3072 * 3072 + 2 * 1024 * 3072 + 3 * 8192 * 3072 + 2 * 3072
    params = 128256 * 3072 + 28 * layer + 3072
    assert params == 3_212_749_824
    foreach_floor_gib = 5 * 2 * params / (1 << 30)  # 29.92
    rows = {row["id"]: row for row in score.rows()}
    for name in ("baseline", "activation-checkpointing"):
        assert rows[f"torchtune-readme-v0.6.1-llama32-3b-{name}"]["published_gib"] < foreach_floor_gib
    for row in rows.values():
        if "spec" in row and row["spec"]["workload"].get("optimizer") == "adamw":
            assert row["spec"]["workload"]["optimizer_impl"] == "fused", row["id"]


def test_activation_checkpointing_row_within_five_percent() -> None:
    row = {row["id"]: row for row in score.rows()}["torchtune-readme-v0.6.1-llama32-3b-activation-checkpointing"]
    assert abs(score.error(row)) <= score.TOLERANCE, score.error(row)


def test_a_row_below_its_published_peak_is_said_in_the_output() -> None:
    """Where the count is more than 5 % below a published row (the compiled full fine-tuning rows from chunked
    cross-entropy on), the estimate says that torchtune publishes more, quoting the row's own error, and the
    8-bit row names what is not counted; the compiled rows within 5 % before chunked CE carry no such note."""
    for row in score.rows():
        if "spec" not in row:
            continue
        result = score.estimate(score.parse_spec(row["spec"], row["spec"]["name"]), gpu=row.get("gpu"))
        said = " ".join(result.assumptions)
        error = score.error(row)
        quoted = f"{error * 100:+.1f} %"
        if row["id"].endswith("adamw-8bit"):
            assert quoted == "-17.5 %" and "17.5 % above" in said and "AdamW8bit" in said
        elif error < -score.TOLERANCE:
            assert "torchtune publishes compiled full fine-tuning" in said and quoted in said, (row["id"], quoted)
        elif row["spec"]["workload"].get("cross_entropy") != "chunked":
            assert "torchtune publishes" not in said, row["id"]
