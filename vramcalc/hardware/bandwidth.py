"""Memory bandwidth, weight streaming, host transfer and the decode roofline (pure: no typer, no rich).

Units: sizes are int bytes; rates are bytes per second (``*_bytes_per_s``); per-pin data rates are
Gbps (10^9 bit/s per pin); memory clocks are MHz; times are seconds (float); compute is FLOP/s.

Bandwidth (GB/s) = per-pin data rate (Gbps) x bus width (bits) / 8; memory clocks and their
multipliers are in :mod:`vramcalc.hardware.memory_bus`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vramcalc.errors import UnitError
from vramcalc.hardware.memory_bus import (
    MemoryBus,
    data_rate_from_clock,
    memory_type,
    parse_bus_width,
    parse_clock_mhz,
    parse_data_rate_gbps,
)
from vramcalc.hardware.roofline import FLOPS_PER_PARAM as FLOPS_PER_PARAM  # re-exported
from vramcalc.hardware.roofline import Roofline
from vramcalc.hardware.weights import KvCache, Weights
from vramcalc.units import parse_decimal, quoted

if TYPE_CHECKING:
    from vramcalc.hardware.catalog import GPU
    from vramcalc.hardware.custom import CustomCard

#: Achieved share of peak memory bandwidth for a large streaming read: typically 80-90 % on HBM
#: (e.g. STREAM-like copies on A100/H100); 0.85 is the middle of that range. Override with --efficiency.
DEFAULT_MEMORY_EFFICIENCY = 0.85
#: Achieved share of the PCIe link rate for a large pinned-memory host -> device copy: TLP headers
#: and flow control cost ~10-20 % beyond the line code; 0.8 is a round, slightly conservative figure.
DEFAULT_HOST_EFFICIENCY = 0.8

#: Per-lane transfer rate (GT/s) and line-code efficiency per PCIe generation (PCI-SIG base specs):
#: gen1-2 8b/10b, gen3-5 128b/130b, gen6-7 PAM4 with 256-byte FLITs of which 242 bytes carry TLP
#: and DLLP (the other 14 are CRC and FEC; glennklockwood.com/garden/PCIe-Gen6). Counting only the
#: 236 TLP bytes gives ~118 GB/s for gen6 x16 instead of 121.
PCIE_LANE: dict[int, tuple[float, float]] = {
    1: (2.5, 8 / 10),
    2: (5.0, 8 / 10),
    3: (8.0, 128 / 130),
    4: (16.0, 128 / 130),
    5: (32.0, 128 / 130),
    6: (64.0, 242 / 256),
    7: (128.0, 242 / 256),
}


def custom_card(
    *,
    bus_width: str | None,
    mem_type: str | None,
    memory_clock: str | None,
    data_rate: str | None,
    clock_source: str | None,
) -> MemoryBus:
    """A custom card, described by flags: its memory bus (a bus width plus either a data rate or a
    memory clock and type). It has no capacity, compute or host link figures."""
    if bus_width is None:
        raise UnitError("custom card: --bus-width is required with --memory-clock or --data-rate")
    width = parse_bus_width(bus_width)
    kind = memory_type(mem_type) if mem_type is not None else None
    if (memory_clock is None) == (data_rate is None):
        raise UnitError("custom card: give exactly one of --memory-clock or --data-rate")
    if clock_source is not None and memory_clock is None:
        raise UnitError("custom card: --clock-source applies to --memory-clock only")
    if data_rate is not None:
        return MemoryBus(width, parse_data_rate_gbps(data_rate), kind)
    assert memory_clock is not None
    if kind is None:
        raise UnitError("custom card: --memory-clock needs --memory-type (the clock multiplier depends on it)")
    source = clock_source or "gpuz"
    clock = parse_clock_mhz(memory_clock)
    rate = data_rate_from_clock(clock, kind, source)
    return MemoryBus(width, rate, kind, memory_clock_mhz=clock, clock_source=source)


#: The largest decode batch (the spec's own bound on batch_size).
MAX_BATCH = 10**7
#: The lowest efficiency accepted: below 1% of peak no memory system runs, and every time derived
#: from the efficiency stays finite.
MIN_EFFICIENCY = 0.01


def parse_efficiency(text: str | None, default: float, what: str) -> float:
    """A fraction in [0.01, 1] from '85%' or '0.85'; ``default`` when ``text`` is None."""
    if text is None:
        return default
    raw = text.strip()
    numeral = raw[:-1].strip() if raw.endswith("%") else raw
    if not numeral or not (numeral[0].isdigit() or numeral[0] == "."):  # no sign, no "inf"/"nan"
        raise UnitError(f"{what}: expected a fraction such as 0.85 or 85%, got {quoted(text)}")
    number = parse_decimal(numeral, what)
    value = float(number / 100 if raw.endswith("%") else number)
    if not MIN_EFFICIENCY <= value <= 1:
        raise UnitError(f"{what}: {quoted(text)} must be between 1% and 100%")
    return value


def select_card(
    gpu: str | None,
    *,
    bus_width: str | None = None,
    mem_type: str | None = None,
    memory_clock: str | None = None,
    data_rate: str | None = None,
    clock_source: str | None = None,
) -> tuple[MemoryBus, GPU | CustomCard | None, str | None]:
    """A catalog card by name (its bus and the card), or a custom card's bus from flags (no card); plus
    a note when the name was not an exact id or alias. A size as ``gpu`` (``48GiB``, a capacity-only
    card) goes with the flags that describe the bus: the card is that capacity with that bus, and the
    note states both."""
    flags = {
        "--bus-width": bus_width,
        "--memory-type": mem_type,
        "--memory-clock": memory_clock,
        "--data-rate": data_rate,
        "--clock-source": clock_source,
    }
    given = [flag for flag, value in flags.items() if value is not None]
    if gpu is None:
        if not given:
            raise UnitError(
                "give --gpu NAME (see 'vramcalc gpus') or a custom card: --bus-width with --data-rate, "
                "or with --memory-type and --memory-clock"
            )
        return (
            custom_card(
                bus_width=bus_width,
                mem_type=mem_type,
                memory_clock=memory_clock,
                data_rate=data_rate,
                clock_source=clock_source,
            ),
            None,
            None,
        )
    from vramcalc.hardware.custom import CustomCard
    from vramcalc.hardware.lookup import find_card

    entry, note = find_card(gpu)
    if isinstance(entry, CustomCard):  # a capacity: the bus comes from the custom-card flags
        if not given:
            raise UnitError(
                f"--gpu {gpu.strip()}: a capacity-only card has no memory bus; describe it with --bus-width and "
                "--data-rate (or --memory-type and --memory-clock)"
            )
        bus = custom_card(
            bus_width=bus_width,
            mem_type=mem_type,
            memory_clock=memory_clock,
            data_rate=data_rate,
            clock_source=clock_source,
        )
        flags_text = f"{', '.join(given[:-1])} and {given[-1]}" if len(given) > 1 else given[0]
        described = (
            f"--gpu {gpu.strip()}: a custom card with {entry.size_text} usable and the memory bus "
            f"{flags_text} give; no TFLOPS or PCIe figures"
        )
        return bus, entry, described
    if given:
        raise UnitError(f"--gpu describes the card already; drop {', '.join(given)}")
    return entry.memory_bus, entry, note


@dataclass(frozen=True)
class Streaming:
    """Time to read the weights a batch-1 decode step reads (a mixture of experts: the non-expert weights
    and top-k experts per MoE layer) from device memory: the floor on one decode step."""

    weights_bytes: int
    bytes_per_s: int
    efficiency: float

    @property
    def weight_stream_s(self) -> float:
        return self.weights_bytes / self.bytes_per_s

    @property
    def realistic_s(self) -> float:
        return self.weight_stream_s / self.efficiency

    @property
    def tokens_per_s_upper_bound(self) -> float:
        """Batch-1 decode tokens/s if a step did nothing but read the weights at peak bandwidth."""
        return 1 / self.weight_stream_s

    @property
    def tokens_per_s_realistic(self) -> float:
        return 1 / self.realistic_s


def pcie_bytes_per_s(gen: int, lanes: int) -> int:
    """Theoretical PCIe rate per direction, bytes/s: GT/s x line-code efficiency / 8 x lanes."""
    if gen not in PCIE_LANE:
        raise UnitError(f"PCIe generation {gen} is not known (1-{max(PCIE_LANE)})")
    rate_gt_s, code = PCIE_LANE[gen]
    return round(rate_gt_s * 1e9 * code / 8 * lanes)


@dataclass(frozen=True)
class HostTransfer:
    """Copying the weights host -> device over the card's PCIe link."""

    pcie_gen: int
    pcie_lanes: int
    weights_bytes: int
    efficiency: float

    @property
    def bytes_per_s(self) -> int:
        return pcie_bytes_per_s(self.pcie_gen, self.pcie_lanes)

    @property
    def seconds(self) -> float:
        return self.weights_bytes / self.bytes_per_s

    @property
    def realistic_s(self) -> float:
        return self.seconds / self.efficiency


@dataclass(frozen=True)
class Report:
    """Everything `vramcalc bandwidth` shows; parts are None where they do not apply (see notes)."""

    bus: MemoryBus
    gpu: GPU | None  # the catalog card; None for a custom card
    efficiency: float
    weights: Weights | None = None
    streaming: Streaming | None = None
    host: HostTransfer | None = None
    roofline: Roofline | None = None
    kv: KvCache | None = None
    notes: list[str] = field(default_factory=list)
    batch: int = 1  # sequences per decode step (--batch, else the spec's, else 1)
    sized: CustomCard | None = None  # a custom card given by its capacity, its bus from flags

    @property
    def capacity_bytes(self) -> int | None:
        """The card's memory, bytes: the catalog card's nominal capacity, or the capacity given; None for
        a card described by its bus alone."""
        card = self.gpu or self.sized
        return card.capacity_bytes if card is not None else None

    @property
    def capacity_label(self) -> str | None:
        """The capacity as the vendor states it ("80 GB") or as given ("32 GB"); None when not known."""
        card = self.gpu or self.sized
        return card.capacity_label if card is not None else None

    @property
    def streamed_weights_bytes(self) -> int | None:
        """Weight bytes a decode step of ``batch`` sequences reads (a mixture of experts: the experts its
        tokens are expected to route to); None without weights."""
        return None if self.weights is None else self.weights.streamed_bytes(self.batch)

    @property
    def decode_step_s(self) -> float | None:
        """Weights (as streamed at ``batch``) plus KV-cache read once at peak bandwidth (None without a KV cache)."""
        if self.kv is None or self.weights is None:
            return None
        return (self.weights.streamed_bytes(self.kv.batch) + self.kv.read_bytes_per_step) / self.bus.bytes_per_s

    @property
    def card_id(self) -> str | None:
        """The catalog id, or ``custom-32gb`` for a capacity given as the card; None for a bus alone."""
        card = self.gpu or self.sized
        return card.id if card is not None else None

    @property
    def name(self) -> str:
        card = self.gpu or self.sized
        return card.name if card is not None else "custom card"


def _roofline(bus: MemoryBus, gpu: GPU | None, weights: Weights, batch: int) -> tuple[Roofline | None, list[str]]:
    """The decode roofline of ``weights`` on the card; None, with the note that says why, where a figure is missing."""
    fp8, fp16 = (gpu.fp8_flops_per_s, gpu.fp16_flops_per_s) if gpu is not None else (None, None)
    use_fp8 = weights.dtype == "fp8" and fp8 is not None
    flops = fp8 if use_fp8 else fp16
    if flops is None:
        return None, ["roofline skipped: no dense FP16 tensor TFLOPS for this card"]
    if weights.flop_params is None:
        return None, ["roofline skipped: parameter count unknown (give --params or --dtype with --weights)"]
    roofline = Roofline(
        n_params=weights.flop_params,
        weights_bytes=weights.weights_bytes,
        batch=batch,
        flops_per_s=flops,
        bytes_per_s=bus.bytes_per_s,
        precision="FP8" if use_fp8 else "FP16/BF16",
        experts=weights.experts,
    )
    return roofline, []


def _host(gpu: GPU | None, weights: Weights, efficiency: float) -> tuple[HostTransfer | None, list[str]]:
    """Loading ``weights`` over the card's PCIe link; None, with the note that says why, where no link is known."""
    link = gpu.host_link if gpu is not None else None
    if link is None or link.pcie_gen is None or link.pcie_lanes is None:
        return None, ["host transfer skipped: no PCIe link known for this card"]
    return HostTransfer(link.pcie_gen, link.pcie_lanes, weights.weights_bytes, efficiency), []


def analyse(
    bus: MemoryBus,
    weights: Weights | None,
    *,
    gpu: GPU | CustomCard | None = None,
    batch: int | None = None,
    efficiency: float = DEFAULT_MEMORY_EFFICIENCY,
    host_efficiency: float = DEFAULT_HOST_EFFICIENCY,
) -> Report:
    """Bandwidth figures of a memory bus and, given weights, streaming, host transfer, KV read and
    roofline. ``gpu`` is the card the bus belongs to: a catalog card (its capacity, compute and host
    link), a custom card given by its capacity (the capacity only), or None for a bus described alone.

    ``batch`` defaults to the spec's batch size, else 1.
    """
    from vramcalc.hardware.custom import CustomCard

    if batch is not None and not 1 <= batch <= MAX_BATCH:
        raise UnitError(f"batch: expected 1 to {MAX_BATCH:,} sequences, got {quoted(batch)}")
    sized = gpu if isinstance(gpu, CustomCard) else None
    gpu = None if isinstance(gpu, CustomCard) else gpu
    if weights is None:
        return Report(bus=bus, gpu=gpu, efficiency=efficiency, sized=sized)
    notes = list(weights.notes)
    size = batch or weights.batch or 1
    card = gpu or sized
    if card is not None and weights.weights_bytes > card.capacity_bytes:
        notes.append(
            f"the weights exceed the card's {card.capacity_label}: these times are for one card streaming all of "
            "them (split across N cards, each streams 1/N)"
        )
    kv = None
    if weights.kv_bytes_per_token is not None and weights.context_tokens is not None:
        kv = KvCache(weights.kv_bytes_per_token, weights.context_tokens, size)
    host, host_notes = _host(gpu, weights, host_efficiency)
    roofline, roofline_notes = _roofline(bus, gpu, weights, size)
    return Report(
        bus=bus,
        gpu=gpu,
        efficiency=efficiency,
        weights=weights,
        streaming=Streaming(weights.streamed_bytes(1), bus.bytes_per_s, efficiency),
        host=host,
        roofline=roofline,
        kv=kv,
        notes=[*notes, *host_notes, *roofline_notes],
        batch=size,
        sized=sized,
    )
