"""A model by the name the user has: catalog variants by their Hub ids, checkpoint folders and files, and
what an estimate takes from the files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from checkpoint_files import LLAMA, llama_tensors, write_checkpoint, write_llama_gguf
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.errors import SpecError
from vramcalc.spec.model_name import resolve_name

runner = CliRunner()

#: Hub ids of tuned variants users serve, and the catalog entry of their base model (the same
#: architecture: each repo's config.json differs from its base's only in fields that do not shape memory).
VARIANTS = {
    "Qwen/Qwen2.5-32B-Instruct": "qwen2.5-32b",
    "google/gemma-2-9b-it": "gemma-2-9b",
    "mistralai/Mistral-7B-Instruct-v0.3": "mistral-7b-v0.3",
    "meta-llama/Meta-Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "deepseek-ai/DeepSeek-V2-Lite-Chat": "deepseek-v2-lite",
    "Qwen/Qwen3-30B-A3B-Instruct-2507": "qwen3-30b-a3b",
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_a_tuned_variant_names_its_base_model_and_says_so(name: str) -> None:
    named = resolve_name(name, "--model")
    assert named.entry is not None and named.entry.id == VARIANTS[name]
    assert any(name in note and VARIANTS[name] in note for note in named.notes)


def test_an_ambiguous_short_name_says_what_it_took_and_what_else_it_could_mean() -> None:
    named = resolve_name("mistral-7b", "--model")
    assert named.entry is not None and named.entry.id == "mistral-7b-v0.3"
    assert named.notes == ("mistral-7b: the catalog's mistral-7b-v0.3; also mistral-7b-v0.1, mistral-7b-v0.2",)


def test_an_exact_name_has_no_note() -> None:
    assert resolve_name("llama-3.1-8b", "--model").notes == ()


def _json(args: list[str]) -> dict[str, Any]:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_folder_is_estimated_from_its_files(tmp_path: Path) -> None:
    # bf16 is the config's torch_dtype, fp16 the files' (both 2 bytes); the modelled Llama layers hold every
    # parameter the files hold, so the weights are the arrays' own bytes.
    expected = write_checkpoint(tmp_path / "m", LLAMA, llama_tensors(LLAMA))
    doc = _json(["estimate", "--model", str(tmp_path / "m"), "--seq-len", "128", "--mode", "inference"])
    assert doc["components"]["parameters"] == expected
    assert any("the modelled layers hold the files'" in note for note in doc["assumptions"])


def test_a_spec_names_a_folder_as_its_model(tmp_path: Path) -> None:
    expected = write_checkpoint(tmp_path / "m", LLAMA, llama_tensors(LLAMA))
    spec = tmp_path / "s.yaml"
    workload = "{mode: inference, batch_size: 1, seq_len: 64, precision: bf16}"
    spec.write_text(f"model: {tmp_path / 'm'}\nworkload: {workload}\n")
    doc = _json(["estimate", str(spec)])
    assert doc["name"] == "m" and doc["components"]["parameters"] == expected


def _tower_checkpoint(tmp_path: Path) -> tuple[Path, int, int]:
    """A Llama with a vision tower of 64 x 64 weights beside it (a multimodal checkpoint the Llama layers
    do not account for)."""
    tensors = {**llama_tensors(LLAMA), "vision_tower.encoder.weight": np.zeros((64, 64), np.float16)}
    total = write_checkpoint(tmp_path / "vlm", LLAMA, tensors)
    return tmp_path / "vlm", total, sum(array.size for array in tensors.values())


def test_weights_the_modelled_layers_miss_are_the_files(tmp_path: Path) -> None:
    folder, total, elements = _tower_checkpoint(tmp_path)
    doc = _json(["estimate", "--model", str(folder), "--seq-len", "64", "--mode", "inference"])
    assert doc["params"] == elements and doc["components"]["parameters"] == total


def test_training_a_model_whose_layers_miss_weights_is_refused(tmp_path: Path) -> None:
    folder, _, _ = _tower_checkpoint(tmp_path)
    result = runner.invoke(app, ["estimate", "--model", str(folder), "--seq-len", "64", "--mode", "train"])
    assert result.exit_code == 2
    assert "vision_tower" in result.stderr and "training needs every layer modelled" in result.stderr


def _unmodelled(tmp_path: Path) -> Path:
    config = {**LLAMA, "model_type": "granitemoehybridx", "architectures": ["SomethingNew"]}
    write_checkpoint(tmp_path / "new", config, llama_tensors(LLAMA))
    return tmp_path / "new"


def test_an_unmodelled_architecture_gets_exact_weights_and_the_kv_cache_of_its_fields(tmp_path: Path) -> None:
    folder = _unmodelled(tmp_path)
    doc = _json(["estimate", "--model", str(folder), "--prompt-len", "100", "--max-new-tokens", "28"])
    # K and V of 2 layers x 2 KV heads x 16 dims x 128 tokens x 2 bytes (bf16) = 32,768 bytes (by hand)
    assert doc["components"]["kv_cache"] == 2 * 2 * 2 * 16 * 128 * 2
    # the files' bytes, and vLLM's RoPE cos/sin cache: 2,048 positions x head_dim 16 (64 / 4 heads) x 2 B
    rope_cache = 2048 * (64 // 4) * 2
    assert doc["components"]["parameters"] == sum(a.nbytes for a in llama_tensors(LLAMA).values()) + rope_cache
    result = runner.invoke(app, ["estimate", "--model", str(folder), "--seq-len", "64", "--mode", "train"])
    assert result.exit_code == 2 and "train needs every layer modelled" in result.stderr


def test_pre_quantized_files_are_their_bytes(tmp_path: Path) -> None:
    # An AWQ checkpoint stores packed int32 weights, fp16 scales and packed zeros: its memory is what it holds.
    config = {**LLAMA, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 32, "version": "gemm"}}
    tensors = {
        "model.layers.0.mlp.up_proj.qweight": np.zeros((64, 16), np.int32),
        "model.layers.0.mlp.up_proj.scales": np.zeros((2, 128), np.float16),
        "model.layers.0.mlp.up_proj.qzeros": np.zeros((2, 16), np.int32),
        "model.embed_tokens.weight": np.zeros((256, 64), np.float16),
    }
    total = write_checkpoint(tmp_path / "awq", config, tensors)
    doc = _json(["estimate", "--model", str(tmp_path / "awq"), "--prompt-len", "16", "--max-new-tokens", "16"])
    assert doc["components"]["parameters"] == total + 2048 * (64 // 4) * 2  # + vLLM's RoPE cache (fp16)
    assert any("awq weights as stored" in note for note in doc["assumptions"])


@pytest.mark.parametrize("name", ["./nothing-here", "/no/such/folder", "model.gguf", "weights.safetensors"])
def test_a_path_that_is_not_there_is_one_error(name: str) -> None:
    with pytest.raises(SpecError, match="no such file or folder"):
        resolve_name(name, "--model")


def test_import_writes_a_spec_that_estimates_offline_as_the_folder_does(tmp_path: Path) -> None:
    folder, total, _ = _tower_checkpoint(tmp_path)
    result = runner.invoke(app, ["import", str(folder), "-o", str(tmp_path / "spec.yaml")])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "spec.yaml").read_text()
    assert f"weight_bytes: {total}" in text and f"source: {folder}" in text
    from_spec = _json(["estimate", str(tmp_path / "spec.yaml")])
    from_folder = _json(["estimate", "--model", str(folder), "--mode", "inference", "--seq-len", "2048"])
    assert from_spec["components"] == from_folder["components"]


def test_import_of_a_catalog_variant_names_the_entry() -> None:
    result = runner.invoke(app, ["import", "google/gemma-2-9b-it"])
    assert result.exit_code == 0
    assert "# note: google/gemma-2-9b-it: the catalog's gemma-2-9b (google/gemma-2-9b)" in result.stdout


def test_a_model_that_cannot_be_read_names_the_stage_in_json() -> None:
    result = runner.invoke(app, ["estimate", "--model", "./no-such-checkpoint", "--json"])
    assert result.exit_code == 2
    assert json.loads(result.stdout) == {
        "error": {"message": "--model ./no-such-checkpoint: no such file or folder", "stage": "path"}
    }
    assert result.stderr == "error: --model ./no-such-checkpoint: no such file or folder\n"


def test_the_api_imports_a_folder(tmp_path: Path) -> None:
    import vramcalc

    expected = write_checkpoint(tmp_path / "m", LLAMA, llama_tensors(LLAMA))
    imported = vramcalc.import_config(str(tmp_path / "m"))
    assert imported.spec["model"]["checkpoint"]["weight_bytes"] == expected
    estimate = vramcalc.estimate({**imported.spec, "workload": {"mode": "inference", "batch_size": 1, "seq_len": 64}})
    assert estimate.params == sum(array.size for array in llama_tensors(LLAMA).values())


def test_a_gguf_file_is_served_by_llama_cpp_with_its_own_bytes(tmp_path: Path) -> None:
    import gguf

    write_llama_gguf(tmp_path / "m.gguf")
    tensors = {tensor.name: int(tensor.n_bytes) for tensor in gguf.GGUFReader(str(tmp_path / "m.gguf")).tensors}
    doc = _json(["estimate", "--model", str(tmp_path / "m.gguf"), "--prompt-len", "100", "--max-new-tokens", "28"])
    # gguf-py's own reading of the file; llama.cpp keeps the token embedding in host memory
    assert doc["components"]["parameters"] == sum(tensors.values()) - tensors["token_embd.weight"]
    assert "runtime not given: llama.cpp (a GGUF file type)" in doc["assumptions"]


def test_a_relative_path_in_a_spec_is_beside_the_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = write_checkpoint(tmp_path / "project" / "ckpt", LLAMA, llama_tensors(LLAMA))
    spec = tmp_path / "project" / "serve.yaml"
    spec.write_text("model: ./ckpt\nworkload: {mode: inference, batch_size: 1, seq_len: 64, precision: bf16}\n")
    monkeypatch.chdir(tmp_path)  # elsewhere: ./ckpt is not here
    result = runner.invoke(app, ["check", str(spec), "--gpu", "h100-sxm", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)[0]["fits"] is True
    assert _json(["estimate", str(spec)])["components"]["parameters"] == expected


def test_a_home_that_cannot_be_found_is_no_such_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """``~user`` for a user the system does not know: pathlib's expanduser raises RuntimeError; the name stays
    as written, and is a path that is not there (found by the python-api fuzz target)."""
    monkeypatch.delenv("HOME", raising=False)
    with pytest.raises(SpecError, match=r"~\(: no such file or folder"):
        resolve_name("~(", "--model ~(")
