"""Every field of every configuration class the importer claims is read, known to change no memory, or
refused (vramcalc/spec/hf_fields.py); and the fields that change a parameter count are counted exactly or
refused with the field named.

References, all independent of vramcalc:

* tests/data/hf_config_defaults.json: each claimed type's default configuration as transformers 5.25 writes
  it (``AutoConfig.for_model(model_type).to_dict()``, by ``benchmarks/hf_config_fields.py``);
* tests/data/hf_configs/fields/: small transformers-written configs that each set one such field (the same
  script), with the parameter counts of their ``architectures[0]`` class built on the meta device in
  ``meta_counts.json`` (``benchmarks/hf_import_exact.py --configs tests/data/hf_configs/fields --record``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.errors import SpecError
from vramcalc.spec import hf_fields
from vramcalc.spec.hf_import import FAMILIES, TEXT_CONFIGS, model_from_config
from vramcalc.spec.hf_reader import Config

DATA = Path(__file__).resolve().parents[1] / "data"
DEFAULTS: dict[str, Config] = json.loads((DATA / "hf_config_defaults.json").read_text(encoding="utf-8"))["defaults"]
FIELD_CASES = DATA / "hf_configs" / "fields"
COUNTS: dict[str, int] = json.loads((FIELD_CASES / "meta_counts.json").read_text(encoding="utf-8"))["counts"]
CLAIMED = sorted([*FAMILIES, *TEXT_CONFIGS])


def test_the_defaults_cover_exactly_the_claimed_types() -> None:
    # a type added to the importer without its class's fields classified fails here
    assert sorted(DEFAULTS) == CLAIMED == sorted(hf_fields.FIELDS)


@pytest.mark.parametrize("model_type", CLAIMED)
def test_every_field_of_the_class_has_one_kind(model_type: str) -> None:
    fields = hf_fields.FIELDS[model_type]
    assert not fields.read & fields.quiet
    assert not (fields.read | fields.quiet) & set(fields.refused)
    unclassified = sorted(name for name in DEFAULTS[model_type] if hf_fields.kind_of(model_type, name) is None)
    assert unclassified == [], f"{model_type}: fields neither read, quiet nor refused: {unclassified}"


def _configs() -> list[tuple[str, str, Config]]:
    """(file, model_type, config) of every stored config of a claimed type, a multimodal text_config too."""
    found = []
    for path in sorted((DATA / "hf_configs").rglob("*.json")):
        config = json.loads(path.read_text(encoding="utf-8"))
        model_type = config.get("model_type")
        if model_type in hf_fields.FIELDS:
            found.append((path.name, model_type, config))
        if TEXT_CONFIGS.get(model_type) in hf_fields.FIELDS:  # Mllama's text model is read with its vision
            found.append((path.name, TEXT_CONFIGS[model_type], config["text_config"]))
    return found


def test_every_field_of_the_stored_configs_has_a_kind() -> None:
    # the Hub's configs (some written by transformers 4: rope_theta, torch_dtype, ...) are classified too
    configs = _configs()
    assert len(configs) >= 100
    unclassified = {(name, key) for name, kind, config in configs for key in config if not hf_fields.kind_of(kind, key)}
    assert unclassified == set()


def test_refused_defaults_are_transformers_defaults() -> None:
    # a refusal at a value the class itself writes would refuse every config of the type
    checked = 0
    for model_type, fields in hf_fields.FIELDS.items():
        for name, rule in fields.refused.items():
            if name in DEFAULTS[model_type]:
                assert DEFAULTS[model_type][name] in (rule.default, None), (model_type, name)
                checked += 1
    # add_cross_attention in GPT-2's, GPTBigCode's, BERT's, RoBERTa's and XLM-R's defaults; chunk_size_feed_forward
    # (refused where BERT-style layers read it) in BERT's, RoBERTa's, XLM-R's and DistilBERT's
    assert checked >= 9


def _other(value: Any) -> Any:
    """A value other than a refused field's default (the kind of value the field takes)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 3
    if isinstance(value, str):
        return "relative_key"
    if value is None:
        return 8
    return {"0": [1]}


REFUSALS = [(t, name) for t in CLAIMED for name in hf_fields.FIELDS[t].refused]


@pytest.mark.parametrize(("model_type", "name"), REFUSALS)
def test_a_refused_field_off_its_default_stops_the_import(model_type: str, name: str) -> None:
    default = hf_fields.FIELDS[model_type].refused[name].default
    config = DEFAULTS[model_type] | {name: _other(default)}
    with pytest.raises(SpecError, match=rf"^cfg\.json: {name}: .* is not modelled \("):
        model_from_config(config, "cfg.json")
    model_from_config(DEFAULTS[model_type] | {name: default}, "cfg.json")  # at the default: imported
    model_from_config(DEFAULTS[model_type] | {name: None}, "cfg.json")  # null: absent


#: The field each case of tests/data/hf_configs/fields sets, when vramcalc refuses it (the others are counted).
REFUSED_CASES = {
    # BertLayer/GPT2Block build a cross-attention block (q, k, v, o and a LayerNorm) per layer
    "bert-decoder-cross-attention.json": "add_cross_attention",
    "roberta-decoder-cross-attention.json": "add_cross_attention",
    "gpt2-cross-attention.json": "add_cross_attention",
    # GPT2DoubleHeadsModel: an LM head and a multiple-choice summary head
    "gpt2-double-heads.json": "architectures",
    # OPTDecoder's project_out and a score/qa_outputs of word_embed_proj_dim inputs
    "opt-project-out-bare.json": "word_embed_proj_dim",
    "opt-project-out-classification.json": "word_embed_proj_dim",
    "opt-project-out-qa.json": "word_embed_proj_dim",
    # ViTPooler: Linear(hidden_size, pooler_output_size); ViTSelfAttention reads head_dim
    "vit-pooler-output-size.json": "pooler_output_size",
    "vit-head-dim.json": "head_dim",
    "phi-head-dim.json": "head_dim",
    # DisentangledSelfAttention: q, k, v of heads x attention_head_size
    "deberta-v2-attention-head-size.json": "attention_head_size",
    # Qwen2MoeSparseMoeBlock keeps shared_expert_gate (hidden_size x 1) with a zero-width shared expert
    "qwen2-moe-zero-shared-expert.json": "shared_expert_intermediate_size",
    # DeepseekV2Experts has no biases where DeepseekV2MLP reads mlp_bias
    "deepseek-v2-mlp-bias-experts.json": "mlp_bias",
    # T5EncoderModel's T5Stack builds cross-attention blocks when the config says is_decoder
    "t5-encoder-is-decoder.json": "is_decoder",
}


def _count(path: Path) -> int:
    from tests.spec.test_hf_exact import vramcalc_count

    return vramcalc_count(path)


def test_every_case_is_recorded() -> None:
    names = sorted(p.name for p in FIELD_CASES.glob("*.json") if p.name != "meta_counts.json")
    assert names == sorted(COUNTS) and set(REFUSED_CASES) < set(names) and len(names) >= 25


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_a_field_that_changes_the_count_is_counted_exactly_or_refused(name: str) -> None:
    path = FIELD_CASES / name
    if name in REFUSED_CASES:
        with pytest.raises(SpecError, match=rf"^{path}: {REFUSED_CASES[name]}: "):
            _count(path)
    else:  # transformers' count on the meta device
        assert _count(path) == COUNTS[name]


runner = CliRunner()


@pytest.mark.parametrize("name", ["gpt2-cross-attention.json", "qwen2-moe-zero-shared-expert.json"])
def test_import_and_estimate_say_the_same_one_line(name: str, tmp_path: Path) -> None:
    path = FIELD_CASES / name
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    said = []
    for args in (["import", str(path)], ["estimate", "--hf-config", str(path)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and str(path) in lines[0] and REFUSED_CASES[name] in lines[0], lines
        said.append(lines[0].split(str(path), 1)[1])
    assert said[0] == said[1]
