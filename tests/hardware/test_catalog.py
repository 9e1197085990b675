"""The bundled GPU catalog: every entry validates, names are unique, lookups resolve predictably."""

from __future__ import annotations

import math
from typing import Any

import pytest

from vramcalc.errors import CatalogError, UnitError, UnknownGPUError
from vramcalc.hardware.catalog import GPU, ambiguity_note, load_catalog, matches, normalise, parse_catalog, select_gpus
from vramcalc.hardware.lookup import get_gpu, resolve_gpu
from vramcalc.units import GB, GiB

CATALOG = load_catalog()
GPUS = CATALOG.gpus


def entry(**changes: Any) -> dict[str, Any]:
    """A minimal valid catalog entry (a made-up GDDR6 card: 14 Gbps x 256 bit / 8 = 448 GB/s)."""
    base: dict[str, Any] = {
        "id": "card-16gb",
        "name": "Card",
        "vendor": "nvidia",
        "variant": "PCIe",
        "segment": "consumer",
        "memory_type": "GDDR6",
        "capacity": 16,
        "capacity_unit": "GB",
        "capacity_is_binary": True,
        "bus_width_bits": 256,
        "data_rate_gbps": 14.0,
        "bandwidth_gb_s": 448,
        "host_link": {"pcie_gen": 4, "pcie_lanes": 16},
        "source": "https://example.com/card",
    }
    base.update(changes)
    return base


# --- every entry ---------------------------------------------------------------------------------


def test_catalog_has_all_72_entries() -> None:
    # 54 original entries plus 18 added (A800 x3, L20, H800 x2, B300, GB200, RTX PRO 6000 Blackwell,
    # RTX 3080 12GB, RTX 4060, RTX 4060 Ti 8GB, RTX 5060, RTX 5060 Ti 8/16GB, RTX 5070, RTX 5070 Ti, MI300A).
    assert len(GPUS) == 72


@pytest.mark.parametrize("gpu", GPUS, ids=[g.id for g in GPUS])
def test_entry_schema_and_source(gpu: GPU) -> None:
    assert gpu.source.startswith(("https://", "http://"))
    assert gpu.bus_width_bits > 0 and gpu.data_rate_gbps > 0 and gpu.bandwidth_gb_s > 0
    assert gpu.capacity_unit in ("GB", "GiB")
    assert gpu.memory_type and gpu.vendor and gpu.variant
    if gpu.fp8_tflops_dense is not None:
        assert gpu.fp16_tflops_dense is not None


@pytest.mark.parametrize("gpu", GPUS, ids=[g.id for g in GPUS])
def test_computed_bandwidth_within_1_percent_unless_vendor_rounded(gpu: GPU) -> None:
    computed_gb_s = gpu.data_rate_gbps * gpu.bus_width_bits / 8
    off = abs(computed_gb_s / gpu.bandwidth_gb_s - 1)
    if not gpu.bandwidth_vendor_rounded:
        assert off <= 0.01, f"{gpu.id}: {computed_gb_s} vs {gpu.bandwidth_gb_s}"
        return
    # Vendor-rounded: the figures really differ, and the notes state both of them.
    assert off > 0.01
    assert gpu.notes is not None
    assert str(round(computed_gb_s)) in gpu.notes or f"{computed_gb_s:.1f}" in gpu.notes
    official = (f"{gpu.bandwidth_gb_s:g}", f"{gpu.bandwidth_gb_s / 1000:g} TB/s")
    assert any(text in gpu.notes for text in official), gpu.notes


def test_vendor_rounded_entries_are_the_known_ones() -> None:
    # Vendors print round HBM3/HBM3e and LPDDR figures (H100 PCIe, H200, B200).
    rounded = {g.id for g in GPUS if g.bandwidth_vendor_rounded}
    assert {"h100-pcie", "h200-sxm", "h200-nvl", "b200"} <= rounded


def test_ids_aliases_and_short_names_are_unique_after_normalising() -> None:
    owners: dict[str, set[str]] = {}
    for gpu in GPUS:
        for key in [gpu.id, *gpu.aliases, *gpu.default_for]:
            owners.setdefault(normalise(key), set()).add(gpu.id)
    assert {key: ids for key, ids in owners.items() if len(ids) > 1} == {}
    assert len({g.id for g in GPUS}) == len(GPUS)


def test_no_alias_matches_several_cards() -> None:
    for gpu in GPUS:
        for alias in gpu.aliases:
            assert CATALOG.family(alias) == [gpu], alias


def test_every_default_for_name_matches_several_cards_including_its_default() -> None:
    for gpu in GPUS:
        for short in gpu.default_for:
            family = CATALOG.family(short)
            assert len(family) >= 2 and gpu in family, short


# --- datasheet figures ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "computed_gb_s", "official_gb_s"),
    [
        # A100 40GB: 1215 MHz HBM2 x 2 = 2.43 Gbps; 2.43 x 5120 / 8 = 1555.2 (hand); datasheet 1555 GB/s.
        ("a100-40gb-pcie", 1555.2, 1555),
        # H100 SXM: nvidia-smi 2619 MHz x 2 = 5.238 Gbps; 5.238 x 5120 / 8 = 3352.32 (hand); datasheet 3.35 TB/s.
        ("h100-sxm", 3352.32, 3350),
        # RTX 4090: 21 Gbps x 384 / 8 = 1008 (hand); NVIDIA spec page 1008 GB/s.
        ("rtx-4090", 1008, 1008),
        # T4: 10 Gbps x 256 / 8 = 320 (hand); datasheet "320+ GB/s".
        ("t4", 320, 320),
        # H200: nvidia-smi 3201 MHz x 2 = 6.402 Gbps; 6.402 x 6144 / 8 = 4916.736 (hand); vendor 4.8 TB/s.
        ("h200-sxm", 4916.736, 4800),
    ],
)
def test_datasheet_bandwidth(name: str, computed_gb_s: float, official_gb_s: float) -> None:
    gpu = get_gpu(name)
    assert gpu.computed_bandwidth_bytes_per_s == round(computed_gb_s * GB)
    assert gpu.bandwidth_bytes_per_s == official_gb_s * GB


def test_capacity_as_vendor_states_and_in_bytes() -> None:
    gpu = get_gpu("a100-80gb-sxm")
    # Sold as "80 GB"; binary DRAM, so 80 x 2^30 bytes.
    assert (gpu.capacity, gpu.capacity_unit, gpu.capacity_is_binary) == (80, "GB", True)
    assert gpu.capacity_bytes == 80 * GiB


def test_vendor_rounded_flag_without_a_gap_is_rejected() -> None:
    with pytest.raises(CatalogError, match="figures agree"):
        parse_catalog([entry(bandwidth_vendor_rounded=True, notes="448 vs 448")], "test.yaml")


def test_a_gap_without_the_flag_is_rejected() -> None:
    # 14 x 256 / 8 = 448 computed vs 480 stated: -6.7 %.
    with pytest.raises(CatalogError, match="bandwidth_vendor_rounded"):
        parse_catalog([entry(bandwidth_gb_s=480)], "test.yaml")


@pytest.mark.parametrize("source", [None, "the vendor's datasheet"])
def test_a_bundled_entry_needs_the_url_of_its_figures(source: str | None) -> None:
    data = entry()
    del data["source"]
    if source is not None:
        data["source"] = source
    with pytest.raises(CatalogError) as info:
        parse_catalog([data], "gpus.yaml", cited=True)
    assert str(info.value) == f"gpus.yaml: entry card-16gb: source: expected the URL of the figures, got {source!r}"
    # a user's catalog may leave it out, or say where the figures come from in words
    (gpu,) = parse_catalog([data], "my-gpus.yaml").gpus
    assert gpu.source == source


# --- name resolution -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("short", "default", "others"),
    [
        ("a100", "a100-80gb-sxm", ["a100-40gb-pcie", "a100-40gb-sxm", "a100-80gb-pcie"]),
        ("h100", "h100-sxm", ["h100-pcie", "h100-nvl"]),
        ("v100", "v100-16gb-sxm2", ["v100-32gb-sxm2", "v100-16gb-pcie", "v100-32gb-pcie"]),
        ("h200", "h200-sxm", ["h200-nvl"]),
        ("gh200", "gh200-96gb", ["gh200-144gb"]),
        ("A100-80GB", "a100-80gb-sxm", ["a100-80gb-pcie"]),
    ],
)
def test_ambiguous_short_names_pick_the_documented_default(short: str, default: str, others: list[str]) -> None:
    gpu, alternatives = resolve_gpu(short)
    assert gpu.id == default
    assert alternatives == others


def test_ambiguity_note_text() -> None:
    gpu, others = resolve_gpu("a100")
    assert ambiguity_note("a100", gpu, others) == (
        "'a100' is ambiguous; using a100-80gb-sxm (others: a100-40gb-pcie, a100-40gb-sxm, a100-80gb-pcie)"
    )


def test_get_gpu_keeps_returning_the_default() -> None:
    assert get_gpu("a100").id == "a100-80gb-sxm"
    assert get_gpu("h100").id == "h100-sxm"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("a100_80gb_sxm", "a100-80gb-sxm"),
        ("A100-80GB-SXM", "a100-80gb-sxm"),
        ("RTX4090", "rtx-4090"),
        ("Tesla T4", "t4"),
        ("3090", "rtx-3090"),  # the 3090 Ti is another product, not a variant
        ("l40", "l40"),  # the L40S likewise
        ("a10", "a10"),
    ],
)
def test_unambiguous_names_are_case_and_punctuation_insensitive(name: str, expected: str) -> None:
    gpu, others = resolve_gpu(name)
    assert (gpu.id, others) == (expected, [])


def test_undeclared_ambiguous_name_lists_the_candidates() -> None:
    # the two A100 PCIe cards (40 and 80 GB); the a100 default is an SXM card, so no default applies
    with pytest.raises(UnknownGPUError, match="matches several cards: a100-40gb-pcie, a100-80gb-pcie"):
        resolve_gpu("a100 pcie")


def test_unknown_name_suggests_close_matches_and_the_gpus_command() -> None:
    with pytest.raises(UnknownGPUError) as info:
        resolve_gpu("a100-80gb-smx")
    message = str(info.value)
    assert "did you mean a100-80gb-sxm" in message
    assert "vramcalc gpus" in message
    assert "\n" not in message


def test_variant_tokens_only() -> None:
    h100_nvl = get_gpu("h100-nvl")
    assert matches("h100", h100_nvl)
    assert not matches("3090", get_gpu("rtx-3090-ti"))


def test_alias_that_is_ambiguous_is_a_catalog_error() -> None:
    cards = [entry(id="x1-16gb", aliases=["x1"]), entry(id="x1-32gb", capacity=32)]
    with pytest.raises(CatalogError, match="alias 'x1' of x1-16gb also matches x1-32gb"):
        parse_catalog(cards, "test.yaml")


def test_default_for_that_is_not_ambiguous_is_a_catalog_error() -> None:
    with pytest.raises(CatalogError, match="default_for 'x1' of x1-16gb is not ambiguous"):
        parse_catalog([entry(id="x1-16gb", default_for=["x1"])], "test.yaml")


def test_duplicate_names_are_a_catalog_error() -> None:
    with pytest.raises(CatalogError, match="used twice"):
        parse_catalog([entry(id="x1", aliases=["y-1"]), entry(id="x2", aliases=["y1"])], "test.yaml")


# --- filtering and sorting -----------------------------------------------------------------------


def test_select_by_vendor_and_memory_type_is_case_insensitive() -> None:
    rows = select_gpus(GPUS, vendor="AMD", memory_type="hbm3e")
    assert {g.id for g in rows} == {"mi325x", "mi355x"}


def test_min_memory_compares_nominal_capacity() -> None:
    # A card sold as "40 GB" holds 40 GiB = 42.9e9 bytes, so it passes --min-memory 40GB.
    ids = {g.id for g in select_gpus(GPUS, min_memory="40GB")}
    assert "a100-40gb-sxm" in ids and "rtx-4090" not in ids


def test_sort_largest_first() -> None:
    by_memory = select_gpus(GPUS, sort="memory")
    # B300 and MI355X both hold 288 GB, the largest in the catalog; ties sort by id.
    assert [g.id for g in by_memory[:2]] == ["b300", "mi355x"]
    rates = [g.bandwidth_bytes_per_s for g in select_gpus(GPUS, sort="bandwidth")]
    assert rates == sorted(rates, reverse=True)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"vendor": "nvidai"}, UnknownGPUError),
        ({"memory_type": "HBM5"}, UnitError),
        ({"min_memory": "40"}, UnitError),
    ],
)
def test_select_rejects_bad_filters(kwargs: dict[str, str], error: type[Exception]) -> None:
    with pytest.raises(error):
        select_gpus(GPUS, **kwargs)


def test_bandwidth_differs_matches_the_flag() -> None:
    for gpu in GPUS:
        assert gpu.bandwidth_differs == gpu.bandwidth_vendor_rounded, gpu.id
        assert math.isfinite(gpu.computed_bandwidth_bytes_per_s)
