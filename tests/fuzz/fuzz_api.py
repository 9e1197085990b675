"""Fuzz target ``python-api``: every public function of ``vramcalc`` with awkward arguments.

The functions and their parameters are enumerated at run time (``vramcalc.__all__`` and
``inspect.signature``), so a function or argument added later is fuzzed without editing this file. Each
input starts from valid arguments (a bundled config as a path, a ``Path`` or a mapping; a card name;
a Hugging Face config) and replaces up to three of them with awkward values: wrong Python types, hostile
strings (markup, control characters, workflow commands), extreme numbers, containers.

Rules: the call returns, or raises :class:`vramcalc.VramcalcError` or a :class:`TypeError` whose message
starts with the name of one of the function's parameters; an error message is at most 2,000
characters; no call runs past the time limit.
"""

from __future__ import annotations

import functools
import inspect
import math
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml
from fuzz_support import CONFIGS, ROOT, Hang, time_limit, violation
from fuzz_values import ALWAYS_INVALID, AWKWARD
from hypothesis import strategies as st

import vramcalc
from vramcalc.errors import VramcalcError

#: The longest error message the API raises (vramcalc.api.MAX_MESSAGE).
MAX_MESSAGE = 2000
SPECS = ["gpt2.yaml", "llama-2-7b-qlora.yaml", "llama-3-8b-inference.yaml", "mixtral-8x7b.yaml", "t5-base.yaml"]
HF_CONFIGS = ["gpt2.json", "bert-base-ner.json", "all-minilm-l6-v2.json"]
#: Values no argument of the API takes, of types the CLI never produces.
PYTHON_OBJECTS: list[Any] = [
    object(), b"h100", bytearray(b"x"), 3.5, -1, 0, True, False, {1, 2}, (1, 2), [None], {"gpu": "h100"},
    Path("/nonexistent/spec.yaml"), Path("/dev/null"), Decimal("8"), complex(1, 2), math.nan, math.inf,
    lambda: "h100", type, 10**400, "-" * 3000, "::error::x", "##[group]x", "[link=https://x]y[/link]", "\x1b]0;t\x07",
]  # fmt: skip


@dataclass(frozen=True)
class ApiCall:
    function: str
    kwargs: dict[str, Any]

    def __repr__(self) -> str:  # hypothesis prints the failing example
        return f"vramcalc.{self.function}(**{self.kwargs!r})"


@functools.cache
def functions() -> dict[str, inspect.Signature]:
    """Every public function of the package (classes aside) and its signature."""
    found = {}
    for name in vramcalc.__all__:
        value = getattr(vramcalc, name)
        if callable(value) and not isinstance(value, type):
            found[name] = inspect.signature(value)
    return found


def _spec_inputs() -> st.SearchStrategy[Any]:
    paths = [CONFIGS / name for name in SPECS]
    mappings = [yaml.safe_load(path.read_text(encoding="utf-8")) for path in paths]
    return st.one_of(
        st.sampled_from([str(p) for p in paths]),
        st.sampled_from(paths),
        st.sampled_from(mappings),
        _mutated(st.sampled_from(mappings)),
    )


@st.composite
def _mutated(draw: st.DrawFn, mappings: st.SearchStrategy[dict[str, Any]]) -> dict[str, Any]:
    """A spec mapping with one key of one section (or the top level) set to an awkward value."""
    mapping = draw(mappings)
    section = draw(st.sampled_from(["", *[k for k, v in mapping.items() if isinstance(v, dict)]]))
    target = mapping if not section else mapping[section]
    key = draw(st.sampled_from(sorted(target) or ["name"]))
    value = draw(st.sampled_from(AWKWARD + ALWAYS_INVALID))
    changed = {k: dict(v) if isinstance(v, dict) else v for k, v in mapping.items()}
    (changed if not section else changed[section])[key] = value
    return changed


def _valid(parameter: str) -> st.SearchStrategy[Any]:
    """A valid value for a required or commonly given argument, by name."""
    if parameter == "spec":
        return _spec_inputs()
    if parameter in ("gpu", "name"):
        return st.sampled_from(["h100-sxm", "rtx-4090", "a100", "24GB"])
    if parameter == "config":
        folder = ROOT / "tests" / "data" / "hf_configs"
        return st.sampled_from([str(folder / name) for name in HF_CONFIGS])
    if parameter == "query":
        return st.sampled_from(["llama", "qwen 7b", None])
    if parameter == "batch_sizes":
        return st.sampled_from(["1,2", [1, 4], "8k"])
    raise KeyError(parameter)


def awkward() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.sampled_from(PYTHON_OBJECTS),
        st.sampled_from(AWKWARD + ALWAYS_INVALID),
        st.integers(),
        st.floats(),
        st.text(max_size=40),
        st.lists(st.integers(), max_size=4),
    )


@st.composite
def api_calls(draw: st.DrawFn) -> ApiCall:
    name = draw(st.sampled_from(sorted(functions())))
    params = functions()[name].parameters
    kwargs: dict[str, Any] = {}
    for parameter in params.values():
        if parameter.default is inspect.Parameter.empty or (parameter.name == "gpu" and draw(st.booleans())):
            kwargs[parameter.name] = draw(_valid(parameter.name))
    changed = draw(st.lists(st.sampled_from(sorted(params)), max_size=3, unique=True))
    for parameter in changed:
        kwargs[parameter] = draw(awkward())
    return ApiCall(name, kwargs)


def check_api_call(call: ApiCall) -> None:
    function = getattr(vramcalc, call.function)
    names = set(functions()[call.function].parameters)
    try:
        with time_limit():
            function(**call.kwargs)
    except VramcalcError as exc:
        if len(str(exc)) > MAX_MESSAGE:
            violation(f"{call!r}: an error message of {len(str(exc)):,} characters", str(exc)[:300], known=False)
    except TypeError as exc:
        text = str(exc)
        if text.split(":", 1)[0] not in names:
            violation(f"{call!r}: TypeError not naming an argument: {text[:200]}", exc=exc, known=False)
        if len(text) > MAX_MESSAGE:
            violation(f"{call!r}: a TypeError of {len(text):,} characters", text[:300], known=False)
    except Hang as exc:
        violation(f"{call!r}: {exc}", known=False)
    except Exception as exc:  # noqa: BLE001 - any other exception is the finding
        import traceback

        detail = "".join(traceback.format_exception(exc)[-6:])
        violation(f"{call!r}: uncaught {type(exc).__name__}: {str(exc)[:200]}", detail, exc, known=False)
