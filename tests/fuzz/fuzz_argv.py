"""Fuzz target: random argument vectors for every command (enumerated at run time from the typer app)."""

from __future__ import annotations

import functools
import shutil
from dataclasses import dataclass
from enum import Enum
from typing import Any

from fuzz_support import (
    FuzzFailure,
    check_result,
    command,
    command_names,
    describe,
    fixture_paths,
    invoke,
    listing,
    tolerating_known_issues,
    workspace,
)
from fuzz_values import AWKWARD, YAML_TOKENS
from hypothesis import strategies as st

TEXT_NO_PATHS = st.text(
    alphabet=st.characters(blacklist_characters="/\\\x00", blacklist_categories=("Cs",)), max_size=40
)
OUTPUT_NAMES = ["out.html", "report.json", "out", ".", "missing-dir/out.html", "out.yaml"]
FLAG_NOISE = ["--bogus", "--", "-", "-x", "--json", "--help", "-h", "--gpu", "--gpu=", "=", "--no-such=1"]


def param_info(param: Any) -> tuple[str, Any]:
    """(kind, annotation) of a click parameter: argument / flag / option."""
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if not getattr(param, "opts", None) or not param.opts[0].startswith("-"):
        return "argument", annotation
    if getattr(param, "is_flag", False) or annotation is bool:
        return "flag", annotation
    return "option", annotation


def writes_file(param: Any) -> bool:
    return "output" in param.name or "-o" in getattr(param, "opts", [])


def value_strategy(param: Any) -> st.SearchStrategy[str]:
    """Text for one parameter: likely-valid values by name and type, mixed with garbage."""
    _, annotation = param_info(param)
    name = param.name.lower()
    if writes_file(param):
        return st.sampled_from(OUTPUT_NAMES)
    pools: list[st.SearchStrategy[str]] = [
        TEXT_NO_PATHS,
        st.sampled_from([str(v) for v in AWKWARD if not isinstance(v, (list, dict))]),
    ]
    text = str(annotation)
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        pools.append(st.sampled_from([str(m.value) for m in annotation]))
    if annotation is int or "int" in text:
        pools.append(st.integers().map(str))
        pools.append(st.integers(0, 4096).map(str))
    if annotation is float or "float" in text:
        pools.append(st.floats(allow_nan=True, allow_infinity=True).map(str))
    if "Path" in text or name in ("spec", "specs", "path", "config", "measured", "hf_config"):
        pools.append(st.sampled_from(fixture_paths()))
        pools.append(st.sampled_from(fixture_paths()))
    if name in ("adapter", "quantization"):
        pools.append(
            st.lists(st.sampled_from(YAML_TOKENS + ["rank: 4", "nf4", "gptq", "lora"]), max_size=12).map("".join)
        )
        pools.append(st.sampled_from(["nf4", "{method: gptq, bits: 4}", "{rank: 8, targets: all-linear}", "[" * 600]))
    if "gpu" in name:
        pools.append(st.sampled_from(gpu_names()))
    if any(word in name for word in ("memory", "weights", "reserve", "used", "size")):
        pools.append(st.sampled_from(["80GB", "24GiB", "512MiB", "1e99TB", "0GB", "-1GB", "10%", "80"]))
    if any(word in name for word in ("params", "batch", "seq", "len", "tokens", "count", "gpus", "rank", "width")):
        pools.append(st.sampled_from(["7B", "70B", "1", "0", "-1", "1e15", "110M", "3.5", "99999999999999999999"]))
    if any(word in name for word in ("efficiency", "tolerance", "utilization", "fraction")):
        pools.append(st.sampled_from(["0.85", "85%", "0", "1", "150%", "-5%", "nan", "inf"]))
    if any(word in name for word in ("clock", "rate")):
        pools.append(st.sampled_from(["1750MHz", "21Gbps", "0MHz", "1e999GHz", "16GT/s", "1750"]))
    return st.one_of(*pools)


@functools.cache
def gpu_names() -> list[str]:
    from vramcalc.hardware.catalog import load_catalog

    ids = [gpu.id for gpu in load_catalog().gpus]
    return ids[:40] + ["h100", "a100", "local", "local:0", "local:99", "rtx-9999", "H100 SXM"]


@dataclass(frozen=True)
class Argv:
    args: tuple[str, ...]

    @property
    def writes(self) -> bool:
        return any(a in ("-o", "--output") or a.startswith("--output=") for a in self.args)


@st.composite
def argv(draw: st.DrawFn, names: tuple[str, ...] | None = None) -> Argv:
    """A command, then a shuffled mix of its parameters (some with garbage values) and noise."""
    name = draw(st.sampled_from(names or tuple(command_names())))
    cmd = command().commands[name]
    args: list[list[str]] = []
    for param in cmd.params:
        if param.name in ("help",) or not draw(st.integers(0, 2)):
            continue
        kind, _ = param_info(param)
        if kind == "flag":
            args.append([draw(st.sampled_from(param.opts + param.secondary_opts))])
        elif kind == "argument":
            count = draw(st.integers(1, 3)) if param.nargs == -1 else 1
            args.extend([draw(value_strategy(param))] for _ in range(count))
        else:
            opt = draw(st.sampled_from(param.opts))
            value = draw(value_strategy(param))
            args.append([f"{opt}={value}"] if opt.startswith("--") and draw(st.booleans()) else [opt, value])
    noise = draw(st.integers(0, 2)) if draw(st.integers(0, 3)) == 0 else 0
    args.extend([draw(st.sampled_from(FLAG_NOISE))] for _ in range(noise))
    order = draw(st.permutations(range(len(args)))) if draw(st.booleans()) else range(len(args))
    return Argv((name, *[token for i in order for token in args[i]]))


@tolerating_known_issues
def check_argv(example: Argv) -> None:
    """Any argv: exit 0/1/2, no exception; no file appears in the cwd without --output."""
    ws = workspace()
    args = list(example.args)
    before = listing(ws.cwd)
    result = invoke(args)
    if not check_result(args, result, from_file=False):
        return
    after = listing(ws.cwd)
    if after != before and not example.writes:
        raise FuzzFailure(f"files appeared without --output: {sorted(after - before)}\n" + describe(args, result))
    if example.writes:
        for name in after - before:
            target = ws.cwd / name
            if target.is_file() or target.is_symlink():
                target.unlink()
        for name in sorted(after - before, reverse=True):
            target = ws.cwd / name
            if target.is_dir():
                shutil.rmtree(target, ignore_errors=True)
