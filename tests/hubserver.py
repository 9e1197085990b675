"""A local stand-in for the Hugging Face Hub: the endpoints huggingface_hub calls to resolve a revision,
list and download files, and the range requests vramcalc reads headers with. No network beyond 127.0.0.1.

Endpoints (as huggingface_hub 2.x calls them; ``{repo}`` is ``org/name``):

* ``GET /api/models?search=TEXT&limit=N``: the model search (``HfApi.list_models``);
* ``GET /api/models/{repo}`` and ``GET /api/models/{repo}/revision/{rev}``: the repository's info
  (``HfApi.model_info`` / ``repo_info``; ``snapshot_download`` resolves its revision there). With
  ``?blobs=true`` (``files_metadata=True``) each sibling has ``size``, ``blobId`` and, for an LFS file,
  ``lfs: {size, sha256, pointerSize}``.
* ``GET /api/models/{repo}/tree/{rev}[/{path}]?recursive=...``: the file list (``HfApi.list_repo_tree``,
  which ``snapshot_download`` calls): ``{type, path, size, oid, lfs: {oid, size, pointerSize}}``.
* ``HEAD /{repo}/resolve/{rev}/{file}`` (``get_hf_file_metadata``, ``hf_hub_download``): the
  ``X-Repo-Commit``, ``ETag`` and ``Content-Length`` of a small file; for an LFS file (``.safetensors``,
  ``.gguf``) a 302 whose ``Location`` is the "CDN" (``/cdn/{sha256}`` on ``localhost``, another host
  name, as the real Hub's CDN is), with ``X-Linked-Etag`` (the SHA-256) and ``X-Linked-Size``.
* ``GET /{repo}/resolve/{rev}/{file}``: the same headers and the bytes, honouring ``Range`` (206 and
  ``Content-Range``; 416 past the end); LFS files redirect to ``GET /cdn/{sha256}``, which serves ranges too.

Failure modes: a gated repository (its info public, its files 401 with ``X-Error-Code: GatedRepo``),
an unknown repository (404, ``RepoNotFound``), an unknown revision (404, ``RevisionNotFound``), a missing file (404,
``EntryNotFound``), a server error (500), an error status for some paths only (``fail_paths``), a file's
body a byte shorter than its ``Content-Length`` (``short_body``), and a slow answer (``delay`` seconds before
any reply).
Every request is recorded (method, path, ``Range``, ``Authorization``) so tests can count them.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

#: The names a test may resolve: the stand-in's.
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


def local_resolver(real: Callable[..., Any]) -> Callable[..., Any]:
    """``socket.getaddrinfo`` that resolves :data:`LOCAL_HOSTS` only: a request to any other host fails at
    once, so nothing a test runs can reach huggingface.co."""

    def local_only(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if name not in LOCAL_HOSTS:
            raise socket.gaierror(socket.EAI_NONAME, f"tests resolve local names only, not {name!r}")
        return real(host, *args, **kwargs)

    return local_only


#: Files served as LFS objects (redirected to the CDN, with a SHA-256), as the Hub stores weights.
LFS_SUFFIXES = (".safetensors", ".gguf", ".bin")


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a file's bytes (what the Hub gives as a small file's ETag and blobId)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Repo:
    """A repository served from a folder: every file below it, at one commit per revision name."""

    repo_id: str
    folder: Path
    revisions: dict[str, str]
    gated: bool = False
    downloads: int = 0
    likes: int = 0
    files: dict[str, bytes] = field(default_factory=dict)
    by_sha256: dict[str, bytes] = field(default_factory=dict)

    def load(self) -> None:
        self.files = {
            path.relative_to(self.folder).as_posix(): path.read_bytes()
            for path in sorted(self.folder.rglob("*"))
            if path.is_file()
        }
        self.by_sha256 = {hashlib.sha256(data).hexdigest(): data for data in self.files.values()}

    def commit(self, revision: str) -> str | None:
        if revision in self.revisions:
            return self.revisions[revision]
        return revision if revision in self.revisions.values() else None

    def is_lfs(self, name: str) -> bool:
        return name.endswith(LFS_SUFFIXES)

    def sibling(self, name: str, tree: bool) -> dict[str, object]:
        data = self.files[name]
        entry: dict[str, object] = {"size": len(data)}
        if tree:
            entry.update(type="file", path=name, oid=git_blob_sha1(data))
        else:
            entry.update(rfilename=name, blobId=git_blob_sha1(data))
        if self.is_lfs(name):
            sha = hashlib.sha256(data).hexdigest()
            key = "oid" if tree else "sha256"
            entry["lfs"] = {"size": len(data), key: sha, "pointerSize": 134}
        return entry


@dataclass
class Request:
    method: str
    path: str
    range: str | None
    authorization: str | None = None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that gave up (a timeout under test) is expected, not an error to print."""
        import sys

        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class HubServer:
    """The stand-in: ``add_repo`` a folder, ``start()``, point ``HF_ENDPOINT`` at ``url``; ``stop()``."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.requests: list[Request] = []
        self.status: int | None = None  # answer every request with this error status (500, 503...)
        self.error_message = "Internal Error"  # and this X-Error-Message
        self.delay = 0.0  # seconds to wait before answering
        self.ignore_range = False  # answer a Range request with the whole file (200), as some servers do
        self.fail_paths: tuple[str, int] | None = None  # (text, status): an error for paths holding the text
        self.short_body = False  # declare one more byte than a file's answer holds, then close the connection
        self._lock = threading.Lock()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # Set-up.

    def add_repo(
        self, repo_id: str, folder: Path, *, gated: bool = False, revisions: dict[str, str] | None = None
    ) -> str:
        """Serve ``folder`` as ``repo_id``; returns the commit that ``main`` resolves to."""
        commit = hashlib.sha1(f"{repo_id}:{folder}".encode()).hexdigest()
        repo = Repo(repo_id, folder, {"main": commit, **(revisions or {})}, gated=gated)
        repo.load()
        self.repos[repo_id] = repo
        return commit

    def reload(self, repo_id: str) -> None:
        self.repos[repo_id].load()

    @property
    def url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def cdn(self) -> str:
        assert self._httpd is not None
        return f"http://localhost:{self._httpd.server_address[1]}"

    def start(self) -> HubServer:
        server = self

        class Handler(_Handler):
            hub = server

        self._httpd = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="hubserver", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)

    # Request log.

    def record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    def count(self, method: str | None = None, contains: str = "") -> int:
        with self._lock:
            return sum(1 for r in self.requests if (method is None or r.method == method) and contains in r.path)


_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")
_API = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)(?:/(?P<kind>revision|tree)/(?P<rev>[^/]+)(?P<sub>/.*)?)?$")
_CDN = re.compile(r"^/cdn/(?P<sha>[0-9a-f]{64})$")
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


class _Handler(BaseHTTPRequestHandler):
    hub: HubServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall between them

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    # Answers.

    def _send(self, status: int, headers: dict[str, str], body: bytes = b"", *, length: int | None = None) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _error(self, status: int, code: str | None = None, message: str = "") -> None:
        headers = {"Content-Type": "application/json"}
        if code:
            headers["X-Error-Code"] = code
        if message:
            headers["X-Error-Message"] = message
        self._send(status, headers, json.dumps({"error": message or code or str(status)}).encode())

    def _json(self, data: object) -> None:
        self._send(200, {"Content-Type": "application/json"}, json.dumps(data).encode())

    def _bytes(self, data: bytes, headers: dict[str, str]) -> None:
        """The file, or the range asked for (206), or 416 past its end."""
        header = None if self.hub.ignore_range else self.headers.get("Range")
        match = _RANGE.match(header or "")
        if self.hub.short_body:  # the body ends a byte early and the connection closes
            self.close_connection = True
            self._send(200, {**headers, "Accept-Ranges": "bytes"}, data[:-1], length=len(data))
            return
        if header is None or match is None:
            self._send(200, {**headers, "Accept-Ranges": "bytes"}, data)
            return
        first, last = match.groups()
        size = len(data)
        if first == "":
            start, end = max(0, size - int(last)), size - 1
        else:
            start = int(first)
            end = min(int(last), size - 1) if last else size - 1
        if start >= size or start > end:
            self._send(416, {"Content-Range": f"bytes */{size}"})
            return
        self._send(206, {**headers, "Content-Range": f"bytes {start}-{end}/{size}"}, data[start : end + 1])

    # Dispatch.

    def do_HEAD(self) -> None:
        self._handle()

    def do_GET(self) -> None:
        self._handle()

    def _handle(self) -> None:
        hub = self.hub
        split = urlsplit(self.path)
        path = unquote(split.path)
        hub.record(Request(self.command, path, self.headers.get("Range"), self.headers.get("Authorization")))
        if hub.delay:
            time.sleep(hub.delay)
        if hub.status is not None:
            self._error(hub.status, message=hub.error_message)
            return
        if hub.fail_paths is not None and hub.fail_paths[0] in path:
            self._error(hub.fail_paths[1], message=hub.error_message)
            return
        if cdn := _CDN.match(path):
            for repo in hub.repos.values():
                if (data := repo.by_sha256.get(cdn["sha"])) is not None:
                    self._bytes(data, {"Content-Type": "application/octet-stream"})
                    return
            self._error(404, message="no such object")
            return
        if path == "/api/models":  # the Hub's model search (HfApi.list_models): ids holding the search text
            self._search(parse_qs(split.query))
            return
        match = _API.match(path) or _RESOLVE.match(path)
        if match is None:
            self._error(404, message="not an endpoint of this stand-in")
            return
        repo = hub.repos.get(match["repo"])
        if repo is None:
            self._error(404, "RepoNotFound", "Repository not found")
            return
        if repo.gated and not path.startswith("/api/") and self.headers.get("Authorization") != "Bearer hf_granted":
            # As the Hub: a gated repository's info is public, its files are not.
            self._error(401, "GatedRepo", f"Access to model {repo.repo_id} is restricted. You must have access.")
            return
        revision = match["rev"] or "main"
        commit = repo.commit(revision)
        if commit is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            return
        if path.startswith("/api/"):
            self._api(repo, commit, match["kind"], match["sub"], parse_qs(split.query))
        else:
            self._resolve(repo, commit, match["file"])

    def _search(self, query: dict[str, list[str]]) -> None:
        """Repositories whose id holds ``search`` (any case), as the Hub lists them, up to ``limit``; each
        with the downloads and likes a test set (``Repo.downloads``), most downloaded first."""
        text = query.get("search", [""])[0].lower()
        limit = int(query.get("limit", ["1000"])[0])
        found = [repo for repo in self.hub.repos.values() if text in repo.repo_id.lower()]
        found.sort(key=lambda repo: -repo.downloads)
        entries = [
            {"_id": repo.repo_id, "id": repo.repo_id, "modelId": repo.repo_id, "downloads": repo.downloads,
             "likes": repo.likes, "pipeline_tag": "text-generation", "library_name": "transformers",
             "private": False, "tags": []}
            for repo in found[:limit]
        ]  # fmt: skip
        self._json(entries)

    def _api(self, repo: Repo, commit: str, kind: str | None, sub: str | None, query: dict[str, list[str]]) -> None:
        if kind == "tree":
            prefix = (sub or "").strip("/")
            recursive = query.get("recursive", ["false"])[0].lower() == "true"
            entries: list[dict[str, object]] = []
            folders: set[str] = set()
            for name in repo.files:
                if prefix and not name.startswith(prefix + "/"):
                    continue
                rest = name[len(prefix) + 1 :] if prefix else name
                if "/" in rest and not recursive:
                    folders.add((prefix + "/" if prefix else "") + rest.split("/", 1)[0])
                    continue
                entries.append(repo.sibling(name, tree=True))
            entries += [{"type": "directory", "path": folder, "oid": "0" * 40} for folder in sorted(folders)]
            self._json(entries)
            return
        blobs = query.get("blobs", ["false"])[0].lower() == "true"
        siblings = [repo.sibling(name, tree=False) if blobs else {"rfilename": name} for name in repo.files]
        self._json(
            {
                "_id": "0" * 24,
                "id": repo.repo_id,
                "modelId": repo.repo_id,
                "sha": commit,
                "private": False,
                "gated": "auto" if repo.gated else False,
                "disabled": False,
                "tags": [],
                "siblings": siblings,
            }
        )

    def _resolve(self, repo: Repo, commit: str, name: str) -> None:
        data = repo.files.get(name)
        if data is None:
            self._error(404, "EntryNotFound", f"{name} does not exist on revision {commit}")
            return
        headers = {"X-Repo-Commit": commit, "Content-Type": "application/octet-stream"}
        if repo.is_lfs(name):
            sha = hashlib.sha256(data).hexdigest()
            headers.update(
                {
                    "X-Linked-Etag": f'"{sha}"',
                    "X-Linked-Size": str(len(data)),
                    "ETag": f'"{git_blob_sha1(data)}"',
                    "Location": f"{self.hub.cdn}/cdn/{sha}",
                }
            )
            self._send(302, headers)
            return
        headers["ETag"] = f'"{git_blob_sha1(data)}"'
        if self.command == "HEAD":
            self._send(200, headers, length=len(data))
        else:
            self._bytes(data, headers)
