"""A model by its Hub id (``org/name[@revision]``): its configs and weights headers, over the network.

:func:`fetch_checkpoint` resolves the revision to a commit (``/api/models/{repo}/revision/{rev}``),
downloads the small JSON files with ``hf_hub_download`` (so they land in the Hugging Face cache, where
transformers finds them too): ``config.json``, a Diffusers pipeline's ``model_index.json`` and its
component folders' ``config.json``, a sharded checkpoint's ``*.safetensors.index.json``. The weights are
never downloaded: each safetensors file's header is read with HTTP ``Range`` requests (the first
:data:`HEADER_PREFIX_BYTES`, then the rest of the header when it is longer), several files at a time;
a GGUF file's metadata and tensor table are read the same way, in growing ranges. Each file's SHA-256
is the Hub's LFS object id.

The result is kept in vramcalc's own cache (:mod:`vramcalc.sources.header_cache`), keyed by
repository and commit; :func:`cached_checkpoint` answers from the Hugging Face cache's snapshot (when it
holds the weights files themselves) or from that cache, and never touches the network.

The environment: ``HF_ENDPOINT`` (a mirror or a private Hub), ``HF_TOKEN`` (gated and private
repositories; else the token ``hf auth login`` saved), ``HF_HUB_OFFLINE=1`` (the caches only),
``VRAMCALC_HUB_TIMEOUT`` (seconds each request may take, default 10). Requests are not retried: each
JSON file gets one HEAD of vramcalc's own before ``hf_hub_download``, so an error status is reported as
the server gave it, not after huggingface_hub's half-minute of retries; a download that huggingface_hub
retries anyway (a cut body) is abandoned past a few timeouts, so a look-up never hangs, and its retries
are not logged (:func:`_drop_download_logs`). Every failure is one
:class:`~vramcalc.errors.ModelSourceError` line naming the repository.

``huggingface_hub`` is imported inside the functions that go to the network, never at import time.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from vramcalc.errors import ModelSourceError, SpecError
from vramcalc.files import read_json
from vramcalc.sources import header_cache, hf_cache
from vramcalc.sources.checkpoint import MAX_FILES, MAX_JSON_BYTES, TRANSFORMERS_WEIGHTS, Checkpoint, Origin, TensorFile
from vramcalc.sources.hf_cache import COMMIT_RE

#: The Hub when ``HF_ENDPOINT`` is not set.
DEFAULT_ENDPOINT = "https://huggingface.co"
#: Seconds one request may take when ``VRAMCALC_HUB_TIMEOUT`` is not set.
DEFAULT_TIMEOUT = 10.0
#: Bytes asked for first from each safetensors file: the whole header of most files (a header is about
#: 100 bytes per tensor), so one request per file is the rule.
HEADER_PREFIX_BYTES = 100_000
#: Requests in flight at once when reading many shards' headers.
MAX_PARALLEL = 8
#: The first range read of a GGUF file; each further read doubles, up to :data:`GGUF_MAX_CHUNK`.
GGUF_FIRST_CHUNK = 1 << 20
GGUF_MAX_CHUNK = 16 << 20
#: A Hub repository id: ``name`` or ``org/name`` (huggingface_hub's own rule, 96 characters a part).
REPO_RE = re.compile(r"(?:[\w.-]{1,96}/)?[\w.-]{1,96}")


@dataclass(frozen=True)
class _Hub:
    """One look-up: the repository, the revision asked for, where messages point, and how to ask."""

    repo: str
    revision: str
    asked: str | None
    label: str
    where: str
    endpoint: str
    token: str | None
    timeout: float

    @property
    def prefix(self) -> str:
        """What messages start with: where the name was given, and the name (once where ``where`` names it)."""
        if not self.where:
            return self.label
        return (
            self.where if self.where.endswith(self.label) or self.repo in self.where else f"{self.where}: {self.label}"
        )

    def fail(self, what: str, stage: str = "hub") -> ModelSourceError:
        return ModelSourceError(f"{self.prefix}: {what}", stage)


def hub_endpoint() -> str:
    """``HF_ENDPOINT`` without its trailing slash, else the public Hub."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def hub_timeout() -> float:
    """Seconds one request may take: ``VRAMCALC_HUB_TIMEOUT``, else :data:`DEFAULT_TIMEOUT`."""
    text = os.environ.get("VRAMCALC_HUB_TIMEOUT", "").strip()
    if not text:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise ModelSourceError(f"VRAMCALC_HUB_TIMEOUT: expected seconds between 0 and 3600, got {text!r}", "hub")
    return value


def split_revision(name: str) -> tuple[str, str | None]:
    """``org/name@rev`` -> (``org/name``, ``rev``); no ``@``: the revision is None (``main``)."""
    repo, at, revision = name.partition("@")
    return repo, (revision if at else None)


def _label(repo: str, revision: str | None) -> str:
    return f"{repo}@{revision}" if revision else repo


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


# Which files a checkpoint loads, from a repository's file names (as vramcalc.sources.local picks them
# from a folder, so a model reads the same from the Hub as from its download).


def _in_folder(names: Collection[str], folder: str) -> list[str]:
    """The file names directly in ``folder`` ('' for the top), without the folder."""
    prefix = f"{folder}/" if folder else ""
    return sorted(name[len(prefix) :] for name in names if name.startswith(prefix) and "/" not in name[len(prefix) :])


def _shard_names(index: Any, index_name: str, hub: _Hub) -> list[str]:
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(value, str) for value in weight_map.values()):
        raise hub.fail(f"{index_name}: weight_map must map tensor names to file names", "config")
    names = sorted(set(weight_map.values()))
    if len(names) > MAX_FILES:
        raise hub.fail(f"{index_name} names {len(names):,} files (at most {MAX_FILES:,})", "config")
    for name in names:
        if "/" in name or "\\" in name or name in ("", ".", ".."):
            raise hub.fail(f"{index_name}: {name!r} is not a file beside the index", "config")
    return names


def _weights_in(
    names: Collection[str], folder: str, read_index: Callable[[str], Any], hub: _Hub
) -> tuple[list[str], str | None]:
    """The safetensors files (repository paths) a transformers model or Diffusers component in ``folder``
    loads, and the shard index that named them (None for a single file)."""
    here = set(_in_folder(names, folder))
    prefix = f"{folder}/" if folder else ""
    for base in TRANSFORMERS_WEIGHTS:
        index = f"{base}.index.json"
        if index in here:
            shards = _shard_names(read_index(prefix + index), prefix + index, hub)
            missing = [name for name in shards if name not in here]
            if missing:
                raise hub.fail(f"{prefix}{index} names {missing[0]}, which is not in the repository", "config")
            return [prefix + name for name in shards], prefix + index
        if base in here:
            return [prefix + base], None
    found = sorted(name for name in here if name.endswith(".safetensors"))
    plain = [name for name in found if not name.startswith("consolidated")]
    return [prefix + name for name in plain or found], None


# Requests.


#: The name of the threads that download with huggingface_hub (its log records from them are dropped).
DOWNLOAD_THREAD = "vramcalc-hub"


def _drop_download_logs(record: logging.LogRecord) -> bool:
    """huggingface_hub logs each retry of a failed download to standard error; vramcalc reports the
    failure itself, in one line, so the records of its download threads are dropped (only those: the
    library logs as it did for everything else a program does with it)."""
    return record.threadName != DOWNLOAD_THREAD


#: huggingface_hub's modules a download logs through (a logger's filters see only its own records).
DOWNLOAD_LOGGERS = ("huggingface_hub.file_download", "huggingface_hub.utils._http")


def _quiet_downloads() -> None:
    """Install :func:`_drop_download_logs` on the loggers of huggingface_hub's download code, once."""
    for name in DOWNLOAD_LOGGERS:
        logger = logging.getLogger(name)
        if _drop_download_logs not in logger.filters:
            logger.addFilter(_drop_download_logs)


def _in_daemon_threads(call: Callable[[str], Any], names: list[str], seconds: float) -> dict[str, Any]:
    """``call(name)`` for each name, :data:`MAX_PARALLEL` at a time in daemon threads, given up after
    ``seconds`` in all: huggingface_hub retries a failed download several times with longer timeouts,
    which must hold neither a look-up nor the interpreter's exit hostage (a pool's threads would)."""
    _quiet_downloads()
    outcome: dict[str, Any] = {}
    failures: list[BaseException] = []
    gate = threading.Semaphore(MAX_PARALLEL)

    def run(name: str) -> None:
        with gate:
            try:
                outcome[name] = call(name)
            except BaseException as exc:
                failures.append(exc)

    threads = [threading.Thread(target=run, args=(name,), name=DOWNLOAD_THREAD, daemon=True) for name in names]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + seconds
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
        if failures:
            raise failures[0]
    if any(thread.is_alive() for thread in threads):
        raise TimeoutError(f"downloading {', '.join(names)} took longer than {seconds:g} s")
    return outcome


def _download_folder() -> str:
    """Where downloads go: the Hugging Face cache where it can be written, else (a read-only shared cache,
    a path through a file) a temporary folder for this run, removed when the command ends. A cache that
    cannot be written costs the cache, not the answer."""
    folder = hf_cache.hub_cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if os.access(folder, os.W_OK):
            return str(folder)
    except OSError:
        pass
    import atexit
    import shutil
    import tempfile

    temporary = tempfile.mkdtemp(prefix="vramcalc-hf-")
    atexit.register(shutil.rmtree, temporary, ignore_errors=True)
    return temporary


def _download_json(hub: _Hub, commit: str, names: list[str]) -> dict[str, Any]:
    """Download small JSON files with ``hf_hub_download`` (into the Hugging Face cache, or a temporary
    folder where it cannot be written), in parallel, and parse them; the whole batch is bounded by a few
    request timeouts."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url

    cache_dir = _download_folder()

    def one(name: str) -> str:
        # One HEAD without retries first: where it fails, hf_hub_download retries with backoff for half
        # a minute (429 and 5xx answers), logging each try, and the server's answer would come too late.
        url = hf_hub_url(hub.repo, name, revision=commit, endpoint=hub.endpoint)
        get_hf_file_metadata(url, token=hub.token, timeout=hub.timeout, library_name="vramcalc")
        return str(
            hf_hub_download(
                hub.repo,
                name,
                revision=commit,
                cache_dir=cache_dir,
                endpoint=hub.endpoint,
                token=hub.token,
                etag_timeout=hub.timeout,
                library_name="vramcalc",
            )
        )

    paths = _in_daemon_threads(one, names, 3 * hub.timeout + 1)
    parsed: dict[str, Any] = {}
    for name in names:
        try:
            parsed[name] = read_json(Path(paths[name]), MAX_JSON_BYTES, "model JSON files")
        except SpecError as exc:
            raise hub.fail(f"{name}: {_one_line(str(exc))}", "config") from None
    return parsed


class _Ranges:
    """Byte ranges of files at one commit, by HTTP ``Range`` requests through huggingface_hub's session
    (its proxies, certificates and user agent; redirects to the CDN followed, the token not sent there)."""

    def __init__(self, hub: _Hub, commit: str) -> None:
        from huggingface_hub import hf_hub_url
        from huggingface_hub.utils import build_hf_headers, get_session

        from vramcalc.sources.safetensors_header import HeaderAllowance

        self.hub = hub
        self.commit = commit
        self.url = lambda name: hf_hub_url(hub.repo, name, revision=commit, endpoint=hub.endpoint)
        self.headers = build_hf_headers(token=hub.token, library_name="vramcalc")
        self.session = get_session()
        self.allowance = HeaderAllowance()  # the checkpoint's headers together

    def get(self, name: str, start: int, end: int) -> bytes:
        """Bytes ``start`` to ``end`` (inclusive) of ``name``; fewer where the file ends sooner. A server
        that ignores ``Range`` is read only as far as needed."""
        from huggingface_hub.utils import hf_raise_for_status

        want = end - start + 1
        headers = {**self.headers, "Range": f"bytes={start}-{end}", "Accept-Encoding": "identity"}
        # Each read is bounded in all, not only between packets: a few timeouts, plus a second per MB asked.
        limit = 2 * self.hub.timeout + want / 1_000_000
        deadline = time.monotonic() + limit
        with self.session.stream(
            "GET", self.url(name), headers=headers, timeout=self.hub.timeout, follow_redirects=True
        ) as response:
            if response.status_code == 416:
                return b""
            if response.status_code >= 400:
                response.read()
                hf_raise_for_status(response)
            skip = start if response.status_code == 200 else 0
            if response.status_code == 206:
                content_range = response.headers.get("Content-Range", "")
                if not content_range.startswith(f"bytes {start}-"):
                    raise self.hub.fail(f"{name}: the server answered range {content_range!r} to bytes={start}-{end}")
            data = bytearray()
            for chunk in response.iter_bytes():
                if skip:
                    dropped = min(skip, len(chunk))
                    chunk, skip = chunk[dropped:], skip - dropped
                data += chunk
                if len(data) >= want:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"reading {name} took longer than {limit:g} s")
        return bytes(data[:want])

    def safetensors_header(self, name: str, sha256: str | None) -> TensorFile:
        from vramcalc.sources.safetensors_header import header_length, parse_safetensors_header

        where = f"{self.hub.prefix}: {name}"
        prefix = self.get(name, 0, HEADER_PREFIX_BYTES - 1)
        length = header_length(prefix, where)
        self.allowance.take(length, where)
        raw = prefix[8 : 8 + length]
        if len(raw) < length:
            raw += self.get(name, len(prefix), 8 + length - 1)
        if len(raw) < length:
            raise ModelSourceError(f"{where}: the file ends inside its {length:,}-byte header", "header")
        return parse_safetensors_header(raw, name, where, sha256)

    def reader(self, name: str, size: int | None) -> Callable[[int], bytes]:
        """A ``read(n)`` over ``name`` (as a file's), fetching ranges ahead in doubling chunks."""
        state = {"offset": 0, "start": 0, "chunk": GGUF_FIRST_CHUNK}
        buffer = bytearray()

        def read(count: int) -> bytes:
            if count <= 0:
                return b""
            offset = state["offset"]
            end = offset + count
            while state["start"] + len(buffer) < end:
                have = state["start"] + len(buffer)
                if size is not None and have >= size:
                    break
                span = max(end - have, state["chunk"])
                if size is not None:
                    span = min(span, size - have)
                state["chunk"] = min(2 * state["chunk"], GGUF_MAX_CHUNK)
                data = self.get(name, have, have + span - 1)
                if not data:
                    break
                buffer.extend(data)
            begin = offset - state["start"]
            out = bytes(buffer[begin : begin + count])
            state["offset"] = offset + len(out)
            del buffer[: state["offset"] - state["start"]]  # nothing before the offset is read again
            state["start"] = state["offset"]
            return out

        return read


def _parallel(call: Callable[[str], TensorFile], names: list[str]) -> tuple[TensorFile, ...]:
    if len(names) <= 1:
        return tuple(call(name) for name in names)
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(names)), thread_name_prefix="vramcalc-range")
    try:
        futures = [pool.submit(call, name) for name in names]
        return tuple(future.result() for future in futures)
    finally:  # on a failure, the reads not started are dropped (those in flight end within their timeout)
        pool.shutdown(wait=False, cancel_futures=True)


# Errors.


def _chain(exc: BaseException) -> Iterable[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _named(exc: BaseException, *names: str) -> bool:
    return any(klass.__name__ in names for klass in type(exc).__mro__)


def hub_error(hub: _Hub, exc: BaseException) -> ModelSourceError:
    """One line for whatever went wrong talking to the Hub (huggingface_hub's errors, the HTTP client's,
    the operating system's), naming the repository and what to do about it."""
    for cause in _chain(exc):
        if isinstance(cause, ModelSourceError):
            return cause
        if _named(cause, "GatedRepoError"):
            return hub.fail(
                f"gated repository: accept its licence on {hub.endpoint}/{hub.repo} and set HF_TOKEN "
                "to a token of the account that accepted it"
            )
        if _named(cause, "DisabledRepoError"):
            return hub.fail("the repository is disabled on the Hub")
        if _named(cause, "RevisionNotFoundError"):
            return hub.fail(f"revision {hub.revision!r} not found (a branch, tag or full commit id)")
        if _named(cause, "RepositoryNotFoundError"):
            return hub.fail(
                f"repository not found on {hub.endpoint} (a private repository needs HF_TOKEN set to a token "
                "with access)"
            )
        if _named(cause, "EntryNotFoundError", "RemoteEntryNotFoundError"):
            return hub.fail(f"a file is missing from the repository ({_one_line(str(cause), 160)})")
        if _named(cause, "OfflineModeIsEnabled"):
            return hub.fail("HF_HUB_OFFLINE is set and the model is not in the local cache")
        status = getattr(getattr(cause, "response", None), "status_code", None)
        if isinstance(status, int) and status >= 400 and _named(cause, "HfHubHTTPError", "HTTPStatusError"):
            if status == 401:
                return hub.fail("the Hub refused the token (401): check HF_TOKEN, or unset it for a public model")
            if status == 403:
                return hub.fail(
                    f"access denied (403): set HF_TOKEN to a token with access, or accept the licence on "
                    f"{hub.endpoint}/{hub.repo}"
                )
            if status == 429:
                return hub.fail("the Hub is rate-limiting requests (429): try again later, or set HF_TOKEN")
            if status >= 500:
                return hub.fail(f"the Hub answered {status} (a server error): try again later")
            return hub.fail(f"the Hub answered {status}: {_one_line(str(cause), 160)}")
        if isinstance(cause, TimeoutError) or _named(cause, "TimeoutException", "Timeout"):
            return hub.fail(
                f"no answer from {hub.endpoint} within {hub.timeout:g} s (VRAMCALC_HUB_TIMEOUT sets the "
                "limit; HF_HUB_OFFLINE=1 uses the local cache only)"
            )
        if isinstance(cause, ConnectionError) or _named(cause, "ConnectError", "NetworkError", "ProxyError"):
            return hub.fail(
                f"cannot reach {hub.endpoint} ({_one_line(str(cause), 120) or type(cause).__name__}); "
                "HF_HUB_OFFLINE=1 uses the local cache only"
            )
    return hub.fail(f"could not read the model from {hub.endpoint}: {type(exc).__name__}: {_one_line(str(exc), 200)}")


# The network.


def _context(repo: str, revision: str | None, where: str) -> _Hub:
    if not REPO_RE.fullmatch(repo) or ".." in repo or repo.startswith(("-", ".")):
        raise ModelSourceError(f"{where}: {repo!r} is not a Hub repository id (org/name[@revision])", "hub")
    rev = revision or "main"
    if not rev or len(rev) > 256 or any(ch.isspace() or ord(ch) < 32 for ch in rev):
        raise ModelSourceError(f"{where}: {_label(repo, revision)!r}: not a valid revision", "hub")
    token = os.environ.get("HF_TOKEN") or None
    return _Hub(repo, rev, revision, _label(repo, revision), where, hub_endpoint(), token, hub_timeout())


def fetch_checkpoint(repo: str, revision: str | None, where: str, filename: str | None = None) -> Checkpoint:
    """The checkpoint of Hub repository ``repo`` at ``revision`` (None: ``main``): configs downloaded,
    weights read from their headers by range requests (``filename``: the GGUF, or single safetensors,
    file to read in a repository of several). Answers from the caches, with no request, when offline
    (``HF_HUB_OFFLINE``) or when ``revision`` is a commit already read. Every failure is one
    :class:`ModelSourceError` line (stage ``hub``, ``config`` or ``header``) naming the repository."""
    hub = _context(repo, revision, where)
    if hf_cache.hub_offline() or COMMIT_RE.fullmatch(hub.revision):
        cached = cached_checkpoint(repo, revision, where=where, filename=filename)
        if cached is not None:
            return cached
        if hf_cache.hub_offline():
            raise hub.fail("HF_HUB_OFFLINE is set and the model is not in the local cache (unset it to ask the Hub)")
    try:
        return _fetch(hub, filename)
    except ModelSourceError:
        raise
    except Exception as exc:  # the boundary: whatever huggingface_hub or the network raised
        raise hub_error(hub, exc) from None


def _fetch(hub: _Hub, filename: str | None) -> Checkpoint:
    from huggingface_hub import HfApi

    api = HfApi(endpoint=hub.endpoint, token=hub.token, library_name="vramcalc")
    info = api.model_info(hub.repo, revision=hub.revision, files_metadata=True, timeout=hub.timeout)
    commit = info.sha
    if not isinstance(commit, str) or not COMMIT_RE.fullmatch(commit):
        raise hub.fail(f"the Hub gave no commit id for revision {hub.revision!r}")
    origin = Origin("hub", hub.label, hub.repo, hub.asked, commit)
    known = _cached_at(hub, commit, origin, filename)
    if known is not None:
        header_cache.store_ref(hub.repo, hub.revision, commit)
        return known
    siblings = {sibling.rfilename: sibling for sibling in info.siblings or []}
    names = set(siblings)
    sha256 = {name: s.lfs.sha256 for name, s in siblings.items() if s.lfs is not None and s.lfs.sha256}
    sizes = {name: s.lfs.size if s.lfs is not None else s.size for name, s in siblings.items()}
    ranges = _Ranges(hub, commit)

    if filename is not None:
        checkpoint = _named_file(hub, commit, origin, names, filename, sha256, sizes, ranges)
    else:
        checkpoint = _repository(hub, commit, origin, names, sha256, ranges)
    header_cache.store(checkpoint, filename)
    return checkpoint


def _named_file(
    hub: _Hub,
    commit: str,
    origin: Origin,
    names: set[str],
    filename: str,
    sha256: dict[str, str],
    sizes: dict[str, int | None],
    ranges: _Ranges,
) -> Checkpoint:
    if filename not in names:
        ggufs = sorted(name for name in names if name.endswith(".gguf"))
        shown = f"; its .gguf files: {', '.join(ggufs[:5])}{', ...' if len(ggufs) > 5 else ''}" if ggufs else ""
        raise hub.fail(f"no file {filename!r} in the repository{shown}")
    if filename.endswith(".gguf"):
        from vramcalc.sources.gguf_header import gguf_config, parse_gguf_header

        where = f"{hub.prefix}: {filename}"
        size = sizes.get(filename)
        file = parse_gguf_header(ranges.reader(filename, size), filename, where, file_size=size)
        if file.sha256 is None and filename in sha256:
            file = replace(file, sha256=sha256[filename])
        return Checkpoint(origin, "gguf", (file,), gguf_config(file.metadata, where))
    if filename.endswith(".safetensors"):
        folder = filename.rsplit("/", 1)[0] + "/" if "/" in filename else ""
        config_name = f"{folder}config.json"
        config = _download_json(hub, commit, [config_name])[config_name] if config_name in names else None
        if config is not None and not isinstance(config, dict):
            raise hub.fail(f"{config_name}: expected a JSON object", "config")
        file = ranges.safetensors_header(filename, sha256.get(filename))
        return Checkpoint(origin, "safetensors", (file,), config)
    raise hub.fail(f"{filename!r} is not a .safetensors or .gguf file")


def _repository(
    hub: _Hub, commit: str, origin: Origin, names: set[str], sha256: dict[str, str], ranges: _Ranges
) -> Checkpoint:
    first: list[str] = [name for name in ("config.json", "model_index.json", "modules.json") if name in names]
    first += [f"{base}.index.json" for base in TRANSFORMERS_WEIGHTS if f"{base}.index.json" in names]
    documents = _download_json(hub, commit, first) if first else {}

    def mapping(name: str) -> dict[str, Any]:
        value = documents[name]
        if not isinstance(value, dict):
            raise hub.fail(f"{name}: expected a JSON object", "config")
        return value

    config = mapping("config.json") if "config.json" in documents else None
    pipeline = mapping("model_index.json") if "model_index.json" in documents else None
    configs: dict[str, dict[str, Any]] = {}
    weights: list[str] = []
    if pipeline is not None:
        folders = [
            key
            for key, value in pipeline.items()
            if not key.startswith("_") and isinstance(value, list) and any(n.startswith(f"{key}/") for n in names)
        ]
        second = [f"{folder}/config.json" for folder in folders if f"{folder}/config.json" in names]
        second += [
            f"{folder}/{base}.index.json"
            for folder in folders
            for base in TRANSFORMERS_WEIGHTS
            if f"{folder}/{base}.index.json" in names
        ]
        documents.update(_download_json(hub, commit, second) if second else {})
        for folder in folders:
            if f"{folder}/config.json" in documents:
                configs[folder] = mapping(f"{folder}/config.json")
            weights += _weights_in(names, folder, documents.__getitem__, hub)[0]
        if not weights:
            raise hub.fail("the pipeline's component folders hold no .safetensors weights")
        config = None
    else:
        weights = _weights_in(names, "", documents.__getitem__, hub)[0]
        if "modules.json" in documents:
            weights += _sentence_modules(hub, commit, names, documents["modules.json"])
    if not weights:
        ggufs = sorted(name for name in names if name.endswith(".gguf"))
        if ggufs:
            shown = ", ".join(ggufs[:5]) + (", ..." if len(ggufs) > 5 else "")
            raise hub.fail(f"a GGUF repository; name the file to read as {hub.repo}/FILE.gguf ({shown})")
        if config is None:
            raise hub.fail("no config.json and no .safetensors or .gguf weights in the repository")
        raise hub.fail("config.json but no .safetensors weights (vramcalc reads the weights' headers)")
    if len(weights) > MAX_FILES:
        raise hub.fail(f"{len(weights):,} weights files (at most {MAX_FILES:,})")
    files = _parallel(lambda name: ranges.safetensors_header(name, sha256.get(name)), weights)
    return Checkpoint(origin, "safetensors", files, config, pipeline, configs)


def _sentence_modules(hub: _Hub, commit: str, names: set[str], modules: Any) -> list[str]:
    """A Sentence Transformers model's module folders' weights (a Dense layer's)."""
    found: list[str] = []
    if not isinstance(modules, list):
        return found
    for module in modules:
        sub = module.get("path") if isinstance(module, dict) else None
        if isinstance(sub, str) and sub and "/" not in sub and sub not in (".", ".."):
            indexes = [
                f"{sub}/{base}.index.json" for base in TRANSFORMERS_WEIGHTS if f"{sub}/{base}.index.json" in names
            ]
            documents = _download_json(hub, commit, indexes) if indexes else {}
            found += _weights_in(names, sub, documents.__getitem__, hub)[0]
    return found


# The caches.


def _with_blob_hashes(checkpoint: Checkpoint, snapshot: Path) -> Checkpoint:
    files = tuple(
        file if file.sha256 else replace(file, sha256=hf_cache.blob_sha256(snapshot / file.path))
        for file in checkpoint.files
    )
    return replace(checkpoint, files=files)


def _components_have_weights(snapshot: Path) -> bool:
    """Whether each component folder of a pipeline snapshot that has a ``config.json`` has weights files
    too: a pipeline downloaded in part (or only its configs) is not read as the whole pipeline."""
    try:
        for folder in snapshot.iterdir():
            if folder.is_dir() and (folder / "config.json").is_file():
                if not any(path.name.endswith(hf_cache.WEIGHT_SUFFIXES) and path.exists() for path in folder.iterdir()):
                    return False
    except OSError:
        return False
    return True


def _from_snapshot(snapshot: Path, origin: Origin, where: str, filename: str | None) -> Checkpoint | None:
    """The checkpoint in a Hugging Face cache snapshot, read from its files, where it holds the weights
    files themselves; None where it holds only configs (what :func:`fetch_checkpoint` downloads)."""
    from vramcalc.sources.local import read_local

    target = snapshot / filename if filename is not None else snapshot
    if filename is not None and not target.is_file():
        return None
    if filename is None and (snapshot / "model_index.json").is_file() and not _components_have_weights(snapshot):
        return None
    try:
        checkpoint = read_local(target, where, origin=origin)
    except ModelSourceError as exc:
        if exc.stage == "path":  # weights not downloaded (or only some shards): not a cached checkpoint
            return None
        raise
    return _with_blob_hashes(checkpoint, snapshot if filename is None else target.parent)


def _cached_at(hub: _Hub, commit: str, origin: Origin, filename: str | None) -> Checkpoint | None:
    snapshot = hf_cache.cached_snapshot(hub.repo, commit)
    if snapshot is not None:
        found = _from_snapshot(snapshot[0], origin, hub.prefix, filename)
        if found is not None:
            return found
    return header_cache.load(hub.repo, commit, origin, filename)


def cached_checkpoint(
    repo: str, revision: str | None, where: str | None = None, filename: str | None = None
) -> Checkpoint | None:
    """The checkpoint of ``repo`` at ``revision`` (None: ``main``) from the local caches, else None;
    never touches the network. The Hugging Face cache's snapshot is read where it holds the weights
    files (a model downloaded with transformers or ``hf download``); else vramcalc's own cache of the
    headers read from the Hub for that commit (the commit that ``refs/<revision>`` of either cache names)."""
    hub = _context(repo, revision, where or _label(repo, revision))
    commits: list[str] = []
    snapshot = hf_cache.cached_snapshot(repo, hub.revision)
    if snapshot is not None:
        commits.append(snapshot[1])
    ours = header_cache.resolved_commit(repo, hub.revision)
    if ours is not None and ours not in commits:
        commits.append(ours)
    for commit in commits:
        origin = Origin("cache", hub.label, repo, revision, commit)
        found = _cached_at(hub, commit, origin, filename)
        if found is not None:
            return found
    return None


@dataclass(frozen=True)
class HubModel:
    """One repository the Hub's model search found: its id, downloads, likes, task and library."""

    repo: str
    downloads: int
    likes: int
    pipeline_tag: str | None
    library: str | None


#: Repositories one search lists at most.
MAX_SEARCH_RESULTS = 100


def search_hub(query: str, limit: int = 20) -> list[HubModel]:
    """The Hub's models whose id holds ``query``, most downloaded first (``vramcalc models --hub``); one
    :class:`ModelSourceError` line when the Hub cannot answer within the timeout."""
    hub = _Hub("models", "main", None, f"the Hub's search for {query!r}", "", hub_endpoint(), None, hub_timeout())
    if hf_cache.hub_offline():
        raise hub.fail("HF_HUB_OFFLINE is set (vramcalc models --cached lists the local cache)")
    hub = replace(hub, token=os.environ.get("HF_TOKEN") or None)

    def search(_: str) -> Any:
        # one request to the endpoint HfApi.list_models pages through, without its retries
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

        params = {"search": query, "sort": "downloads", "limit": str(max(1, min(limit, MAX_SEARCH_RESULTS)))}
        headers = build_hf_headers(token=hub.token, library_name="vramcalc")
        response = get_session().get(f"{hub.endpoint}/api/models", params=params, headers=headers, timeout=hub.timeout)
        hf_raise_for_status(response)
        return response.json()

    try:
        found = _in_daemon_threads(search, ["search"], hub.timeout + 1)["search"]
    except Exception as exc:  # the boundary: whatever huggingface_hub or the network raised
        raise hub_error(hub, exc) from None
    if not isinstance(found, list):
        raise hub.fail("the Hub's search answered something other than a list of models")
    return [_hub_model(entry) for entry in found[:MAX_SEARCH_RESULTS] if isinstance(entry, dict)]


def _hub_model(entry: dict[str, Any]) -> HubModel:
    """One entry of the Hub's search answer, its fields checked (a hostile answer cannot break the listing)."""

    def count(key: str) -> int:
        value = entry.get(key)
        return value if type(value) is int and value >= 0 else 0

    def text(key: str) -> str | None:
        value = entry.get(key)
        return _one_line(value, 100) if isinstance(value, str) and value else None

    return HubModel(
        text("id") or text("modelId") or "?",
        count("downloads"),
        count("likes"),
        text("pipeline_tag"),
        text("library_name"),
    )
