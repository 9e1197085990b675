"""Driver totals: nvidia-smi's memory.total for cards where a public nvidia-smi output shows it.

Each expected MiB figure below is typed from the nvidia-smi output at the URL in its comment (the card
name is printed in the same row or ``nvidia-smi -q`` block), not read from the catalog. The nominal
capacities are the vendor's printed GB read as GiB (binary DRAM).
"""

from __future__ import annotations

import pytest

from vramcalc.hardware.catalog import load_catalog
from vramcalc.hardware.lookup import get_gpu
from vramcalc.units import GiB, MiB

GLS = "https://github.com/thamada/gls/blob/"
SMI = "https://github.com/thamada/nvidia-smi/blob/"

# (catalog id, memory.total MiB as nvidia-smi prints it, nominal GiB, source URL)
BELOW_NOMINAL = [
    # 'NVIDIA H200', 700 W (SXM), driver 550.90.12: "1MiB / 143771MiB"; FB Memory Total 143771 MiB.
    ("h200-sxm", 143_771, 141, GLS + "c0bed08d0e20bb1abccfee5aeedb80bc63b493a6/gls/H200_smi.py"),
    # 'NVIDIA H100 NVL', 310 W, driver 550.54.14: "0MiB / 95830MiB".
    ("h100-nvl", 95_830, 94, SMI + "198aebb60732de6969556867659756f4685637c2/nvsim/H100NVLx2_smi.py"),
    # 'NVIDIA GH200 480GB', driver 550.127.05: "3MiB / 97871MiB" (HBM3 only).
    ("gh200-96gb", 97_871, 96, GLS + "b2f1cedeb098383fb647ea9bc7b51e3fec596989/gls/GH200_smi.py"),
    # 'NVIDIA A40', 300 W, driver 550.127.05: "1MiB / 46068MiB".
    ("a40", 46_068, 48, SMI + "5f6b772848f86e938c96cb7b6ff46d11f4957cba/nvsim/A40x10_smi.py"),
    # 'NVIDIA RTX A6000', driver 550.127.05, ECC Mode Current: Enabled: FB Memory Total 46068 MiB.
    ("rtx-a6000", 46_068, 48, GLS + "ecc9fb580a9542c249e51fec30eba202cef7eba3/gls/RTX_A6000_x9_smi.py"),
    # 'NVIDIA RTX 6000 Ada Generation', driver 550.127.05, ECC Mode Current: Disabled: 49140 MiB.
    ("rtx-6000-ada", 49_140, 48, SMI + "b09ef139265ffc7e3c78006346981de8e4d70499/gls/RTX6000Ada_x8_smi.py"),
    # 'NVIDIA GeForce RTX 4060 Ti', driver 550.54.14: "0MiB / 16380MiB" (the 16 GB variant).
    ("rtx-4060-ti-16gb", 16_380, 16, SMI + "03fbe6e68c0bb4c28b72d5da786a9712a33cf408/nvsim/RTX4060Ti_smi.py"),
]

EQUAL_TO_NOMINAL = [
    # 'Tesla V100-SXM2-16GB', driver 550.127.05: "1MiB / 16384MiB" (240 MiB listed apart as Reserved).
    ("v100-16gb-sxm2", 16_384, 16, GLS + "5b0ef6cbf13815ba81660ecae60f8b29ca38a86d/gls/V100_x8_smi.py"),
    # 'Tesla V100-SXM2...' (name cut by nvidia-smi), 300 W, driver 525.105.17: "308MiB / 32768MiB".
    ("v100-32gb-sxm2", 32_768, 32, "https://github.com/Wan-Video/Wan2.1/issues/5"),
    # 'NVIDIA GeForce RTX 3070', driver 550.54.14: "0MiB / 8192MiB".
    ("rtx-3070", 8_192, 8, GLS + "ca3f863e14859e8e2de421f072d40ee5eaa68782/gls/RTX3070_smi.py"),
    # 'NVIDIA GeForce RTX 3080', 320 W, driver 550.54.14: "0MiB / 10240MiB".
    ("rtx-3080", 10_240, 10, GLS + "0aa17a6491a0dbb77cf21651c43876cd8bf6cc3f/gls/RTX3080_smi.py"),
]


@pytest.mark.parametrize(("gpu_id", "mib", "nominal_gib", "url"), BELOW_NOMINAL)
def test_driver_total_below_the_nominal_capacity(gpu_id: str, mib: int, nominal_gib: int, url: str) -> None:
    gpu = get_gpu(gpu_id)
    assert (gpu.driver_total_mib, gpu.driver_total_source) == (mib, url)
    assert gpu.capacity_bytes == nominal_gib * GiB
    assert gpu.usable_bytes == mib * MiB < gpu.capacity_bytes
    assert f"driver total {mib:,} MiB" in gpu.usable_basis


@pytest.mark.parametrize(("gpu_id", "mib", "nominal_gib", "url"), EQUAL_TO_NOMINAL)
def test_driver_total_equal_to_the_nominal_capacity(gpu_id: str, mib: int, nominal_gib: int, url: str) -> None:
    gpu = get_gpu(gpu_id)
    assert (gpu.driver_total_mib, gpu.driver_total_source) == (mib, url)
    assert gpu.usable_bytes == mib * MiB == nominal_gib * GiB == gpu.capacity_bytes


def test_h200_sxm_exposes_613_mib_less_than_141_gib() -> None:
    # 141 x 1024 = 144,384 MiB; 144,384 - 143,771 = 613 MiB (by hand).
    gpu = get_gpu("h200-sxm")
    assert gpu.capacity_bytes - gpu.usable_bytes == 613 * MiB


def test_gddr6_ecc_reservation_shows_on_48_gb_cards() -> None:
    # With ECC on, 48 GiB GDDR6 cards expose at most 15/16 of it (46,080 MiB; the sources show 46,068).
    # The RTX 6000 Ada source runs with ECC off and shows 49,140 MiB, above that line.
    fifteen_sixteenths = 48 * 1024 * 15 // 16 * MiB
    for gpu_id in ("a40", "rtx-a6000", "l40s", "l20"):
        assert get_gpu(gpu_id).usable_bytes <= fifteen_sixteenths, gpu_id
    assert get_gpu("rtx-6000-ada").usable_bytes > fifteen_sixteenths


def test_no_driver_total_exceeds_the_dram() -> None:
    for gpu in load_catalog().gpus:
        if gpu.driver_total_mib is not None:
            assert gpu.driver_total_mib * MiB <= gpu.capacity_bytes, gpu.id
            assert gpu.driver_total_source and gpu.driver_total_source.startswith("https://"), gpu.id
