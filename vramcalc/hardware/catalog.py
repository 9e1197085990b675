"""The bundled GPU catalog (``vramcalc/hardware/gpus.yaml``): validated on load, looked up by name.

Capacity semantics: ``capacity`` is what the vendor prints. Memory chips are binary, so a card sold
as "80 GB" carries 80 GiB of DRAM (``capacity_is_binary``); the driver exposes somewhat less
(``driver_total_mib``, as nvidia-smi prints it, where a public source shows it). On Apple silicon
macOS lets the GPU wire only part of the unified memory (``gpu_wired_limit_mib``). ``usable_bytes``
is the driver figure when known, else the GPU wired limit, else the nominal capacity.

Name resolution (:meth:`Catalog.lookup`) ignores case and punctuation (``A100-80GB`` = ``a10080gb``):

1. An exact id or alias names its entry, silently; a ``default_for`` name (``a100``: four A100s)
   picks its documented default, with a note naming it and the other variants.
2. Otherwise a name *matches* an entry when (a) its tokens (split on punctuation) are among those of
   one of the entry's names and every extra token only tells variants apart: a capacity (``80gb``),
   a form factor (``sxm4``, ``pcie``, ``nvl``, ``oam``) or a memory generation (``hbm3``); or (b) it
   starts one of them, ending inside a token (``rtx-409``) or where only such variant tokens follow
   (``a100-80`` of ``a100-80gb-sxm``). So ``h100`` matches the PCIe, SXM and NVL cards, but ``3090``
   never matches ``rtx-3090-ti``: ``ti`` is another product, not a variant.
3. One match: that card, with a note. Several: the default of the smallest ``default_for`` family
   that holds them all, when that default is among them (``h100-80gb`` matches the H100 PCIe and SXM
   and picks ``h100-sxm``, the default for ``h100``), with a note; else an error listing them. None:
   an error listing the closest names.

``--gpu`` also takes ``local`` and a size such as ``48GiB`` (a capacity-only card): see
:mod:`vramcalc.hardware.lookup`.
"""

from __future__ import annotations

import difflib
import functools
from importlib import resources
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from vramcalc.errors import CatalogError, UnknownGPUError
from vramcalc.hardware.memory_bus import MemoryBus, MemoryType
from vramcalc.hardware.memory_bus import memory_type as canonical_memory_type
from vramcalc.hardware.names import VARIANT_TOKEN, Pick, ambiguity_note, normalise, prefix_matches, tokens
from vramcalc.units import GB, GiB, MiB, parse_size

#: NVIDIA cards of compute capability >= 9.0 (Hopper, Blackwell): PyTorch gives them 32 MiB cuBLAS
#: workspaces instead of 8.125 MiB (aten/src/ATen/cuda/CublasHandlePool.cpp).
HOPPER_OR_NEWER = {
    "h100-pcie",
    "h100-sxm",
    "h100-nvl",
    "h200-sxm",
    "h200-nvl",
    "h20",
    "gh200-96gb",
    "gh200-144gb",
    "h800-sxm",
    "h800-pcie",
    "b100",
    "b200",
    "b300",
    "gb200",
    "rtx-pro-6000-blackwell",
    "rtx-5060",
    "rtx-5060-ti-8gb",
    "rtx-5060-ti-16gb",
    "rtx-5070",
    "rtx-5070-ti",
    "rtx-5080",
    "rtx-5090",
}
#: Form factors whose GPUs talk over PCIe (NVLink bridges pair two at most): NCCL runs few channels there.
PCIE_VARIANTS = {"PCIe", "desktop", "NVL", "APU", "SoC"}

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

Id = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]*$", max_length=60)]


#: Physically meaningful bounds of a card's figures (a user catalog is checked against them as a spec is):
#: the largest memory, bus, data rate, bandwidth and throughput any card could have, with a wide margin;
#: numbers are finite (no ``.inf`` or ``.nan``).
MAX_CAPACITY = 100_000  # GB or GiB: 100 TB on one card
MAX_MIB = 10**8  # a driver total or wired limit: about 95 TiB
MAX_BUS_BITS = 65_536
MAX_DATA_RATE_GBPS = 1_000.0
MIN_RATE = 0.001  # Gbps per pin, GB/s: one MB/s
MAX_BANDWIDTH_GB_S = 1_000_000.0
MAX_TFLOPS = 1_000_000.0


class HostLink(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    pcie_gen: int | None = Field(default=None, ge=1, le=7)
    pcie_lanes: int | None = Field(default=None, ge=1, le=32)
    nvlink_gb_s: float | None = Field(default=None, ge=MIN_RATE, le=MAX_BANDWIDTH_GB_S)


class GPU(BaseModel):
    """A card: one catalog entry, and for ``--gpu local`` the free memory NVML read on the installed
    card (``free_bytes``, with ``free_reading`` saying how it was read). The one card type every
    command compares against."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    id: Id
    aliases: list[Id] = []
    default_for: list[Id] = []
    name: str
    vendor: Literal["nvidia", "amd", "intel", "apple"]
    variant: str
    segment: Literal["datacenter", "workstation", "consumer"]
    memory_type: MemoryType
    capacity: float = Field(gt=0, le=MAX_CAPACITY)
    capacity_unit: Literal["GB", "GiB"]
    capacity_is_binary: bool
    driver_total_mib: int | None = Field(default=None, gt=0, le=MAX_MIB)
    driver_total_source: str | None = None
    #: Apple silicon: the most unified memory macOS lets the GPU wire by default (Metal's
    #: ``recommendedMaxWorkingSetSize``; raised with ``sysctl iogpu.wired_limit_mb``).
    gpu_wired_limit_mib: int | None = Field(default=None, gt=0, le=MAX_MIB)
    gpu_wired_limit_source: str | None = None
    bus_width_bits: int = Field(gt=0, le=MAX_BUS_BITS)
    data_rate_gbps: float = Field(ge=MIN_RATE, le=MAX_DATA_RATE_GBPS)
    bandwidth_gb_s: float = Field(ge=MIN_RATE, le=MAX_BANDWIDTH_GB_S)
    bandwidth_vendor_rounded: bool = False
    fp16_tflops_dense: float | None = Field(default=None, gt=0, le=MAX_TFLOPS)
    fp8_tflops_dense: float | None = Field(default=None, gt=0, le=MAX_TFLOPS)
    host_link: HostLink
    #: Where the figures come from: the datasheet's URL in the bundled catalog; optional, any text, in a user's.
    source: str | None = None
    notes: str | None = None
    free_bytes: int | None = Field(default=None, ge=0)
    free_reading: str | None = None

    @model_validator(mode="after")
    def _check(self) -> GPU:
        if self.driver_total_mib is not None and not self.driver_total_source:
            raise ValueError("driver_total_source is required with driver_total_mib")
        if self.gpu_wired_limit_mib is not None and not self.gpu_wired_limit_source:
            raise ValueError("gpu_wired_limit_source is required with gpu_wired_limit_mib")
        off = self.computed_bandwidth_bytes_per_s / self.bandwidth_bytes_per_s - 1
        if self.bandwidth_differs and not self.bandwidth_vendor_rounded:
            raise ValueError(
                f"data_rate_gbps x bus_width_bits / 8 differs from bandwidth_gb_s by {off:+.1%} "
                "(mark bandwidth_vendor_rounded and state both figures in notes)"
            )
        if self.bandwidth_vendor_rounded and not self.bandwidth_differs:
            raise ValueError(f"bandwidth_vendor_rounded is set but the figures agree ({off:+.2%})")
        if self.bandwidth_vendor_rounded and not self.notes:
            raise ValueError("a vendor-rounded bandwidth needs notes stating both figures")
        return self

    @property
    def capacity_bytes(self) -> int:
        """Nominal capacity in bytes: vendor "GB" read as GiB when the DRAM is binary."""
        unit = GiB if self.capacity_is_binary or self.capacity_unit == "GiB" else GB
        return round(self.capacity * unit)

    @property
    def usable_bytes(self) -> int:
        """The free memory of a card read through NVML; else what the driver exposes (nvidia-smi's
        total) when known; else, on Apple silicon, what macOS lets the GPU wire; else the nominal
        capacity."""
        if self.free_bytes is not None:
            return self.free_bytes
        if self.driver_total_mib:
            return self.driver_total_mib * MiB
        return self.gpu_wired_limit_mib * MiB if self.gpu_wired_limit_mib else self.capacity_bytes

    @property
    def usable_basis(self) -> str:
        """Which capacity figure ``usable_bytes`` is, and why (one line)."""
        if self.free_bytes is not None:
            return self.free_reading or "free memory read through NVML"
        if self.driver_total_mib:
            dram = f"{self.capacity:g} {self.capacity_unit} DRAM"
            return f"driver total {self.driver_total_mib:,} MiB (nvidia-smi memory.total; {dram})"
        if self.gpu_wired_limit_mib:
            unified = f"{self.capacity:g} {self.capacity_unit} unified memory"
            return (
                f"GPU wired limit {self.gpu_wired_limit_mib:,} MiB (macOS default, Metal "
                f"recommendedMaxWorkingSetSize; {unified}; raise with sysctl iogpu.wired_limit_mb)"
            )
        unit = "GiB" if self.capacity_is_binary or self.capacity_unit == "GiB" else "GB"
        nominal = f"nominal {self.capacity:g} {self.capacity_unit} read as {unit}"
        return f"{nominal} (no driver total in the catalog; it is a little less)"

    @property
    def has_bf16(self) -> bool:
        """Whether the card has bf16 tensor cores (bf16 precisions are suggested only there)."""
        return self.id not in NO_BF16

    @property
    def bandwidth_bytes_per_s(self) -> int:
        return round(self.bandwidth_gb_s * GB)

    @property
    def memory_bus(self) -> MemoryBus:
        """The card's memory bus with the vendor's bandwidth (what `vramcalc bandwidth` computes with)."""
        return MemoryBus(
            self.bus_width_bits, self.data_rate_gbps, self.memory_type, official_bytes_per_s=self.bandwidth_bytes_per_s
        )

    @property
    def computed_bandwidth_bytes_per_s(self) -> int:
        """Per-pin data rate (Gbps) x bus width (bits) / 8, in bytes per second."""
        return self.memory_bus.computed_bytes_per_s

    @property
    def bandwidth_differs(self) -> bool:
        """True where computed and official bandwidth differ by more than 1 % (vendor rounding)."""
        return self.memory_bus.bandwidth_differs

    @property
    def capacity_label(self) -> str:
        """The capacity as the vendor states it ("80 GB")."""
        return f"{self.capacity:g} {self.capacity_unit}"

    @property
    def fp16_flops_per_s(self) -> float | None:
        """Dense FP16/BF16 tensor FLOP/s (None where the catalog has no figure)."""
        return self.fp16_tflops_dense * 1e12 if self.fp16_tflops_dense else None

    @property
    def fp8_flops_per_s(self) -> float | None:
        """Dense FP8 tensor FLOP/s (None where the card has none or the catalog no figure)."""
        return self.fp8_tflops_dense * 1e12 if self.fp8_tflops_dense else None

    @property
    def hopper_or_newer(self) -> bool:
        return self.id in HOPPER_OR_NEWER

    @property
    def interconnect(self) -> str:  # for NCCL's buffers (vramcalc/stacks/nccl.py)
        return "pcie" if self.variant in PCIE_VARIANTS else "nvswitch"


def matches(name: str, gpu: GPU) -> bool:
    """True when ``name`` names ``gpu`` up to variant tokens (capacity, form factor, memory generation)."""
    want = tokens(name)
    for key in [gpu.id, *gpu.aliases, *gpu.default_for]:
        have = tokens(key)
        if want and want <= have and all(VARIANT_TOKEN.match(t) for t in have - want):
            return True
    return False


class Catalog:
    """Validated entries with a name index (ids, aliases and default_for names, normalised).
    ``source`` names the file in errors (the user's file for a catalog merged with one)."""

    def __init__(self, gpus: list[GPU], source: str = "gpus.yaml") -> None:
        self.gpus = gpus
        self.source = source
        self.index: dict[str, GPU] = {}
        #: normalised default_for name -> ids of every entry it matches (the default included).
        self.families: dict[str, list[str]] = {}
        #: (default_for name as written, its default, the ids of its family), for rule 3.
        self.defaults: list[tuple[str, GPU, frozenset[str]]] = []
        for gpu in gpus:
            for key in [gpu.id, *gpu.aliases, *gpu.default_for]:
                norm = normalise(key)
                if norm in self.index and self.index[norm] is not gpu:
                    raise CatalogError(f"{source}: name {key!r} is used twice ({self.index[norm].id}, {gpu.id})")
                self.index[norm] = gpu
        for gpu in gpus:
            self._check_names(gpu)

    def _check_names(self, gpu: GPU) -> None:
        for alias in gpu.aliases:
            family = self.family(alias)
            if len(family) > 1:
                others = ", ".join(g.id for g in family if g is not gpu)
                raise CatalogError(
                    f"{self.source}: alias {alias!r} of {gpu.id} also matches {others} (use default_for)"
                )
        for short in gpu.default_for:
            family = self.family(short)
            if len(family) < 2 or gpu not in family:
                raise CatalogError(
                    f"{self.source}: default_for {short!r} of {gpu.id} is not ambiguous (make it an alias)"
                )
            self.families[normalise(short)] = [g.id for g in family]
            self.defaults.append((short, gpu, frozenset(g.id for g in family)))

    def family(self, name: str) -> list[GPU]:
        """Every entry ``name`` matches by tokens (see :func:`matches`), in catalog order."""
        return [gpu for gpu in self.gpus if matches(name, gpu)]

    def candidates(self, name: str) -> list[GPU]:
        """Every entry ``name`` matches by tokens or as the start of a name (rule 2), in catalog order."""
        norm = normalise(name)
        return [
            gpu
            for gpu in self.gpus
            if matches(name, gpu) or any(prefix_matches(norm, key) for key in [gpu.id, *gpu.aliases, *gpu.default_for])
        ]

    def lookup(self, name: str) -> Pick[GPU]:
        """The card ``name`` picks (rules 1-3 of the module docstring); :class:`UnknownGPUError` when it
        names none or is ambiguous."""
        norm = normalise(name)
        gpu = self.index.get(norm)
        if gpu is not None:
            others = [i for i in self.families.get(norm, []) if i != gpu.id]
            return Pick(gpu, others, ambiguity_note(name, gpu, others) if others else None)
        found = self.candidates(name) if norm else []
        if len(found) == 1:
            only = found[0]
            return Pick(
                only, [], f"{name!r} is not a catalog name; using {only.id} ({only.name}), the one card it matches"
            )
        ids = {g.id for g in found}
        fitting = [(len(family), short, default) for short, default, family in self.defaults if ids <= family]
        fitting = [entry for entry in fitting if entry[2].id in ids]
        if fitting:
            _, short, default = min(fitting, key=lambda entry: entry[0])
            others = [g.id for g in found if g is not default]
            note = (
                f"{name!r} matches several cards; using {default.id} ({default.name}), the default for "
                f"{short!r} (others: {', '.join(others)})"
            )
            return Pick(default, others, note)
        if found:
            raise UnknownGPUError(
                f"GPU {name!r} matches several cards: {', '.join(g.id for g in found)}; name one (see 'vramcalc gpus')"
            )
        raise UnknownGPUError(f"unknown GPU {name!r}{self._suggest(norm)} (run 'vramcalc gpus' for the list)")

    def resolve(self, name: str) -> tuple[GPU, list[str]]:
        """The card ``name`` picks and the ids of the other cards it matches (see :meth:`lookup`)."""
        pick = self.lookup(name)
        return pick.gpu, pick.others

    def _suggest(self, norm: str) -> str:
        started = [g.id for g in self.gpus if norm and any(normalise(k).startswith(norm) for k in [g.id, *g.aliases])]
        close = difflib.get_close_matches(norm, list(self.index), n=5, cutoff=0.6)
        ids = list(dict.fromkeys([*started, *(self.index[key].id for key in close)]))[: 5 if started else 3]
        return f"; did you mean {', '.join(ids)}?" if ids else ""

    def get(self, name: str) -> GPU:
        """Look a card up by id, alias or short name; unknown names list the closest matches."""
        return self.lookup(name).gpu


def parse_entries(data: object, source: str, *, cited: bool = False) -> list[GPU]:
    """Validated entries of a catalog file's data; an error is one line naming the file, the entry and
    the field (:mod:`vramcalc.hardware.entry_errors`). ``cited``: every entry's ``source`` must be a URL
    (the bundled catalog; a user's file may leave it out)."""
    if not isinstance(data, list):
        raise CatalogError(f"{source}: expected a list of GPU entries")
    gpus = []
    for i, entry in enumerate(data):
        ident = entry.get("id", f"#{i}") if isinstance(entry, dict) else f"#{i}"
        try:
            gpu = GPU.model_validate(entry)
        except ValidationError as exc:
            from vramcalc.hardware.entry_errors import entry_error

            raise CatalogError(entry_error(f"{source}: entry {ident}", exc, GPU)) from None
        if cited and not (gpu.source or "").startswith(("https://", "http://")):
            raise CatalogError(f"{source}: entry {ident}: source: expected the URL of the figures, got {gpu.source!r}")
        gpus.append(gpu)
    return gpus


def parse_catalog(data: object, source: str, *, cited: bool = False) -> Catalog:
    return Catalog(parse_entries(data, source, cited=cited), source)


@functools.lru_cache(maxsize=1)
def load_catalog() -> Catalog:
    """The bundled catalog, parsed once per process (from the JSON copy of gpus.yaml: :mod:`vramcalc.bundled`)."""
    from vramcalc.bundled import read_bundled

    folder = resources.files("vramcalc").joinpath("hardware")
    return parse_catalog(read_bundled(folder, "gpus.yaml"), "gpus.yaml", cited=True)


def select_gpus(
    gpus: list[GPU],
    *,
    vendor: str | None = None,
    memory_type: str | None = None,
    min_memory: str | None = None,
    sort: str | None = None,
) -> list[GPU]:
    """Filter by vendor, memory type and nominal capacity (``capacity_bytes``); sort largest first."""
    rows = list(gpus)
    if vendor is not None:
        vendors = sorted({gpu.vendor for gpu in gpus})
        if vendor.lower() not in vendors:
            raise UnknownGPUError(f"vendor: unknown {vendor!r} (one of {', '.join(vendors)})")
        rows = [gpu for gpu in rows if gpu.vendor == vendor.lower()]
    if memory_type is not None:
        kind = canonical_memory_type(memory_type)
        rows = [gpu for gpu in rows if gpu.memory_type == kind]
    if min_memory is not None:
        floor = parse_size(min_memory, "min-memory")
        rows = [gpu for gpu in rows if gpu.capacity_bytes >= floor]
    if sort == "memory":
        rows.sort(key=lambda gpu: (-gpu.capacity_bytes, gpu.id))
    elif sort == "bandwidth":
        rows.sort(key=lambda gpu: (-gpu.bandwidth_bytes_per_s, gpu.id))
    elif sort is not None:
        raise UnknownGPUError(f"sort: unknown key {sort!r} (memory or bandwidth)")
    return rows
