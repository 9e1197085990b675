"""A card by name: a catalog entry, ``local`` / ``local:N`` for the installed card (NVML), or a size
such as ``48GiB`` for a capacity-only card (:mod:`vramcalc.hardware.custom`).

The catalog is the bundled one, or the bundled one merged with a user's file (``--gpus-file``,
``VRAMCALC_GPUS``) once :func:`use_gpus_file` has loaded it: the user's entries are added, and one
whose id is a bundled id replaces that entry. Imports nothing heavy until a card is looked up, so the
command line can reset the user catalog at start-up for free.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from vramcalc.hardware.catalog import GPU, Catalog
    from vramcalc.hardware.custom import CustomCard

    #: Any card a command compares against: a catalog entry (or the installed card) or a custom one.
    Card: TypeAlias = GPU | CustomCard

#: A user's catalog files are small: a few entries of a few hundred bytes.
MAX_CATALOG_BYTES = 1_000_000

_user_catalog: Catalog | None = None
_user_catalog_file: Path | None = None


def load_user_catalog(path: Path) -> tuple[Catalog, list[str]]:
    """The bundled catalog merged with the GPU entries of ``path`` (the schema of ``gpus.yaml``), and a
    note for each bundled entry it replaces. Errors (:class:`~vramcalc.errors.VramcalcError`) are one
    line naming the file, and the entry and field where there is one."""
    from vramcalc.errors import CatalogError
    from vramcalc.files import parse_yaml, read_regular_file
    from vramcalc.hardware.catalog import Catalog, load_catalog, parse_entries

    source = str(path)
    data = read_regular_file(path, MAX_CATALOG_BYTES, "GPU catalog files")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CatalogError(f"{source}: not UTF-8 text") from None
    by_id: dict[str, GPU] = {}
    for gpu in parse_entries(parse_yaml(text, source), source):
        if gpu.id in by_id:
            raise CatalogError(f"{source}: entry {gpu.id}: id: {gpu.id!r} is used twice in the file")
        by_id[gpu.id] = gpu
    notes, merged = [], []
    for gpu in load_catalog().gpus:
        if gpu.id in by_id:
            notes.append(f"{source}: entry {gpu.id} replaces the bundled entry of that id")
            merged.append(by_id.pop(gpu.id))
        else:
            merged.append(gpu)
    return Catalog([*merged, *by_id.values()], source), notes


def use_gpus_file(path: Path | None) -> list[str]:
    """Make the bundled catalog merged with ``path`` the catalog every lookup uses (the bundled one alone
    for None); returns the notes of :func:`load_user_catalog`."""
    global _user_catalog, _user_catalog_file
    if path is None:
        _user_catalog, _user_catalog_file = None, None
        return []
    catalog, notes = load_user_catalog(path)
    _user_catalog, _user_catalog_file = catalog, path
    return notes


def user_catalog_file() -> Path | None:
    """The user catalog file the lookups read (``--gpus-file`` / ``VRAMCALC_GPUS``), if any."""
    return _user_catalog_file


def active_catalog() -> Catalog:
    """The catalog lookups use: the bundled one, or the merged one :func:`use_gpus_file` set."""
    from vramcalc.hardware.catalog import load_catalog

    return _user_catalog if _user_catalog is not None else load_catalog()


def find_card(name: str, what: str = "--gpu") -> tuple[Card, str | None]:
    """The card a name picks and a note for stderr when the name was not an exact catalog id or alias:
    ``local`` / ``local:N``, a catalog name (:meth:`~vramcalc.hardware.catalog.Catalog.lookup`), or a
    size (a custom card; an exact catalog name wins over it). ``what`` (``--gpu``, ``target.gpu``)
    starts the custom card's note."""
    from vramcalc.hardware import custom
    from vramcalc.hardware.names import normalise

    catalog = active_catalog()
    if normalise(name) not in catalog.index:
        from vramcalc.hardware import local as local_gpu

        if local_gpu.is_local(name):
            return local_gpu.local_gpu(name, catalog), None
        if custom.is_size(name):
            card = custom.custom_card(name, what)
            return card, f"{what} {name.strip()}: {card.description}"
    pick = catalog.lookup(name)
    return pick.gpu, pick.note


def resolve_gpu(name: str) -> tuple[GPU, list[str]]:
    """The card a name picks and, when the name is an ambiguous short name, the other variants' ids.
    ``local`` / ``local:N`` is the installed card, read through NVML (:mod:`vramcalc.hardware.local`)."""
    from vramcalc.hardware import local as local_gpu

    if local_gpu.is_local(name):
        return local_gpu.local_gpu(name, active_catalog()), []
    return active_catalog().resolve(name)


def get_gpu(name: str) -> GPU:
    """The card a name picks (an ambiguous short name picks its documented default)."""
    return resolve_gpu(name)[0]
