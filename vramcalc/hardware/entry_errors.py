"""A GPU catalog entry that does not validate, as one line in plain words: the file, the entry, the field
and what is wrong with its value ("expected a number, got 'lots'"), never pydantic's own report.

Of several problems the line names the one that explains the most: an unknown field close to a
missing one ("capcity": did you mean 'capacity'?) before the missing field it stands for, then the
first problem in the entry's order.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from vramcalc.spec.validate import did_you_mean, show_key, typo_targets
from vramcalc.units import quoted

#: What a value of each type was expected to be (pydantic's error types).
_EXPECTED = {
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "finite_number": "a finite number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "text",
    "list_type": "a list",
    "model_type": "a mapping of fields",
    "model_attributes_type": "a mapping of fields",
    "dict_type": "a mapping of fields",
}

#: The rule a catalog identifier follows (id, aliases, default_for).
ID_RULE = "lowercase letters, digits and '-', starting with a letter or digit"


def _problem(error: Any, model: type[BaseModel]) -> str:
    """What is wrong, in plain words, without the location."""
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    if kind == "missing":
        return "missing (every entry needs it)"
    if kind == "extra_forbidden":
        return "unknown field" + did_you_mean(model, list(error["loc"]))
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {quoted(value)}"
    if kind in ("literal_error", "enum"):
        return f"expected one of {ctx.get('expected', '?')}, got {quoted(value)}"
    bounds = {"greater_than": "greater than", "greater_than_equal": "at least", "less_than": "less than"}
    if kind in bounds or kind == "less_than_equal":
        limit = next(iter(ctx.values()), "?")
        return f"must be {bounds.get(kind, 'at most')} {limit}, got {quoted(value)}"
    if kind == "string_pattern_mismatch":
        return f"expected {ID_RULE}, got {quoted(value)}"
    if kind == "string_too_long":
        return f"longer than {ctx.get('max_length', '?')} characters"
    return str(error["msg"]).removeprefix("Value error, ")


def entry_error(prefix: str, exc: ValidationError, model: type[BaseModel]) -> str:
    """One line for an entry that does not validate: ``prefix`` (file and entry), the field, the problem."""
    error = _pick(exc.errors(), model)
    loc = ".".join(show_key(part) for part in error["loc"])
    problem = _problem(error, model)
    return f"{prefix}: {loc}: {problem}" if loc else f"{prefix}: {problem}"


def _pick(errors: list[Any], model: type[BaseModel]) -> Any:
    """The problem to report: an unknown field close to a missing field (the typo that explains it),
    else the first."""
    typos = set(typo_targets(errors, model).values())
    return next((error for error in errors if tuple(error["loc"]) in typos), errors[0])
