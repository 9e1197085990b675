"""``--gpu local``: the installed NVIDIA card, read through NVML, matched to the catalog.

NVML (NVIDIA's bindings ``nvidia-ml-py``: ``pip install nvidia-ml-py`` in vramcalc's environment, or
the ``nvml`` extra of a clone, ``pip install '.[nvml]'``) gives the card's name, total and
free memory in bytes, as ``nvidia-smi --query-gpu=name,memory.total,memory.free`` does. The card is
matched to a catalog entry by name (for the cuBLAS workspace size and the bandwidth figures) and its
**free** memory becomes the budget: what another process already holds is not available.

``local`` is device 0 in NVML's order (PCI bus order, which ``CUDA_VISIBLE_DEVICES`` does not
change); ``local:N`` is device N. The reader is :func:`read_nvml`; tests pass their own ``reader``.
pynvml is imported only when a local card is asked for, so it stays optional.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vramcalc.errors import LocalGPUError, UnknownGPUError
from vramcalc.hardware.catalog import GPU, Catalog, normalise
from vramcalc.units import MiB

LOCAL_NAME = re.compile(r"^\s*local(?::(\d{1,3}))?\s*$", re.IGNORECASE)
#: Words in NVML names that no catalog id carries ("NVIDIA GeForce RTX 4090" -> "rtx-4090").
BRAND_WORDS = {"nvidia", "geforce", "tesla", "quadro"}
#: The install that works for any installation of vramcalc (a clone, a wheel, pipx): NVIDIA's package.
INSTALL_HINT = "pip install nvidia-ml-py (NVIDIA's bindings, in the environment vramcalc runs in)"


@dataclass(frozen=True)
class NvmlReading:
    """What NVML reports for one device: its name and memory in bytes."""

    index: int
    name: str
    total_bytes: int
    free_bytes: int


def is_local(name: str) -> bool:
    """True for ``local`` and ``local:N``."""
    return LOCAL_NAME.match(name) is not None


def device_index(name: str) -> int:
    match = LOCAL_NAME.match(name)
    if match is None:
        raise UnknownGPUError(f"--gpu: {name!r} is not 'local' or 'local:N'")
    return int(match.group(1) or 0)


def read_nvml(index: int) -> NvmlReading:
    """Read device ``index`` through pynvml (name, total and free bytes); LocalGPUError when impossible."""
    try:
        import pynvml
    except ImportError:
        raise LocalGPUError(f"--gpu local needs NVML bindings: {INSTALL_HINT}") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise LocalGPUError(f"--gpu local: no NVIDIA driver or GPU found (NVML: {exc})") from None
    try:
        return _read_device(pynvml, index)
    except pynvml.NVMLError as exc:
        raise LocalGPUError(f"--gpu local: NVML could not read device {index} ({exc})") from None
    finally:
        pynvml.nvmlShutdown()


def _read_device(pynvml: Any, index: int) -> NvmlReading:
    count = pynvml.nvmlDeviceGetCount()
    if count == 0:
        raise LocalGPUError("--gpu local: NVML sees no GPU")
    if index >= count:
        raise LocalGPUError(f"--gpu local:{index}: NVML sees {count} GPU(s), numbered 0 to {count - 1}")
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    name = pynvml.nvmlDeviceGetName(handle)
    if isinstance(name, bytes):  # nvidia-ml-py before 11.515 returned bytes
        name = name.decode("utf-8", "replace")
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
    return NvmlReading(index=index, name=str(name), total_bytes=int(memory.total), free_bytes=int(memory.free))


def catalog_name(nvml_name: str) -> str:
    """The NVML name as a catalog lookup key: "NVIDIA A100-SXM4-80GB" -> "a100-sxm4-80gb"."""
    words = [w for w in re.split(r"[^a-z0-9]+", nvml_name.lower()) if w and w not in BRAND_WORDS]
    return "-".join(words)


def match_catalog(catalog: Catalog, reading: NvmlReading) -> GPU:
    """The catalog entry of an NVML device: by id or alias; a name several entries match (such as
    "NVIDIA H200": SXM and NVL) picks the one whose capacity is closest to NVML's total, first on ties."""
    key = catalog_name(reading.name)
    if not key:
        raise LocalGPUError(f"--gpu local: NVML reported an empty device name for device {reading.index}")
    exact = catalog.index.get(normalise(key))
    if exact is not None and normalise(key) not in catalog.families:  # an id or alias, not a short name
        return exact
    family = catalog.family(key) or ([exact] if exact is not None else [])
    if not family:
        raise LocalGPUError(
            f"--gpu local: {reading.name!r} is not in the catalog; name the closest card with --gpu NAME "
            "(see 'vramcalc gpus')"
        )
    return min(family, key=lambda gpu: abs(gpu.usable_bytes - reading.total_bytes))


def local_gpu(name: str, catalog: Catalog, reader: Callable[[int], NvmlReading] | None = None) -> GPU:
    """The installed card ``name`` (``local`` or ``local:N``) names, with its free memory as the budget."""
    reading = (reader or read_nvml)(device_index(name))
    if reading.free_bytes < 0 or reading.total_bytes <= 0 or reading.free_bytes > reading.total_bytes:
        raise LocalGPUError(
            f"--gpu local: NVML reported free {reading.free_bytes} of total {reading.total_bytes} bytes"
        )
    entry = match_catalog(catalog, reading)
    basis = (
        f"free now per NVML: {reading.free_bytes // MiB:,} of {reading.total_bytes // MiB:,} MiB "
        f"on device {reading.index} ({reading.name})"
    )
    return entry.model_copy(update={"free_bytes": reading.free_bytes, "free_reading": basis})
