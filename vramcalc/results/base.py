"""The base of the result models: strict types, frozen, and the JSON document of the CLI."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict


class Result(BaseModel):
    """A JSON document of the CLI as a model. Strict: a value of the wrong type (a float where the document
    carries int bytes) is an error, never converted, so the document cannot drift from these types."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    def to_dict(self) -> dict[str, Any]:
        """The document as the CLI prints it: JSON types, keys in a fixed order; keys that do not apply
        (never given to the constructor) are absent, keys that apply with no value are null."""
        return self.model_dump(mode="json", exclude_unset=True)

    def to_json(self, indent: int | None = 2) -> str:
        """:meth:`to_dict` as JSON text (the CLI's ``--json`` output, without the final newline)."""
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)  # strict RFC 8259: no NaN/Infinity
