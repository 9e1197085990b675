"""The GGUF header reader against real files written by llama.cpp's own Python package (gguf-py's
GGUFWriter), its own reader (GGUFReader) as the reference, a hand calculation, and hostile headers."""

from __future__ import annotations

import io
import itertools
import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vramcalc.errors import ModelSourceError
from vramcalc.sources import gguf_header
from vramcalc.sources.checkpoint import TensorFile
from vramcalc.sources.gguf_header import GGML_TYPES, gguf_config, parse_gguf_header, read_gguf_file

WHERE = "models/tiny.gguf"

# --------------------------------------------------------------------------------------------------
# Real files, written by gguf-py
# --------------------------------------------------------------------------------------------------


def raw_blocks(qtype: Q, rows: int, row_weights: int) -> np.ndarray:
    """Bytes of the right size for ``rows`` rows of ``row_weights`` weights of ``qtype`` (zeros)."""
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    return np.zeros((rows, row_weights // block_size * type_size), dtype=np.uint8)


def write_gguf(path: Path, *, tokens: int = 300, long_array: bool = True, big_q4k: bool = False, **kwargs: Any) -> Path:
    """A small llama-style GGUF file: hyper-parameters, a tokenizer, and tensors of several GGML types."""
    writer = gguf.GGUFWriter(path, "llama", **kwargs)
    writer.add_block_count(2)
    writer.add_context_length(4096)
    writer.add_embedding_length(64)
    writer.add_feed_forward_length(256)
    writer.add_head_count(4)
    writer.add_head_count_kv([2, 4])  # per layer
    writer.add_key_length(16)
    writer.add_sliding_window(1024)
    writer.add_expert_count(8)
    writer.add_expert_used_count(2)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(15)  # llama_ftype MOSTLY_Q4_K_M
    writer.add_name("tiny llama")
    writer.add_bool("tiny.flag", True)
    writer.add_int8("tiny.int8", -8)
    writer.add_uint64("tiny.uint64", 2**63 + 5)
    writer.add_int64("tiny.int64", -(2**40))
    writer.add_float64("tiny.float64", 0.25)
    writer.add_array("tiny.languages", ["en", "fr"])
    if long_array:
        writer.add_array("tiny.long_numbers", list(range(2000)))
    writer.add_tokenizer_model("llama")
    writer.add_token_list([f"tok{i}" for i in range(tokens)])
    writer.add_token_scores([0.5] * tokens)
    writer.add_token_types([1] * tokens)
    rng = np.random.default_rng(0)
    writer.add_tensor("token_embd.weight", gguf.quants.quantize(rng.random((16, 64), dtype=np.float32), Q.Q8_0),
                      raw_dtype=Q.Q8_0)  # fmt: skip
    writer.add_tensor("output_norm.weight", np.ones(64, dtype=np.float32))
    writer.add_tensor("blk.0.attn_q.weight", np.zeros((64, 64), dtype=np.float16))
    writer.add_tensor("blk.0.attn_k.weight", raw_blocks(Q.BF16, 32, 64), raw_dtype=Q.BF16)
    writer.add_tensor("blk.0.ffn_up.weight", raw_blocks(Q.Q4_K, 256, 256), raw_dtype=Q.Q4_K)
    writer.add_tensor("blk.0.ffn_down.weight", raw_blocks(Q.Q6_K, 64, 256), raw_dtype=Q.Q6_K)
    writer.add_tensor("blk.0.ffn_gate.weight", raw_blocks(Q.IQ2_XXS, 64, 256), raw_dtype=Q.IQ2_XXS)
    writer.add_tensor("blk.0.attn_v.weight", raw_blocks(Q.Q4_0, 8, 64), raw_dtype=Q.Q4_0)
    writer.add_tensor("blk.0.positions", np.arange(12, dtype=np.int32).reshape(3, 2, 2))
    if big_q4k:
        writer.add_tensor("blk.1.ffn_up.weight", raw_blocks(Q.Q4_K, 4096, 4096), raw_dtype=Q.Q4_K)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """With a 4096 x 4096 Q4_K tensor (9 MiB of data) and a 4,000-token vocabulary."""
    return write_gguf(tmp_path_factory.mktemp("gguf") / "big.gguf", tokens=4000, big_q4k=True)


def header_of(path: Path) -> bytes:
    """A file's bytes up to its tensor data (the header, and the padding to the data's alignment)."""
    return path.read_bytes()[: gguf.GGUFReader(path).data_offset]


def parse(data: bytes, where: str = WHERE) -> TensorFile:
    return parse_gguf_header(io.BytesIO(data).read, "tiny.gguf", where)


def refused(data: bytes | Callable[[int], bytes], where: str = WHERE) -> str:
    """The one line a hostile header is refused with (ModelSourceError, stage header, naming the file)."""
    read = io.BytesIO(data).read if isinstance(data, bytes) else data
    with pytest.raises(ModelSourceError) as info:
        parse_gguf_header(read, "tiny.gguf", where)
    message = str(info.value)
    assert info.value.stage == "header"
    assert message.startswith(f"{where}: ") and "\n" not in message and len(message) < 300, message
    return message


# Headers byte by byte, for what GGUFWriter would not write.


def text(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    return struct.pack("<Q", len(raw)) + raw


def key_u32(key: str | bytes, value: int = 1) -> bytes:
    return text(key) + struct.pack("<II", 4, value)


def tensor(name: str | bytes, dims: tuple[int, ...] = (32,), ggml_type: int = 0, offset: int = 0) -> bytes:
    packed_dims = b"".join(struct.pack("<Q", dim) for dim in dims)
    return text(name) + struct.pack("<I", len(dims)) + packed_dims + struct.pack("<IQ", ggml_type, offset)


def header(keys: tuple[bytes, ...] = (), tensors: tuple[bytes, ...] = (), *, version: int = 3,
           n_tensors: int | None = None, n_keys: int | None = None, magic: bytes = b"GGUF") -> bytes:  # fmt: skip
    counts = (len(tensors) if n_tensors is None else n_tensors, len(keys) if n_keys is None else n_keys)
    return magic + struct.pack("<IQQ", version, *counts) + b"".join(keys) + b"".join(tensors)


# --------------------------------------------------------------------------------------------------
# Against gguf-py's GGUFReader
# --------------------------------------------------------------------------------------------------


def test_tensors_match_gguf_readers(tiny: Path) -> None:
    ours = read_gguf_file(tiny, str(tiny))
    reference = gguf.GGUFReader(tiny)
    assert ours.path == "tiny.gguf"
    assert [t.name for t in ours.tensors] == [t.name for t in reference.tensors]
    for mine, theirs in zip(ours.tensors, reference.tensors, strict=True):
        assert mine.dtype == theirs.tensor_type.name
        assert mine.shape == tuple(int(d) for d in theirs.shape)
        assert mine.nbytes == int(theirs.n_bytes)
        assert mine.elements == int(theirs.n_elements)
    assert {t.dtype for t in ours.tensors} >= {"F32", "F16", "BF16", "Q8_0", "Q4_K", "Q6_K", "IQ2_XXS", "Q4_0", "I32"}
    assert ours.nbytes == sum(int(t.n_bytes) for t in reference.tensors)


def test_shapes_are_ggufs_own_order(tiny: Path) -> None:
    """Innermost dimension first (ggml's ne): numpy's (16, 64) embedding is stored as (64, 16)."""
    tensors = {t.name: t for t in read_gguf_file(tiny, WHERE).tensors}
    assert tensors["token_embd.weight"].shape == (64, 16)
    assert tensors["blk.0.positions"].shape == (2, 2, 3)
    assert tensors["output_norm.weight"].shape == (64,)


def test_a_q4_k_tensor_by_hand(big: Path) -> None:
    """Q4_K: 256 weights per 144-byte block (QK_K = 256; block_q4_K is two f16 scales, 12 bytes of 6-bit
    sub-block scales and 128 bytes of 4-bit weights: ggml/src/ggml-common.h, and GGML_QUANT_SIZES in
    gguf-py/gguf/constants.py, ggml-org/llama.cpp). A 4096 x 4096 tensor: 4096 * 4096 / 256 * 144 bytes."""
    tensor = next(t for t in read_gguf_file(big, WHERE).tensors if t.name == "blk.1.ffn_up.weight")
    assert (tensor.dtype, tensor.shape) == ("Q4_K", (4096, 4096))
    assert tensor.nbytes == 4096 * 4096 // 256 * 144 == 9_437_184


def test_every_type_agrees_with_gguf_pys_tables() -> None:
    """Our table against GGMLQuantizationType and GGML_QUANT_SIZES of the installed gguf package: the same
    name and block for every type both know, and every type it knows is in ours."""
    for number, (name, block_size, type_size) in GGML_TYPES.items():
        try:
            qtype = Q(number)
        except ValueError:  # a type newer than the installed gguf package
            continue
        assert (qtype.name, gguf.GGML_QUANT_SIZES[qtype]) == (name, (block_size, type_size))
    assert {int(q) for q in Q} <= set(GGML_TYPES)


def test_config_keys_are_llama_cpps() -> None:
    known = {v for group in (gguf.Keys.LLM, gguf.Keys.Attention) for k, v in vars(group).items() if k.isupper()}
    assert {pattern for _, pattern in gguf_header._CONFIG_KEYS} <= known
    assert gguf_header._TOKENS_KEY == gguf.Keys.Tokenizer.LIST
    assert gguf_header._VOCAB_SIZE_KEY == gguf.Keys.LLM.VOCAB_SIZE


def test_metadata_keeps_scalars_and_short_numeric_arrays(tiny: Path) -> None:
    metadata = read_gguf_file(tiny, WHERE).metadata
    assert metadata["general.architecture"] == "llama"
    assert metadata["general.name"] == "tiny llama"
    assert metadata["general.file_type"] == 15
    assert metadata["tiny.flag"] is True
    assert metadata["tiny.int8"] == -8
    assert metadata["tiny.uint64"] == 2**63 + 5
    assert metadata["tiny.int64"] == -(2**40)
    assert metadata["tiny.float64"] == 0.25
    assert metadata["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-5)
    assert metadata["llama.attention.head_count_kv"] == [2, 4]  # a short numeric array, whole
    assert metadata["tiny.languages"] == 2  # strings: the length only
    assert metadata["tiny.long_numbers"] == 2000  # past MAX_KEPT_ARRAY_ITEMS: the length only
    assert metadata["tokenizer.ggml.tokens"] == 300
    assert metadata["tokenizer.ggml.scores"] == [0.5] * 300
    assert metadata["tokenizer.ggml.token_type"] == [1] * 300
    reference = gguf.GGUFReader(tiny)
    assert set(metadata) == {name for name in reference.fields if not name.startswith("GGUF.")}


def test_a_transformers_like_config(tiny: Path) -> None:
    assert gguf_config(read_gguf_file(tiny, WHERE).metadata) == {
        "model_type": "llama",
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "num_key_value_heads_per_layer": [2, 4],
        "head_dim": 16,
        "max_position_embeddings": 4096,
        "intermediate_size": 256,
        "sliding_window": 1024,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "vocab_size": 300,
        "gguf_file_type": 15,
    }


def test_config_of_sparse_or_odd_metadata() -> None:
    assert gguf_config({}) == {}
    assert gguf_config({"general.architecture": "qwen2", "qwen2.vocab_size": 7}) == {
        "model_type": "qwen2",
        "vocab_size": 7,
    }
    per_layer = {"general.architecture": "deci", "deci.attention.head_count": [32, 0, 64], "deci.vocab_size": 9}
    assert gguf_config(per_layer) == {
        "model_type": "deci",
        "num_attention_heads": 64,
        "num_attention_heads_per_layer": [32, 0, 64],
        "vocab_size": 9,
    }
    for bad in ({"general.architecture": 3}, {"general.architecture": "x", "x.block_count": "many"},
                {"general.architecture": "x", "x.block_count": -1}, {"general.architecture": "x", "x.block_count": 2.0},
                {"general.architecture": "x", "x.attention.head_count_kv": [4, True]}):  # fmt: skip
        with pytest.raises(ModelSourceError) as info:
            gguf_config(bad, where="m.gguf")
        assert info.value.stage == "config" and str(info.value).startswith("m.gguf: ")


# --------------------------------------------------------------------------------------------------
# Reading: only the header, in few calls
# --------------------------------------------------------------------------------------------------


class CountingReader:
    """A remote-style reader: serves byte ranges of a file in order, counting what it is asked for."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0
        self.asked = 0
        self.calls = 0

    def read(self, count: int) -> bytes:
        self.calls += 1
        self.asked += count
        chunk = self.data[self.position : self.position + count]
        self.position += len(chunk)
        return chunk


def test_a_remote_reader_is_asked_for_the_header_only(big: Path) -> None:
    data = big.read_bytes()
    reader = CountingReader(data)
    reference = gguf.GGUFReader(big)
    header = parse_gguf_header(reader.read, "big.gguf", WHERE)
    assert header.nbytes > 9_437_184
    # The tensor table ends somewhere in the alignment padding before the data; nothing past it is asked.
    assert reference.data_offset - reference.alignment < reader.asked == reader.position <= reference.data_offset
    assert reader.asked < len(data) // 10
    assert reader.calls < 100  # 4,000 token strings, and their scores and types, in large reads


def test_a_reader_that_returns_too_much_is_refused() -> None:
    assert "returned 10 bytes for 4 asked" in refused(lambda count: b"GGUF" + bytes(6))
    assert "not bytes" in refused(lambda count: "GGUF")


def test_large_vocabularies_are_read_whole() -> None:
    """A 256,000-token tokenizer (Gemma's size) is passed over, not kept, in few reads."""
    tokens = b"".join(text(f"<token {i}>") for i in range(256_000))
    vocab = text("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 256_000) + tokens
    reader = CountingReader(header((vocab, key_u32("after")), (tensor("w"),)) + bytes(4096))
    parsed = parse_gguf_header(reader.read, "vocab.gguf", WHERE)
    assert parsed.metadata == {"tokenizer.ggml.tokens": 256_000, "after": 1}
    assert [t.name for t in parsed.tensors] == ["w"]
    assert reader.calls < 100 and reader.asked == len(reader.data) - 4096


def test_files_that_are_not_regular_files_are_refused(tmp_path: Path) -> None:
    for path in (tmp_path / "missing.gguf", tmp_path):
        with pytest.raises(ModelSourceError) as info:
            read_gguf_file(path, str(path))
        assert info.value.stage == "header" and str(info.value).startswith(f"{path}: ")
    if hasattr(os, "mkfifo"):
        fifo = tmp_path / "fifo.gguf"
        os.mkfifo(fifo)
        with pytest.raises(ModelSourceError, match="not a regular file"):
            read_gguf_file(fifo, str(fifo))


# --------------------------------------------------------------------------------------------------
# Hostile headers
# --------------------------------------------------------------------------------------------------


def test_the_byte_builder_writes_what_gguf_reads() -> None:
    data = header((key_u32("general.alignment", 32),), (tensor("w", (64, 2), 8),))
    parsed = parse(data)
    assert parsed.metadata == {"general.alignment": 32}
    assert [(t.name, t.dtype, t.shape, t.nbytes) for t in parsed.tensors] == [("w", "Q8_0", (64, 2), 2 * 2 * 34)]


def test_a_scalar_tensor_has_one_element() -> None:
    assert parse(header(tensors=(tensor("s", (), 0),))).tensors[0].nbytes == 4


def test_every_truncation_is_one_line(tmp_path: Path) -> None:
    small = write_gguf(tmp_path / "small.gguf", tokens=3, long_array=False)
    data = header_of(small)
    end = len(data) - gguf.GGUFReader(small).alignment  # past this: the padding, which is not read
    parse(data)
    for cut in range(end):
        message = refused(data[:cut])
        assert "ends inside its GGUF header" in message or (cut < 4 and "not a GGUF file" in message)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", "not a GGUF file"),
        (b"GGML" + bytes(20), "not a GGUF file"),
        (b"\x00" * 64, "not a GGUF file"),
        (header(version=1), "GGUF version 1 is not read"),
        (header(version=4), "GGUF version 4 is not read"),
        (header(version=2**32 - 1), "GGUF version 4,294,967,295"),
        (header(version=3 << 24), "big-endian"),
        (header(n_tensors=2**63), "9,223,372,036,854,775,808 tensors"),
        (header(n_keys=2**64 - 1), "18,446,744,073,709,551,615 keys"),
        (header(n_tensors=gguf_header.MAX_TENSORS, n_keys=gguf_header.MAX_KEYS), "ends inside"),
        (header((struct.pack("<Q", 2**63),)), "key 0 is 9,223,372,036,854,775,808 bytes long"),
        (header((text("k") + struct.pack("<IQ", 8, 2**63),)), "the value of key 'k' is 9,223,372,036,854,775,808"),
        (header((text("k") + struct.pack("<IIQ", 9, 8, 2**63),)), "key 'k' declares 9,223,372,036,854,775,808 items"),
        (header((text("k") + struct.pack("<IIQ", 9, 8, 3) + struct.pack("<Q", 2**40),)), "an item of key 'k' is"),
        (header((text("k") + struct.pack("<IIQ", 9, 12, 2**24),)), "ends inside"),
        (header((text("k") + struct.pack("<I", 13),)), "key 'k' has an unknown value type 13"),
        (header((text("k") + struct.pack("<I", 2**32 - 1),)), "unknown value type 4,294,967,295"),
        (header((text("k") + struct.pack("<IIQ", 9, 13, 1),)), "array of an unknown value type 13"),
        (header((text("k") + struct.pack("<IIQ", 9, 9, 1),)), "array of arrays"),
        (header((key_u32("k"), key_u32("k"))), "key 'k' appears twice"),
        (header((key_u32("a"), key_u32(""))), "key 1 is empty"),
        (header((key_u32(b"\xff\xfe"),)), "key 0 is not UTF-8"),
        (header(tensors=(tensor("w"), tensor("w"))), "tensor 'w' appears twice"),
        (header(tensors=(tensor(b"w\xc3"),)), "the name of tensor 0 is not UTF-8"),
        (header(tensors=(tensor("w", (1, 1, 1, 1, 1)),)), "tensor 'w' has 5 dimensions, more than GGML's 4"),
        (header(tensors=(text("w") + struct.pack("<I", 2**32 - 1),)), "4,294,967,295 dimensions"),
        (header(tensors=(tensor("w", (32, 0)),)), "tensor 'w' has a dimension of 0 in shape [32, 0]"),
        (header(tensors=(tensor("w", (2**32, 2**32)),)), "18,446,744,073,709,551,616 elements"),
        (header(tensors=(tensor("w", (2**64 - 1,) * 4),)), "more than 2**48"),
        (header(tensors=(tensor("w", (32,), 4),)), "tensor 'w' has an unknown GGML type 4 (retired, or newer"),
        (header(tensors=(tensor("w", (32,), 31),)), "unknown GGML type 31"),
        (header(tensors=(tensor("w", (32,), 2**32 - 1),)), "unknown GGML type 4,294,967,295"),
        (header(tensors=(tensor("w", (100, 4), 12),)), "tensor 'w' is Q4_K, whose blocks hold 256 weights"),
        (header(tensors=(tensor("w", (), 8),)), "Q8_0, whose blocks hold 32 weights, but its rows hold 1"),
        (header(tensors=(tensor("bad\nname", (32,), 99),)), "tensor 'bad\\nname' has an unknown GGML type 99"),
    ],
)
def test_hostile_headers_are_one_line(data: bytes, expected: str) -> None:
    assert expected in refused(data)


def test_a_long_name_is_quoted_short() -> None:
    message = refused(header(tensors=(tensor("x" * 60_000 + "\n", (32,), 99),)))
    assert "unknown GGML type 99" in message and len(message) < 200


def test_a_header_past_the_bound_is_refused(monkeypatch: pytest.MonkeyPatch, tiny: Path) -> None:
    data = header_of(tiny)
    monkeypatch.setattr(gguf_header, "MAX_HEADER_BYTES", len(data) // 2)
    assert f"past {len(data) // 2:,} bytes" in refused(data)


def test_an_endless_header_is_read_no_further_than_the_bound() -> None:
    """Key after key of 16 MiB numeric arrays, from a reader that never ends: refused at 256 MiB, and
    nothing kept meanwhile."""

    def pieces() -> Iterator[bytes]:
        yield header(n_keys=gguf_header.MAX_KEYS)
        for index in itertools.count():
            yield text(f"k{index}") + struct.pack("<IIQ", 9, 0, 2**24)
            yield from itertools.repeat(bytes(2**20), 16)

    stream = pieces()
    pending = bytearray()
    asked = 0

    def endless(count: int) -> bytes:
        nonlocal asked
        asked += count
        while len(pending) < count:
            pending.extend(next(stream))
        served = bytes(pending[:count])
        del pending[:count]
        return served

    assert "past 256 MiB" in refused(endless)
    assert asked <= gguf_header.MAX_HEADER_BYTES


def test_a_big_endian_file_written_by_gguf_py(tmp_path: Path) -> None:
    path = tmp_path / "big-endian.gguf"
    writer = gguf.GGUFWriter(path, "llama", endianess=gguf.GGUFEndian.BIG)
    writer.add_tensor("w", np.zeros(32, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelSourceError, match=r"big-endian GGUF file; only little-endian"):
        read_gguf_file(path, WHERE)


def test_a_custom_alignment_written_by_gguf_py(tmp_path: Path) -> None:
    path = tmp_path / "aligned.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_custom_alignment(256)
    writer.add_tensor("a", raw_blocks(Q.Q8_0, 1, 64), raw_dtype=Q.Q8_0)
    writer.add_tensor("b", np.zeros(3, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    parsed = read_gguf_file(path, WHERE)
    assert parsed.metadata["general.alignment"] == 256
    assert [t.nbytes for t in parsed.tensors] == [int(t.n_bytes) for t in gguf.GGUFReader(path).tensors] == [68, 12]


def test_the_tensors_data_lies_where_llama_cpp_looks_for_it() -> None:
    """One after another in table order, each at a multiple of general.alignment (32 by default)."""
    q8 = (64, 2)  # 4 blocks of 34 bytes: 136, padded to 160
    assert len(parse(header(tensors=(tensor("a", q8, 8, 0), tensor("b", q8, 8, 160)))).tensors) == 2
    message = refused(header(tensors=(tensor("a", q8, 8, 0), tensor("b", q8, 8, 136))))
    assert "tensor 'b' starts at data offset 136, not at 160 where the tensors before it end" in message
    assert "data offset 32, not at 0" in refused(header(tensors=(tensor("a", (32,), 0, 32),)))
    aligned = header((key_u32("general.alignment", 8),), (tensor("a", q8, 8, 0), tensor("b", q8, 8, 136)))
    assert len(parse(aligned).tensors) == 2
    for bad in (0, 3, 48, 2**32 - 1):
        assert "general.alignment is" in refused(header((key_u32("general.alignment", bad),)))
    assert "not a power of two" in refused(header((text("general.alignment") + struct.pack("<I", 8) + text("32"),)))


def test_a_header_whose_tensors_run_past_the_file_is_refused(tiny: Path, tmp_path: Path) -> None:
    data = tiny.read_bytes()
    last = read_gguf_file(tiny, WHERE).tensors[-1]
    end = int(gguf.GGUFReader(tiny).tensors[-1].data_offset) + last.nbytes  # data_offset: from the file's start
    assert end <= len(data)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:end])  # the last tensor's padding is not needed
    assert read_gguf_file(cut, WHERE).nbytes == read_gguf_file(tiny, WHERE).nbytes
    cut.write_bytes(data[: end - 1])
    with pytest.raises(ModelSourceError, match=rf"its tensors end at byte {end:,}, past the end of the file"):
        read_gguf_file(cut, WHERE)
    assert parse_gguf_header(io.BytesIO(data[: end - 1]).read, "cut.gguf", WHERE).nbytes > 0  # no size: not checked


def test_version_2_is_read(tiny: Path) -> None:
    data = bytearray(header_of(tiny))
    data[4:8] = struct.pack("<I", 2)
    assert parse(bytes(data)).nbytes == read_gguf_file(tiny, WHERE).nbytes


# --------------------------------------------------------------------------------------------------
# Mutated real headers: a TensorFile or one ModelSourceError line, nothing else
# --------------------------------------------------------------------------------------------------

_SEED: list[bytes] = []


def seed_header() -> bytes:
    if not _SEED:
        import tempfile

        with tempfile.TemporaryDirectory() as folder:
            _SEED.append(header_of(write_gguf(Path(folder) / "seed.gguf", tokens=40)))
    return _SEED[0]


_EXTREMES = [0, 1, 4, 5, 13, 64, 255, 2**31, 2**32 - 1, 2**32, 2**48, 2**63, 2**64 - 1]


@st.composite
def mutated_headers(draw: st.DrawFn) -> bytes:
    data = bytearray(seed_header())
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data) - 1))
        kind = draw(st.sampled_from(["byte", "u32", "u64", "cut", "insert", "delete"]))
        if kind == "byte":
            data[at] = draw(st.integers(0, 255))
        elif kind in ("u32", "u64"):
            size = 4 if kind == "u32" else 8
            value = draw(st.sampled_from(_EXTREMES)) % 2 ** (8 * size)
            data[at : at + size] = value.to_bytes(size, "little")
        elif kind == "cut":
            del data[at:]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        else:
            del data[at : at + draw(st.integers(1, 16))]
        if not data:
            break
    return bytes(data)


@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
@given(mutated_headers())
def test_mutated_headers_are_read_or_refused_in_one_line(data: bytes) -> None:
    try:
        parsed = parse(data)
    except ModelSourceError as exc:
        message = str(exc)
        assert exc.stage == "header" and message.startswith(f"{WHERE}: ") and "\n" not in message
        assert len(message) < 300
        return
    assert all(t.nbytes >= 0 and len(t.shape) <= 4 for t in parsed.tensors)
