"""bitsandbytes' paged optimizer states: CUDA managed memory outside the allocated peak, shown on their own
line, counted by the one fit verdict only with ``workload.paged_states: device``; every command agrees.

The paging rule is bitsandbytes' (bitsandbytes/optim/optimizer.py, ``get_state_buffer``: a parameter of fewer
than 1e5 elements gets ``torch.zeros_like``, a larger one ``F.get_paged``, a ``cudaMallocManaged`` buffer in
bitsandbytes/functional.py); the expected bytes below are worked out by hand from it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_errors import estimate_error_line
from typer.testing import CliRunner

from vramcalc.choices import Optimizer
from vramcalc.cli import app
from vramcalc.core.optimizer import paged_state_bytes_for

#: (count, rows, columns): a 1000 x 512 embedding (512,000 elements: paged), two 512-element norm weights and
#: a 300 x 300 matrix (90,000 elements, below the 100,000 threshold: not paged).
TENSORS = [(1, 1000, 512), (2, 512, 1), (1, 300, 300)]
PAGED_MIN = 100_000


def test_paged_32bit_split_by_hand() -> None:
    # fp32 states, 2 per tensor, each rounded to 512 B on the allocator:
    #   embedding 512,000 x 4 = 2,048,000 (whole blocks); norm 512 x 4 = 2,048; 90,000 x 4 = 360,000 -> 360,448
    #   all on the device: 2 x (2,048,000 + 2 x 2,048 + 360,448) = 4,825,088
    # paged: the embedding's two states, exact bytes: 2 x 2,048,000 = 4,096,000; the rest stays: 729,088
    split = paged_state_bytes_for(Optimizer.paged_adamw_32bit, TENSORS, 2, PAGED_MIN)
    assert split.managed_bytes == 4_096_000
    assert split.device_bytes == 4_825_088 - 4_096_000 == 729_088


def test_paged_8bit_split_by_hand() -> None:
    # 8-bit states in 256-element blocks (bitsandbytes 0.44 on) with an fp32 absmax each; tensors under
    # 4096 elements keep fp32:
    #   embedding: 2 x (512,000 uint8 + absmax 2,000 x 4 = 8,000 -> 8,192)
    #   norms: 2 x 2 x 2,048 fp32; 300 x 300: 2 x (90,000 -> 90,112 + absmax 352 x 4 = 1,408 -> 1,536)
    #   total 2 x (520,192 + 4,096 + 91,648) = 1,231,872
    # paged: only the embedding's two uint8 buffers (2 x 512,000); its absmax stays a device tensor
    split = paged_state_bytes_for(Optimizer.paged_adamw_8bit, TENSORS, 2, PAGED_MIN)
    assert split.managed_bytes == 1_024_000
    assert split.device_bytes == 1_231_872 - 1_024_000 == 207_872
    # up to 0.43.x, 2048-element blocks: embedding absmax 250 x 4 = 1,000 -> 1,024; 300 x 300: 44 x 4 -> 512
    #   total 2 x (513,024 + 4,096 + 90,624) = 1,215,488
    old = paged_state_bytes_for(Optimizer.paged_adamw_8bit, TENSORS, 2, PAGED_MIN, block=2048)
    assert old.managed_bytes == 1_024_000
    assert old.device_bytes == 1_215_488 - 1_024_000 == 191_488


def test_nothing_paged_below_the_threshold() -> None:
    small = [(3, 256, 256)]  # 65,536 elements each
    split = paged_state_bytes_for(Optimizer.paged_adamw_32bit, small, 2, PAGED_MIN)
    assert split.managed_bytes == 0
    assert split.device_bytes == 3 * 2 * 65_536 * 4


SPEC = """\
name: paged
model: {{preset: llama-2-7b}}
workload:
  batch_size: 1
  seq_len: 512
  precision: bf16
  optimizer: paged-adamw-8bit
  optimizer_in_backward: true
  gradient_checkpointing: full
{extra}"""

#: Llama-2-7B in bf16 is 6,738,415,616 x 2 B = 12.55 GiB of weights; its paged 8-bit states are one byte per
#: element of every tensor of 100,000 elements or more, twice: 2 x (6,738,415,616 - 65 x 4,096 norm weights)
#: = 13,476,298,752 B = 12.55 GiB. A 24 GiB card holds the step without them, not with them.
CARD = "24GiB"
MANAGED = 2 * (6_738_415_616 - 65 * 4_096)


def write(tmp_path: Path, extra: str = "") -> str:
    path = tmp_path / "paged.yaml"
    path.write_text(SPEC.format(extra=extra), encoding="utf-8")
    return str(path)


def run(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize(
    ("extra", "fits"), [("", True), ("  paged_states: host-ok\n", True), ("  paged_states: device\n", False)]
)
def test_every_command_gives_the_one_verdict(tmp_path: Path, extra: str, fits: bool) -> None:
    spec = write(tmp_path, extra)
    est = run("estimate", spec, "--gpu", CARD, "--json")
    assert est["paged_optimizer_bytes"] == MANAGED
    assert est["paged_states_in_fit"] is (not fits)
    gpu = est["gpu"]
    counted = MANAGED if not fits else 0
    assert gpu["needed_bytes"] == est["total_bytes"] + counted  # the allocated peak and total never include them
    assert gpu["fits"] is fits
    (check,) = run("check", spec, "--gpu", CARD, "--format", "json")
    assert (check["needed_bytes"], check["fits"]) == (gpu["needed_bytes"], fits)
    assert (run("max-batch", spec, "--gpu", CARD, "--json")["max_batch_size"] >= 1) is fits
    assert (run("max-seq", spec, "--gpu", CARD, "--json")["max_seq_len"] >= 512) is fits


def test_sweep_counts_them_under_device(tmp_path: Path) -> None:
    runner = CliRunner()
    spec = write(tmp_path, "  paged_states: device\n")
    out = runner.invoke(app, ["sweep", spec, "--gpu", CARD, "--batch-size", "1", "--format", "csv"])
    assert out.exit_code == 0, out.output
    _batch, _seq, total, fits, needed, _available = out.stdout.splitlines()[1].split(",")
    assert int(needed) == int(total) + MANAGED
    assert fits == "false"


def test_text_shows_them_on_their_own_line(tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["estimate", write(tmp_path), "--gpu", CARD])
    assert out.exit_code == 0, out.output
    assert "paged optimizer states" in out.stdout
    assert "managed memory" in out.stdout


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ("  optimizer: adamw\n  paged_states: device\n", "optimizer adamw"),
        ("  paged_states: device\n", "optimizer not given"),
        ("  optimizer: paged-adamw-8bit\n  paged_states: sometimes\n", "paged_states"),
    ],
)
def test_bad_paged_states_is_one_line_exit_2(tmp_path: Path, workload: str, message: str) -> None:
    body = "name: b\nmodel: {preset: llama-2-7b}\nworkload:\n  batch_size: 1\n  seq_len: 64\n" + workload
    line = estimate_error_line(tmp_path / "bad.yaml", body)
    assert "paged_states" in line and message in line
