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
from typing import Any, ClassVar

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


class SpecSection(BaseModel):
    """A section of a spec file (``model``, ``workload``, ``parallel``, ``target`` and their parts)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)
    #: The fields whose type is a number (set once per class, when pydantic has built its fields).
    _numeric_fields: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls._numeric_fields = frozenset(name for name, f in cls.model_fields.items() if _is_numeric(f.annotation))

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name in cls._numeric_fields:
            raise ValueError(f"expected a number, got {str(value).lower()}")
        return value
