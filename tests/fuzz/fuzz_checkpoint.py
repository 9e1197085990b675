"""Fuzz target ``checkpoint-folder``: real checkpoint folders, written by ``safetensors.numpy.save_file``,
then mutated, and named with ``--model DIR``, ``import DIR`` and a spec's ``model: DIR``.

The seeds (tests/checkpoint_files.py writes the tensors): a Llama folder with one ``model.safetensors``;
the same Llama in three shards named by ``model.safetensors.index.json``; a Diffusers pipeline
(``model_index.json``, a ``unet`` and a ``vae`` folder); an AWQ Llama (packed int32 weights, fp16 scales
and a ``quantization_config``); and a decoder of a ``model_type`` vramcalc does not model. Each input
takes one seed and mutates it one to four times:

* a safetensors header, parsed and written back (its length prefix kept right): a tensor's dtype, shape
  (huge, negative, bool, float, string dimensions; too many of them), ``data_offsets`` (overlapping,
  gapped, huge, negative, reversed), a tensor that is not a mapping, ``__metadata__`` junk, no tensor;
* a header of many tensors (20,000; 400,000; 1,000,000: 82 MB, within the format's 100 MB);
* a safetensors file's bytes: the length prefix set to an extreme, the file cut (also inside the prefix),
  a byte of the header changed, bytes that are not UTF-8 put in it;
* config.json: every field the importers read set to a hostile value (huge, zero, negative, float, bool,
  string, null, a list, a mapping, a number past what JSON parsers hold, NaN), a field dropped, an
  unknown ``model_type``, junk in ``quantization_config`` and ``text_config``, the file not JSON, not a
  mapping, not UTF-8, or nested 100,000 deep (a field: up to 900);
* the shard index's ``weight_map``: a missing file, ``../`` and absolute paths, a name too long for the
  file system, NUL, values that are not names, 100,000 entries, 20,000 distinct files;
* Diffusers' ``model_index.json``: components named ``..``, by an absolute path, too long, or not a list;
* symbolic links (all within the fuzz run's temporary folder, or to ``/dev/zero``): a file replaced by a
  loop, a link to ``/dev/zero``, to a FIFO, to a folder or its parent, or a dangling one; a component
  folder that is a loop.

Rules: exit 0 with valid JSON (``estimate``) or a YAML spec (``import``), or exit 2 with exactly one
``error:`` line on stderr, naming the folder (or the spec file), besides ``note:`` lines; with
``--json``, stdout is then empty or ``{"error": {"message", "stage"}}`` with that line's message, and it
is that document whenever only the weights files, the index or links were mutated (a model whose config
is fine and whose files could not be read). No traceback; within :data:`CHECKPOINT_LIMIT_S`; the
folder's files are the same afterwards, and nothing is written in the working directory.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Any

from fuzz_checks import changed, snapshot
from fuzz_support import (
    FuzzFailure,
    Tolerated,
    check_result,
    describe,
    invoke,
    tolerating_known_issues,
    workspace,
)
from hypothesis import strategies as st

#: One command on a folder of a few small files takes well under a second; a FIFO is never opened.
CHECKPOINT_LIMIT_S = 5.0
#: The stages a model that could not be read reports with ``--json``.
STAGES = ("path", "cache", "hub", "config", "header")
#: Values an integer of the format takes (the length prefix, offsets, dimensions).
EXTREMES = [0, 1, 2, 7, 8, 9, 255, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**48, 2**53 + 1, 2**63 - 1, 2**63,
            2**64 - 1, 100_000_000, 100_000_001]  # fmt: skip


class Raw(str):
    """A JSON token written as it is (a number Python's json cannot write or read back, NaN)."""


#: Hostile values of a config field, a dimension, an offset.
HOSTILE: list[Any] = [
    0, -1, 1, 3, 2**31, 2**32 + 1, 2**53 + 1, 2**63, 2**64, 10**30, -(10**30), 0.5, 64.0, 1e308, -1e-308,
    True, False, None, "64", "", "x" * 3000, "\u202e\x1b[31m", "::error::pwn", "##[group]x", "[/]", [], [64],
    [1, 2, 3], {}, {"a": {"b": [1]}},
    Raw("1" + "0" * 5000), Raw("1e999"), Raw("-1e999"), Raw("NaN"), Raw("Infinity"), Raw("-0"), Raw("1E400"),
]  # fmt: skip
#: Fields of a transformers config the importers read (vramcalc/spec/hf_*.py, from_checkpoint.py).
CONFIG_FIELDS = [
    "model_type", "architectures", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "intermediate_size", "vocab_size", "max_position_embeddings", "head_dim", "tie_word_embeddings",
    "torch_dtype", "dtype", "hidden_act", "rms_norm_eps", "sliding_window", "use_sliding_window",
    "max_window_layers", "attention_bias", "mlp_bias", "rope_scaling", "rope_parameters", "rope_local_base_freq",
    "partial_rotary_factor", "num_experts",
    "num_local_experts", "num_experts_per_tok", "moe_intermediate_size", "n_routed_experts", "n_shared_experts",
    "first_k_dense_replace", "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
    "layer_types", "sliding_window_pattern", "n_embd", "n_layer", "n_head", "n_inner", "n_positions",
    "num_layers", "num_kv_heads", "ffn_dim", "padded_vocab_size", "seq_length", "d_model", "llm_config",
    "text_config", "quantization_config", "_name_or_path", "num_labels", "id2label", "image_size",
]  # fmt: skip
#: Fields of a ``quantization_config`` (transformers' names).
QUANT_FIELDS = [
    "quant_method", "bits", "w_bit", "group_size", "q_group_size", "zero_point", "version", "load_in_4bit",
    "load_in_8bit", "bnb_4bit_quant_type", "bnb_4bit_use_double_quant", "config_groups", "desc_act",
]  # fmt: skip
QUANT_METHODS = ["awq", "gptq", "fp8", "bitsandbytes", "compressed-tensors", "bitnet", "hqq", "", None, 4]
MODEL_TYPES = ["llama", "mistral", "qwen2", "gpt2", "t5", "bert", "deepseek_v3", "mixtral", "llama4", "gemma3",
               "fancy_net", "", "x" * 500, None, 7, ["llama"], "llama\x00", "../llama"]  # fmt: skip
#: What a weight_map value or a Diffusers component may be named.
BAD_NAMES = [
    "missing.safetensors", "../model.safetensors", "../../../../etc/passwd", "/etc/passwd", "/dev/zero",
    "/proc/self/mem", "a" * 300 + ".safetensors", "a\x00b.safetensors", "", ".", "..", "sub/model.safetensors",
    "model.safetensors\\..", "config.json", "link-loop", "fifo.safetensors", "zero.safetensors", 7, None, [],
    "::error::x.safetensors", "##[group]x.safetensors",
]  # fmt: skip
SEEDS = ("llama", "sharded", "diffusers", "awq", "unmodelled")
COMMANDS = ("estimate", "import", "spec")


class CheckpointCase:
    """One input: a seed's files as mutated, the links and FIFOs to make beside them, and the command.
    (A plain class: its repr names the mutations, not the files' bytes.)"""

    def __init__(
        self,
        seed: str,
        files: tuple[tuple[str, bytes], ...],
        links: tuple[tuple[str, str], ...],
        fifos: tuple[str, ...],
        command: str,
        mutations: tuple[str, ...],
        files_only: bool,
    ) -> None:
        self.seed = seed
        self.files = files  # the folder's regular files, by relative path
        self.links = links  # symlinks: relative path -> target
        self.fifos = fifos
        self.command = command
        self.mutations = mutations  # what was done, for the report
        self.files_only = files_only  # only weights files, the index or links were mutated: the config is the seed's

    def __repr__(self) -> str:
        sizes = {name: len(data) for name, data in self.files}
        return (
            f"CheckpointCase(seed={self.seed!r}, command={self.command!r}, mutations={self.mutations!r}, "
            f"links={self.links!r}, fifos={self.fifos!r}, sizes={sizes!r})"
        )


# --------------------------------------------------------------------------------------------------
# The seeds: real folders written by the safetensors library.
# --------------------------------------------------------------------------------------------------


def _awq_tensors(config: dict[str, Any], group: int) -> dict[str, Any]:
    """AutoAWQ's layout of a Llama: each linear layer as ``qweight`` (in, out / 8) int32, ``qzeros``
    (in / group, out / 8) int32 and ``scales`` (in / group, out) fp16; the rest fp16."""
    import numpy as np
    from checkpoint_files import llama_tensors

    tensors = {}
    for name, array in llama_tensors(config).items():
        if name.startswith("model.layers.") and name.endswith("_proj.weight"):
            out, inp = array.shape
            base = name[: -len(".weight")]
            tensors[base + ".qweight"] = np.zeros((inp, out // 8), np.int32)
            tensors[base + ".qzeros"] = np.zeros((inp // group, out // 8), np.int32)
            tensors[base + ".scales"] = np.zeros((inp // group, out), np.float16)
        else:
            tensors[name] = array
    return tensors


def _write_seed(name: str, folder: Path) -> None:
    import numpy as np
    from checkpoint_files import LLAMA, llama_tensors, write_checkpoint
    from safetensors.numpy import save_file

    if name == "llama":
        write_checkpoint(folder, LLAMA, llama_tensors(LLAMA))
    elif name == "sharded":
        write_checkpoint(folder, LLAMA, llama_tensors(LLAMA), shards=3)
    elif name == "awq":
        quant = {"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": True, "version": "gemm"}
        config = {**LLAMA, "torch_dtype": "float16", "quantization_config": quant}
        write_checkpoint(folder, config, _awq_tensors(LLAMA, 32))
    elif name == "unmodelled":
        config = {"model_type": "fancy_net", "architectures": ["FancyNetForCausalLM"], "hidden_size": 64,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 1024,
                  "torch_dtype": "bfloat16"}  # fmt: skip
        shapes = {"embed.weight": (256, 64), "blocks.0.mix.weight": (64, 64), "blocks.1.mix.weight": (64, 64),
                  "head.weight": (256, 64)}  # fmt: skip
        tensors = {name: np.zeros(shape, np.float16) for name, shape in shapes.items()}
        write_checkpoint(folder, config, tensors)
    else:  # diffusers
        folder.mkdir(parents=True)
        index = {"_class_name": "StableDiffusionPipeline", "_diffusers_version": "0.30.0",
                 "unet": ["diffusers", "UNet2DConditionModel"], "vae": ["diffusers", "AutoencoderKL"],
                 "scheduler": ["diffusers", "PNDMScheduler"], "safety_checker": [None, None]}  # fmt: skip
        (folder / "model_index.json").write_text(json.dumps(index), encoding="utf-8")
        for component, width in (("unet", 32), ("vae", 16)):
            sub = folder / component
            sub.mkdir()
            (sub / "config.json").write_text(json.dumps({"_class_name": component, "block_out_channels": [width]}))
            arrays = {f"{component}.conv_in.weight": np.zeros((width, 4, 3, 3), np.float32),
                      f"{component}.conv_in.bias": np.zeros((width,), np.float32)}  # fmt: skip
            save_file(arrays, str(sub / "diffusion_pytorch_model.safetensors"))


@functools.cache
def seeds() -> dict[str, tuple[tuple[str, bytes], ...]]:
    made = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in SEEDS:
            folder = Path(tmp) / name
            _write_seed(name, folder)
            files = sorted((str(p.relative_to(folder)), p.read_bytes()) for p in folder.rglob("*") if p.is_file())
            made[name] = tuple(files)
    return made


# --------------------------------------------------------------------------------------------------
# Mutations.
# --------------------------------------------------------------------------------------------------


def dumps(value: Any) -> bytes:
    """JSON of ``value``, with :class:`Raw` tokens written as they are."""
    raws: list[str] = []

    def swap(item: Any) -> Any:
        if isinstance(item, Raw):
            raws.append(str(item))
            return f"\x00raw{len(raws) - 1}\x00"
        if isinstance(item, dict):
            return {key: swap(val) for key, val in item.items()}
        if isinstance(item, list):
            return [swap(val) for val in item]
        return item

    text = json.dumps(swap(value))
    for number, token in enumerate(raws):
        text = text.replace(f'"\\u0000raw{number}\\u0000"', token)
    return text.encode("utf-8", "surrogatepass")


def _split(data: bytes) -> tuple[dict[str, Any], bytes] | None:
    """A safetensors file's header and data, where the header still parses."""
    try:
        (length,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8 : 8 + length])
    except (struct.error, ValueError, RecursionError):
        return None
    return (header, data[8 + length :]) if isinstance(header, dict) else None


def _join(header: dict[str, Any], rest: bytes) -> bytes:
    raw = dumps(header)
    return struct.pack("<Q", len(raw)) + raw + rest


def many_tensors(count: int) -> bytes:
    """A safetensors file of ``count`` one-byte tensors, header only (about 95 bytes a tensor)."""
    entries = ",".join(f'"model.layers.{i}.w":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{i + 1}]}}'
                       for i in range(count))  # fmt: skip
    raw = ("{" + entries + "}").encode()
    return struct.pack("<Q", len(raw)) + raw


def _mutate_header(draw: st.DrawFn, header: dict[str, Any]) -> str:
    """Change one thing of a parsed safetensors header; say what."""
    names = sorted(name for name in header if name != "__metadata__")
    kind = draw(st.sampled_from(["dtype", "shape", "dim", "offsets", "offset", "entry", "metadata", "empty", "extra"]))
    if kind == "metadata":
        value = draw(st.sampled_from([{"format": 7}, [], "pt", {"a": {"b": 1}}, {"x" * 300: "y" * 100_000}, None]))
        header["__metadata__"] = value
        return f"header __metadata__ = {str(value)[:60]}"
    if kind == "empty" or not names:
        header.clear()
        return "header: no tensors"
    name = draw(st.sampled_from(names))
    entry = header[name]
    if not isinstance(entry, dict):
        entry = header[name] = {}
    if kind == "dtype":
        value = draw(st.sampled_from(["F16", "BF16", "F32", "I32", "BOOL", "F4", "F6_E2M3", "F8_E4M3", "C64",
                                      "F128", "f16", "", 16, None, ["F16"], "Q4_K"]))  # fmt: skip
        entry["dtype"] = value
        return f"{name}: dtype = {value!r}"
    if kind == "shape":
        value = draw(st.sampled_from([[], [0], [2**64], [-1, 64], [True, 64], [64.0, 2], ["64"], [1] * 40,
                                      [2**31] * 4, [2**24, 2**24, 2**24], None, "64", 64, {}]))  # fmt: skip
        entry["shape"] = value
        return f"{name}: shape = {str(value)[:60]}"
    if kind == "dim" and isinstance(entry.get("shape"), list) and entry["shape"]:
        at = draw(st.integers(0, len(entry["shape"]) - 1))
        value = draw(st.sampled_from(HOSTILE + EXTREMES))
        entry["shape"][at] = value
        return f"{name}: shape[{at}] = {str(value)[:60]}"
    if kind == "offsets":
        offsets = entry.get("data_offsets")
        begin, end = offsets if isinstance(offsets, list) and len(offsets) == 2 else (0, 0)
        begin, end = (begin, end) if type(begin) is int and type(end) is int else (0, 0)
        value = draw(st.sampled_from([[end, begin], [0, end], [begin + 1, end + 1], [begin, end + 2], [-1, end],
                                      [begin, 2**64], [2**63, 2**63 + end - begin], [begin], [begin, end, 0],
                                      None, "0,1", [float(begin), float(end)], [True, end]]))  # fmt: skip
        entry["data_offsets"] = value
        return f"{name}: data_offsets = {str(value)[:60]}"
    if kind == "offset":
        at = draw(st.integers(0, 1))
        value = draw(st.sampled_from(HOSTILE + EXTREMES))
        offsets = entry.get("data_offsets")
        offsets = entry["data_offsets"] = offsets if isinstance(offsets, list) and len(offsets) == 2 else [0, 0]
        offsets[at] = value
        return f"{name}: data_offsets[{at}] = {str(value)[:60]}"
    if kind == "entry":
        value = draw(st.sampled_from([None, [], "F16", 7, {}, {"dtype": "F16"}]))
        header[name] = value
        return f"{name} = {value!r}"
    copy = dict(entry)
    header[draw(st.sampled_from([name + ".again", "", "x" * 2000, "\x1b]0;t\x07"]))] = copy
    return f"{name}: copied under another name"


def _mutate_bytes(draw: st.DrawFn, data: bytearray) -> str:
    """Change a safetensors file's bytes as bytes; say what."""
    kind = draw(st.sampled_from(["prefix", "cut", "byte", "utf8", "insert"]))
    length = struct.unpack("<Q", data[:8])[0] if len(data) >= 8 else 0
    end = min(len(data), 8 + length)
    if kind == "prefix" and len(data) >= 8:
        value = draw(st.sampled_from(EXTREMES) | st.integers(0, 2**64 - 1) | st.just(length + 1) | st.just(length - 1))
        data[:8] = (value % 2**64).to_bytes(8, "little")
        return f"length prefix = {value}"
    if kind == "cut" or len(data) < 9:
        at = draw(st.integers(0, max(0, end)))
        del data[at:]
        return f"cut at {at}"
    at = draw(st.integers(8, max(8, end - 1)))
    if kind == "byte":
        data[at] = draw(st.integers(0, 255))
        return f"byte {at} changed"
    if kind == "utf8":
        data[at : at + 1] = draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00"]))
        return f"non-UTF-8 at {at}"
    junk = draw(st.binary(min_size=1, max_size=16))
    data[at:at] = junk
    data[:8] = ((length + len(junk)) % 2**64).to_bytes(8, "little")
    return f"{len(junk)} bytes inserted at {at}, the prefix kept right"


def _hostile(draw: st.DrawFn) -> Any:
    return draw(st.sampled_from(HOSTILE) | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False))


def _mutate_config(draw: st.DrawFn, config: dict[str, Any]) -> str:
    """Change one thing of a parsed config.json; say what."""
    kind = draw(st.sampled_from(["field", "field", "field", "drop", "model_type", "quant", "text", "nested"]))
    if kind == "field":
        name = draw(st.sampled_from(sorted(set(CONFIG_FIELDS) | set(config))))
        config[name] = value = _hostile(draw)
        return f"config {name} = {str(value)[:60]}"
    if kind == "drop" and config:
        name = draw(st.sampled_from(sorted(config)))
        del config[name]
        return f"config {name} dropped"
    if kind == "model_type":
        config["model_type"] = value = draw(st.sampled_from(MODEL_TYPES))
        return f"config model_type = {str(value)[:60]}"
    if kind == "quant":
        section = config.get("quantization_config")
        if not isinstance(section, dict) or draw(st.booleans()):
            section = {"quant_method": draw(st.sampled_from(QUANT_METHODS))}
        field = draw(st.sampled_from(QUANT_FIELDS))
        section[field] = draw(st.sampled_from(QUANT_METHODS) | st.sampled_from(HOSTILE))
        config["quantization_config"] = draw(st.sampled_from([section, section, None, [], "awq", 4, {}]))
        return f"config quantization_config = {str(config['quantization_config'])[:80]}"
    if kind == "text":
        section = {key: value for key, value in config.items() if key in CONFIG_FIELDS[:12]}
        section[draw(st.sampled_from(CONFIG_FIELDS))] = _hostile(draw)
        key = draw(st.sampled_from(["text_config", "llm_config"]))
        config[key] = draw(st.sampled_from([section, section, [], "x", 1, None, {"text_config": section}]))
        return f"config {key} = {str(config[key])[:80]}"
    name = draw(st.sampled_from(CONFIG_FIELDS))
    value: Any = 64
    for _ in range(draw(st.sampled_from([2, 50, 900]))):
        value = draw(st.sampled_from([[value], {"a": value}]))
    config[name] = value
    return f"config {name} nested"


def _whole_file(draw: st.DrawFn) -> bytes:
    return draw(st.sampled_from([b"", b"{", b"[]", b"null", b"7", b'"x"', b"\xff\xfe{}", b"{}" + b"\x00",
                                 b"[" * 100_000, b'{"a": 1, "a": 2}', b'{"model_type": "llama"}',
                                 b'\xef\xbb\xbf{"model_type": "llama"}', b"{" + b'"a":1,' * 10 + b"}"]))  # fmt: skip


def _mutate_index(draw: st.DrawFn, index: dict[str, Any]) -> str:
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        weight_map = index["weight_map"] = {"x": "model.safetensors"}
    kind = draw(st.sampled_from(["name", "name", "name", "many", "files", "map", "drop"]))
    if kind == "name":
        key = draw(st.sampled_from(sorted(weight_map)))
        weight_map[key] = value = draw(st.sampled_from(BAD_NAMES))
        return f"weight_map[{key}] = {str(value)[:60]!r}"
    if kind == "many":
        target = next(iter(weight_map.values()))
        weight_map.update({f"extra.{i}.weight": target for i in range(100_000)})
        return "weight_map: 100,000 more entries"
    if kind == "files":
        weight_map.update({f"extra.{i}.weight": f"model-{i:05d}.safetensors" for i in range(20_000)})
        return "weight_map: 20,000 files"
    if kind == "map":
        index["weight_map"] = value = draw(st.sampled_from([[], "model.safetensors", None, 7, {"a": None}]))
        return f"weight_map = {value!r}"
    del index["weight_map"]
    return "weight_map dropped"


def _mutate_pipeline(draw: st.DrawFn, index: dict[str, Any]) -> str:
    name = draw(st.sampled_from(["..", "../unet", "/", "/etc", "/dev", "unet/../vae", "x" * 300, "unet\x00",
                                 "link-loop", "fifo", "_class_name", "unet", "vae"]))  # fmt: skip
    value = draw(st.sampled_from([["diffusers", "X"], None, [], "unet", 7, {"a": 1}]))
    index[name] = value
    return f"model_index[{name[:40]!r}] = {value!r}"


LINK_TARGETS = ["loop", "dev-zero", "fifo", "folder", "dangling", "parent"]


@st.composite
def checkpoint_cases(draw: st.DrawFn) -> CheckpointCase:
    seed = draw(st.sampled_from(SEEDS))
    files = dict(seeds()[seed])
    links: dict[str, str] = {}
    fifos: list[str] = []
    done: list[str] = []
    files_only = True
    weights = sorted(name for name in files if name.endswith(".safetensors"))
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 2, 3, 4]))):
        kind = draw(st.sampled_from(["header", "header", "bytes", "config", "config", "config", "index", "link",
                                     "whole"] * 4 + ["many"]))  # fmt: skip
        if kind == "many":  # a valid header of many one-byte tensors: up to the format's 100,000,000 bytes
            name = draw(st.sampled_from(weights))
            count = draw(st.sampled_from([20_000] * 8 + [400_000, 1_000_000]))
            files[name] = many_tensors(count)
            done.append(f"{name}: {count:,} tensors")
        elif kind in ("header", "bytes"):
            name = draw(st.sampled_from(weights))
            if name not in files:
                continue
            data = files[name]
            # a header of many tensors is mutated as bytes: parsing it here would cost the worker a GB
            split = _split(data) if kind == "header" and len(data) < 2**22 else None
            if split is not None:
                header, rest = split
                done.append(f"{name}: " + _mutate_header(draw, header))
                files[name] = _join(header, rest)
            else:
                mutable = bytearray(data)
                done.append(f"{name}: " + _mutate_bytes(draw, mutable))
                files[name] = bytes(mutable)
        elif kind == "config" or kind == "whole":
            configs = sorted(n for n in files if n.endswith("config.json") or n == "model_index.json")
            if not configs:
                continue
            name = draw(st.sampled_from(configs))
            files_only = False
            if kind == "whole":
                files[name] = _whole_file(draw)
                done.append(f"{name}: whole file replaced")
                continue
            try:
                document = json.loads(files[name])
            except (ValueError, RecursionError):
                continue
            if not isinstance(document, dict):
                continue
            mutate = _mutate_pipeline if name == "model_index.json" else _mutate_config
            done.append(f"{name}: " + mutate(draw, document))
            files[name] = dumps(document)
        elif kind == "index":
            name = "model.safetensors.index.json"
            if name not in files:
                index: dict[str, Any] = {"weight_map": dict.fromkeys(["a.weight"], "model.safetensors")}
                done.append("an index added")
            else:
                try:
                    index = json.loads(files[name])
                except (ValueError, RecursionError):
                    continue
                if not isinstance(index, dict):
                    continue
            done.append(_mutate_index(draw, index))
            files[name] = dumps(index)
        else:
            candidates = sorted({*files, "unet", "vae", "model.safetensors", "config.json"} - set(links))
            name = draw(st.sampled_from(candidates))
            target = draw(st.sampled_from(LINK_TARGETS))
            if name in ("unet", "vae"):
                for sub in [n for n in files if n.startswith(name + "/")]:
                    del files[sub]
            files.pop(name, None)
            if name.endswith("config.json") or name == "model_index.json":
                files_only = False
            if target == "fifo":
                fifos.append("fifo")
            links[name] = {"loop": Path(name).name, "dev-zero": "/dev/zero", "fifo": "fifo", "folder": ".",
                           "dangling": "missing", "parent": ".."}[target]  # fmt: skip
            if "/" in name:  # a link beside the file: the loop and the FIFO are in its folder
                links[name] = {"fifo": "../fifo", "folder": "..", "parent": "../.."}.get(target, links[name])
            done.append(f"{name} -> {links[name]}")
    command = draw(st.sampled_from(COMMANDS))
    if seed == "diffusers" and not any(d.startswith("model_index") for d in done):
        files_only = False  # a pipeline is refused at the model section, not while reading
    return CheckpointCase(seed, tuple(sorted(files.items())), tuple(sorted(links.items())), tuple(fifos), command,
                          tuple(done), files_only)  # fmt: skip


# --------------------------------------------------------------------------------------------------
# Running it.
# --------------------------------------------------------------------------------------------------


def model_command_errors(args: list[str], result: Any, fail: Any) -> list[str]:
    """The rules every command reading a model follows (this target's and ``hub``'s): those of
    :func:`fuzz_support.check_result`, exit 0 or 2, no line a CI log reads as a workflow command, and on
    stderr only ``error:`` and ``note:`` lines; the error lines."""
    if not check_result(args, result):
        raise Tolerated("a known issue")
    if result.exit_code not in (0, 2):
        fail(f"exit {result.exit_code}: estimate and import exit 0 or 2")
    commanding = workflow_lines(result.stdout + "\n" + result.stderr)
    if commanding:
        fail(f"an output line a CI log would read as a command: {commanding[0][:120]!r}")
    lines = result.stderr.splitlines()
    # a note is wrapped at the terminal's width, its continuation lines indented by two spaces
    noted = [line.startswith("note: ") or (line.startswith("  ") and lines[at - 1].startswith(("note: ", "  ")))
             for at, line in enumerate(lines)]  # fmt: skip
    others = [line for line, ok in zip(lines, noted, strict=True) if not ok and not line.startswith("error: ")]
    if others:
        fail(f"stderr holds a line that is neither an error nor a note: {others[0][:200]!r}")
    return [line for line in lines if line.startswith("error: ")]


def workflow_lines(text: str) -> list[str]:
    """Lines a GitHub Actions log would read as workflow commands: starting with ``::`` or holding ``##[``."""
    return [line for line in text.splitlines() if line.lstrip().startswith("::") or "##[" in line]


def build(case: CheckpointCase) -> Path:
    """The folder of ``case`` (the workspace's ``checkpoint`` folder, emptied first)."""
    root = workspace().root / "checkpoint"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    for name, data in case.files:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    for name in case.fifos:
        if not (root / name).exists():
            os.mkfifo(root / name)
    for name, target in case.links:
        path = root / name
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError:  # its folder is itself a link (dangling, a loop)
            continue
        inside = path.parent.resolve() == root.resolve() or root.resolve() in path.parent.resolve().parents
        if inside and not path.is_symlink() and not path.exists():
            path.symlink_to(target)
    return root


def command_line(case: CheckpointCase, folder: Path) -> list[str]:
    if case.command == "estimate":
        return ["estimate", "--model", str(folder), "--mode", "inference", "--seq-len", "64", "--json"]
    if case.command == "import":
        return ["import", str(folder)]
    workload = "{mode: inference, batch_size: 1, seq_len: 64}"
    spec = workspace().spec_file(f"name: fuzz\nmodel: '{folder}'\nworkload: {workload}\n")
    return ["estimate", str(spec), "--json"]


@tolerating_known_issues
def check_checkpoint_case(case: CheckpointCase) -> None:
    import yaml

    folder = build(case)
    cwd = workspace().cwd
    before = snapshot([p for p in folder.rglob("*") if not p.is_symlink()])
    listed = sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))
    args = command_line(case, folder)
    result = invoke(args, limit=CHECKPOINT_LIMIT_S)

    def fail(why: str) -> None:
        raise FuzzFailure(f"{why}\ninput: {case!r}\n" + describe(args, result))

    errors = model_command_errors(args, result, fail)
    if result.exit_code == 2:
        _check_refusal(case, args, result.stdout, errors, folder, fail)
    else:
        if errors:
            fail("exit 0 with an error line")
        if "--json" in args:
            doc = json.loads(result.stdout)
            if not isinstance(doc, dict) or not isinstance(doc.get("params"), int) or doc["params"] <= 0:
                fail("exit 0 without a JSON estimate of a positive parameter count")
        else:
            doc = yaml.safe_load(result.stdout)
            if not isinstance(doc, dict) or not isinstance(doc.get("model"), dict):
                fail("import exits 0 without a spec")
    if list(cwd.iterdir()):
        fail(f"files written in the working directory: {sorted(p.name for p in cwd.iterdir())[:5]}")
    now = sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))
    if now != listed or changed(before):
        fail("the checkpoint folder changed")


def _check_refusal(case: CheckpointCase, args: list[str], stdout: str, errors: list[str], folder: Path,
                   fail: Any) -> None:  # fmt: skip
    if len(errors) != 1:
        fail(f"exit 2 with {len(errors)} error lines (one is the rule)")
    line = errors[0][len("error: ") :]
    named = [str(folder)] + ([args[1]] if case.command == "spec" else [])
    if not any(name in line for name in named):
        fail("the error line names neither the folder nor the spec file")
    if "--json" not in args:
        return
    if not stdout.strip():
        if case.files_only and case.seed != "diffusers":
            fail("a model whose files could not be read: no --json error document on stdout")
        return
    try:
        doc = json.loads(stdout)
    except (ValueError, RecursionError):
        fail("exit 2 with stdout that is not JSON")
    error = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(error, dict) or set(error) != {"message", "stage"} or error["stage"] not in STAGES:
        fail("the --json error is not {'error': {'message', 'stage'}}")
    if error["message"] != line:
        fail("the --json error's message is not the error line")
