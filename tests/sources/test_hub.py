"""A model by its Hub id, against a local Hub stand-in (tests/hubserver.py): configs downloaded into the
Hugging Face cache, weights read from their headers by range requests (never downloaded), the result
cached so a second look needs no network, and every failure one line naming the repository."""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import hub_repos
import numpy as np
import pytest
from hubserver import HubServer

from vramcalc.errors import ModelSourceError
from vramcalc.sources import header_cache, hf_cache
from vramcalc.sources.hub import HEADER_PREFIX_BYTES, cached_checkpoint, fetch_checkpoint, split_revision

WHERE = "--model"


def _weights_requests(hub: HubServer) -> list[tuple[str, str | None]]:
    """Every request for a weights file's bytes (through /resolve/ or the CDN), with its Range."""
    return [
        (r.method, r.range)
        for r in hub.requests
        if r.method == "GET" and (r.path.startswith("/cdn/") or r.path.endswith((".safetensors", ".gguf")))
    ]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_single_file_repo(hub: HubServer, tmp_path: Path) -> None:
    folder = tmp_path / "repo"
    expected = hub_repos.single_file_repo(folder)
    commit = hub.add_repo("org/single", folder)
    checkpoint = fetch_checkpoint("org/single", None, WHERE)
    assert checkpoint.weight_bytes == expected
    assert checkpoint.format == "safetensors"
    assert checkpoint.config == hub_repos.CONFIG
    assert checkpoint.origin.kind == "hub" and checkpoint.origin.commit == commit
    assert checkpoint.origin.repo == "org/single" and checkpoint.origin.revision is None
    [file] = checkpoint.files
    assert file.path == "model.safetensors" and file.metadata == {"format": "pt"}
    assert file.sha256 == _sha256(folder / "model.safetensors")
    assert checkpoint.bytes_by_dtype() == {"F16": 2 * 512, "F32": 2 * (2048 + 64), "I8": 6}
    # The weights came by one range request (redirected to the CDN), never whole.
    weights = _weights_requests(hub)
    assert weights and all(rng == f"bytes=0-{HEADER_PREFIX_BYTES - 1}" for _, rng in weights)
    assert sum(1 for r in hub.requests if r.path.startswith("/cdn/")) == 1
    # The token goes to the Hub, never to the CDN host the weights are redirected to.
    assert all(r.authorization == "Bearer hf_anonymous" for r in hub.requests if not r.path.startswith("/cdn/"))
    assert all(r.authorization is None for r in hub.requests if r.path.startswith("/cdn/"))
    # config.json went through hf_hub_download: it is in the Hugging Face cache, as huggingface_hub lays it out.
    snapshot, cached_commit = hf_cache.cached_snapshot("org/single", commit)  # type: ignore[misc]
    assert cached_commit == commit
    assert json.loads((snapshot / "config.json").read_text()) == hub_repos.CONFIG
    assert not (snapshot / "model.safetensors").exists()


def test_sharded_repo_reads_every_shard_named_by_the_index(hub: HubServer, tmp_path: Path) -> None:
    expected = hub_repos.sharded_repo(tmp_path / "repo", shards=4)
    hub.add_repo("org/sharded", tmp_path / "repo")
    checkpoint = fetch_checkpoint("org/sharded", None, WHERE)
    assert checkpoint.weight_bytes == expected
    assert [f.path for f in checkpoint.files] == [f"model-{i:05d}-of-00004.safetensors" for i in range(1, 5)]
    assert all(f.sha256 == _sha256(tmp_path / "repo" / f.path) for f in checkpoint.files)
    assert hub.count("GET", "model.safetensors.index.json") == 1
    assert sum(1 for r in hub.requests if r.path.startswith("/cdn/")) == 4  # one range read per shard


def test_a_header_longer_than_the_first_range_is_read_in_two(hub: HubServer, tmp_path: Path) -> None:
    expected = hub_repos.wide_header_repo(tmp_path / "repo", tensors=1500)
    hub.add_repo("org/wide", tmp_path / "repo")
    checkpoint = fetch_checkpoint("org/wide", None, WHERE)
    assert checkpoint.weight_bytes == expected and len(checkpoint.files[0].tensors) == 1500
    ranges = [r.range for r in hub.requests if r.path.startswith("/cdn/")]
    assert len(ranges) == 2 and ranges[0] == f"bytes=0-{HEADER_PREFIX_BYTES - 1}"
    assert ranges[1] is not None and ranges[1].startswith(f"bytes={HEADER_PREFIX_BYTES}-")


def test_diffusers_pipeline(hub: HubServer, tmp_path: Path) -> None:
    sizes = hub_repos.diffusers_repo(tmp_path / "repo")
    hub.add_repo("org/pipe", tmp_path / "repo")
    checkpoint = fetch_checkpoint("org/pipe", None, WHERE)
    assert checkpoint.pipeline is not None and checkpoint.pipeline["_class_name"] == "FluxPipeline"
    assert set(checkpoint.configs) == {"transformer", "vae"}
    assert checkpoint.configs["vae"]["latent_channels"] == 16
    # The plain files, not the fp16 variant beside the vae's.
    assert [f.path for f in checkpoint.files] == [
        "transformer/diffusion_pytorch_model.safetensors",
        "vae/diffusion_pytorch_model.safetensors",
    ]
    assert checkpoint.bytes_by_component() == sizes
    assert checkpoint.weight_bytes == sum(sizes.values())


def test_a_gguf_file_is_cached_and_read_alike_from_a_download(hub: HubServer, tmp_path: Path) -> None:
    from huggingface_hub import hf_hub_download

    hub_repos.gguf_repo(tmp_path / "repo")
    hub.add_repo("org/gguf", tmp_path / "repo")
    online = fetch_checkpoint("org/gguf", None, WHERE, filename="model-Q8_0.gguf")
    hub.clear()
    cached = cached_checkpoint("org/gguf", None, WHERE, "model-Q8_0.gguf")
    assert cached is not None and cached.files == online.files and cached.config == online.config
    assert cached_checkpoint("org/gguf", None, WHERE, "model-F16.gguf") is None  # another file: not read yet
    assert hub.requests == []
    hf_hub_download("org/gguf", "model-Q8_0.gguf", cache_dir=str(hf_cache.hub_cache_dir()), endpoint=hub.url)
    header_cache.repo_dir("org/gguf").joinpath("checkpoints").rename(tmp_path / "moved")
    downloaded = cached_checkpoint("org/gguf", None, WHERE, "model-Q8_0.gguf")
    assert downloaded is not None and downloaded.files == online.files


def test_gguf_repo_with_a_named_file(hub: HubServer, tmp_path: Path) -> None:
    sizes = hub_repos.gguf_repo(tmp_path / "repo")
    hub.add_repo("org/gguf", tmp_path / "repo")
    checkpoint = fetch_checkpoint("org/gguf", None, WHERE, filename="model-F16.gguf")
    assert checkpoint.format == "gguf"
    assert checkpoint.weight_bytes == sizes["model-F16.gguf"]
    assert checkpoint.files[0].sha256 == _sha256(tmp_path / "repo" / "model-F16.gguf")
    assert all(rng is not None for _, rng in _weights_requests(hub))  # by ranges only


def test_gguf_repo_without_a_file_named_asks_for_one(hub: HubServer, tmp_path: Path) -> None:
    hub_repos.gguf_repo(tmp_path / "repo")
    hub.add_repo("org/gguf", tmp_path / "repo")
    with pytest.raises(
        ModelSourceError,
        match=r"org/gguf: a GGUF repository; name the file to read as org/gguf/FILE.gguf \(model-F16.gguf, ",
    ):
        fetch_checkpoint("org/gguf", None, WHERE)
    with pytest.raises(ModelSourceError, match=r"no file 'nope.gguf' in the repository; its .gguf files: "):
        fetch_checkpoint("org/gguf", None, WHERE, filename="nope.gguf")
    assert _weights_requests(hub) == []


def test_a_revision_resolves_to_its_commit_and_a_commit_is_immutable(hub: HubServer, tmp_path: Path) -> None:
    hub_repos.single_file_repo(tmp_path / "repo")
    commit = hub.add_repo("org/single", tmp_path / "repo", revisions={"v1.0": "1" * 40})
    first = fetch_checkpoint("org/single", "v1.0", WHERE)
    assert first.origin.commit == "1" * 40 and first.origin.label == "org/single@v1.0"
    hub.clear()
    again = fetch_checkpoint("org/single", "1" * 40, WHERE)  # a commit already read: no request at all
    assert hub.requests == [] and again.files == first.files
    fetch_checkpoint("org/single", "main", WHERE)
    assert header_cache.resolved_commit("org/single", "main") == commit
    assert split_revision("org/single@v1.0") == ("org/single", "v1.0")
    assert split_revision("org/single") == ("org/single", None)


def test_second_run_offline_makes_no_request(hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = hub_repos.sharded_repo(tmp_path / "repo")
    hub.add_repo("org/sharded", tmp_path / "repo")
    online = fetch_checkpoint("org/sharded", None, WHERE)
    hub.clear()
    cached = cached_checkpoint("org/sharded", None)
    assert cached is not None and cached.origin.kind == "cache"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = fetch_checkpoint("org/sharded", None, WHERE)
    assert hub.requests == []
    assert offline.weight_bytes == expected and offline.files == online.files
    assert offline.config == online.config and offline.origin.commit == online.origin.commit


def test_offline_without_cache_is_one_error(hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelSourceError) as caught:
        fetch_checkpoint("org/absent", None, WHERE)
    assert str(caught.value).startswith("--model: org/absent: HF_HUB_OFFLINE is set")
    assert caught.value.stage == "hub" and "\n" not in str(caught.value)
    assert hub.requests == []
    assert cached_checkpoint("org/absent", None) is None


def test_a_snapshot_holding_the_weights_is_read_from_disk(hub: HubServer, tmp_path: Path) -> None:
    """A model huggingface_hub downloaded whole (snapshot_download against the stand-in) is read from the
    files themselves, with the blobs' names as SHA-256, and agrees with what the range reads found."""
    from huggingface_hub import snapshot_download

    expected = hub_repos.sharded_repo(tmp_path / "repo")
    commit = hub.add_repo("org/sharded", tmp_path / "repo")
    over_network = fetch_checkpoint("org/sharded", None, WHERE)
    path = snapshot_download("org/sharded", cache_dir=str(hf_cache.hub_cache_dir()), endpoint=hub.url)
    assert Path(path) == hf_cache.hub_cache_dir() / "models--org--sharded" / "snapshots" / commit
    hub.clear()
    header_cache.repo_dir("org/sharded").joinpath("checkpoints", f"{commit}.json").unlink()
    from_disk = cached_checkpoint("org/sharded", None)
    assert hub.requests == []
    assert from_disk is not None and from_disk.origin.kind == "cache" and from_disk.weight_bytes == expected
    assert from_disk.files == over_network.files  # tensors and SHA-256 alike


@pytest.mark.parametrize(
    "build",
    [
        hub_repos.single_file_repo,
        hub_repos.sharded_repo,
        hub_repos.diffusers_repo,
        hub_repos.sentence_transformers_repo,
    ],
)
def test_the_hub_picks_the_files_a_folder_of_the_same_repository_loads(
    hub: HubServer, tmp_path: Path, build: Callable[[Path], object]
) -> None:
    """Read from the Hub by range requests or from a folder on disk, a repository is the same checkpoint."""
    from vramcalc.sources.local import read_local

    build(tmp_path / "repo")
    hub.add_repo("org/model", tmp_path / "repo")
    remote = fetch_checkpoint("org/model", None, WHERE)
    local = read_local(tmp_path / "repo", WHERE)
    assert [(f.path, f.tensors, f.metadata) for f in remote.files] == [
        (f.path, f.tensors, f.metadata) for f in local.files
    ]
    assert (remote.config, remote.pipeline, remote.configs) == (local.config, local.pipeline, local.configs)


def _error(repo: str, revision: str | None = None, **kwargs: str) -> ModelSourceError:
    with pytest.raises(ModelSourceError) as caught:
        fetch_checkpoint(repo, revision, WHERE, **kwargs)
    error = caught.value
    assert "\n" not in str(error) and str(error).startswith(f"{WHERE}: {repo}")
    assert error.stage == "hub"
    return error


def test_gated_repository(hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = hub_repos.single_file_repo(tmp_path / "repo")
    hub.add_repo("org/gated", tmp_path / "repo", gated=True)
    message = str(_error("org/gated"))
    assert "gated repository" in message and "HF_TOKEN" in message and f"{hub.url}/org/gated" in message
    monkeypatch.setenv("HF_TOKEN", "hf_granted")  # a token that was granted access
    assert fetch_checkpoint("org/gated", None, WHERE).weight_bytes == expected


def test_repository_not_found(hub: HubServer) -> None:
    assert "repository not found" in str(_error("org/missing"))


def test_revision_not_found(hub: HubServer, tmp_path: Path) -> None:
    hub_repos.single_file_repo(tmp_path / "repo")
    hub.add_repo("org/single", tmp_path / "repo")
    assert "revision 'nope' not found" in str(_error("org/single", "nope"))


def test_server_error(hub: HubServer, tmp_path: Path) -> None:
    hub_repos.single_file_repo(tmp_path / "repo")
    hub.add_repo("org/single", tmp_path / "repo")
    hub.status = 500
    start = time.monotonic()
    assert "the Hub answered 500 (a server error)" in str(_error("org/single"))
    assert time.monotonic() - start < 3
    assert len(hub.requests) == 1  # not retried


@pytest.mark.parametrize(
    ("status", "header", "expected"),
    [
        (401, "Invalid credentials in Authorization header", "the Hub refused the token (401): check HF_TOKEN"),
        (403, "Forbidden", "access denied (403): set HF_TOKEN"),
        (429, "Too Many Requests", "rate-limiting requests (429)"),
        (503, "Service Unavailable", "the Hub answered 503 (a server error)"),
    ],
)
def test_http_errors(hub: HubServer, status: int, header: str, expected: str) -> None:
    hub.status, hub.error_message = status, header
    assert expected in str(_error("org/any"))
    assert len(hub.requests) == 1


def test_slow_server_times_out_once(hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hub_repos.single_file_repo(tmp_path / "repo")
    hub.add_repo("org/single", tmp_path / "repo")
    monkeypatch.setenv("VRAMCALC_HUB_TIMEOUT", "0.3")
    hub.delay = 3.0
    start = time.monotonic()
    message = str(_error("org/single"))
    assert time.monotonic() - start < 1.5
    assert "no answer from" in message and "within 0.3 s" in message
    assert len(hub.requests) == 1


def test_slow_weights_time_out(hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that answers the API but stalls on the weights: each range read is bounded too."""
    hub_repos.single_file_repo(tmp_path / "repo")
    hub.add_repo("org/single", tmp_path / "repo")
    monkeypatch.setenv("VRAMCALC_HUB_TIMEOUT", "0.3")
    real = hub.record

    def stall_on_weights(request):  # type: ignore[no-untyped-def]
        real(request)
        if request.path.startswith("/cdn/"):
            time.sleep(2)

    monkeypatch.setattr(hub, "record", stall_on_weights)
    start = time.monotonic()
    assert "within 0.3 s" in str(_error("org/single"))
    assert time.monotonic() - start < 1.5


def test_connection_refused(hf_env: Path) -> None:
    assert "cannot reach http://127.0.0.1:9" in str(_error("org/any"))


def test_repository_without_config_or_weights(hub: HubServer, tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "README.md").write_text("nothing here\n")
    hub.add_repo("org/empty", tmp_path / "repo")
    assert "no config.json and no .safetensors or .gguf weights" in str(_error("org/empty"))


def test_config_only_repository_is_refused_with_what_it_lacks(hub: HubServer, tmp_path: Path) -> None:
    hub_repos.write_json(tmp_path / "repo" / "config.json", hub_repos.CONFIG)
    (tmp_path / "repo" / "pytorch_model.bin").write_bytes(b"\0" * 64)
    hub.add_repo("org/bin", tmp_path / "repo")
    assert "config.json but no .safetensors weights" in str(_error("org/bin"))


def test_invalid_repository_ids_and_timeouts(hf_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ModelSourceError, match="is not a Hub repository id"):
        fetch_checkpoint("../../etc", None, WHERE)
    monkeypatch.setenv("VRAMCALC_HUB_TIMEOUT", "soon")
    with pytest.raises(ModelSourceError, match="VRAMCALC_HUB_TIMEOUT"):
        fetch_checkpoint("org/any", None, WHERE)


def test_importing_the_sources_does_not_import_huggingface_hub() -> None:
    import subprocess

    code = (
        "import sys, vramcalc.sources.hub, vramcalc.sources.hf_cache, vramcalc.sources.header_cache;"
        "print('huggingface_hub' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_a_stalled_config_download_is_abandoned(
    hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """huggingface_hub retries a timed-out download with a 60 s timeout, five times: the look-up gives up
    after a few of vramcalc's timeouts instead."""
    import threading

    hub_repos.single_file_repo(tmp_path / "repo")
    hub.add_repo("org/stalled", tmp_path / "repo")
    monkeypatch.setenv("VRAMCALC_HUB_TIMEOUT", "0.2")
    release = threading.Event()
    real = hub.record

    def stall_on_config(request):  # type: ignore[no-untyped-def]
        real(request)
        if request.path.endswith("/config.json"):
            release.wait(10)

    monkeypatch.setattr(hub, "record", stall_on_config)
    start = time.monotonic()
    assert "within 0.2 s" in str(_error("org/stalled"))
    assert time.monotonic() - start < 2.5
    # The abandoned download, answered now, ends before this server stops (its retries reach no other test).
    release.set()
    for thread in threading.enumerate():
        if thread.name == "vramcalc-hub":
            thread.join(10)


def test_a_pipeline_downloaded_in_part_is_not_read_from_the_snapshot(hub: HubServer, tmp_path: Path) -> None:
    from huggingface_hub import hf_hub_download

    sizes = hub_repos.diffusers_repo(tmp_path / "repo")
    hub.add_repo("org/pipe", tmp_path / "repo")
    online = fetch_checkpoint("org/pipe", None, WHERE)
    # Only the transformer's weights downloaded beside the configs: the snapshot is not the pipeline.
    hf_hub_download(
        "org/pipe",
        "transformer/diffusion_pytorch_model.safetensors",
        cache_dir=str(hf_cache.hub_cache_dir()),
        endpoint=hub.url,
    )
    hub.clear()
    cached = cached_checkpoint("org/pipe", None, where=WHERE)
    assert hub.requests == []
    assert cached is not None and cached.bytes_by_component() == sizes and cached.files == online.files
    assert cached.pipeline == online.pipeline and cached.configs == online.configs


def test_messages_name_the_repository_once(hub: HubServer) -> None:
    with pytest.raises(ModelSourceError) as caught:
        fetch_checkpoint("org/missing", "v2", "org/missing@v2")
    assert str(caught.value).startswith("org/missing@v2: repository not found")


def test_gated_weights_without_a_config(hub: HubServer, tmp_path: Path) -> None:
    """The range read itself meets the gate (no config.json downloaded first)."""
    hub_repos.save_tensors(tmp_path / "repo" / "model.safetensors", hub_repos.layer_tensors(0))
    hub.add_repo("org/gated", tmp_path / "repo", gated=True)
    assert "gated repository" in str(_error("org/gated"))


def test_a_server_that_ignores_range_is_read_only_as_far_as_the_header(hub: HubServer, tmp_path: Path) -> None:
    expected = hub_repos.save_tensors(
        tmp_path / "repo" / "model.safetensors", {"big": np.zeros((512, 1024), dtype=np.float32)}
    )
    hub.add_repo("org/norange", tmp_path / "repo")
    hub.ignore_range = True
    assert fetch_checkpoint("org/norange", None, WHERE).weight_bytes == expected == 2 * 1024 * 1024


def test_range_reader_reads_a_file_as_it_is(hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``read(n)`` a GGUF header is parsed through: the file's bytes in order, fetched in doubling ranges."""
    from vramcalc.sources import hub as hub_module

    data = np.random.default_rng(0).integers(0, 256, 300_000, dtype=np.uint8).tobytes()
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "blob.gguf").write_bytes(data)
    commit = hub.add_repo("org/blob", tmp_path / "repo")
    monkeypatch.setattr(hub_module, "GGUF_FIRST_CHUNK", 10_000)
    context = hub_module._context("org/blob", None, WHERE)
    read = hub_module._Ranges(context, commit).reader("blob.gguf", len(data))
    out = b"".join(read(n) for n in (4, 4, 8, 5000, 20_000, 1, 100_000))
    out += read(1_000_000)  # past the end: what is left
    assert out == data and read(10) == b""
    ranges = [r.range for r in hub.requests if r.path.startswith("/cdn/")]
    # Each range at least double the one before (or what a read asks for), none past the end of the file.
    assert ranges == ["bytes=0-9999", "bytes=10000-29999", "bytes=30000-125016", "bytes=125017-299999"]


def test_an_unreadable_header_cache_file_counts_as_missing(hub: HubServer, tmp_path: Path) -> None:
    expected = hub_repos.single_file_repo(tmp_path / "repo")
    commit = hub.add_repo("org/single", tmp_path / "repo")
    fetch_checkpoint("org/single", None, WHERE)
    stored = header_cache.repo_dir("org/single") / "checkpoints" / f"{commit}.json"
    stored.write_text('{"format_version": 1, "files": [')
    assert cached_checkpoint("org/single", None) is None
    assert fetch_checkpoint("org/single", None, WHERE).weight_bytes == expected  # read again, and rewritten
    assert cached_checkpoint("org/single", None) is not None


def test_the_public_hub_is_the_default_and_unreachable_from_the_tests(
    hf_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HF_ENDPOINT")
    start = time.monotonic()
    assert "cannot reach https://huggingface.co" in str(_error("org/any"))
    assert time.monotonic() - start < 2


def test_a_repositorys_headers_together_are_bounded(
    hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shards' headers, read in parallel, share one total: with room for three of the four, one shard
    (whichever thread comes last) is refused at the header stage."""
    from vramcalc.sources import safetensors_header

    hub_repos.sharded_repo(tmp_path / "repo", shards=4)
    lengths = [
        int.from_bytes(path.read_bytes()[:8], "little") for path in sorted((tmp_path / "repo").glob("*.safetensors"))
    ]
    assert len(lengths) == 4 and len(set(lengths)) == 1  # alike shards: any three fill the room
    hub.add_repo("org/sharded", tmp_path / "repo")
    monkeypatch.setattr(safetensors_header, "MAX_TOTAL_HEADER_BYTES", 3 * lengths[0])
    with pytest.raises(
        ModelSourceError,
        match=r"model-0000\d-of-00004\.safetensors: the checkpoint's safetensors "
        r"headers hold more than [\d,]+ bytes together",
    ) as caught:
        fetch_checkpoint("org/sharded", None, WHERE)
    assert caught.value.stage == "header"
