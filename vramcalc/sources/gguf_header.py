"""A GGUF file's header, read in pure Python: its metadata and its tensor table, never the weights.

Layout of a GGUF file, versions 2 and 3 (little-endian), as llama.cpp writes and reads it
(ggml-org/llama.cpp: ``ggml/include/gguf.h``, ``ggml/src/gguf.cpp``; its Python package
``gguf-py/gguf/gguf_reader.py``)::

    magic     4 bytes, "GGUF"
    version   uint32 (1 is the retired layout with 32-bit counts; 2 and 3 share one layout, 3 adding
              big-endian files, which start with a byte-swapped version)
    tensors   uint64 count
    keys      uint64 count
    key/value pairs   key: string; value type: uint32; value (an array: item type uint32, count uint64, items)
    tensor infos      name: string; n_dims: uint32; dims: uint64 x n_dims (innermost first, "ne" order);
                      GGML type: uint32; offset into the data section: uint64
    padding to general.alignment (32 by default), then the tensor data: each tensor at its offset, in
    the order of the table, one after another, each padded to the alignment

A string is a uint64 byte count and that many UTF-8 bytes (no terminator). The bytes of a tensor are
its rows' blocks: a GGML type stores ``block_size`` weights in ``type_size`` bytes, so a tensor holds
``elements / block_size * type_size`` bytes, and its innermost dimension (a row) is a whole number of
blocks.

The reader is sequential: it takes ``read(n)``, the next ``n`` bytes of the file, so a local file and a
remote reader of byte ranges are read alike, and it asks for no byte past the tensor table. Every count
and length in the header is bounded before anything is allocated for it; whatever is wrong with a file
is one :class:`~vramcalc.errors.ModelSourceError` line with stage ``header``.
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from vramcalc.errors import ModelSourceError
from vramcalc.sources.checkpoint import TensorFile, TensorInfo
from vramcalc.units import quoted

#: The first four bytes of every GGUF file (GGUF_MAGIC, gguf-py/gguf/constants.py, ggml-org/llama.cpp).
GGUF_MAGIC = b"GGUF"
#: The versions read: 2 and 3 share one layout (version 1's counts and lengths were 32-bit).
GGUF_VERSIONS = (2, 3)
#: Where the tensors' data starts where general.alignment is absent (GGUF_DEFAULT_ALIGNMENT, constants.py).
GGUF_DEFAULT_ALIGNMENT = 32
_ALIGNMENT_KEY = "general.alignment"  # Keys.General.ALIGNMENT

#: The most header bytes read from one file. A large vocabulary's tokenizer (250,000 strings, their
#: scores and types, the merges) takes a few tens of MiB; the tensor table of the largest models a few MiB.
MAX_HEADER_BYTES = 256 * 2**20
#: Most tensors in one file (a model with its experts stored one tensor each holds some tens of thousands).
MAX_TENSORS = 2**18
#: Most key/value pairs (real files hold a few dozen).
MAX_KEYS = 2**16
#: Most items in one array value (a tokenizer's merges: some hundreds of thousands).
MAX_ARRAY_ITEMS = 2**24
#: Longest key or tensor name, in bytes (llama.cpp itself refuses tensor names of 64 bytes or more).
MAX_NAME_BYTES = 2**16
#: Longest string value, in bytes (a chat template is some kilobytes).
MAX_STRING_BYTES = 16 * 2**20
#: Most dimensions of one tensor (GGML_MAX_DIMS, ggml/include/ggml.h).
MAX_DIMS = 4
#: Most elements in one tensor: 2**48, far past any real tensor and within what ggml's int64 sizes hold.
MAX_ELEMENTS = 2**48
#: Numeric (and boolean) arrays up to this long are kept whole in the metadata: per-layer head counts,
#: feed-forward widths, sliding-window patterns. Longer arrays, and arrays of strings, are kept as their length.
MAX_KEPT_ARRAY_ITEMS = 1024
#: The most bytes asked of ``read`` ahead of what is needed, and only where the rest of the header is
#: known to hold at least that many: a tokenizer's 250,000 strings are then a few hundred reads, not 500,000.
READ_AHEAD = 2**20

#: A key/value pair takes at least this many bytes (key length, value type, a one-byte value) ...
_MIN_KEY_BYTES = 8 + 4 + 1
#: ... and a tensor info at least this many (name length, n_dims, type, offset).
_MIN_TENSOR_BYTES = 8 + 4 + 4 + 8

# GGUF value types (GGUFValueType, gguf-py/gguf/constants.py; enum gguf_type, ggml/include/gguf.h).
_STRING, _ARRAY = 8, 9
_U64 = struct.Struct("<Q")
#: Scalar value types: struct format (little-endian) and size in bytes.
_SCALARS: dict[int, tuple[str, int]] = {
    0: ("<B", 1),  # UINT8
    1: ("<b", 1),  # INT8
    2: ("<H", 2),  # UINT16
    3: ("<h", 2),  # INT16
    4: ("<I", 4),  # UINT32
    5: ("<i", 4),  # INT32
    6: ("<f", 4),  # FLOAT32
    7: ("<?", 1),  # BOOL (one byte)
    10: ("<Q", 8),  # UINT64
    11: ("<q", 8),  # INT64
    12: ("<d", 8),  # FLOAT64
}
_VALUE_TYPE_NAMES = {
    0: "UINT8", 1: "INT8", 2: "UINT16", 3: "INT16", 4: "UINT32", 5: "INT32", 6: "FLOAT32", 7: "BOOL",
    8: "STRING", 9: "ARRAY", 10: "UINT64", 11: "INT64", 12: "FLOAT64",
}  # fmt: skip

#: GGML tensor types by number: (name, weights per block, bytes per block). From GGMLQuantizationType and
#: GGML_QUANT_SIZES in gguf-py/gguf/constants.py (ggml-org/llama.cpp, gguf 0.19.0), which mirror enum
#: ggml_type in ggml/include/ggml.h and the block structs of ggml/src/ggml-common.h. The K-quants' and
#: i-quants' blocks hold QK_K = 256 weights. Numbers missing here were retired by ggml (4 and 5: Q4_2, Q4_3;
#: 31 to 33 and 36 to 38: the repacked Q4_0_4_4 ... IQ4_NL_8_8 layouts) or are newer than gguf 0.19.0
#: (llama.cpp's master has since added Q2_0 = 42); they are refused as unknown, as llama.cpp refuses them.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),  # f16 scale + 16 bytes of 4-bit weights
    3: ("Q4_1", 32, 20),  # f16 scale and min + 16 bytes
    6: ("Q5_0", 32, 22),  # f16 scale + 4 bytes of high bits + 16 bytes
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),  # f16 scale + 32 int8
    9: ("Q8_1", 32, 40),  # f32 scale and sum + 32 int8
    10: ("Q2_K", 256, 84),  # 2 + 2 + 256/16 + 256/4
    11: ("Q3_K", 256, 110),  # 2 + 256/4 + 256/8 + 12
    12: ("Q4_K", 256, 144),  # 2 + 2 + 256/2 + 12
    13: ("Q5_K", 256, 176),  # 2 + 2 + 256/2 + 256/8 + 12
    14: ("Q6_K", 256, 210),  # 2 + 256/2 + 256/4 + 256/16
    15: ("Q8_K", 256, 292),  # 4 + 256 + 256/8
    16: ("IQ2_XXS", 256, 66),  # 2 + 256/4
    17: ("IQ2_XS", 256, 74),  # 2 + 256/4 + 256/32
    18: ("IQ3_XXS", 256, 98),  # 2 + 256/4 + 256/8
    19: ("IQ1_S", 256, 50),  # 2 + 256/8 + 256/16
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),  # 2 + 256/4 + 256/8 + 256/32 + 4
    22: ("IQ2_S", 256, 82),  # 2 + 256/4 + 256/16
    23: ("IQ4_XS", 256, 136),  # 2 + 2 + 256/2 + 256/64
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),  # 256/8 + 256/16 + 256/32
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),  # 2 + 4 * 13
    35: ("TQ2_0", 256, 66),  # 2 + 64
    39: ("MXFP4", 32, 17),  # one E8M0 scale + 16 bytes
    40: ("NVFP4", 64, 36),  # 4 + 32
    41: ("Q1_0", 128, 18),  # 2 + 16
}

#: Where the transformers-like config takes each hyper-parameter from (llama.cpp's key names: Keys.LLM and
#: Keys.Attention in gguf-py/gguf/constants.py). ``{arch}`` is general.architecture.
_CONFIG_KEYS: tuple[tuple[str, str], ...] = (
    ("num_hidden_layers", "{arch}.block_count"),
    ("hidden_size", "{arch}.embedding_length"),
    ("num_attention_heads", "{arch}.attention.head_count"),
    ("num_key_value_heads", "{arch}.attention.head_count_kv"),
    ("head_dim", "{arch}.attention.key_length"),
    ("max_position_embeddings", "{arch}.context_length"),
    ("intermediate_size", "{arch}.feed_forward_length"),
    ("sliding_window", "{arch}.attention.sliding_window"),
    ("num_experts", "{arch}.expert_count"),
    ("num_experts_per_tok", "{arch}.expert_used_count"),
)
_TOKENS_KEY = "tokenizer.ggml.tokens"  # Keys.Tokenizer.LIST
_VOCAB_SIZE_KEY = "{arch}.vocab_size"  # Keys.LLM.VOCAB_SIZE


class _Truncated(ModelSourceError):
    """The file ended before its header did."""


class _Header:
    """The header as it is read: ``read`` behind a small buffer, the bytes taken so far, and the errors."""

    def __init__(self, read: Callable[[int], bytes], where: str) -> None:
        self._read = read
        self.where = where
        self._buffer = b""
        self._position = 0  # in the buffer
        self.taken = 0  # header bytes consumed
        self.fetched = 0  # bytes asked of ``read`` and returned

    def fail(self, what: str) -> ModelSourceError:
        return ModelSourceError(f"{self.where}: {what}", stage="header")

    def _fetch(self, count: int, what: str) -> bytes:
        data = self._read(count)
        if not isinstance(data, bytes | bytearray | memoryview):
            raise self.fail(f"reading {what}: the reader returned {type(data).__name__}, not bytes")
        if len(data) > count:
            raise self.fail(f"reading {what}: the reader returned {len(data):,} bytes for {count:,} asked")
        self.fetched += len(data)
        return bytes(data)

    def room(self, count: int, what: str) -> None:
        if count > MAX_HEADER_BYTES - self.taken:
            bound = (
                f"{MAX_HEADER_BYTES // 2**20} MiB" if MAX_HEADER_BYTES % 2**20 == 0 else f"{MAX_HEADER_BYTES:,} bytes"
            )
            raise self.fail(f"{what} would take the GGUF header past {bound} (at byte {self.taken:,})")

    def take(self, count: int, what: str, ahead: int = 0) -> bytes:
        """The next ``count`` bytes. ``ahead``: header bytes known to follow them, which may be fetched now."""
        self.room(count, what)
        available = len(self._buffer) - self._position
        if available < count:
            missing = count - available
            extra = max(0, min(ahead, READ_AHEAD, MAX_HEADER_BYTES - self.taken - count))
            self._buffer = self._buffer[self._position :] + self._fetch(missing + extra, what)
            self._position = 0
            if len(self._buffer) < count:
                message = f"{self.where}: the file ends inside its GGUF header (at byte {self.taken:,}, reading {what})"
                raise _Truncated(message, stage="header")
        data = self._buffer[self._position : self._position + count]
        self._position += count
        self.taken += count
        return data

    def skip(self, count: int, what: str, ahead: int = 0) -> None:
        """Pass over ``count`` bytes without keeping them (read in pieces of at most READ_AHEAD)."""
        self.room(count, what)
        if count <= len(self._buffer) - self._position:  # already fetched
            self._position += count
            self.taken += count
            return
        while count > 0:
            piece = min(count, READ_AHEAD)
            count -= piece
            self.take(piece, what, ahead + count)

    def unpack(self, form: str, size: int, what: str, ahead: int = 0) -> Any:
        return struct.unpack(form, self.take(size, what, ahead))[0]

    def u32(self, what: str, ahead: int = 0) -> int:
        value: int = self.unpack("<I", 4, what, ahead)
        return value

    def u64(self, what: str, ahead: int = 0) -> int:
        value: int = self.unpack("<Q", 8, what, ahead)
        return value

    def length(self, limit: int, what: str, ahead: int = 0) -> int:
        """A string's byte count, refused past ``limit`` before anything is read for it."""
        if len(self._buffer) - self._position >= 8 and self.taken + 8 <= MAX_HEADER_BYTES:  # already fetched
            count: int = _U64.unpack_from(self._buffer, self._position)[0]
            self._position += 8
            self.taken += 8
        else:
            count = self.unpack("<Q", 8, what, ahead)
        if count > limit:
            raise self.fail(f"{what} is {count:,} bytes long, more than the {limit:,} allowed")
        return count

    def name(self, what: str, ahead: int = 0) -> str:
        """A key or tensor name: UTF-8, at most MAX_NAME_BYTES."""
        raw = self.take(self.length(MAX_NAME_BYTES, what, ahead), what, ahead)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8: {quoted(raw)}") from None


def parse_gguf_header(read: Callable[[int], bytes], path: str, where: str, file_size: int | None = None) -> TensorFile:
    """The tensors and metadata of a GGUF file, read from its header.

    ``read(n)`` returns the next ``n`` bytes of the file (fewer only at its end); it is called in order
    and never for a byte past the tensor table. ``path`` is the file's path in the checkpoint (the
    TensorFile's ``path``); ``where`` names the file in error messages. The tensors' ``dtype`` is the
    GGML type's name (``Q4_K``, ``F16``, ``BF16``...), their ``shape`` the dimensions as stored
    (innermost first) and their ``nbytes`` the bytes of their blocks. ``metadata`` holds every scalar
    value (strings, integers, floats, booleans); an array is its length, but for numeric and boolean
    arrays of at most MAX_KEPT_ARRAY_ITEMS items, kept as lists.

    The tensors' data must lie where llama.cpp looks for it (ggml/src/gguf.cpp checks the same): one
    after another in the order of the table, each starting at a multiple of ``general.alignment`` (a
    power of two, 32 where the key is absent), so the bytes each tensor's type and shape give are the
    bytes it occupies. Where
    ``file_size`` is given, the data must also end within the file. Raises ModelSourceError (stage
    ``header``) for anything that is not a well-formed, bounded GGUF v2 or v3 header.
    """
    header = _Header(read, where)
    _read_preamble(header)
    tensor_count = header.u64("the tensor count")
    key_count = header.u64("the key count")
    if tensor_count > MAX_TENSORS:
        raise header.fail(f"the GGUF header declares {tensor_count:,} tensors, more than the {MAX_TENSORS:,} allowed")
    if key_count > MAX_KEYS:
        raise header.fail(f"the GGUF header declares {key_count:,} keys, more than the {MAX_KEYS:,} allowed")
    header.room(key_count * _MIN_KEY_BYTES + tensor_count * _MIN_TENSOR_BYTES, "the declared keys and tensors")
    tensor_floor = tensor_count * _MIN_TENSOR_BYTES  # header bytes known to follow the key/value pairs
    metadata: dict[str, Any] = {}
    for index in range(key_count):
        ahead = (key_count - index - 1) * _MIN_KEY_BYTES + tensor_floor
        key = header.name(f"key {index}", ahead + 5)
        if not key:
            raise header.fail(f"key {index:,} is empty")  # llama.cpp refuses it too
        if key in metadata:
            raise header.fail(f"key {quoted(key)} appears twice")
        value_type = header.u32(f"the value type of key {quoted(key)}", ahead + 1)
        metadata[key] = _read_value(header, value_type, key, ahead)
    alignment = _alignment(header, metadata)
    tensors: list[TensorInfo] = []
    seen: set[str] = set()
    data_bytes = data_end = 0  # where the next tensor's data starts, and the last one's ends (in the data section)
    for index in range(tensor_count):
        ahead = (tensor_count - index - 1) * _MIN_TENSOR_BYTES
        tensor, offset = _read_tensor_info(header, index, ahead)
        if tensor.name in seen:
            raise header.fail(f"tensor {quoted(tensor.name)} appears twice")
        if offset != data_bytes:
            raise header.fail(
                f"tensor {quoted(tensor.name)} starts at data offset {offset:,}, not at {data_bytes:,} where "
                "the tensors before it end (llama.cpp refuses such a file too)"
            )
        seen.add(tensor.name)
        tensors.append(tensor)
        data_end = offset + tensor.nbytes  # the last tensor's padding need not be in the file
        data_bytes = _padded(data_end, alignment)
    data_start = _padded(header.taken, alignment)
    if file_size is not None and tensors and data_start + data_end > file_size:
        raise header.fail(
            f"its tensors end at byte {data_start + data_end:,}, past the end of the file ({file_size:,} bytes)"
        )
    return TensorFile(path=path, tensors=tuple(tensors), metadata=metadata)


def _alignment(header: _Header, metadata: dict[str, Any]) -> int:
    """general.alignment: the tensors' data starts at multiples of it (GGUF_DEFAULT_ALIGNMENT where absent)."""
    alignment = metadata.get(_ALIGNMENT_KEY, GGUF_DEFAULT_ALIGNMENT)
    if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise header.fail(f"{_ALIGNMENT_KEY} is {quoted(alignment)}, not a power of two")
    return alignment


def _padded(count: int, alignment: int) -> int:
    return -(-count // alignment) * alignment


def read_gguf_file(path: Path, where: str) -> TensorFile:
    """The header of the GGUF file at ``path`` (opened buffered; its tensor data is never read)."""
    try:
        with open(path, "rb", opener=_open_nonblocking) as file:
            info = os.fstat(file.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise ModelSourceError(f"{where}: not a regular file", stage="header")
            return parse_gguf_header(file.read, path.name, where, file_size=info.st_size)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        problem = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not a readable file"
        raise ModelSourceError(f"{where}: cannot read the file ({problem})", stage="header") from None


def _open_nonblocking(file: str, flags: int) -> int:
    """Opens without blocking on a FIFO (which the regular-file check then refuses)."""
    return os.open(file, flags | getattr(os, "O_NONBLOCK", 0))


def _read_preamble(header: _Header) -> None:
    try:
        magic = header.take(4, "the magic bytes")
    except _Truncated:
        raise header.fail("not a GGUF file (shorter than its 4 magic bytes)") from None
    if magic != GGUF_MAGIC:
        raise header.fail(f"not a GGUF file (it starts with {quoted(magic)}, not b'GGUF')")
    version = header.u32("the version")
    if version not in GGUF_VERSIONS:
        if version & 0xFFFF == 0 and struct.unpack(">I", struct.pack("<I", version))[0] in GGUF_VERSIONS:
            raise header.fail("a big-endian GGUF file; only little-endian GGUF files are read")
        raise header.fail(f"GGUF version {version:,} is not read (versions 2 and 3 are)")


def _read_value(header: _Header, value_type: int, key: str, ahead: int) -> Any:
    """One value: a scalar as itself, an array as its length or (short and numeric) its items."""
    if value_type in _SCALARS:
        form, size = _SCALARS[value_type]
        return header.unpack(form, size, f"the value of key {quoted(key)}", ahead)
    if value_type == _STRING:
        what = f"the value of key {quoted(key)}"
        raw = header.take(header.length(MAX_STRING_BYTES, what, ahead), what, ahead)
        return raw.decode("utf-8", errors="replace")
    if value_type != _ARRAY:
        raise header.fail(f"key {quoted(key)} has an unknown value type {value_type:,}")
    item_type = header.u32(f"the item type of key {quoted(key)}", ahead + 8)
    count = header.u64(f"the item count of key {quoted(key)}", ahead)
    if item_type == _ARRAY:
        raise header.fail(f"key {quoted(key)} is an array of arrays, which GGUF readers do not take")
    if item_type != _STRING and item_type not in _SCALARS:
        raise header.fail(f"key {quoted(key)} is an array of an unknown value type {item_type:,}")
    if count > MAX_ARRAY_ITEMS:
        raise header.fail(f"key {quoted(key)} declares {count:,} items, more than the {MAX_ARRAY_ITEMS:,} allowed")
    what = f"the items of key {quoted(key)}"
    if item_type == _STRING:
        header.room(count * 8, what)
        item = f"an item of key {quoted(key)}"
        for left in range(count - 1, -1, -1):  # items left after this one, each at least its 8-byte length
            header.skip(header.length(MAX_STRING_BYTES, item, ahead + left * 8), item, ahead + left * 8)
        return count
    form, size = _SCALARS[item_type]
    if count <= MAX_KEPT_ARRAY_ITEMS:
        return list(struct.unpack(f"<{count}{form[1]}", header.take(count * size, what, ahead)))
    header.skip(count * size, what, ahead)
    return count


def _read_tensor_info(header: _Header, index: int, ahead: int) -> tuple[TensorInfo, int]:
    """One entry of the tensor table, and the offset of its data in the data section."""
    name = header.name(f"the name of tensor {index:,}", ahead + 16)
    label = f"tensor {quoted(name)}"
    n_dims = header.u32(f"the dimension count of {label}", ahead + 12)
    if n_dims > MAX_DIMS:
        raise header.fail(f"{label} has {n_dims:,} dimensions, more than GGML's {MAX_DIMS}")
    shape = tuple(header.u64(f"the dimensions of {label}", ahead + 12) for _ in range(n_dims))
    elements = 1
    for dim in shape:
        if dim == 0:
            raise header.fail(f"{label} has a dimension of 0 in shape {list(shape)}")
        elements *= dim
    if elements > MAX_ELEMENTS:
        raise header.fail(f"{label} has {elements:,} elements (shape {list(shape)}), more than 2**48")
    type_number = header.u32(f"the type of {label}", ahead + 8)
    offset = header.u64(f"the data offset of {label}", ahead)
    if type_number not in GGML_TYPES:
        raise header.fail(f"{label} has an unknown GGML type {type_number:,} (retired, or newer than this vramcalc)")
    type_name, block_size, type_size = GGML_TYPES[type_number]
    row = shape[0] if shape else 1
    if row % block_size:
        raise header.fail(
            f"{label} is {type_name}, whose blocks hold {block_size} weights, but its rows hold {row:,} "
            f"(shape {list(shape)})"
        )
    return TensorInfo(name=name, dtype=type_name, shape=shape, nbytes=elements // block_size * type_size), offset


def gguf_config(metadata: Mapping[str, Any], where: str = "the GGUF metadata") -> dict[str, Any]:
    """A transformers-like config from a GGUF file's metadata (:func:`parse_gguf_header`'s), as far as
    the file gives one: ``model_type`` (general.architecture), ``num_hidden_layers``, ``hidden_size``,
    ``num_attention_heads``, ``num_key_value_heads``, ``head_dim``, ``max_position_embeddings``,
    ``intermediate_size``, ``sliding_window``, ``num_experts``, ``num_experts_per_tok``, ``vocab_size``
    (the tokenizer's token count, else ``{arch}.vocab_size``) and ``gguf_file_type`` (general.file_type,
    llama.cpp's llama_ftype). Keys the file lacks are left out. Where a file gives a value per layer
    (an array), the config holds the largest and the array as ``<name>_per_layer``. An empty dict where
    the file names no architecture; ModelSourceError (stage ``config``) where a value is not a count.
    """
    arch = metadata.get("general.architecture")
    if arch is None:
        return {}
    if not isinstance(arch, str) or not arch:
        raise ModelSourceError(f"{where}: general.architecture is {quoted(arch)}, not a name", stage="config")
    config: dict[str, Any] = {"model_type": arch}
    for name, pattern in _CONFIG_KEYS:
        key = pattern.format(arch=arch)
        if key not in metadata:
            continue
        value = metadata[key]
        if isinstance(value, list):  # one value per layer (llama.cpp's deci and openelm files, among others)
            counts = [_count(item, key, where) for item in value]
            if counts:
                config[name] = max(counts)
                config[f"{name}_per_layer"] = counts
        else:
            config[name] = _count(value, key, where)
    for key in (_TOKENS_KEY, _VOCAB_SIZE_KEY.format(arch=arch)):
        if key in metadata:
            tokens = metadata[key]
            config["vocab_size"] = len(tokens) if key == _TOKENS_KEY and isinstance(tokens, list) else tokens
            config["vocab_size"] = _count(config["vocab_size"], key, where)
            break
    if "general.file_type" in metadata:
        config["gguf_file_type"] = _count(metadata["general.file_type"], "general.file_type", where)
    return config


def _count(value: Any, key: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ModelSourceError(f"{where}: {key} is {quoted(value)}, not a count", stage="config")
    return value
