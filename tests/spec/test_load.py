"""Loading a spec file: values are read as what the key means, never coerced from another YAML type."""

from __future__ import annotations

import pytest
from spec_texts import TINY_SPEC
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.errors import SpecError
from vramcalc.spec.load import load_spec

MOE_MODEL = """\
name: moe
model: {architecture: decoder, layers: 2, hidden_size: 64, heads: 4, vocab_size: 100, mlp: swiglu,
        experts: 4, experts_per_token: 2, capacity_factor: CAPACITY}
workload: {batch_size: 1, seq_len: 8}
"""
SERVING = """\
name: serve
model: {architecture: decoder, layers: 2, hidden_size: 64, heads: 4, vocab_size: 100, mlp: swiglu}
workload: {mode: inference, batch_size: 1, prompt_len: 8, max_new_tokens: 8, runtime: vllm,
           memory_utilization: UTIL}
"""


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (MOE_MODEL.replace("CAPACITY", "true"), "model.capacity_factor"),
        (SERVING.replace("UTIL", "true"), "workload.memory_utilization"),
        (SERVING.replace("UTIL", "false"), "workload.memory_utilization"),
        (TINY_SPEC.replace("layers: 2", "layers: true"), "model.layers"),
        (TINY_SPEC.replace("batch_size: 2", "batch_size: true"), "workload.batch_size"),
        (TINY_SPEC + "target: {gpu: t4, count: true}\n", "target.count"),
    ],
)
def test_a_boolean_is_not_a_number(write_spec, text: str, key: str) -> None:
    # YAML's true is not 1: a numeric key given a boolean is an error naming the key
    path = write_spec(text)
    with pytest.raises(SpecError, match=rf"{key}: "):
        load_spec(path)


def test_keys_that_take_a_boolean_still_do(write_spec) -> None:
    spec = load_spec(write_spec(MOE_MODEL.replace("CAPACITY", "1.25").replace("experts: 4", "experts: 4, bias: true")))
    assert spec.model.bias is True and spec.model.capacity_factor == 1.25
    checkpointed = load_spec(write_spec(TINY_SPEC + "  gradient_checkpointing: true\n"))
    assert checkpointed.workload.gradient_checkpointing.value == "full"  # documented: true means full


@pytest.mark.parametrize(
    "value",
    ["!!binary aGVsbG8=", "!!set {a: null}", "!!omap [{a: 1}]", "!!pairs [{a: 1}]"],
)
def test_yaml_types_no_key_takes_are_refused_where_read(write_spec, value: str) -> None:
    path = write_spec(TINY_SPEC.replace("name: tiny", f"name: {value}"))
    with pytest.raises(SpecError, match=r"line 1, column 7\): !!\w+ values are not read in specs"):
        load_spec(path)


def test_seq_len_past_a_learned_position_table_is_an_error(write_spec) -> None:
    text = TINY_SPEC.replace("vocab_size: 100", "vocab_size: 100\n  position: learned\n  max_position_embeddings: 8")
    result = CliRunner().invoke(app, ["estimate", str(write_spec(text))])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: {write_spec(text)}: workload.seq_len: 16 is past model.max_position_embeddings (8); "
        "learned position embeddings have no row for the positions beyond"
    )
    within = CliRunner().invoke(app, ["estimate", str(write_spec(text.replace("seq_len: 16", "seq_len: 8")))])
    assert within.exit_code == 0, within.output


def test_seq_len_past_a_rotary_context_is_a_note(write_spec) -> None:
    text = TINY_SPEC.replace("vocab_size: 100", "vocab_size: 100\n  position: rotary\n  max_position_embeddings: 8")
    result = CliRunner().invoke(app, ["estimate", str(write_spec(text)), "--json"])
    assert result.exit_code == 0, result.output
    assert "seq_len 16 is past max_position_embeddings 8 (rotary positions" in result.stdout


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("batch_size: 2", "batch_size: 1e999999999", "workload.batch_size"),
        ("vocab_size: 100", "params: 1e999999999B", "model.params"),
        ("seq_len: 16", "seq_len: '9999999999999999999999999999999999999999999'", "workload.seq_len"),
    ],
)
def test_huge_exponents_in_a_spec_exit_2_naming_the_field(write_spec, old: str, new: str, field: str) -> None:
    path = write_spec(TINY_SPEC.replace(old, new))
    result = CliRunner().invoke(app, ["estimate", str(path)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: {field}: "), lines
