"""``vramcalc models --hub QUERY`` (the Hub's search, through the local stand-in) and ``--cached`` (the
local Hugging Face cache, offline)."""

from __future__ import annotations

import json
from pathlib import Path

import hub_repos
import pytest
from hubserver import HubServer
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.sources import hf_cache

runner = CliRunner()


def test_the_hub_search_lists_the_most_downloaded_first(hub: HubServer, tmp_path: Path) -> None:
    hub_repos.single_file_repo(tmp_path / "a")
    hub.add_repo("acme/small-model", tmp_path / "a")
    hub.add_repo("acme/popular-model", tmp_path / "a")
    hub.add_repo("other/unrelated", tmp_path / "a")
    hub.repos["acme/small-model"].downloads = 10
    hub.repos["acme/popular-model"].downloads = 12_345
    result = runner.invoke(app, ["models", "--hub", "acme"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[1].split()[:2] == ["acme/popular-model", "12,345"]
    assert lines[2].split()[:2] == ["acme/small-model", "10"]
    assert lines[-1] == "2 models on the Hub; any of them works as --model REPO"
    doc = json.loads(runner.invoke(app, ["models", "--hub", "acme", "--json"]).stdout)
    assert [entry["repo"] for entry in doc] == ["acme/popular-model", "acme/small-model"]
    assert hub.count("GET", "/api/models") == 2  # one request each, no retries


def test_a_hub_that_fails_is_one_line(hub: HubServer) -> None:
    hub.status = 503
    result = runner.invoke(app, ["models", "--hub", "acme"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: the Hub's search for 'acme': the Hub answered 503 (a server error): try again later"
    ]


def test_the_cache_lists_what_was_read_and_what_was_downloaded(
    hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from checkpoint_files import LLAMA, llama_tensors, write_checkpoint
    from huggingface_hub import snapshot_download

    write_checkpoint(tmp_path / "a", LLAMA, llama_tensors(LLAMA))
    hub.add_repo("acme/read-model", tmp_path / "a")
    hub.add_repo("acme/downloaded-model", tmp_path / "a")
    assert runner.invoke(app, ["import", "acme/read-model"]).exit_code == 0  # config.json only, into the cache
    # every file, as transformers downloads them (huggingface_hub read its environment when first imported)
    snapshot_download("acme/downloaded-model", cache_dir=str(hf_cache.hub_cache_dir()), endpoint=hub.url)
    hub.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = runner.invoke(app, ["models", "--cached"])
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line.split()[2] for line in result.stdout.splitlines()[1:-1]}
    assert rows == {"acme/downloaded-model": "weights", "acme/read-model": "config"}
    doc = json.loads(runner.invoke(app, ["models", "--cached", "downloaded", "--json"]).stdout)
    assert [(entry["repo"], entry["has_weights"]) for entry in doc] == [("acme/downloaded-model", True)]
    assert hub.requests == []


def test_cached_and_hub_together_are_refused() -> None:
    result = runner.invoke(app, ["models", "--cached", "--hub", "x"])
    assert result.exit_code == 2
