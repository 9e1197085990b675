"""Catalog additions: new cards carry their vendor figures, driver totals sit below the DRAM, Apple
GPUs get less than their unified memory, and every entry validates.

Expected numbers below are typed from the cited sources (or worked out by hand from them), not read
from the catalog.
"""

from __future__ import annotations

from typing import Any

import pytest

from vramcalc.errors import CatalogError
from vramcalc.hardware.catalog import GPU, load_catalog, parse_catalog
from vramcalc.hardware.lookup import get_gpu, resolve_gpu
from vramcalc.units import GB, GiB, MiB

CATALOG = load_catalog()


# (id, capacity as printed, bandwidth GB/s as printed, per-pin Gbps x bus bits / 8 worked by hand)
NEW_CARDS = [
    # RTX PRO 6000 Blackwell: 96 GB GDDR7, 512-bit, 28 Gbps, 1792 GB/s (NVIDIA GTC 2025 spec); 28 x 512 / 8 = 1792.
    ("rtx-pro-6000-blackwell", 96, 1792, 1792.0),
    # L20: 48 GB GDDR6, 864 GB/s (Tom's Hardware); 2250 MHz x 8 = 18 Gbps; 18 x 384 / 8 = 864.
    ("l20", 48, 864, 864.0),
    # A800 40GB PCIe: HBM2 1215 MHz (siliconcat.net); 2.43 x 5120 / 8 = 1555.2; A100 40GB figure 1555 GB/s.
    ("a800-40gb-pcie", 40, 1555, 1555.2),
    # A800 80GB PCIe: 1512 MHz HBM2e; 3.024 x 5120 / 8 = 1935.36; A100 80GB PCIe datasheet 1,935 GB/s.
    ("a800-80gb-pcie", 80, 1935, 1935.36),
    # A800 80GB SXM4: 1593 MHz HBM2e; 3.186 x 5120 / 8 = 2039.04; A100 80GB SXM datasheet 2,039 GB/s.
    ("a800-80gb-sxm", 80, 2039, 2039.04),
    # H800 SXM: nvidia-smi max memory clock 2619 MHz (NVIDIA/DCGM#120); 5.238 x 5120 / 8 = 3352.32; 3.35 TB/s.
    ("h800-sxm", 80, 3350, 3352.32),
    # H800 PCIe: as H100 PCIe, 2 TB/s printed; 3.186 x 5120 / 8 = 2039.04 (vendor rounding, ~2 %).
    ("h800-pcie", 80, 2000, 2039.04),
    # B300 (HGX): 288 GB HBM3e, 8 TB/s; 8 Gbps x 8192 / 8 = 8192 (vendor rounds to 8 TB/s).
    ("b300", 288, 8000, 8192.0),
    # GB200 per GPU: NVL72 13.4 TB / 72 = 186 GB, 576 TB/s / 72 = 8 TB/s; 8 x 8192 / 8 = 8192.
    ("gb200", 186, 8000, 8192.0),
    # RTX 5060 / 5060 Ti: 128-bit, 28 Gbps, 448 GB/s (NVIDIA spec); 28 x 128 / 8 = 448.
    ("rtx-5060", 8, 448, 448.0),
    ("rtx-5060-ti-8gb", 8, 448, 448.0),
    ("rtx-5060-ti-16gb", 16, 448, 448.0),
    # RTX 5070: 12 GB, 192-bit, 28 Gbps, 672 GB/s; 28 x 192 / 8 = 672.
    ("rtx-5070", 12, 672, 672.0),
    # RTX 5070 Ti: 16 GB, 256-bit, 28 Gbps, 896 GB/s; 28 x 256 / 8 = 896.
    ("rtx-5070-ti", 16, 896, 896.0),
    # RTX 4060: 8 GB GDDR6, 128-bit, 17 Gbps, 272 GB/s; 17 x 128 / 8 = 272.
    ("rtx-4060", 8, 272, 272.0),
    # RTX 4060 Ti 8GB: 128-bit, 18 Gbps, 288 GB/s; 18 x 128 / 8 = 288.
    ("rtx-4060-ti-8gb", 8, 288, 288.0),
    # RTX 3080 12GB: 384-bit, 19 Gbps, 912 GB/s; 19 x 384 / 8 = 912.
    ("rtx-3080-12gb", 12, 912, 912.0),
    # MI300A: 128 GB HBM3, 5.3 TB/s (AMD); 5.2 Gbps x 8192 / 8 = 5324.8.
    ("mi300a", 128, 5300, 5324.8),
]


@pytest.mark.parametrize(("gpu_id", "capacity_gb", "official_gb_s", "computed_gb_s"), NEW_CARDS)
def test_new_card_matches_its_vendor_figures(
    gpu_id: str, capacity_gb: int, official_gb_s: int, computed_gb_s: float
) -> None:
    gpu = get_gpu(gpu_id)
    assert gpu.id == gpu_id
    assert (gpu.capacity, gpu.capacity_unit) == (capacity_gb, "GB")
    assert gpu.bandwidth_bytes_per_s == official_gb_s * GB
    assert gpu.computed_bandwidth_bytes_per_s == round(computed_gb_s * GB)
    assert gpu.source.startswith("https://") and gpu.notes


def test_cards_asked_for_that_were_already_listed() -> None:
    # RTX 5080 (960 GB/s), MI325X (6 TB/s) and MI355X (8 TB/s) were in the catalog before.
    assert get_gpu("rtx-5080").bandwidth_bytes_per_s == 960 * GB
    assert get_gpu("mi325x").bandwidth_bytes_per_s == 6000 * GB
    assert get_gpu("mi355x").bandwidth_bytes_per_s == 8000 * GB


@pytest.mark.parametrize(
    ("gpu_id", "fp16", "fp8"),
    [
        # GeForce Blackwell: NVIDIA's "AI TOPS" is FP4 sparse; FP8 w/ FP32 acc dense = TOPS / 8,
        # FP16 w/ FP32 acc dense = TOPS / 16 (the ratio of the RTX 5090 entry: 3352 -> 419 / 209.5).
        ("rtx-5060", 614 / 16, 614 / 8),
        ("rtx-5060-ti-16gb", 759 / 16, 759 / 8),
        ("rtx-5070", 988 / 16, 988 / 8),
        ("rtx-5070-ti", 1406 / 16, 1406 / 8),
        # RTX PRO 6000: 4000 AI TOPS (FP4 sparse); FP8 dense 1000, full-rate FP16 w/ FP32 acc 500.
        ("rtx-pro-6000-blackwell", 500, 1000),
        # GB200 NVL72: FP16 360 PF and FP8 720 PF sparse per 72 GPUs -> dense per GPU 2.5 / 5 PF.
        ("gb200", 360_000 / 72 / 2, 720_000 / 72 / 2),
        # HGX B300 dense (verda.com per-GPU table): FP16/BF16 2.25 PF, FP8 4.5 PF.
        ("b300", 2250, 4500),
        # MI300A (AMD spec): FP16 980.6, FP8 1961.2 TFLOPS dense.
        ("mi300a", 980.6, 1961.2),
    ],
)
def test_new_card_tensor_rates(gpu_id: str, fp16: float, fp8: float) -> None:
    gpu = get_gpu(gpu_id)
    assert gpu.fp16_tflops_dense == pytest.approx(fp16, abs=0.06)
    assert gpu.fp8_tflops_dense == pytest.approx(fp8, abs=0.06)


@pytest.mark.parametrize(
    "gpu_id",
    [
        "h800-sxm",
        "h800-pcie",
        "b300",
        "gb200",
        "rtx-pro-6000-blackwell",
        "rtx-5060",
        "rtx-5060-ti-8gb",
        "rtx-5060-ti-16gb",
        "rtx-5070",
        "rtx-5070-ti",
    ],
)
def test_hopper_and_blackwell_cards_are_hopper_or_newer(gpu_id: str) -> None:
    # Compute capability 9.0 (H800), 10.x (B300, GB200) and 12.0 (RTX 50, RTX PRO Blackwell).
    gpu = get_gpu(gpu_id)
    assert gpu.hopper_or_newer and gpu.has_bf16


@pytest.mark.parametrize("gpu_id", ["l20", "a800-80gb-sxm", "rtx-4060", "rtx-3080-12gb"])
def test_ada_and_ampere_additions_are_not_hopper(gpu_id: str) -> None:
    gpu = get_gpu(gpu_id)
    assert not gpu.hopper_or_newer and gpu.has_bf16


# --- driver totals -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpu_id", "mib", "dram_gib"),
    [
        # nvidia-smi memory.total in public logs (URL in each entry's driver_total_source):
        ("b200", 183_359, 180),  # NVIDIA/TensorRT-LLM#10278
        ("h20", 97_871, 96),  # NVIDIA/nvtrust#128
        ("l20", 46_068, 48),  # vllm-project/vllm#14011
        ("rtx-pro-6000-blackwell", 97_887, 96),  # MarcoPizeta/flash-next-rtxpro6000-bench HARDWARE.md
    ],
)
def test_driver_total_below_nominal(gpu_id: str, mib: int, dram_gib: int) -> None:
    gpu = get_gpu(gpu_id)
    assert gpu.driver_total_mib == mib
    assert gpu.driver_total_source and gpu.driver_total_source.startswith("https://github.com/")
    assert gpu.usable_bytes == mib * MiB < dram_gib * GiB == gpu.capacity_bytes
    assert f"{mib:,} MiB" in gpu.usable_basis


@pytest.mark.parametrize(
    ("gpu_id", "mib"),
    [
        ("a800-80gb-sxm", 81_920),  # dexmal/dexbotic#41: 'NVIDIA A800-SXM4-80GB', 81920MiB
        ("a800-80gb-pcie", 81_920),  # vllm-project/vllm#41519: 'NVIDIA A800 80GB PCIe', 81920MiB
        ("rtx-3060-12gb", 12_288),  # geerlingguy/raspberry-pi-pcie-devices#790: 12288MiB
    ],
)
def test_driver_total_equal_to_the_dram(gpu_id: str, mib: int) -> None:
    # No ECC reservation shows on these: nvidia-smi reports the whole binary capacity.
    gpu = get_gpu(gpu_id)
    assert gpu.driver_total_mib == mib
    assert gpu.usable_bytes == mib * MiB == gpu.capacity_bytes


# --- Apple unified memory ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpu_id", "wired_mib", "unified_gib"),
    [
        # 3/4 of 192 GiB = 147,456 MiB (macOS default above 36 GB; llama.cpp#3213 shows 73,728 MiB on 96 GB).
        ("m2-ultra-192gb", 147_456, 192),
        # 107.52 GiB x 1024 = 110,100.48 -> 110,100 MiB measured on 128 GB hosts (antirez/ds4#893).
        ("m3-max", 110_100, 128),
        ("m4-max", 110_100, 128),
    ],
)
def test_apple_gpu_gets_less_than_unified_memory(gpu_id: str, wired_mib: int, unified_gib: int) -> None:
    gpu = get_gpu(gpu_id)
    assert gpu.capacity_bytes == unified_gib * GiB
    assert gpu.gpu_wired_limit_mib == wired_mib
    assert gpu.usable_bytes == wired_mib * MiB < gpu.capacity_bytes
    assert "GPU wired limit" in gpu.usable_basis and "iogpu.wired_limit_mb" in gpu.usable_basis


def test_every_apple_entry_has_a_wired_limit_with_a_source() -> None:
    apple = [g for g in CATALOG.gpus if g.vendor == "apple"]
    assert apple
    for gpu in apple:
        assert gpu.gpu_wired_limit_mib and gpu.gpu_wired_limit_source, gpu.id
        assert gpu.usable_bytes < gpu.capacity_bytes


def test_free_memory_reading_still_wins_over_the_wired_limit() -> None:
    gpu = get_gpu("m4-max").model_copy(update={"free_bytes": 10 * GiB, "free_reading": "measured"})
    assert gpu.usable_bytes == 10 * GiB and gpu.usable_basis == "measured"


def _entry(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "chip-32gb",
        "name": "Chip",
        "vendor": "apple",
        "variant": "SoC",
        "segment": "consumer",
        "memory_type": "LPDDR5",
        "capacity": 32,
        "capacity_unit": "GB",
        "capacity_is_binary": True,
        "bus_width_bits": 256,
        "data_rate_gbps": 6.4,  # 6.4 x 256 / 8 = 204.8
        "bandwidth_gb_s": 204.8,
        "host_link": {},
        "source": "https://example.com/chip",
    }
    base.update(changes)
    return base


def test_wired_limit_without_a_source_is_rejected() -> None:
    with pytest.raises(CatalogError, match="gpu_wired_limit_source is required"):
        parse_catalog([_entry(gpu_wired_limit_mib=21_845)], "test.yaml")


def test_wired_limit_is_used_when_no_driver_total() -> None:
    # 2/3 of 32 GiB = 21,845 MiB (recommendedMaxWorkingSetSize 21845.34 MB in ollama/ollama#434).
    (chip,) = parse_catalog([_entry(gpu_wired_limit_mib=21_845, gpu_wired_limit_source="https://x")], "t").gpus
    assert chip.usable_bytes == 21_845 * MiB


# --- names and validation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "default", "others"),
    [
        ("a800", "a800-80gb-sxm", ["a800-40gb-pcie", "a800-80gb-pcie"]),
        ("h800", "h800-sxm", ["h800-pcie"]),
        ("rtx-5060-ti", "rtx-5060-ti-16gb", ["rtx-5060-ti-8gb"]),
        ("rtx-4060-ti", "rtx-4060-ti-16gb", ["rtx-4060-ti-8gb"]),
        ("3080", "rtx-3080", ["rtx-3080-12gb"]),
    ],
)
def test_new_short_names_pick_a_documented_default(name: str, default: str, others: list[str]) -> None:
    gpu, alternatives = resolve_gpu(name)
    assert gpu.id == default
    assert sorted(alternatives) == sorted(others)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("5060", "rtx-5060"),  # the 5060 Ti is another product
        ("5070", "rtx-5070"),
        ("5070ti", "rtx-5070-ti"),
        ("4060", "rtx-4060"),
        ("L20", "l20"),
        ("RTX PRO 6000", "rtx-pro-6000-blackwell"),
        ("mi300a", "mi300a"),
        ("gb200", "gb200"),
        ("b300", "b300"),
    ],
)
def test_new_names_resolve_unambiguously(name: str, expected: str) -> None:
    gpu, others = resolve_gpu(name)
    assert (gpu.id, others) == (expected, [])


def test_every_catalog_entry_validates_again() -> None:
    # Re-parse every entry from its dump: the field checks and the name checks both pass.
    dumped = [g.model_dump(exclude={"free_bytes", "free_reading"}) for g in CATALOG.gpus]
    again = parse_catalog(dumped, "round-trip")
    assert [g.id for g in again.gpus] == [g.id for g in CATALOG.gpus]
    assert all(isinstance(g, GPU) for g in again.gpus)
