"""A Diffusers pipeline named as the model: ``estimate`` answers with its weights by component
(vramcalc/planning/pipeline.py); every other command refuses it in one line.

The pipeline is tests/hub_repos.py's: a transformer of two 32 x 32 fp32 weights (2,048 elements, 8,192 bytes)
and a VAE of one 8 x 4 x 3 x 3 fp32 weight (288 elements, 1,152 bytes), beside a scheduler with no weights and
an fp16 variant of the VAE that Diffusers does not load by default."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import hub_repos
import pytest
from typer.testing import CliRunner

from vramcalc.cli import app

runner = CliRunner()


@pytest.fixture
def pipeline(tmp_path: Path) -> Path:
    hub_repos.diffusers_repo(tmp_path / "pipe")
    return tmp_path / "pipe"


def _json(args: list[str]) -> dict[str, Any]:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def test_weights_by_component_as_stored(pipeline: Path) -> None:
    doc = _json(["estimate", "--model", str(pipeline)])
    assert doc["kind"] == "diffusers-pipeline" and doc["precision"] is None
    assert doc["components"] == [
        {"name": "transformer", "params": 2048, "stored_bytes": 8192, "bytes": 8192},
        {"name": "vae", "params": 288, "stored_bytes": 1152, "bytes": 1152},
    ]
    assert (doc["resident_bytes"], doc["offload_bytes"], doc["offload_component"]) == (9344, 8192, "transformer")
    assert doc["activations_estimated"] is False and "gpu" not in doc


def test_precision_casts_the_floating_weights_and_a_card_judges_the_weights(pipeline: Path) -> None:
    doc = _json(["estimate", "--model", str(pipeline), "--precision", "bf16", "--gpu", "rtx-4090"])
    # 2 bytes per element: 4,096 and 576
    assert [c["bytes"] for c in doc["components"]] == [4096, 576] and doc["resident_bytes"] == 4672
    assert doc["gpu"] == "NVIDIA GeForce RTX 4090"
    assert doc["resident_weights_fit"] is (4672 <= doc["available_bytes"]) is True


def test_the_text_says_what_is_not_estimated(pipeline: Path) -> None:
    result = runner.invoke(app, ["estimate", "--model", str(pipeline), "--gpu", "rtx-4090"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "a Diffusers pipeline, its weights as stored" in text
    assert "transformer" in text and "vae" in text and "scheduler" not in text
    assert "the weights fit all resident and fit one at a time" in text
    assert "the denoiser's and the VAE decoder's activations" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["estimate", "--batch-size", "2"], "--batch-size: a Diffusers pipeline's weights take only --precision"),
        (
            ["estimate", "--precision", "amp-bf16"],
            "--precision: amp-bf16: a pipeline's weights are cast to fp32, fp16 or bf16",
        ),
        (["max-batch", "--gpu", "h100-sxm"], "a Diffusers pipeline, weights transformer"),
    ],
)
def test_what_a_pipeline_cannot_answer_is_one_line(pipeline: Path, args: list[str], message: str) -> None:
    result = runner.invoke(app, [args[0], "--model", str(pipeline), *args[1:]])
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr
