"""The data files vramcalc ships (the GPU catalog ``hardware/gpus.yaml``, the model catalog
``spec/models.yaml``), read at the cost of a JSON decode.

The YAML files are the sources: people edit them. Beside each lies a JSON copy of its data
(``gpus.json``) that also holds the SHA-256 of the YAML text it was made from. :func:`read_bundled` returns
the copy's data when that hash is the YAML's (the JSON decoder is C code; PyYAML's pure-Python loader
takes a few hundred milliseconds for models.yaml), else it reads the YAML itself, with libyaml where
PyYAML has it, so an edited YAML is never shadowed by an old copy. ``python -m vramcalc.bundled`` rewrites
the copies; a test checks that they are current and equal to what PyYAML's safe loader reads.

Only vramcalc's own files are read here: user files go through :mod:`vramcalc.files` (bounded, and
PyYAML's pure-Python parser).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

#: The bundled YAML files, as (folder inside the package, file name).
SOURCES = (("hardware", "gpus.yaml"), ("spec", "models.yaml"))


def copy_name(name: str) -> str:
    """The JSON copy of a YAML file: ``gpus.yaml`` -> ``gpus.json``."""
    return name.removesuffix(".yaml") + ".json"


def digest(text: bytes) -> str:
    """The SHA-256 (hex) of a YAML file's bytes, as its copy records it."""
    return hashlib.sha256(text).hexdigest()


def parse_source(text: bytes) -> Any:
    """A bundled YAML file's data, as ``yaml.safe_load`` reads it (with libyaml's parser where PyYAML has it)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(text.decode("utf-8"), Loader=loader)  # noqa: S506 - a safe loader, on vramcalc's own file


def read_bundled(folder: Traversable | Path, name: str) -> Any:
    """The data of the YAML file ``name`` in ``folder``: its JSON copy's when the copy was made from this
    very text, else the YAML's."""
    import json

    text = folder.joinpath(name).read_bytes()
    try:
        copy = json.loads(folder.joinpath(copy_name(name)).read_bytes())
    except (OSError, ValueError):  # no copy (a partial install), or an unreadable one
        copy = None
    if isinstance(copy, dict) and copy.get("sha256") == digest(text) and "data" in copy:
        return copy["data"]
    return parse_source(text)


def copy_text(name: str, text: bytes) -> str:
    """The JSON copy of the YAML file ``name`` whose bytes are ``text``."""
    import json

    import yaml

    data = yaml.safe_load(text.decode("utf-8"))
    try:
        same = json.loads(json.dumps(data, allow_nan=False)) == data
    except (TypeError, ValueError):  # a date, a set, a non-finite number
        same = False
    if not same:
        raise ValueError(f"{name}: holds values JSON cannot carry as they are")
    note = f"generated from {name} by 'python -m vramcalc.bundled': edit {name}, then run that"
    head = json.dumps({"note": note, "sha256": digest(text)})[:-1]
    if not isinstance(data, list):
        return f'{head}, "data": {json.dumps(data, allow_nan=False)}}}\n'
    entries = ",\n".join(json.dumps(entry, allow_nan=False) for entry in data)  # one line per entry
    return f'{head}, "data": [\n{entries}\n]}}\n'


def folder_of(folder: str) -> Path:
    """A folder of the ``vramcalc`` package in this checkout or installation."""
    return Path(__file__).resolve().parent / folder


def main() -> int:
    """Rewrite every JSON copy from its YAML file; print the copies that changed."""
    for where, name in SOURCES:
        folder = folder_of(where)
        copy = folder / copy_name(name)
        text = copy_text(name, (folder / name).read_bytes())
        if not copy.exists() or copy.read_text(encoding="utf-8") != text:
            copy.write_text(text, encoding="utf-8")
            print(f"wrote {copy}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
