"""A made-up catalog entry for tests of user GPU catalogs."""

from __future__ import annotations

from typing import Any


def lab_card(**changes: Any) -> dict[str, Any]:
    """A made-up GDDR6 card in the bundled catalog's schema: 20 Gbps x 384 bit / 8 = 960 GB/s; 48 GB of
    binary DRAM = 48 GiB. ``changes`` replace fields."""
    base: dict[str, Any] = {
        "id": "lab-card-48gb",
        "aliases": ["labcard"],
        "name": "Lab Card 48GB",
        "vendor": "nvidia",
        "variant": "PCIe",
        "segment": "workstation",
        "memory_type": "GDDR6",
        "capacity": 48,
        "capacity_unit": "GB",
        "capacity_is_binary": True,
        "bus_width_bits": 384,
        "data_rate_gbps": 20.0,
        "bandwidth_gb_s": 960,
        "host_link": {"pcie_gen": 4, "pcie_lanes": 16},
        "source": "https://example.com/lab-card",
    }
    base.update(changes)
    return base
