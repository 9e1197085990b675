"""vramcalc.files.parse_yaml over libyaml's parser: the texts it gives libyaml are read exactly as PyYAML's
pure-Python parser reads them (value or error message), the texts on which the two parsers differ are
not given to libyaml, and the bounds hold over either parser."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from vramcalc import files
from vramcalc.errors import SpecError
from vramcalc.files import MAX_YAML_DEPTH, MAX_YAML_NODES, _yaml_loaders, libyaml_reads_alike, parse_yaml

ROOT = Path(__file__).resolve().parent.parent
PURE, FAST = _yaml_loaders()
needs_libyaml = pytest.mark.skipif(FAST is None, reason="PyYAML without libyaml")

#: Texts on which libyaml's parser and PyYAML's pure-Python parser differ (found by comparing the two).
DIFFERING = [
    "compute_environment: L\tOCAL_MACHINE\n",  # a tab inside a plain scalar: libyaml reads it
    "workload:\n  mode: infe\trence\n",
    "a: 1\n\ufeffb: 2\n",  # a BOM inside the text: libyaml skips it, PyYAML keeps it in the key
    "quantization: {met? hod: nf4}\n",  # "? " inside a flow collection
    "layers: !\n",  # a lone "!": libyaml reads '', PyYAML None
    "a: |# x\n  y\n",  # a block scalar's header followed by "#"
    "a: >#\n  y\n",
]


def outcome(text: str, pure_only: bool = False) -> tuple[str, Any]:
    """parse_yaml's result or error message (with ``pure_only``, over PyYAML's pure-Python parser alone)."""
    try:
        if pure_only:
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(files, "_yaml_loaders", lambda: (PURE, None))
                return "value", repr(parse_yaml(text, "f.yaml"))
        return "value", repr(parse_yaml(text, "f.yaml"))
    except SpecError as exc:
        return "error", str(exc)


def outcome_of(loader: Any, text: str) -> tuple[str, Any]:
    """One loader's value or error type, without parse_yaml's choice of parser."""
    try:
        return "value", repr(yaml.load(text, Loader=loader))  # noqa: S506 - the bounded loaders
    except yaml.YAMLError as exc:
        return "error", type(exc).__name__


@needs_libyaml
@pytest.mark.parametrize("text", DIFFERING)
def test_texts_the_parsers_read_differently_are_not_given_to_libyaml(text: str) -> None:
    fast = outcome_of(FAST, text)
    assert fast != outcome_of(PURE, text)  # they do differ
    assert not libyaml_reads_alike(text)
    assert outcome(text) == outcome(text, pure_only=True)


def test_every_bundled_config_is_read_alike() -> None:
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        assert outcome(text) == outcome(text, pure_only=True), path.name


@pytest.mark.parametrize(
    ("text", "alike"),
    [
        ("name: gpt2  # é, tab\there, | > ! ? & * % @ ` \\\nmodel: gpt2\n", True),  # comments hold anything
        ("# it's a spec\nname: x\n", True),  # a quote inside a comment is in the comment
        ("name: 'x'  # é\n", False),  # quotes in the text: its comments are checked too
        ("target: {reserve: 10%}\n", True),
        ("%YAML 1.1\n---\na: 1\n", False),
        ("a: &x 1\nb: *x\n", False),
        ("a: 1\r\n", False),
        ("name: é\n", False),
    ],
)
def test_what_is_given_to_libyaml(text: str, alike: bool) -> None:
    assert libyaml_reads_alike(text) is alike
    assert outcome(text) == outcome(text, pure_only=True)


@needs_libyaml
def test_the_bounds_hold_over_libyaml_too() -> None:
    deep = "[" * (MAX_YAML_DEPTH + 1) + "]" * (MAX_YAML_DEPTH + 1)
    wide = "[" + ", ".join(["1"] * MAX_YAML_NODES) + "]"
    for text in (deep, wide):
        assert libyaml_reads_alike(text)
        with pytest.raises(yaml.composer.ComposerError):
            yaml.load(text, Loader=FAST)  # noqa: S506 - the bounded loader over libyaml
        assert outcome(text) == outcome(text, pure_only=True)
        assert outcome(text)[0] == "error"


def test_without_libyaml_every_text_is_read_by_the_pure_python_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "_yaml_loaders", lambda: (PURE, None))
    assert parse_yaml("a: [1, {b: c}]\n", "f.yaml") == {"a": [1, {"b": "c"}]}


TOKENS = [
    *["a", "b1", "key", "h100-sxm", "1", "0x1", "0o7", "1e3", ".5", "-.inf", "~", "null", "yes", "No", "on"],
    *["1:2", "1_000", "2001-12-14", "=", "<<: ", "10%", "%", "$", "^", ";", "/", "(", ")", "+", "_"],
    *[":", ": ", "-", "- ", " ", "  ", "\n", "\n  ", "\n- ", "'", '"', "''", "[", "]", "{", "}", ",", ", "],
    *["#", " #", " # x", " # é", "---", "...", "\n---\n", "a: 'x''y'", 'a: "x y"', "a: b\n  c\n", "x" * 130],
    *["{a: [b, {c: d}]}", "[a:b]", "{a:b}", "{a: }", "[a, ]", "a:\n  - b\n  - c\n", "a:\n- b\n", "\t", "?", "!"],
]
SPECS = [path.read_text(encoding="utf-8") for path in sorted((ROOT / "configs").glob("*.yaml"))]


@st.composite
def yaml_texts(draw: st.DrawFn) -> str:
    """Token soup, a bundled config with tokens inserted, or random data dumped in each YAML style."""
    kind = draw(st.sampled_from(["tokens", "mutated", "dumped"]))
    if kind == "tokens":
        return "".join(draw(st.lists(st.sampled_from(TOKENS), max_size=40)))
    if kind == "mutated":
        text = draw(st.sampled_from(SPECS))
        for token, where in draw(st.lists(st.tuples(st.sampled_from(TOKENS), st.floats(0, 1)), min_size=1, max_size=4)):
            cut = int(where * len(text))
            text = text[:cut] + token + text[cut:]
        return text
    rng = random.Random(draw(st.integers(0, 2**32)))
    alphabet = "ab xyz01-_.:,#/()[]{}'\"+=~;$^<%"

    def value(depth: int = 0) -> Any:
        roll = rng.random()
        if depth > 3 or roll < 0.5:
            return rng.choice(
                [rng.randint(-(10**6), 10**6), 1.5, 1e-05, True, None, "".join(rng.choices(alphabet, k=9))]
            )
        if roll < 0.75:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        return {"".join(rng.choices(alphabet, k=5)): value(depth + 1) for _ in range(rng.randint(0, 3))}

    style = draw(st.sampled_from([None, True, False]))
    return yaml.safe_dump(value(), default_flow_style=style, width=draw(st.sampled_from([20, 80])), sort_keys=False)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(yaml_texts())
def test_random_texts_read_as_over_the_pure_python_parser(text: str) -> None:
    assert outcome(text) == outcome(text, pure_only=True)
