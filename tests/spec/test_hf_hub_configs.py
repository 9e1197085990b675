"""Configs as the Hub serves them, written by transformers 4.x (``torch_dtype``, ``rope_scaling``, Falcon's
``multi_query``/``parallel_attn``, DeepSeek's ``first_k_dense_replace``, Gemma 2 without ``layer_types``),
not re-written by transformers 5: vramcalc's count equals transformers' own on the meta device
(tests/data/hf_configs/hub/meta_counts.json, an independent method)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramcalc.core.params import count_params
from vramcalc.families.resolve import resolve_model
from vramcalc.spec.hf_import import read_config, validated_spec

HUB = Path(__file__).resolve().parents[1] / "data" / "hf_configs" / "hub"
COUNTS = json.loads((HUB / "meta_counts.json").read_text(encoding="utf-8"))["counts"]


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_hub_config_counts_as_transformers_does(name: str) -> None:
    spec = validated_spec(read_config(HUB / name), name, {"mode": "inference", "batch_size": 1, "seq_len": 128})
    assert count_params(resolve_model(spec.model, spec.workload)[0]) == COUNTS[name]


def test_every_hub_config_is_counted() -> None:
    assert sorted(COUNTS) == sorted(path.name for path in HUB.glob("*.json") if path.name != "meta_counts.json")
