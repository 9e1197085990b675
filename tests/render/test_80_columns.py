"""Every command's terminal output fits an 80-column terminal without cutting a value: no line longer
than the width, no "…" (rich's mark of a cut cell), at COLUMNS=80; and the same commands still run at
120 columns. Every registered command needs a case here (a new command without one fails)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import typer
import typer.rich_utils
from typer.testing import CliRunner

from vramcalc.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent.parent
HF = "tests/data/hf_configs"

#: Representative runs of each command on the bundled configs ({tmp}: the working directory, the test's tmp_path).
CASES: dict[str, list[str]] = {
    "estimate": [
        "configs/bert-base.yaml",
        "configs/resnet-50.yaml --gpu rtx-4090 --timeline",  # the longest component label
        "configs/llama-3-8b-inference.yaml --gpu a100-80gb-sxm --timeline",  # vLLM lines and verdict
        "configs/llama-2-70b-fsdp.yaml --timeline",  # per-GPU plan lines
        "configs/llama-2-7b-qlora.yaml",  # trainable and quantized parameters
        "configs/mixtral-8x7b.yaml --gpu h100-sxm",  # does not fit
        f"--hf-config {HF}/mistral-7b.json --mode inference --batch-size 4 --prompt-len 2048 "
        "--max-new-tokens 512 --precision bf16 --gpu a100-80gb-sxm",
        "--model llama-3.1-8b --mode inference --gpu h100-sxm",
    ],
    "bandwidth": [
        "--gpu a100-80gb-sxm",
        "configs/llama-2-7b.yaml --gpu a100-80gb-sxm",
        "--params 70B --gpu h100-sxm --batch 8",
        "--model mixtral-8x7b --gpu h100-sxm --batch 8",  # the experts and routing rows
        "--bus-width 256 --memory-type GDDR6 --memory-clock 1750MHz --params 7B",
    ],
    "gpus": ["", "--sort bandwidth --vendor nvidia", "--vendor apple"],
    "fit": [
        "configs/bert-base.yaml",
        "configs/llama-2-70b-fsdp.yaml",
        "configs/llama-3-70b.yaml --gpu rtx-4090",
        "configs/gpt-megatron-tp.yaml",  # a plan note with a word longer than its column
    ],
    "max-batch": [
        "configs/bert-base.yaml --gpu a100-80gb-sxm",
        "configs/llama-3-8b-inference.yaml --gpu a100-80gb-sxm",
    ],
    "max-seq": ["configs/gpt2.yaml --gpu rtx-4090"],
    "sweep": [
        "configs/bert-base.yaml --batch-size 1,2,4,8,16,32,64 --seq-len 64,128,256,384,512 --gpu a100-80gb-sxm",
        "configs/llama-3-8b.yaml --batch-size 1,8,64 --seq-len 128,256,512,1024,2048,4096,8192 --gpu h100-sxm",
    ],
    # Every bundled spec on one card (mixtral-8x7b does not fit an 80 GB card); one that fits nothing.
    "check": ["configs/ --gpu a100-80gb-sxm", "configs/llama-3-70b.yaml --gpu rtx-4090"],
    "compare": ["configs/bert-base.yaml --measured {tmp}/stats.json --nvidia-smi-used 10GiB"],
    "report": ["configs/bert-base.yaml configs/gpt2.yaml -o {tmp}/report.html"],
    "import": [f"{HF}/llama-3-8b.json", f"{HF}/t5-base.json"],
    "plan": [
        "configs/llama-3-70b.yaml --gpu a100-80gb-sxm",
        "configs/llama-2-70b-fsdp.yaml --gpu h100-sxm",
        "configs/gpt2.yaml --gpu 40GiB --gpus 8",  # a capacity-only card, exactly 8 GPUs
    ],
    "examples": [""],
    "models": ["", "llama-3", "qwen 7b"],  # the list of bundled examples (with a name it prints a YAML file)
}
#: Commands whose output is a machine format, not terminal text (nothing to wrap).
MACHINE = {"schema"}


def _commands() -> list[str]:
    return sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def _runs() -> list[tuple[str, str]]:
    return [(name, args) for name, cases in CASES.items() for args in cases]


def _invoke(name: str, args: str, width: int, tmp_path: Path) -> tuple[int, list[str]]:
    stats = tmp_path / "stats.json"  # the working directory (see in_root)
    if not stats.exists():
        # A memory_stats() dump: peaks chosen near configs/bert-base.yaml's estimate, and counters set
        # so that the note lines are printed (their values are arbitrary).
        doc = {"allocated_bytes.all.peak": 9 * 10**9, "reserved_bytes.all.peak": 98 * 10**8}
        stats.write_text(json.dumps(doc | {"num_alloc_retries": 3, "num_ooms": 1}), encoding="utf-8")
    argv = [name, *shlex.split(args.replace("{tmp}/", ""))]
    env = {"COLUMNS": str(width), "TERMINAL_WIDTH": str(width)}
    result = runner.invoke(app, argv, env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, (result.stdout + result.stderr).splitlines()


def test_every_command_has_a_case() -> None:
    assert set(_commands()) == set(CASES) | MACHINE


@pytest.fixture
def in_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Run in tmp_path, where configs/ and tests/ lead to the repository's: paths stay short."""
    for name in ("configs", "tests"):
        (tmp_path / name).symlink_to(ROOT / name, target_is_directory=True)
    monkeypatch.chdir(tmp_path)


@pytest.mark.usefixtures("in_root")
@pytest.mark.parametrize(("name", "args"), _runs(), ids=[f"{n} {a}" for n, a in _runs()])
def test_fits_80_columns(name: str, args: str, tmp_path: Path) -> None:
    code, lines = _invoke(name, args, 80, tmp_path)
    assert code in (0, 1), "\n".join(lines)  # 1: does not fit / off tolerance, a verdict, not an error
    assert lines, "no output"
    too_long = [line for line in lines if len(line) > 80]
    assert not too_long, "\n".join(too_long)
    cut = [line for line in lines if "…" in line]
    assert not cut, "\n".join(cut)


@pytest.mark.usefixtures("in_root")
@pytest.mark.parametrize(("name", "args"), _runs(), ids=[f"{n} {a}" for n, a in _runs()])
def test_runs_at_120_columns(name: str, args: str, tmp_path: Path) -> None:
    code, lines = _invoke(name, args, 120, tmp_path)
    assert code in (0, 1), "\n".join(lines)
    assert all(len(line) <= 120 and "…" not in line for line in lines), "\n".join(lines)


@pytest.mark.usefixtures("in_root")
def test_gpus_wide_keeps_every_column(tmp_path: Path) -> None:
    _, narrow = _invoke("gpus", "", 80, tmp_path)
    _, wide = _invoke("gpus", "--wide", 80, tmp_path)
    header = next(line for line in wide if line.split()[:1] == ["id"])
    assert {"computed", "FP8", "link"} <= set(header.split())  # every column of the catalog table
    assert "computed" not in next(line for line in narrow if line.split()[:1] == ["id"]).split()
    assert max(map(len, wide)) > 80  # wider than the terminal, on purpose
    assert not any("…" in line for line in wide)


@pytest.mark.parametrize("name", [None, *_commands()])
def test_help_is_not_cut_at_80_columns(name: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    # typer reads TERMINAL_WIDTH once, at import (tests/conftest.py sets 200): set its width directly.
    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", 80)
    result = runner.invoke(app, [*([name] if name else []), "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert all(len(line) <= 80 for line in lines), result.output
    assert not [line for line in lines if "…" in line], result.output
