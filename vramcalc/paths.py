"""Finding spec files under a directory or a glob pattern: bounded in time and memory.

``vramcalc check configs/`` and ``vramcalc check 'configs/**/*.yaml'`` search the file system; a
search never runs away, whatever it is pointed at (``/``, a deep tree, a symlink loop):

* at most :data:`MAX_DEPTH` directory levels below the directory given, :data:`MAX_ENTRIES` directory
  entries looked at and :data:`MAX_SPEC_FILES` spec files found, per argument; beyond a bound the
  search stops with one :class:`~vramcalc.errors.SpecError` line naming the argument and the bound;
* /proc, /sys and /dev (kernel file systems, whose files are not specs) are refused when named and
  skipped when met on the way;
* symbolic links to directories met while searching are not entered (the directory named, and the
  directories a pattern names literally, are followed), so a search cannot leave the directory given
  and cannot loop; a ``*`` in a pattern may match a symlinked directory that stays inside it;
* hidden names (a leading dot) are skipped, unless a pattern's own component starts with a dot;
* only regular files (directly, or behind a symlink) are listed: FIFOs, devices, sockets and broken
  links are not specs;
* ``--exclude`` patterns (:func:`excluded`) drop files, and a directory they match is not entered.

Standard library (and vramcalc.errors) only; nothing here reads a file's contents.
"""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path

from vramcalc.errors import SpecError

#: Directory levels searched below the directory given (a repository nests specs a few levels deep).
MAX_DEPTH = 32
#: Directory entries (files and folders, hidden ones included) looked at in one search; a large
#: repository has a few thousand outside its hidden folders.
MAX_ENTRIES = 100_000
#: Spec files one directory or pattern may name (each one is loaded and estimated).
MAX_SPEC_FILES = 10_000
#: Kernel file systems, never searched: their files are not specs, and some of them never end.
SYSTEM_DIRS = ("/proc", "/sys", "/dev")

_MAGIC = re.compile(r"[*?[]")


def is_pattern(arg: str) -> bool:
    """Whether ``arg`` holds glob wildcards (``*``, ``?``, ``[``)."""
    return _MAGIC.search(arg) is not None


def real_path(path: str) -> str:
    """``path`` with symbolic links, ``.`` and ``..`` resolved, absolute: one file named two ways
    (``configs`` and ``./configs/../configs``) gives one real path; ``path`` itself when it cannot be
    resolved (a name too long for the file system, an embedded NUL)."""
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):
        return path


def _is_system(real: str) -> bool:
    return any(real == top or real.startswith(top + "/") for top in SYSTEM_DIRS)


class _Search:
    """The bounds of one argument's search; every refusal names the argument."""

    def __init__(self, arg: str) -> None:
        self.arg = arg
        self.entries = 0
        self.found = 0

    def refuse(self, problem: str) -> SpecError:
        return SpecError(f"{self.arg}: {problem}")

    def root(self, directory: str) -> str:
        """The real path of the directory the search starts from (a system directory is refused)."""
        real = os.path.realpath(directory or os.curdir)
        if _is_system(real):
            raise self.refuse(f"a kernel file system ({real}); vramcalc does not search /proc, /sys or /dev")
        return real

    def listing(self, directory: str, *, first: bool = False) -> list[os.DirEntry[str]]:
        """The entries of ``directory``, counted; an unreadable directory below the first is skipped."""
        entries = []
        try:
            with os.scandir(directory or os.curdir) as scan:
                for entry in scan:
                    self.entries += 1
                    if self.entries > MAX_ENTRIES:
                        raise self.refuse(
                            f"more than {MAX_ENTRIES:,} directory entries to search; "
                            "name a smaller directory or the spec files themselves"
                        )
                    entries.append(entry)
        except OSError as exc:
            if first:
                raise self.refuse(f"cannot read this directory ({exc.strerror or exc})") from None
        return entries

    def descend(self, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise self.refuse(
                f"directories nested more than {MAX_DEPTH} levels deep; "
                "name a shallower directory or the spec files themselves"
            )

    def add(self) -> None:
        self.found += 1
        if self.found > MAX_SPEC_FILES:
            raise self.refuse(f"more than {MAX_SPEC_FILES:,} spec files; name fewer directories or files")


def _is_regular(entry: os.DirEntry[str]) -> bool:
    """A regular file, directly or behind a symlink (a broken link or a loop is not)."""
    try:
        return entry.is_file()
    except OSError:
        return False


def _is_real_dir(entry: os.DirEntry[str]) -> bool:
    """A directory that is not a symlink."""
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def exclude_patterns(patterns: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """``--exclude`` values, checked: an empty one (or one with a NUL) is refused; a trailing ``/`` is
    dropped (``configs/old/`` names the directory ``configs/old``), and each is also kept normalised
    (``./configs/old`` as ``configs/old``)."""
    kept: list[str] = []
    for pattern in patterns:
        if not pattern.strip() or "\x00" in pattern:
            raise SpecError(f"--exclude: {pattern!r} is not a pattern (e.g. 'configs/legacy/*' or 'accelerate*.yaml')")
        pattern = pattern.rstrip("/") or "/"
        kept += dict.fromkeys((pattern, os.path.normpath(pattern)))
    return tuple(kept)


def excluded(path: str, patterns: tuple[str, ...]) -> bool:
    """Whether an ``--exclude`` pattern matches ``path`` (fnmatch rules, case-sensitive, ``*`` matching
    ``/`` too): the path as given or found, the path normalised (no ``./``, no doubled ``/``), or its
    last component (the file or directory name alone)."""
    if not patterns:
        return False
    forms = {path, os.path.normpath(path), os.path.basename(os.path.normpath(path))}
    return any(fnmatch.fnmatchcase(form, pattern) for form in forms for pattern in patterns)


def spec_files_under(directory: str, suffixes: tuple[str, ...], exclude: tuple[str, ...] = ()) -> list[str]:
    """The files named ``*<suffix>`` in ``directory`` and below it (hidden names skipped, directories
    ``exclude`` matches not entered), sorted as paths; raises :class:`SpecError` naming ``directory``
    beyond a bound."""
    search = _Search(directory)
    stack: list[tuple[tuple[str, ...], str]] = [((), search.root(directory))]
    found: list[tuple[str, ...]] = []
    while stack:
        parts, real = stack.pop()
        for entry in search.listing(os.path.join(directory, *parts), first=not parts):
            name = entry.name
            if name.startswith("."):
                continue
            if _is_real_dir(entry):
                child = os.path.join(real, name)
                if not _is_system(child) and not excluded(str(Path(directory, *parts, name)), exclude):
                    search.descend(len(parts) + 1)
                    stack.append(((*parts, name), child))
            elif name.endswith(suffixes) and _is_regular(entry):
                search.add()
                found.append((*parts, name))
    return [str(Path(directory, *parts)) for parts in sorted(found)]


#: A step of a pattern search: the path as the pattern spells it, its real path, the index of the
#: pattern component to match in it, its depth below the root, and its listing when already read.
_State = tuple[str, str, int, int, "list[os.DirEntry[str]] | None"]


def spec_files_matching(pattern: str, suffixes: tuple[str, ...]) -> list[str]:
    """The files named ``*<suffix>`` that ``pattern`` matches, as :func:`glob.glob` with
    ``recursive=True`` would list them (``**`` spans any number of directories), sorted; raises
    :class:`SpecError` naming ``pattern`` beyond a bound. Unreadable directories match nothing."""
    search = _Search(pattern)
    parts = [part for part in pattern.split("/") if part]
    literal = 0
    while literal < len(parts) - 1 and not is_pattern(parts[literal]):
        literal += 1
    root = ("/" if pattern.startswith("/") else "") + "/".join(parts[:literal])
    rest = parts[literal:] + (["*"] if parts[-1:] == ["**"] else [])  # 'dir/**': every file below dir
    top = search.root(root)
    matches: set[str] = set()
    seen: set[tuple[str, int]] = set()
    stack: list[_State] = [(root, top, 0, 0, None)]
    while stack:
        path, real, index, depth, listed = stack.pop()
        if (path, index) in seen:
            continue
        seen.add((path, index))
        entries = listed if listed is not None else search.listing(path) if is_pattern(rest[index]) else []
        if rest[index] == "**":  # no directory at all (the same listing), or one more real directory
            stack.append((path, real, index + 1, depth, entries))
            for entry in entries:
                child = os.path.join(real, entry.name)
                if not entry.name.startswith(".") and _is_real_dir(entry) and not _is_system(child):
                    search.descend(depth + 1)
                    stack.append((os.path.join(path, entry.name), child, index, depth + 1, None))
            continue
        last = index == len(rest) - 1
        for name, match in _matching(rest[index], entries):
            child = os.path.join(path, name)
            if last:
                if name.endswith(suffixes) and (_is_regular(match) if match else os.path.isfile(child)):
                    search.add()
                    matches.add(child)
                continue
            inner = _inner_dir(child, real, top, name, match)
            if inner is not None:
                search.descend(depth + 1)
                stack.append((child, inner, index + 1, depth + 1, None))
    return sorted(matches)


def _matching(part: str, entries: list[os.DirEntry[str]]) -> list[tuple[str, os.DirEntry[str] | None]]:
    """The names one pattern component matches in a listing (a literal component: itself, unlisted)."""
    if not is_pattern(part):
        return [(part, None)]
    hidden_ok = part.startswith(".")
    return [
        (entry.name, entry)
        for entry in entries
        if fnmatch.fnmatch(entry.name, part) and (hidden_ok or not entry.name.startswith("."))
    ]


def _inner_dir(path: str, real: str, top: str, name: str, entry: os.DirEntry[str] | None) -> str | None:
    """The real path of ``path`` when a pattern may continue in it: a directory outside the kernel
    file systems that, when a wildcard matched it through a symlink, stays inside ``top``."""
    try:
        if entry is not None and entry.is_dir(follow_symlinks=False):
            inner = os.path.join(real, name)
        elif entry is None and os.path.isdir(path):  # named literally: followed, like the directory given
            inner = os.path.realpath(path)
        elif entry is not None and entry.is_dir():
            inner = os.path.realpath(path)
            if not inner.startswith(top.rstrip("/") + "/"):
                return None
        else:
            return None
    except OSError:
        return None
    return None if _is_system(inner) else inner
