"""The optional ``target`` section of a spec: the card a run is planned for (used by ``vramcalc check``).

    target:
      gpu: a100-80gb     # catalog name (see `vramcalc gpus`)
      count: 1           # GPUs the run is planned for
      reserve: 10%       # headroom kept free: a share of the usable memory, or a size ("2GiB")

Command-line flags (``--gpu``, ``--gpus``, ``--reserve``) override each key. Kept apart from
:mod:`vramcalc.spec.models` (which imports it) so the planning code can use :class:`Reserve` without a cycle.
"""

# Annotations are evaluated when defined (no `from __future__ import annotations`): pydantic would
# otherwise parse each field's annotation string while it builds the models, on every start.

import math
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import ConfigDict, Field, WithJsonSchema

from vramcalc.errors import UnitError
from vramcalc.spec.section import SpecSection
from vramcalc.units import parse_fraction, parse_size, quoted

#: Most GPUs one run may be planned for (a sanity bound on typos, not a hardware limit).
MAX_GPU_COUNT = 100_000


@dataclass(frozen=True)
class Reserve:
    """Memory kept free on each card: a share of its usable memory plus a fixed size, in int bytes."""

    fraction: float = 0.0
    n_bytes: int = 0
    text: str = "0%"

    def bytes_of(self, usable_bytes: int) -> int:
        """Bytes reserved on a card exposing ``usable_bytes`` (a share rounds up to a whole byte)."""
        return self.n_bytes + math.ceil(self.fraction * usable_bytes)


NO_RESERVE = Reserve()


def parse_reserve(value: object, what: str = "reserve") -> Reserve:
    """``"10%"`` (a share of the usable memory) or a size with a unit (``"2GiB"``); a bare number is rejected."""
    if isinstance(value, Reserve):
        return value
    if not isinstance(value, str):
        raise UnitError(f"{what}: expected a percentage such as '10%' or a size such as '2GiB', got {quoted(value)}")
    text = value.strip()
    if text.endswith("%"):
        return Reserve(fraction=parse_fraction(text, what), text=text)
    if text and text[-1].isdigit():
        raise UnitError(f"{what}: {quoted(value)} needs a unit: a percentage such as '10%' or a size such as '2GiB'")
    return Reserve(n_bytes=parse_size(text, what), text=text)


def _validate_reserve(value: object) -> Reserve:
    try:
        return parse_reserve(value)
    except UnitError as exc:
        raise ValueError(str(exc).split(": ", 1)[-1]) from None


class _ReserveSchema:
    """How pydantic validates and serialises a :class:`Reserve`: :func:`parse_reserve`, then an instance
    check; serialised back to the text it was given as. Written as a pydantic-core schema so that loading
    a spec neither builds pydantic's dataclass schema of :class:`Reserve` nor imports its serializer
    module. The ``ref`` names the inner schema as that dataclass schema did, so the JSON Schema keeps
    giving the field no title."""

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.no_info_before_validator_function(
            _validate_reserve,
            core_schema.is_instance_schema(Reserve, ref=f"{__name__}.Reserve"),
            serialization=core_schema.plain_serializer_function_ser_schema(lambda reserve: reserve.text),
        )


#: A reserve from "10%" or "2GiB"; serialised back to the text it was given as.
ReserveField = Annotated[
    Reserve,
    _ReserveSchema(),
    WithJsonSchema({"type": "string", "pattern": r"^[0-9.]+\s*(%|B|[KMGT]i?B)$", "examples": ["10%", "2GiB"]}),
]


class Target(SpecSection):
    """Where the spec is meant to run. Every key is optional here; ``vramcalc check`` needs a GPU
    from this section or from ``--gpu``."""

    model_config = ConfigDict(defer_build=True)  # built when a spec first gives the section

    gpu: Annotated[str, Field(min_length=1, max_length=100)] | None = None
    count: Annotated[int, Field(strict=True, gt=0, le=MAX_GPU_COUNT)] = 1
    reserve: ReserveField | None = None
