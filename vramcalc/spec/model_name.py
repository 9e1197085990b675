"""A model by the name the user has: the one resolver behind a spec's ``model:``, every ``--model`` flag,
``import`` and the Python API.

In order (docs/models.md):

1. a local path: a checkpoint folder, a ``.safetensors`` file or a ``.gguf`` file;
2. the bundled catalog, by name, alias or repository id; a tuned variant's repository
   (``-Instruct``, ``-chat``, ``-it``) names its base model, and a short name that could mean
   several entries says which it took;
3. the local Hugging Face cache (``HF_HUB_CACHE``, ``HF_HOME``), offline;
4. the Hub over the network, for ``org/name[@revision]`` (``org/name/file.gguf`` for one GGUF file):
   ``config.json`` and the weights' headers, never the weights.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vramcalc.errors import SpecError
from vramcalc.sources.checkpoint import Checkpoint
from vramcalc.spec.presets import MAX_NAME_CHARS, PRESET_KEY, ModelEntry, find_named, is_preset, unknown_model
from vramcalc.units import quoted

#: ``org/name``, ``org/name@revision`` or ``org/name/path/file.gguf[@revision]``: the Hub's repository
#: names (letters, digits, ``-``, ``_``, ``.``; at most 96 characters each part).
HUB_ID = re.compile(
    r"(?P<repo>[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95})"
    r"(?P<file>(?:/[\w.-]+)*/[\w.-]+\.gguf)?"
    r"(?:@(?P<revision>[\w./-]{1,200}))?"
)
#: Suffixes that make a name a path even when nothing is there (so the error says "no such file").
PATH_SUFFIXES = (".safetensors", ".gguf", ".json")


@dataclass(frozen=True)
class NamedModel:
    """What a model name resolved to: a catalog entry or a checkpoint read from files, and notes saying
    how the name was read."""

    entry: ModelEntry | None
    checkpoint: Checkpoint | None
    notes: tuple[str, ...] = ()

    @property
    def spec_name(self) -> str:
        """The name a spec of this model gets: the catalog id, the repository's or folder's last part."""
        if self.entry is not None:
            return self.entry.id
        assert self.checkpoint is not None
        origin = self.checkpoint.origin
        label = origin.repo or origin.label.rstrip("/")
        name = "".join(char for char in label.rsplit("/", 1)[-1] if char.isprintable()).strip()
        return name[:200] or "model"


def _is_path(name: str) -> bool:
    """Whether ``name`` means a file or folder: one exists there, or it is spelled as a path (a Hub id's
    GGUF file, ``org/name/file.gguf``, is the Hub's unless such a file is here)."""
    try:
        if os.path.lexists(name):
            return True
    except (OSError, ValueError):
        return False
    if name.startswith(("/", "./", "../", "~")):
        return True
    hub_file = HUB_ID.fullmatch(name)
    return name.endswith(PATH_SUFFIXES) and (hub_file is None or hub_file["file"] is None)


def is_config_file(name: str) -> bool:
    """Whether ``vramcalc import NAME`` names a transformers config.json (the importer's own input) rather
    than a model: a ``.json`` name, or a file that is no ``.safetensors`` or ``.gguf``."""
    path = Path(name)
    if path.suffix == ".json":
        return True
    try:
        return path.is_file() and path.suffix not in (".safetensors", ".gguf")
    except (OSError, ValueError):  # a name too long for the file system, an embedded NUL
        return False


def _from_path(name: str, where: str) -> NamedModel:
    from vramcalc.sources.local import read_local

    path = Path(os.path.expanduser(name))  # pathlib's raises where no home is known (``~nobody``); this keeps it
    return NamedModel(None, read_local(path, _label(name, where)))


def _label(name: str, where: str) -> str:
    """How errors name the model: ``where`` when it names it already (``--model NAME``), else both."""
    return where if where.endswith(name) else f"{where}: {name}"


def _cached(match: re.Match[str], where: str, name: str) -> NamedModel | None:
    """The model a Hub id names from the local caches (Hugging Face's, vramcalc's headers), offline."""
    from vramcalc.sources import hub

    filename = (match["file"] or "").lstrip("/") or None
    cached = hub.cached_checkpoint(match["repo"], match["revision"], _label(name, where), filename)
    return NamedModel(None, cached) if cached is not None else None


def _from_hub(match: re.Match[str], where: str, name: str) -> NamedModel:
    """The model a Hub id names, from the local cache, else the Hub."""
    cached = _cached(match, where, name)
    if cached is not None:
        return cached
    from vramcalc.sources import hub  # HF_HUB_OFFLINE: one error line, the cache having nothing

    filename = (match["file"] or "").lstrip("/") or None
    return NamedModel(None, hub.fetch_checkpoint(match["repo"], match["revision"], _label(name, where), filename))


def resolve_name(name: object, where: str) -> NamedModel:
    """The model ``name`` names (see the module's docstring for the order); one :class:`SpecError` line
    naming ``where`` otherwise."""
    if not isinstance(name, str) or not name.strip():
        raise SpecError(f"{where}: expected a model name, a Hub id or a path, got {quoted(name)}")
    if len(name) > 4096 or "\x00" in name:
        raise SpecError(f"{where}: {quoted(name)} is not a model name, a Hub id or a path")
    if _is_path(name):
        return _from_path(name, where)
    hub_id = HUB_ID.fullmatch(name) if len(name) <= MAX_NAME_CHARS + 200 else None
    found = find_named(name) if hub_id is None or hub_id["revision"] is None else None
    if found is not None:
        entry, notes = found
        return NamedModel(entry, None, tuple(notes))
    if hub_id is not None:
        return _from_hub(hub_id, where, name)
    raise unknown_model(name, where)


def named_model(named: NamedModel, where: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``model`` mapping of a resolved name, and the workload keys its files imply (a checkpoint's
    quantization and stored dtype; none for a catalog entry)."""
    if named.checkpoint is not None:
        from vramcalc.spec.from_checkpoint import checkpoint_model

        model, implied, _ = checkpoint_model(named.checkpoint, where)
        return model, implied
    assert named.entry is not None
    try:
        mapping, _ = named.entry.model_mapping()
    except SpecError as exc:
        raise SpecError(f"{where}: {named.entry.id}: {exc}") from None
    return mapping, {}


def _beside(name: object, source: str) -> object:
    """A relative path in a spec file names a checkpoint beside the spec (as an include does), when one
    is there; any other name is returned as it is."""
    if not isinstance(name, str) or not name.startswith(("./", "../")):
        return name
    try:
        spec_folder = Path(source).parent
        candidate = spec_folder / name
        return str(candidate) if spec_folder != Path(".") and os.path.lexists(candidate) else name
    except (OSError, ValueError):
        return name


def expand_spec(data: dict[str, Any], source: str) -> dict[str, Any]:
    """A spec document whose ``model`` names a model (``model: llama-3.1-8b``, a Hub id, a path; or a
    mapping ``{preset: NAME, ...}`` whose other keys override the named model's) with that model's
    mapping filled in, and the workload keys its files imply where the spec gives none. The spec's
    name defaults to the model's. Errors name ``source`` and ``model`` or ``model.preset``."""
    model = data.get("model")
    if not is_preset(model):
        return data
    name: object
    if isinstance(model, str):
        where, name, overrides = f"{source}: model", model, {}
    else:
        assert isinstance(model, dict)
        where, name = f"{source}: model.{PRESET_KEY}", model.get(PRESET_KEY)
        overrides = {key: value for key, value in model.items() if key != PRESET_KEY}
    named = resolve_name(_beside(name, source), where)
    mapping, implied = named_model(named, where)
    expanded = {**data, "model": {**mapping, **overrides}}
    workload = data.get("workload")
    if implied and isinstance(workload, dict):
        expanded["workload"] = {**{k: v for k, v in implied.items() if k != "precision"}, **workload}
    if "name" not in data:
        expanded["name"] = named.spec_name
    return expanded


def import_named(name: str, where: str) -> Any:
    """``vramcalc import NAME``: the spec of a model named by a path, a catalog name or a Hub id (a
    ``config.json`` file is the importer's own input), with what its files hold recorded under
    ``model.checkpoint`` (the source with its commit, the files' SHA-256 where known)."""
    from vramcalc.spec.hf_import import ImportedSpec, example_workload, import_spec
    from vramcalc.spec.validate import validate_spec

    named = resolve_name(name, where)
    if named.entry is not None:
        if named.entry.config is None:
            raise SpecError(f"{where}: {named.entry.id} is a catalog model without a config.json to import")
        imported = import_spec({**named.entry.config, "_name_or_path": named.entry.id}, where)
        said = (*(named.notes or [f"the catalog's {named.entry.id} ({named.entry.repo})"]), *imported.notes)
        return ImportedSpec(imported.source, imported.model_type, said, imported.document)
    assert named.checkpoint is not None
    from vramcalc.spec.from_checkpoint import checkpoint_model

    model, implied, notes = checkpoint_model(named.checkpoint, where)
    workload = {**example_workload(model, None, where), **implied}
    if "precision" not in implied and named.checkpoint.config is not None:
        from vramcalc.spec.hf_import import config_precision

        try:
            workload["precision"] = config_precision(named.checkpoint.config, where) or workload["precision"]
        except SpecError:
            pass
    document = {"name": named.spec_name, "model": model, "workload": workload}
    validate_spec(document, where)
    model_type = (named.checkpoint.config or {}).get("model_type")
    return ImportedSpec(where, str(model_type)[:40], tuple(notes), document)
