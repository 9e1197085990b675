"""The bundled model catalog (``models.yaml`` beside this module): models by name.

A spec's ``model`` may be a catalog name (``model: llama-3.1-8b``) or a mapping that names one and
overrides some of its keys (``model: {preset: llama-3.1-8b, max_position_embeddings: 8192}``); the
``--model NAME`` flag of the commands does the same without a model section. An entry holds the
fields of the model's transformers ``config.json``; its model mapping is what vramcalc's importer
(:func:`vramcalc.spec.hf_import.model_from_config`) makes of them. Names compare case- and
separator-insensitively (``Llama-3.1-8B``, ``llama_3.1_8b``; a decimal point counts); a repository id
(``meta-llama/Llama-3.1-8B``) names its entry too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from vramcalc.errors import SpecError
from vramcalc.units import quoted

CATALOG_FILE = Path(__file__).with_name("models.yaml")
#: The key of a model mapping that names a catalog entry.
PRESET_KEY = "preset"
#: Longest name looked up (a longer one is no catalog name).
MAX_NAME_CHARS = 200


@dataclass(frozen=True, eq=False)
class ModelEntry:
    """One catalog entry (see the header of ``models.yaml`` for the fields)."""

    id: str
    name: str
    family: str
    repo: str
    source: str
    aliases: tuple[str, ...] = ()
    published_params: str | None = None
    published_coarse: str | None = None
    meta_params: int | None = None
    config: dict[str, Any] | None = None
    model: dict[str, Any] | None = None

    def model_mapping(self) -> tuple[dict[str, Any], list[str]]:
        """The vramcalc ``model`` mapping of this entry and the importer's notes on what it leaves out."""
        if self.model is not None:
            return dict(self.model), []
        from vramcalc.spec.hf_import import model_from_config

        assert self.config is not None  # every entry has a config or a model (checked on load)
        return model_from_config(dict(self.config), self.source_label)  # with its model_type

    @property
    def source_label(self) -> str:
        """How errors name this entry: ``model catalog entry llama-3.1-8b``."""
        return f"model catalog entry {self.id}"

    def config_value(self, *names: str) -> Any:
        """The first of the config's ``names`` that is set (None when none is); a multimodal config's
        language-model fields are its ``text_config``'s."""
        config = self.config or {}
        text = config.get("text_config")
        for fields in (config, text if isinstance(text, dict) else {}):
            for name in names:
                value = fields.get(name)
                if value is not None:
                    return value
        return None

    @property
    def context_length(self) -> int | None:
        return self.config_value("max_position_embeddings", "n_positions")

    @property
    def layers(self) -> int | None:
        if self.model is not None:
            return self.model.get("depth")
        return self.config_value("num_hidden_layers", "n_layer", "num_layers", "n_layers")

    @property
    def heads(self) -> int | None:
        return self.config_value("num_attention_heads", "n_head", "num_heads", "n_heads")

    @property
    def kv_heads(self) -> int | None:
        """Key/value heads: num_key_value_heads, Falcon's num_kv_heads or multi-query (1); else the heads."""
        kv = self.config_value("num_key_value_heads", "num_kv_heads")
        if kv is None and self.config_value("multi_query") and not self.config_value("new_decoder_architecture"):
            return 1
        return kv if kv is not None else self.heads

    @property
    def params_label(self) -> str:
        """The parameter count to show: the published figure, else the transformers count in billions/millions."""
        if self.published_params:
            return self.published_params
        if self.meta_params:
            return format_count(self.meta_params)
        return "?"


def format_count(count: int) -> str:
    """``8030261248`` -> ``8.03B``; ``124439808`` -> ``124M`` (three significant digits)."""
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= scale:
            value = count / scale
            digits = 2 if value < 10 else 1 if value < 100 else 0
            return f"{value:.{digits}f}{unit}"
    return str(count)


def normalise(name: str) -> str:
    """Case- and separator-insensitive key: 'Llama-3.1-8B' and 'llama_3.1 8b' -> 'llama3.18b'. A decimal
    point is kept: it tells 'opt-1.3b' from 'opt-13b'."""
    return re.sub(r"[^a-z0-9.]", "", name.lower())


def _entry(raw: Any, index: int) -> ModelEntry:
    where = f"{CATALOG_FILE.name}: entry {index + 1}"
    if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
        raise SpecError(f"{where}: expected a mapping with an id")
    if (raw.get("config") is None) == (raw.get("model") is None):
        raise SpecError(f"{where} ({raw['id']}): give a config or a model (one of the two)")
    published = raw.get("published_params")
    return ModelEntry(
        id=raw["id"],
        name=str(raw.get("name", raw["id"])),
        family=str(raw.get("family", "")),
        repo=str(raw.get("repo", "")),
        source=str(raw.get("source", "")),
        aliases=tuple(str(alias) for alias in raw.get("aliases") or ()),
        published_params=str(published) if published is not None else None,
        published_coarse=raw.get("published_coarse"),
        meta_params=raw.get("meta_params"),
        config=raw.get("config"),
        model=raw.get("model"),
    )


@cache
def catalog() -> tuple[ModelEntry, ...]:
    """Every catalog entry, in the file's order (read once, from its JSON copy: :mod:`vramcalc.bundled`)."""
    from vramcalc.bundled import read_bundled

    raw = read_bundled(CATALOG_FILE.parent, CATALOG_FILE.name)
    return tuple(_entry(item, index) for index, item in enumerate(raw or []))


@cache
def _keys() -> dict[str, ModelEntry]:
    """Normalised names -> entry: ids and aliases first, then repository ids and their last part."""
    keys: dict[str, ModelEntry] = {}
    for entry in catalog():
        for name in (entry.id, *entry.aliases):
            keys.setdefault(normalise(name), entry)
    for entry in catalog():
        for name in (entry.repo, entry.repo.rsplit("/", 1)[-1]):
            if name:
                keys.setdefault(normalise(name), entry)
    return keys


def closest_names(name: str, limit: int = 3) -> list[str]:
    """Catalog ids (and aliases) closest to ``name``, best first: a typo's likely meaning."""
    import difflib

    names: dict[str, str] = {}
    for entry in catalog():
        for known in (entry.id, *entry.aliases):
            names.setdefault(known.lower(), entry.id)
    text = name.strip().lower()
    found: list[str] = []
    for match in difflib.get_close_matches(text, list(names), n=limit * 3, cutoff=0.6):
        if names[match] not in found:
            found.append(names[match])
    return found[:limit]


def find_model(name: str) -> ModelEntry | None:
    """The entry ``name`` names (id, alias or repository id; any case or punctuation), else None. A
    repository id names the entry its last part names (``meta-llama/Meta-Llama-3.1-8B-Instruct``: the
    alias ``meta-llama-3.1-8b-instruct``)."""
    if len(name) > MAX_NAME_CHARS:
        return None
    keys = _keys()
    found = keys.get(normalise(name))
    if found is None and "/" in name:
        found = keys.get(normalise(name.rsplit("/", 1)[-1]))
    return found


#: Words of a repository name that mark a tuned variant of the same architecture (an instruct, chat or
#: ``-it`` release), and a release date (``-2507``): dropped to find the base model in the catalog.
VARIANT_WORDS = frozenset({"instruct", "chat", "it", "hf", "base"})
_DATE = re.compile(r"\d{4}")


def _variant_base(name: str) -> str | None:
    """``Qwen3-30B-A3B-Instruct-2507`` -> ``Qwen3-30B-A3B``: the name without the variant's words (None when
    it has none)."""
    last = name.rsplit("/", 1)[-1]
    words = re.split(r"[-_\s]+", last)
    kept = [word for word in words if word.lower() not in VARIANT_WORDS and not _DATE.fullmatch(word)]
    return "-".join(kept) if kept and len(kept) < len(words) else None


def _alternatives(name: str, entry: ModelEntry) -> list[str]:
    """Other entries a short name could mean: ids that start with it (``mistral-7b``: ``mistral-7b-v0.1``)."""
    key = normalise(name.rsplit("/", 1)[-1])
    if normalise(entry.id) == key:
        return []
    return [other.id for other in catalog() if other is not entry and normalise(other.id).startswith(key)]


def find_named(name: str) -> tuple[ModelEntry, list[str]] | None:
    """The entry ``name`` names (:func:`find_model`), else the base model of a tuned variant's name, with
    a note saying which entry was taken for what: the variant it stands for, or the other entries an
    ambiguous short name could mean. None when the catalog has neither."""
    if len(name) > MAX_NAME_CHARS:
        return None
    entry = find_model(name)
    if entry is not None:
        others = _alternatives(name, entry)
        if others:
            return entry, [f"{name}: the catalog's {entry.id}; also {', '.join(others)}"]
        if "/" in name and normalise(name) != normalise(entry.repo):
            return entry, [f"{name}: the catalog's {entry.id} ({entry.repo}), the same architecture"]
        return entry, []
    base = _variant_base(name)
    entry = find_model(base) if base else None
    if entry is None:
        return None
    note = (
        f"{name}: a tuned variant of the catalog's {entry.id} ({entry.repo}), whose architecture it shares; "
        "its config's other fields (context length) are the catalog's"
    )
    return entry, [note]


def unknown_model(name: str, where: str) -> SpecError:
    """The one-line error for a name the catalog does not hold, with the closest names."""
    close = closest_names(name[:MAX_NAME_CHARS])
    hint = f"; closest: {', '.join(close)}" if close else ""
    return SpecError(f"{where}: unknown model {quoted(name)}{hint} ('vramcalc models' lists them)")


def lookup(name: Any, where: str) -> ModelEntry:
    """The entry ``name`` names; a :class:`SpecError` naming ``where`` and the closest names otherwise."""
    if not isinstance(name, str) or not name.strip():
        raise SpecError(f"{where}: expected a model name from the catalog, got {quoted(name)}")
    entry = find_model(name)
    if entry is None:
        raise unknown_model(name, where)
    return entry


def _search_text(text: str) -> str:
    """Lower case, spaces, underscores and slashes as hyphens: 'Qwen/Qwen2.5-7B' -> 'qwen-qwen2.5-7b'."""
    return re.sub(r"[\s_/]+", "-", text.strip().lower())


def _holds(texts: list[str], word: str) -> bool:
    """Whether a text holds ``word`` starting at the start of one of its tokens ('llama-3' is in
    'meta-llama-3-8b' and 'llama-3.1-8b', not in 'codellama-34b', 'llama-34b' or 'qwen3-1.7b' for '7b')."""
    end = r"(?![0-9])" if word[-1:].isdigit() else ""  # 'llama-3' is not the start of 'llama-34b'
    pattern = re.compile(r"(?:^|[^a-z0-9.])" + re.escape(word) + end)
    return any(pattern.search(text) for text in texts)


#: Distinct words a query may hold (each must match; a repeated word counts once): more is refused
MAX_QUERY_WORDS = 32


def search(query: str | None) -> list[ModelEntry]:
    """Entries whose id, aliases, name, family or repository hold ``query`` (from the start of a word;
    case, spaces and underscores aside), or every one of its words (``qwen 7b``); also the entry
    ``query`` names exactly. Every entry without a query. A query of more than
    :data:`MAX_QUERY_WORDS` distinct words is a :class:`SpecError`."""
    if not query or not query.strip():
        return list(catalog())
    whole = _search_text(query)
    words = [word for word in whole.split("-") if word] if re.search(r"[\s,]", query) else [whole]
    words = list(dict.fromkeys(words))
    if len(words) > MAX_QUERY_WORDS:
        raise SpecError(f"query: {len(words):,} distinct words; at most {MAX_QUERY_WORDS} are matched (each must hold)")
    named = find_model(query)
    found = []
    for entry in catalog():
        texts = [_search_text(text) for text in (entry.id, *entry.aliases, entry.name, entry.family, entry.repo)]
        if entry is named or all(_holds(texts, word) for word in words):
            found.append(entry)
    return found


def matching(query: str | None) -> list[ModelEntry]:
    """What ``vramcalc models QUERY`` and :func:`vramcalc.models` list: :func:`search`'s entries, where none
    is a :class:`SpecError` with the closest names."""
    found = search(query)
    if not found:
        close = closest_names(query or "")
        hint = f"; closest: {', '.join(close)}" if close else ""
        raise SpecError(f"no catalog model matches {query!r}{hint} ('vramcalc models' lists them all)")
    return found


def is_preset(model: Any) -> bool:
    """Whether a spec's ``model`` section names a catalog entry (a name, or a mapping with ``preset``)."""
    return isinstance(model, str) or (isinstance(model, dict) and PRESET_KEY in model)
