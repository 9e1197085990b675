"""Hostile files in place of a spec: each is refused with one clear line, in under a second and under
100 MB of memory (measured in a fresh interpreter from its own peak resident memory, as bounds, not
benchmarks).

Every command is also given each hostile file for each of its path parameters (commands enumerated
at collection time), so a command added later is held to the same rules.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fuzz_argv import param_info, writes_file
from fuzz_support import LONG_NAME, ROOT, check_result, command, command_names, error_lines, invoke, workspace

from vramcalc.files import MAX_SPEC_BYTES

pytestmark = pytest.mark.skipif(os.name != "posix", reason="FIFOs, symlink loops and getrusage are POSIX")

#: CPU seconds the loader may spend on one hostile file: the work it does, not the wall time, which a machine
#: busy with other jobs stretches (a loader that parsed every byte of a deep or wide file would take far more).
TIME_BOUND_S = 1.0
MEMORY_BOUND_MB = 100

TINY = "model: {layers: 2, hidden_size: 64, heads: 4, vocab_size: 100}\n"


def billion_laughs() -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def doubling_bomb_in_a_field() -> str:
    """2**22 list items from 44 aliases, landing in a field whose error message quotes the value."""
    lines = ["x0: &x0 [q_proj, q_proj]"] + [f"x{i}: &x{i} [*x{i - 1}, *x{i - 1}]" for i in range(1, 22)]
    return "\n".join(lines) + "\n" + TINY + "workload: {seq_len: 8, batch_size: *x21}\n"


def deep_alias_chain() -> str:
    """Each anchor nests the previous one 45 levels down: a 1,800-level value from 40 short lines."""
    lines = ["d0: &d0 " + "[" * 45 + "1" + "]" * 45]
    lines += [f"d{i}: &d{i} " + "[" * 45 + f"*d{i - 1}" + "]" * 45 for i in range(1, 40)]
    return "\n".join(lines) + "\n" + TINY + "workload: {seq_len: 8, batch_size: *d39}\n"


def make(kind: str, folder: Path) -> Path:
    """Create one hostile file (or non-file) and return its path."""
    path = folder / f"{kind}.yaml"
    if kind == "billion-laughs":
        path.write_text(billion_laughs())
    elif kind == "doubling-bomb":
        path.write_text(doubling_bomb_in_a_field())
    elif kind == "deep-alias-chain":
        path.write_text(deep_alias_chain())
    elif kind == "50MB":
        with path.open("wb") as handle:
            handle.write(b"name: big\n# ")
            handle.truncate(50 * 2**20)  # sparse: a 50 MB file without writing 50 MB
    elif kind == "binary":
        path.write_bytes(os.urandom(4096) + bytes(range(256)))
    elif kind == "non-utf8":
        path.write_bytes("name: caf\xe9\nmodel: {}\n".encode("latin-1"))
    elif kind == "utf16":
        path.write_bytes("name: tiny\n".encode("utf-16"))
    elif kind == "nul-bytes":
        path.write_bytes(b"\x00" * 1000)
    elif kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink-loop":
        path.symlink_to(path.name)
    elif kind == "symlink-to-device":
        path.symlink_to("/dev/zero")
    elif kind == "many-keys":
        path.write_text("\n".join(f"k{i}: 1" for i in range(80_000)))
    elif kind == "wide-list":
        path.write_text("a: [" + "1," * 300_000 + "1]\n")
    elif kind == "deep-nesting":
        path.write_text("a: " + "[" * 100_000 + "]" * 100_000 + "\n")
    elif kind == "huge-int":
        path.write_text("model: {layers: " + "9" * 200_000 + "}\n")
    else:
        raise ValueError(kind)
    return path


#: kind -> a phrase the single error line must contain.
HOSTILE = {
    "billion-laughs": "aliases",
    "doubling-bomb": "batch_size",
    "deep-alias-chain": "batch_size",
    "50MB": f"limited to {MAX_SPEC_BYTES:,} bytes",
    "binary": "",
    "non-utf8": "not UTF-8",
    "utf16": "not UTF-8",
    "nul-bytes": "invalid YAML",
    "directory": "not a regular file",
    "fifo": "not a regular file",
    "symlink-loop": "symlink loop",
    "symlink-to-device": "not a regular file",
    "many-keys": "values (a spec has a few dozen)",
    "wide-list": "values (a spec has a few dozen)",
    "deep-nesting": "nested more than",
    "huge-int": "invalid YAML",
}

PROBE = """
import json, resource, sys, time
from vramcalc.errors import SpecError
from vramcalc.spec.load import load_spec
load_spec  # everything imported before measuring


def peak_mb():
    # VmHWM (Linux): the peak resident memory of this interpreter's own address space. Not ru_maxrss: exec
    # keeps the high-water mark of the memory it replaces, and a child that subprocess starts with vfork
    # replaces its parent's, so ru_maxrss starts at the test process's peak (hundreds of MB late in a run)
    # and growth below that peak would not show.
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20


before = peak_mb()
start = time.process_time()
try:
    load_spec(sys.argv[1])
    message = None
except SpecError as exc:
    message = str(exc)
elapsed = time.process_time() - start
print(json.dumps({"message": message, "seconds": elapsed, "grown_mb": peak_mb() - before}))
"""


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_refused_quickly_with_little_memory(kind: str, tmp_path: Path) -> None:
    path = make(kind, tmp_path)
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, timeout=60, cwd=ROOT, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)
    assert report["message"] is not None, "a hostile file was accepted as a spec"
    lines = report["message"].splitlines()
    assert all(line.startswith(f"{path}: ") for line in lines), lines[:3]
    assert any(HOSTILE[kind] in line for line in lines), lines[:3]
    assert all(len(line) < 500 for line in lines), "an error line quotes megabytes of input"
    assert report["seconds"] < TIME_BOUND_S, report
    assert report["grown_mb"] < MEMORY_BOUND_MB, report


@pytest.mark.parametrize("kind", ["fifo", "directory", "symlink-loop", "50MB", "billion-laughs"])
def test_the_installed_command_refuses_without_blocking(kind: str, tmp_path: Path) -> None:
    """A real process (not CliRunner): a FIFO must not block the read; one error line, exit code 2."""
    path = make(kind, tmp_path)
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    out = subprocess.run(
        [sys.executable, "-m", "vramcalc", "estimate", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stdout == ""
    assert out.stderr.startswith(f"error: {path}: ") and out.stderr.count("\n") == 1, out.stderr


def path_parameters() -> list[tuple[str, str]]:
    """(command, parameter) for every parameter that names a file to read."""
    found = []
    for name in command_names():
        for param in command().commands[name].params:
            kind, annotation = param_info(param)
            if ("Path" in str(annotation) or param.name in ("spec", "specs", "config")) and not writes_file(param):
                found.append((name, param.name))
    return found


#: Options a command needs before it looks at its files.
EXTRA_ARGS = {"bandwidth": ["--gpu", "h100"]}
MATRIX_KINDS = ["fifo", "directory", "symlink-loop", "symlink-to-device", "binary", "non-utf8", "50MB"]


@pytest.mark.parametrize(("name", "param_name"), path_parameters())
def test_every_path_parameter_refuses_hostile_files(name: str, param_name: str, tmp_path: Path) -> None:
    param = next(p for p in command().commands[name].params if p.name == param_name)
    fixtures = workspace().fixtures
    required = [p for p in command().commands[name].params if p.required and p is not param]
    for kind in [*MATRIX_KINDS, "long-name"]:
        target = LONG_NAME if kind == "long-name" else str(make(kind, tmp_path / kind if kind else tmp_path))
        args = [name, *EXTRA_ARGS.get(name, [])]
        for other in required:  # fill the other required parameters with valid values
            value = str(fixtures / ("stats.json" if other.name == "measured" else "tiny.yaml"))
            args += [value] if param_info(other)[0] == "argument" else [other.opts[0], value]
        args += [target] if param_info(param)[0] == "argument" else [param.opts[0], target]
        result = invoke(args)
        if not check_result(args, result, from_file=False):
            continue  # a known issue (fuzz_support.KNOWN_ISSUES)
        assert result.exit_code == 2, f"{args}: {result.output[-500:]}"
        if result.exit_code == 2 and error_lines(result):
            assert any(target[:200] in line for line in error_lines(result)), (args, result.stderr[-500:])


@pytest.fixture(autouse=True)
def _separate_folders(tmp_path: Path) -> None:
    for kind in MATRIX_KINDS:
        (tmp_path / kind).mkdir()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (LONG_NAME, "cannot read (File name too long)"),
        ("a\x00b.yaml", "not a valid file name"),
        ("\udcff.yaml", "no such file"),
    ],
)
def test_unusual_file_names_are_an_error_not_a_traceback(name: str, message: str) -> None:
    """spec._read_text: Path.exists() raised OSError for a name too long (ENAMETOOLONG): a traceback."""
    from vramcalc.errors import SpecError
    from vramcalc.spec.load import load_spec

    with pytest.raises(SpecError) as caught:
        load_spec(name)
    assert str(caught.value) == f"{name}: {message}"
