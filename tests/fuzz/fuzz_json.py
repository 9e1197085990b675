"""Fuzz target ``json-inputs``: mutated transformers config.json files and torch memory_stats() dumps.

Each input starts from a real shape (tests/data/hf_configs/*.json, a memory_stats() dump) and is mutated:
wrong types, zero and negative values, huge ints (past 10^400, and past the 4,300 digits Python's int()
reads), NaN and Infinity, long strings, deep arrays, dropped keys, a wrapped or truncated document.
The text is written raw, so JSON that ``json.dumps`` would never produce reaches the reader.

Rules: ``import`` and ``estimate --hf-config`` exit 0 or 2 (``compare`` 0, 1 or 2) with each error line
naming the file and of bounded length; ``--json`` output is strict JSON; ``import`` prints what
``import -o`` writes, and a spec ``import -o`` wrote is one ``estimate`` accepts.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from fuzz_checks import check_stderr, strict_json
from fuzz_support import (
    ROOT,
    FuzzFailure,
    Tolerated,
    check_result,
    describe,
    error_lines,
    invoke,
    tolerating_known_issues,
    usage_error,
    workspace,
)
from hypothesis import strategies as st

HF_CONFIGS = ROOT / "tests" / "data" / "hf_configs"
#: Keys the importer reads (a mutation sets one of these or a key already in the config).
HF_KEYS = [
    "model_type", "hidden_size", "num_attention_heads", "num_hidden_layers", "num_key_value_heads", "head_dim",
    "intermediate_size", "vocab_size", "max_position_embeddings", "tie_word_embeddings", "n_embd", "n_head",
    "n_layer", "n_positions", "d_model", "num_heads", "num_layers", "d_ff", "num_local_experts",
    "num_experts_per_tok", "type_vocab_size", "image_size", "patch_size", "num_channels", "torch_dtype",
    "architectures", "attention_bias", "rope_scaling", "rope_parameters", "rope_local_base_freq", "sliding_window",
    "quantization_config", "attn_logit_softcapping", "final_logit_softcapping", "pos_att_type", "position_buckets",
    "relative_attention", "layer_norm_elementwise_affine", "activation_function", "resid_pdrop", "attn_pdrop",
    "use_qk_norm",
]  # fmt: skip
STATS = {
    "allocated_bytes.all.peak": 123_456_789,
    "reserved_bytes.all.peak": 234_567_890,
    "active_bytes.all.peak": 123_456_789,
    "num_alloc_retries": 0,
    "num_ooms": 0,
}
STATS_KEYS = [*STATS, "allocated_bytes.all.current", "reserved_bytes.all.current"]
#: Raw JSON texts a value may become.
HOSTILE_JSON = [
    "NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1e-999", "-0", "0", "-1", "1", "2", "0.5", "1.5", "1e400",
    "1" + "0" * 400, "1" + "0" * 5000, "-" + "9" * 4400, "1e308", "4.9e-324", "true", "false", "null", '""',
    '"7B"', '"32"', '"0x20"', '"nan"', '"inf"', '"\\u0000"', '"\\ud800"', '"\\u001b[31m"', '"a\\nb"', '"<x-fuzz>"',
    '"::error::x"', "[]", "[1, 2]", "{}", '{"a": 1}', "[" * 100 + "]" * 100,
]  # fmt: skip


#: Multimodal checkpoints' configs (their language model and vision tower nested).
MULTIMODAL = ROOT / "tests" / "data" / "multimodal_configs.json"
#: Nested keys a mutation of a multimodal config may set (``vision_config.hidden_size``).
NESTED_KEYS = [
    "vision_config.hidden_size", "vision_config.intermediate_size", "vision_config.num_hidden_layers",
    "vision_config.image_size", "vision_config.patch_size", "vision_config.num_channels",
    "vision_config.vision_use_head", "vision_config.mlp_ratio", "vision_config.embed_dim", "vision_config.depth",
    "vision_config.spatial_merge_size", "vision_config.out_hidden_size", "vision_config.pixel_shuffle_ratio",
    "vision_config.projector_input_dim", "vision_config.vision_output_dim", "text_config.hidden_size",
    "text_config.model_type", "text_config.num_hidden_layers", "vision_feature_layer", "mm_tokens_per_image",
    "multimodal_projector_bias", "vision_config", "text_config",
    "vision_config.num_global_layers", "vision_config.max_num_tiles", "vision_config.supported_aspect_ratios",
    "text_config.cross_attention_layers", "text_config.num_attention_heads",
]  # fmt: skip


@functools.cache
def base_configs() -> dict[str, dict[str, Any]]:
    found = {path.stem: json.loads(path.read_text(encoding="utf-8")) for path in sorted(HF_CONFIGS.glob("*.json"))}
    for case in json.loads(MULTIMODAL.read_text(encoding="utf-8"))["models"]:
        found["multimodal-" + case["repo"].replace("/", "--")] = case["config"]
    return found


@st.composite
def hostile_json(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["fixed", "fixed", "fixed", "int", "float", "deep", "long", "text"]))
    if kind == "int":
        return str(draw(st.one_of(st.integers(), st.sampled_from([0, -1, 2**31, 2**63, 10**18, 10**300]))))
    if kind == "float":
        value = draw(st.floats(allow_nan=False, allow_infinity=False))
        return repr(value)
    if kind == "deep":
        depth = draw(st.sampled_from([50, 999, 1000, 5000, 100_000]))
        opener, closer = draw(st.sampled_from([("[", "]"), ('{"a": ', "}")]))
        return opener * depth + "1" + closer * depth
    if kind == "long":
        unit = draw(st.sampled_from(["x", "é", "\x1b", "<b>", "::"]))
        return json.dumps(unit * draw(st.sampled_from([5000, 400_000])))
    if kind == "text":
        return json.dumps(draw(st.text(max_size=40)))
    return draw(st.sampled_from(HOSTILE_JSON))


@dataclass(frozen=True)
class JsonInput:
    kind: str  # config | stats
    base: str
    mutations: tuple[str, ...]
    text: bytes

    def __repr__(self) -> str:
        shown = self.text[:600] + (b"..." if len(self.text) > 600 else b"")
        return f"JsonInput(kind={self.kind!r}, base={self.base!r}, mutations={self.mutations!r}, text={shown!r})"


def render(doc: dict[str, Any], raw: dict[str, str]) -> str:
    """``doc`` as JSON with the placeholder strings of ``raw`` replaced by raw JSON text."""
    text = json.dumps(doc, indent=2, ensure_ascii=False)
    for placeholder, value in raw.items():
        text = text.replace(json.dumps(placeholder), value, 1)
    return text


@st.composite
def json_inputs(draw: st.DrawFn, kinds: tuple[str, ...] = ("config", "config", "config", "stats")) -> JsonInput:
    kind = draw(st.sampled_from(kinds))
    if kind == "config":
        base = draw(st.sampled_from(sorted(base_configs())))
        doc = json.loads(json.dumps(base_configs()[base]))  # a deep copy: nested sections are mutated too
        keys = sorted(set(doc) | set(HF_KEYS) | (set(NESTED_KEYS) if base.startswith("multimodal-") else set()))
    else:
        base, doc, keys = "memory_stats", dict(STATS), STATS_KEYS
    raw: dict[str, str] = {}
    mutations: list[str] = []
    for i in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(keys))
        op = draw(st.sampled_from(["set", "set", "set", "drop", "heads0"]))
        section, _, field = key.rpartition(".")
        target = doc.get(section) if section else doc
        if not isinstance(target, dict):
            target = doc
            field = key
        if op == "drop":
            target.pop(field, None)
        elif op == "heads0" and kind == "config":
            doc.update({"num_attention_heads": 0, "head_dim": draw(st.sampled_from([64, 0, -1]))})
            key = "num_attention_heads"
        else:
            placeholder = f"__RAW_{i}__"
            target[field] = placeholder
            raw[placeholder] = draw(hostile_json())
            op = f"set {raw[placeholder][:40]}"
        mutations.append(f"{op} {key}")
    text = render(doc, raw)
    whole = draw(st.sampled_from(["none"] * 6 + ["list", "truncate", "bom", "latin1", "duplicate", "garbage", "deep"]))
    if whole == "list":
        text = f"[{text}]"
    elif whole == "truncate":
        text = text[: draw(st.integers(0, max(0, len(text) - 1)))]
    elif whole == "bom":
        text = "\ufeff" + text
    elif whole == "duplicate":
        text = text.replace("{", '{"model_type": "llama", ', 1)
    elif whole == "garbage":
        text += draw(st.sampled_from(["\n}", " x", "\x00", "\n{}"]))
    elif whole == "deep":
        text = "[" * 200_000 + "]" * 200_000
    data = text.encode("utf-8", "surrogatepass")
    if whole == "latin1":
        data = data.replace(b"{", b"{\xe9", 1)
    if whole != "none":
        mutations.append(whole)
    return JsonInput(kind, base, tuple(mutations), data)


@tolerating_known_issues
def check_json_input(example: JsonInput) -> None:
    ws = workspace()
    path = ws.spec_file(example.text, "config.json" if example.kind == "config" else "stats.json")
    if example.kind == "stats":
        for form in (["--json"], []):  # the JSON and the table
            _run(example, ["compare", str(ws.fixtures / "tiny.yaml"), "--measured", str(path), *form], path, (0, 1, 2))
        return
    printed = _run(example, ["import", str(path)], path, (0, 2))
    out = ws.inputs / "imported.yaml"
    out.unlink(missing_ok=True)
    written = _run(example, ["import", str(path), "-o", str(out)], path, (0, 2))
    if printed.exit_code != written.exit_code:
        _fail(example, ["import", "-o"], written, f"import exits {printed.exit_code}, import -o {written.exit_code}")
    if written.exit_code == 0:
        text = out.read_text(encoding="utf-8")
        if text != printed.stdout:
            _fail(example, ["import", "-o"], written, "import -o wrote something else than import printed")
        args = ["estimate", str(out), "--json"]
        result = _run(example, args, out, (0, 2))
        if result.exit_code != 0:
            why = f"import wrote a spec that estimate rejects ({_key_of(error_lines(result), out)})"
            _fail(example, args, result, f"{why}\n{text[:1500]}")
    _run(example, ["estimate", "--hf-config", str(path), "--json"], path, (0, 2))


def _run(example: JsonInput, args: list[str], path: Any, codes: tuple[int, ...]) -> Any:
    result = invoke(args)
    if not check_result(args, result):
        raise Tolerated("a known issue")

    def fail(why: str) -> None:
        _fail(example, args, result, why)

    if result.exit_code not in codes:
        fail(f"exit {result.exit_code} (expected one of {codes})")
    check_stderr(result.stderr, fail, usage=usage_error(result))
    if "--json" in args and result.exit_code in (0, 1) and result.stdout.strip():
        strict_json(result.stdout, fail)
    if result.exit_code == 2:
        named = [str(path), str(workspace().fixtures / "tiny.yaml")]
        bad = [line for line in error_lines(result) if not line.startswith(tuple(f"error: {p}: " for p in named))]
        if bad:
            fail(f"an error line does not name the file\n{bad[0][:200]!r}")
    return result


def _key_of(lines: list[str], path: Any) -> str:
    """The key an error line names ("error: FILE: model.heads: ..." -> "model.heads")."""
    rest = lines[0].removeprefix(f"error: {path}: ") if lines else ""
    return rest.split(":", 1)[0] if rest else "no error line"


def _fail(example: JsonInput, args: list[str], result: Any, why: str) -> None:
    raise FuzzFailure(f"{why}\n{example!r}\n" + describe(args, result))
