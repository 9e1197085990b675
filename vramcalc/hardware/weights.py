"""What a decode step streams: weight bytes from flags or a spec, and the KV cache read per token.

Units: int bytes; parameter counts are plain ints. Pure: no typer, no rich.
"""

from __future__ import annotations

from dataclasses import dataclass

from vramcalc.errors import UnitError
from vramcalc.units import DTYPE_BITS, dtype_bytes, parse_count, parse_size

#: Weight dtypes accepted by --dtype (widths from units.DTYPE_BITS).
WEIGHT_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8", "int4")


@dataclass(frozen=True)
class KvCache:
    """KV-cache bytes a decode step reads: every cached token of every sequence in the batch."""

    bytes_per_token: int
    context_tokens: int
    batch: int

    @property
    def read_bytes_per_step(self) -> int:
        return self.bytes_per_token * self.context_tokens * self.batch


#: The routing assumption behind :meth:`ExpertStream.expected_experts`, as the output states it.
ROUTING_ASSUMPTION = (
    "each token picks its top-k experts uniformly at random, independently of the other tokens in the batch"
)


def expected_experts(experts: int, top_k: int, batch: float) -> float:
    """Expected number of distinct experts of one layer that ``batch`` tokens route to: E x (1 - (1 - k/E)^B).

    Under :data:`ROUTING_ASSUMPTION` a token misses a given expert with probability C(E-1, k) / C(E, k)
    = 1 - k/E, and B tokens all miss it with probability (1 - k/E)^B. One token reads k experts; the count
    approaches all E as B grows. Real routers are skewed, so a real batch reads fewer distinct experts.
    """
    if batch == 1:  # exactly k (the float formula can land a hair below)
        return float(top_k)
    return experts * (1 - (1 - top_k / experts) ** batch)


@dataclass(frozen=True)
class ExpertStream:
    """The routed experts of a mixture-of-experts model: how many a decode step reads depends on the batch.

    Shared experts, routers, attention and embeddings are not here: every step reads them.
    """

    experts: int  # routed experts per MoE layer
    top_k: int  # experts each token is routed to
    moe_layers: int
    expert_params: int  # one expert of one layer
    expert_bytes: int  # its bytes as stored

    def expected_experts(self, batch: float) -> float:
        return expected_experts(self.experts, self.top_k, batch)

    def routed_bytes(self, batch: float) -> float:
        """Expected bytes of routed experts a step of ``batch`` tokens reads, over every MoE layer."""
        return self.moe_layers * self.expected_experts(batch) * self.expert_bytes

    @property
    def all_bytes(self) -> int:
        """Every routed expert of every MoE layer."""
        return self.moe_layers * self.experts * self.expert_bytes

    def streamed_bytes(self, weights_bytes: int, batch: int) -> int:
        """Of ``weights_bytes`` (every parameter), what a step of ``batch`` tokens reads: all but the routed
        experts once, plus the expected distinct experts of each MoE layer."""
        return weights_bytes - self.all_bytes + round(self.routed_bytes(batch))


@dataclass(frozen=True)
class Weights:
    """The bytes a decode step streams, with the parameter count when known.

    ``weights_bytes`` is every parameter; a mixture of experts (``experts``) reads only the experts its
    batch routes to (:meth:`streamed_bytes`) and does the FLOPs of ``active_params`` per token.
    """

    weights_bytes: int
    n_params: int | None
    dtype: str | None
    origin: str
    batch: int | None = None
    context_tokens: int | None = None
    kv_bytes_per_token: int | None = None
    notes: tuple[str, ...] = ()
    experts: ExpertStream | None = None
    active_params: int | None = None  # parameters a token passes through (mixture of experts)

    def streamed_bytes(self, batch: int) -> int:
        """Weight bytes a decode step of ``batch`` sequences reads: all of them for a dense model; for a
        mixture of experts, everything but the routed experts once, plus the expected distinct experts
        of each MoE layer."""
        if self.experts is None:
            return self.weights_bytes
        return self.experts.streamed_bytes(self.weights_bytes, batch)

    @property
    def flop_params(self) -> int | None:
        """Parameters each generated token multiplies through (2 FLOPs each): the active ones."""
        return self.active_params if self.active_params is not None else self.n_params


def weights_from_flags(params: str | None, dtype: str | None, weights: str | None) -> Weights | None:
    """Weights from --params/--dtype/--weights (None when none is given); fp16 when --dtype is omitted."""
    if dtype is not None and dtype not in WEIGHT_DTYPES:
        raise UnitError(f"dtype: unknown {dtype!r} (one of {', '.join(WEIGHT_DTYPES)})")
    if params is None and weights is None:
        if dtype is not None:
            raise UnitError("--dtype needs --params or --weights")
        return None
    if params is not None and weights is not None and dtype is not None:
        raise UnitError("give two of --params, --dtype and --weights, not all three")
    n_params = parse_count(params, "params") if params is not None else None
    if n_params is not None and n_params <= 0:
        raise UnitError(f"params: {params!r} must be above zero")
    notes: tuple[str, ...] = ()
    if weights is not None:
        n_bytes = parse_size(weights, "weights")
        origin = f"--weights {weights}"
        if n_params is None and dtype is not None:
            n_params = n_bytes * 8 // DTYPE_BITS[dtype]
            origin += f": {n_params:,} parameters at {DTYPE_BITS[dtype] / 8:g} bytes ({dtype})"
    else:
        assert n_params is not None
        if dtype is None:
            dtype, notes = "fp16", ("--dtype not given: fp16",)
        n_bytes = dtype_bytes(dtype, n_params)
        origin = f"{n_params:,} parameters x {DTYPE_BITS[dtype] / 8:g} bytes ({dtype})"
    if n_bytes <= 0:
        raise UnitError("weights: must be above zero bytes")
    return Weights(weights_bytes=n_bytes, n_params=n_params, dtype=dtype, origin=origin, notes=notes)
