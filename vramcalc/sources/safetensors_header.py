"""A safetensors file's header: the name, dtype, shape and byte range of every tensor it holds.

The format (huggingface/safetensors, ``safetensors/src/tensor.rs`` and its README): 8 bytes, the
header's length N as a little-endian unsigned 64-bit integer; N bytes of UTF-8 JSON mapping each
tensor's name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets into the data that
follows the header), plus an optional ``__metadata__`` mapping of strings to strings; then the data.
The library refuses a header over 100,000,000 bytes, and data whose tensors do not tile the buffer
from 0 without gaps or overlaps; so does this reader, and it checks that each byte range is exactly
the tensor's dtype x shape. It reads headers of up to 16 MiB (:data:`MAX_READ_BYTES`). Nothing past
the header is read.
"""

from __future__ import annotations

import struct
import threading
from typing import Any

from vramcalc.errors import ModelSourceError, SpecError
from vramcalc.files import parse_json
from vramcalc.sources.checkpoint import TensorFile, TensorInfo
from vramcalc.units import quoted

#: The largest header the safetensors library reads (``MAX_HEADER_SIZE`` in its tensor.rs).
MAX_HEADER_BYTES = 100_000_000
#: The largest header vramcalc reads: about 170,000 tensors in one file, where the largest checkpoints
#: hold a few thousand a file (a few hundred kB of header). Parsing a header costs about 15 times its
#: size in memory: a 100 MB one, as the format allows, would take over 1.5 GB and many seconds.
MAX_READ_BYTES = 16 * 2**20
#: The most header bytes one checkpoint's files hold together. Parsing costs about 10 us of CPU a tensor
#: (a 16 MiB header of 165,000 one-element tensors parsed in 1.6 s on the 2-core development machine), so
#: 32 MiB, about 330,000 tensors, is about 3 s: over its many shards a checkpoint could otherwise ask for
#: MAX_FILES x MAX_READ_BYTES.
MAX_TOTAL_HEADER_BYTES = 32 * 2**20
#: Bits per element of each dtype the format defines (safetensors' ``Dtype::bitsize``). Sub-byte types
#: (F4, F6) are packed: a tensor's bytes are its elements x bits / 8, a whole number.
DTYPE_BITS = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}
#: Dimensions of one tensor, and elements of one dimension: far past any real checkpoint, small enough
#: that arithmetic on them stays cheap.
MAX_DIMS = 16
MAX_ELEMENTS = 2**48


class HeaderAllowance:
    """The header bytes one checkpoint's files may still hold (:data:`MAX_TOTAL_HEADER_BYTES`), taken as
    each file's length is read, before its header is; shared by the threads that read a Hub checkpoint's
    shards."""

    def __init__(self) -> None:
        self.left = MAX_TOTAL_HEADER_BYTES
        self._lock = threading.Lock()

    def take(self, length: int, where: str) -> None:
        with self._lock:
            if length > self.left:
                most = MAX_TOTAL_HEADER_BYTES
                shown = f"{most // 2**20} MiB" if most % 2**20 == 0 else f"{most:,} bytes"
                raise ModelSourceError(
                    f"{where}: the checkpoint's safetensors headers hold more than {shown} together (about "
                    "330,000 tensors); vramcalc reads at most that",
                    "header",
                )
            self.left -= length


def header_length(prefix: bytes, where: str) -> int:
    """The header's length from a file's first 8 bytes, refused past :data:`MAX_HEADER_BYTES` (the format's
    bound) or :data:`MAX_READ_BYTES` (vramcalc's)."""
    if len(prefix) < 8:
        raise ModelSourceError(f"{where}: not a safetensors file (shorter than its 8-byte header length)", "header")
    (length,) = struct.unpack("<Q", prefix[:8])
    if length < 2 or length > MAX_HEADER_BYTES:
        raise ModelSourceError(
            f"{where}: not a safetensors file (header length {length:,} bytes; the format allows "
            f"2 to {MAX_HEADER_BYTES:,})",
            "header",
        )
    if length > MAX_READ_BYTES:
        raise ModelSourceError(
            f"{where}: a safetensors header of {length:,} bytes; vramcalc reads headers of up to "
            f"{MAX_READ_BYTES // 2**20} MiB (about 170,000 tensors)",
            "header",
        )
    return int(length)


def _fail(where: str, what: str) -> ModelSourceError:
    return ModelSourceError(f"{where}: {what}", "header")


def _shape(value: Any, where: str, name: str) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) > MAX_DIMS:
        raise _fail(where, f"tensor {quoted(name)}: shape must be a list of at most {MAX_DIMS} sizes")
    shape = []
    for dim in value:
        if type(dim) is not int or not 0 <= dim <= MAX_ELEMENTS:
            raise _fail(where, f"tensor {quoted(name)}: shape {quoted(value)} is not a list of sizes")
        shape.append(dim)
    return tuple(shape)


def _tensor(name: str, entry: Any, where: str) -> tuple[TensorInfo, int, int]:
    """One tensor of the header and its byte range."""
    if not isinstance(entry, dict):
        raise _fail(where, f"tensor {quoted(name)}: expected a mapping with dtype, shape and data_offsets")
    dtype = entry.get("dtype")
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise _fail(where, f"tensor {quoted(name)}: unknown dtype {quoted(dtype)}")
    shape = _shape(entry.get("shape"), where, name)
    offsets = entry.get("data_offsets")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or any(type(offset) is not int or offset < 0 for offset in offsets)
    ):
        raise _fail(where, f"tensor {quoted(name)}: data_offsets must be two byte offsets")
    begin, end = offsets
    elements = 1
    for dim in shape:
        elements *= dim
        if elements > MAX_ELEMENTS:
            raise _fail(where, f"tensor {quoted(name)}: {quoted(list(shape))} holds more elements than any file")
    bits = elements * DTYPE_BITS[dtype]
    if bits % 8 or end - begin != bits // 8:
        raise _fail(
            where,
            f"tensor {quoted(name)}: data_offsets span {end - begin:,} bytes where {dtype} x {list(shape)} "
            f"takes {bits / 8:,g}",
        )
    return TensorInfo(name, dtype, shape, bits // 8), begin, end


def parse_safetensors_header(raw: bytes, path: str, where: str, sha256: str | None = None) -> TensorFile:
    """The tensors of a safetensors header (``raw``: the JSON after the 8-byte length) of the file at
    ``path`` in its checkpoint; errors name ``where``."""
    try:
        document = parse_json(raw.decode("utf-8"), f"{where}: safetensors header")
    except UnicodeDecodeError:
        raise _fail(where, "the safetensors header is not UTF-8") from None
    except SpecError as exc:  # invalid JSON, a duplicate tensor name, nesting or numbers out of bounds
        raise ModelSourceError(str(exc), "header") from None
    if not isinstance(document, dict):
        raise _fail(where, "the safetensors header is not a mapping of tensors")
    metadata = document.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(value, str) for value in metadata.values()):
        raise _fail(where, "__metadata__ must map names to strings")
    spans = []
    for name, entry in document.items():
        spans.append(_tensor(name, entry, where))
    spans.sort(key=lambda span: (span[1], span[2]))
    position = 0
    for tensor, begin, end in spans:
        if begin != position:
            what = "overlaps the tensor before it" if begin < position else "leaves a gap before it"
            raise _fail(where, f"tensor {quoted(tensor.name)}: data_offsets [{begin}, {end}] {what}")
        position = end
    tensors = tuple(span[0] for span in sorted(spans, key=lambda span: span[0].name))
    return TensorFile(path=path, tensors=tensors, metadata=dict(metadata), sha256=sha256)
