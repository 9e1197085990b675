"""The local Hugging Face cache, read with the standard library only (no ``huggingface_hub`` import).

Anything ``huggingface_hub`` downloaded (``hf_hub_download``, ``snapshot_download``, transformers'
``from_pretrained``) lies in one cache folder, laid out per repository::

    <cache>/models--org--name/
        blobs/<etag>                       the files' bytes, named by git SHA-1 or, for LFS files, SHA-256
        refs/main                          a branch or tag -> the commit it resolved to (40 hex characters)
        snapshots/<commit>/config.json     symlinks into blobs/, one folder per commit
        trees/<commit>.json                the file list of that commit (recent huggingface_hub versions)

The folder is found exactly as ``huggingface_hub.constants`` finds it: ``HF_HUB_CACHE``, else the legacy
``HUGGINGFACE_HUB_CACHE``, else ``$HF_HOME/hub``, with ``HF_HOME`` defaulting to
``$XDG_CACHE_HOME/huggingface`` and that to ``~/.cache/huggingface``. The variables are read on every
call (not once at import), so a changed environment is honoured.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

#: A full commit id: what ``refs/<revision>`` holds and what names a snapshot folder.
COMMIT_RE = re.compile(r"[0-9a-f]{40}")
#: An LFS blob's name: the SHA-256 of the file's bytes.
SHA256_RE = re.compile(r"[0-9a-f]{64}")
#: File name endings that hold weights (as opposed to configs, tokenizers, READMEs).
WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx")
#: The longest ``refs/`` file read (a commit id is 40 characters).
_MAX_REF_BYTES = 256


def _is_true(value: str | None) -> bool:
    return value is not None and value.upper() in {"1", "ON", "YES", "TRUE"}


def hf_home() -> Path:
    """``HF_HOME`` as huggingface_hub computes it (``$XDG_CACHE_HOME/huggingface``, ``~/.cache/huggingface``)."""
    default_home = os.path.join(os.path.expanduser("~"), ".cache")
    home = os.getenv("HF_HOME", os.path.join(os.getenv("XDG_CACHE_HOME", default_home), "huggingface"))
    return Path(os.path.expandvars(os.path.expanduser(home)))


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache folder (``HF_HUB_CACHE``, ``HUGGINGFACE_HUB_CACHE``, ``$HF_HOME/hub``)."""
    legacy = os.getenv("HUGGINGFACE_HUB_CACHE", os.path.join(hf_home(), "hub"))
    return Path(os.path.expandvars(os.path.expanduser(os.getenv("HF_HUB_CACHE", legacy))))


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` (or transformers' ``TRANSFORMERS_OFFLINE``) forbids network look-ups."""
    return _is_true(os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE"))


def repo_folder_name(repo: str) -> str:
    """``org/name`` -> ``models--org--name``, the repository's folder in the cache."""
    return "models--" + repo.replace("/", "--")


def _safe_revision(revision: str) -> bool:
    """A revision that names a file under ``refs/`` without leaving it (``main``, ``v1.0``, ``refs/pr/1``)."""
    if not revision or revision.startswith("/") or "\\" in revision or "\0" in revision:
        return False
    return all(part not in ("", ".", "..") for part in revision.split("/"))


def _read_ref(path: Path) -> str | None:
    """The commit a ``refs/`` file holds, None where it is missing, unreadable or not a commit id."""
    try:
        with open(path, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None
            text = handle.read(_MAX_REF_BYTES).decode("ascii", "replace").strip()
    except (OSError, ValueError):
        return None
    return text if COMMIT_RE.fullmatch(text) else None


def cached_snapshot(repo: str, revision: str | None) -> tuple[Path, str] | None:
    """The snapshot folder and commit of ``repo`` at ``revision`` in the cache, else None.

    ``revision`` is a branch or tag (looked up in ``refs/``), a full commit id (its snapshot folder), or
    None for ``main``. Nothing is downloaded and nothing is written."""
    revision = revision or "main"
    folder = hub_cache_dir() / repo_folder_name(repo)
    if COMMIT_RE.fullmatch(revision):
        commit: str | None = revision
    elif _safe_revision(revision):
        commit = _read_ref(folder / "refs" / revision)
    else:
        commit = None
    if commit is None:
        return None
    snapshot = folder / "snapshots" / commit
    return (snapshot, commit) if snapshot.is_dir() else None


def blob_sha256(path: Path) -> str | None:
    """The SHA-256 of a snapshot file's bytes, without reading them: an LFS file's blob is named by its
    SHA-256, so the file the snapshot's symlink leads to names it (in the repository's ``blobs/``). None
    for a small (git) file, a copied file (no symlinks) or anything unreadable."""
    try:
        target = Path(os.path.realpath(path))
    except (OSError, ValueError):
        return None
    return target.name if SHA256_RE.fullmatch(target.name) and target.parent.name == "blobs" else None


@dataclass(frozen=True)
class CachedModel:
    """One model repository in the Hugging Face cache: its id, the commits it holds snapshots of (newest
    first), the refs (a branch or tag -> commit), the bytes its blobs take on disk, and whether any
    snapshot holds weights or only configs."""

    repo: str
    path: Path
    commits: tuple[str, ...]
    refs: dict[str, str] = field(default_factory=dict)
    size_on_disk: int = 0
    has_weights: bool = False
    has_config: bool = False


def _walk_files(root: Path) -> list[Path]:
    """Every entry below ``root`` that is not a folder (symlinks included, never followed)."""
    found: list[Path] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return found
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                found.extend(_walk_files(Path(entry.path)))
            else:
                found.append(Path(entry.path))
        except OSError:
            continue
    return found


def _blobs_size(folder: Path) -> int:
    total = 0
    for path in _walk_files(folder / "blobs"):
        try:
            total += path.lstat().st_size
        except OSError:
            continue
    return total


def _refs(folder: Path) -> dict[str, str]:
    refs: dict[str, str] = {}
    root = folder / "refs"
    for path in _walk_files(root):
        commit = _read_ref(path)
        if commit is not None:
            refs[path.relative_to(root).as_posix()] = commit
    return refs


def _snapshots(folder: Path) -> list[tuple[float, str, Path]]:
    found = []
    try:
        entries = list(os.scandir(folder / "snapshots"))
    except OSError:
        return []
    for entry in entries:
        if COMMIT_RE.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False):
            try:
                found.append((entry.stat(follow_symlinks=False).st_mtime, entry.name, Path(entry.path)))
            except OSError:
                continue
    return sorted(found, reverse=True)


def cached_model(folder: Path) -> CachedModel | None:
    """The :class:`CachedModel` of one ``models--org--name`` folder, None for anything else."""
    name = folder.name
    if not name.startswith("models--") or not folder.is_dir():
        return None
    repo = name[len("models--") :].replace("--", "/")
    snapshots = _snapshots(folder)
    has_weights = has_config = False
    for _, _, snapshot in snapshots:
        for path in _walk_files(snapshot):
            if not path.exists():  # a dangling symlink: its blob is gone
                continue
            if path.name.endswith(WEIGHT_SUFFIXES):
                has_weights = True
            elif path.name == "config.json" or path.name == "model_index.json":
                has_config = True
    return CachedModel(
        repo=repo,
        path=folder,
        commits=tuple(commit for _, commit, _ in snapshots),
        refs=_refs(folder),
        size_on_disk=_blobs_size(folder),
        has_weights=has_weights,
        has_config=has_config,
    )


def cached_models() -> list[CachedModel]:
    """Every model repository in the Hugging Face cache, by id (empty when there is no cache)."""
    root = hub_cache_dir()
    try:
        entries = sorted(os.scandir(root), key=lambda entry: entry.name)
    except OSError:
        return []
    models = []
    for entry in entries:
        model = cached_model(Path(entry.path))
        if model is not None:
            models.append(model)
    return sorted(models, key=lambda model: model.repo.lower())
