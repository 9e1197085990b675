"""A MoE config gives its expert count under either name transformers has written: ``num_experts`` (the
Hub's files for Qwen2-MoE, Qwen3-MoE, OLMoE) or ``num_local_experts`` (Mixtral, PhiMoE, Llama 4, and what
transformers 5.x writes for the others). Read under the other name, the count used to fall back to the
class default (128 for Qwen3-MoE), silently 59.5 % too many parameters for a 64-expert model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramcalc.spec.hf_import import model_from_config

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf_configs"


@pytest.mark.parametrize("config", ["qwen3-30b-a3b.json", "olmoe-1b-7b-0924.json", "mixtral-8x7b.json"])
@pytest.mark.parametrize("name", ["num_experts", "num_local_experts"])
def test_either_name_gives_the_config_s_own_count(config: str, name: str) -> None:
    data = json.loads((CONFIGS / config).read_text(encoding="utf-8"))
    base = {key: value for key, value in data.items() if key not in ("num_experts", "num_local_experts")}
    model, _ = model_from_config(base | {name: 16}, config)
    assert model["experts"] == 16  # what the config says, under either name; no class default
