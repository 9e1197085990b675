"""Numeric keys of the spec, enumerated from its JSON Schema, and specs with a raw value at one of them
(for the ``numbers`` fuzz target: fuzz_numbers.py).

A key is numeric when it is typed integer or number, or when a string alternative has a pattern that
starts with a digit (sizes, shares, counts with a suffix); so a key added later is fuzzed without
editing this file.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from typing import Any

from fuzz_targets import base_specs
from fuzz_values import yaml_text


@dataclass(frozen=True)
class NumericField:
    path: tuple[str, ...]
    units: tuple[str, ...]  # suffixes the key's pattern accepts ("%", "GiB", "B", ...)


def _types(node: dict[str, Any], defs: dict[str, Any]) -> list[dict[str, Any]]:
    """The alternatives of a schema node, with ``$ref`` resolved."""
    if "$ref" in node:
        return _types(defs[node["$ref"].split("/")[-1]], defs)
    if "anyOf" in node:
        return [alt for option in node["anyOf"] for alt in _types(option, defs)]
    return [node]


def _units(pattern: str) -> tuple[str, ...]:
    units = []
    if "%" in pattern:
        units.append("%")
    if "i?B" in pattern:
        units += ["GiB", "GB", "MiB"]
    if "[KMBT]" in pattern:
        units += ["B", "T", "M"]
    return tuple(units)


@functools.cache
def numeric_fields() -> tuple[NumericField, ...]:
    """Every numeric key of the spec (by its JSON Schema), as a path from the top of the file."""
    from vramcalc.spec.load import json_schema

    schema = json_schema()
    defs = schema.get("$defs", {})
    found: list[NumericField] = []

    def walk(node: dict[str, Any], path: tuple[str, ...]) -> None:
        for key, prop in node.get("properties", {}).items():
            alternatives = _types(prop, defs)
            for alt in alternatives:
                if alt.get("type") == "object" and "properties" in alt:
                    walk(alt, (*path, key))
            kinds = {alt.get("type") for alt in alternatives}
            patterns = [alt["pattern"] for alt in alternatives if str(alt.get("pattern", "")).startswith("^[0-9")]
            if kinds & {"integer", "number"} or patterns:
                found.append(NumericField((*path, key), tuple(u for p in patterns for u in _units(p))))

    walk(schema, ())
    return tuple(found)


#: A minimal valid section for a key whose section the base spec lacks.
SECTION_SEEDS: dict[tuple[str, ...], dict[str, Any]] = {
    ("workload", "adapter"): {"rank": 8},
    ("workload", "quantization"): {"method": "gptq", "bits": 4},
    ("parallel",): {"gpus": 2, "data": 2},
    ("target",): {"gpu": "h100"},
}
PLACEHOLDER = "__HOSTILE_NUMERAL__"


def has_key(doc: Any, path: tuple[str, ...]) -> bool:
    for key in path:
        if not isinstance(doc, dict) or key not in doc:
            return False
        doc = doc[key]
    return True


#: A key that only matters next to another one (a capacity factor needs experts).
NEEDS = {"capacity_factor": ("model", "experts"), "moe_layer_frequency": ("model", "experts")}


def bases_for(field: NumericField) -> list[str]:
    """The specs (tiny, configs/*.yaml) that have ``field``'s key (or the key it goes with), else its
    section, else the tiny one."""
    specs = base_specs()
    for path in (NEEDS.get(field.path[-1], field.path), field.path[:-1]):
        found = sorted(name for name, doc in specs.items() if path and has_key(doc, path))
        if found:
            return found
    return ["tiny"]


def spec_with(field: NumericField, value: str, base: str = "tiny") -> str:
    """Spec ``base`` with ``value`` written raw (as YAML reads it) at ``field``'s key."""
    doc = copy.deepcopy(base_specs()[base])
    node = doc
    for depth, key in enumerate(field.path[:-1]):
        if not isinstance(node.get(key), dict):
            node[key] = copy.deepcopy(SECTION_SEEDS.get(field.path[: depth + 1], {}))
        node = node[key]
    node[field.path[-1]] = PLACEHOLDER
    return yaml_text(doc, flow=False).replace(PLACEHOLDER, value, 1)
