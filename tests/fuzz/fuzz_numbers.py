"""Fuzz target ``numbers``: hostile numerals in every numeric spec field and every numeric flag.

The fields come from the spec's JSON Schema (every key typed integer or number, and every string key
whose pattern starts with a digit: sizes, shares, counts with a suffix), the flags from the typer app
(every option typed int or float, or named like a number), so a key or flag added later is fuzzed
without editing this file.

Rules, on top of :func:`fuzz_support.check_result`: JSON output is strict; errors name the file; and a
numeral that is no finite number at all (NaN, infinity, 10^999999999, a boolean) is refused with exit 2
naming the field or the flag.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from enum import Enum
from typing import Any

import yaml
from fuzz_argv import param_info
from fuzz_checks import check_stderr, strict_json
from fuzz_schema import NumericField, bases_for, has_key, numeric_fields, spec_with
from fuzz_support import (
    FuzzFailure,
    check_result,
    command,
    describe,
    error_lines,
    invoke,
    tolerating_known_issues,
    usage_error,
    workspace,
)
from fuzz_targets import base_specs
from hypothesis import strategies as st

# Hypothesis draws the first items of a list more often than the others: the rarest mistakes come first.
#: Numerals no count, size or share can be: refused (exit 2) wherever they go, quoted or not.
NOT_A_NUMBER = [
    "1e999999999", "true", "1.0e+999999999", "-1e999999999", "yes", "!!binary MTAw", "nan", "NaN", ".nan", "-nan",
    "inf", "-inf", "+inf", "Infinity", ".inf", "-.inf", "false", "True", "on",
]  # fmt: skip
NINES_400 = "9" * 400
HOSTILE = [
    NINES_400, "1e-320", "-" + NINES_400, "0." + "0" * 400 + "1", "1" + "0" * 5000, "1e-999999999", *NOT_A_NUMBER,
    "4.9e-324", "1e308", "1.7976931348623157e308", "1e309", "-0", "-0.0", "0", "0.0", "null", "~",
    "0x10", "0x", "0o17", "0b101", "1_000", "1__000", "_1", "1_", "١٢٣", "１２", "²", "Ⅻ", "৩", "1e3",
    "1E+03", "+5", " 7", "1,000", "1.5", "0.1", "2.5e-1", "1e-5", "18446744073709551616",
    "-9223372036854775809", "1e400", "0e999999999", "1e+", ".", "1..2", "1e1e1",
]  # fmt: skip
#: Suffixes tried on every numeral (the field's or flag's own unit is added where it has one).
SUFFIXES = ["", "", "", "%", "GiB", "B", " "]


@st.composite
def numerals(draw: st.DrawFn) -> str:
    """A hostile numeral: no number at all, a fixed awkward one, or an exponent far outside the float range
    (half of those past 10^400 or below 10^-320, where decimal and float arithmetic overflow or underflow)."""
    pool = draw(st.integers(0, 3))
    if pool < 2:
        return draw(st.sampled_from(NOT_A_NUMBER if pool == 0 else HOSTILE))
    sign = draw(st.sampled_from(["", "", "-", "+"]))
    mantissa = draw(st.sampled_from(["1", "9.99", "0", "123456789", "1.", ".5"]))
    extreme = st.sampled_from([10**9, -320, 4300, -(10**9), 99999, 400, -4300, 309, -324])
    exponent = draw(st.one_of(extreme, extreme, st.integers(-400, 400)))
    return f"{sign}{mantissa}{draw(st.sampled_from(['e', 'E']))}{exponent}"


def not_a_number(numeral: str) -> bool:
    """No finite number, or one of 400 digits or more (no count, size or share comes near): refused anywhere."""
    text = numeral.strip()
    if text in NOT_A_NUMBER:
        return True
    try:
        value = Decimal(text.replace("_", "x"))  # Python's Decimal reads "1_000"; YAML and the specs need not
    except InvalidOperation:
        return False
    return value.is_finite() and value != 0 and value.adjusted() >= 399


# --------------------------------------------------------------------------------------------------
# Spec keys (fuzz_schema.py) and flags.
# --------------------------------------------------------------------------------------------------

#: Commands given the spec, each with the options it needs (the first two are cheap on any spec).
SPEC_COMMANDS = [
    ["estimate", "{spec}", "--json"],
    ["check", "{spec}", "--gpu", "h100", "--format", "json"],
    ["max-batch", "{spec}", "--gpu", "h100", "--json"],
    ["plan", "{spec}", "--gpu", "h100", "--json", "--max-gpus", "8"],
    ["bandwidth", "{spec}", "--gpu", "h100", "--json"],
    ["sweep", "{spec}", "--batch-size", "1,2", "--format", "json"],
]


@dataclass(frozen=True)
class NumberCase:
    args: tuple[str, ...]
    numeral: str  # as written, unit and quotes included
    bare: str  # the numeral alone
    where: str  # the spec key (dotted) or the flag
    spec_text: str | None = None  # the spec written for a field case

    def __repr__(self) -> str:
        text = f"NumberCase(where={self.where!r}, numeral={self.numeral[:60]!r}, args={self.args!r}"
        return text + (f", spec={self.spec_text!r})" if self.spec_text else ")")


def _with_unit(draw: st.DrawFn, numeral: str, units: tuple[str, ...]) -> str:
    if numeral.startswith("!!"):  # a YAML tag: a suffix would make its base64 invalid, not its value
        return numeral
    return numeral + draw(st.sampled_from([*SUFFIXES, *units, *units]))


@st.composite
def field_cases(draw: st.DrawFn) -> NumberCase:
    # Keys that also take text (7B, 80GB, 10%) are drawn three times as often: their parsers are ours.
    fields = sorted(numeric_fields(), key=lambda f: not f.units)
    field = draw(st.sampled_from([f for f in fields for _ in range(3 if f.units else 1)]))
    base = draw(st.sampled_from(["tiny", *bases_for(field)]))
    bare = draw(numerals())
    numeral = _with_unit(draw, bare, field.units)
    if draw(st.integers(0, 4)) == 0:
        numeral = f'"{numeral}"'  # a string in YAML whatever it looks like
    text = spec_with(field, numeral, base)
    # A full-size model through the searching commands costs seconds: those run on the tiny spec only.
    args = draw(st.sampled_from(SPEC_COMMANDS if base == "tiny" else SPEC_COMMANDS[:2]))
    return NumberCase(tuple(args), numeral, bare, ".".join(field.path), text)


# --------------------------------------------------------------------------------------------------
# Flags, from the typer app.
# --------------------------------------------------------------------------------------------------

NUMERIC_WORDS = (
    "reserve", "efficiency", "rate", "width", "clock", "params", "weights", "batch", "seq", "len", "tolerance",
    "used", "memory", "gpus", "top", "size", "channels", "tokens", "utilization",
)  # fmt: skip
#: Flag -> units it is documented with.
FLAG_UNITS = {
    "--reserve": ("%", "GiB", "GB"),
    "--efficiency": ("%",),
    "--host-efficiency": ("%",),
    "--tolerance": ("%",),
    "--data-rate": ("Gbps",),
    "--memory-clock": ("MHz", "GHz"),
    "--params": ("B", "M", "T"),
    "--weights": ("GB", "GiB"),
    "--nvidia-smi-used": ("GiB", " MiB"),
    "--min-memory": ("GB", "GiB"),
}
#: What each command needs before it reads the flag under test.
BASE_ARGS = {
    "estimate": ["{spec}", "--json"],
    "check": ["{spec}", "--gpu", "h100", "--format", "json"],
    "fit": ["{spec}", "--gpu", "h100", "--json", "--max-gpus", "8"],
    "max-batch": ["{spec}", "--gpu", "h100", "--json"],
    "max-seq": ["{spec}", "--gpu", "h100", "--json"],
    "plan": ["{spec}", "--gpu", "h100", "--json", "--max-gpus", "8"],
    "sweep": ["{spec}", "--batch-size", "1,2", "--format", "json"],
    "report": ["{spec}", "--gpu", "h100"],
    "compare": ["{spec}", "--measured", "{stats}", "--json"],
    "bandwidth": ["--gpu", "h100", "--params", "7B", "--json"],
    "gpus": ["--json"],
}
#: The custom-card flags of `bandwidth` go together (a card described by its memory, not the catalog).
CUSTOM_CARD = ["--memory-type", "GDDR6", "--data-rate", "21Gbps", "--bus-width", "384", "--params", "7B", "--json"]


def is_numeric_option(param: Any) -> bool:
    kind, annotation = param_info(param)
    if kind != "option" or "Path" in str(annotation) or param.name in ("gpu", "format", "fmt", "output"):
        return False
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return False
    text = str(annotation)
    return annotation in (int, float) or "int" in text or "float" in text or any(w in param.name for w in NUMERIC_WORDS)


@functools.cache
def numeric_flags() -> tuple[tuple[str, str], ...]:
    """(command, flag) for every numeric option of every command."""
    return tuple(
        (name, max(param.opts, key=len))
        for name, cmd in sorted(command().commands.items())
        for param in cmd.params
        if is_numeric_option(param) and param.name != "memory_type"
    )


def flag_args(name: str, flag: str, value: str) -> list[str]:
    """The command line of ``name`` with ``flag`` set to ``value`` (any default of that flag replaced)."""
    base = CUSTOM_CARD if name == "bandwidth" and flag in ("--data-rate", "--bus-width", "--memory-clock") else None
    args = list(base or BASE_ARGS.get(name, []))
    if flag == "--memory-clock":
        args[args.index("--data-rate") : args.index("--data-rate") + 2] = []
    if flag in args:
        i = args.index(flag)
        del args[i : i + 2]
    # A value starting with '-' would be read as an option: it goes after '='.
    return [name, *args, *([f"{flag}={value}"] if value.startswith("-") else [flag, value])]


@st.composite
def flag_cases(draw: st.DrawFn, names: tuple[str, ...] | None = None) -> NumberCase:
    flags = [f for f in numeric_flags() if names is None or f[0] in names]
    name, flag = draw(st.sampled_from(flags))
    bare = draw(numerals())
    numeral = _with_unit(draw, bare, FLAG_UNITS.get(flag, ()))
    if flag in ("--batch-size", "--seq-len") and name == "sweep":
        numeral = draw(st.sampled_from([numeral, f"1,{numeral}", f"{numeral},2"]))
    return NumberCase(tuple(flag_args(name, flag, numeral)), numeral, bare, flag)


@st.composite
def position_cases(draw: st.DrawFn) -> NumberCase:
    """A sequence length around a learned position table's size (a spec key or --seq-len)."""
    learned = sorted(n for n, d in base_specs().items() if has_key(d, ("model", "max_position_embeddings")))
    base = draw(st.sampled_from(learned))
    positions = base_specs()[base]["model"]["max_position_embeddings"]
    seq_len = str(draw(st.sampled_from([positions - 1, positions, positions + 1, 2 * positions, 10**6])))
    field = NumericField(("workload", "seq_len"), ())
    if draw(st.booleans()):
        return NumberCase(("estimate", "{spec}", "--json", "--seq-len", seq_len), seq_len, seq_len, "--seq-len",
                          spec_with(field, str(positions), base))  # fmt: skip
    return NumberCase(
        ("estimate", "{spec}", "--json"), seq_len, seq_len, "workload.seq_len", spec_with(field, seq_len, base)
    )


@st.composite
def number_cases(draw: st.DrawFn) -> NumberCase:
    """Half spec keys, two fifths flags, a tenth sequence lengths around a learned position table."""
    kind = draw(st.integers(0, 9))
    return draw(position_cases() if kind == 0 else field_cases() if kind <= 5 else flag_cases())


# --------------------------------------------------------------------------------------------------
# The check.
# --------------------------------------------------------------------------------------------------


def _fill(args: tuple[str, ...], spec: str) -> list[str]:
    fixtures = workspace().fixtures
    stats = str(fixtures / "stats.json")
    return [a.replace("{spec}", spec).replace("{stats}", stats) for a in args]


def _is_json(args: list[str]) -> bool:
    return "--json" in args or any(a == "json" and b == "--format" for b, a in zip(args, args[1:], strict=False))


@tolerating_known_issues
def check_number_case(case: NumberCase) -> None:
    ws = workspace()
    spec = ws.spec_file(case.spec_text) if case.spec_text is not None else ws.fixtures / "tiny.yaml"
    args = _fill(case.args, str(spec))
    result = invoke(args)
    if not check_result(args, result):
        return

    def fail(why: str) -> None:
        raise FuzzFailure(f"{why}\n{case!r}\n" + describe(args, result))

    check_stderr(result.stderr, fail, usage=usage_error(result))
    if _is_json(args) and result.stdout.strip() and result.exit_code in (0, 1):
        strict_json(result.stdout, fail)
    if case.spec_text is not None and result.exit_code == 2:
        bad = [line for line in error_lines(result) if not line.startswith(f"error: {spec}")]
        if bad and "--" not in bad[0]:
            fail(f"an error about the spec does not name the file\n{bad[0][:200]!r}")
    if not_a_number(case.bare):
        _check_refused(case, result, fail)
    if case.spec_text is not None and args[0] != "estimate" and result.exit_code in (0, 1):
        _check_agrees_with_estimate(str(spec), fail)
    if case.where.endswith("seq_len") and case.spec_text is not None and result.exit_code == 0:
        _check_positions(case, result, fail)


def _check_agrees_with_estimate(spec: str, fail: Any) -> None:
    """Every command reads a spec the way `estimate` does: one it rejects, none accepts."""
    args = ["estimate", spec, "--json"]
    alone = invoke(args)
    if check_result(args, alone) and alone.exit_code == 2:
        fail(f"accepts a spec that estimate rejects\n{error_lines(alone)[:2]!r}")


def _check_positions(case: NumberCase, result: Any, fail: Any) -> None:
    """A sequence longer than a learned position table has no embedding: an error, or at least a note."""
    model = yaml.safe_load(case.spec_text or "")["model"]
    positions, seq_len = model.get("max_position_embeddings"), case.bare
    if model.get("position") != "learned" or not isinstance(positions, int) or not seq_len.isdigit():
        return
    if int(seq_len) > positions and "max_position_embeddings" not in result.stderr:
        fail(f"{case.where}: a sequence past the learned positions (max_position_embeddings) is accepted silently")


def _check_refused(case: NumberCase, result: Any, fail: Any) -> None:
    if result.exit_code != 2:
        fail(f"{case.where}: a value that is no number gives exit {result.exit_code}, not 2")
    key = case.where.rsplit(".", 1)[-1].lstrip("-")
    names = {key, key.replace("-", "_"), key.replace("-", " "), key.replace("_", " ")}
    if case.spec_text is not None and "invalid YAML" in result.stderr:
        return  # PyYAML could not read the value (an int past 4,300 digits): the error gives its line
    if not any(n in result.stderr for n in names):
        fail(f"{case.where}: a value that is no number is refused without naming {case.where}")
