"""Memory clocks and per-pin data rates: the clock semantics, and parsers for the custom-card flags.

Bandwidth (GB/s) = per-pin data rate (Gbps) x bus width (bits) / 8. A "memory clock" in MHz as
tools report it is not the data rate: GPU-Z shows GDDR5X/GDDR6 at data rate / 8, GDDR6X and GDDR7
at / 16, HBM2/HBM2e at / 2; nvidia-smi (NVML) shows every type at data rate / 2.
Pure: standard library, vramcalc.errors and vramcalc.units only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

from vramcalc.errors import UnitError
from vramcalc.units import parse_decimal, quoted

MemoryType = Literal["GDDR5X", "GDDR6", "GDDR6X", "GDDR7", "HBM2", "HBM2e", "HBM3", "HBM3e", "LPDDR5", "LPDDR5X"]
MEMORY_TYPES: tuple[str, ...] = get_args(MemoryType)
CLOCK_SOURCES = ("gpuz", "nvidia-smi")
#: Memory clock (MHz) as GPU-Z shows it = per-pin data rate / divisor. TechPowerUp's GPU database
#: (GPU-Z's data) lists e.g. RTX 3070 GDDR6 1750 MHz = 14 Gbps, RTX 4090 GDDR6X 1313 MHz = 21 Gbps,
#: RTX 5090 GDDR7 1750 MHz = 28 Gbps, A100 HBM2 1215 MHz = 2.43 Gbps, GTX 1080 GDDR5X 1251 MHz = 10
#: Gbps. HBM3/HBM3e and LPDDR are left out: we found no consistent GPU-Z convention for them.
GPUZ_CLOCK_DIVISOR: dict[str, int] = {"GDDR5X": 8, "GDDR6": 8, "GDDR6X": 16, "GDDR7": 16, "HBM2": 2, "HBM2e": 2}
#: nvidia-smi / NVML / deviceQuery print half the data rate for every memory type NVIDIA ships: T4
#: 5001 MHz = 10 Gbps, RTX 4090 10501 MHz = 21 Gbps, V100 877 MHz = 1.754 Gbps, H100 SXM 2619 MHz =
#: 5.238 Gbps. (LPDDR memory is not on NVIDIA GPUs, so it is left out.)
NVIDIA_SMI_CLOCK_DIVISOR = 2
NVIDIA_SMI_TYPES = ("GDDR5X", "GDDR6", "GDDR6X", "GDDR7", "HBM2", "HBM2e", "HBM3", "HBM3e")

_NUMBER = r"([+-]?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)"
_CLOCK_RE = re.compile(rf"^\s*{_NUMBER}\s*([A-Za-z]*)\s*$")
_RATE_RE = re.compile(rf"^\s*{_NUMBER}\s*([A-Za-z/]*)\s*$")
_WIDTH_RE = re.compile(r"^\s*([+-]?[0-9]+(?:\.[0-9]+)?)\s*(?:-?\s*bits?)?\s*$", re.IGNORECASE)
CLOCK_UNITS = {"mhz": 1.0, "ghz": 1000.0}
#: Per-pin data rate units, in Gbps. "GB/s" (bytes) is refused: a per-pin rate is in bits.
RATE_UNITS = {"gbps": 1.0, "gb/s": 1.0, "gt/s": 1.0, "mbps": 1e-3, "mb/s": 1e-3, "mt/s": 1e-3}
#: Bounds of the custom-card flags, far outside every memory ever shipped (GDDR7 runs at 28-32 Gbps,
#: HBM stacks give 1,024 bits each) yet tight enough that every figure derived from them is finite.
MIN_CLOCK_MHZ, MAX_CLOCK_MHZ = 1.0, 1e6
MIN_DATA_RATE_GBPS, MAX_DATA_RATE_GBPS = 1e-3, 1e3
MAX_BUS_WIDTH_BITS = 65_536


def memory_type(text: str) -> str:
    """Canonical spelling of a memory type, case-insensitive ('hbm2e' -> 'HBM2e')."""
    for name in MEMORY_TYPES:
        if name.lower() == text.strip().lower():
            return name
    raise UnitError(f"memory type: unknown {quoted(text)} (one of {', '.join(MEMORY_TYPES)})")


def parse_clock_mhz(text: str) -> float:
    """Parse a memory clock with its unit ('1750MHz', '1.75 GHz') into MHz; a bare number is refused."""
    match = _CLOCK_RE.match(text)
    if not match:
        raise UnitError(f"memory clock: expected a clock such as '1750MHz', got {quoted(text)}")
    number, unit = float(parse_decimal(match.group(1), "memory clock")), match.group(2).lower()
    if not unit:
        raise UnitError(f"memory clock: {quoted(text)} has no unit; write it as the tool shows it, e.g. '1750MHz'")
    if unit not in CLOCK_UNITS:
        raise UnitError(f"memory clock: unknown unit {quoted(match.group(2))} in {quoted(text)} (use MHz or GHz)")
    mhz = number * CLOCK_UNITS[unit]
    if not MIN_CLOCK_MHZ <= mhz <= MAX_CLOCK_MHZ:
        raise UnitError(f"memory clock: {quoted(text)} must be between 1 MHz and 1,000 GHz")
    return mhz


def parse_data_rate_gbps(text: str) -> float:
    """Parse a per-pin data rate ('21Gbps', '2.43 GT/s', '6400MT/s') into Gbps; a bare number is refused."""
    match = _RATE_RE.match(text)
    if not match:
        raise UnitError(f"data rate: expected a per-pin rate such as '21Gbps', got {quoted(text)}")
    number, unit = float(parse_decimal(match.group(1), "data rate")), match.group(2)
    if not unit:
        raise UnitError(f"data rate: {quoted(text)} has no unit; write e.g. '21Gbps' (per pin)")
    if unit in ("GB/s", "MB/s"):
        raise UnitError(f"data rate: {quoted(text)} is bytes per second; the per-pin data rate is in Gbps (bits)")
    if unit.lower() not in RATE_UNITS:
        raise UnitError(f"data rate: unknown unit {quoted(unit)} in {quoted(text)} (use Gbps, Mbps, GT/s or MT/s)")
    gbps = number * RATE_UNITS[unit.lower()]
    if not MIN_DATA_RATE_GBPS <= gbps <= MAX_DATA_RATE_GBPS:
        raise UnitError(f"data rate: {quoted(text)} must be between 1 Mbps and 1,000 Gbps per pin")
    return gbps


def parse_bus_width(text: str) -> int:
    """Parse a bus width in bits ('256', '256-bit') into a positive int."""
    match = _WIDTH_RE.match(text)
    value = parse_decimal(match.group(1), "bus width") if match else None
    if value is None or value <= 0 or value != value.to_integral_value():
        raise UnitError(f"bus width: expected a positive whole number of bits such as 256, got {quoted(text)}")
    if value > MAX_BUS_WIDTH_BITS:
        raise UnitError(f"bus width: {quoted(text)} is out of range (at most {MAX_BUS_WIDTH_BITS:,} bits)")
    return int(value)


def data_rate_from_clock(clock_mhz: float, mem_type: str, source: str = "gpuz") -> float:
    """Per-pin data rate (Gbps) from a memory clock (MHz) as GPU-Z or nvidia-smi reports it."""
    if source == "gpuz":
        divisor = GPUZ_CLOCK_DIVISOR.get(mem_type)
        if divisor is None:
            raise UnitError(
                f"memory clock: no known GPU-Z convention for {mem_type}; give --data-rate "
                "(or --clock-source nvidia-smi with nvidia-smi's clock)"
            )
    elif source == "nvidia-smi":
        if mem_type not in NVIDIA_SMI_TYPES:
            raise UnitError(f"memory clock: nvidia-smi does not report {mem_type}; give --data-rate")
        divisor = NVIDIA_SMI_CLOCK_DIVISOR
    else:
        raise UnitError(f"clock source: unknown {source!r} (one of {', '.join(CLOCK_SOURCES)})")
    return clock_mhz * divisor / 1000


#: Relative gap between computed and official bandwidth above which both are shown.
BANDWIDTH_TOLERANCE = 0.01


def peak_bandwidth_bytes_per_s(data_rate_gbps: float, bus_width_bits: int) -> int:
    """Per-pin data rate (Gbps) x bus width (bits) / 8, in bytes per second."""
    return round(data_rate_gbps * 1e9 * bus_width_bits / 8)


@dataclass(frozen=True)
class MemoryBus:
    """A card's memory bus: what the bandwidth arithmetic reads. A catalog card has one
    (:attr:`vramcalc.hardware.catalog.GPU.memory_bus`); a custom card from flags is only this."""

    bus_width_bits: int
    data_rate_gbps: float
    memory_type: str | None = None
    official_bytes_per_s: int | None = None  # the vendor's figure (a catalog card)
    memory_clock_mhz: float | None = None  # the clock a custom card's data rate came from
    clock_source: str | None = None

    @property
    def computed_bytes_per_s(self) -> int:
        return peak_bandwidth_bytes_per_s(self.data_rate_gbps, self.bus_width_bits)

    @property
    def bytes_per_s(self) -> int:
        """The bandwidth used for timings: the vendor's official figure when there is one."""
        return self.official_bytes_per_s or self.computed_bytes_per_s

    @property
    def bandwidth_gap(self) -> float | None:
        """Computed / official - 1 (None without an official figure)."""
        if not self.official_bytes_per_s:
            return None
        return self.computed_bytes_per_s / self.official_bytes_per_s - 1

    @property
    def bandwidth_differs(self) -> bool:
        """True where computed and official bandwidth differ by more than 1 % (vendor rounding)."""
        gap = self.bandwidth_gap
        return gap is not None and abs(gap) > BANDWIDTH_TOLERANCE
