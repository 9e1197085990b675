"""Honest defaults and warnings: every default that fills a gap is stated, warnings fire exactly when
they should, unknown keys get "did you mean"."""

from __future__ import annotations

from typing import Any

import pytest

from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.spec.load import override_workload, parse_spec

LLAMA_LIKE = {"architecture": "decoder", "layers": 2, "hidden_size": 256, "heads": 8, "vocab_size": 1000}


def notes(model: dict[str, Any], **workload: Any) -> str:
    wl = {"batch_size": 1, "seq_len": 128, **workload}
    return "; ".join(estimate(parse_spec({"model": model, "workload": wl})).assumptions)


def test_workload_defaults_are_stated_and_given_keys_are_not() -> None:
    text = notes(LLAMA_LIKE)
    for line in ("mode not given: train", "precision not given: fp32", "attention not given: sdpa"):
        assert line in text
    assert "gradient_checkpointing not given: none" in text
    given = notes(LLAMA_LIKE, mode="train", precision="amp-bf16", attention="eager", gradient_checkpointing="full")
    assert "not given: train" not in given and "precision not given" not in given
    assert "attention not given" not in given and "gradient_checkpointing not given" not in given
    # checkpointing is a training choice: not stated for inference
    assert "gradient_checkpointing" not in notes(LLAMA_LIKE, mode="inference")


def test_defaults_stay_stated_after_a_flag_override() -> None:
    spec = parse_spec({"model": LLAMA_LIKE, "workload": {"batch_size": 1, "seq_len": 64}})
    changed = override_workload(spec, "s.yaml", batch_size=4)
    text = "; ".join(estimate(changed).assumptions)
    assert "precision not given: fp32" in text and "mode not given: train" in text


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_pure_16_bit_full_fine_tune_warns(precision: str) -> None:
    text = notes(LLAMA_LIKE, precision=precision)
    assert f"warning: precision {precision} trains with 16-bit weights, gradients and Adam states (8 B/param)" in text
    assert f"Hugging Face Trainer's {precision}=True is precision: amp-{precision}" in text
    # the warning says how to state that pure 16-bit is meant
    assert f"(precision: pure-{precision} says pure {precision} is meant)" in text


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_pure_spelling_means_the_same_step_without_the_warning(precision: str) -> None:
    model, wl = LLAMA_LIKE, {"batch_size": 2, "seq_len": 64}
    plain = estimate(parse_spec({"model": model, "workload": {**wl, "precision": precision}}))
    spec = parse_spec({"model": model, "workload": {**wl, "precision": f"pure-{precision}"}})
    assert spec.workload.precision.value == precision
    meant = estimate(spec)
    assert (meant.components, meant.total_bytes) == (plain.components, plain.total_bytes)
    assert not any("trains with 16-bit weights" in note for note in meant.assumptions)
    # a flag override keeps the spelling given (the workload is written out and read again)
    changed = override_workload(spec, "s.yaml", batch_size=4)
    assert changed.workload.pure_meant and changed.workload.batch_size == 4
    assert not any("trains with 16-bit weights" in note for note in estimate(changed).assumptions)


def test_pure_spelling_on_the_command_line() -> None:
    from typer.testing import CliRunner

    from vramcalc.cli import app

    runner = CliRunner()
    spec = "configs/gpt2.yaml"
    flagged = runner.invoke(app, ["estimate", spec, "--precision", "pure-bf16", "--mode", "train"])
    plain = runner.invoke(app, ["estimate", spec, "--precision", "bf16", "--mode", "train"])
    assert flagged.exit_code == 0 and plain.exit_code == 0, flagged.output + plain.output
    assert "warning: precision bf16" in " ".join(plain.stdout.split())
    assert "warning" not in flagged.stdout and flagged.stderr == ""


@pytest.mark.parametrize(
    "workload",
    [
        {"precision": "amp-bf16"},
        {"precision": "fp32"},
        {"precision": "bf16", "mode": "inference"},
        {"precision": "bf16", "optimizer": "none"},
        {"precision": "bf16", "adapter": {"rank": 8}},
    ],
)
def test_no_16_bit_warning_otherwise(workload: dict[str, Any]) -> None:
    assert "trains with 16-bit weights" not in notes({**LLAMA_LIKE, "mlp": "swiglu"}, **workload)


def test_16_bit_warning_names_the_optimizer_states_of_other_optimizers() -> None:
    text = notes(LLAMA_LIKE, precision="bf16", optimizer="sgd-momentum")
    assert "16-bit weights, gradients and optimizer states, no fp32 master weights" in text


@pytest.mark.parametrize(
    ("extra", "why"),
    [({"kv_heads": 2}, "grouped KV heads"), ({"position": "rotary"}, "rotary positions")],
)
def test_non_gated_default_on_a_llama_like_shape_warns(extra: dict[str, Any], why: str) -> None:
    text = notes({**LLAMA_LIKE, **extra})
    assert f"warning: mlp not given: GPT-2 style MLP assumed on a shape with {why}" in text
    assert "Llama-like models use mlp: swiglu" in text


@pytest.mark.parametrize("extra", [{}, {"kv_heads": 2, "mlp": "gelu"}, {"position": "rotary", "mlp": "swiglu"}])
def test_no_mlp_warning_when_given_or_gpt2_like(extra: dict[str, Any]) -> None:
    # {}: no grouped heads, learned positions (the GPT-2 default it is)
    assert "GPT-2 style MLP assumed" not in notes({**LLAMA_LIKE, **extra})


def test_rotary_past_the_trained_context_warns_and_runs() -> None:
    model = {**LLAMA_LIKE, "mlp": "swiglu", "max_position_embeddings": 64}
    text = notes(model, seq_len=128)
    assert "warning: seq_len 128 is past max_position_embeddings 64 (rotary positions: it runs" in text
    assert "past max_position_embeddings" not in notes(model, seq_len=64)


def test_learned_positions_past_the_table_stay_an_error() -> None:
    model = {**LLAMA_LIKE, "position": "learned", "max_position_embeddings": 64}
    with pytest.raises(SpecError, match="learned position embeddings have no row"):
        notes(model, seq_len=128)


def test_learned_table_of_unstated_size_past_the_usual_default_warns() -> None:
    # GPT-2 style decoder without max_position_embeddings: the default table is 1,024 rows
    model = {**LLAMA_LIKE, "position": "learned"}
    text = notes(model, seq_len=2048)
    assert "max_position_embeddings not given: 2048" in text
    assert "warning: seq_len 2,048 is past the usual learned position table (1,024 rows)" in text
    assert "usual learned position table" not in notes(model, seq_len=1024)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"model": {**LLAMA_LIKE, "layerz": 3}}, "model.layerz: unknown key; did you mean 'layers'?"),
        ({"model": {**LLAMA_LIKE, "hidden": 3}}, "model.hidden: unknown key; did you mean 'hidden_size'?"),
        (
            {"workload": {"batch_size": 1, "seq_len": 8, "precison": "bf16"}},
            "workload.precison: unknown key; did you mean 'precision'?",
        ),
        (
            {"workload": {"batch_size": 1, "seq_len": 8, "adapter": {"rank": 4, "target": ["q"]}}},
            "workload.adapter.target: unknown key; did you mean 'targets' or 'target_r'?",
        ),
        ({"parallel": {"tensr": 2}}, "parallel.tensr: unknown key; did you mean 'tensor'?"),
        # nothing close: no suggestion
        ({"model": {**LLAMA_LIKE, "zzzzqqq": 1}}, "model.zzzzqqq: unknown key"),
    ],
)
def test_unknown_keys_get_did_you_mean(data: dict[str, Any], message: str) -> None:
    spec = {"model": LLAMA_LIKE, "workload": {"batch_size": 1, "seq_len": 8}, **data}
    with pytest.raises(SpecError) as info:
        parse_spec(spec, "s.yaml")
    assert str(info.value) == f"s.yaml: {message}"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"workload": {"batch_sise": 8, "seq_len": 8}}, "workload.batch_sise: unknown key; did you mean 'batch_size'?"),
        ({"model": {**LLAMA_LIKE, "layers": None, "layrs": 2}}, "model.layrs: unknown key; did you mean 'layers'?"),
    ],
)
def test_a_misspelt_required_key_is_one_did_you_mean_line(data: dict[str, Any], message: str) -> None:
    # The required key is missing because it is misspelt: the one line says so, with no "Field
    # required" line for the key it stands for.
    spec = {"model": LLAMA_LIKE, "workload": {"batch_size": 1, "seq_len": 8}, **data}
    spec["model"] = {key: value for key, value in spec["model"].items() if value is not None}
    with pytest.raises(SpecError) as info:
        parse_spec(spec, "s.yaml")
    assert str(info.value) == f"s.yaml: {message}"


def test_a_missing_key_with_no_typo_beside_it_is_still_named() -> None:
    spec = {"model": LLAMA_LIKE, "workload": {"seq_len": 8, "colour": "red"}}
    with pytest.raises(SpecError) as info:
        parse_spec(spec, "s.yaml")
    assert str(info.value).splitlines() == [
        "s.yaml: workload.batch_size: Field required",
        "s.yaml: workload.colour: unknown key",
    ]


def test_a_misspelt_required_key_on_the_command_line(tmp_path: Any) -> None:
    from typer.testing import CliRunner

    from vramcalc.cli import app

    path = tmp_path / "typo.yaml"
    path.write_text("model: gpt2\nworkload: {batch_sise: 8, seq_len: 128}\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["estimate", str(path)])
    assert result.exit_code == 2
    assert result.stderr == f"error: {path}: workload.batch_sise: unknown key; did you mean 'batch_size'?\n"


def test_did_you_mean_in_a_flag_override() -> None:
    spec = parse_spec({"model": LLAMA_LIKE, "workload": {"batch_size": 1, "seq_len": 8}})
    with pytest.raises(SpecError, match="s.yaml: workload: seq_lenn: unknown key; did you mean 'seq_len'"):
        override_workload(spec, "s.yaml", seq_lenn=4)


@pytest.mark.parametrize(("alias", "name"), [("bfloat16", "bf16"), ("float16", "fp16"), ("float32", "fp32")])
def test_precision_aliases(alias: str, name: str) -> None:
    spec = parse_spec({"model": LLAMA_LIKE, "workload": {"batch_size": 1, "seq_len": 8, "precision": alias}})
    assert spec.workload.precision.value == name
    flagged = override_workload(
        parse_spec({"model": LLAMA_LIKE, "workload": {"batch_size": 1, "seq_len": 8}}), "s", precision=alias
    )
    assert flagged.workload.precision.value == name


def test_precision_flag_takes_the_dtype_names_too() -> None:
    """--precision bfloat16 is --precision bf16 (the name torch and config.json files use)."""
    import json

    from typer.testing import CliRunner

    from vramcalc.cli import app

    runner = CliRunner()
    totals = []
    for name in ("bf16", "bfloat16", "BFloat16"):
        result = runner.invoke(app, ["estimate", "configs/bert-base.yaml", "--precision", name, "--json"])
        assert result.exit_code == 0, result.output
        totals.append(json.loads(result.stdout)["total_bytes"])
    assert len(set(totals)) == 1
    bad = runner.invoke(app, ["estimate", "configs/bert-base.yaml", "--precision", "bf17"])
    assert bad.exit_code == 2
    assert "--precision" in bad.output and "'bf17' is not one of fp32" in bad.output
