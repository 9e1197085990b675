"""The bundled catalog read back from its files: for every entry with a transformers ``config``, the
checkpoint ``save_pretrained`` would write is built, and vramcalc reads it as it reads any folder.

Per entry (``vramcalc/spec/models.yaml``; entries without a ``config``, the ResNets, are listed and
skipped):

1. transformers builds the model on the meta device as ``benchmarks/model_catalog_counts.py`` does (the
   class the config's ``architectures`` names). The tensors ``save_pretrained`` writes are taken with
   its own steps: the state dict less ``_keys_to_ignore_on_save``, tied weights stored once
   (``remove_tied_weights_from_state_dict``: the keys of ``_tied_weights_keys`` that share storage) and
   the loading conversions reverted (``revert_weight_conversion``: fused MoE experts back to one tensor
   per expert). Floating-point tensors get the config's ``torch_dtype`` (float32 where it states none).
   Before the catalog, tiny models are saved by ``save_pretrained`` itself and its files' names, dtypes
   and shapes must equal this list. T5 v1.1 and Flan-T5 (``tie_word_embeddings: false``) also get the
   ``lm_head.weight`` their published checkpoints hold, which transformers 5 ties away, as the catalog's
   count adds it.
2. The folder holds the entry's ``config`` as ``config.json`` and the tensors in **header-only**
   safetensors files: the 8-byte length, then the JSON header with each tensor's dtype, shape and
   ``data_offsets`` (laid out as the library lays them: contiguous from 0), and no data: the files
   would be terabytes, and vramcalc reads only headers. Past 50 GB the tensors are split into shards
   with a ``model.safetensors.index.json``, as ``save_pretrained``'s default ``max_shard_size`` does.
3. vramcalc resolves the folder (``vramcalc.spec.model_name.resolve_name``) and estimates it as
   ``vramcalc estimate --model FOLDER --mode inference --seq-len 8 --json`` does (``spec_with_model``,
   then the engine; a vision config, one with ``image_size``, without ``--seq-len``). Each row: the
   files' parameters (the headers' elements), the catalog's ``meta_params``, vramcalc's modelled count,
   the estimate's count, whether the estimate kept the modelled count (within 0.5 % of the files'),
   and the estimate's weight bytes against the files' sum.

One process does both sides, in an environment with torch, transformers and safetensors besides vramcalc's
own dependencies, with the worktree on the path (all 192 entries take about 70 s on two CPU cores)::

    PYTHONPATH=. /tmp/tracer-venv/bin/python benchmarks/checkpoint_catalog.py [ID ...] [--json OUT]

``--keep DIR`` leaves the folders in DIR. Exit status 1 when an entry's files disagree with the catalog
(the files' parameters != ``meta_params``; persistent buffers the files also hold, such as DeepSeek V3's
``e_score_correction_bias``, are counted apart), when vramcalc's count or weight bytes of the files differ
from the files' own (with or without those buffers), or when vramcalc refuses the files.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import struct
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from model_catalog_counts import meta_model  # noqa: E402  (the catalog's own construction)

#: torch dtype name -> safetensors dtype.
SAFETENSORS_DTYPES = {
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "float64": "F64",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint8": "U8",
    "bool": "BOOL",
}
BYTES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
#: save_pretrained's default max_shard_size (decimal, as huggingface_hub parses "50GB").
MAX_SHARD_BYTES = 50 * 10**9
#: The share of the files' parameters within which the estimate keeps the modelled count.
TOLERANCE = 0.005

#: Tiny configs saved by save_pretrained itself, to check the tensor list against: tied embeddings,
#: fused MoE experts, T5's shared embeddings.
SMALL = {
    "vocab_size": 1000,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 160,
    "torch_dtype": "bfloat16",
}
SELF_CHECKS: list[dict[str, Any]] = [
    {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "tie_word_embeddings": True, **SMALL},
    {
        "model_type": "qwen3_moe",
        "architectures": ["Qwen3MoeForCausalLM"],
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        **SMALL,
    },
    {
        "model_type": "t5",
        "architectures": ["T5ForConditionalGeneration"],
        "vocab_size": 1000,
        "d_model": 64,
        "d_ff": 128,
        "d_kv": 16,
        "num_layers": 2,
        "num_heads": 4,
        "torch_dtype": "float32",
    },
]

Tensors = dict[str, tuple[str, tuple[int, ...]]]


def saved_tensors(entry: dict[str, Any]) -> tuple[Tensors, set[str]]:
    """Name -> (safetensors dtype, shape) of what ``save_pretrained`` writes for the entry's model, and
    which of them are persistent buffers (saved, but no parameters: not in ``meta_params``)."""
    import torch
    from transformers.core_model_loading import revert_weight_conversion
    from transformers.modeling_utils import remove_tied_weights_from_state_dict

    config = entry["config"]
    model = meta_model(entry)
    state = model.state_dict()
    for key in model._keys_to_ignore_on_save or ():
        state.pop(key, None)
    state = remove_tied_weights_from_state_dict(state, model)
    state = revert_weight_conversion(model, state)
    stored = SAFETENSORS_DTYPES[str(config.get("torch_dtype") or "float32")]
    tensors: Tensors = {}
    for name, tensor in state.items():
        dtype = stored if tensor.dtype.is_floating_point else SAFETENSORS_DTYPES[str(tensor.dtype).split(".")[-1]]
        tensors[name] = (dtype, tuple(tensor.shape))
    if config.get("model_type") == "t5" and config.get("tie_word_embeddings") is False:
        assert isinstance(model.lm_head.weight, torch.Tensor)
        tensors.setdefault("lm_head.weight", (stored, tuple(model.lm_head.weight.shape)))
    return tensors, {name for name, _ in model.named_buffers()} & set(tensors)


def nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    count = BYTES[dtype]
    for dim in shape:
        count *= dim
    return count


def header(tensors: Tensors) -> bytes:
    """A safetensors file's first bytes: the length and the JSON header, the tensors laid out as the
    library lays them (largest dtype first, then by name, contiguous from 0)."""
    entries: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name in sorted(tensors, key=lambda key: (-BYTES[tensors[key][0]], key)):
        dtype, shape = tensors[name]
        size = nbytes(dtype, shape)
        entries[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(entries, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def shards(tensors: Tensors) -> list[Tensors]:
    """The tensors split as save_pretrained splits them: in order, a new shard when the next tensor
    would take this one past :data:`MAX_SHARD_BYTES` (a tensor larger than that alone)."""
    found: list[Tensors] = [{}]
    size = 0
    for name, (dtype, shape) in tensors.items():
        bytes_ = nbytes(dtype, shape)
        if found[-1] and size + bytes_ > MAX_SHARD_BYTES:
            found.append({})
            size = 0
        found[-1][name] = (dtype, shape)
        size += bytes_
    return found


def write_folder(folder: Path, config: dict[str, Any], tensors: Tensors) -> int:
    """config.json and the header-only weights files in ``folder``; returns the number of files."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    parts = shards(tensors)
    if len(parts) == 1:
        (folder / "model.safetensors").write_bytes(header(tensors))
        return 1
    weight_map: dict[str, str] = {}
    for number, part in enumerate(parts, 1):
        name = f"model-{number:05d}-of-{len(parts):05d}.safetensors"
        (folder / name).write_bytes(header(part))
        weight_map.update(dict.fromkeys(part, name))
    total = sum(nbytes(*value) for value in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=1), encoding="utf-8")
    return len(parts)


def self_check() -> list[str]:
    """Differences between :func:`saved_tensors` and the files ``save_pretrained`` writes for tiny
    configs (none when the list is right)."""
    import torch
    import transformers
    from safetensors import safe_open

    problems = []
    for config in SELF_CHECKS:
        entry = {"id": config["model_type"], "config": config}
        mine, _ = saved_tensors(entry)
        fields = {key: value for key, value in config.items() if key not in ("model_type", "torch_dtype")}
        built = transformers.AutoConfig.for_model(config["model_type"], **fields)
        model = getattr(transformers, config["architectures"][0])(built).to(getattr(torch, config["torch_dtype"]))
        with tempfile.TemporaryDirectory() as folder:
            model.save_pretrained(folder)
            theirs: Tensors = {}
            for path in Path(folder).glob("*.safetensors"):
                with safe_open(str(path), "pt") as handle:
                    for name in handle.keys():  # noqa: SIM118 (safe_open is no mapping)
                        part = handle.get_slice(name)
                        theirs[name] = (part.get_dtype(), tuple(part.get_shape()))
        if mine != theirs:
            differ = sorted(set(mine) ^ set(theirs)) or [key for key in mine if mine[key] != theirs[key]]
            problems.append(f"{config['architectures'][0]}: {differ[:6]}")
    return problems


def vramcalc_row(folder: Path, workload: dict[str, Any]) -> dict[str, Any]:
    """What vramcalc reads from ``folder`` and estimates for it."""
    from dataclasses import replace

    from vramcalc.core.params import count_params
    from vramcalc.families import estimate
    from vramcalc.families.resolve import resolve_model
    from vramcalc.spec.model_flag import spec_with_model
    from vramcalc.spec.model_name import resolve_name

    named = resolve_name(str(folder), "--model")
    assert named.checkpoint is not None
    checkpoint = named.checkpoint
    spec, _ = spec_with_model(None, str(folder), workload)
    shape, _ = resolve_model(spec.model, spec.workload)
    result = estimate(spec)
    facts = spec.model.checkpoint
    return {
        "file_params": checkpoint.elements,
        "file_bytes": checkpoint.weight_bytes,
        "modelled_params": count_params(replace(shape, stated_params=None)),
        "estimate_params": result.params,
        "weight_bytes": result.components["parameters"],
        "layers_modelled": bool(facts is None or facts.layers_modelled),
        "kept": any("the modelled layers hold the files'" in note for note in result.assumptions),
        "precision": spec.workload.precision.value if spec.workload.precision is not None else None,
    }


def check_entry(entry: dict[str, Any], keep: Path | None) -> dict[str, Any]:
    """One row: the files written for ``entry`` and what vramcalc makes of them (``error``: the line it
    refused them with)."""
    config = entry["config"]
    row: dict[str, Any] = {"id": entry["id"], "architecture": (config.get("architectures") or ["-"])[0]}
    row["meta_params"] = entry.get("meta_params")
    started = time.perf_counter()
    tensors, buffers = saved_tensors(entry)
    row["tensors"] = len(tensors)
    row["file_params"] = sum(math.prod(shape) for _, shape in tensors.values())
    row["file_buffers"] = sum(math.prod(tensors[name][1]) for name in buffers)
    row["buffer_bytes"] = sum(nbytes(*tensors[name]) for name in buffers)
    row["buffers"] = sorted({re.sub(r"\.\d+\.", ".N.", name) for name in buffers})
    row["file_bytes"] = sum(nbytes(*value) for value in tensors.values())
    base = keep or Path(tempfile.mkdtemp(prefix="vramcalc-ckpt-"))
    folder = base / entry["id"]
    # a vision model's workload is an image (image_size, vramcalc's default), not a sequence
    workload = {"mode": "inference"} if "image_size" in config else {"mode": "inference", "seq_len": 8}
    try:
        row["files"] = write_folder(folder, config, tensors)
        read = vramcalc_row(folder, workload)
    except Exception as exc:  # the row says why: one entry's problem is not the others'
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}".replace(str(base), "FOLDER")
        row["verdict"] = "error"
        row["seconds"] = round(time.perf_counter() - started, 2)
        return row
    finally:
        if keep is None:
            shutil.rmtree(base, ignore_errors=True)
    assert (read["file_params"], read["file_bytes"]) == (row["file_params"], row["file_bytes"]), read
    row.update(read)
    files, modelled = row["file_params"], row["modelled_params"]
    row["difference"] = (modelled - files) / files
    row["bytes_match"] = row["weight_bytes"] == row["file_bytes"]
    if modelled == files:
        row["verdict"] = "equal"
    elif abs(row["difference"]) <= TOLERANCE:
        row["verdict"] = "within"
    else:
        row["verdict"] = "past"
    row["seconds"] = round(time.perf_counter() - started, 2)
    return row


def problems_of(row: dict[str, Any]) -> list[str]:
    """Why a row disagrees: the files against the catalog, vramcalc's count or bytes against the files."""
    found = []
    parameters = row["file_params"] - row["file_buffers"]  # the files' tensors that are parameters
    if row["meta_params"] is not None and parameters != row["meta_params"]:
        found.append(f"files {row['file_params']:,} != meta_params {row['meta_params']:,}")
    if "error" in row:
        return [*found, f"vramcalc refuses the files: {row['error']}"]
    if row["estimate_params"] not in (row["file_params"], parameters):
        found.append(f"estimate counts {row['estimate_params']:,} ({row['difference']:+.3%} modelled)")
    if row["weight_bytes"] not in (row["file_bytes"], row["file_bytes"] - row["buffer_bytes"]):
        found.append(f"weight bytes {row['weight_bytes']:,} != files' {row['file_bytes']:,}")
    return found


def line(row: dict[str, Any]) -> str:
    """The row in the table."""
    start = f"{row['id']:34} {row.get('files', 0):>3} {row['tensors']:>7} {row['file_params']:>16,} "
    if "error" in row:
        return start + f"{row['meta_params'] or 0:>16,}  vramcalc: {row['error'][:90]}"
    kept = "kept" if row["kept"] else ("files'" if row["estimate_params"] == row["file_params"] else "other")
    return start + (
        f"{row['meta_params'] or 0:>16,} {row['modelled_params']:>16,} {row['difference']:>+8.3%}  {kept:8} "
        f"{'=' if row['bytes_match'] else 'DIFF'}"
    )


def main() -> int:
    import torch
    import transformers
    import yaml

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("ids", nargs="*", help="entries to check (default: all)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the rows (and the summary) to OUT")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="leave the checkpoint folders in DIR")
    args = parser.parse_args()
    started = time.perf_counter()
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    mismatched = self_check()
    for problem in mismatched:
        print(f"save_pretrained writes other tensors than this script: {problem}")
    if mismatched:
        return 1
    entries = yaml.safe_load((ROOT / "vramcalc" / "spec" / "models.yaml").read_text(encoding="utf-8"))
    entries = [entry for entry in entries if not args.ids or entry["id"] in args.ids]
    skipped = [entry["id"] for entry in entries if "config" not in entry]
    print(
        f"{'id':34} {'files':>3} {'tensors':>7} {'files params':>16} {'meta_params':>16} {'modelled':>16} "
        f"{'diff':>8}  {'estimate':8} bytes"
    )
    rows: list[dict[str, Any]] = []
    for entry in entries:
        if "config" in entry:
            rows.append(check_entry(entry, args.keep))
            print(line(rows[-1]))
    counts = {verdict: sum(row["verdict"] == verdict for row in rows) for verdict in ("equal", "within", "past")}
    errors = [row["id"] for row in rows if "error" in row]
    disagreements = {row["id"]: problems_of(row) for row in rows if problems_of(row)}
    seconds = time.perf_counter() - started
    buffered = sum(row["file_buffers"] > 0 for row in rows)
    summary = (
        f"{len(rows)} models written as save_pretrained writes them: {counts['equal']} read with the modelled count "
        f"equal to the files', {counts['within']} within 0.5 %, {counts['past']} past it, {len(errors)} refused "
        f"({', '.join(errors) or 'none'}); the files' parameters equal meta_params for "
        f"{sum(row['file_params'] - row['file_buffers'] == row['meta_params'] for row in rows)} ({buffered} "
        f"holding persistent buffers besides); the estimate's weight bytes equal the files' for "
        f"{sum(row.get('bytes_match', False) for row in rows)}; {len(skipped)} without a config skipped "
        f"({', '.join(skipped) or 'none'}); {seconds:.0f} s"
    )
    print(summary)
    for entry_id, found in disagreements.items():
        print(f"  {entry_id}: {'; '.join(found)}")
    if args.json:
        document = {
            "date": datetime.now(UTC).strftime("%Y-%m-%d"),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "command": "PYTHONPATH=. /tmp/tracer-venv/bin/python benchmarks/checkpoint_catalog.py --json OUT",
            "seconds": round(seconds),
            "summary": summary,
            "skipped": skipped,
            "disagreements": disagreements,
            "rows": rows,
        }
        args.json.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    return 1 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
