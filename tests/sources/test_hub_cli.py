"""``vramcalc import org/name`` end to end against the local Hub stand-in: the resolver finds the model on
the Hub, then in the caches with no request at all, offline too."""

from __future__ import annotations

from pathlib import Path

import hub_repos
import numpy as np
import pytest
from hubserver import HubServer
from typer.testing import CliRunner

from vramcalc.cli import app

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 100,
    "max_position_embeddings": 256,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}


def _llama(folder: Path) -> int:
    hub_repos.write_json(folder / "config.json", CONFIG)
    tensors = {
        "model.embed_tokens.weight": np.zeros((100, 64), np.float16),
        "lm_head.weight": np.zeros((100, 64), np.float16),
        "model.norm.weight": np.zeros(64, np.float16),
    }
    shapes = {
        "self_attn.q_proj.weight": (64, 64),
        "self_attn.k_proj.weight": (32, 64),
        "self_attn.v_proj.weight": (32, 64),
        "self_attn.o_proj.weight": (64, 64),
        "mlp.gate_proj.weight": (128, 64),
        "mlp.up_proj.weight": (128, 64),
        "mlp.down_proj.weight": (64, 128),
        "input_layernorm.weight": (64,),
        "post_attention_layernorm.weight": (64,),
    }
    for layer in range(2):
        tensors.update({f"model.layers.{layer}.{name}": np.zeros(shape, np.float16) for name, shape in shapes.items()})
    return hub_repos.save_tensors(folder / "model.safetensors", tensors)


def test_import_a_hub_id_then_again_offline(hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = _llama(tmp_path / "repo")
    commit = hub.add_repo("acme/widget-model", tmp_path / "repo")
    first = CliRunner().invoke(app, ["import", "acme/widget-model"])
    assert first.exit_code == 0, first.output
    assert f"source: acme/widget-model@{commit}" in first.output and f"weight_bytes: {expected}" in first.output
    assert hub.count("GET", "/cdn/") == 1  # the weights' header, by one range request
    hub.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    again = CliRunner().invoke(app, ["import", "acme/widget-model"])
    assert again.exit_code == 0 and again.output == first.output
    assert hub.requests == []


def test_a_missing_repository_is_one_line(hub: HubServer) -> None:
    result = CliRunner().invoke(app, ["import", "acme/absent-model"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: acme/absent-model: repository not found on {hub.url} (a private repository needs HF_TOKEN set "
        "to a token with access)"
    ]


def test_one_gguf_file_of_a_hub_repository_by_its_path(hub: HubServer, tmp_path: Path) -> None:
    import gguf
    from checkpoint_files import write_llama_gguf

    (tmp_path / "repo").mkdir()
    write_llama_gguf(tmp_path / "repo" / "model-Q8_0.gguf")
    expected = sum(int(t.n_bytes) for t in gguf.GGUFReader(str(tmp_path / "repo" / "model-Q8_0.gguf")).tensors)
    hub.add_repo("acme/widget-GGUF", tmp_path / "repo")
    result = CliRunner().invoke(app, ["import", "acme/widget-GGUF/model-Q8_0.gguf"])
    assert result.exit_code == 0, result.output
    assert f"weight_bytes: {expected}" in result.output and "quantization: q8_0" in result.output


@pytest.mark.parametrize("fault", ["502 on config.json", "a short body"])
def test_a_failed_download_is_one_error_line_at_once(
    fault: str, hub: HubServer, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """huggingface_hub retries a failed HEAD with backoff for half a minute and a cut download several
    times, logging each try to standard error; the command makes one HEAD of its own first (the 502 is
    answered at once) and drops the download threads' log records (one line either way; the cut download
    within its bound of 3 request timeouts + 1 s, 16 s here)."""
    import time

    _llama(tmp_path / "repo")
    hub.add_repo("org/flaky", tmp_path / "repo")
    if fault == "a short body":
        hub.short_body = True
    else:
        hub.fail_paths = ("config.json", 502)
    start = time.monotonic()
    result = CliRunner().invoke(app, ["estimate", "--model", "org/flaky", "--mode", "inference", "--seq-len", "64"])
    assert time.monotonic() - start < (16 if fault == "a short body" else 3)
    captured = capfd.readouterr()
    lines = [line for line in (result.stderr + captured.err).splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: --model org/flaky: ")
    if fault != "a short body":
        assert "the Hub answered 502 (a server error)" in lines[0]
        assert hub.count("HEAD", "config.json") == 1  # not retried


@pytest.mark.parametrize("cache", ["hf-cache-is-a-file", "vramcalc-cache-is-a-file"])
def test_a_cache_that_cannot_be_written_still_answers(
    hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: str
) -> None:
    """A read-only or misconfigured cache (here a path under a plain file, which not even root can create)
    costs the cache, not the answer: the files are read into a temporary folder for this run."""
    expected = _llama(tmp_path / "repo")
    hub.add_repo("acme/widget-model", tmp_path / "repo")
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where a cache folder should be\n")
    variable = "HF_HUB_CACHE" if cache.startswith("hf") else "VRAMCALC_CACHE"
    monkeypatch.setenv(variable, str(blocker / "cache"))
    result = CliRunner().invoke(app, ["import", "acme/widget-model"])
    assert result.exit_code == 0, result.output
    assert f"weight_bytes: {expected}" in result.output
    assert "Traceback" not in result.output and "corrupted" not in result.output  # nor huggingface_hub's warnings
