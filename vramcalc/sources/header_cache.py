"""vramcalc's own cache of what a Hub repository's headers said, so a second look needs no network.

A checkpoint read over the network (its configs and the safetensors or GGUF headers, never the weights)
is written here as JSON, keyed by repository and commit (a commit never changes), with the branch or
tag asked for recorded as a ref to that commit::

    <cache>/hub/models--org--name/refs/<revision>              the commit the revision resolved to
    <cache>/hub/models--org--name/checkpoints/<commit>.json    the checkpoint at that commit
    <cache>/hub/models--org--name/checkpoints/<commit>@<file>.json   one named GGUF file of it

``<cache>`` is ``VRAMCALC_CACHE``, else ``$XDG_CACHE_HOME/vramcalc``, else ``~/.cache/vramcalc``. Every
file is written to a temporary name and renamed, so a reader never sees half a file; a file that cannot
be read back (truncated, edited, another version's) counts as missing.

Standard library only (json and tempfile imported when a file is read or written).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

from vramcalc.sources.checkpoint import Checkpoint, Origin, TensorFile, TensorInfo
from vramcalc.sources.hf_cache import COMMIT_RE, repo_folder_name

#: Bumped when the JSON layout changes; files of another version are ignored (and rewritten).
FORMAT_VERSION = 1
#: The largest cache file read back (a checkpoint of a few thousand tensors is a few MB).
MAX_CACHE_BYTES = 256 * 1024 * 1024


def cache_root() -> Path:
    """vramcalc's cache folder: ``VRAMCALC_CACHE``, ``$XDG_CACHE_HOME/vramcalc`` or ``~/.cache/vramcalc``."""
    explicit = os.environ.get("VRAMCALC_CACHE")
    if explicit:
        return Path(os.path.expanduser(explicit))
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(os.path.expanduser(xdg)) if xdg else Path.home() / ".cache"
    return base / "vramcalc"


def repo_dir(repo: str) -> Path:
    return cache_root() / "hub" / repo_folder_name(repo)


def _ref_path(repo: str, revision: str) -> Path:
    return repo_dir(repo) / "refs" / quote(revision, safe="")


def _checkpoint_path(repo: str, commit: str, filename: str | None) -> Path:
    name = commit if filename is None else f"{commit}@{quote(filename, safe='')}"
    return repo_dir(repo) / "checkpoints" / f"{name}.json"


def _write_atomic(path: Path, text: str) -> None:
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def _read_bounded(path: Path) -> str | None:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_CACHE_BYTES + 1)
    except (OSError, ValueError):
        return None
    if len(data) > MAX_CACHE_BYTES:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def resolved_commit(repo: str, revision: str) -> str | None:
    """The commit ``revision`` resolved to when the repository was last read over the network."""
    if COMMIT_RE.fullmatch(revision):
        return revision
    text = _read_bounded(_ref_path(repo, revision))
    if text is None:
        return None
    text = text.strip()
    return text if COMMIT_RE.fullmatch(text) else None


def to_json(checkpoint: Checkpoint) -> dict[str, Any]:
    """A checkpoint as plain JSON data (its origin aside: the caller knows where it looks)."""
    return {
        "format_version": FORMAT_VERSION,
        "format": checkpoint.format,
        "config": checkpoint.config,
        "pipeline": checkpoint.pipeline,
        "configs": checkpoint.configs,
        "files": [
            {
                "path": file.path,
                "sha256": file.sha256,
                "metadata": file.metadata,
                "tensors": [[t.name, t.dtype, list(t.shape), t.nbytes] for t in file.tensors],
            }
            for file in checkpoint.files
        ],
    }


def from_json(data: Any, origin: Origin) -> Checkpoint | None:
    """The checkpoint :func:`to_json` wrote, None for anything else."""
    try:
        if data["format_version"] != FORMAT_VERSION or data["format"] not in ("safetensors", "gguf"):
            return None
        files = tuple(
            TensorFile(
                path=str(file["path"]),
                tensors=tuple(
                    TensorInfo(str(name), str(dtype), tuple(int(d) for d in shape), int(nbytes))
                    for name, dtype, shape, nbytes in file["tensors"]
                ),
                metadata=dict(file["metadata"] or {}),
                sha256=file["sha256"],
            )
            for file in data["files"]
        )
        configs = data["configs"] or {}
        if not isinstance(configs, dict):
            return None
        return Checkpoint(
            origin=origin,
            format=data["format"],
            files=files,
            config=data["config"],
            pipeline=data["pipeline"],
            configs=configs,
        )
    except (KeyError, TypeError, ValueError):
        return None


def store(checkpoint: Checkpoint, filename: str | None = None) -> Path | None:
    """Write a checkpoint read from the Hub under its repository and commit, with its revision's ref.
    Returns the file written; None when the checkpoint has no commit or the cache is not writable
    (a cache that cannot be written costs a network look-up next time, nothing else)."""
    origin = checkpoint.origin
    if origin.repo is None or origin.commit is None or not COMMIT_RE.fullmatch(origin.commit):
        return None
    import json

    path = _checkpoint_path(origin.repo, origin.commit, filename)
    try:
        _write_atomic(path, json.dumps(to_json(checkpoint), default=str, separators=(",", ":")))
    except OSError:
        return None
    store_ref(origin.repo, origin.revision or "main", origin.commit)
    return path


def store_ref(repo: str, revision: str, commit: str) -> None:
    """Record that ``revision`` of ``repo`` resolved to ``commit`` (best effort)."""
    if revision != commit and COMMIT_RE.fullmatch(commit):
        try:
            _write_atomic(_ref_path(repo, revision), commit)
        except OSError:
            pass


def load(repo: str, commit: str, origin: Origin, filename: str | None = None) -> Checkpoint | None:
    """The checkpoint stored for ``repo`` at ``commit`` (and GGUF file ``filename``), else None."""
    if not COMMIT_RE.fullmatch(commit):
        return None
    text = _read_bounded(_checkpoint_path(repo, commit, filename))
    if text is None:
        return None
    import json

    try:
        data = json.loads(text)
    except ValueError:
        return None
    return from_json(data, origin)
