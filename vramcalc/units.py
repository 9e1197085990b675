"""Units: parsing of sizes, counts and fractions; byte formatting; dtype widths.

Rules (also in the README):

* Sizes are integer bytes inside vramcalc. Input sizes must carry a unit:
  ``KB``/``MB``/``GB``/``TB`` are decimal (10^3, 10^6, 10^9, 10^12) and
  ``KiB``/``MiB``/``GiB``/``TiB`` are binary (2^10 ... 2^40). A bare number is rejected.
* Parameter and token counts accept ``K``/``M``/``B``/``T`` suffixes, all decimal
  ("110M" = 110,000,000; "7B" = 7,000,000,000).
* Output shows memory in GiB (labelled GiB) unless asked otherwise.

Only the standard library and pydantic are imported here.
"""

from __future__ import annotations

import math
import re
import reprlib
from decimal import Decimal, InvalidOperation, localcontext
from typing import Annotated, Any

from pydantic import BeforeValidator, WithJsonSchema

from vramcalc.errors import UnitError

KB = 10**3
MB = 10**6
GB = 10**9
TB = 10**12
KiB = 2**10
MiB = 2**20
GiB = 2**30
TiB = 2**40

SIZE_UNITS: dict[str, int] = {
    "b": 1,
    "kb": KB,
    "mb": MB,
    "gb": GB,
    "tb": TB,
    "kib": KiB,
    "mib": MiB,
    "gib": GiB,
    "tib": TiB,
}
COUNT_SUFFIXES: dict[str, int] = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}

#: Storage width of each element type, in bits (one table; never BYTES_* constants).
DTYPE_BITS: dict[str, int] = {
    "fp64": 64,
    "fp32": 32,
    "tf32": 32,
    "fp16": 16,
    "bf16": 16,
    "fp8": 8,
    "int8": 8,
    "uint8": 8,
    "bool": 8,
    "int4": 4,
    "int64": 64,
    "int32": 32,
}

#: Bytes of the element types the formulas name most (from :data:`DTYPE_BITS`): fp32 (norm statistics,
#: upcast softmax and losses, scales), fp16, int32 (packed weights, int8 matmul products), a dropout mask's
#: bool, an int64 token id.
FP32 = DTYPE_BITS["fp32"] // 8
FP16 = DTYPE_BITS["fp16"] // 8
INT32 = DTYPE_BITS["int32"] // 8
MASK = DTYPE_BITS["bool"] // 8
TOKEN_ID = DTYPE_BITS["int64"] // 8

#: Largest byte count accepted anywhere (1 EiB): bigger inputs are "out of range", not overflow.
MAX_BYTES = 2**60
#: Largest count (parameters, tokens) accepted anywhere.
MAX_COUNT = 10**18

_NUMBER = r"([0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)"
_SIZE_RE = re.compile(rf"^\s*{_NUMBER}\s*([A-Za-z]+)\s*$")
_COUNT_RE = re.compile(rf"^\s*{_NUMBER}\s*([kKmMbBtT]?)\s*$")
_PERCENT_RE = re.compile(rf"^\s*{_NUMBER}\s*%\s*$")


#: How error messages quote a user's value: short, escaped, and safe on huge or deeply nested input
#: (a YAML alias bomb reaches a message as a list of millions of items).
class _Quote(reprlib.Repr):
    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 4 * self.maxlong:  # repr() itself refuses ints past 4,300 digits
            return f"<an integer of about {int(x.bit_length() * 0.30103) + 1:,} digits>"
        return super().repr_int(x, level)


_QUOTE = _Quote()
_QUOTE.maxstring = _QUOTE.maxother = 60
_QUOTE.maxlong = 40
_QUOTE.maxlevel = 3


def quoted(value: object) -> str:
    """``repr(value)`` for an error message, truncated: never megabytes, never a RecursionError."""
    return _QUOTE.repr(value)


def ceil_div(numerator: int, denominator: int) -> int:
    """``ceil(numerator / denominator)`` in exact integer arithmetic (a float division loses bytes above 2**53)."""
    return -(-numerator // denominator)


#: The caching allocator rounds every allocation up to 512 bytes.
ALLOC_BLOCK = 512


def allocation_bytes(n_bytes: int) -> int:
    """``n_bytes`` as the caching allocator hands it out: rounded up to its 512-byte blocks."""
    return ceil_div(n_bytes, ALLOC_BLOCK) * ALLOC_BLOCK


def dtype_bytes(dtype: str, n_elements: int) -> int:
    """Bytes of ``n_elements`` stored as ``dtype``, rounded up to a whole byte."""
    return ceil_div(n_elements * DTYPE_BITS[dtype], 8)


#: Longest numeral read anywhere (characters): a real size, count or rate needs a few dozen at most.
MAX_NUMERAL_CHARS = 64
#: Decimal exponents beyond +-this are out of every range vramcalc accepts (1 EiB is about 10^18), so
#: they are refused before any arithmetic: ``1e999999999`` never reaches a multiplication.
MAX_DECIMAL_EXPONENT = 24


def parse_decimal(text: str, what: str) -> Decimal:
    """The one bounded reader of a numeral (spec fields and flags alike): a finite :class:`Decimal`
    whose magnitude is 0 or between 10^-24 and 10^25, from at most 64 characters.

    Arithmetic on the result (times a unit, a suffix, 1/100) is exact: it never overflows, underflows
    or rounds, so callers compare it with their own bounds afterwards."""
    if len(text) > MAX_NUMERAL_CHARS:
        raise UnitError(
            f"{what}: {quoted(text)} is longer than any number vramcalc reads ({MAX_NUMERAL_CHARS} characters)"
        )
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise UnitError(f"{what}: {quoted(text)} is not a number") from None
    if not value.is_finite():
        raise UnitError(f"{what}: {quoted(text)} is not a finite number")
    if value and value.adjusted() > MAX_DECIMAL_EXPONENT:
        raise UnitError(f"{what}: {quoted(text)} is out of range (10^{MAX_DECIMAL_EXPONENT + 1} or more)")
    if value and value.adjusted() < -MAX_DECIMAL_EXPONENT:
        raise UnitError(f"{what}: {quoted(text)} is out of range (not zero, but below 10^-{MAX_DECIMAL_EXPONENT})")
    return value


def _exact(value: Decimal, factor: int) -> Decimal:
    """``value * factor`` without rounding (both are bounded, so a 100-digit context is exact)."""
    with localcontext(prec=100):
        return value * factor


def parse_size(value: object, what: str = "size") -> int:
    """Parse a size with a unit ("16GiB", "512 MB") into integer bytes.

    Bare numbers are rejected: ``80`` could mean bytes or GB, so the user must say.
    """
    if isinstance(value, bool) or not isinstance(value, str):
        raise UnitError(f"{what}: expected a size with a unit such as '16GiB' or '80GB', got {quoted(value)}")
    match = _SIZE_RE.match(value)
    if not match:
        raise UnitError(f"{what}: expected a size with a unit such as '16GiB' or '80GB', got {quoted(value)}")
    number, unit = match.groups()
    factor = SIZE_UNITS.get(unit.lower())
    if factor is None:
        raise UnitError(
            f"{what}: unknown unit {quoted(unit)} in {quoted(value)} (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
        )
    n_bytes = math.ceil(_exact(parse_decimal(number, what), factor))
    if n_bytes > MAX_BYTES:
        raise UnitError(f"{what}: {quoted(value)} is out of range (at most 1 EiB)")
    return n_bytes


def parse_count(value: object, what: str = "count") -> int:
    """Parse a count such as ``110M``, ``7B``, ``6738415616`` or ``1.5e9`` into an int."""
    if isinstance(value, bool):
        raise UnitError(f"{what}: expected a count such as 110M or 7B, got {quoted(value)}")
    if isinstance(value, int):
        if value > MAX_COUNT:  # before any conversion: a 5,000-digit int is refused as cheaply as 10^19
            raise UnitError(f"{what}: {quoted(value)} is out of range (at most 10^18)")
        number, suffix = Decimal(value), ""
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise UnitError(f"{what}: {quoted(value)} is not a finite number")
        number, suffix = parse_decimal(repr(value), what), ""
    elif isinstance(value, str):
        match = _COUNT_RE.match(value)
        if not match:
            raise UnitError(f"{what}: expected a count such as 110M or 7B, got {quoted(value)}")
        number, suffix = parse_decimal(match.group(1), what), match.group(2)
    else:
        raise UnitError(f"{what}: expected a count such as 110M or 7B, got {quoted(value)}")
    count = _exact(number, COUNT_SUFFIXES[suffix.lower()])
    if count > MAX_COUNT:
        raise UnitError(f"{what}: {quoted(value)} is out of range (at most 10^18)")
    if count != count.to_integral_value():
        raise UnitError(f"{what}: {quoted(value)} is not a whole number")
    return int(count)


def parse_fraction(value: object, what: str = "fraction") -> float:
    """Parse ``"10%"`` or a number in [0, 1] into a fraction in [0, 1)."""
    if isinstance(value, bool):
        raise UnitError(f"{what}: expected a percentage such as '10%', got {quoted(value)}")
    if isinstance(value, str):
        match = _PERCENT_RE.match(value)
        if not match:
            raise UnitError(f"{what}: expected a percentage such as '10%', got {quoted(value)}")
        fraction = float(parse_decimal(match.group(1), what) / 100)
    elif isinstance(value, int):  # only 0 is a fraction below 1; a huge int never becomes a float
        fraction = 0.0 if value == 0 else math.inf
    elif isinstance(value, float):
        fraction = value
    else:
        raise UnitError(f"{what}: expected a percentage such as '10%', got {quoted(value)}")
    if not math.isfinite(fraction) or not 0 <= fraction < 1:
        raise UnitError(f"{what}: {quoted(value)} must be at least 0% and below 100%")
    return fraction


def format_bytes(n_bytes: int, unit: str = "GiB", digits: int = 2) -> str:
    """Render bytes in a named unit, always labelled ("12.34 GiB", "512.00 MB")."""
    factor = SIZE_UNITS[unit.lower()]
    return f"{n_bytes / factor:,.{digits}f} {unit}"


def _wrap(parser: Any, what: str) -> Any:
    def validate(value: object) -> object:
        try:
            return parser(value, what)
        except UnitError as exc:
            raise ValueError(str(exc).split(": ", 1)[-1]) from None

    return validate


#: Integer bytes from a size with a unit ("512MiB"); JSON schema: string.
ByteSize = Annotated[
    int,
    BeforeValidator(_wrap(parse_size, "size")),
    WithJsonSchema({"type": "string", "pattern": r"^[0-9.]+\s*(B|[KMGT]i?B)$", "examples": ["512MiB", "16GB"]}),
]
#: Integer count from "110M", "7B" or an integer (an int once validated, so it serialises as one).
ParamCount = Annotated[
    int,
    BeforeValidator(_wrap(parse_count, "count")),
    WithJsonSchema({"anyOf": [{"type": "integer"}, {"type": "string", "pattern": r"^[0-9.]+\s*[KMBT]?$"}]}),
]
#: Fraction in [0, 1) from "10%" or a number.
Fraction = Annotated[
    float,
    BeforeValidator(_wrap(parse_fraction, "fraction")),
    WithJsonSchema({"anyOf": [{"type": "number"}, {"type": "string", "pattern": r"^[0-9.]+\s*%$"}]}),
]
