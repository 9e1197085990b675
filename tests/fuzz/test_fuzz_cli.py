"""Fuzzing the command line: random argument vectors for every command, astronomically large specs,
and "no surprises" (no network, no files written without --output, no undocumented environment).

Commands are enumerated when the tests are collected (``typer.main.get_command(app).commands``), so a
command added later is fuzzed and checked here without editing this file.
"""

from __future__ import annotations

import ast
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
from fuzz_argv import Argv, argv, check_argv, param_info
from fuzz_registry import TARGETS_BY_NAME
from fuzz_support import (
    ROOT,
    check_json,
    check_result,
    ci_settings,
    command,
    command_names,
    invoke,
    listing,
    workspace,
)
from fuzz_targets import check_extreme_spec, extreme_specs
from hypothesis import given

from vramcalc.units import allocation_bytes, dtype_bytes

COMMANDS = command_names()
#: Environment variables vramcalc may read (README "Robustness"): rich's and typer's terminal settings.
#: The terminal variables rich and typer read, and VRAMCALC_GPUS (a user GPU catalog; docs/hardware.md).
DOCUMENTED_ENV = {"NO_COLOR", "COLUMNS", "TERMINAL_WIDTH", "VRAMCALC_GPUS"}


def test_every_command_is_enumerated() -> None:
    assert {"estimate", "schema", "gpus", "bandwidth"} <= set(COMMANDS)


@ci_settings(TARGETS_BY_NAME["argv"].ci_examples)
@given(argv())
def test_random_argv_exits_0_1_or_2(example: Argv) -> None:
    check_argv(example)


@pytest.mark.parametrize("name", COMMANDS)
def test_random_argv_of_each_command(name: str) -> None:
    """A few examples per command on top of the mixed run above, so no command goes unfuzzed."""

    @ci_settings(20)
    @given(argv(names=(name,)))
    def run(example: Argv) -> None:
        check_argv(example)

    run()


@ci_settings(TARGETS_BY_NAME["extreme-spec"].ci_examples)
@given(extreme_specs())
def test_astronomical_specs_give_exact_big_ints_or_a_clear_error(text: str) -> None:
    check_extreme_spec(text)


# --------------------------------------------------------------------------------------------------
# Numeric safety.
# --------------------------------------------------------------------------------------------------

HUGE = """\
name: huge
model:
  architecture: decoder
  layers: 10000
  hidden_size: 100000
  heads: 1000
  vocab_size: 1000000
workload:
  batch_size: 1000000
  seq_len: 1000000000
  precision: fp32
  optimizer: adamw
"""


def test_10_to_the_15_parameters_and_a_billion_tokens(write_spec) -> None:
    """Derived from the shape: 10,000 layers of width 100,000 are 1.2 x 10^15 parameters."""
    path = write_spec(HUGE)
    result = invoke(["estimate", str(path), "--json"])
    check_result(["estimate", "--json"], result)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert 10**15 < doc["params"] < 2 * 10**15
    assert doc["components"]["parameters"] == 4 * doc["params"]
    assert doc["component_peaks"]["optimizer_states"] >= 8 * doc["params"]
    assert doc["total_bytes"] == doc["peak_allocated_bytes"] + sum(doc["overhead"].values())
    assert all(isinstance(v, int) and v >= 0 for v in doc["components"].values())
    table = invoke(["estimate", str(path), "--gpu", "h100"])
    assert table.exit_code == 0 and "inf" not in table.stdout.lower().replace("inference", "")


@pytest.mark.parametrize("value", ["1000T", "1e19", "10000000000000000000", "99999999999999999999T", "1e400"])
def test_counts_beyond_the_range_are_a_clear_error(write_spec, value: str) -> None:
    """A stated count above the spec's bound (10^12 parameters) is an error naming the key, never a number."""
    path = write_spec(HUGE.replace("  vocab_size: 1000000\n", f"  vocab_size: 1000000\n  params: {value}\n"))
    result = invoke(["estimate", str(path)])
    assert result.exit_code == 2
    assert "model.params" in result.stderr and ("out of range" in result.stderr or "less than" in result.stderr)


@pytest.mark.parametrize("n", [2**53 + 1, 10**17 + 1, 2**60 + 1, 10**40 + 7])
def test_byte_rounding_is_exact_beyond_float_precision(n: int) -> None:
    """units.allocation_bytes and units.dtype_bytes divided as floats: above 2**53 bytes the result could be
    below the exact size (2**60 + 1 bytes rounded to 2**60)."""
    rounded = allocation_bytes(n)
    assert rounded >= n and rounded % 512 == 0 and rounded - n < 512
    assert dtype_bytes("int4", n) == (n + 1) // 2
    assert dtype_bytes("fp32", n) == 4 * n


# --------------------------------------------------------------------------------------------------
# No surprises: every command, run the way a user would run it.
# --------------------------------------------------------------------------------------------------


def good_invocations(name: str, spec: str) -> list[list[str]]:
    """Representative valid command lines; a command added later gets its required parameters filled."""
    fixtures = workspace().fixtures
    known = {
        "estimate": [["estimate", spec, "--json", "--gpu", "h100"], ["estimate", spec, "--timeline"]],
        "schema": [["schema"]],
        "gpus": [["gpus", "--json"], ["gpus"]],
        "bandwidth": [["bandwidth", "--gpu", "h100", "--params", "7B"], ["bandwidth", spec, "--gpu", "a100", "--json"]],
        "report": [["report", spec, "--gpu", "h100"]],
        "compare": [["compare", spec, "--measured", str(fixtures / "stats.json")]],
        "check": [["check", spec, "--gpu", "h100"]],
        "fit": [["fit", spec, "--gpu", "h100", "--json"]],
        "max-batch": [["max-batch", spec, "--gpu", "h100"]],
        "max-seq": [["max-seq", spec, "--gpu", "h100"]],
        "sweep": [["sweep", spec, "--batch-size", "1,2,4", "--gpu", "h100"]],
        "import": [["import", str(fixtures / "config.json")]],
        "plan": [["plan", spec, "--gpu", "h100"]],
    }
    if name in known:
        return known[name]
    args = [name]
    for param in command().commands[name].params:
        kind, annotation = param_info(param)
        if param.required:
            value = spec if "Path" in str(annotation) or kind == "argument" else "1"
            args += [value] if kind == "argument" else [param.opts[0], value]
    return [args]


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """An empty working directory and home; the spec in a folder of its own."""
    folders = {name: tmp_path / name for name in ("cwd", "home", "specs")}
    for folder in folders.values():
        folder.mkdir()
    (folders["specs"] / "spec.yaml").write_text((workspace().fixtures / "tiny.yaml").read_text())
    for var in ("HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME"):
        monkeypatch.setenv(var, str(folders["home"]))
    return folders


@pytest.mark.parametrize("name", COMMANDS)
def test_no_files_written_without_output(name: str, isolated: dict[str, Path]) -> None:
    spec = str(isolated["specs"] / "spec.yaml")
    before = {key: listing(folder) for key, folder in isolated.items()}
    for args in good_invocations(name, spec):
        result = invoke(args, cwd=isolated["cwd"])
        check_result(args, result)
    assert {key: listing(folder) for key, folder in isolated.items()} == before


@pytest.mark.parametrize(
    "name",
    [
        n
        for n in COMMANDS
        if any(o in ("-o", "--output") for p in command().commands[n].params for o in getattr(p, "opts", []))
    ],
)
def test_output_writes_only_the_named_file(name: str, isolated: dict[str, Path]) -> None:
    spec = str(isolated["specs"] / "spec.yaml")
    opt = next(o for p in command().commands[name].params for o in p.opts if o in ("-o", "--output"))
    suffix = {"report": "out.html", "import": "out.yaml"}.get(name, "out.txt")
    for args in good_invocations(name, spec):
        result = invoke([*args, opt, suffix], cwd=isolated["cwd"])
        check_result(args, result)
        if result.exit_code in (0, 1):
            assert listing(isolated["cwd"]) == {suffix}, result.output
        assert listing(isolated["home"]) == set() and listing(isolated["specs"]) == {"spec.yaml"}


class NetworkUsed(AssertionError):
    pass


@pytest.mark.parametrize("name", COMMANDS)
def test_no_network_access(name: str, isolated: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    attempts: list[str] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        attempts.append(repr(args)[:200])
        raise NetworkUsed("vramcalc must work offline")

    for target, attr in ((socket.socket, "connect"), (socket.socket, "connect_ex"), (socket, "create_connection")):
        monkeypatch.setattr(target, attr, refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    for args in good_invocations(name, str(isolated["specs"] / "spec.yaml")):
        invoke(args, cwd=isolated["cwd"])
    assert attempts == []


class RecordingEnviron(dict):  # type: ignore[type-arg]
    """os.environ stand-in that records which file reads which variable."""

    def __init__(self, base: Any) -> None:
        super().__init__(base)
        self.reads: list[tuple[str, str]] = []

    def _note(self, key: str) -> None:
        frame = sys._getframe(2)
        while frame is not None and os.path.basename(frame.f_code.co_filename) in ("os.py", "<frozen os>"):
            frame = frame.f_back
        self.reads.append((key, frame.f_code.co_filename if frame else ""))

    def __getitem__(self, key: str) -> str:
        self._note(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self._note(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self._note(str(key))
        return super().__contains__(key)


@pytest.mark.parametrize("name", COMMANDS)
def test_only_documented_environment_variables_are_read(
    name: str, isolated: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    environ = RecordingEnviron(os.environ)
    monkeypatch.setattr(os, "environ", environ)
    for args in good_invocations(name, str(isolated["specs"] / "spec.yaml")):
        invoke(args, cwd=isolated["cwd"])
    package = str(ROOT / "vramcalc")
    read = {key for key, filename in environ.reads if filename.startswith(package)}
    assert read <= DOCUMENTED_ENV
    for param in command().commands[name].params:
        envvar = getattr(param, "envvar", None)
        assert envvar in (None, *DOCUMENTED_ENV), f"{name} {param.name} reads an undocumented environment variable"


def test_the_source_reads_no_undocumented_environment_variable() -> None:
    """Static companion of the test above: every os.environ / os.getenv in vramcalc/ names a documented one."""
    names = ("environ", "getenv", "putenv", "environb")
    found = [
        f"{path.name}:{node.lineno}"
        for path in sorted((ROOT / "vramcalc").glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute) and node.attr in names
    ]
    assert found == [], "vramcalc reads the environment; document the variable and allow it here"


# --------------------------------------------------------------------------------------------------
# Regressions: inputs the long campaign once found crashing, hanging or printing a negative size.
# Each must now end in exit 0, 1 or 2 without a traceback (and the stated exit code where given).
# --------------------------------------------------------------------------------------------------

LONG_NAME = "/" + "x" * 300 + "/" + "y" * 4000
FIXED = [
    # check.expand_paths: Path.is_dir() raised OSError (ENAMETOOLONG)
    (("check", LONG_NAME, "--gpu", "h100-sxm"), 2),
    # hf_import.read_config: Path.is_file() raised OSError (ENAMETOOLONG)
    (("import", LONG_NAME), 2),
    # compare.load_memory_stats opened --measured without checking for a regular file: a FIFO blocked
    (("compare", "{fixtures}/tiny.yaml", "--measured", "{fixtures}/fifo.yaml"), 2),
    # cli_llm.parse_mapping_flag used plain yaml.safe_load: malformed tags raised from PyYAML
    (("estimate", "{fixtures}/tiny.yaml", "--adapter", "!!timestamp 2001-12-14>-"), 2),
    # spec_llm.AdapterSpec.alpha had no upper bound and accepted .inf
    (("estimate", "{fixtures}/alpha-inf.yaml"), 2),
    # fit: a --reserve larger than the card gave a negative available_bytes
    (("fit", "{fixtures}/tiny.yaml", "--gpu", "rtx-3080", "--reserve", "24GiB", "--json"), None),
]


@pytest.mark.parametrize(("reproducer", "expect_exit"), FIXED, ids=[r[0][0] + str(i) for i, r in enumerate(FIXED)])
def test_fixed_campaign_findings(reproducer: tuple[str, ...], expect_exit: int | None) -> None:
    fixtures = str(workspace().fixtures)
    args = [arg.replace("{fixtures}", fixtures) for arg in reproducer]
    result = invoke(args)
    check_result(args, result, known=False)
    if expect_exit is not None:
        assert result.exit_code == expect_exit, result.output
    if "--json" in args:
        check_json(result.stdout, lambda why: pytest.fail(why))
