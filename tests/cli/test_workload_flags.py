"""The workload flags of every command that estimates: declared once, the same on every command, each run of a
command with ``--model`` and flags equal to the run on the spec file written by hand with those keys, and the
contradictions refused with one line naming the flag.

Every expected value is the same command's answer on a hand-written spec (``model: NAME`` and the workload
keys the flags stand for, the defaults a ``--model`` run fills in written out), never a stored number.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from cli_json import doc_without_input as doc
from cli_json import model_spec as spec_file
from cli_json import run
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.cli.workload import OPTIONS, flag_name

runner = CliRunner()
#: The commands that estimate a spec: each takes --model and every workload flag.
ESTIMATING = ("estimate", "report", "fit", "max-batch", "max-seq", "sweep", "plan", "bandwidth")
#: A flag a command gives a meaning of its own (sweep's lists), and flags a command refuses.
OWN = {("sweep", "--batch-size"), ("sweep", "--seq-len")}
REFUSED = {
    ("max-batch", "--batch-size"),
    ("max-seq", "--seq-len"),
    ("max-seq", "--prompt-len"),
    ("max-seq", "--max-new-tokens"),
}


# --- one definition of the flags -------------------------------------------------------------------------


def _options(command: str) -> dict[str, Any]:
    group = typer.main.get_command(app)
    params = group.commands[command].params  # type: ignore[attr-defined]
    return {opt: param for param in params for opt in param.opts if opt.startswith("--")}


@pytest.mark.parametrize("command", ESTIMATING)
def test_every_estimating_command_accepts_the_same_workload_flags(command: str) -> None:
    flags = [flag_name(key) for key in OPTIONS]
    assert {"--mode", "--batch-size", "--seq-len", "--prompt-len", "--max-new-tokens", "--precision"} <= set(flags)
    assert {"--quantization", "--lora", "--qlora", "--runtime", "--kv-cache-dtype", "--attention"} <= set(flags)
    options, reference = _options(command), _options("estimate")
    assert "--model" in options
    for flag in flags:
        assert flag in options, f"{command} lacks {flag}"
        if (command, flag) in OWN:
            continue
        ours, theirs = options[flag], reference[flag]
        same = ("name", "opts", "secondary_opts", "metavar", "min", "max", "rich_help_panel")
        assert [getattr(ours, key) for key in same] == [getattr(theirs, key) for key in same]
        assert ours.type_descriptor.annotation == theirs.type_descriptor.annotation
        assert ours.hidden is ((command, flag) in REFUSED)
        if flag != "--mode":
            assert ours.help == theirs.help  # the one definition: no copy per command


def test_check_takes_no_workload_flags() -> None:
    """check gates spec files as they are written: it takes neither --model nor a workload flag."""
    options = _options("check")
    assert "--model" not in options and not {flag_name(key) for key in OPTIONS} & set(options)


@pytest.mark.parametrize("command", [*ESTIMATING, "check", "compare"])
def test_help_fits_80_columns(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import typer.rich_utils

    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", 80)  # read from TERMINAL_WIDTH when typer is imported
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "80"})
    lines = result.stdout.splitlines()
    assert result.exit_code == 0 and max(len(line.rstrip()) for line in lines) == 80
    assert not any("…" in line for line in lines), "a help text was cut instead of wrapped"


# --- --model with flags equals the spec written by hand ----------------------------------------------------

#: What a --model run of gemma-2-9b fills in when the flags do not give it: its config's bf16 for inference.
GEMMA_SERVED = {"mode": "inference", "batch_size": 1, "seq_len": 4096, "precision": "bf16"}


def test_max_batch_of_a_model_alone_is_served_not_fine_tuned(tmp_path: Path) -> None:
    """Without SPEC or --mode, max-batch answers for inference: a full fine-tune of a 9B model fits no
    H100 (batch 0), serving it does."""
    spec = spec_file(tmp_path, "gemma-2-9b", GEMMA_SERVED)
    expected = doc("max-batch", spec, "--gpu", "h100-sxm", "--json")
    code, out, err = run("max-batch", "--model", "gemma-2-9b", "--gpu", "h100-sxm", "--json")
    assert code == 0 and expected["max_batch_size"] > 0
    assert "note: workload.mode not given: inference" in err
    got = json.loads(out)
    got.pop("spec")
    assert got == expected
    full = spec_file(tmp_path, "gemma-2-9b", {"batch_size": 1, "seq_len": 4096, "precision": "amp-bf16"})
    trained = doc("max-batch", full, "--gpu", "h100-sxm", "--json")
    assert trained["max_batch_size"] == 0  # what the implicit full fine-tune answered


def test_max_batch_with_workload_flags_equals_the_spec(tmp_path: Path) -> None:
    keys = {"mode": "inference", "batch_size": 1, "prompt_len": 1024, "max_new_tokens": 1024, "precision": "bf16"}
    spec = spec_file(tmp_path, "gemma-2-9b", {**keys, "runtime": "vllm", "kv_cache_dtype": "fp8"})
    flags = ["--prompt-len", "1024", "--max-new-tokens", "1024", "--runtime", "vllm", "--kv-cache-dtype", "fp8"]
    expected = doc("max-batch", spec, "--gpu", "h100-sxm", "--json")
    assert doc("max-batch", "--model", "gemma-2-9b", "--mode", "inference", *flags, "--gpu", "h100-sxm", "--json") == (
        expected
    )
    # the mode is implied by --prompt-len: the same answer without --mode
    assert doc("max-batch", "--model", "gemma-2-9b", *flags, "--gpu", "h100-sxm", "--json") == expected


def test_max_batch_with_qlora_is_a_training_run(tmp_path: Path) -> None:
    """--qlora RANK: LoRA of rank RANK on every linear layer of an nf4 base; it implies train."""
    keys = {"batch_size": 1, "seq_len": 1024, "precision": "amp-bf16"}
    qlora = {"quantization": "nf4", "adapter": {"type": "lora", "rank": 16, "targets": "all-linear"}}
    spec = spec_file(tmp_path, "llama-3.1-8b", {**keys, **qlora})
    expected = doc("max-batch", spec, "--gpu", "rtx-4090", "--json")
    flags = ["--qlora", "16", "--seq-len", "1024"]
    got = doc("max-batch", "--model", "llama-3.1-8b", *flags, "--gpu", "rtx-4090", "--json")
    assert got == expected and expected["max_batch_size"] > 0


def test_max_seq_takes_a_batch_size(tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "qwen2.5-0.5b", {**GEMMA_SERVED, "batch_size": 4})
    expected = doc("max-seq", spec, "--gpu", "t4", "--json")
    assert doc("max-seq", "--model", "qwen2.5-0.5b", "--batch-size", "4", "--gpu", "t4", "--json") == expected
    assert expected["max_seq_len"] > 0


def test_sweep_keeps_its_lists_and_takes_the_other_flags(tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "qwen2.5-0.5b", {**GEMMA_SERVED, "attention": "eager"})
    grid = ["--batch-size", "1,2,4", "--seq-len", "512,2048", "--gpu", "t4", "--json"]
    expected = doc("sweep", spec, *grid)
    assert doc("sweep", "--model", "qwen2.5-0.5b", "--mode", "inference", "--attention", "eager", *grid) == expected
    assert [point["batch_size"] for point in expected["points"]] == [1, 1, 2, 2, 4, 4]


def test_estimate_with_lora_equals_the_spec(tmp_path: Path) -> None:
    lora = {"adapter": {"type": "lora", "rank": 8, "targets": "all-linear"}}
    spec = spec_file(tmp_path, "qwen2.5-0.5b", {"batch_size": 2, "seq_len": 512, "precision": "amp-bf16", **lora})
    expected = doc("estimate", spec, "--json")
    flags = ["--lora", "8", "--batch-size", "2", "--seq-len", "512"]
    assert doc("estimate", "--model", "qwen2.5-0.5b", *flags, "--json") == expected
    assert expected["trainable_params"] < expected["params"] // 50  # adapters only


def test_fit_and_plan_take_the_flags(tmp_path: Path) -> None:
    qlora = {"quantization": "nf4", "adapter": {"type": "lora", "rank": 16, "targets": "all-linear"}}
    spec = spec_file(tmp_path, "qwen2.5-0.5b", {"batch_size": 2, "seq_len": 4096, "precision": "amp-bf16", **qlora})
    flags = ["--model", "qwen2.5-0.5b", "--qlora", "16", "--batch-size", "2"]
    assert doc("fit", *flags, "--json") == doc("fit", spec, "--json")
    assert doc("plan", *flags, "--gpu", "t4", "--json") == doc("plan", spec, "--gpu", "t4", "--json")


def test_flags_override_a_spec_file_on_every_command(tmp_path: Path) -> None:
    base = {"mode": "inference", "batch_size": 1, "seq_len": 1024, "precision": "bf16"}
    spec = spec_file(tmp_path, "qwen2.5-0.5b", base)
    edited = spec_file(tmp_path, "qwen2.5-0.5b", {**base, "precision": "fp32", "kv_cache_dtype": "fp8"}, "edited.yaml")
    flags = ["--precision", "fp32", "--kv-cache-dtype", "fp8"]
    assert doc("max-batch", spec, *flags, "--gpu", "t4", "--json") == doc("max-batch", edited, "--gpu", "t4", "--json")
    assert doc("max-seq", spec, *flags, "--gpu", "t4", "--json") == doc("max-seq", edited, "--gpu", "t4", "--json")
    bandwidth = ["--gpu", "t4", "--json"]
    assert doc("bandwidth", str(spec), *flags, *bandwidth) == doc("bandwidth", str(edited), *bandwidth)


def test_report_takes_the_model_and_the_flags(tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "qwen2.5-0.5b", GEMMA_SERVED)
    code, by_hand, err = run("report", spec, "--gpu", "t4")
    assert code == 0, err
    code, by_flags, err = run("report", "--model", "qwen2.5-0.5b", "--mode", "inference", "--gpu", "t4")
    assert code == 0, err
    assert by_flags.replace("--model qwen2.5-0.5b", str(spec)) == by_hand


# --- bandwidth --dtype with a model ---------------------------------------------------------------------


def test_bandwidth_of_a_model_in_fp8(tmp_path: Path) -> None:
    """--dtype fp8 with --model: the linear layers at 1 byte per parameter (quantization: fp8), the
    embeddings, LM head and norms at the config's bf16."""
    spec = spec_file(tmp_path, "llama-3.1-70b", {**GEMMA_SERVED, "quantization": "fp8"})
    expected = doc("bandwidth", str(spec), "--gpu", "h100-sxm", "--json")
    got = doc("bandwidth", "--model", "llama-3.1-70b", "--dtype", "fp8", "--gpu", "h100-sxm", "--json")
    assert got == expected and got["dtype"] == "fp8"
    # Llama 3.1 70B: 80 layers, hidden 8192, vocab 128,256, LM head untied; 70,553,706,496 parameters
    embeddings, norms = 2 * 128_256 * 8192, (2 * 80 + 1) * 8192
    linear = 70_553_706_496 - embeddings - norms
    assert got["n_params"] == 70_553_706_496
    # fp8 keeps one fp32 scale per weight matrix (7 per layer) beside its 1-byte weights
    assert got["weights_bytes"] == linear * 1 + 7 * 80 * 4 + (embeddings + norms) * 2
    in_bf16 = doc("bandwidth", "--model", "llama-3.1-70b", "--dtype", "bf16", "--gpu", "h100-sxm", "--json")
    assert in_bf16["weights_bytes"] == 70_553_706_496 * 2 and in_bf16["dtype"] == "bf16"


# --- refusals: one line naming the flag, exit 2 ----------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "line"),
    [
        ("max-batch --model gpt2 --gpu h100 --batch-size 4", "--batch-size: max-batch searches"),
        ("max-seq --model gpt2 --gpu h100 --seq-len 64", "--seq-len: max-seq searches"),
        ("max-seq --model gpt2 --gpu h100 --prompt-len 64", "--prompt-len: max-seq searches"),
        ("max-seq --model gpt2 --gpu h100 --max-new-tokens 8", "--max-new-tokens: max-seq searches"),
        ("estimate --model gpt2 --lora 8 --qlora 8", "--lora and --qlora: give one"),
        ("estimate --model gpt2 --adapter ia3 --lora 8", "--adapter and --lora: give one"),
        ("fit --model gpt2 --qlora 8 --quantization int8", "--qlora and --quantization: give one"),
        ("bandwidth --model gpt2 --gpu h100 --batch 2 --batch-size 2", "--batch and --batch-size: give one"),
        ("bandwidth --model gpt2 --gpu h100 --dtype fp8 --precision fp16", "--dtype and --precision: give one"),
        ("bandwidth --params 7B --gpu h100 --mode inference", "--mode: sets a workload key"),
        ("plan --gpu h100 --qlora 8", "--qlora: sets a workload key"),
        ("bandwidth --model gpt2 --gpu h100 --dtype int3", "dtype: unknown 'int3'"),
    ],
)
def test_a_contradiction_is_one_line_naming_the_flag(args: str, line: str) -> None:
    code, out, err = run(*args.split())
    errors = [text for text in err.splitlines() if text.startswith("error:")]
    assert code == 2 and out == "" and len(errors) == 1, err
    assert line in errors[0]
    assert "Traceback" not in err


def test_a_refused_flag_is_left_out_of_help() -> None:
    code, out, _ = run("max-batch", "--help")
    assert code == 0 and "--batch-size" not in out and "--seq-len" in out
    code, out, _ = run("max-seq", "--help")
    assert code == 0 and "--seq-len" not in out and "--batch-size" in out
    assert "With --model alone: inference" in out  # the command's default, in --mode's help


@pytest.mark.parametrize("flag", ["--lora", "--qlora"])
def test_a_rank_past_the_largest_names_the_flag(flag: str) -> None:
    # the adapter section takes ranks up to 65,536 (spec/llm.py MAX_RANK); the flag's error names the flag
    result = CliRunner().invoke(app, ["estimate", "--model", "llama-3.1-8b", flag, "65537"])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {flag}: rank 65537 is more than 65,536"
