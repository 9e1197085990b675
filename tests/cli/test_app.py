"""CLI: exit codes, stdout vs stderr, the --json contract, and one-line errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from spec_texts import TINY_SPEC as GOOD
from typer.testing import CliRunner

from vramcalc import __version__
from vramcalc.cli import app

runner = CliRunner()
CONFIGS = Path(__file__).resolve().parents[2] / "configs"
BERT = str(CONFIGS / "bert-base.yaml")


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag: str) -> None:
    result = runner.invoke(app, [flag])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"vramcalc {__version__}"


def test_short_version_flag_through_the_entry_point() -> None:
    # The console entry point picks the app from the first argument: -V must reach the version option.
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "vramcalc", "-V"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"vramcalc {__version__}\n" and done.stderr == ""


def test_estimate_table() -> None:
    result = runner.invoke(app, ["estimate", BERT])
    assert result.exit_code == 0, result.output
    for text in (
        "parameters",
        "gradients",
        "optimizer states",
        "activations",
        "inputs",
        "peak allocated",
        "total",
        "peak phase: backward",
    ):
        assert text in result.stdout
    assert result.stderr == ""


def test_estimate_json_contract() -> None:
    result = runner.invoke(app, ["estimate", BERT, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    for key in (
        "name",
        "params",
        "peak_phase",
        "components",
        "component_peaks",
        "peak_allocated_bytes",
        "overhead",
        "total_bytes",
        "phases",
    ):
        assert key in doc
    for key in ("parameters", "gradients", "optimizer_states", "activations", "inputs"):
        assert isinstance(doc["components"][key], int)
        assert isinstance(doc["component_peaks"][key], int)
    assert doc["peak_allocated_bytes"] == sum(doc["components"].values())
    assert doc["total_bytes"] == doc["peak_allocated_bytes"] + sum(doc["overhead"].values())
    assert doc["peak_allocated_bytes"] == max(doc["phases"].values())
    assert doc["params"] == 109_514_298


def test_flags_override_spec(write_spec) -> None:
    path = write_spec(GOOD)
    small = json.loads(runner.invoke(app, ["estimate", str(path), "--json"]).stdout)
    big = json.loads(
        runner.invoke(app, ["estimate", str(path), "--json", "--batch-size", "64", "--seq-len", "512"]).stdout
    )
    assert big["components"]["activations"] > small["components"]["activations"]
    fp32 = json.loads(
        runner.invoke(app, ["estimate", str(path), "--json", "--precision", "bf16", "--optimizer", "sgd"]).stdout
    )
    assert fp32["component_peaks"]["optimizer_states"] == 0
    assert fp32["component_peaks"]["parameters"] == small["component_peaks"]["parameters"] // 2


def test_gpu_headroom_in_json() -> None:
    result = runner.invoke(app, ["estimate", BERT, "--json", "--gpu", "a100-80gb-sxm"])
    assert result.exit_code == 0, result.output
    gpu = json.loads(result.stdout)["gpu"]
    # nvidia-smi shows 81920 MiB on an A100 80GB (catalog driver_total_mib, sourced there)
    assert gpu["usable_bytes"] == 81920 * 2**20
    assert gpu["fits"] is True
    assert gpu["headroom_bytes"] == gpu["usable_bytes"] - json.loads(result.stdout)["total_bytes"]


def test_schema_prints_json_schema() -> None:
    result = runner.invoke(app, ["schema"])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.stdout)
    assert {"model", "workload"} <= set(schema["properties"])


BAD_SPECS = {
    "unknown key": (GOOD.replace("  layers: 2", "  layers: 2\n  layerz: 3"), "model.layerz: unknown key"),
    "wrong type": (GOOD.replace("layers: 2", "layers: two"), "model.layers"),
    "float for int": (GOOD.replace("layers: 2", "layers: 2.5"), "model.layers"),
    "negative size": (GOOD.replace("hidden_size: 64", "hidden_size: -64"), "model.hidden_size"),
    "zero size": (GOOD.replace("batch_size: 2", "batch_size: 0"), "workload.batch_size"),
    "heads do not divide hidden": (GOOD.replace("heads: 4", "heads: 5"), "heads: 5 does not divide hidden_size 64"),
    "kv_heads do not divide heads": (
        GOOD.replace("heads: 4", "heads: 4\n  kv_heads: 3"),
        "kv_heads: 3 must divide heads",
    ),
    "unknown precision": (GOOD + "  precision: fp12\n", "workload.precision"),
    "empty file": ("", "empty spec"),
    "not a mapping": ("- 1\n- 2\n", "expected a mapping"),
    "yaml syntax error": ("model: [unclosed\n", "invalid YAML"),
    "duplicate key": (GOOD + "  batch_size: 4\n", "duplicate key 'batch_size'"),
    "missing workload": ("model:\n  layers: 2\n  hidden_size: 64\n  vocab_size: 10\n", "workload: not given"),
    "python object tag": ("!!python/object/apply:os.system ['echo hi']\n", "invalid YAML"),
    "alias bomb": (
        "a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
        "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
        "g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\nh: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\ni: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n"
        "j: &j [*i,*i,*i,*i,*i,*i,*i,*i,*i]\nk: &k [*j,*j,*j,*j,*j,*j,*j,*j,*j]\nl: &l [*k,*k,*k,*k,*k,*k,*k,*k,*k]\n",
        "aliases",
    ),
    "params smaller than layers": (GOOD.replace("  vocab_size: 100", "  params: 1K"), "model.params"),
}


@pytest.mark.parametrize("case", BAD_SPECS, ids=list(BAD_SPECS))
def test_bad_spec_is_one_line_exit_2(case: str, write_spec) -> None:
    text, expected = BAD_SPECS[case]
    path = write_spec(text)
    result = runner.invoke(app, ["estimate", str(path)])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {path}"), lines[0]
    assert expected in lines[0]
    assert "Traceback" not in result.output


def test_missing_file_and_directory(tmp_path: Path) -> None:
    for target, message in ((tmp_path / "nope.yaml", "no such file"), (tmp_path, "not a regular file")):
        result = runner.invoke(app, ["estimate", str(target)])
        assert result.exit_code == 2, result.output
        assert result.stderr.strip() == f"error: {target}: {message}"


def test_non_utf8_and_oversized(write_spec, tmp_path: Path) -> None:
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00\x01" * 10)
    result = runner.invoke(app, ["estimate", str(binary)])
    assert result.exit_code == 2 and "not UTF-8" in result.stderr
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * 2_000_000)
    result = runner.invoke(app, ["estimate", str(big)])
    assert result.exit_code == 2 and "limited to" in result.stderr


def test_several_problems_one_line_each(write_spec) -> None:
    path = write_spec(GOOD.replace("layers: 2", "layers: -1").replace("batch_size: 2", "batch_size: 0"))
    result = runner.invoke(app, ["estimate", str(path)])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("error: ") for line in lines)


def test_unknown_gpu_suggests_closest() -> None:
    result = runner.invoke(app, ["estimate", BERT, "--gpu", "a1000"])
    assert result.exit_code == 2
    assert "did you mean" in result.stderr and "vramcalc gpus" in result.stderr


def test_bad_flag_value_exits_2() -> None:
    result = runner.invoke(app, ["estimate", BERT, "--precision", "fp12"])
    assert result.exit_code == 2
    result = runner.invoke(app, ["estimate", BERT, "--batch-size", "0"])
    assert result.exit_code == 2


def test_console_entry_point_turns_usage_errors_into_one_line() -> None:
    # the installed `vramcalc` command (vramcalc.cli.main:run), as a user or CI calls it
    import subprocess
    import sys

    cases = [
        (["estimate", BERT, "--batch-size", "abc"], "error: Invalid value for '--batch-size'"),
        (["estimate", BERT, "--no-such-flag"], "error: No such option: --no-such-flag"),
        (["no-such-command"], "error: No such command 'no-such-command'."),
    ]
    for args, expected in cases:
        done = subprocess.run([sys.executable, "-m", "vramcalc", *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(expected), done.stderr
        assert done.stdout == ""
    ok = subprocess.run([sys.executable, "-m", "vramcalc", "--version"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout.startswith("vramcalc ")
