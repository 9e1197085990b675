"""Reading a config's rotary scaling (``rope_scaling`` of transformers 4.x configs, ``rope_parameters`` of 5.x),
which sizes vLLM's RoPE cache. The configs below are written as transformers writes them; the expected sections
are read off the configs by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramcalc.errors import SpecError
from vramcalc.spec.hf_rope import rope_scaling

DATA = Path(__file__).resolve().parents[1] / "data" / "hf_configs"


def test_legacy_llama3_keeps_its_original_length() -> None:
    config = {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}}
    assert rope_scaling(config, "c.json") == {"type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}


def test_gemma3_v4_config_has_a_local_rope() -> None:
    config = {"rope_scaling": {"rope_type": "linear", "factor": 8.0}, "rope_local_base_freq": 10000.0}
    assert rope_scaling(config, "c.json") == {"type": "linear", "factor": 8.0, "local_rope": True}


def test_v5_parameters_per_attention_kind() -> None:
    """transformers 5 writes Gemma 3's two settings under ``full_attention`` and ``sliding_attention``
    (tests/data/hf_configs/gemma-3-1b-pt.json: theta 1,000,000 and 10,000, both default)."""
    config = json.loads((DATA / "gemma-3-1b-pt.json").read_text(encoding="utf-8"))
    assert rope_scaling(config, "gemma.json") == {"type": "default", "local_rope": True}
    same = {"rope_parameters": {"full_attention": {"rope_theta": 1e4}, "sliding_attention": {"rope_theta": 1e4}}}
    assert rope_scaling(same, "c.json") is None


def test_mrope_and_plain_configs() -> None:
    qwen2_vl = {"rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}
    assert rope_scaling(qwen2_vl, "c.json") == {"type": "mrope"}
    assert rope_scaling({"rope_scaling": {"rope_type": "default", "mrope_section": [16, 24, 24]}}, "c") == {
        "type": "mrope"
    }
    assert rope_scaling({"rope_parameters": {"rope_theta": 1e4, "rope_type": "default"}}, "c.json") is None
    assert rope_scaling({}, "c.json") is None


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"rope_scaling": {"rope_type": "linear", "factor": "8"}}, "rope_scaling.factor"),
        ({"rope_scaling": {"rope_type": "linear", "factor": -1}}, "rope_scaling.factor"),
        ({"rope_scaling": {"rope_type": "linear", "factor": float("inf")}}, "rope_scaling.factor"),
        ({"rope_scaling": {"rope_type": 3}}, "rope_scaling.rope_type"),
        ({"rope_parameters": "yarn"}, "rope_parameters"),
        ({"rope_scaling": {"type": "yarn", "original_max_position_embeddings": 0.5}}, "original_max_position"),
    ],
)
def test_bad_values_are_one_line_naming_the_field(config: dict[str, object], field: str) -> None:
    with pytest.raises(SpecError, match=f"c.json: {field}"):
        rope_scaling(config, "c.json")
