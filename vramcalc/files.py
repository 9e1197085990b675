"""Reading user files and YAML: bounded, non-blocking, safe (no Python object tag is ever built).

Every reader of user files (spec files, config.json, memory_stats dumps, flag values holding YAML)
goes through here, so all refuse hostile input the same way: one :class:`SpecError` line.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

from vramcalc.errors import SpecError

#: Spec files larger than this are rejected before parsing (a real spec is a few hundred bytes).
MAX_SPEC_BYTES = 1_000_000
#: YAML aliases allowed in one document (bounds "billion laughs" expansion).
MAX_YAML_ALIASES = 50
#: Nesting levels allowed in one document (a spec needs 4; bounds the parser's recursion).
MAX_YAML_DEPTH = 50
#: YAML nodes allowed in one document (a spec has a few dozen; bounds parse time, PyYAML being pure Python).
MAX_YAML_NODES = 10_000


#: YAML types that no spec key takes, refused where they are read rather than coerced later (pydantic
#: would read ``!!binary`` bytes as a string, and a set or ordered map as a list).
_REFUSED_YAML_TAGS = ("binary", "set", "omap", "pairs")


def _yaml_loader() -> Any:
    import yaml
    from yaml.composer import ComposerError
    from yaml.constructor import ConstructorError

    class BoundedLoader(yaml.SafeLoader):
        """SafeLoader (no Python object tags) that also bounds aliases, nesting and node count, and
        rejects duplicate keys."""

        alias_count = 0
        node_count = 0
        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            mark = self.peek_event().start_mark
            if self.check_event(yaml.AliasEvent):
                self.alias_count += 1
                if self.alias_count > MAX_YAML_ALIASES:
                    raise ComposerError(None, None, f"more than {MAX_YAML_ALIASES} aliases (possible alias bomb)", mark)
            self.node_count += 1
            if self.node_count > MAX_YAML_NODES:
                raise ComposerError(None, None, f"more than {MAX_YAML_NODES:,} values (a spec has a few dozen)", mark)
            self.depth += 1
            try:
                if self.depth > MAX_YAML_DEPTH:
                    raise ComposerError(None, None, f"nested more than {MAX_YAML_DEPTH} levels deep", mark)
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def construct_object(self, node: Any, deep: bool = False) -> Any:
            try:
                return super().construct_object(node, deep=deep)
            except (ValueError, LookupError, TypeError, AttributeError, ArithmeticError):
                # PyYAML raises these for malformed explicit tags such as "!!timestamp x" or "!!bool maybe"
                kind = str(node.tag).rsplit(":", 1)[-1]
                raise ConstructorError(None, None, f"cannot read this value as {kind}", node.start_mark) from None

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, yaml.MappingNode):
                seen: set[Any] = set()
                for key_node, _ in node.value:
                    key = self.construct_object(key_node, deep=True)
                    try:
                        duplicate = key in seen
                        seen.add(key)
                    except TypeError:
                        continue  # an unhashable key: SafeConstructor reports it
                    if duplicate:
                        raise ConstructorError(None, None, f"duplicate key {str(key)!r}", key_node.start_mark)
            return super().construct_mapping(node, deep=deep)

    def refuse(loader: Any, node: Any) -> Any:
        kind = str(node.tag).rsplit(":", 1)[-1]
        raise ConstructorError(None, None, f"!!{kind} values are not read in specs", node.start_mark)

    for kind in _REFUSED_YAML_TAGS:
        BoundedLoader.add_constructor(f"tag:yaml.org,2002:{kind}", refuse)
    return BoundedLoader


def _os_problem(exc: OSError | ValueError) -> str:
    """Why a path cannot be read, in a few words."""
    if isinstance(exc, ValueError):  # an embedded NUL or a name the file system cannot encode
        return "not a valid file name"
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return "no such file"
    if exc.errno == errno.ELOOP:
        return "symlink loop (too many levels of symbolic links)"
    return f"cannot read ({exc.strerror or exc})"


def _open_nonblocking(file: str, flags: int) -> int:
    return os.open(file, flags | getattr(os, "O_NONBLOCK", 0))


def read_regular_file(path: Path, limit: int, what: str) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; never blocks on a FIFO or a device.

    Every reader of user files (spec files, config.json, memory_stats dumps) goes through here, so
    they all refuse the same hostile inputs the same way (:class:`SpecError`, one line)."""
    try:
        info = path.stat()
    except (OSError, ValueError) as exc:
        raise SpecError(f"{path}: {_os_problem(exc)}") from None
    if not stat.S_ISREG(info.st_mode):
        raise SpecError(f"{path}: not a regular file")
    if info.st_size > limit:
        raise SpecError(f"{path}: file is {info.st_size:,} bytes; {what} are limited to {limit:,} bytes")
    try:
        with open(path, "rb", opener=_open_nonblocking) as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):  # replaced since the stat() above
                raise SpecError(f"{path}: not a regular file")
            data = handle.read(limit + 1)
    except (OSError, ValueError) as exc:
        raise SpecError(f"{path}: {_os_problem(exc)}") from None
    if len(data) > limit:
        raise SpecError(f"{path}: grew past {limit:,} bytes while being read (the limit for {what})")
    return data


def _read_text(path: Path) -> str:
    """The UTF-8 text of a spec file of at most MAX_SPEC_BYTES."""
    data = read_regular_file(path, MAX_SPEC_BYTES, "spec files")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not UTF-8 text") from None


def read_yaml(path: Path) -> Any:
    """Read one YAML document with safe, bounded loading; errors become :class:`SpecError`."""
    return parse_yaml(_read_text(path), str(path))


def parse_yaml(text: str, source: str) -> Any:
    """Parse YAML text (a file's, or a flag's) as :func:`read_yaml` does; errors name ``source``."""
    import yaml

    try:
        return yaml.load(text, Loader=_yaml_loader())  # noqa: S506 - BoundedLoader is a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = " ".join((getattr(exc, "problem", None) or str(exc)).split())
        raise SpecError(f"{source}: invalid YAML{where}: {problem}") from None
    except (ValueError, LookupError, TypeError, AttributeError, ArithmeticError, RecursionError) as exc:
        # what construct_object cannot catch: a failure inside a collection's deferred construction
        raise SpecError(f"{source}: invalid YAML: a value could not be read ({type(exc).__name__})") from None
