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

from pydantic import BaseModel, ConfigDict, GetCoreSchemaHandler, GetJsonSchemaHandler, ValidationInfo, field_validator
from pydantic_core import CoreSchema, core_schema

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


class BuiltOnUse:
    """Field metadata for an optional section that most specs leave out (``parallel``, ``quantization``,
    ``adapter``, ``target``): the field validates with the section's own model, whose validator pydantic
    builds the first time a spec gives the section (the section's class sets ``defer_build``), not while the
    enclosing model is built at start-up. Errors keep their locations (``parallel.zero: ...``); a section
    is written out by its own model's serializer, and the JSON schema is the section's own."""

    def __init__(self) -> None:
        self.section: type[BaseModel] | None = None

    def __get_pydantic_core_schema__(self, source: type[BaseModel], handler: GetCoreSchemaHandler) -> CoreSchema:
        self.section = section = source

        def validate(value: Any) -> BaseModel:
            return value if isinstance(value, section) else section.model_validate(value)

        dump = core_schema.plain_serializer_function_ser_schema(
            lambda value: value, return_schema=core_schema.any_schema()
        )
        # a reference, as a nested model has: the field's JSON schema is the section's, without a title of its own
        ref = f"{section.__module__}.{section.__qualname__}:built-on-use"
        return core_schema.no_info_plain_validator_function(validate, serialization=dump, ref=ref)

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> Any:
        """The section's own schema, among the definitions as pydantic writes a nested model (writing the
        schema builds the section's validator)."""
        assert self.section is not None
        self.section.model_rebuild()
        generator = getattr(handler, "generate_json_schema", None)  # pydantic's generator: it adds definitions
        generate = handler if generator is None else generator.generate_inner
        return generate(self.section.__pydantic_core_schema__)
