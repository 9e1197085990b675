"""Checkpoints on disk: the safetensors header reader against files the safetensors library wrote, and
one error line for every broken or hostile header."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from checkpoint_files import LLAMA, llama_tensors, write_checkpoint
from safetensors import safe_open
from safetensors.numpy import save_file

from vramcalc.errors import ModelSourceError
from vramcalc.sources.local import read_local
from vramcalc.sources.safetensors_header import parse_safetensors_header


def test_a_single_file_holds_its_arrays_bytes(tmp_path: Path) -> None:
    # 3x4 float16 = 24 bytes, 5 int32 = 20 bytes, 2x2 bfloat16-sized uint16 = 8 bytes: 52 in all (by hand)
    tensors = {"a": np.zeros((3, 4), np.float16), "b": np.zeros(5, np.int32), "c": np.zeros((2, 2), np.uint16)}
    save_file(tensors, str(tmp_path / "model.safetensors"))
    checkpoint = read_local(tmp_path / "model.safetensors", "x")
    assert checkpoint.weight_bytes == 52
    assert {t.name: (t.dtype, t.shape) for t in checkpoint.tensors()} == {
        "a": ("F16", (3, 4)),
        "b": ("I32", (5,)),
        "c": ("U16", (2, 2)),
    }
    with safe_open(str(tmp_path / "model.safetensors"), "np") as handle:  # the library's own reading
        assert sorted(handle.keys()) == sorted(t.name for t in checkpoint.tensors())


def test_a_sharded_folder_reads_every_shard_its_index_names(tmp_path: Path) -> None:
    tensors = llama_tensors(LLAMA)
    expected = write_checkpoint(tmp_path, LLAMA, tensors, shards=3)
    checkpoint = read_local(tmp_path, "x")
    assert len(checkpoint.files) == 3
    assert checkpoint.weight_bytes == expected == sum(array.nbytes for array in tensors.values())
    assert checkpoint.elements == sum(array.size for array in tensors.values())
    assert checkpoint.config == LLAMA


def test_a_diffusers_folder_counts_each_component(tmp_path: Path) -> None:
    (tmp_path / "model_index.json").write_text(
        json.dumps(
            {
                "_class_name": "FluxPipeline",
                "transformer": ["diffusers", "X"],
                "vae": ["diffusers", "Y"],
                "scheduler": ["diffusers", "Z"],
            }
        )
    )
    weights = "diffusion_pytorch_model.safetensors"
    save_file({"w": np.zeros((10, 10), np.float16)}, str(_mkdir(tmp_path / "transformer") / weights))
    save_file({"w": np.zeros(7, np.float32)}, str(_mkdir(tmp_path / "vae") / weights))
    (tmp_path / "vae" / "config.json").write_text("{}")
    checkpoint = read_local(tmp_path, "x")
    assert checkpoint.bytes_by_component() == {"transformer": 200, "vae": 28}  # 100 x 2, 7 x 4
    assert checkpoint.pipeline is not None and "vae" in checkpoint.configs


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


def _file(tmp_path: Path, header: bytes, length: int | None = None) -> Path:
    path = tmp_path / "bad.safetensors"
    path.write_bytes(struct.pack("<Q", len(header) if length is None else length) + header)
    return path


HOSTILE = {
    "not JSON": b"{nope",
    "not a mapping": b"[1, 2]",
    "unknown dtype": b'{"a": {"dtype": "F12", "shape": [1], "data_offsets": [0, 1]}}',
    "span differs from dtype x shape": b'{"a": {"dtype": "F16", "shape": [4], "data_offsets": [0, 6]}}',
    "overlap": b'{"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},'
    b' "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}',
    "gap": b'{"a": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}}',
    "negative dim": b'{"a": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 0]}}',
    "huge dims": b'{"a": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}}',
    "bool dims": b'{"a": {"dtype": "U8", "shape": [true], "data_offsets": [0, 1]}}',
    "duplicate name": b'{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},'
    b' "a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}}',
    "metadata not strings": b'{"__metadata__": {"k": 1}}',
    "deep nesting": b"[" * 100_000,
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_header_is_one_error_naming_the_file(tmp_path: Path, case: str) -> None:
    with pytest.raises(ModelSourceError) as caught:
        read_local(_file(tmp_path, HOSTILE[case]), "spec.yaml: model")
    message = str(caught.value)
    assert message.startswith("spec.yaml: model: bad.safetensors: ") and "\n" not in message
    assert len(message) < 400 and caught.value.stage == "header"


@pytest.mark.parametrize("length", [0, 1, 100_000_001, 2**63])
def test_a_header_length_out_of_the_format_is_refused_before_reading(tmp_path: Path, length: int) -> None:
    with pytest.raises(ModelSourceError, match="header length"):
        read_local(_file(tmp_path, b"{}", length), "x")


def test_a_file_that_ends_inside_its_header_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelSourceError, match="ends inside"):
        read_local(_file(tmp_path, b"{}", 1000), "x")


def test_a_shard_index_naming_a_missing_or_outside_file_is_refused(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, LLAMA, llama_tensors(LLAMA), shards=2)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    for bad, problem in (("gone.safetensors", "not in the folder"), ("../x.safetensors", "not a file beside")):
        index["weight_map"]["lm_head.weight"] = bad
        (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
        with pytest.raises(ModelSourceError, match=problem):
            read_local(tmp_path, "x")


def test_a_folder_without_weights_says_so(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    with pytest.raises(ModelSourceError, match="config.json but no .safetensors weights"):
        read_local(tmp_path, "x")


def test_the_parser_reads_only_what_it_is_given() -> None:
    raw = b'{"w": {"dtype": "F8_E4M3", "shape": [16, 16], "data_offsets": [0, 256]}}'
    file = parse_safetensors_header(raw, "model.safetensors", "x")
    assert file.nbytes == 256  # 16 x 16 one-byte floats


def _header_only(path: Path, tensors: dict[str, tuple[str, list[int], int]]) -> None:
    """A safetensors header without its data (vramcalc reads headers only): name -> (dtype, shape, bytes)."""
    header, offset = {}, 0
    for name, (dtype, shape, size) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)


def test_a_diffusers_pipeline_is_its_weights_and_refused_where_a_step_is_asked(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from vramcalc.cli import app

    index = {"_class_name": "FluxPipeline", "transformer": ["diffusers", "T"], "vae": ["diffusers", "V"]}
    (tmp_path / "model_index.json").write_text(json.dumps(index))
    # 12 GiB of bf16 in the transformer (6 x 2**30 x 2 bytes), 0.5 GiB of fp32 in the VAE (2**27 x 4 bytes)
    _header_only(
        tmp_path / "transformer" / "diffusion_pytorch_model.safetensors", {"w": ("BF16", [6, 2**30], 12 * 2**30)}
    )
    _header_only(tmp_path / "vae" / "diffusion_pytorch_model.safetensors", {"w": ("F32", [2**27], 2**29)})
    answered = CliRunner().invoke(app, ["estimate", "--model", str(tmp_path), "--json"])
    assert answered.exit_code == 0, answered.output
    doc = json.loads(answered.stdout)
    assert (doc["resident_bytes"], doc["offload_bytes"]) == (12 * 2**30 + 2**29, 12 * 2**30)
    spec = tmp_path / "s.yaml"
    spec.write_text(f"model: {tmp_path}\nworkload: {{mode: inference, batch_size: 1, seq_len: 64}}\n")
    for args in (["estimate", str(spec)], ["max-batch", "--model", str(tmp_path), "--gpu", "h100-sxm"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2
        assert "weights transformer 12.00 GiB, vae 0.50 GiB; all resident (pipe.to('cuda')) 12.50 GiB" in result.stderr
        assert "one at a time (enable_model_cpu_offload) 12.00 GiB (transformer)" in result.stderr


def test_a_name_too_long_for_the_file_system_is_missing_not_an_os_error(tmp_path: Path) -> None:
    # A shard index, a Diffusers model_index.json or a modules.json may name anything: a name past the
    # file system's 255 bytes makes stat() raise ENAMETOOLONG, which pathlib's is_file() lets through.
    long_name = "a" * 300 + ".safetensors"
    write_checkpoint(tmp_path / "sharded", LLAMA, llama_tensors(LLAMA), shards=2)
    index = json.loads((tmp_path / "sharded" / "model.safetensors.index.json").read_text())
    index["weight_map"]["lm_head.weight"] = long_name
    (tmp_path / "sharded" / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ModelSourceError, match="not in the folder") as caught:
        read_local(tmp_path / "sharded", "x")
    assert caught.value.stage == "path"

    pipeline = _mkdir(tmp_path / "pipeline")
    (pipeline / "model_index.json").write_text(json.dumps({"x" * 300: ["diffusers", "X"], "vae": ["diffusers", "Y"]}))
    save_file({"w": np.zeros(7, np.float32)}, str(_mkdir(pipeline / "vae") / "diffusion_pytorch_model.safetensors"))
    assert [file.path for file in read_local(pipeline, "x").files] == ["vae/diffusion_pytorch_model.safetensors"]

    sentence = tmp_path / "sentence"
    write_checkpoint(sentence, LLAMA, llama_tensors(LLAMA))
    (sentence / "modules.json").write_text(json.dumps([{"path": "x" * 300}]))
    assert [file.path for file in read_local(sentence, "x").files] == ["model.safetensors"]


@pytest.mark.parametrize("component", ["OUTSIDE", "../outside", "vae/../../outside"])
def test_a_pipeline_component_outside_the_folder_is_not_read(tmp_path: Path, component: str) -> None:
    outside = _mkdir(tmp_path / "outside")
    save_file({"w": np.zeros((100, 100), np.float32)}, str(outside / "diffusion_pytorch_model.safetensors"))
    pipeline = _mkdir(tmp_path / "pipeline")
    name = str(outside) if component == "OUTSIDE" else component
    (pipeline / "model_index.json").write_text(json.dumps({name: ["diffusers", "X"], "vae": ["diffusers", "Y"]}))
    save_file({"w": np.zeros(7, np.float32)}, str(_mkdir(pipeline / "vae") / "diffusion_pytorch_model.safetensors"))
    checkpoint = read_local(pipeline, "x")
    assert [file.path for file in checkpoint.files] == ["vae/diffusion_pytorch_model.safetensors"]
    assert checkpoint.weight_bytes == 28


def test_a_header_past_what_vramcalc_reads_is_refused_before_reading(tmp_path: Path) -> None:
    # The format allows 100,000,000 bytes; parsing that many takes over a GB. 16 MiB + 1, with a file
    # that ends at once: refused from the length alone (not "ends inside its header").
    with pytest.raises(ModelSourceError, match="up to 16 MiB") as caught:
        read_local(_file(tmp_path, b"{}", 16 * 2**20 + 1), "x")
    assert caught.value.stage == "header" and "16,777,217 bytes" in str(caught.value)


def _header_lengths(folder: Path) -> dict[str, int]:
    """Each shard's header length, read from its first 8 bytes (the format's little-endian u64)."""
    return {path.name: struct.unpack("<Q", path.read_bytes()[:8])[0] for path in sorted(folder.glob("*.safetensors"))}


def test_a_checkpoints_headers_together_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each shard's header counts against the checkpoint's total before it is read: with a total that
    holds the first two shards' headers only, the third is refused, by name, at the header stage."""
    from vramcalc.sources import safetensors_header

    write_checkpoint(tmp_path, LLAMA, llama_tensors(LLAMA), shards=3)
    lengths = _header_lengths(tmp_path)
    first, second, third = lengths
    monkeypatch.setattr(safetensors_header, "MAX_TOTAL_HEADER_BYTES", lengths[first] + lengths[second])
    with pytest.raises(ModelSourceError) as caught:
        read_local(tmp_path, "x")
    message = str(caught.value)
    assert message.startswith(f"x: {third}: the checkpoint's safetensors headers hold more than ")
    assert f"{lengths[first] + lengths[second]:,} bytes together" in message and caught.value.stage == "header"
    monkeypatch.setattr(safetensors_header, "MAX_TOTAL_HEADER_BYTES", sum(lengths.values()))
    assert len(read_local(tmp_path, "x").files) == 3  # exactly enough
