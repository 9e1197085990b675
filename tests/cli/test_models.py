"""`vramcalc models`, `--model NAME` and a spec's `model: NAME` / `model: {preset: NAME, ...}`."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from vramcalc.cli import app

runner = CliRunner()


def _run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "80"})
    return result.exit_code, result.stdout, result.stderr


def test_models_lists_the_catalog_and_searches_it() -> None:
    code, out, _ = _run("models")
    assert code == 0 and len(out.splitlines()) >= 152  # header, >= 150 entries, footer
    code, out, _ = _run("models", "llama-3.1")
    ids = [line.split()[0] for line in out.splitlines()[1:-1]]
    assert ids == ["llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b"]
    assert "8.03B" in out  # Llama 3.1 8B's Hub figure, the entry's published_params
    code, out, _ = _run("models", "qwen3 moe")
    assert [line.split()[0] for line in out.splitlines()[1:-1]] == ["qwen3-30b-a3b", "qwen3-235b-a22b"]


def test_models_json() -> None:
    code, out, _ = _run("models", "mixtral-8x7b", "--json")
    doc = json.loads(out)
    assert code == 0 and [entry["id"] for entry in doc] == ["mixtral-8x7b"]
    # config.json of mistralai/Mixtral-8x7B-v0.1: 8 experts, 2 per token, 8 KV heads
    assert doc[0]["config"]["num_local_experts"] == 8 and doc[0]["kv_heads"] == 8
    assert doc[0]["repo"] == "mistralai/Mixtral-8x7B-v0.1"


def test_models_no_match_is_one_error_line() -> None:
    code, out, err = _run("models", "zzzz-nothing")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and err.startswith("error:")


def test_estimate_with_model_flag() -> None:
    code, out, err = _run("estimate", "--model", "GPT2", "--mode", "inference", "--seq-len", "1024", "--json")
    assert code == 0, err
    # GPT-2 small: 124,439,808 parameters (transformers' GPT2LMHeadModel, tied head)
    assert json.loads(out)["params"] == 124_439_808


def test_model_flag_fills_the_workload_and_says_so() -> None:
    code, _, err = _run("max-batch", "--model", "gpt2", "--gpu", "h100-sxm")
    assert code == 0
    assert "note: workload.seq_len not given: 1,024" in err  # GPT-2's n_positions is 1,024 (< 4,096)


def test_model_flag_takes_the_precision_of_the_configs_torch_dtype() -> None:
    # Qwen2.5-7B's config.json says torch_dtype bfloat16: training defaults to amp-bf16 (as HF Trainer's
    # bf16=True), inference to bf16; never the fp32 a spec file defaults to.
    code, out, err = _run("estimate", "--model", "qwen2.5-7b", "--json")
    assert code == 0, err
    assert "note: precision not given: amp-bf16" in err
    assert not any("precision not given: fp32" in line for line in json.loads(out)["assumptions"])
    code, _, err = _run("estimate", "--model", "qwen2.5-7b", "--mode", "inference", "--json")
    assert code == 0, err
    assert "note: precision not given: bf16" in err


def test_model_flag_replaces_a_spec_files_model() -> None:
    code, out, err = _run("estimate", "configs/gpt2.yaml", "--model", "gpt2-medium", "--json")
    assert code == 0, err
    assert json.loads(out)["params"] == 354_823_168  # GPT-2 medium: 24 x 12.6M + embeddings (tied)


def test_spec_model_by_name_and_preset_with_overrides(tmp_path: Path) -> None:
    by_name = tmp_path / "a.yaml"
    by_name.write_text("model: bert-base-uncased\nworkload: {mode: inference, batch_size: 1, seq_len: 128}\n")
    code, out, err = _run("estimate", str(by_name), "--json")
    assert code == 0, err
    base = json.loads(out)["params"]
    preset = tmp_path / "b.yaml"
    preset.write_text(
        "model: {preset: bert-base-uncased, layers: 6}\nworkload: {mode: inference, batch_size: 1, seq_len: 128}\n"
    )
    code, out, err = _run("estimate", str(preset), "--json")
    assert code == 0, err
    # 6 of BERT-base's 12 layers gone: each is 4 x 768^2 + 2 x 768 x 3072 weights + 9,984 biases/norms
    # (4 x 768 + 3072 + 768 + 4 x 768) = 7,087,872
    assert base - json.loads(out)["params"] == 6 * 7_087_872


def test_unknown_name_is_one_line_with_the_closest(tmp_path: Path) -> None:
    spec = tmp_path / "c.yaml"
    spec.write_text("model: {preset: lama-3.1-8b}\nworkload: {batch_size: 1, seq_len: 128}\n")
    code, _, err = _run("estimate", str(spec))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith(f"error: {spec}: model.preset: unknown model 'lama-3.1-8b'; closest: llama-3.1-8b")
    code, _, err = _run("fit", "--model", "mistrall-7b-v0.3")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "closest: mistral-7b-v0.3" in err


def test_bad_override_names_the_file_and_key(tmp_path: Path) -> None:
    spec = tmp_path / "d.yaml"
    spec.write_text("model: {preset: gpt2, layers: 0}\nworkload: {batch_size: 1, seq_len: 128}\n")
    code, _, err = _run("estimate", str(spec))
    assert code == 2 and err.startswith(f"error: {spec}: model.layers:")


def test_a_query_of_many_distinct_words_is_refused_in_one_line() -> None:
    # 100,000 words, each a different one: refused at once, naming the bound, before any entry is matched
    code, out, err = _run("models", *(f"w{i}" for i in range(100_000)))
    assert (
        code == 2
        and out == ""
        and err.strip().splitlines()
        == ["error: query: 100,000 distinct words; at most 32 are matched (each must hold)"]
    )


def test_a_repeated_word_counts_once() -> None:
    # 'qwen 7b' said 100,000 times is 'qwen 7b': the same entries
    _, once, _ = _run("models", "qwen", "7b")
    code, many, _ = _run("models", *(["qwen", "7b"] * 50_000))
    assert code == 0 and many == once and len(once.splitlines()) > 2


def test_thirty_two_distinct_words_are_matched() -> None:
    # at the bound: every word must hold, so none of the entries does; the usual no-match line
    code, out, err = _run("models", *(f"w{i}" for i in range(32)))
    assert code == 2 and out == "" and err.startswith("error: no catalog model matches")
