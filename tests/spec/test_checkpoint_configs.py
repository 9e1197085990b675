"""Checkpoint folders whose files or config say what vramcalc cannot take: one ``error:`` line naming the
folder and the field (with ``--json``, the stage of a model that could not be read), or an estimate
whose every figure is one the files and config support."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
from checkpoint_files import LLAMA, llama_tensors, write_checkpoint
from typer.testing import CliRunner

from vramcalc.cli import app

runner = CliRunner()
ESTIMATE = ["estimate", "--mode", "inference", "--seq-len", "64", "--json"]


def _errors(result: Any) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error: ")]


def test_weights_files_without_a_tensor_are_one_error_with_its_stage(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, LLAMA, {})
    raw = b"{}"
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)  # a valid, empty header
    result = runner.invoke(app, [*ESTIMATE, "--model", str(tmp_path)])
    assert result.exit_code == 2
    [line] = _errors(result)
    assert str(tmp_path) in line and "hold no weights" in line
    assert json.loads(result.stdout) == {"error": {"message": line.removeprefix("error: "), "stage": "header"}}


def test_a_moe_config_over_files_of_fewer_weights_has_a_positive_active_count(tmp_path: Path) -> None:
    # A Mixtral config (8 experts of which 2 are active) over the files of a small dense model: the files
    # hold fewer parameters than the 6 unused experts alone. The active count is the modelled share of the
    # files' count, not the files' count less the modelled unused experts (which is negative).
    config = {**LLAMA, "model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2}
    write_checkpoint(tmp_path, config, llama_tensors(LLAMA))
    result = runner.invoke(app, [*ESTIMATE, "--model", str(tmp_path)])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert 0 < doc["active_params"] < doc["params"] == 106_816


def test_a_modelled_family_with_a_field_out_of_range_is_that_fields_error(tmp_path: Path) -> None:
    # Not a first-order estimate of the standard fields: Llama is modelled, and its importer names the field.
    write_checkpoint(tmp_path, {**LLAMA, "hidden_size": 3_291_381_217}, llama_tensors(LLAMA))
    for args in ([*ESTIMATE, "--model", str(tmp_path)], ["import", str(tmp_path)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2
        [line] = _errors(result)
        assert str(tmp_path) in line and "hidden_size" in line and "out of range" in line


def test_an_unmodelled_architecture_with_a_field_out_of_range_is_that_fields_error(tmp_path: Path) -> None:
    config = {"model_type": "fancy_net", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
              "n_positions": 10**12}  # fmt: skip
    write_checkpoint(tmp_path, config, {"w": np.zeros((64, 64), np.float16)})
    result = runner.invoke(app, ["import", str(tmp_path)])
    assert result.exit_code == 2
    [line] = _errors(result)
    assert str(tmp_path) in line and "n_positions: 1,000,000,000,000 is out of range" in line


def test_an_unmodelled_model_type_is_shown_printable_and_bounded(tmp_path: Path) -> None:
    config = {"model_type": "fancy\x00net\x1b[31m" + "x" * 500, "hidden_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "vocab_size": 64}  # fmt: skip
    write_checkpoint(tmp_path, config, {"w": np.zeros((64, 64), np.float16)})
    result = runner.invoke(app, ["import", str(tmp_path)])
    assert result.exit_code == 0, result.stderr
    comments = [line for line in result.stdout.splitlines() if line.startswith("#")]
    assert all(line.isprintable() and len(line) < 400 for line in comments)
    assert "fancy\\x00net" in comments[0]
