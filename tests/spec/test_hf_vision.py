"""The vision tower and projector of multimodal configs (vramcalc/spec/hf_vision.py), the ``model.vision``
section and ``workload.images``.

References: the published totals of the Gemma 3 checkpoints (the Hugging Face Hub's safetensors metadata on
the model pages of google/gemma-3-4b-it, -12b-it and -27b-it: 4,300,079,472, 12,187,325,040 and
27,432,406,640 parameters), transformers 5.25.0's own classes built on the meta device
(tests/data/gemma3-tiny-multimodal.json holds the state-dict shapes and the count), and hand
counts of the modules in transformers' modeling files, written out below.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from checkpoint_files import write_checkpoint
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.core.params import count_params
from vramcalc.errors import SpecError
from vramcalc.families.resolve import resolve_model
from vramcalc.spec.hf_import import model_from_config
from vramcalc.spec.load import parse_spec
from vramcalc.spec.presets import find_named

runner = CliRunner()
TINY = json.loads((Path(__file__).resolve().parents[1] / "data" / "gemma3-tiny-multimodal.json").read_text("utf-8"))
WORKLOAD = {"mode": "inference", "batch_size": 1, "seq_len": 64, "precision": "bf16"}


def _count(model: dict[str, Any]) -> int:
    spec = parse_spec({"model": model, "workload": WORKLOAD})
    return count_params(resolve_model(spec.model, spec.workload)[0])


@pytest.mark.parametrize(
    ("name", "published"),
    [("gemma-3-4b-it", 4_300_079_472), ("gemma-3-12b-it", 12_187_325_040), ("gemma-3-27b-it", 27_432_406_640)],
)
def test_the_catalog_gemma3_models_are_their_published_totals(name: str, published: int) -> None:
    found = find_named(name)
    assert found is not None
    model, _ = found[0].model_mapping()
    assert _count(model) == published


def test_gemma3_4b_tower_by_hand() -> None:
    # SigLIP-So400m as Gemma 3 configures it: width 1152, MLP 4304, 27 layers, 896-pixel images in 14-pixel
    # patches (64 x 64 = 4,096 positions), no pooling head:
    #   patch convolution 3 x 14 x 14 x 1152 + 1152 = 678,528; positions 4,096 x 1152 = 4,718,592
    #   per layer: q/k/v/out 4 x (1152^2 + 1152) = 5,313,024; fc1 1152 x 4304 + 4304 = 4,962,512;
    #              fc2 4304 x 1152 + 1152 = 4,959,360; two LayerNorms 4 x 1152 = 4,608 -> 15,239,504
    #   27 layers 411,466,608; post LayerNorm 2,304 -> tower 416,866,032
    #   projector: RMSNorm 1152 + projection 1152 x 2560 = 2,950,272 -> 419,816,304
    found = find_named("gemma-3-4b")
    assert found is not None
    model, _ = found[0].model_mapping()
    assert model["vision"] == {
        "params": 419_816_304,
        "hidden_size": 1152,
        "layers": 27,
        "image_tokens": 256,
        "encoder": "SigLIP",
        "image_rule": {"rule": "fixed"},
    }


def test_a_tiny_gemma3_is_transformers_count() -> None:
    model, notes = model_from_config(TINY["config"], "tiny.json")
    assert _count(model) == TINY["params"] == 130_144
    # by hand: conv 3 x 14 x 14 x 32 + 32 = 18,848; 16 positions x 32 = 512; a layer 4 x (32^2 + 32)
    # + (32 x 48 + 48) + (48 x 32 + 32) + 4 x 32 = 7,504, two of them; post norm 64; projector 32 + 32 x 64
    assert model["vision"]["params"] == 18_848 + 512 + 2 * 7_504 + 64 + 32 + 32 * 64 == 36_512
    assert not any("not counted" in note for note in notes)


def test_a_missing_vision_config_is_transformers_default_tower() -> None:
    # SiglipVisionConfig(): width 768, MLP 3072, 12 layers, 224-pixel images in 16-pixel patches (196),
    # vision_use_head true. conv 3 x 16 x 16 x 768 + 768 = 590,592; positions 150,528; a layer
    # 4 x (768^2 + 768) + (768 x 3072 + 3072) + (3072 x 768 + 768) + 4 x 768 = 7,087,872, twelve of them
    # 85,054,464; post norm 1,536; head: probe 768, in_proj 768 x 2304 + 2304, out_proj 768^2 + 768,
    # LayerNorm 1,536, MLP 4,722,432 -> 7,087,104; tower 92,884,224. Projector: 768 + 768 x 64 = 49,920.
    config = {**TINY["config"], "vision_config": None}
    model, notes = model_from_config(config, "tiny.json")
    assert model["vision"]["params"] == 92_884_224 + 49_920
    assert any("vision_config not given" in note for note in notes)


@pytest.mark.parametrize(
    ("vision_config", "message"),
    [
        ("siglip", "tiny.json: vision_config: expected the vision tower's config (a JSON object)"),
        ({"hidden_size": "wide"}, "tiny.json: vision_config: hidden_size: expected a whole number, got 'wide'"),
        ({"patch_size": 30, "image_size": 28}, "tiny.json: vision_config: patch_size: 30 is larger than image_size 28"),
        ({"vision_use_head": "no"}, "tiny.json: vision_config: vision_use_head: expected true or false, got 'no'"),
    ],
)
def test_a_bad_vision_config_is_one_line_naming_the_field(vision_config: object, message: str) -> None:
    with pytest.raises(SpecError) as raised:
        model_from_config({**TINY["config"], "vision_config": vision_config}, "tiny.json")
    assert str(raised.value) == message


def _files(tmp_path: Path) -> Path:
    tensors = {name: np.zeros(shape, np.float16) for name, shape in TINY["state_dict"].items()}
    write_checkpoint(tmp_path / "g3", TINY["config"], tensors)
    return tmp_path / "g3"


def _json(args: list[str]) -> dict[str, Any]:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def test_a_multimodal_checkpoint_is_modelled_whole_and_trains(tmp_path: Path) -> None:
    folder = _files(tmp_path)
    doc = _json(["estimate", "--model", str(folder), "--seq-len", "64", "--mode", "train", "--json"])
    assert doc["params"] == TINY["params"]
    assert any("the modelled layers hold the files' 130,144 parameters" in note for note in doc["assumptions"])


def test_full_fine_tuning_trains_the_tower_and_an_adapter_freezes_it() -> None:
    model, _ = model_from_config(TINY["config"], "tiny.json")
    text = {key: value for key, value in model.items() if key != "vision"}
    train = {"mode": "train", "batch_size": 1, "seq_len": 64, "precision": "fp32", "optimizer": "adamw"}
    from vramcalc.api import estimate

    with_tower, without = (estimate(parse_spec({"model": m, "workload": train})) for m in (model, text))
    # fp32 weights, gradients and two Adam moments: 4 bytes each per tower parameter; each listed tower tensor
    # (35 matrices of 32 x 32, 21 vectors of 32) is one allocation, rounded up to 512 bytes
    for component, per_param in (("parameters", 4), ("gradients", 4), ("optimizer_states", 8)):
        added = with_tower.component_peaks[component] - without.component_peaks[component]
        assert 36_512 * per_param <= added < 36_512 * per_param + 56 * 512 * per_param // 4, component
    lora = {**train, "adapter": {"rank": 4, "targets": ["q_proj", "v_proj"]}}
    with_tower, without = (estimate(parse_spec({"model": m, "workload": lora})) for m in (model, text))
    assert with_tower.components["parameters"] - without.components["parameters"] == 36_512 * 4
    assert with_tower.component_peaks["gradients"] == without.component_peaks["gradients"]


def test_images_join_the_sequence_and_are_recorded() -> None:
    found = find_named("gemma-3-4b")
    assert found is not None
    model, _ = found[0].model_mapping()
    workload = {"mode": "inference", "batch_size": 1, "prompt_len": 1000, "max_new_tokens": 200, "images": 2}
    spec = parse_spec({"model": model, "workload": workload})
    # two images of 256 tokens each (mm_tokens_per_image)
    assert (spec.workload.seq_len, spec.workload.prompt_len, spec.workload.image_tokens) == (1712, 1512, 512)
    assert spec.workload.images is None
    again = parse_spec({"model": model, "workload": spec.workload.model_dump(exclude_none=True, mode="json")})
    assert again.workload.seq_len == 1712  # written out and read again, the tokens are not added twice


@pytest.mark.parametrize(
    ("model", "workload", "message"),
    [
        ({"layers": 2, "hidden_size": 64, "heads": 2, "vocab_size": 100}, {"images": 1},
         "workload.images: the model has no vision tower (model.vision)"),
        ("tiny", {"images": 1, "mode": "train"}, "workload.images: training on images is not modelled"),
        ("tiny", {"image_tokens": 65}, "workload.image_tokens: 65 is more than seq_len 64"),
    ],
)  # fmt: skip
def test_image_keys_that_cannot_hold_are_refused(model: object, workload: dict[str, Any], message: str) -> None:
    if model == "tiny":
        model = model_from_config(TINY["config"], "tiny.json")[0]
    with pytest.raises(SpecError) as raised:
        parse_spec({"model": model, "workload": {**WORKLOAD, **workload}}, "s.yaml")
    assert message in str(raised.value)


def test_the_images_flag_adds_each_images_tokens_to_the_context() -> None:
    base = ["estimate", "--model", "gemma-3-4b", "--max-new-tokens", "200", "--json"]
    with_images = _json([*base, "--prompt-len", "1000", "--images", "2"])
    # Gemma 3: 256 tokens an image (mm_tokens_per_image): the same as a 1,512-token text prompt
    as_text = _json([*base, "--prompt-len", "1512"])
    assert with_images["context_tokens"] == as_text["context_tokens"] == 1712
    assert with_images["kv_cache_bytes"] == as_text["kv_cache_bytes"]
    assert with_images["peak_allocated_bytes"] == as_text["peak_allocated_bytes"]


@pytest.mark.parametrize("args", [["--model", "llama-3.1-8b"], ["configs/llama-3-8b-inference.yaml"]])
def test_the_images_flag_on_a_model_without_a_tower_is_one_error(args: list[str]) -> None:
    result = runner.invoke(app, ["estimate", *args, "--prompt-len", "100", "--max-new-tokens", "10", "--images", "1"])
    assert result.exit_code == 2
    assert result.stderr.strip().endswith("workload.images: the model has no vision tower (model.vision)")
    assert len(result.stderr.strip().splitlines()) == 1


MULTIMODAL = json.loads((Path(__file__).resolve().parents[1] / "data" / "multimodal_configs.json").read_text("utf-8"))


@pytest.mark.parametrize("case", MULTIMODAL["models"], ids=lambda case: case["repo"])
def test_multimodal_configs_count_as_their_checkpoints(case: dict[str, Any]) -> None:
    """Gemma 3, Llama 4, LLaVA 1.5 and NeXT, Qwen2-VL, Qwen2.5-VL, Mistral Small 3.1 and Llama 3.2 Vision: the
    language model,
    the vision tower and the projector, against transformers 5.25's classes on the meta device and the
    checkpoints' published totals (tests/data/multimodal_configs.json names the sources)."""
    model, _ = model_from_config(case["config"], case["repo"])
    # mllama: the language model's image parameters (embedding rows, cross-attention norms and gates) are
    # counted with the tower
    assert model["vision"]["params"] == case["vision_and_projector"] + case.get("image_params_in_language_model", 0)
    assert _count(model) == case["checkpoint_params"]
    if case["published_params"] is not None:
        assert case["checkpoint_params"] == case["published_params"]


def test_mistral3_keeps_its_separate_lm_head() -> None:
    # transformers 5.25's Mistral3Config ties the LM head when the config does not say (its meta count is
    # 23,340,272,640); the checkpoint stores lm_head.weight, 131,072 x 5,120 = 671,088,640 more parameters
    case = next(case for case in MULTIMODAL["models"] if case["repo"].startswith("mistralai/"))
    assert case["checkpoint_params"] - case["meta_params"] == 131_072 * 5_120
    model, _ = model_from_config(case["config"], case["repo"])
    assert model["tie_embeddings"] is False


@pytest.mark.parametrize(
    ("repo", "tokens"),
    [
        ("google/gemma-3-4b-it", 256),  # mm_tokens_per_image
        ("meta-llama/Llama-4-Scout-17B-16E-Instruct", 144),  # (336 / 14)^2 x 0.5^2 per tile
        ("llava-hf/llava-1.5-7b-hf", 576),  # (336 / 14)^2
        ("llava-hf/llava-v1.6-mistral-7b-hf", 2928),  # 576 + 48^2 + 48 newlines, a 672 x 672 image
        ("Qwen/Qwen2-VL-7B-Instruct", 1369),  # 1,024 px resized to 1,036 = 37 x 28
        ("mistralai/Mistral-Small-3.1-24B-Instruct-2503", 3080),  # 55 rows of 55 cells and a break each: 55 x 56
    ],
)
def test_image_tokens_by_hand(repo: str, tokens: int) -> None:
    case = next(case for case in MULTIMODAL["models"] if case["repo"] == repo)
    assert model_from_config(case["config"], repo)[0]["vision"]["image_tokens"] == tokens


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"vision_feature_layer": "last"},
            "vision_feature_layer: expected a layer index or a list of them, got 'last'",
        ),
        ({"vision_config": {"mlp_ratio": -1}}, "vision_config: mlp_ratio: expected a number from 0 to 1,000, got -1"),
        ({"text_config": [1]}, "text_config: expected the text model's config (a JSON object)"),
    ],
)
def test_bad_multimodal_fields_are_one_line(change: dict[str, Any], message: str) -> None:
    repo = "Qwen/Qwen2-VL-7B-Instruct" if "vision_config" in change else "llava-hf/llava-1.5-7b-hf"
    case = next(case for case in MULTIMODAL["models"] if case["repo"] == repo)
    with pytest.raises(SpecError) as raised:
        model_from_config({**case["config"], **change}, "c.json")
    assert str(raised.value) == f"c.json: {message}"


def test_a_list_of_feature_layers_widens_the_projector() -> None:
    # LlavaMultiModalProjector's linear_1 takes the concatenation: five layers of 1,024 add 4 x 1024 x 4096
    case = next(case for case in MULTIMODAL["models"] if case["repo"] == "llava-hf/llava-1.5-7b-hf")
    one, _ = model_from_config(case["config"], "c.json")
    five, _ = model_from_config({**case["config"], "vision_feature_layer": [-2, -5, -8, -11, 6]}, "c.json")
    assert five["vision"]["params"] - one["vision"]["params"] == 4 * 1024 * 4096


def test_a_bad_select_strategy_names_the_file_and_field() -> None:
    case = next(case for case in MULTIMODAL["models"] if case["repo"] == "llava-hf/llava-1.5-7b-hf")
    with pytest.raises(SpecError) as raised:
        model_from_config({**case["config"], "vision_feature_select_strategy": 3}, "c.json")
    assert str(raised.value) == "c.json: vision_feature_select_strategy: expected a string, got 3"
    full, _ = model_from_config({**case["config"], "vision_feature_select_strategy": "full"}, "c.json")
    assert full["vision"]["image_tokens"] == 577  # the class token's too


def test_a_llava_text_config_without_kv_heads_attends_with_every_head() -> None:
    # LlamaConfig's num_key_value_heads defaults to num_attention_heads (None in the class): 40 heads, 40 KV heads
    case = next(case for case in MULTIMODAL["models"] if case["repo"] == "llava-hf/llava-1.5-13b-hf")
    text = {key: value for key, value in case["config"]["text_config"].items() if key != "num_key_value_heads"}
    model, _ = model_from_config({**case["config"], "text_config": text}, "c.json")
    assert model["heads"] == 40 and model.get("kv_heads", 40) == 40
    assert _count(model) == case["checkpoint_params"]


def test_a_narrow_tower_is_listed_by_counts_not_one_entry_per_matrix() -> None:
    """A tower of width 1 fills tens of millions of 1 x 1 "matrices": the load order and the tensor list hold
    them as counts (a hostile vision_config once made the load order a 60-million-entry tuple)."""
    from vramcalc.core.params import load_order, param_tensors

    case = next(case for case in MULTIMODAL["models"] if "Maverick" in case["repo"])
    config = json.loads(json.dumps(case["config"]))
    config["vision_config"]["hidden_size"] = 1
    model, _ = model_from_config(config, "c.json")
    spec = parse_spec({"model": model, "workload": WORKLOAD})
    shape = resolve_model(spec.model, spec.workload)[0]
    groups = load_order(shape)
    assert len(groups) < 100 and all(len(tensors) < 100_000 for tensors, _ in groups)
    assert sum(sum(tensors) * count for tensors, count in groups) == count_params(shape)
    assert sum(n * r * c for n, r, c in param_tensors(shape)) == count_params(shape)


def test_a_spec_built_by_the_caller_counts_its_images_as_a_file_does() -> None:
    from vramcalc.api import estimate
    from vramcalc.spec.models import Spec

    found = find_named("gemma-3-4b")
    assert found is not None
    model, _ = found[0].model_mapping()
    workload = {"mode": "inference", "batch_size": 1, "prompt_len": 1000, "max_new_tokens": 10, "images": 1}
    document = {"model": model, "workload": workload}
    built, parsed = estimate(Spec.model_validate(document)), estimate(document)
    assert built.context_tokens == parsed.context_tokens == 1266  # 1,010 text tokens and 256 of the image
    assert built.peak_allocated_bytes == parsed.peak_allocated_bytes
