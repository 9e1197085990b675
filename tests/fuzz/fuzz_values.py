"""Values the fuzz targets draw from: awkward scalars, invalid ones, YAML tokens and documents."""

from __future__ import annotations

import math
from typing import Any

import yaml
from hypothesis import strategies as st

#: Scalars that no spec key accepts (every key is a size, count, fraction, enum, bool, name or mapping).
ALWAYS_INVALID: list[Any] = [
    math.nan,
    math.inf,
    -math.inf,
    -7,
    -7.5,
    10**30,
    [[1, 2], [3]],
    "x" * 5000,
]

#: Awkward scalars: types, signs, magnitudes and spellings a spec file may contain.
AWKWARD: list[Any] = [
    None, True, False, 0, 1, -1, 2, 2.5, 0.5, 1e-300, 1e308, -0.0, 2**31, 2**53 + 1, 2**63, 10**15, 10**18, 10**19,
    "", " ", "0", "-0", "1", "-5", "2.5", "NaN", ".nan", "inf", "-inf", "1e309", "1e-400", "7B", "7b", "1.5T",
    "1e15", "1000000000000000T", "80", "80GB", "80 GiB", "1e99GB", "-1GB", "10%", "100%", "-10%", "1e400%", "１２",
    "٣", "½", "true", "null", "~", "fp16", "adamw", "train", "inference", "nf4", "lora", "h100", "all-linear",
    "\u202eevil", "\x1b[31mred\x1b[0m", "\x00", "\x85", "\u2028", "é" * 3, "🤖", "\t", "a\nb", "[/]", "[bold]x",
    "${HOME}", "../../etc/passwd", [], {}, [1, 2], {"a": 1}, {"method": "gptq", "bits": 4}, ["q_proj", "v_proj"],
]  # fmt: skip

KEY_NEAR_MISSES = ["Layers", "layer", "hidden-size", "batchsize", "seq_len ", "model ", "x-unknown", "__class__"]


def awkward_values() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.sampled_from(AWKWARD),
        st.sampled_from(ALWAYS_INVALID),
        st.integers(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=30),
    )


def yaml_text(data: Any, flow: bool | None = None, unicode: bool = True) -> str:
    return yaml.safe_dump(data, default_flow_style=flow, allow_unicode=unicode, sort_keys=False, width=1_000_000)


SPEC_WORDS = [
    "name",
    "model",
    "workload",
    "overhead",
    "target",
    "architecture",
    "layers",
    "hidden_size",
    "heads",
    "vocab_size",
    "batch_size",
    "seq_len",
    "precision",
    "optimizer",
    "params",
    "experts",
    "quantization",
    "adapter",
    "mode",
    "image_size",
    "depth",
]
YAML_TOKENS = [
    "\n", "\n", "  ", "- ", ": ", "model:", "workload:", "layers: 2", "batch_size: 1", "seq_len: 8", "{", "}", "[",
    "]", ",", "&a ", "*a", "&b ", "*b", "<<: *a", "!!python/object/apply:os.system ['true']", "!!binary aGk=",
    "!!timestamp 2001-12-14", "!!float", "!!str", "!!set", "!!omap", "!custom", "? ", "|", ">-", "#", "\t", "'", '"',
    "%YAML 1.1\n", "%TAG ! tag:x,2000:\n", "---\n", "...\n", "0x1F", "0o17", "1e400", ".nan", "-.inf", "~", "yes",
    "no", "on", "1_000", "0b101", "\ufeff", "\x00", "\x1b[31m", "\u2028", "\r\n", "é", "🤖", "\\u0000",
]  # fmt: skip


def documents() -> st.SearchStrategy[Any]:
    keys = st.one_of(st.sampled_from(SPEC_WORDS), st.text(max_size=8), st.integers(-3, 3), st.none(), st.booleans())
    leaves = st.one_of(awkward_values(), st.sampled_from(SPEC_WORDS))
    return st.recursive(
        leaves,
        lambda children: st.one_of(st.lists(children, max_size=5), st.dictionaries(keys, children, max_size=6)),
        max_leaves=30,
    )
