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


@dataclass(frozen=True)
class Weights:
    """The bytes a decode step streams, with the parameter count when known."""

    weights_bytes: int
    n_params: int | None
    dtype: str | None
    origin: str
    batch: int | None = None
    context_tokens: int | None = None
    kv_bytes_per_token: int | None = None
    notes: tuple[str, ...] = ()


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
