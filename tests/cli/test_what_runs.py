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
