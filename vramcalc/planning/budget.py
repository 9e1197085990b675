"""The budget of a card: its usable memory, the reserve kept free, and the one fit verdict every
command uses.
"""

from __future__ import annotations

from dataclasses import dataclass

from vramcalc.core.estimate import Estimate
from vramcalc.engine import estimate
from vramcalc.hardware.catalog import GPU
from vramcalc.spec.models import Spec
from vramcalc.spec.target import NO_RESERVE, Reserve

#: Largest GPU count the sharded-plan search tries unless --max-gpus says otherwise (as `vramcalc plan`).
DEFAULT_MAX_GPUS = 64


#: NVIDIA cards of compute capability below 8.0 (Pascal, Volta, Turing): no bf16 tensor cores, so
#: bf16 precisions are not suggested there (PyTorch can only emulate bf16 on them, slowly).
NO_BF16 = frozenset(
    {
        "t4",
        "v100-16gb-sxm2",
        "v100-32gb-sxm2",
        "v100-16gb-pcie",
        "v100-32gb-pcie",
        "titan-rtx",
        "titan-x-pascal",
        "rtx-2080-ti",
    }
)


@dataclass(frozen=True)
class Budget:
    """One card as the planning commands see it (int bytes)."""

    gpu_id: str
    gpu_name: str
    usable_bytes: int
    capacity_basis: str
    hopper_or_newer: bool = False
    reserve: Reserve = NO_RESERVE
    count: int = 1
    bf16: bool = True  # the card has bf16 tensor cores (bf16 precisions are suggested)
    sharded: bool = False  # ``count`` is the GPU count of the spec's parallel section (figures per GPU)

    @property
    def reserve_bytes(self) -> int:
        return self.reserve.bytes_of(self.usable_bytes)

    @property
    def available_bytes(self) -> int:
        """Usable memory minus the reserve (never below zero: a reserve larger than the card leaves
        nothing): what the estimate's total is compared with."""
        return max(0, self.usable_bytes - self.reserve_bytes)


def capacity_basis(gpu: GPU) -> str:
    """Which capacity figure a card is compared with, and why (one line)."""
    if gpu.driver_total_mib:
        return (
            f"driver total {gpu.driver_total_mib:,} MiB (nvidia-smi memory.total: the most CUDA can allocate; "
            f"the nominal {gpu.capacity:g} {gpu.capacity_unit} is the DRAM size)"
        )
    unit = "GiB" if gpu.capacity_is_binary or gpu.capacity_unit == "GiB" else "GB"
    return (
        f"nominal {gpu.capacity:g} {gpu.capacity_unit} read as {unit} (the catalog has no driver total; "
        "the driver exposes a little less)"
    )


def budget_for(gpu: GPU, reserve: Reserve = NO_RESERVE, count: int = 1, sharded: bool = False) -> Budget:
    """The budget of a catalog card."""
    basis = capacity_basis(gpu)
    bf16 = gpu.id not in NO_BF16
    return Budget(gpu.id, gpu.name, gpu.usable_bytes, basis, gpu.hopper_or_newer, reserve, count, bf16, sharded)


def estimate_on(spec: Spec, budget: Budget) -> Estimate:
    """The estimate for the card's generation (its cuBLAS workspace size)."""
    return estimate(spec, hopper_or_newer=budget.hopper_or_newer)
