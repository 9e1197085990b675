"""The ``vramcalc bandwidth --json`` document as a model: :class:`BandwidthResult`.

Sizes are int bytes, rates bytes per second (``*_bytes_per_s``), per-pin data rates Gbps, clocks MHz,
times seconds. The card's keys are always present; the weight keys (``weights_bytes`` to ``roofline``)
only when weights were given (a spec, a parameter count or a size); ``notes`` last.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from vramcalc.results.base import Result

if TYPE_CHECKING:
    from vramcalc.hardware.bandwidth import Report, Roofline


class RooflineResult(Result):
    """A decode step at a batch size on the roofline: 2 x params x batch FLOPs over one read of the weights."""

    batch: int = Field(description="Decode batch (sequences per step).")
    intensity_flop_per_byte: float = Field(description="Arithmetic intensity: FLOPs per byte of weights read.")
    weights_read_bytes: int = Field(
        description="Weight bytes the step reads at this batch (a mixture of experts: the experts its tokens route to)."
    )
    ridge_flop_per_byte: float = Field(description="The card's ridge point: peak FLOP/s / peak bytes/s.")
    flops_per_s: float = Field(description="Peak dense tensor rate used, FLOP/s.")
    precision: str = Field(description="The tensor rate's precision: 'FP16/BF16' or 'FP8'.")
    bound: str = Field(description="'memory' or 'compute': which limit the step hits at this batch.")
    crossover_batch: float = Field(description="Batch where the step turns compute-bound.")
    first_compute_bound_batch: int = Field(description="Smallest whole batch at or past the crossover.")

    @classmethod
    def of(cls, roof: Roofline) -> RooflineResult:
        return cls(
            batch=roof.batch,
            intensity_flop_per_byte=roof.intensity,
            weights_read_bytes=roof.bytes_per_step,
            ridge_flop_per_byte=roof.ridge,
            flops_per_s=roof.flops_per_s,
            precision=roof.precision,
            bound=roof.bound,
            crossover_batch=roof.crossover_batch,
            first_compute_bound_batch=roof.first_compute_bound_batch,
        )


class BandwidthResult(Result):
    """Memory bandwidth of a card (data rate x bus width / 8) and, given weights, the time to stream them."""

    gpu: str | None = Field(
        description="Catalog id of the card; custom-32gb for a capacity given as --gpu (32GB); null for a card "
        "described by its bus alone."
    )
    name: str = Field(description="Full name of the card ('custom card' for one described by its bus alone).")
    memory_type: str | None = Field(description="Memory type (e.g. 'HBM3', 'GDDR6X'), null when not given.")
    bus_width_bits: int = Field(description="Memory bus width, bits.")
    data_rate_gbps: float = Field(description="Per-pin data rate, Gbps (10^9 bit/s per pin).")
    memory_clock_mhz: float | None = Field(
        description="Memory clock the data rate was computed from, MHz (custom card given a clock; else null)."
    )
    clock_source: str | None = Field(description="Tool the clock was read from: 'gpuz' or 'nvidia-smi' (or null).")
    bandwidth_bytes_per_s: int = Field(
        description="Bandwidth the timings use, bytes/s: the vendor's figure when there is one, else the computed one."
    )
    official_bandwidth_bytes_per_s: int | None = Field(
        description="The vendor's bandwidth, bytes/s (null for a custom card)."
    )
    computed_bandwidth_bytes_per_s: int = Field(description="data_rate_gbps x bus_width_bits / 8, bytes/s.")
    bandwidth_differs: bool = Field(description="The computed figure differs from the vendor's by more than 1 %.")
    capacity_bytes: int | None = Field(
        description="Memory capacity, bytes: the capacity given for a custom card (null for a bus alone)."
    )
    capacity_vendor: str | None = Field(
        description="Capacity as the vendor states it (e.g. '80 GB') or as given ('32 GB'), or null."
    )
    weights_bytes: int | None = Field(
        None, description="Bytes of all the weights (a dense decode step streams them all; see streamed_weights_bytes)."
    )
    n_params: int | None = Field(None, description="Parameter count (null when only a size was given).")
    dtype: str | None = Field(None, description="Weight dtype (e.g. 'fp16', 'int4'), null when not known.")
    efficiency: float | None = Field(None, description="Achieved share of peak memory bandwidth assumed (0-1].")
    weight_stream_s: float | None = Field(
        None,
        description="Seconds to read at peak bandwidth the weights a batch-1 step reads (a mixture of experts: its "
        "non-expert weights and top-k experts per MoE layer).",
    )
    weight_stream_realistic_s: float | None = Field(None, description="weight_stream_s / efficiency, seconds.")
    decode_tokens_per_s_upper_bound: float | None = Field(
        None, description="Batch-1 decode tokens/s if a step only read the weights at peak bandwidth."
    )
    decode_tokens_per_s_realistic: float | None = Field(None, description="The same at efficiency, tokens/s.")
    host_link_bytes_per_s: int | None = Field(
        None, description="PCIe rate per direction, bytes/s (null when the card's link is not known)."
    )
    host_efficiency: float | None = Field(None, description="Achieved share of the PCIe rate assumed (0-1].")
    host_transfer_s: float | None = Field(None, description="Seconds to copy the weights host -> device at that rate.")
    host_transfer_realistic_s: float | None = Field(None, description="host_transfer_s / host_efficiency, seconds.")
    kv_cache_bytes_per_token: int | None = Field(
        None, description="KV cache per token, bytes (an inference spec with a KV cache; else null)."
    )
    kv_cache_read_bytes_per_step: int | None = Field(
        None, description="KV cache a decode step reads: per token x context x batch, bytes."
    )
    decode_step_s: float | None = Field(
        None,
        description="Seconds to read the streamed weights and the KV cache once at peak bandwidth (null without KV).",
    )
    decode_batch: int | None = Field(None, description="Sequences per decode step (--batch, else the spec's, else 1).")
    streamed_weights_bytes: int | None = Field(
        None,
        description="Weight bytes a decode step of decode_batch sequences reads: weights_bytes for a dense model; a "
        "mixture of experts reads its non-expert weights plus expected_experts_per_layer experts per MoE layer.",
    )
    active_params: int | None = Field(None, description="Parameters a token passes through (mixture of experts).")
    moe_layers: int | None = Field(None, description="Layers with routed experts (null for a dense model).")
    experts_per_layer: int | None = Field(None, description="Routed experts per MoE layer (null for a dense model).")
    experts_per_token: int | None = Field(None, description="Experts each token is routed to, top-k (or null).")
    expected_experts_per_layer: float | None = Field(
        None,
        description="Expected distinct experts per MoE layer that decode_batch tokens route to: E x (1 - (1 - k/E)^B), "
        "assuming uniform, independent routing (null for a dense model).",
    )
    roofline: RooflineResult | None = Field(None, description="The decode roofline (null when not computable).")
    notes: list[str] = Field(description="What was skipped or assumed, one line each.")

    @classmethod
    def of(cls, report: Report) -> BandwidthResult:
        """The document of :func:`vramcalc.hardware.bandwidth.analyse`'s report."""
        doc = _card_keys(report)
        if report.weights is not None:
            doc.update(_weight_keys(report))
        doc["notes"] = list(report.notes)
        return cls(**doc)


def _card_keys(report: Report) -> dict[str, Any]:
    bus = report.bus
    return {
        "gpu": report.card_id,
        "name": report.name,
        "memory_type": bus.memory_type,
        "bus_width_bits": bus.bus_width_bits,
        "data_rate_gbps": bus.data_rate_gbps,
        "memory_clock_mhz": bus.memory_clock_mhz,
        "clock_source": bus.clock_source,
        "bandwidth_bytes_per_s": bus.bytes_per_s,
        "official_bandwidth_bytes_per_s": bus.official_bytes_per_s,
        "computed_bandwidth_bytes_per_s": bus.computed_bytes_per_s,
        "bandwidth_differs": bus.bandwidth_differs,
        "capacity_bytes": report.capacity_bytes,
        "capacity_vendor": report.capacity_label,
    }


def _weight_keys(report: Report) -> dict[str, Any]:
    assert report.weights is not None and report.streaming is not None
    weights, stream, host, kv, roof = report.weights, report.streaming, report.host, report.kv, report.roofline
    moe = weights.experts
    return {
        "weights_bytes": weights.weights_bytes,
        "n_params": weights.n_params,
        "dtype": weights.dtype,
        "efficiency": report.efficiency,
        "weight_stream_s": stream.weight_stream_s,
        "weight_stream_realistic_s": stream.realistic_s,
        "decode_tokens_per_s_upper_bound": stream.tokens_per_s_upper_bound,
        "decode_tokens_per_s_realistic": stream.tokens_per_s_realistic,
        "host_link_bytes_per_s": host.bytes_per_s if host else None,
        "host_efficiency": host.efficiency if host else None,
        "host_transfer_s": host.seconds if host else None,
        "host_transfer_realistic_s": host.realistic_s if host else None,
        "kv_cache_bytes_per_token": kv.bytes_per_token if kv else None,
        "kv_cache_read_bytes_per_step": kv.read_bytes_per_step if kv else None,
        "decode_step_s": report.decode_step_s,
        "decode_batch": report.batch,
        "streamed_weights_bytes": report.streamed_weights_bytes,
        "active_params": weights.active_params,
        "moe_layers": moe.moe_layers if moe else None,
        "experts_per_layer": moe.experts if moe else None,
        "experts_per_token": moe.top_k if moe else None,
        "expected_experts_per_layer": moe.expected_experts(report.batch) if moe else None,
        "roofline": None if roof is None else RooflineResult.of(roof),
    }
