"""What a model's files say about it: the tensors a checkpoint holds, read from the files' headers.

A checkpoint is a folder (or one file) of safetensors or GGUF weights, with the transformers
``config.json`` beside them where there is one. Only headers are read: a safetensors file's JSON
header, a GGUF file's metadata and tensor table. The bytes of the weights are the sum, over every
tensor, of its stored size (dtype x shape, or a GGUF type's blocks): exact for any architecture,
quantized or not, with tied weights counted once because they are stored once.

Pure data; readers live in :mod:`vramcalc.sources.safetensors_header`, :mod:`vramcalc.sources.gguf_header`,
:mod:`vramcalc.sources.local` and :mod:`vramcalc.sources.hub`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

#: Largest config.json, model_index.json, modules.json or shard index read, from disk or the Hub (a shard
#: index of a large model lists every tensor: a few hundred kB).
MAX_JSON_BYTES = 20_000_000
#: Weights files one checkpoint may have (the largest public models have a few hundred shards).
MAX_FILES = 10_000
#: The weights files of a transformers folder and a Diffusers component (their indexes add ``.index.json``).
TRANSFORMERS_WEIGHTS = ("model.safetensors", "diffusion_pytorch_model.safetensors")

#: How a checkpoint's weights are stored.
Format = Literal["safetensors", "gguf"]
#: Where a checkpoint was found: a path given, the local Hugging Face cache, the Hub over the network.
OriginKind = Literal["path", "cache", "hub"]


@dataclass(frozen=True)
class TensorInfo:
    """One stored tensor: its name, dtype (safetensors' ``BF16``, ``F8_E4M3``, ``I32``...; GGUF's ``Q4_K``,
    ``F16``...), shape and stored bytes."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int

    @property
    def elements(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count


@dataclass(frozen=True)
class TensorFile:
    """One weights file's header: its path in the checkpoint (``model-00001-of-00004.safetensors``,
    ``transformer/diffusion_pytorch_model.safetensors``), its tensors, the header's string metadata
    (safetensors' ``__metadata__``; GGUF's scalar keys) and the file's SHA-256 where it is known (the
    Hub's LFS object id, the blob's name in the cache)."""

    path: str
    tensors: tuple[TensorInfo, ...]
    metadata: dict[str, Any] = field(default_factory=dict)
    sha256: str | None = None

    @property
    def nbytes(self) -> int:
        return sum(tensor.nbytes for tensor in self.tensors)


@dataclass(frozen=True)
class Origin:
    """Where a checkpoint came from: ``kind``, a ``label`` for messages (a path, or ``org/name@rev``), the
    repository and the revision asked for and the commit it resolved to (Hub and cache only)."""

    kind: OriginKind
    label: str
    repo: str | None = None
    revision: str | None = None
    commit: str | None = None


@dataclass(frozen=True)
class Checkpoint:
    """A model's files, as read: its ``config.json`` (None when the checkpoint has none: a bare
    safetensors or GGUF file; a GGUF file's hyper-parameters are in its first file's metadata), the
    headers of its weights files, their format, and where it came from. ``pipeline`` is a Diffusers
    ``model_index.json`` (the components a pipeline loads) and ``configs`` the component folders'
    own ``config.json`` files, by folder."""

    origin: Origin
    format: Format
    files: tuple[TensorFile, ...]
    config: dict[str, Any] | None = None
    pipeline: dict[str, Any] | None = None
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def tensors(self) -> Iterable[TensorInfo]:
        for file in self.files:
            yield from file.tensors

    @property
    def weight_bytes(self) -> int:
        """The stored bytes of every tensor (headers and padding aside)."""
        return sum(file.nbytes for file in self.files)

    @property
    def elements(self) -> int:
        """Stored elements: the parameter count where nothing is packed (a packed int4 tensor holds 8
        weights per int32 element; see :func:`bytes_by_dtype`)."""
        return sum(tensor.elements for tensor in self.tensors())

    def bytes_by_dtype(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for tensor in self.tensors():
            found[tensor.dtype] = found.get(tensor.dtype, 0) + tensor.nbytes
        return found

    def bytes_by_component(self) -> dict[str, int]:
        """Stored bytes per component: a pipeline's folder (``transformer``, ``vae``, ``text_encoder``), else
        the first part of the tensor names where a model holds several towers (``vision_tower``,
        ``multi_modal_projector``, ``language_model``); one ``model`` entry otherwise."""
        found: dict[str, int] = {}
        for file in self.files:
            folder = file.path.rsplit("/", 1)[0] if "/" in file.path else ""
            for tensor in file.tensors:
                key = folder or component_of(tensor.name)
                found[key] = found.get(key, 0) + tensor.nbytes
        return found


#: Name prefixes of the towers of a multimodal checkpoint (transformers' names), as one component each.
TOWER_PREFIXES = (
    "vision_tower",
    "vision_model",
    "visual",
    "multi_modal_projector",
    "mm_projector",
    "audio_tower",
    "language_model",
    "text_model",
)


def component_of(name: str) -> str:
    """The tower a tensor belongs to (``model.vision_tower.blocks.0...`` -> ``vision_tower``), else ``model``."""
    parts = name.split(".")
    for part in parts[:3]:
        if part in TOWER_PREFIXES:
            return part
    return "model"
