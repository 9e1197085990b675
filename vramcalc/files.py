"""Reading user files, YAML and JSON: bounded, non-blocking, safe (no Python object tag is ever built).

Every reader of user files (spec files, config.json, memory_stats dumps, flag values holding YAML)
goes through here, so all refuse hostile input the same way: one :class:`SpecError` line.
"""

from __future__ import annotations

import errno
import functools
import itertools
import math
import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vramcalc.errors import SpecError
from vramcalc.units import quoted

if TYPE_CHECKING:
    from collections.abc import Callable

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


@functools.cache
def _yaml_loaders() -> tuple[Any, Any | None]:
    """The bounded loader (PyYAML's pure-Python parser), and the same loader over libyaml's parser (None
    where PyYAML was built without libyaml); built once per process."""
    import yaml
    from yaml.composer import Composer, ComposerError
    from yaml.constructor import ConstructorError, SafeConstructor
    from yaml.resolver import Resolver

    class BoundedComposer(Composer):
        """Bounds aliases, nesting and node count while the document is composed."""

        peek_event: Callable[[], Any]  # the parser's, in the loaders below
        check_event: Callable[..., bool]
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

    class BoundedConstructor(SafeConstructor):
        """SafeConstructor (no Python object tags) that rejects duplicate keys and the refused tags."""

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
        BoundedConstructor.add_constructor(f"tag:yaml.org,2002:{kind}", refuse)

    class BoundedLoader(BoundedComposer, BoundedConstructor, yaml.SafeLoader):
        """SafeLoader (no Python object tags) that also bounds aliases, nesting and node count, and
        rejects duplicate keys: PyYAML's pure-Python reader, scanner and parser."""

    try:
        from yaml._yaml import CParser as parser  # present where PyYAML was built with libyaml
    except ImportError:
        return BoundedLoader, None

    class FastBoundedLoader(BoundedComposer, parser, BoundedConstructor, Resolver):
        """BoundedLoader over libyaml's parser: the same composer (with its bounds), constructor and
        resolver in Python, fed events that C code scanned and parsed."""

        def __init__(self, stream: str) -> None:
            parser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

    return BoundedLoader, FastBoundedLoader


def _yaml_loader() -> Any:
    """The bounded loader over PyYAML's pure-Python parser."""
    return _yaml_loaders()[0]


#: What libyaml's parser is given (comments aside, see :func:`libyaml_reads_alike`): printable ASCII and
#: line feeds, without tabs or carriage returns, the indicators of block scalars (| >), tags (!), complex
#: keys (?), anchors and aliases (& *), the reserved @ and `, backslashes, or a directive (% starting a line).
_LIBYAML_REFUSED = re.compile(r"[^\n -~]|[|>!?&*@`\\]|^%", re.MULTILINE)
#: A comment: "#" starting a line or after a space, to the end of the line.
_COMMENT = re.compile(r"(?:^|(?<= ))#[^\n]*", re.MULTILINE)


def libyaml_reads_alike(text: str) -> bool:
    """Whether ``text`` keeps to the YAML that libyaml's parser reads as PyYAML's pure-Python parser does
    (:data:`_LIBYAML_REFUSED`; in a text without quotes, whose every "#" after a space starts a comment,
    the comments may hold anything). Beyond it the two differ: libyaml reads tabs inside plain scalars, a
    BOM or NEL inside the text, "? " inside a flow collection, a lone "!" ('' for PyYAML's None) and a
    block scalar's header directly followed by "#"."""
    if "'" not in text and '"' not in text:
        text = _COMMENT.sub("", text)
    return _LIBYAML_REFUSED.search(text) is None


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
    """Parse YAML text (a file's, or a flag's) as :func:`read_yaml` does; errors name ``source``.

    The bounded loader reads a text that :func:`libyaml_reads_alike` over libyaml's parser, where PyYAML
    has it (several times faster); any other text, and one that it does not read without an error, is read
    over PyYAML's pure-Python parser, whose result (a value, or the error) is the one returned, so every
    message is that parser's, with or without libyaml."""
    import yaml

    loader, fast = _yaml_loaders()
    if fast is not None and libyaml_reads_alike(text):
        try:
            return yaml.load(text, Loader=fast)  # noqa: S506 - a SafeConstructor, bounded as BoundedLoader is
        except Exception:  # noqa: S110 - reported as the pure-Python parser reports it, below
            pass
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 - BoundedLoader is a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = " ".join((getattr(exc, "problem", None) or str(exc)).split())
        raise SpecError(f"{source}: invalid YAML{where}: {problem}") from None
    except (ValueError, LookupError, TypeError, AttributeError, ArithmeticError, RecursionError) as exc:
        # what construct_object cannot catch: a failure inside a collection's deferred construction
        raise SpecError(f"{source}: invalid YAML: a value could not be read ({type(exc).__name__})") from None


#: Nesting levels allowed in a JSON file (a config.json needs 3; bounds the decoder's recursion).
MAX_JSON_DEPTH = 64
#: Digits allowed in one JSON integer: every size and count vramcalc accepts has fewer (2**60 has 19).
MAX_JSON_INT_DIGITS = 30
#: Bytes of JSON scanned at a time for brackets outside strings (bounds the scan's memory).
_SCAN_CHUNK = 1 << 16
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in b"[]{}")
#: How each byte changes the nesting depth: +1 for [ and {, -1 for ] and }.
_DEPTH_STEP = tuple((byte in b"[{") - (byte in b"]}") for byte in range(256))


class _Refused:
    """A value the JSON reader refuses, left in its place so that the error can name its key."""

    __slots__ = ("problem",)

    def __init__(self, problem: str) -> None:
        self.problem = problem


class _JsonHooks:
    """The decoder's hooks for numbers, constants and objects; they never raise, they mark."""

    def __init__(self) -> None:
        self.refused = False

    def _refuse(self, problem: str) -> _Refused:
        self.refused = True
        return _Refused(problem)

    def integer(self, text: str) -> int | _Refused:
        digits = len(text.lstrip("-"))
        if digits > MAX_JSON_INT_DIGITS:
            return self._refuse(f"an integer of {digits:,} digits is out of range (at most {MAX_JSON_INT_DIGITS})")
        return int(text)

    def real(self, text: str) -> float | _Refused:
        value = float(text)
        return value if math.isfinite(value) else self._refuse(f"{quoted(text)} is out of range (not a finite number)")

    def constant(self, name: str) -> _Refused:
        return self._refuse(f"{name} is not a finite number")

    def mapping(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        mapping: dict[str, Any] = {}
        for key, value in pairs:
            mapping[key] = self._refuse("duplicate key") if key in mapping else value
        return mapping


def _brackets_outside_strings(data: bytes) -> bytes:
    """The brackets of JSON text that lie outside its strings (linear time, bounded memory)."""
    # Without its escaped backslashes and quotes (backslashes first: a run of them pairs up from its
    # start, as the decoder reads it), every quote left opens or closes a string.
    data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    kept: list[bytes] = []
    inside = False
    for start in range(0, len(data), _SCAN_CHUNK):
        parts = data[start : start + _SCAN_CHUNK].split(b'"')
        kept.append(b"".join(parts[int(inside) :: 2]).translate(None, _NOT_BRACKETS))
        inside ^= len(parts) % 2 == 0  # an odd number of quotes in this chunk
    return b"".join(kept)


def _nesting_depth(text: str) -> int:
    """The deepest nesting of JSON text, found without decoding it (which recurses once per level): the
    largest running count of open brackets. Exact for valid JSON; where the text stops being valid, the
    decoder stops too, and no further bracket can take it deeper."""
    brackets = _brackets_outside_strings(text.encode("utf-8", "surrogatepass"))
    return max(itertools.accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0)


def _show_key(key: object) -> str:
    """A key as an error line shows it: quoted when empty, padded, unprintable or long."""
    text = str(key)
    if text and text.isprintable() and text == text.strip() and len(text) <= 80:
        return text
    return quoted(text)


def _first_refused(document: Any) -> tuple[str, str]:
    """The dotted key path and problem of the first refused value, in document order."""
    stack: list[tuple[tuple[str, ...], Any]] = [((), document)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, _Refused):
            return ".".join(path), value.problem
        if isinstance(value, dict):
            children = [((*path, _show_key(k)), v) for k, v in value.items()]
        elif isinstance(value, list):
            children = [((*path, str(i)), v) for i, v in enumerate(value)]
        else:
            continue
        stack.extend(reversed(children))
    raise AssertionError("no refused value in a document that had one")  # pragma: no cover


def parse_json(text: str, source: str) -> Any:
    """Decode JSON text with bounded nesting and numbers: no NaN or Infinity, no integer longer than
    MAX_JSON_INT_DIGITS, no duplicate key. Every problem is one :class:`SpecError` line naming
    ``source`` and, for a refused value, its key."""
    import json

    if _nesting_depth(text) > MAX_JSON_DEPTH:
        raise SpecError(f"{source}: invalid JSON: nested more than {MAX_JSON_DEPTH} levels deep")
    hooks = _JsonHooks()
    try:
        document = json.loads(
            text,
            parse_int=hooks.integer,
            parse_float=hooks.real,
            parse_constant=hooks.constant,
            object_pairs_hook=hooks.mapping,
        )
    except json.JSONDecodeError as exc:
        raise SpecError(f"{source}: invalid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}") from None
    if hooks.refused:
        key, problem = _first_refused(document)
        raise SpecError(f"{source}: {key}: {problem}" if key else f"{source}: {problem}")
    return document


def read_json(path: Path, limit: int, what: str) -> Any:
    """Read one JSON file of at most ``limit`` bytes (``what`` names such files in the size error) as
    :func:`parse_json` decodes text; every problem is one :class:`SpecError` line naming the file."""
    data = read_regular_file(path, limit, what)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not UTF-8 text") from None
    return parse_json(text, str(path))
