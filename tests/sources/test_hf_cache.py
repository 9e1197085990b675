"""The Hugging Face cache as vramcalc reads it (standard library only) against what huggingface_hub itself
computes and writes: the folder the environment names, and the layout hf_hub_download and
snapshot_download leave (refs, snapshots, blobs named by SHA-256)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import hub_repos
import pytest
from hubserver import HubServer

from vramcalc.sources import hf_cache

_ENV_CASES = [
    {},
    {"XDG_CACHE_HOME": "/xdg"},
    {"XDG_CACHE_HOME": "/xdg", "HF_HOME": "/hf-home"},
    {"HF_HOME": "~/hf-home", "HUGGINGFACE_HUB_CACHE": "/legacy"},
    {"HF_HOME": "/hf-home", "HUGGINGFACE_HUB_CACHE": "/legacy", "HF_HUB_CACHE": "/hub-cache"},
    {"HF_HUB_CACHE": "$HOME/expanded"},
]
_VARIABLES = ("XDG_CACHE_HOME", "HF_HOME", "HUGGINGFACE_HUB_CACHE", "HF_HUB_CACHE")


def test_the_cache_folder_is_where_huggingface_hub_puts_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each environment, as huggingface_hub.constants computes it in a fresh interpreter, and as
    hf_cache does."""
    script = (
        "import importlib, json, os, sys\n"
        "from huggingface_hub import constants\n"
        "out = []\n"
        f"for case in json.loads(sys.argv[1]):\n"
        f"    for name in {_VARIABLES!r}:\n"
        "        os.environ.pop(name, None)\n"
        "    os.environ.update(case)\n"
        "    out.append(importlib.reload(constants).HF_HUB_CACHE)\n"
        "print(json.dumps(out))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in _VARIABLES}
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(_ENV_CASES)], capture_output=True, text=True, env=env, check=True
    )
    theirs = json.loads(done.stdout)
    ours = []
    for case in _ENV_CASES:
        for name in _VARIABLES:
            monkeypatch.delenv(name, raising=False)
        for name, value in case.items():
            monkeypatch.setenv(name, value)
        ours.append(str(hf_cache.hub_cache_dir()))
    assert ours == theirs
    assert theirs[0] == os.path.join(os.path.expanduser("~"), ".cache", "huggingface", "hub")


def _download(hub: HubServer, repo: str, *names: str, revision: str | None = None) -> list[Path]:
    from huggingface_hub import hf_hub_download

    cache = str(hf_cache.hub_cache_dir())
    return [Path(hf_hub_download(repo, name, revision=revision, cache_dir=cache, endpoint=hub.url)) for name in names]


def test_snapshot_commit_and_blob_hashes_of_what_huggingface_hub_downloaded(hub: HubServer, tmp_path: Path) -> None:
    folder = tmp_path / "repo"
    hub_repos.single_file_repo(folder)
    commit = hub.add_repo("org/single", folder, revisions={"v1": "a" * 40})
    config, weights = _download(hub, "org/single", "config.json", "model.safetensors")
    snapshot = hf_cache.hub_cache_dir() / "models--org--single" / "snapshots" / commit
    assert config.parent == snapshot
    assert hf_cache.cached_snapshot("org/single", None) == (snapshot, commit)
    assert hf_cache.cached_snapshot("org/single", "main") == (snapshot, commit)
    assert hf_cache.cached_snapshot("org/single", commit) == (snapshot, commit)
    assert hf_cache.cached_snapshot("org/single", "v1") is None  # never downloaded
    assert hf_cache.cached_snapshot("org/other", None) is None
    assert hf_cache.cached_snapshot("org/single", "../../../etc") is None
    # The LFS file's blob is named by its SHA-256; a small file's by its git SHA-1 (not a SHA-256).
    assert hf_cache.blob_sha256(weights) == hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    assert hf_cache.blob_sha256(config) is None
    assert hf_cache.blob_sha256(tmp_path / "absent") is None


def test_cached_models_agree_with_huggingface_hubs_scan(hub: HubServer, tmp_path: Path) -> None:
    from huggingface_hub import scan_cache_dir

    hub_repos.single_file_repo(tmp_path / "single")
    hub_repos.sharded_repo(tmp_path / "sharded")
    single = hub.add_repo("org/single", tmp_path / "single", revisions={"v1": "b" * 40})
    sharded = hub.add_repo("org/sharded", tmp_path / "sharded")
    _download(hub, "org/single", "config.json", "model.safetensors", "README.md")
    _download(hub, "org/single", "config.json", revision="v1")
    _download(hub, "org/sharded", "config.json", "model.safetensors.index.json")
    models = hf_cache.cached_models()
    assert [m.repo for m in models] == ["org/sharded", "org/single"]
    by_repo = {m.repo: m for m in models}
    assert by_repo["org/single"].refs == {"main": single, "v1": "b" * 40}
    assert set(by_repo["org/single"].commits) == {single, "b" * 40}
    assert by_repo["org/single"].has_weights and by_repo["org/single"].has_config
    assert by_repo["org/sharded"].commits == (sharded,) and by_repo["org/sharded"].refs == {"main": sharded}
    assert not by_repo["org/sharded"].has_weights and by_repo["org/sharded"].has_config
    scan = {info.repo_id: info for info in scan_cache_dir(hf_cache.hub_cache_dir()).repos}
    for model in models:
        theirs = scan[model.repo]
        assert model.size_on_disk == theirs.size_on_disk
        assert set(model.commits) == {revision.commit_hash for revision in theirs.revisions}
        assert model.refs == {ref: revision.commit_hash for ref, revision in theirs.refs.items()}
    assert by_repo["org/single"].size_on_disk == sum(
        (tmp_path / "single" / name).stat().st_size for name in ("config.json", "model.safetensors", "README.md")
    )


def test_no_cache_folder_is_no_model(hf_env: Path) -> None:
    assert hf_cache.cached_models() == []
    assert hf_cache.cached_snapshot("org/any", None) is None


def test_offline_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    assert not hf_cache.hub_offline()
    for value, offline in (("1", True), ("yes", True), ("ON", True), ("0", False), ("", False)):
        monkeypatch.setenv("HF_HUB_OFFLINE", value)
        assert hf_cache.hub_offline() is offline
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    assert hf_cache.hub_offline()
