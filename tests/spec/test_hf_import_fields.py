"""config.json fields are checked where they are read: ``vramcalc import`` and ``estimate --hf-config``
exit 2 with one line naming the config file and field, and ``import`` never writes a spec that
``estimate`` rejects (a property over random mutations of real configs).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.spec.hf_import import FAMILIES

runner = CliRunner()
CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf_configs"
LLAMA = json.loads((CONFIGS / "llama-3-8b.json").read_text(encoding="utf-8"))
#: ``IMPORT_EXAMPLES=2000 pytest tests/spec/test_hf_import_fields.py`` explores that many random
#: mutations; by default the examples are bounded and derandomized, so CI is reproducible.
EXPLORE = int(os.environ.get("IMPORT_EXAMPLES", "0"))


def write_config(folder: Path, text: str) -> Path:
    path = folder / "config.json"
    path.write_text(text, encoding="utf-8")
    return path


def llama_with(folder: Path, **changes: Any) -> Path:
    return write_config(folder, json.dumps({**LLAMA, **changes}))


def one_error_line(result: Any) -> str:
    """The single ``error:`` line of a run that exited 2 (no traceback, nothing else on stderr)."""
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def run_import(config: Path, out: Path) -> str:
    line = one_error_line(runner.invoke(app, ["import", str(config), "-o", str(out)]))
    assert not out.exists()
    return line


def run_hf_estimate(config: Path) -> str:
    return one_error_line(
        runner.invoke(app, ["estimate", "--hf-config", str(config), "--batch-size", "1", "--seq-len", "8"])
    )


def test_deep_nesting_is_one_line_in_both_commands(tmp_path: Path) -> None:
    config = write_config(tmp_path, "[" * 100_000 + "]" * 100_000)
    expected = f"error: {config}: invalid JSON: nested more than 64 levels deep"
    assert run_import(config, tmp_path / "out.yaml") == expected
    assert run_hf_estimate(config) == expected


def test_integers_past_python_digit_limit_are_one_line(tmp_path: Path) -> None:
    config = write_config(tmp_path, json.dumps(LLAMA)[:-1] + ', "vocab_size": ' + "9" * 5000 + "}")
    # the duplicate vocab_size is reported at the same key; the 5,000 digits never reach int()
    assert run_import(config, tmp_path / "out.yaml").startswith(f"error: {config}: vocab_size: ")
    config = write_config(tmp_path, json.dumps(LLAMA).replace("500000.0", "1" + "0" * 4400))  # rope_theta
    expected = f"error: {config}: rope_theta: an integer of 4,401 digits is out of range (at most 30)"
    assert run_import(config, tmp_path / "out.yaml") == expected
    assert run_hf_estimate(config) == expected


def test_zero_heads_with_head_dim_is_refused_not_divided_by(tmp_path: Path) -> None:
    config = llama_with(tmp_path, num_attention_heads=0, head_dim=128)
    expected = f"error: {config}: num_attention_heads: 0 is out of range (1 to 10,000,000)"
    assert run_import(config, tmp_path / "out.yaml") == expected
    assert run_hf_estimate(config) == expected


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("Infinity", "Infinity is not a finite number"),
        ("NaN", "NaN is not a finite number"),
        ('"8192"', "expected a whole number, got '8192'"),
        ("[8192]", "expected a whole number, got [8192]"),
        ("1.5", "expected a whole number, got 1.5"),
        ("-5", "-5 is out of range (1 to 1,000,000,000)"),
        ("0", "0 is out of range (1 to 1,000,000,000)"),
        ("true", "expected a whole number, got True"),
    ],
)
def test_max_position_embeddings_is_checked(tmp_path: Path, value: str, problem: str) -> None:
    text = json.dumps(LLAMA).replace('"max_position_embeddings": 8192', f'"max_position_embeddings": {value}')
    config = write_config(tmp_path, text)
    assert run_import(config, tmp_path / "out.yaml") == f"error: {config}: max_position_embeddings: {problem}"


def test_an_integral_float_counts_as_its_integer(tmp_path: Path) -> None:
    out = tmp_path / "out.yaml"
    result = runner.invoke(app, ["import", str(llama_with(tmp_path, hidden_size=4096.0)), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "hidden_size: 4096\n" in out.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("changes", "field", "problem"),
    [
        ({"num_hidden_layers": -3}, "num_hidden_layers", "-3 is out of range (1 to 10,000,000)"),
        ({"vocab_size": 0}, "vocab_size", "0 is out of range (1 to 10,000,000)"),
        ({"hidden_size": "4096"}, "hidden_size", "expected a whole number, got '4096'"),
        ({"intermediate_size": 10**8}, "intermediate_size", "100000000 is out of range (1 to 10,000,000)"),
        ({"num_key_value_heads": False}, "num_key_value_heads", "expected a whole number, got False"),
        ({"tie_word_embeddings": "false"}, "tie_word_embeddings", "expected true or false, got 'false'"),
        ({"_name_or_path": 7}, "_name_or_path", "expected a string, got 7"),
        # valid one by one, not together: the spec's own rule, under the spec's key name
        ({"num_key_value_heads": 5}, "model", "kv_heads: 5 must divide heads (32)"),
    ],
)
def test_import_writes_no_spec_that_estimate_rejects(
    tmp_path: Path, changes: dict[str, Any], field: str, problem: str
) -> None:
    config = llama_with(tmp_path, **changes)
    line = run_import(config, tmp_path / "out.yaml")
    assert line.startswith(f"error: {config}: {field}: {problem}"), line
    assert run_hf_estimate(config).startswith(f"error: {config}: {field}: {problem}")


@pytest.mark.parametrize(
    ("changes", "field", "problem"),
    [
        ({"architectures": "BertForSequenceClassification"}, "architectures", "expected a list of class names"),
        ({"architectures": [1]}, "architectures", "expected a list of class names, got [1]"),
        ({"id2label": ["a", "b"]}, "id2label", "expected a mapping of label ids to names, got ['a', 'b']"),
        ({"type_vocab_size": -1}, "type_vocab_size", "-1 is out of range (0 to 10,000,000)"),
    ],
)
def test_bert_fields_are_checked(tmp_path: Path, changes: dict[str, Any], field: str, problem: str) -> None:
    bert = json.loads((CONFIGS / "bert-base-uncased.json").read_text(encoding="utf-8"))
    config = write_config(tmp_path, json.dumps({**bert, "architectures": ["BertForSequenceClassification"], **changes}))
    assert run_import(config, tmp_path / "out.yaml").startswith(f"error: {config}: {field}: {problem}")


def test_several_bad_fields_give_one_line_the_first_one_read(tmp_path: Path) -> None:
    config = llama_with(tmp_path, num_hidden_layers=-3, vocab_size=0, hidden_size="4096")
    assert (
        run_import(config, tmp_path / "out.yaml")
        == f"error: {config}: hidden_size: expected a whole number, got '4096'"
    )


def test_error_lines_quote_values_briefly(tmp_path: Path) -> None:
    config = llama_with(tmp_path, model_type="x" * 900_000)
    line = run_import(config, tmp_path / "out.yaml")
    assert line.startswith(f"error: {config}: model_type: 'xxx") and "is not supported" in line
    quoted_value = line.split("model_type: ", 1)[1].split(" is not supported")[0]
    assert len(quoted_value) < 100  # the rest is the path and the list of supported model types
    line = run_import(llama_with(tmp_path, num_attention_heads=["y" * 900_000]), tmp_path / "out.yaml")
    assert len(line) < 300


def test_unprintable_name_is_cleaned_not_written(tmp_path: Path) -> None:
    out = tmp_path / "out.yaml"
    result = runner.invoke(
        app, ["import", str(llama_with(tmp_path, _name_or_path="org/ll\u202eama\x1b[2J")), "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "name: llama[2J\n" in out.read_text(encoding="utf-8")


# --- the property: import either exits 2 or writes a spec that estimate accepts -------------------------

#: Every field a converter reads, and the names a mutation may add.
FIELDS = sorted(
    {
        *("model_type", "_name_or_path", "architectures", "id2label", "num_hidden_layers", "hidden_size"),
        *("num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size"),
        *("max_position_embeddings", "tie_word_embeddings", "attention_bias", "num_local_experts"),
        *("num_experts_per_tok", "n_embd", "n_layer", "n_head", "n_inner", "n_positions", "num_kv_heads"),
        *("new_decoder_architecture", "multi_query", "ffn_hidden_size", "bias", "type_vocab_size"),
        *("num_layers", "num_decoder_layers", "d_model", "num_heads", "d_kv", "d_ff", "feed_forward_proj"),
        *("relative_attention_num_buckets", "patch_size", "image_size"),
    }
)
REAL_CONFIGS = sorted(p.name for p in CONFIGS.glob("*.json") if p.name != "unknown-mamba.json")
SIZES = st.sampled_from([1, 2, 3, 7, 8, 12, 16, 32, 64, 100, 128, 224, 4096, 10**7])
VALUES = st.one_of(
    SIZES,
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    SIZES.map(float),
    st.booleans(),
    st.none(),
    st.sampled_from(["4096", "", "gated-gelu", "relu", "LlamaForSequenceClassification", "a/b\n\x1b"]),
    st.sampled_from(sorted(FAMILIES)),
    st.lists(st.sampled_from(["LlamaForCausalLM", "BertForSequenceClassification", 1]), max_size=2),
    st.dictionaries(st.sampled_from(["0", "1", "2"]), st.just("label"), max_size=3),
)
MUTATION = st.tuples(st.sampled_from(FIELDS), st.one_of(VALUES, st.just("<delete>")))


def import_settings(examples: int) -> settings:
    return settings(
        max_examples=EXPLORE or examples,
        deadline=None,
        derandomize=not EXPLORE,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


def mutated(name: str, mutations: list[tuple[str, object]]) -> str:
    config: dict[str, Any] = json.loads((CONFIGS / name).read_text(encoding="utf-8"))
    for field, value in mutations:
        if value == "<delete>":
            config.pop(field, None)
        else:
            config[field] = value
    return json.dumps(config)  # NaN and Infinity as JSON's readers write them


@import_settings(60)
@given(name=st.sampled_from(REAL_CONFIGS), mutations=st.lists(MUTATION, min_size=1, max_size=3))
def test_import_exits_2_or_writes_a_spec_estimate_accepts(
    tmp_path: Path, name: str, mutations: list[tuple[str, object]]
) -> None:
    config = write_config(tmp_path, mutated(name, mutations))
    out = tmp_path / "out.yaml"
    out.unlink(missing_ok=True)
    result = runner.invoke(app, ["import", str(config), "-o", str(out)])
    if result.exit_code == 2:
        assert one_error_line(result).startswith(f"error: {config}: ")
        assert not out.exists()
        return
    assert result.exit_code == 0, result.output
    estimated = runner.invoke(app, ["estimate", str(out), "--json"])
    assert estimated.exit_code == 0, (out.read_text(encoding="utf-8"), estimated.output)
