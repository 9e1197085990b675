"""The bundled GPU catalog (``vramcalc/gpus.yaml``): validated on load, looked up by name.

Capacity semantics: ``capacity`` is what the vendor prints. Memory chips are binary, so a card sold
as "80 GB" carries 80 GiB of DRAM (``capacity_is_binary``); the driver exposes somewhat less
(``driver_total_mib``, as nvidia-smi prints it, where a public source shows it). ``usable_bytes``
is the driver figure when known, else the nominal capacity.
"""

from __future__ import annotations

import difflib
import functools
import re
from importlib import resources
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from vramcalc.errors import CatalogError, UnknownGPUError
from vramcalc.units import GB, GiB, MiB

MemoryType = Literal["GDDR5X", "GDDR6", "GDDR6X", "GDDR7", "HBM2", "HBM2e", "HBM3", "HBM3e", "LPDDR5", "LPDDR5X"]
#: Computed (data rate x bus width / 8) and official bandwidth may differ by this much unless the
#: entry is marked as a vendor-rounded figure.
BANDWIDTH_TOLERANCE = 0.01
#: NVIDIA cards of compute capability >= 9.0 (Hopper, Blackwell): PyTorch gives them 32 MiB cuBLAS
#: workspaces instead of 8.125 MiB (aten/src/ATen/cuda/CublasHandlePool.cpp).
HOPPER_OR_NEWER = {"h100-pcie", "h100-sxm", "h100-nvl", "h200-sxm", "h200-nvl", "h20", "gh200-96gb",
                   "gh200-144gb", "b100", "b200", "rtx-5080", "rtx-5090"}

Id = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]*$", max_length=60)]


class HostLink(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    pcie_gen: int | None = Field(default=None, ge=1, le=7)
    pcie_lanes: int | None = Field(default=None, ge=1, le=32)
    nvlink_gb_s: float | None = Field(default=None, gt=0)


class GPU(BaseModel):
    """One catalog entry."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: Id
    aliases: list[Id] = []
    name: str
    vendor: Literal["nvidia", "amd", "intel", "apple"]
    variant: str
    segment: Literal["datacenter", "workstation", "consumer"]
    memory_type: MemoryType
    capacity: float = Field(gt=0)
    capacity_unit: Literal["GB", "GiB"]
    capacity_is_binary: bool
    driver_total_mib: int | None = Field(default=None, gt=0)
    driver_total_source: str | None = None
    bus_width_bits: int = Field(gt=0)
    data_rate_gbps: float = Field(gt=0)
    bandwidth_gb_s: float = Field(gt=0)
    bandwidth_vendor_rounded: bool = False
    fp16_tflops_dense: float | None = Field(default=None, gt=0)
    fp8_tflops_dense: float | None = Field(default=None, gt=0)
    host_link: HostLink
    source: str = Field(pattern=r"^https?://")
    notes: str | None = None

    @model_validator(mode="after")
    def _check(self) -> GPU:
        if self.driver_total_mib is not None and not self.driver_total_source:
            raise ValueError("driver_total_source is required with driver_total_mib")
        off = abs(self.computed_bandwidth_bytes_per_s / self.bandwidth_bytes_per_s - 1)
        if off > BANDWIDTH_TOLERANCE and not self.bandwidth_vendor_rounded:
            raise ValueError(
                f"data_rate_gbps x bus_width_bits / 8 differs from bandwidth_gb_s by {off:.1%} "
                "(mark bandwidth_vendor_rounded and state both figures in notes)"
            )
        return self

    @property
    def capacity_bytes(self) -> int:
        """Nominal capacity in bytes: vendor "GB" read as GiB when the DRAM is binary."""
        unit = GiB if self.capacity_is_binary or self.capacity_unit == "GiB" else GB
        return round(self.capacity * unit)

    @property
    def usable_bytes(self) -> int:
        """What the driver exposes (nvidia-smi's total) when known, else the nominal capacity."""
        return self.driver_total_mib * MiB if self.driver_total_mib else self.capacity_bytes

    @property
    def bandwidth_bytes_per_s(self) -> int:
        return round(self.bandwidth_gb_s * GB)

    @property
    def computed_bandwidth_bytes_per_s(self) -> int:
        """Per-pin data rate (Gbps) x bus width (bits) / 8, in bytes per second."""
        return round(self.data_rate_gbps * 1e9 * self.bus_width_bits / 8)

    @property
    def hopper_or_newer(self) -> bool:
        return self.id in HOPPER_OR_NEWER


def normalise(name: str) -> str:
    """Case- and punctuation-insensitive key: 'A100_80GB-SXM' -> 'a10080gbsxm'."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


class Catalog:
    """Validated entries with a name index (ids and aliases, normalised)."""

    def __init__(self, gpus: list[GPU]) -> None:
        self.gpus = gpus
        self.index: dict[str, GPU] = {}
        for gpu in gpus:
            for key in [gpu.id, *gpu.aliases]:
                norm = normalise(key)
                if norm in self.index and self.index[norm] is not gpu:
                    raise CatalogError(f"gpus.yaml: name {key!r} is used twice ({self.index[norm].id}, {gpu.id})")
                self.index[norm] = gpu

    def get(self, name: str) -> GPU:
        """Look a card up by id or alias; unknown names list the closest matches."""
        gpu = self.index.get(normalise(name))
        if gpu is not None:
            return gpu
        names = [g.id for g in self.gpus] + [a for g in self.gpus for a in g.aliases]
        close = difflib.get_close_matches(name.lower(), names, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UnknownGPUError(f"unknown GPU {name!r}{hint} (run 'vramcalc gpus' for the list)")


def parse_catalog(data: object, source: str) -> Catalog:
    if not isinstance(data, list):
        raise CatalogError(f"{source}: expected a list of GPU entries")
    gpus = []
    for i, entry in enumerate(data):
        try:
            gpus.append(GPU.model_validate(entry))
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            ident = entry.get("id", f"#{i}") if isinstance(entry, dict) else f"#{i}"
            raise CatalogError(f"{source}: entry {ident}: {loc}: {err['msg']}") from None
    return Catalog(gpus)


@functools.lru_cache(maxsize=1)
def load_catalog() -> Catalog:
    """The bundled catalog, parsed once per process."""
    import yaml

    text = resources.files("vramcalc").joinpath("gpus.yaml").read_text(encoding="utf-8")
    return parse_catalog(yaml.safe_load(text), "gpus.yaml")


def get_gpu(name: str) -> GPU:
    return load_catalog().get(name)
