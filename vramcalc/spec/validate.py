"""Validation of a parsed spec document as a :class:`~vramcalc.spec.models.Spec`, with every problem as
one line naming the file and the key (:mod:`vramcalc.spec.load` reads files and expands catalog models
before this runs)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from vramcalc.errors import SpecError
from vramcalc.spec.models import Spec

#: How pydantic tags a union member in an error's location ("list[str]", "literal['all-linear']").
_UNION_MEMBER = re.compile(r"^(int|float|str|bool|none|[a-z-]+\[.*\])$")


def _show_key(part: object) -> str:
    """A key as an error line shows it: quoted when empty, padded, unprintable or long."""
    text = str(part)
    if text and text.isprintable() and text == text.strip() and len(text) <= 80:
        return text
    return repr(text if len(text) <= 80 else text[:77] + "...")


def _error_parts(error: Any) -> tuple[str, str, bool]:
    """(dotted location, message, whether it is a union member's) of one pydantic error; a union member's
    tag ("list[str]") is left out of the location."""
    parts = list(error["loc"])
    if error["type"] == "extra_forbidden":
        return ".".join(_show_key(part) for part in parts), "unknown key", False
    message = error["msg"].removeprefix("Value error, ")
    member = next((i for i, part in enumerate(parts) if isinstance(part, str) and _UNION_MEMBER.match(part)), None)
    if member is not None:
        inner = ".".join(_show_key(part) for part in parts[member + 1 :])
        parts = parts[:member]
        message = f"{inner}: {message}" if inner else message
    return ".".join(_show_key(part) for part in parts), message, member is not None


def _format_validation_error(source: str, exc: ValidationError) -> str:
    """One line per problem: the members of a union (each reports its own error) share one line."""
    problems: dict[object, tuple[str, list[str]]] = {}
    for index, error in enumerate(exc.errors()):
        loc, message, union = _error_parts(error)
        problems.setdefault(loc if union else index, (loc, []))[1].append(message)
    lines = []
    for loc, messages in problems.values():
        message = "; or ".join(dict.fromkeys(messages))
        lines.append(f"{source}: {loc}: {message}" if loc else f"{source}: {message}")
    return "\n".join(lines)


def validate_spec(data: dict[str, Any], source: str) -> Spec:
    """Validate a spec mapping; problems become one line each, naming ``source``."""
    try:
        return Spec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_format_validation_error(source, exc)) from None
