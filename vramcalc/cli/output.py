"""Where a command's output goes: the ``-o/--output`` file, and standard output and error.

``-o FILE`` (check, sweep, report, import) is checked before the command does its work and refused,
with one ``error: --output: FILE: ...`` line and exit code 2 and without writing anything, when it is
one of the command's input files (the same file through a symlink or a hard link included; for a
SPEC argument that falls back to a bundled example, that example's file: :func:`spec_inputs`; the user
GPU catalog the command reads), an existing FIFO, device, socket or directory, a path ending in ``/``
that is no directory, or a symbolic link to a missing file. A replaced file keeps its permissions but
never a setuid, setgid or sticky bit. ``-o -`` means standard output. The file is written
atomically: the text goes to a temporary file in the same directory, which then replaces FILE, so a
failed write (a full disk, no permission, a read-only file system) leaves the old file as it was.

:func:`guard_streams` makes standard output and error safe to write: a character the terminal's
encoding lacks is replaced instead of failing, a failed write raises :class:`StreamError`, which
the entry point turns into one line (or, for a closed pipe, a quiet exit), and no line can read as a CI
workflow command (:class:`LineSink`).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import stat
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from vramcalc.errors import EXIT_BAD_INPUT

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

#: Exit code after a closed pipe (``vramcalc gpus | head -1``): 128 + SIGPIPE, what a shell reports
#: for a program that a closed pipe ended; it cannot be mistaken for 0 (ok), 1 or 2.
EXIT_BROKEN_PIPE = 141

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


@dataclass(frozen=True)
class OutputFile:
    """A checked ``--output`` file: the path as given, and the real path that will be replaced."""

    given: str
    target: str
    existing: os.stat_result | None


def _refuse(given: str, problem: str) -> typer.Exit:
    from vramcalc.cli._common import echo_err

    echo_err(f"error: --output: {given}: {problem}")
    return typer.Exit(EXIT_BAD_INPUT)


def _problem(exc: OSError | ValueError) -> str:
    if isinstance(exc, ValueError):  # an embedded NUL
        return "not a valid file name"
    if exc.errno == errno.ENOTDIR:
        return "cannot write (a part of the path is not a directory)"
    return f"cannot write ({exc.strerror or exc})"


def output_file(output: str | Path | None, inputs: Iterable[str | Path]) -> OutputFile | None:
    """The checked ``--output`` file (None: standard output, for no option or ``-``); a refusal is one
    ``error:`` line and :class:`typer.Exit` with code 2, before anything is written."""
    if output is None or str(output) == "-":
        return None
    given = str(output)
    try:
        existing: os.stat_result | None = os.stat(given)
    except FileNotFoundError:
        existing = None
        if os.path.islink(given):
            raise _refuse(given, "a symbolic link to a missing file; give the path of a file to write") from None
    except (OSError, ValueError) as exc:
        raise _refuse(given, _problem(exc)) from None
    if existing is None and given.endswith(("/", os.sep)):
        raise _refuse(given, "names a directory that does not exist; give the path of a file to write")
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        kind = next((name for test, name in _KINDS if test(existing.st_mode)), "not a regular file")
        raise _refuse(given, f"{kind}, not a regular file; give the path of a file to write")
    target = os.path.realpath(given)  # through symlinks: the file they lead to is replaced, not the link
    directory = os.path.dirname(target)
    if not os.path.isdir(directory):
        raise _refuse(given, f"cannot write (no directory {directory})")
    if not os.access(directory, os.W_OK):
        raise _refuse(given, f"cannot write (the directory {directory} is not writable)")
    sink = OutputFile(given, target, existing)
    refuse_inputs(sink, [*inputs, *_catalog_inputs()])
    return sink


def _catalog_inputs() -> list[Path]:
    """The user GPU catalog the command reads (``--gpus-file`` / ``VRAMCALC_GPUS``): never an output."""
    from vramcalc.hardware.lookup import user_catalog_file

    found = user_catalog_file()
    return [found] if found is not None else []


def spec_inputs(args: Iterable[str | Path]) -> list[str]:
    """The files SPEC arguments read, for :func:`output_file`: each argument, and for a bare name that
    falls back to a bundled example (:func:`vramcalc.spec.load.load_spec_arg`) that example's file too,
    so ``-o`` never replaces an installed example."""
    from vramcalc.spec.load import example_file

    files: list[str] = []
    for arg in args:
        example = example_file(arg)
        files += [str(arg)] if example is None else [str(arg), example]
    return files


def refuse_inputs(sink: OutputFile | None, inputs: Iterable[str | Path]) -> None:
    """Refuse ``sink`` when it is one of ``inputs``: the same file (device and inode, so through
    symlinks and hard links too) or, for a file that does not exist yet, the same resolved path."""
    if sink is None:
        return
    for source in inputs:
        try:
            info = os.stat(source)
        except (OSError, ValueError):
            info = None
        if sink.existing is not None and info is not None:
            same = (info.st_dev, info.st_ino) == (sink.existing.st_dev, sink.existing.st_ino)
        else:
            try:
                same = os.path.realpath(source) == sink.target
            except (OSError, ValueError):
                same = False
        if same:
            raise _refuse(sink.given, f"is an input of this command ({source}); write the output to another file")


def write_text(sink: OutputFile | None, text: str) -> int:
    """Write ``text`` to standard output (no sink) or atomically to the sink; the bytes written.
    A failed write is one ``error:`` line and exit code 2, the old file left as it was."""
    if sink is None:
        typer.echo(text, nl=False)
        return len(text.encode("utf-8", "replace"))
    import tempfile  # only when a file is written: start-up stays light

    data = text.encode("utf-8")
    directory, name = os.path.split(sink.target)
    # the replaced file's permissions, never its setuid, setgid or sticky bits
    mode = stat.S_IMODE(sink.existing.st_mode) & 0o777 if sink.existing is not None else 0o666 & ~_umask()
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise _refuse(sink.given, _problem(exc)) from None
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, mode)
        _still_replaceable(sink)
        os.replace(temporary, sink.target)
    except OSError as exc:
        _remove(temporary)
        raise _refuse(sink.given, _problem(exc)) from None
    except BaseException:
        _remove(temporary)
        raise
    return len(data)


def _still_replaceable(sink: OutputFile) -> None:
    """Refuse a target that became something other than a regular file while the text was written."""
    try:
        mode = os.stat(sink.target).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise OSError(errno.EEXIST, "no longer a regular file")


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# -- standard output and error -------------------------------------------------------------------------


class StreamError(Exception):
    """A write to standard output or error failed (not an OSError, so no library swallows it)."""

    def __init__(self, stream: str, fd: int, error: OSError) -> None:
        super().__init__(f"{stream}: cannot write ({error.strerror or error})")
        self.stream, self.fd, self.error = stream, fd, error

    @property
    def broken_pipe(self) -> bool:
        return self.error.errno == errno.EPIPE


class _GuardedFile(io.FileIO):
    """A standard stream's file descriptor whose write errors become :class:`StreamError`."""

    stream = "standard output"

    def write(self, data: ReadableBuffer, /) -> int:
        try:
            return super().write(data)
        except OSError as exc:
            raise StreamError(self.stream, self.fileno(), exc) from None


class LineSink(io.TextIOBase):
    """A standard stream whose every line is made safe for a CI log (:func:`vramcalc.render.escape.
    workflow_safe`): no line starts with ``::`` or holds ``##[``, whatever the renderer wrapped where.
    Text is held until its line ends (or the stream is flushed). ``deliberate()`` lets a format whose
    purpose is workflow commands (``check --format github``, every value in them escaped) through."""

    def __init__(self, inner: io.TextIOBase) -> None:
        super().__init__()
        self.inner = inner
        self.pending = ""
        self.passing = False

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self.inner, "encoding", "utf-8"))

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self.inner, "errors", None)

    def isatty(self) -> bool:
        return self.inner.isatty()

    def fileno(self) -> int:
        return self.inner.fileno()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if self.passing:
            return self.inner.write(text)
        from vramcalc.render.escape import workflow_safe

        *lines, self.pending = (self.pending + text).split("\n")
        if lines:
            self.inner.write("".join(workflow_safe(line) + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        if self.pending:
            from vramcalc.render.escape import workflow_safe

            self.inner.write(workflow_safe(self.pending))
            self.pending = ""
        self.inner.flush()

    @contextlib.contextmanager
    def deliberate(self) -> Iterator[None]:
        """Write workflow commands as they are, for a format made of them."""
        self.flush()
        self.passing = True
        try:
            yield
        finally:
            self.flush()
            self.passing = False


def deliberate_commands() -> contextlib.AbstractContextManager[None]:
    """Let standard output carry workflow commands for a while (``check --format github``); a no-op where
    standard output is not a :class:`LineSink` (a test runner's capture)."""
    stream = sys.stdout
    return stream.deliberate() if isinstance(stream, LineSink) else contextlib.nullcontext()


def guard_streams() -> None:
    """Replace ``sys.stdout``/``sys.stderr`` (when they are real files) with the same descriptors,
    encoding and buffering, but characters the encoding lacks replaced ('?' on stdout, a backslash
    escape on stderr) and write errors raised as :class:`StreamError`."""
    for name, stream_name, errors in (("stdout", "standard output", "replace"), ("stderr", "standard error", None)):
        stream = getattr(sys, name)
        try:
            stream.flush()
            fd = stream.fileno()
        except (AttributeError, OSError, ValueError):  # closed, or not a file (a test runner's capture)
            continue
        raw = _GuardedFile(fd, "wb", closefd=False)
        raw.stream = stream_name
        wrapped = io.TextIOWrapper(
            io.BufferedWriter(raw),
            encoding=stream.encoding,
            errors=errors or stream.errors,
            line_buffering=stream.line_buffering,
            write_through=name == "stderr",
        )
        setattr(sys, name, LineSink(wrapped))


def flush_streams() -> None:
    """Flush both standard streams (a failure raises :class:`StreamError`)."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()


def stream_failed(exc: StreamError) -> int:
    """Report a failed standard stream (nothing for a closed pipe) and silence it; the exit code."""
    with contextlib.suppress(OSError):  # later writes and the flush at exit go nowhere, quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, exc.fd)
        os.close(devnull)
    if exc.broken_pipe:
        return EXIT_BROKEN_PIPE
    with contextlib.suppress(StreamError, OSError, ValueError):
        from vramcalc.cli._common import echo_err

        echo_err(f"error: {exc}")
    return EXIT_BAD_INPUT
