"""Each library's key rules (``check_keys`` of its module in vramcalc/stacks/) refuse a spec in every command
that reads it: one line, exit 2, naming the file and the key, never a number. The rules run when the spec is
resolved, so this holds each command to it: a command that printed a figure for such a spec would have
estimated a combination no library runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from vramcalc.cli import app

LLAMA = {"preset": "llama-3.1-8b"}
TRAIN = {"mode": "train", "batch_size": 1, "seq_len": 512, "precision": "bf16", "optimizer": "adamw"}
SERVE = {"mode": "inference", "batch_size": 1, "prompt_len": 256, "max_new_tokens": 256}

#: (library, spec, the start of the error after the file name): one rule of each module's ``check_keys``.
CASES = [
    ("llama.cpp", {"model": LLAMA, "workload": {**SERVE, "cache_type_k": "q8_0"}}, "workload.cache_type_k: only"),
    (
        "llama.cpp",
        {"model": LLAMA, "workload": {**SERVE, "quantization": "q4_k_m", "kv_block_size": 16}},
        "workload.kv_block_size: not a llama.cpp setting",
    ),
    (
        "techniques",
        {"model": LLAMA, "workload": {**TRAIN, "cross_entropy": "chunked", "adapter": {"rank": 8}}},
        "workload.cross_entropy: only modelled for full fine-tuning",
    ),
    (
        "techniques",
        {"model": LLAMA, "workload": {**TRAIN, "activation_offloading": True}, "parallel": {"data": 2}},
        "workload.activation_offloading: not modelled with parallel:",
    ),
    (
        "PyTorch releases",
        {"model": LLAMA, "workload": {**TRAIN, "optimizer_in_backward": True, "versions": {"torch": "2.0.1"}}},
        "workload.optimizer_in_backward: needs PyTorch 2.1",
    ),
    (
        "DeepSpeed",
        {"model": LLAMA, "workload": {**SERVE, "versions": {"deepspeed": "0.14.0"}}},
        "workload.versions.deepspeed: 0.14.0 names a DeepSpeed release, but the workload does not train",
    ),
    (
        "bitsandbytes",
        {"model": LLAMA, "workload": {**TRAIN, "paged_states": "device"}},
        "workload.paged_states: only valid with optimizer paged-adamw-8bit or paged-adamw-32bit",
    ),
    (
        "litgpt",
        {"model": LLAMA, "workload": {**SERVE, "runtime": "litgpt", "kv_block_size": 16}},
        "workload.kv_block_size: not a setting of litgpt's generate",
    ),
    (
        "torchao",
        {"model": LLAMA, "workload": {**SERVE, "quantization": "int8_weight_only"}},
        "workload.runtime: torchao int8_weight_only is modelled as transformers runs it eagerly",
    ),
]
COMMANDS = [
    ["estimate"],
    ["estimate", "--gpu", "h100-sxm"],
    ["check", "--gpu", "h100-sxm"],
    ["max-batch", "--gpu", "h100-sxm"],
    ["sweep", "--batch-size", "1,2", "--gpu", "h100-sxm"],
    ["plan", "--gpu", "h100-sxm", "--max-gpus", "2"],
    ["fit", "--max-gpus", "2"],
    ["bandwidth", "--gpu", "h100-sxm"],
    ["report"],
]


@pytest.mark.parametrize(("library", "spec", "error"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_every_command_refuses_what_a_library_does_not_run(
    tmp_path: Path, library: str, spec: dict[str, object], error: str
) -> None:
    path = tmp_path / "rule.yaml"
    path.write_text(yaml.safe_dump({"name": "rule", **spec}), encoding="utf-8")
    runner = CliRunner()
    for command in COMMANDS:
        args = [command[0], str(path), *command[1:]]
        if command[0] == "report":
            args += ["-o", str(tmp_path / "report.html")]
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (library, command, result.output)
        lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        assert lines and lines[0].startswith(f"error: {path}: {error}"), (library, command, result.stderr)
        assert "Traceback" not in result.output
