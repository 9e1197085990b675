"""vLLM's card-dependent batch defaults (vramcalc/stacks/vllm.py ``batch_defaults``), hand-derived from
``EngineArgs.get_batch_defaults`` in vllm/engine/arg_utils.py:

* since vLLM 0.9.0 (vllm-project/vllm#17885, "Use small max_num_batched_tokens for A100", on top of #17073):
  ``if device_memory >= 70 * GiB_bytes and "a100" not in device_name:`` OPENAI_API_SERVER gets
  ``max_num_batched_tokens`` 8192 and ``max_num_seqs`` 1024, else 2048 and 256;
* vLLM 0.8 (#12369, "[V1] Increase default batch size for H100/H200"): ``if "h100" in device_name or "h200" in
  device_name:`` 8192 tokens, with ``max_num_seqs`` 1024 kept for H100/H200 (#16158 reverted the others to 256).

``device_memory`` is ``current_platform.get_device_total_memory()``, what PyTorch reports: the catalog's driver
total less vllm.UNSEEN_BYTES (the H100 SXM5's 81,559 MiB less 440 MiB = 79.22 GiB, as vLLM logs it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.families import estimate
from vramcalc.hardware.lookup import get_gpu
from vramcalc.planning.budget import budget_for, estimate_on
from vramcalc.spec.load import parse_spec
from vramcalc.stacks import vllm
from vramcalc.units import GiB

runner = CliRunner()
QWEN = {"architecture": "decoder", "layers": 28, "hidden_size": 1536, "heads": 12, "kv_heads": 2, "ffn_size": 8960,
        "vocab_size": 151936, "mlp": "swiglu", "norm": "rmsnorm", "position": "rotary"}  # fmt: skip


@pytest.mark.parametrize(
    ("release", "name", "gib", "expected"),
    [
        ((0, 11), "NVIDIA H100 SXM5 80GB", 79.22, (8192, 1024)),  # 79.22 GiB >= 70, not an A100
        ((0, 11), "NVIDIA A100 80GB SXM4", 79.57, (2048, 256)),  # "a100" in the name (#17885)
        ((0, 11), "AMD Instinct MI300X", 191.57, (8192, 1024)),
        ((0, 11), "NVIDIA L40S", 44.56, (2048, 256)),  # under 70 GiB
        ((0, 9), "NVIDIA B200", 178.63, (8192, 1024)),
        ((0, 11), "Some card", 70.0, (8192, 1024)),  # device_memory >= 70 GiB: the boundary is large
        ((0, 11), "Some card", 69.99, (2048, 256)),
        ((0, 8), "NVIDIA H100 SXM5 80GB", 79.22, (8192, 1024)),  # 0.8: by name
        ((0, 8), "NVIDIA H200 SXM 141GB", 139.97, (8192, 1024)),
        ((0, 8), "NVIDIA B200", 178.63, (2048, 256)),  # 0.8: neither an H100 nor an H200
        ((0, 8), "NVIDIA A100 80GB SXM4", 79.57, (2048, 256)),
    ],
)
def test_batch_defaults_per_card(release: tuple[int, int], name: str, gib: float, expected: tuple[int, int]) -> None:
    tokens, seqs, _ = vllm.batch_defaults(release, vllm.Card(name, int(gib * GiB)))
    assert (tokens, seqs) == expected


def test_no_card_keeps_the_small_defaults() -> None:
    tokens, seqs, why = vllm.batch_defaults((0, 11), None)
    assert (tokens, seqs) == (2048, 256) and "--gpu" in why


def test_catalog_card_total_is_what_pytorch_reports() -> None:
    device = budget_for(get_gpu("h100")).card
    # vLLM sees 81,559 MiB (nvidia-smi memory.total of the H100 SXM5) - 440 MiB = 81,119 MiB = 79.22 GiB
    card = vllm.card_of(device.name, device.total_bytes)
    assert device.total_bytes == 81_559 * 2**20
    assert card.total_bytes == (81_559 - 440) * 2**20
    assert card.name == "NVIDIA H100 SXM5 80GB"


def _serving(**workload: Any) -> Any:
    wl = {"mode": "inference", "batch_size": 1, "seq_len": 4096, "max_new_tokens": 256, "precision": "bf16"}
    wl.update(workload)
    return parse_spec({"name": "t", "model": QWEN, "workload": wl})


@pytest.mark.parametrize(
    ("gpu", "tokens", "seqs"), [("h100", 8192, 1024), ("a100-80gb", 2048, 256), ("rtx-4090", 2048, 256)]
)
def test_named_card_sets_the_profile(gpu: str, tokens: int, seqs: int) -> None:
    result = estimate_on(_serving(), budget_for(get_gpu(gpu)))
    engine = result.llm.kv_pool.engine
    assert (engine.max_num_batched_tokens, engine.max_num_seqs) == (tokens, seqs)
    note = next(a for a in result.assumptions if a.startswith("max_num_batched_tokens not given"))
    assert f"max_num_batched_tokens not given: {tokens:,}, max_num_seqs not given: {seqs:,}" in note


def test_card_changes_the_non_kv_peak_only_through_the_profile() -> None:
    # 8192 tokens over 1024 requests profile more activations and logits than 2048 over 256
    small = estimate(_serving()).llm.kv_pool.non_kv_bytes
    large = estimate_on(_serving(), budget_for(get_gpu("h100"))).llm.kv_pool.non_kv_bytes
    assert large > small


def test_given_keys_win_and_the_other_default_follows_the_card() -> None:
    result = estimate_on(_serving(max_num_batched_tokens=4096), budget_for(get_gpu("h100")))
    engine = result.llm.kv_pool.engine
    assert (engine.max_num_batched_tokens, engine.max_num_seqs) == (4096, 1024)
    assert any(a.startswith("max_num_seqs not given: 1,024 (") for a in result.assumptions)


def test_v0_release_keeps_its_own_rule() -> None:
    result = estimate_on(_serving(versions={"vllm": "0.6.4"}), budget_for(get_gpu("h100")))
    engine = result.llm.kv_pool.engine
    # V0 without chunked prefill: max(max_model_len 4096, 2048); max_num_seqs 256
    assert (engine.max_num_batched_tokens, engine.max_num_seqs) == (4096, 256)


def test_estimate_and_check_with_a_gpu_agree(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    wl = {"mode": "inference", "batch_size": 1, "seq_len": 4096, "max_new_tokens": 256, "precision": "bf16"}
    path.write_text(yaml.safe_dump({"model": QWEN, "workload": wl}))
    out = runner.invoke(app, ["estimate", str(path), "--gpu", "h100"], env={"COLUMNS": "200"})
    assert out.exit_code in (0, 1), out.output
    assert "max_num_batched_tokens=8,192, max_num_seqs=1,024" in " ".join(out.output.split())
    explained = runner.invoke(app, ["estimate", str(path), "--gpu", "h100", "--explain"], env={"COLUMNS": "200"})
    assert "max_num_batched_tokens not given: 8,192, max_num_seqs not given: 1,024" in " ".join(
        explained.output.split()
    )
