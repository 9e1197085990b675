"""Fuzz targets of the spec reader: random YAML, mutated specs, astronomically large specs (a
hypothesis strategy and a check each; fuzz_registry.py lists every target).
"""

from __future__ import annotations

import copy
import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from fuzz_support import (
    CONFIGS,
    TINY_SPEC,
    FuzzFailure,
    Hang,
    check_result,
    describe,
    error_lines,
    invoke,
    time_limit,
    tolerating_known_issues,
    violation,
    workspace,
)
from fuzz_values import (
    ALWAYS_INVALID,
    KEY_NEAR_MISSES,
    YAML_TOKENS,
    awkward_values,
    documents,
    yaml_text,
)
from hypothesis import strategies as st

# --------------------------------------------------------------------------------------------------
# Target 1: random YAML documents (library level and through the CLI).
# --------------------------------------------------------------------------------------------------


@st.composite
def yaml_documents(draw: st.DrawFn) -> bytes:
    """Random YAML: dumped documents, token soup, deep nesting, arbitrary text or bytes."""
    kind = draw(st.sampled_from(["document", "document", "tokens", "tokens", "deep", "text", "bytes"]))
    if kind == "document":
        try:
            text = yaml_text(draw(documents()), flow=draw(st.sampled_from([None, True, False])))
        except (yaml.YAMLError, RecursionError, UnicodeEncodeError):
            text = "{}"
        return text.encode("utf-8", "surrogatepass")
    if kind == "tokens":
        return "".join(draw(st.lists(st.sampled_from(YAML_TOKENS), max_size=60))).encode("utf-8")
    if kind == "deep":
        depth = draw(st.sampled_from([10, 49, 50, 51, 99, 100, 400, 1000, 5000]))
        opener, closer = draw(st.sampled_from([("[", "]"), ("{a: ", "}"), ("- ", "")]))
        if opener == "- ":
            return "".join("  " * i + "-\n" for i in range(min(depth, 600))).encode()
        return ("model: " + opener * depth + "1" + closer * depth + "\n").encode()
    if kind == "text":
        return draw(st.text(max_size=300)).encode("utf-8", "surrogatepass")
    return draw(st.binary(max_size=300))


def check_yaml_library(data: bytes) -> None:
    """load_spec raises only SpecError (each line naming the file); an accepted spec estimates sanely."""
    from vramcalc.errors import SpecError
    from vramcalc.families import estimate
    from vramcalc.spec.load import load_spec

    path = workspace().spec_file(data)
    try:
        with time_limit():
            try:
                spec = load_spec(path)
            except SpecError as exc:
                lines = str(exc).splitlines()
                bad = [line for line in lines if not line.startswith(f"{path}: ")]
                if not lines or bad:
                    raise FuzzFailure(
                        f"error lines must name the file: {bad or lines!r}\ninput: {data[:500]!r}"
                    ) from None
                return
            result = estimate(spec)
    except (FuzzFailure, Hang):
        raise
    except Exception as exc:
        raise FuzzFailure(f"uncaught {type(exc).__name__}: {exc}\ninput: {data[:500]!r}") from exc
    check_estimate(result, repr(data[:500]))


def check_estimate(result: Any, what: str) -> None:
    """Int bytes, non-negative, and the total adds up."""
    sizes = {**result.components, **result.component_peaks, **result.overhead, **result.phases}
    for key, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise FuzzFailure(f"{key} = {value!r} is not a non-negative int\ninput: {what}")
    if result.peak_allocated_bytes != sum(result.components.values()):
        raise FuzzFailure(f"peak_allocated_bytes is not the sum of the components\ninput: {what}")


@tolerating_known_issues
def check_yaml_cli(data: bytes) -> None:
    """``vramcalc estimate FILE`` on random YAML: exit 0 or 2, each error line naming the file."""
    path = workspace().spec_file(data)
    args = ["estimate", str(path), "--json"]
    result = invoke(args)
    if not check_result(args, result):
        return
    if result.exit_code == 2:
        _errors_name_file(args, result, path)


def _errors_name_file(args: list[str], result: Any, path: Path) -> None:
    # a note wraps at the terminal width: its continuation lines start with two spaces
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith(("note: ", "  "))]
    bad = [line for line in lines if not line.startswith(f"error: {path}: ")]
    if not lines or bad:
        raise FuzzFailure(
            f"every stderr line must be 'error: {path}: ...'; got {bad or lines!r}\n" + describe(args, result)
        )


# --------------------------------------------------------------------------------------------------
# Target 2: mutated valid specs.
# --------------------------------------------------------------------------------------------------


@functools.cache
def base_specs() -> dict[str, dict[str, Any]]:
    """Every configs/*.yaml that loads today, plus the tiny spec (parsed mappings)."""
    from vramcalc.errors import VramcalcError
    from vramcalc.spec.load import load_spec

    specs = {"tiny": yaml.safe_load(TINY_SPEC)}
    for config in sorted(CONFIGS.glob("*.yaml")):
        try:
            load_spec(config)
        except VramcalcError:
            continue  # a config another developer is still writing
        specs[config.stem] = yaml.safe_load(config.read_text(encoding="utf-8"))
    return specs


def key_paths(doc: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths: list[tuple[str, ...]] = []
    if isinstance(doc, dict):
        for key, value in doc.items():
            paths.append((*prefix, key))
            paths.extend(key_paths(value, (*prefix, key)))
    return paths


@dataclass(frozen=True)
class Mutation:
    op: str  # drop | set | invalid | unknown | wrap | duplicate | deep
    path: tuple[str, ...]
    value: Any = None

    @property
    def must_reject(self) -> bool:
        """True when no valid spec can result, so exit 2 with one line naming the field is required."""
        return self.op in ("invalid", "unknown", "duplicate", "deep")

    @property
    def field(self) -> str:
        return str(self.value) if self.op == "unknown" else str(self.path[-1])


@dataclass(frozen=True)
class MutatedSpec:
    base: str
    mutations: tuple[Mutation, ...]
    text: str
    json: bool = True  # --json, else the rich table (where markup and control characters would show)

    def __repr__(self) -> str:
        return f"MutatedSpec(base={self.base!r}, mutations={self.mutations!r}, json={self.json})"


def _get_parent(doc: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    for key in path[:-1]:
        doc = doc[key]
    return doc


DEEP = "__DEEP_NESTING__"


@st.composite
def mutated_specs(draw: st.DrawFn) -> MutatedSpec:
    specs = base_specs()
    base = draw(st.sampled_from(sorted(specs)))
    doc = copy.deepcopy(specs[base])
    n = draw(st.integers(1, 3))
    mutations: list[Mutation] = []
    deep_depth = 0
    duplicate: tuple[str, ...] | None = None
    for _ in range(n):
        taken = [m.path for m in mutations] + ([duplicate] if duplicate else [])
        paths = [p for p in key_paths(doc) if not any(_overlap(p, t) for t in taken)]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = _get_parent(doc, path)
        op = draw(st.sampled_from(["drop", "set", "set", "invalid", "unknown", "wrap", "duplicate", "deep"]))
        if op == "drop":
            del parent[path[-1]]
        elif op == "set":
            value = draw(awkward_values())
            parent[path[-1]] = value
            mutations.append(Mutation(op, path, value))
            continue
        elif op == "invalid":
            value = draw(st.sampled_from(ALWAYS_INVALID))
            parent[path[-1]] = value
            mutations.append(Mutation(op, path, value))
            continue
        elif op == "unknown":
            key = draw(st.one_of(st.sampled_from(KEY_NEAR_MISSES), st.from_regex(r"x_[a-z0-9_]{1,12}", fullmatch=True)))
            if key in parent or isinstance(parent.get("method"), str):
                continue
            parent[key] = draw(awkward_values())
            mutations.append(Mutation(op, path[:-1] + (key,), key))
            continue
        elif op == "wrap":
            parent[path[-1]] = draw(st.sampled_from([[parent[path[-1]]], {"value": parent[path[-1]]}]))
        elif op == "duplicate":
            if duplicate is not None or not isinstance(parent[path[-1]], (int, str, float, bool)):
                continue
            duplicate = path
        elif op == "deep":
            if deep_depth:
                continue
            parent[path[-1]] = DEEP
            deep_depth = draw(st.sampled_from([3, 20, 60, 200, 3000]))
            mutations.append(Mutation(op, path, deep_depth))
            continue
        mutations.append(Mutation(op, path))
    text = _render_mutated(doc, draw, deep_depth, duplicate)
    return MutatedSpec(base, tuple(mutations), text, json=draw(st.booleans()))


def _overlap(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """One path is the other or lies inside it (a later mutation there would undo the earlier one)."""
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def _render_mutated(doc: dict[str, Any], draw: st.DrawFn, deep_depth: int, duplicate: tuple[str, ...] | None) -> str:
    flow = False if duplicate else draw(st.sampled_from([False, False, None]))
    try:
        text = yaml_text(doc, flow=flow, unicode=draw(st.booleans()))
    except (yaml.YAMLError, RecursionError, UnicodeEncodeError, ValueError):
        text = yaml_text(None)
    if deep_depth:
        text = text.replace(DEEP, "[" * deep_depth + "1" + "]" * deep_depth, 1)
    if duplicate is not None:
        text = _duplicate_line(text, duplicate)
    if draw(st.integers(0, 9)) == 0:
        text = draw(st.sampled_from(["\ufeff", "%YAML 1.1\n---\n", "# comment\n"])) + text
    if draw(st.integers(0, 9)) == 0:
        text = text.replace("\n", "\r\n")
    return text


def _duplicate_line(text: str, path: tuple[str, ...]) -> str:
    """Repeat the key of ``path`` with a scalar value right below its line (block style: one key per line)."""
    indent = "  " * (len(path) - 1)
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.startswith(f"{indent}{path[-1]}:") and not line.startswith(indent + " "):
            return "\n".join([*lines[: i + 1], f"{indent}{path[-1]}: 1", *lines[i + 1 :]])
    raise AssertionError(f"no line for {path} in {text!r}")


@tolerating_known_issues
def check_mutated_spec(example: MutatedSpec) -> None:
    """A mutated spec estimates sanely or is rejected with one line per problem naming file and field."""
    path = workspace().spec_file(example.text)
    args = ["estimate", str(path), *(["--json"] if example.json else [])]
    result = invoke(args)
    if not check_result(args, result):
        return
    rejected = [m for m in example.mutations if m.must_reject]
    if rejected and result.exit_code != 2:
        violation(f"{rejected[0]} must be rejected", f"{example!r}\n" + describe(args, result))
    if result.exit_code != 2:
        return
    _errors_name_file(args, result, path)
    if len(example.mutations) == 1 and rejected:
        check_one_line_naming_field(args, result, rejected[0], example)


def check_one_line_naming_field(args: list[str], result: Any, mutation: Mutation, example: MutatedSpec) -> None:
    lines = error_lines(result)
    if mutation.op == "duplicate":
        expected = "duplicate key"
    elif mutation.op == "deep" and mutation.value + len(mutation.path) > 50:
        expected = "nest"
    else:
        expected = mutation.field
    if len(lines) != 1 or expected not in lines[0]:
        raise FuzzFailure(
            f"one problem ({mutation.op} {'.'.join(map(str, mutation.path))}) must give one error line naming "
            f"{expected!r}\n{example!r}\n" + describe(args, result)
        )


# --------------------------------------------------------------------------------------------------
# Target 4: extreme but valid numbers (numeric safety).
# --------------------------------------------------------------------------------------------------


@st.composite
def extreme_specs(draw: st.DrawFn) -> str:
    """Valid shapes at astronomical sizes: 10^15 parameters, seq_len 10^9, layers and widths at their bounds."""
    heads = draw(st.sampled_from([1, 8, 64, 10**4]))
    head_dim = draw(st.sampled_from([1, 64, 128, 10**3]))
    model = {
        "architecture": draw(st.sampled_from(["decoder", "encoder", "encoder-decoder"])),
        "layers": draw(st.sampled_from([1, 96, 10**4, 10**7])),
        "hidden_size": heads * head_dim,
        "heads": heads,
        "vocab_size": draw(st.sampled_from([2, 50257, 10**6, 10**7])),
        "mlp": draw(st.sampled_from(["gelu", "swiglu", "relu"])),
    }
    if draw(st.booleans()):
        model["params"] = draw(st.sampled_from(["1000T", 10**15, "7B", 10**12]))
    workload = {
        "mode": draw(st.sampled_from(["train", "inference"])),
        "batch_size": draw(st.sampled_from([1, 10**6, 10**9, "1T"])),
        "seq_len": draw(st.sampled_from([1, 10**9, 10**12, "1T"])),
        "precision": draw(st.sampled_from(["fp32", "bf16", "amp-fp16"])),
        "attention": draw(st.sampled_from(["sdpa", "eager"])),
        "gradient_checkpointing": draw(st.sampled_from(["none", "full", "selective", "selective-op"])),
    }
    if workload["mode"] == "train":
        workload["optimizer"] = draw(st.sampled_from(["adamw", "adamw-8bit", "adafactor", "sgd"]))
    if draw(st.booleans()):
        workload["versions"] = {"torch": draw(st.sampled_from(["1.13", "2.0", "0.4.1", "1.10"]))}
    return yaml_text({"name": "huge", "model": model, "workload": workload})


@tolerating_known_issues
def check_extreme_spec(text: str) -> None:
    """Huge valid specs: exact big ints (or a clear error), never inf, NaN or negative bytes."""
    path = workspace().spec_file(text)
    for args in (["estimate", str(path), "--json"], ["estimate", str(path), "--gpu", "h100"]):
        result = invoke(args)
        if not check_result(args, result):
            continue
        if result.exit_code == 2:
            _errors_name_file(args, result, path)
        if "inf" in result.stdout.lower().replace("inference", "") or "nan" in result.stdout.lower().split():
            raise FuzzFailure("inf or nan in the output\n" + describe(args, result))
    check_sweep_matches_estimate(path)


def check_sweep_matches_estimate(path: Path) -> None:
    """`sweep` (one estimate on a symbolic batch size) gives the total `estimate --batch-size` gives."""
    args = ["sweep", str(path), "--batch-size", "1,7,1000000", "--format", "json"]
    result = invoke(args)
    if not check_result(args, result) or result.exit_code != 0:
        return
    for point in json.loads(result.stdout)["points"]:
        single = ["estimate", str(path), "--json", "--batch-size", str(point["batch_size"])]
        alone = invoke(single)
        if not check_result(single, alone):
            continue
        if alone.exit_code != 0 or json.loads(alone.stdout)["total_bytes"] != point["total_bytes"]:
            raise FuzzFailure(f"sweep total {point} differs from estimate\n" + describe(single, alone))
