"""Parameter counts of imported transformers configs equal transformers' own, exactly.

The reference numbers in tests/data/hf_configs/meta_counts.json come from transformers (an independent
method): ``benchmarks/hf_import_exact.py --record`` builds each config's ``architectures[0]`` class on the
meta device and sums ``p.numel()`` over ``model.parameters()`` (the transformers version and the date are
in the file). This test needs no torch: it checks vramcalc's count of every recorded config.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramcalc.core.params import count_params
from vramcalc.families.resolve import resolve_model
from vramcalc.spec.hf_import import count_workload, model_from_config, read_config, validated_spec

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf_configs"
RECORD = json.loads((CONFIGS / "meta_counts.json").read_text(encoding="utf-8"))
COUNTS: dict[str, int] = RECORD["counts"]


def vramcalc_count(path: Path) -> int:
    config = read_config(path)
    model, _ = model_from_config(config, str(path))
    spec = validated_spec(config, str(path), count_workload(config, model, str(path)))
    return count_params(resolve_model(spec.model, spec.workload)[0])


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_count_equals_transformers_meta_count(name: str) -> None:
    assert vramcalc_count(CONFIGS / name) == COUNTS[name]


def test_every_real_config_is_recorded_and_enough_of_them() -> None:
    real = {
        p.name for p in CONFIGS.glob("*.json") if p.name != "meta_counts.json" and not p.name.startswith("unknown-")
    }
    assert real == set(COUNTS)
    assert len(COUNTS) >= 40
    assert RECORD["transformers_version"] and RECORD["date"]


def test_families_and_heads_covered() -> None:
    types, heads = set(), set()
    for name in COUNTS:
        config = json.loads((CONFIGS / name).read_text(encoding="utf-8"))
        types.add(config["model_type"])
        heads.add(
            next(
                s
                for s in (
                    "CausalLM",
                    "LMHeadModel",
                    "Generation",
                    "SequenceClassification",
                    "ImageClassification",
                    "TokenClassification",
                    "QuestionAnswering",
                    "MaskedLM",
                    "PreTraining",
                    "EncoderModel",
                    "Model",
                )
                if config["architectures"][0].endswith(s)
            )
        )
    assert types >= {
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "gemma",
        "gemma2",
        "gemma3_text",
        "phi",
        "phi3",
        "deepseek_v2",
        "deepseek_v3",
        "falcon",
        "gpt_neox",
        "opt",
        "bloom",
        "starcoder2",
        "olmo",
        "olmo2",
        "gpt2",
        "bert",
        "roberta",
        "deberta-v2",
        "t5",
        "vit",
        "phimoe",
        "olmoe",
        "gptj",
        "gpt_bigcode",
        "distilbert",
        "xlm-roberta",
    }
    assert len(heads) == 11
