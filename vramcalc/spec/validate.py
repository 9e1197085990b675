"""Validation of a parsed spec document as a :class:`~vramcalc.spec.models.Spec`, with every problem as
one line naming the file and the key (:mod:`vramcalc.spec.load` reads files and expands catalog models
before this runs)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from vramcalc.errors import SpecError
from vramcalc.spec.models import Spec, with_image_tokens

#: How pydantic tags a union member in an error's location ("list[str]", "literal['all-linear']").
_UNION_MEMBER = re.compile(r"^(int|float|str|bool|none|[a-z-]+\[.*\])$")


def show_key(part: object) -> str:
    """A key as an error line shows it: quoted when empty, padded, unprintable or long."""
    text = str(part)
    if text and text.isprintable() and text == text.strip() and len(text) <= 80:
        return text
    return repr(text if len(text) <= 80 else text[:77] + "...")


def _section_model(root: Any, parts: list[Any]) -> Any:
    """The spec section (a pydantic model class) at ``parts`` below ``root``; None where the path leaves
    the models (a list item, a union member's tag, a plain value)."""
    import types
    import typing

    from pydantic import BaseModel

    model = root
    for part in parts:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            return None
        found = None
        todo = [field.annotation]
        while todo and found is None:
            annotation = todo.pop()
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                found = annotation
            elif typing.get_origin(annotation) in (typing.Union, types.UnionType, typing.Annotated):
                todo += list(typing.get_args(annotation))
        if found is None:
            return None
        model = found
    return model


def close_keys(root: Any, parts: list[Any]) -> list[str]:
    """The keys of the section (a pydantic model below ``root``) holding the unknown key ``parts[-1]``
    that are close to it: a typo's likely meaning, best first."""
    import difflib

    key = parts[-1] if parts else None
    section = _section_model(root, parts[:-1]) if root is not None else None
    if not isinstance(key, str) or section is None or len(key) > 80:
        return []
    return difflib.get_close_matches(key.strip().lower(), list(section.model_fields), n=2, cutoff=0.6)


def did_you_mean(root: Any, parts: list[Any]) -> str:
    """ "; did you mean 'layers'?" for an unknown key close to one of its section's keys, else ""."""
    close = close_keys(root, parts)
    return f"; did you mean {' or '.join(repr(name) for name in close)}?" if close else ""


def typo_targets(errors: list[Any], root: Any) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """The missing keys that an unknown key beside them is close to (``batch_sise`` for a missing
    ``batch_size``), each location mapped to the unknown key's: the typo explains the missing key, so
    its "did you mean" line stands for both."""
    missing = {tuple(error["loc"]) for error in errors if error["type"] == "missing"}
    found: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for error in errors:
        parts = list(error["loc"])
        if error["type"] == "extra_forbidden" and parts:
            for key in close_keys(root, parts):
                if (*parts[:-1], key) in missing:
                    found.setdefault((*parts[:-1], key), tuple(parts))
    return found


def _error_parts(error: Any, root: Any = None) -> tuple[str, str, bool]:
    """(dotted location, message, whether it is a union member's) of one pydantic error; a union member's
    tag ("list[str]") is left out of the location. An unknown key gets the close keys of its section
    (``root``: the model validated)."""
    parts = list(error["loc"])
    if error["type"] == "extra_forbidden":
        return ".".join(show_key(part) for part in parts), "unknown key" + did_you_mean(root, parts), False
    message = error["msg"].removeprefix("Value error, ")
    member = next((i for i, part in enumerate(parts) if isinstance(part, str) and _UNION_MEMBER.match(part)), None)
    if member is not None:
        inner = ".".join(show_key(part) for part in parts[member + 1 :])
        parts = parts[:member]
        message = f"{inner}: {message}" if inner else message
    return ".".join(show_key(part) for part in parts), message, member is not None


def _format_validation_error(source: str, exc: ValidationError, root: Any = None) -> str:
    """One line per problem: the members of a union (each reports its own error) share one line; a
    missing key that an unknown key beside it is close to (a typo) has no line of its own, the typo's
    "did you mean" line says it all."""
    problems: dict[object, tuple[str, list[str]]] = {}
    errors = exc.errors()
    explained = typo_targets(errors, root) if root is not None else set()
    for index, error in enumerate(errors):
        if error["type"] == "missing" and tuple(error["loc"]) in explained:
            continue
        loc, message, union = _error_parts(error, root)
        problems.setdefault(loc if union else index, (loc, []))[1].append(message)
    lines = []
    for loc, messages in problems.values():
        message = "; or ".join(dict.fromkeys(messages))
        lines.append(f"{source}: {loc}: {message}" if loc else f"{source}: {message}")
    return "\n".join(lines)


def validate_spec(data: dict[str, Any], source: str) -> Spec:
    """Validate a spec mapping; problems become one line each, naming ``source``."""
    try:
        spec = Spec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_format_validation_error(source, exc, Spec)) from None
    return with_image_tokens(spec)
