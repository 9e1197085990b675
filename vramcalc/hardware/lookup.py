"""A card by name: a catalog entry, or ``local`` / ``local:N`` for the installed card (NVML)."""

from __future__ import annotations

from vramcalc.hardware.catalog import GPU, load_catalog


def resolve_gpu(name: str) -> tuple[GPU, list[str]]:
    """The card a name picks and, when the name is an ambiguous short name, the other variants' ids.
    ``local`` / ``local:N`` is the installed card, read through NVML (:mod:`vramcalc.hardware.local`)."""
    from vramcalc.hardware import local as local_gpu

    if local_gpu.is_local(name):
        return local_gpu.local_gpu(name, load_catalog()), []
    return load_catalog().resolve(name)


def get_gpu(name: str) -> GPU:
    """The card a name picks (an ambiguous short name picks its documented default)."""
    return resolve_gpu(name)[0]
