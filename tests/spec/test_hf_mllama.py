"""Llama 3.2 Vision (``model_type: mllama``): its tower, projector and cross-attention layers counted from a
config, and the KV cache of its two kinds of layers.

References: transformers 5.25.0's ``MllamaForConditionalGeneration`` built on the meta device from the configs
in tests/data/multimodal_configs.json (10,670,220,835 parameters for the 11B model, equal to the published total
of meta-llama/Llama-3.2-11B-Vision-Instruct's files; 88,593,355,323 for the 90B), and hand counts of the modules
of ``models/mllama/modeling_mllama.py`` written out below.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.spec.hf_import import model_from_config

runner = CliRunner()
MULTIMODAL = json.loads((Path(__file__).resolve().parents[1] / "data" / "multimodal_configs.json").read_text("utf-8"))


def _config(repo: str) -> dict[str, Any]:
    return next(case for case in MULTIMODAL["models"] if case["repo"] == repo)["config"]


ELEVEN_B = "meta-llama/Llama-3.2-11B-Vision"


def test_the_11b_tower_projector_and_image_parameters_by_hand() -> None:
    # MllamaVisionModel, width D = 1280, MLP 5120, 560-pixel tiles in 14-pixel patches: 40 x 40 + 1 = 1,601
    # positions, 4 tiles, 8 aspect ratios (+1 for none = 9 ids):
    #   patch_embedding 3 x 14 x 14 x 1280 = 752,640 (no bias); class_embedding 1,280
    #   gated_positional_embedding: gate 1 + embedding 1,601 x 1280 = 2,049,280
    #                               + tile_embedding 9 x (4 x 1,601 x 1280) = 73,774,080
    #   pre/post_tile_positional_embedding: 2 x (9 x 4 x 1280 + 1 gate) = 92,162
    #   layernorm_pre/post 4 x 1280 = 5,120
    #   a block: q/k/v/o 4 x 1280^2 = 6,553,600 (no bias); fc1 1280 x 5120 + 5120 = 6,558,720;
    #            fc2 5120 x 1280 + 1280 = 6,554,880; two LayerNorms 5,120 -> 19,672,320
    #   32 local blocks 629,514,240; 8 global blocks + 2 gates each 157,378,576
    tower = 752_640 + 1_280 + 1 + 2_049_280 + 73_774_080 + 92_162 + 5_120 + 629_514_240 + 157_378_576
    assert tower == 863_567_379  # transformers' meta count of vision_model
    projector = 7680 * 4096 + 4096  # multi_modal_projector, biased
    # MllamaTextModel: 8 embedding rows beyond vocab_size (8 x 4096); 8 cross-attention layers each with a q and
    # a k RMSNorm of head_dim 128 and two gates
    language_images = 8 * 4096 + 8 * (2 * 128 + 2)
    model, notes = model_from_config(_config(ELEVEN_B), "config.json")
    assert model["vision"] == {
        "params": tower + projector + language_images,
        "hidden_size": 1280,
        "layers": 40,
        "image_tokens": 1,
        "encoder": "Mllama vision",
        "cross_attention_layers": 8,
        "cross_attention_tokens": 4 * 1_601,
        "image_rule": {"rule": "fixed"},  # tiles padded to max_num_tiles: any size is 6,404 states
    }
    assert model["layers"] == 40 and model["tie_embeddings"] is False
    assert notes == []


def _estimate(*args: str) -> Any:
    result = runner.invoke(app, ["estimate", "--hf-config", str(_written(ELEVEN_B)), "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


_WRITTEN: dict[str, Path] = {}


def _written(repo: str) -> Path:
    if repo not in _WRITTEN:
        import tempfile

        path = Path(tempfile.mkdtemp()) / "config.json"
        path.write_text(json.dumps(_config(repo)), encoding="utf-8")
        _WRITTEN[repo] = path
    return _WRITTEN[repo]


def test_the_kv_cache_holds_the_text_in_self_attention_layers_and_the_images_in_the_others() -> None:
    # 32 self-attention layers cache the text: 2 (K, V) x 32 x 8 heads x 128 x 2 bytes = 131,072 B/token, for
    # 1,000 prompt tokens + 2 <|image|> tokens + 24 new ones = 1,026 tokens;
    # 8 cross-attention layers cache 2 images x 4 tiles x 1,601 states: 2 x 8 x 8 x 128 x 2 = 32,768 B each
    out = _estimate(
        "--mode",
        "inference",
        "--prompt-len",
        "1000",
        "--max-new-tokens",
        "24",
        "--images",
        "2",
        "--runtime",
        "hf",
        "--batch-size",
        "3",
    )
    assert out["kv_cache_bytes_per_token"] == 131_072
    assert out["context_tokens"] == 1_026
    assert out["kv_cache_bytes"] == 3 * (1_026 * 131_072 + 2 * 6_404 * 32_768)


def test_without_images_the_cross_attention_layers_cache_nothing() -> None:
    out = _estimate("--mode", "inference", "--prompt-len", "1000", "--max-new-tokens", "24", "--runtime", "hf")
    assert out["kv_cache_bytes"] == 1_024 * 131_072


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mode", "train", "--seq-len", "512"], "workload.mode: training a model with cross-attention layers"),
        (
            ["--mode", "inference", "--prompt-len", "100", "--max-new-tokens", "8"],
            "workload.runtime: vllm runs no model with cross-attention",
        ),
        (
            ["--mode", "inference", "--prompt-len", "100", "--max-new-tokens", "8", "--runtime", "litgpt"],
            "workload.runtime: litgpt is not modelled for a model with cross-attention layers",
        ),
    ],
)
def test_what_is_not_modelled_is_one_line(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["estimate", "--hf-config", str(_written(ELEVEN_B)), *args])
    assert result.exit_code == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_cross_attention_layers_past_the_last_layer_or_repeated_name_none() -> None:
    # MllamaTextModel (modeling_mllama.py) builds layer i as a cross-attention layer when
    # ``i in cross_attention_layers``: index 40 of a 40-layer model and a repeated 3 add no layer
    config = json.loads(json.dumps(_config(ELEVEN_B)))
    config["text_config"]["cross_attention_layers"] = [3]
    one, _ = model_from_config(config, "config.json")
    config["text_config"]["cross_attention_layers"] = [3, 3, 40]
    same, _ = model_from_config(config, "config.json")
    assert same == one and one["vision"]["cross_attention_layers"] == 1


def test_bad_cross_attention_layers_name_the_field() -> None:
    config = json.loads(json.dumps(_config(ELEVEN_B)))
    config["text_config"]["cross_attention_layers"] = [3, "8"]
    with pytest.raises(Exception, match="text_config: cross_attention_layers: expected a list of layer indices"):
        model_from_config(config, "config.json")
