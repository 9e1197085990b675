"""``vramcalc estimate --model NAME --gpu CARD``: what the model can run on the card, one row per way, each
row's spec written out by ``--emit-spec ROW`` and checked by the commands a user would run on it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from cli_json import run_json
from typer.testing import CliRunner

from vramcalc.cli import app

runner = CliRunner()
ROWS = ["serve-bf16", "serve-fp8", "serve-awq", "lora", "qlora", "full"]


@pytest.fixture(scope="module")
def table() -> dict:
    doc = run_json(["estimate", "--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--json"])
    assert "total_bytes" in doc and "components" in doc  # the estimate's own document, with the rows beside it
    return doc["what_runs"]


def test_one_row_per_way_in_order(table: dict) -> None:
    assert [row["row"] for row in table["rows"]] == ROWS
    assert table["gpu"]["gpu"] == "rtx-4090"


@pytest.mark.parametrize("row", ROWS)
def test_the_emitted_spec_gives_the_row_s_figures(tmp_path: Path, table: dict, row: str) -> None:
    emitted = runner.invoke(app, ["estimate", "--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--emit-spec", row])
    assert emitted.exit_code == 0, emitted.output
    doc = yaml.safe_load(emitted.stdout)
    assert doc["model"] == "llama-3.1-8b" and doc["workload"]["batch_size"] == 1
    path = tmp_path / f"{row}.yaml"
    path.write_text(emitted.stdout, encoding="utf-8")
    shown = next(r for r in table["rows"] if r["row"] == row)
    checked = run_json(["check", str(path), "--gpu", "rtx-4090", "--format", "json", "--max-gpus", "1"])[0]
    assert (checked["fits"], checked["needed_bytes"]) == (shown["fits"], shown["needed_bytes"])
    limit = run_json(["max-batch", str(path), "--gpu", "rtx-4090", "--json"])
    expected = shown["concurrent_sequences"] if row.startswith("serve") else shown["max_batch_size"]
    assert limit["max_batch_size"] == expected


def test_the_table_fits_80_columns_and_names_every_row() -> None:
    result = runner.invoke(app, ["estimate", "--model", "llama-3.1-8b", "--gpu", "rtx-4090"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    for row in ROWS:
        assert any(line.split()[:1] == [row] for line in lines), row


def test_emit_spec_needs_the_table_s_inputs() -> None:
    result = runner.invoke(app, ["estimate", "--model", "llama-3.1-8b", "--emit-spec", "lora"])
    assert result.exit_code == 2 and "--emit-spec: give --model NAME and --gpu CARD alone" in result.output
    unknown = runner.invoke(app, ["estimate", "--model", "llama-3.1-8b", "--gpu", "t4", "--emit-spec", "serve"])
    assert unknown.exit_code == 2 and "--emit-spec: 'serve' is not a row" in unknown.output


def test_a_workload_flag_asks_for_one_estimate_instead() -> None:
    doc = run_json(["estimate", "--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--mode", "inference", "--json"])
    assert "what_runs" not in doc and "total_bytes" in doc
    table = runner.invoke(app, ["estimate", "--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--mode", "inference"])
    assert "serve-fp8" not in table.stdout and table.exit_code == 0


def test_the_table_exits_0_like_every_estimate() -> None:
    result = runner.invoke(app, ["estimate", "--model", "llama-3.1-405b", "--gpu", "t4"])
    assert result.exit_code == 0 and "does not fit" in result.stdout


def test_runtime_names_what_serves_the_serving_rows(tmp_path: Path) -> None:
    """--runtime hf: the serving rows are transformers' generate, each the sequences max-batch finds for its
    spec (no vLLM pool), and the emitted spec names the runtime."""
    args = ["estimate", "--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--runtime", "hf"]
    rows = run_json([*args, "--json"])["what_runs"]["rows"]
    emitted = runner.invoke(app, [*args, "--emit-spec", "serve-bf16"])
    doc = yaml.safe_load(emitted.stdout)
    assert doc["workload"]["runtime"] == "hf"
    path = tmp_path / "hf.yaml"
    path.write_text(emitted.stdout, encoding="utf-8")
    limit = run_json(["max-batch", str(path), "--gpu", "rtx-4090", "--json"])
    assert limit["max_batch_size"] == rows[0]["concurrent_sequences"] >= 1


# -- a spec file that names a model and no workload ------------------------------------------------------


def test_a_spec_without_a_workload_gives_the_same_rows(tmp_path: Path, table: dict) -> None:
    """The rows of `--model llama-3.1-8b --gpu rtx-4090`, from a spec naming the model and its card only."""
    path = tmp_path / "what.yaml"
    path.write_text("model: llama-3.1-8b\ntarget: {gpu: rtx-4090}\n", encoding="utf-8")
    doc = run_json(["estimate", str(path), "--json"])
    assert doc["what_runs"]["rows"] == table["rows"]
    emitted = runner.invoke(app, ["estimate", str(path), "--emit-spec", "qlora"])
    from_flags = runner.invoke(
        app, ["estimate", "--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--emit-spec", "qlora"]
    )
    assert emitted.exit_code == 0 and emitted.stdout == from_flags.stdout


def test_a_spec_without_a_workload_or_a_card_asks_for_one(tmp_path: Path) -> None:
    path = tmp_path / "what.yaml"
    path.write_text("model: llama-3.1-8b\n", encoding="utf-8")
    result = runner.invoke(app, ["estimate", str(path)])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {path}: workload: not given; name a card (--gpu, or target.gpu")


def test_a_spec_without_a_workload_may_give_the_model_by_its_keys(tmp_path: Path) -> None:
    """The rows' specs carry the keys; each gives its row's figure through check."""
    model = {"architecture": "decoder", "layers": 2, "hidden_size": 256, "heads": 4, "vocab_size": 1000,
             "max_position_embeddings": 2048}  # fmt: skip
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({"name": "tiny", "model": model}), encoding="utf-8")
    rows = run_json(["estimate", str(path), "--gpu", "t4", "--json"])["what_runs"]["rows"]
    assert [row["row"] for row in rows][1:] == ROWS[1:]  # the first serves at the keys' dtype (fp32 here)
    emitted = runner.invoke(app, ["estimate", str(path), "--gpu", "t4", "--emit-spec", "lora"])
    doc = yaml.safe_load(emitted.stdout)
    assert doc["model"] == model and doc["name"] == "tiny-lora"
    row_spec = tmp_path / "row.yaml"
    row_spec.write_text(emitted.stdout, encoding="utf-8")
    checked = run_json(["check", str(row_spec), "--gpu", "t4", "--format", "json"])[0]
    lora = next(row for row in rows if row["row"] == "lora")
    assert checked["needed_bytes"] == lora["needed_bytes"]
