"""A checkpoint on disk: a folder as transformers, Diffusers or Sentence Transformers save one, a single
``.safetensors`` file, or a ``.gguf`` file. Only the headers are read.

Which weights files a folder's model loads, as the libraries pick them:

* transformers (``modeling_utils``): ``model.safetensors.index.json``'s ``weight_map`` (every shard it
  names), else ``model.safetensors``;
* Diffusers (``model_index.json``): each component folder it lists, with its ``config.json`` and its
  ``diffusion_pytorch_model.safetensors`` or ``model.safetensors`` (sharded through their index), the
  file without a variant suffix where both are there;
* Sentence Transformers (``modules.json``): the transformer at the root, and each module folder's own
  ``model.safetensors`` (a Dense layer's);
* anything else: the ``.safetensors`` files at the top (``consolidated*.safetensors``, Mistral's own
  format, only when nothing else is there), or the one ``.gguf`` file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from vramcalc.errors import ModelSourceError, SpecError
from vramcalc.files import read_json
from vramcalc.sources.checkpoint import MAX_FILES, MAX_JSON_BYTES, TRANSFORMERS_WEIGHTS, Checkpoint, Origin, TensorFile
from vramcalc.sources.hf_cache import blob_sha256
from vramcalc.sources.safetensors_header import HeaderAllowance, header_length, parse_safetensors_header


def read_safetensors_file(path: Path, name: str, where: str, allowance: HeaderAllowance | None = None) -> TensorFile:
    """The header of one safetensors file on disk; ``name`` is its path in the checkpoint; its length comes
    out of ``allowance``, the checkpoint's (a new one: a file on its own)."""
    label = f"{where}: {name}"
    try:
        with open(path, "rb") as handle:
            length = header_length(handle.read(8), label)
            (allowance or HeaderAllowance()).take(length, label)
            raw = handle.read(length)
    except (OSError, ValueError) as exc:
        raise ModelSourceError(f"{label}: cannot read ({getattr(exc, 'strerror', None) or exc})", "path") from None
    if len(raw) < length:
        raise ModelSourceError(f"{label}: the file ends inside its {length:,}-byte header", "header")
    return parse_safetensors_header(raw, name, label, blob_sha256(path))


def _json(path: Path, where: str) -> Any:
    try:
        return read_json(path, MAX_JSON_BYTES, "model JSON files")
    except SpecError as exc:
        raise ModelSourceError(f"{where}: {exc}", "config") from None


def _mapping(path: Path, where: str) -> dict[str, Any]:
    data = _json(path, where)
    if not isinstance(data, dict):
        raise ModelSourceError(f"{where}: {path.name}: expected a JSON object", "config")
    return data


def _plain_name(name: str) -> bool:
    """Whether ``name`` (from a JSON file of the checkpoint) names an entry of its folder: no path
    separator, not ``.`` or ``..``, and no NUL."""
    return bool(name) and not any(char in name for char in "/\\\x00") and name not in (".", "..")


def _shards(folder: Path, index: Path, where: str) -> list[str]:
    """The shard files a ``*.safetensors.index.json`` names, in order."""
    weight_map = _mapping(index, where).get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(value, str) for value in weight_map.values()):
        raise ModelSourceError(f"{where}: {index.name}: weight_map must map tensor names to file names", "config")
    names = sorted(set(weight_map.values()))
    if len(names) > MAX_FILES:
        raise ModelSourceError(f"{where}: {index.name} names {len(names):,} files (at most {MAX_FILES:,})", "config")
    for name in names:
        if not _plain_name(name):
            raise ModelSourceError(f"{where}: {index.name}: {name!r} is not a file beside the index", "config")
        if not os.path.isfile(folder / name):  # False, not OSError, for a name too long for the file system
            raise ModelSourceError(f"{where}: {index.name} names {name}, which is not in the folder", "path")
    return names


def _weights_in(folder: Path, where: str) -> list[str]:
    """The safetensors files a transformers or Diffusers model in ``folder`` loads (names in the folder)."""
    for base in TRANSFORMERS_WEIGHTS:
        index = folder / f"{base}.index.json"
        if index.is_file():
            return _shards(folder, index, where)
        if (folder / base).is_file():
            return [base]
    found = sorted(path.name for path in folder.glob("*.safetensors") if path.is_file())
    plain = [name for name in found if not name.startswith("consolidated")]
    return plain or found


def _files(root: Path, names: list[str], where: str) -> tuple[TensorFile, ...]:
    if len(names) > MAX_FILES:
        raise ModelSourceError(f"{where}: {len(names):,} weights files (at most {MAX_FILES:,})", "path")
    allowance = HeaderAllowance()
    return tuple(read_safetensors_file(root / name, name, where, allowance) for name in names)


def _pipeline(root: Path, index: dict[str, Any], where: str) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """A Diffusers pipeline's weights files (``component/file``) and its components' configs."""
    names: list[str] = []
    configs: dict[str, dict[str, Any]] = {}
    for component, value in index.items():
        folder = root / component
        if component.startswith("_") or not isinstance(value, list) or not _plain_name(component):
            continue  # a pipeline setting, a component left out (None), or not a folder of the pipeline
        if not os.path.isdir(folder):  # False, not OSError, for a name too long for the file system
            continue  # a scheduler or a tokenizer without weights
        config = folder / "config.json"
        if config.is_file():
            configs[component] = _mapping(config, f"{where}: {component}")
        names.extend(f"{component}/{name}" for name in _weights_in(folder, f"{where}: {component}"))
    return names, configs


def _sentence_modules(root: Path, where: str) -> list[str]:
    """The weights files of a Sentence Transformers model's module folders (a Dense layer's)."""
    modules = _json(root / "modules.json", where)
    names: list[str] = []
    if not isinstance(modules, list):
        return names
    for module in modules:
        sub = module.get("path") if isinstance(module, dict) else None
        if isinstance(sub, str) and _plain_name(sub) and os.path.isdir(root / sub):
            names.extend(f"{sub}/{name}" for name in _weights_in(root / sub, f"{where}: {sub}"))
    return names


def read_folder(root: Path, where: str, origin: Origin) -> Checkpoint:
    """A checkpoint folder (see the module's docstring for which files are read)."""
    if (root / "model_index.json").is_file():
        index = _mapping(root / "model_index.json", where)
        names, configs = _pipeline(root, index, where)
        if not names:
            raise ModelSourceError(f"{where}: the pipeline's component folders hold no .safetensors weights", "path")
        return Checkpoint(origin, "safetensors", _files(root, names, where), None, index, configs)
    config = _mapping(root / "config.json", where) if (root / "config.json").is_file() else None
    names = _weights_in(root, where)
    if (root / "modules.json").is_file():
        names = [*names, *_sentence_modules(root, where)]
    if names:
        return Checkpoint(origin, "safetensors", _files(root, names, where), config)
    ggufs = sorted(path.name for path in root.glob("*.gguf") if path.is_file())
    if len(ggufs) == 1:
        return read_gguf(root / ggufs[0], where, origin)
    if ggufs:
        shown = ", ".join(ggufs[:5]) + (", ..." if len(ggufs) > 5 else "")
        raise ModelSourceError(f"{where}: several .gguf files ({shown}); name the one to load", "path")
    what = "config.json but no .safetensors weights" if config is not None else "no config.json, .safetensors or .gguf"
    raise ModelSourceError(f"{where}: {what} (vramcalc reads the weights' headers)", "path")


def read_gguf(path: Path, where: str, origin: Origin) -> Checkpoint:
    """A ``.gguf`` file: its tensors, and the architecture's hyper-parameters as a config."""
    from vramcalc.sources.gguf_header import gguf_config, read_gguf_file

    file = read_gguf_file(path, f"{where}")
    return Checkpoint(origin, "gguf", (file,), gguf_config(file.metadata))


def read_local(path: Path, where: str, origin: Origin | None = None) -> Checkpoint:
    """The checkpoint at ``path``: a folder, a ``.safetensors`` file or a ``.gguf`` file."""
    origin = origin or Origin("path", str(path))
    try:
        is_dir, is_file = path.is_dir(), path.is_file()
    except (OSError, ValueError):
        is_dir = is_file = False
    if is_dir:
        return read_folder(path, where, origin)
    if not is_file:
        raise ModelSourceError(f"{where}: no such file or folder", "path")
    if path.suffix == ".gguf":
        return read_gguf(path, where, origin)
    if path.suffix != ".safetensors":
        raise ModelSourceError(f"{where}: not a .safetensors or .gguf file, nor a checkpoint folder", "path")
    sibling = path.parent / "config.json"
    config = _mapping(sibling, where) if sibling.is_file() else None
    return Checkpoint(origin, "safetensors", (read_safetensors_file(path, path.name, where),), config)
