"""Llama 4's text model from its config.json: MoE layout, dense layers, shared expert and counts by hand.

Reference: transformers' modeling_llama4.py (``Llama4TextDecoderLayer``: layer i is MoE when it is in
``config.moe_layers``, by default ``range(interleave_moe_layer_step - 1, layers, step)``; a MoE layer has
``Llama4TextExperts`` (gate_up_proj experts x hidden x 2 intermediate_size, down_proj experts x
intermediate_size x hidden), a bias-free ``Llama4Router`` (hidden -> experts) and a ``shared_expert`` MLP of
``intermediate_size``; a dense layer has a SwiGLU MLP of ``intermediate_size_mlp``; the q/k ``Llama4TextL2Norm``
has no weights). Config values: the text_config of meta-llama/Llama-4-Scout-17B-16E-Instruct and
-Maverick-17B-128E-Instruct; "17B active" is their model cards' figure.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.errors import SpecError
from vramcalc.spec.hf_import import model_from_config, read_config

runner = CliRunner()
CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf_configs"
SCOUT = CONFIGS / "llama-4-scout-17b-16e-instruct.json"
MAVERICK = CONFIGS / "llama-4-maverick-17b-128e-instruct.json"

# By hand, hidden 5120, 40 heads and 8 KV heads of 128: attention q 5120^2 + k, v 2 x 5120 x 1024 + o 5120^2
# = 62,914,560; two RMSNorms 10,240; one SwiGLU MLP of 8192: 3 x 5120 x 8192 = 125,829,120; of 16384:
# 251,658,240; embedding and untied LM head 2 x 202,048 x 5120 = 2,068,971,520; final norm 5,120.
ATTENTION_AND_NORMS = 62_914_560 + 10_240
EXPERT = 125_829_120
DENSE_MLP = 251_658_240
ENDS = 2_068_971_520 + 5_120


def estimated(path: Path) -> dict[str, Any]:
    args = ["estimate", "--hf-config", str(path), "--batch-size", "1", "--seq-len", "8", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_scout_every_layer_is_moe_by_hand() -> None:
    # 48 MoE layers: 16 experts + router 5120 x 16 + the shared expert
    layer = ATTENTION_AND_NORMS + 16 * EXPERT + 5_120 * 16 + EXPERT
    assert 48 * layer + ENDS == 107_769_861_120
    model, notes = model_from_config(read_config(SCOUT), "scout.json")
    assert (model["experts"], model["experts_per_token"], model["expert_ffn_size"]) == (16, 1, 8192)
    assert (model["shared_experts"], model["ffn_size"], model["max_position_embeddings"]) == (1, 16384, 10_485_760)
    assert "moe_layer_frequency" not in model and "first_dense_layers" not in model
    assert notes == ["attention_chunk_size 8192: chunked attention on the RoPE layers; KV cache counted in full"]
    result = estimated(SCOUT)
    assert result["params"] == 107_769_861_120
    # one routed expert of 16 per token: 48 x 15 experts idle
    assert result["active_params"] == 107_769_861_120 - 48 * 15 * EXPERT
    assert round(result["active_params"] / 1e9) == 17  # the card's "17B active"


def test_maverick_interleaves_dense_and_moe_layers_by_hand() -> None:
    # interleave_moe_layer_step 2: layers 1, 3, ..., 47 are MoE (128 experts), 0, 2, ..., 46 dense of 16384
    moe_layer = ATTENTION_AND_NORMS + 128 * EXPERT + 5_120 * 128 + EXPERT
    dense_layer = ATTENTION_AND_NORMS + DENSE_MLP
    assert 24 * (moe_layer + dense_layer) + ENDS == 400_711_848_960
    model, _ = model_from_config(read_config(MAVERICK), "maverick.json")
    assert (model["experts"], model["moe_layer_frequency"], model["ffn_size"]) == (128, 2, 16384)
    assert "first_dense_layers" not in model
    result = estimated(MAVERICK)
    assert result["params"] == 400_711_848_960
    assert result["active_params"] == 400_711_848_960 - 24 * 127 * EXPERT
    assert round(result["active_params"] / 1e9) == 17  # the card's "17B active"


def text_config(**changes: Any) -> dict[str, Any]:
    config = json.loads(MAVERICK.read_text(encoding="utf-8"))
    config.pop("moe_layers")
    return {**config, **changes}


@pytest.mark.parametrize(
    ("changes", "frequency", "first_dense"),
    [
        ({"interleave_moe_layer_step": 3}, 3, None),  # layers 2, 5, ..., 47
        ({"moe_layers": list(range(4, 48))}, None, 4),  # four dense layers first
        ({"moe_layers": list(range(5, 48, 2))}, 2, 5),  # 5, 7, ..., 47 after dense layers 0 to 4
        ({"moe_layers": [47]}, 48, None),  # the last layer only
        ({"moe_layers": [30]}, 31, None),  # one layer in the middle: every 31st (61 is past layer 47)
        ({"moe_layers": [*range(1, 48, 2), 60]}, 2, None),  # indices past the last layer build nothing
    ],
)
def test_moe_layer_layouts(changes: dict[str, Any], frequency: int | None, first_dense: int | None) -> None:
    model, _ = model_from_config(text_config(**changes), "llama4.json")
    assert (model.get("moe_layer_frequency"), model.get("first_dense_layers")) == (frequency, first_dense)


@pytest.mark.parametrize("layers", [[0, 1, 3], [5, 7, 9], [1, 2]])
def test_irregular_moe_layers_are_refused(layers: list[int]) -> None:
    with pytest.raises(SpecError, match=r"llama4\.json: moe_layers: .*only every n-th layer"):
        model_from_config(text_config(moe_layers=layers), "llama4.json")


def test_no_moe_layer_is_a_dense_model() -> None:
    model, _ = model_from_config(text_config(moe_layers=[]), "llama4.json")
    assert "experts" not in model and model["ffn_size"] == 16384


def test_null_chunk_size_has_no_note() -> None:
    _, notes = model_from_config(text_config(attention_chunk_size=None), "llama4.json")
    assert notes == []


def test_multimodal_wrapper_reads_the_text_model_and_the_vision_model() -> None:
    text = json.loads(SCOUT.read_text(encoding="utf-8"))
    wrapper = {"model_type": "llama4", "architectures": ["Llama4ForConditionalGeneration"], "text_config": text}
    model, notes = model_from_config(wrapper, "llama4.json")
    vision = model.pop("vision")
    assert model == model_from_config(text, "scout.json")[0]
    assert notes[0] == "llama4: vision_config not given: the default vision tower transformers builds for it"
    # Llama4VisionConfig()'s defaults: width 768, MLP 5632, 34 layers, 448-pixel images in 14-pixel patches
    # (1,024 and a class token), vision_output_dim 7680; by hand: unfold linear 3 x 14 x 14 x 768 = 451,584,
    # class 768, positions 1,025 x 768 = 787,200, pre/post LayerNorms 3,072; a layer 4 x (768^2 + 768)
    # + (768 x 5632 + 5632) + (5632 x 768 + 768) + 4 x 768 = 11,022,592, 34 of them 374,768,128; the pixel
    # shuffle MLP 5632 x 4096 + 4096 x 4096 = 39,845,888 (the tower: 415,856,640, as transformers 5.25.0's
    # Llama4VisionModel(Llama4VisionConfig()) counts on the meta device); the projector 7680 x 5120 = 39,321,600
    assert vision["params"] == 451_584 + 768 + 787_200 + 3_072 + 374_768_128 + 39_845_888 + 39_321_600
