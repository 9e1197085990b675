"""-o/--output of check, sweep, report and import (vramcalc.cli.output): never over an input, a FIFO,
a device or a directory, nothing written on refusal, atomic replacement; and standard output that is
full, closed early or ASCII-only ends with one line or quietly, never a traceback."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from vramcalc.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
FITS = ROOT / "examples" / "check" / "gpt2-a100.yaml"  # fits its A100: check exits 0
HF_CONFIG = ROOT / "tests" / "data" / "hf_configs" / "bert-base-uncased.json"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def run(*args: str | Path) -> Result:
    return runner.invoke(app, [str(arg) for arg in args])


def vramcalc(*args: str | Path, **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    command = [sys.executable, "-m", "vramcalc", *map(str, args)]
    options: dict = {"capture_output": True, "timeout": 30, "env": ENV, **kwargs}
    if "stdout" in options or "stderr" in options:
        options.pop("capture_output")
    return subprocess.run(command, **options)


@pytest.fixture(autouse=True)
def replace_only_in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process runs may replace files in tmp_path only: a sink that failed to refuse /dev/null must
    fail the test, not replace the machine's /dev/null (the tests may run as root)."""
    replace = os.replace

    def guarded(src: str, dst: str, *args: object, **kwargs: object) -> None:
        if not os.path.realpath(dst).startswith(f"{os.path.realpath(tmp_path)}/"):
            raise AssertionError(f"the test tried to replace {dst}")
        replace(src, dst, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "replace", guarded)


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "s.yaml"
    shutil.copyfile(FITS, path)
    return path


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "c.json"
    shutil.copyfile(HF_CONFIG, path)
    return path


def commands(spec: Path, config: Path) -> dict[str, list[str | Path]]:
    """Each command with an -o option, reading the one input file named."""
    return {
        "check": ["check", spec],
        "sweep": ["sweep", spec, "--batch-size", "1,2"],
        "report": ["report", spec],
        "import": ["import", config],
    }


def assert_refused(result: Result, output: Path | str, problem: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: --output: {output}: {problem}"), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr


# -- an input is never the output ----------------------------------------------------------------------


@pytest.mark.parametrize("command", ["check", "sweep", "report", "import"])
@pytest.mark.parametrize("route", ["same name", "symlink", "hard link"])
def test_input_is_never_overwritten(tmp_path: Path, spec: Path, config: Path, command: str, route: str) -> None:
    args = commands(spec, config)[command]
    source = Path(args[1])
    before = source.read_bytes()
    output = {"same name": source, "symlink": tmp_path / "link", "hard link": tmp_path / "hard"}[route]
    if route == "symlink":
        output.symlink_to(source)
    elif route == "hard link":
        os.link(source, output)
    result = run(*args, "-o", output)
    assert_refused(result, output, f"is an input of this command ({source})")
    assert source.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["s.yaml", "c.json", *([output.name] * (route != "same name"))]
    )


def test_missing_input_named_as_output_is_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    assert_refused(run("check", missing, "-o", missing), missing, f"is an input of this command ({missing})")
    assert not missing.exists()


def test_check_refuses_a_spec_found_in_a_directory_argument(tmp_path: Path, spec: Path) -> None:
    before = spec.read_bytes()
    result = run("check", tmp_path, "-o", spec, "--format", "junit")
    assert_refused(result, spec, f"is an input of this command ({spec})")
    assert spec.read_bytes() == before


def test_check_with_invalid_inputs_still_writes_its_report_elsewhere(tmp_path: Path, spec: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n", encoding="utf-8")
    report = tmp_path / "report.xml"
    result = run("check", spec, bad, "-o", report, "--format", "junit")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {bad}: invalid YAML")
    text = report.read_text(encoding="utf-8")
    assert 'errors="1"' in text and str(bad) in text  # the JUnit report lists the spec it could not check


# -- what is not a regular file ----------------------------------------------------------------------------


def test_fifo_is_refused_without_blocking(tmp_path: Path, spec: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for args in (["report", spec], ["check", spec], ["import", HF_CONFIG]):
        done = vramcalc(*args, "-o", fifo)  # a blocking open would hit the timeout
        assert done.returncode == 2
        assert (
            done.stderr.decode()
            == f"error: --output: {fifo}: a FIFO (named pipe), not a regular file; give the path of a file to write\n"
        )
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


@pytest.mark.parametrize(("target", "kind"), [("/dev/null", "a character device"), ("/dev/full", "a character device")])
def test_devices_are_refused(spec: Path, target: str, kind: str) -> None:
    if not os.path.exists(target):
        pytest.skip(f"no {target} here")
    assert_refused(run("report", spec, "-o", target), target, f"{kind}, not a regular file")
    assert_refused(run("import", HF_CONFIG, "-o", target), target, f"{kind}, not a regular file")


def test_directory_is_refused(tmp_path: Path, spec: Path) -> None:
    (tmp_path / "out").mkdir()
    output = tmp_path / "out"
    assert_refused(run("sweep", spec, "--batch-size", "1", "-o", output), output, "a directory, not a regular file")
    assert list(output.iterdir()) == []


def test_missing_directory_is_refused_before_the_work(tmp_path: Path, spec: Path) -> None:
    output = tmp_path / "no" / "r.html"
    assert_refused(run("report", spec, "-o", output), output, f"cannot write (no directory {tmp_path / 'no'})")


# -- atomic writing ----------------------------------------------------------------------------------------


def test_failed_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, spec: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    output = tmp_path / "r.html"
    output.write_text("old report\n", encoding="utf-8")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    result = run("report", spec, "-o", output)
    assert_refused(result, output, f"cannot write ({os.strerror(errno.ENOSPC)})")
    assert output.read_text(encoding="utf-8") == "old report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html", "s.yaml"]


def test_unwritable_directory_is_one_line(tmp_path: Path, spec: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    def denied(**kwargs: object) -> tuple[int, str]:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(tempfile, "mkstemp", denied)
    output = tmp_path / "r.html"
    assert_refused(run("report", spec, "-o", output), output, f"cannot write ({os.strerror(errno.EACCES)})")
    assert not output.exists()


def test_rewrite_keeps_mode_and_writes_through_a_symlink(tmp_path: Path, spec: Path) -> None:
    real = tmp_path / "real.html"
    real.write_text("old\n", encoding="utf-8")
    real.chmod(0o640)
    link = tmp_path / "link.html"
    link.symlink_to(real)
    result = run("report", spec, "-o", link)
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and real.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert stat.S_IMODE(real.stat().st_mode) == 0o640


def test_new_file_gets_the_umask_mode(tmp_path: Path, config: Path) -> None:
    old = os.umask(0o027)
    try:
        result = run("import", config, "-o", tmp_path / "new.yaml")
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE((tmp_path / "new.yaml").stat().st_mode) == 0o640  # 0o666 without the umask's bits


def test_dash_means_standard_output(spec: Path) -> None:
    result = run("sweep", spec, "--batch-size", "1", "--format", "csv", "-o", "-")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("batch_size") and not Path("-").exists()


# -- standard output ---------------------------------------------------------------------------------------


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("args", [["gpus"], ["gpus", "--json"], ["estimate", ROOT / "configs" / "bert-base.yaml"]])
def test_full_disk_on_stdout_is_one_line(args: list[str | Path]) -> None:
    with open("/dev/full", "wb") as full:
        done = vramcalc(*args, stdout=full, stderr=subprocess.PIPE)
    assert done.returncode == 2
    assert done.stderr.decode() == f"error: standard output: cannot write ({os.strerror(errno.ENOSPC)})\n"


@pytest.mark.parametrize("args", [["gpus"], ["gpus", "--json"], ["check", FITS]])
def test_closed_pipe_ends_quietly(args: list[str | Path]) -> None:
    read, write = os.pipe()
    os.close(read)  # every write to the pipe now fails with EPIPE
    try:
        done = vramcalc(*args, stdout=write, stderr=subprocess.PIPE)
    finally:
        os.close(write)
    assert done.returncode == 141  # 128 + SIGPIPE, as a shell reports it
    assert done.stderr == b""


def test_ascii_only_stdout_is_degraded_not_a_traceback() -> None:
    env = {**ENV, "PYTHONIOENCODING": "ascii"}
    done = vramcalc("estimate", ROOT / "configs" / "bert-base.yaml", env=env)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr == b""
    assert done.stdout.isascii() and b"bert-base" in done.stdout
