"""Loading a spec: YAML or a mapping -> a validated :class:`~vramcalc.spec.models.Spec`, with every
validation problem as one line naming the file and the key; workload overrides; the JSON Schema.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from vramcalc.errors import SpecError
from vramcalc.files import (
    read_yaml,
)
from vramcalc.spec.models import Spec, Workload

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


def parse_spec(data: Any, source: str = "<spec>") -> Spec:
    """Validate a parsed document as a :class:`Spec`; problems become one line each."""
    if data is None:
        raise SpecError(f"{source}: empty spec (expected a mapping with 'model' and 'workload')")
    if not isinstance(data, dict):
        raise SpecError(f"{source}: expected a mapping with 'model' and 'workload', got {type(data).__name__}")
    try:
        return Spec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_format_validation_error(source, exc)) from None


def load_spec(path: str | Path) -> Spec:
    """Load and validate a spec file."""
    path = Path(path)
    return parse_spec(read_yaml(path), str(path))


def override_workload(spec: Spec, source: str, **changes: Any) -> Spec:
    """Return ``spec`` with workload keys replaced (CLI flags), validated like the file."""
    changes = {k: v for k, v in changes.items() if v is not None}
    if not changes:
        return spec
    data = {**spec.workload.model_dump(exclude_none=True), **changes}
    new_split = {"prompt_len", "max_new_tokens"} & changes.keys()
    if new_split and "seq_len" not in changes and None not in (data.get("prompt_len"), data.get("max_new_tokens")):
        data.pop("seq_len", None)  # the context follows the new prompt_len + max_new_tokens
    try:
        workload = Workload.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_format_validation_error(f"{source}: workload", exc)) from None
    return spec.model_copy(update={"workload": workload})


def json_schema() -> dict[str, Any]:
    """The JSON Schema of spec files, for editors."""
    return Spec.model_json_schema()
