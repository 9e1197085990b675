"""The base of every spec section: unknown keys are errors, values are frozen, and a YAML boolean
is never read as a number.

Pydantic's lax mode reads ``true`` as ``1`` for an ``int`` field and ``1.0`` for a ``float`` one, so
``capacity_factor: true`` would silently mean 1.0. Here a boolean given to a numeric field (``int``,
``float`` or an optional or annotated form of them) is an error naming the key; fields that take a
boolean, or an enum with its own reading of ``true``/``false``, are left to their own validation.
"""

# Annotations are evaluated when defined (no `from __future__ import annotations`), as in the models.

import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

_NUMBERS = (int, float)


def _is_numeric(annotation: Any) -> bool:
    """Whether a field annotation is a number type (``int``, ``float``, optional or annotated) without ``bool``."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _is_numeric(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        return bool(members) and all(_is_numeric(arg) for arg in members)
    return annotation in _NUMBERS


def _no_boolean_number(cls: type, value: Any, info: ValidationInfo) -> Any:
    """A numeric field's before-validator: a YAML boolean is refused rather than read as 1 or 0."""
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {str(value).lower()}")
    return value


class SpecSection(BaseModel):
    """A section of a spec file (``model``, ``workload``, ``parallel``, ``target`` and their parts)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Give the section's own numeric fields the boolean check, before pydantic collects its validators
        (it does so right after this runs). Only those fields: a validator on every field (``"*"``) would
        add a Python call per field to each validation and to each schema pydantic builds at start-up."""
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("__annotations__", {})
        numeric = [name for name, annotation in own.items() if not name.startswith("_") and _is_numeric(annotation)]
        if numeric:
            check: Any = field_validator(*numeric, mode="before", check_fields=False)(classmethod(_no_boolean_number))
            cls._no_boolean_numbers = check  # type: ignore[attr-defined]
