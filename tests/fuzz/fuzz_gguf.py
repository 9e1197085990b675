"""Fuzz target ``gguf-header``: real GGUF files, written by llama.cpp's gguf-py, then mutated.

Each input starts from one of a few real files (a llama-style file with a tokenizer, per-layer arrays and
tensors of several GGML types; a one-tensor file) and is mutated: bytes changed, the counts, lengths,
value types, dimensions and GGML types of the header (their offsets found by gguf-py's GGUFReader) set
to extremes (0, 2**31, 2**32 - 1, 2**63, 2**64 - 1...), the file cut, bytes inserted or deleted, a
stretch of the header repeated. It is read from memory through ``read(n)`` or from a file.

Rules: the reader returns a TensorFile or raises ModelSourceError with stage ``header``, in one line of
bounded length naming the file; a header it accepts was read without asking for a byte past the file;
no call of ``read`` asks for more than MAX_READ bytes; it stays within the time limit. An accepted
header's tensors are consistent (up to 4 positive dimensions, a known GGML type, bytes = elements /
block size x type size), and where gguf-py's GGUFReader also reads the file it finds the same tensors.
``gguf_config`` of the metadata returns a config or raises ModelSourceError with stage ``config``.
"""

from __future__ import annotations

import functools
import io
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuzz_support import FuzzFailure, Hang, time_limit, workspace
from hypothesis import strategies as st

#: Values a mutated integer field takes (each cut to the field's width).
EXTREMES = [0, 1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 31, 32, 41, 64, 255, 256, 2**16, 2**24, 2**31, 2**32 - 1, 2**32,
            2**48, 2**62, 2**63, 2**64 - 1]  # fmt: skip
#: Longest error line accepted.
MAX_MESSAGE = 400
#: The most one call of ``read`` may ask for: the longest string value and a read-ahead.
MAX_READ = 16 * 2**20 + 2**20


@dataclass(frozen=True)
class Seed:
    data: bytes  # the whole file
    header_end: int  # where the tensor data starts (after the alignment padding)
    fields: tuple[tuple[int, int], ...]  # (offset, width) of every integer field of the header


@dataclass(frozen=True)
class GGUFCase:
    seed: int
    data: bytes
    via_file: bool

    def __repr__(self) -> str:
        return f"GGUFCase(seed={self.seed}, via_file={self.via_file}, data={self.data[:600]!r}, len={len(self.data)})"


def _write(path: Path, full: bool) -> Path:
    import gguf
    import numpy as np
    from gguf import GGMLQuantizationType as Q

    writer = gguf.GGUFWriter(path, "llama")
    if full:
        writer.add_block_count(2)
        writer.add_context_length(2048)
        writer.add_embedding_length(64)
        writer.add_feed_forward_length([128, 256])
        writer.add_head_count(4)
        writer.add_head_count_kv([1, 2])
        writer.add_sliding_window(512)
        writer.add_layer_norm_rms_eps(1e-6)
        writer.add_bool("llama.use_parallel_residual", False)
        writer.add_file_type(7)
        writer.add_name("fuzz seed")
        writer.add_token_list([f"t{i}" for i in range(12)])
        writer.add_token_scores([0.0] * 12)
        writer.add_array("tokenizer.ggml.merges", ["t a", "t b"])
    tensors = [("w.f32", Q.F32, 1, 32), ("w.f16", Q.F16, 2, 32), ("w.q8_0", Q.Q8_0, 2, 64),
               ("w.q4_k", Q.Q4_K, 2, 256), ("w.bf16", Q.BF16, 1, 32)]  # fmt: skip
    for name, qtype, rows, row in tensors if full else tensors[:1]:
        block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
        writer.add_tensor(name, np.zeros((rows, row // block_size * type_size), dtype=np.uint8), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _integer_fields(path: Path) -> tuple[int, tuple[tuple[int, int], ...]]:
    """The data offset, and (offset, width) of every integer part of the header (counts, lengths, types,
    dimensions, scalar values) as gguf-py's GGUFReader finds them."""
    import gguf

    reader = gguf.GGUFReader(path)
    found = []
    for field in [*reader.fields.values(), *(t.field for t in reader.tensors)]:
        offset = field.offset
        for part in field.parts:
            if part.dtype.kind in "iu" and part.itemsize in (4, 8):  # one count, or a tensor's dimensions
                found.extend((offset + item * part.itemsize, part.itemsize) for item in range(part.size))
            offset += part.nbytes
    return int(reader.data_offset), tuple(found)


@functools.cache
def seeds() -> tuple[Seed, ...]:
    made = []
    with tempfile.TemporaryDirectory() as folder:
        for index, full in enumerate((True, False)):
            path = _write(Path(folder) / f"seed{index}.gguf", full)
            header_end, fields = _integer_fields(path)
            made.append(Seed(path.read_bytes(), header_end, fields))
    return tuple(made)


@st.composite
def gguf_headers(draw: st.DrawFn) -> GGUFCase:
    index = draw(st.integers(0, len(seeds()) - 1))
    seed = seeds()[index]
    data = bytearray(seed.data)
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 2, 3, 5]))):
        if not data:
            break
        kind = draw(st.sampled_from(["field", "field", "field", "byte", "cut", "insert", "delete", "repeat"]))
        header_end = min(seed.header_end, len(data))
        # Mostly past the magic and version, whose every mutation is refused at once.
        start = 0 if draw(st.integers(0, 9)) == 0 or header_end <= 8 else 8
        at = draw(st.integers(start, max(start, header_end - 1)))
        if kind == "field":
            at, width = draw(st.sampled_from(seed.fields[1:] if start else seed.fields))  # [0]: the version
            value = draw(st.sampled_from(EXTREMES) | st.integers(0, 2**64 - 1)) % 2 ** (8 * width)
            data[at : at + width] = value.to_bytes(width, "little")
        elif kind == "byte":
            data[at] = draw(st.integers(0, 255))
        elif kind == "cut":
            del data[at:]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=24))
        elif kind == "delete":
            del data[at : at + draw(st.integers(1, 24))]
        else:
            data[at:at] = data[at : at + draw(st.integers(1, 64))]
    return GGUFCase(index, bytes(data), draw(st.booleans()))


class _Reader:
    """Reads from memory, counting what it is asked for."""

    def __init__(self, data: bytes) -> None:
        self._file = io.BytesIO(data)
        self.asked = 0

    def read(self, count: int) -> bytes:
        if not 0 < count <= MAX_READ:
            raise FuzzFailure(f"read({count:,}): no call asks for nothing, a negative count, or past {MAX_READ:,}")
        self.asked += count
        return self._file.read(count)


def check_gguf_header(case: GGUFCase) -> None:
    from vramcalc.errors import ModelSourceError
    from vramcalc.sources.gguf_header import gguf_config, parse_gguf_header, read_gguf_file

    where = "fuzz/model.gguf"
    reader = _Reader(case.data)
    try:
        with time_limit():
            try:
                if case.via_file:
                    path = workspace().inputs / "model.gguf"
                    path.write_bytes(case.data)
                    parsed = read_gguf_file(path, where)
                else:
                    parsed = parse_gguf_header(reader.read, "model.gguf", where)
            except ModelSourceError as exc:
                _check_message(exc, where, "header", case)
                return
            try:
                gguf_config(parsed.metadata, where)
            except ModelSourceError as exc:
                _check_message(exc, where, "config", case)
    except (FuzzFailure, Hang):
        raise
    except Exception as exc:
        raise FuzzFailure(f"uncaught {type(exc).__name__}: {str(exc)[:300]}\ninput: {case!r}") from exc
    if not case.via_file and reader.asked > len(case.data):
        raise FuzzFailure(f"asked for {reader.asked:,} bytes of a {len(case.data):,}-byte file\ninput: {case!r}")
    _check_tensors(parsed.tensors, case)


def _check_message(exc: Any, where: str, stage: str, case: GGUFCase) -> None:
    message = str(exc)
    if exc.stage != stage or not message.startswith(f"{where}: ") or "\n" in message or len(message) > MAX_MESSAGE:
        raise FuzzFailure(f"a bad error line (stage {exc.stage!r}): {message[:600]!r}\ninput: {case!r}")


def _check_tensors(tensors: Any, case: GGUFCase) -> None:
    from vramcalc.sources.gguf_header import GGML_TYPES

    sizes = {name: (block_size, type_size) for name, block_size, type_size in GGML_TYPES.values()}
    for tensor in tensors:
        block_size, type_size = sizes.get(tensor.dtype, (0, 0))
        if (
            not block_size
            or len(tensor.shape) > 4
            or any(not isinstance(dim, int) or dim <= 0 for dim in tensor.shape)
            or tensor.elements % block_size
            or tensor.nbytes != tensor.elements // block_size * type_size
        ):
            raise FuzzFailure(f"an inconsistent tensor {tensor!r}\ninput: {case!r}")
    if tensors and len(case.data) < 1_000_000:
        _check_against_gguf_reader(tensors, case)


def _check_against_gguf_reader(tensors: Any, case: GGUFCase) -> None:
    """Where gguf-py's own reader also reads the file, it finds the same tensors."""
    import warnings

    import gguf

    path = workspace().inputs / "reference.gguf"
    path.write_bytes(case.data)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reference = gguf.GGUFReader(path)
            theirs = [(t.name, t.tensor_type.name, tuple(int(d) for d in t.shape), int(t.n_bytes))
                      for t in reference.tensors]  # fmt: skip
    except (Hang, FuzzFailure):
        raise
    except Exception:  # noqa: BLE001 - gguf-py refuses (or breaks on) what it cannot read; only agreement counts
        return
    ours = [(t.name, t.dtype, t.shape, t.nbytes) for t in tensors]
    if ours != theirs:
        raise FuzzFailure(f"gguf-py reads other tensors: ours {ours[:4]!r}, gguf-py's {theirs[:4]!r}\ninput: {case!r}")
