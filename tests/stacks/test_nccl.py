"""NCCL's buffers across GPUs (overhead ``nccl``): the per-communicator bytes from NCCL's source, checked
against the published figures they reproduce, the communicators each framework makes, and the keys.

References: NVIDIA/nccl#964 (nvidia-smi on 4 x A100 NVLink with 2023's PyTorch, NCCL 2.18: 544 MiB more
per new two-GPU group after its first all-reduce, 688 MiB on rank 0 of larger groups);
vllm-project/vllm#9699 (NCCL's own log on 8 x H200, NCCL 2.20: ``nvlsTotalSize 2415919104``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cli_errors import estimate_error_line

from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.hardware.lookup import get_gpu
from vramcalc.planning.budget import budget_for, estimate_on
from vramcalc.spec.load import parse_spec
from vramcalc.stacks.nccl import communicator_bytes, groups, nccl_of_torch
from vramcalc.units import MiB

MODEL = {"preset": "llama-3-8b"}
WORKLOAD = {"mode": "train", "batch_size": 1, "seq_len": 1024, "precision": "mixed-bf16", "optimizer": "adamw"}


def spec(parallel: dict[str, Any], **workload: Any) -> Any:
    return parse_spec({"name": "n", "model": MODEL, "workload": {**WORKLOAD, **workload}, "parallel": parallel})


def nccl(parallel: dict[str, Any], hopper: bool = False, **workload: Any) -> int:
    return estimate(spec(parallel, **workload), hopper_or_newer=hopper).overhead.get("nccl", 0)


def test_a_two_gpu_group_of_nccl_2_18_is_the_measured_544_mib() -> None:
    # NCCL 2.18 connects at creation: ring 24 channels x 12 MiB + the proxy pool 32 x 16 x 512 KiB = 544 MiB
    assert communicator_bytes(2, (2, 18), "nvswitch", 8, nvls=False) == (288 + 256) * MiB == 544 * MiB
    # PyTorch 2.1's wheel pins NCCL 2.18: FSDP over 2 GPUs has one communicator, the default group
    assert nccl({"gpus": 2, "fsdp": "full_shard"}, versions={"torch": "2.1.2"}) == 544 * MiB


def test_a_larger_group_adds_the_tree_as_measured_on_its_chain_end() -> None:
    # a middle rank of the tree's chain holds two more connections per channel (+288 MiB); rank 0, the
    # chain's end that #964 measured, one receive connection of 6 MiB per channel on A100s: 688 MiB
    middle = communicator_bytes(4, (2, 18), "nvswitch", 8, nvls=False)
    assert middle == 832 * MiB and middle - 24 * 6 * MiB == 688 * MiB


def test_nvls_of_nccl_2_20_on_eight_hopper_gpus_is_vllms_logged_size() -> None:
    # NVLS before 2.21: channels x 2 x (4 MiB + 2 MiB) per local rank; vLLM's log: 2,415,919,104 B for 8 GPUs
    with_nvls = communicator_bytes(8, (2, 20), "nvswitch", 8, nvls=True)
    assert with_nvls - communicator_bytes(8, (2, 20), "nvswitch", 8, nvls=False) == 2_415_919_104


def test_nvls_needs_nccl_2_17() -> None:
    # PyTorch 2.0's NCCL 2.14 predates NVLS: eight Hopper GPUs hold the ring and the eager pool only
    assert communicator_bytes(8, (2, 14), "nvswitch", 8, nvls=True) == (288 + 256 + 288) * MiB  # ring, pool, tree


def test_todays_nccl_by_interconnect() -> None:
    # lazy connection (2.22+): ring 288 MiB + cuMem channel structures 3 x 2 MiB x 32 = 192 MiB
    assert communicator_bytes(2, (2, 29), "nvswitch", 8, nvls=False) == 480 * MiB
    assert communicator_bytes(8, (2, 29), "nvswitch", 8, nvls=True) == (480 + 8 * 32) * MiB
    assert communicator_bytes(2, (2, 29), "pcie", 8, nvls=True) == (4 * 12 + 3 * 2 * 4) * MiB  # no NVLS on PCIe
    assert (
        nccl_of_torch(None) == (2, 30) and nccl_of_torch((2, 7, 0)) == (2, 26) and nccl_of_torch((2, 0, 1)) == (2, 14)
    )


@pytest.mark.parametrize(
    ("parallel", "sizes"),
    [
        ({"gpus": 2, "fsdp": "full_shard"}, [2]),  # DDP/FSDP: the default group is the data group
        ({"gpus": 4, "zero": 3}, [4, 4]),  # DeepSpeed clones the world for its data-parallel group
        ({"data": 2, "tensor": 2, "pipeline": 2, "distributed_optimizer": True}, [8, 2, 2, 2, 2]),  # + embedding
        ({"data": 4, "tensor": 2, "fsdp": "full_shard"}, [8, 4, 2]),  # a 2-D mesh: a group per dimension
        ({"gpus": 8, "fsdp": "hybrid", "shard_size": 4}, [8, 4, 2]),  # a shard and a replicate group
        ({"gpus": 1, "zero": 1}, []),
    ],
)
def test_communicators_per_gpu(parallel: dict[str, Any], sizes: list[int]) -> None:
    result = estimate(spec(parallel), hopper_or_newer=False)  # an A100 board: no NVLS
    assert result.parallel is not None and groups(result.parallel.plan) == sizes
    assert result.overhead.get("nccl", 0) == 480 * MiB * len(sizes)


def test_the_card_sets_the_interconnect_unless_the_spec_does() -> None:
    two = {"gpus": 2, "fsdp": "full_shard"}
    on_4090 = estimate_on(spec(two), budget_for(get_gpu("rtx-4090")))
    on_a100 = estimate_on(spec(two), budget_for(get_gpu("a100-80gb-sxm")))
    assert on_4090.overhead["nccl"] == 72 * MiB and on_a100.overhead["nccl"] == 480 * MiB
    assert on_a100.total_bytes - on_4090.total_bytes == (480 - 72) * MiB
    pinned = estimate_on(spec({**two, "interconnect": "pcie"}), budget_for(get_gpu("a100-80gb-sxm")))
    assert pinned.overhead["nccl"] == 72 * MiB


def test_overhead_nccl_replaces_the_model() -> None:
    given = parse_spec(
        {
            "name": "n",
            "model": MODEL,
            "workload": WORKLOAD,
            "parallel": {"gpus": 2, "zero": 3},
            "overhead": {"nccl": "1GiB"},
        }
    )
    result = estimate(given)
    assert result.overhead["nccl"] == 1024 * MiB
    assert any("overhead.nccl" in note for note in result.assumptions)
    one_gpu = parse_spec({"name": "n", "model": MODEL, "workload": WORKLOAD, "overhead": {"nccl": "1GiB"}})
    alone = estimate(one_gpu)
    assert "nccl" not in alone.overhead and "overhead.nccl not used: one GPU" in alone.assumptions


def test_single_gpu_estimates_have_no_nccl() -> None:
    plain = parse_spec({"name": "n", "model": MODEL, "workload": {**WORKLOAD, "precision": "bf16"}})
    assert set(estimate(plain).overhead) == {"cuda_context", "allocator_reserve"}


def test_a_pinned_nccl_release() -> None:
    assert nccl({"gpus": 2, "fsdp": "full_shard"}, versions={"nccl": "2.21.5"}) == 736 * MiB  # eager + cuMem
    with pytest.raises(SpecError, match="versions.nccl: 'abc' is not a release number"):
        spec({"gpus": 2}, versions={"nccl": "abc"})


def test_cli_bad_interconnect_is_one_error_line(tmp_path: Path) -> None:
    line = estimate_error_line(
        tmp_path / "ic.yaml",
        "model: {preset: llama-3-8b}\n"
        "workload: {mode: train, batch_size: 1, seq_len: 512, precision: mixed-bf16}\n"
        "parallel: {gpus: 2, zero: 3, interconnect: infiniband}\n",
    )
    assert "parallel.interconnect" in line
