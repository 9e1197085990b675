"""The batch size as a symbol: run the estimator's formulas once and get bytes as polynomials in it.

For a fixed model, precision and sequence length every activation formula of
:mod:`vramcalc.core.activations` is a sum of products of the batch size ``b`` with shape constants
(tokens ``b·s``, attention scores ``b·heads·s²``, a rotary table that does not depend on ``b``). The
few maxima in them (the inference working set, the larger of two stacks) are kept as a :class:`Peak`,
the largest of several polynomials. Feeding a :class:`Poly` for ``b`` through the same formulas gives
each phase's allocated bytes as such an expression, so a sweep over batch sizes evaluates a handful
of polynomials per point and gets the same integers as a full estimate at every point.

Exactness is by construction: an operation a polynomial cannot represent exactly (a comparison, a
floor division that does not divide, a float factor, a maximum subtracted or scaled by a negative)
raises :class:`NotPolynomial`, and the caller then runs the full estimate per point instead.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, overload


class NotPolynomial(TypeError):
    """A formula did something a polynomial in the batch size cannot follow exactly."""


def _trim(coefs: Iterable[int]) -> tuple[int, ...]:
    out = list(coefs)
    while len(out) > 1 and out[-1] == 0:
        out.pop()
    return tuple(out) or (0,)


def _ints(value: Any, operation: str) -> tuple[int, ...]:
    """Coefficients of a Poly or an int operand; anything else cannot be followed exactly."""
    if isinstance(value, Poly):
        return value.coefs
    if isinstance(value, int):
        return (int(value),)
    raise NotPolynomial(f"{operation} with {type(value).__name__}")


def _poly(coefs: tuple[int, ...]) -> Poly:
    """A Poly from coefficients already trimmed (no trailing zero but the constant)."""
    poly = Poly.__new__(Poly)
    poly.coefs = coefs
    return poly


class _BatchDependent:
    """Comparing a batch-dependent value, or asking its truth value, has no answer independent of the
    batch size: it raises :class:`NotPolynomial` (and the caller falls back to full estimates)."""

    __slots__ = ()

    def _compare(self, other: Any) -> bool:
        raise NotPolynomial("comparison of a batch-dependent value")

    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _compare
    __hash__ = None  # type: ignore[assignment]  # unhashable, like any class that defines __eq__

    def __bool__(self) -> bool:
        raise NotPolynomial("truth value of a batch-dependent value")


class Poly(_BatchDependent):
    """A polynomial in the batch size ``b`` with int coefficients: ``coefs[i]`` multiplies ``b**i``.

    Behaves like the int it stands for under ``+``, ``-``, ``*`` and exact ``//``; comparing it, or
    asking its truth value, raises :class:`NotPolynomial` (the answer would depend on ``b``).
    """

    __slots__ = ("coefs",)

    def __init__(self, coefs: Iterable[int]) -> None:
        self.coefs = _trim(coefs)

    @classmethod
    def batch(cls) -> Poly:
        """The batch size itself: ``b``."""
        return cls((0, 1))

    def __repr__(self) -> str:
        terms = [f"{c}" if i == 0 else f"{c}*b" if i == 1 else f"{c}*b^{i}" for i, c in enumerate(self.coefs) if c]
        return f"Poly({' + '.join(terms) or '0'})"

    def at(self, batch: int) -> int:
        """The value at batch size ``batch`` (Horner)."""
        value = 0
        for coef in reversed(self.coefs):
            value = value * batch + coef
        return value

    def nonnegative(self) -> bool:
        """Whether every coefficient is >= 0 (then the value is >= 0 for every batch size)."""
        return min(self.coefs) >= 0

    def dominated_by(self, other: Poly) -> bool:
        """Whether ``self <= other`` at every batch size >= 0, coefficient by coefficient."""
        width = max(len(self.coefs), len(other.coefs))
        mine, theirs = self.coefs + (0,) * width, other.coefs + (0,) * width
        return all(a <= b for a, b in zip(mine[:width], theirs[:width], strict=True))

    def __add__(self, other: Any) -> Any:
        if isinstance(other, int):  # the common case, kept cheap: only the constant term changes
            return _poly((self.coefs[0] + other, *self.coefs[1:]))
        if isinstance(other, Peak):
            return other + self
        theirs = _ints(other, "+")
        width = max(len(self.coefs), len(theirs))
        mine, theirs = self.coefs + (0,) * (width - len(self.coefs)), theirs + (0,) * (width - len(theirs))
        return Poly(a + b for a, b in zip(mine, theirs, strict=True))

    __radd__ = __add__

    def __neg__(self) -> Poly:
        return Poly(-c for c in self.coefs)

    def __sub__(self, other: Any) -> Any:
        if isinstance(other, Peak):
            raise NotPolynomial("a maximum subtracted")
        return self + Poly(_ints(other, "-")).__neg__()

    def __rsub__(self, other: Any) -> Any:
        return Poly(_ints(other, "-")) + self.__neg__()

    def __mul__(self, other: Any) -> Any:
        if isinstance(other, int):  # the common case, kept cheap
            return _poly(tuple(c * other for c in self.coefs)) if other else Poly((0,))
        if isinstance(other, Peak):
            return other * self
        theirs = _ints(other, "*")
        product = [0] * (len(self.coefs) + len(theirs) - 1)
        for i, a in enumerate(self.coefs):
            for j, b in enumerate(theirs):
                product[i + j] += a * b
        return Poly(product)

    __rmul__ = __mul__

    def __floordiv__(self, other: Any) -> Poly:
        """Exact division by an int or by a monomial ``k·b**j`` (tokens // batch = sequence length)."""
        divisor = _ints(other, "//")
        power = next((i for i, c in enumerate(divisor) if c), None)
        if power is None or any(divisor[power + 1 :]):
            raise NotPolynomial("// by zero or by more than one term")
        k = divisor[power]
        if any(self.coefs[:power]) or any(c % k for c in self.coefs[power:]):
            raise NotPolynomial("// that does not divide exactly")
        return Poly(c // k for c in self.coefs[power:])

    def __rfloordiv__(self, other: Any) -> Poly:
        return Poly(_ints(other, "//")) // self


class Peak(_BatchDependent):
    """The largest of several polynomials: a maximum in a formula, kept exact.

    ``max(A, B) + C = max(A + C, B + C)``; ``max(A, B)·P = max(A·P, B·P)`` when ``P >= 0``;
    ``max(A, B) // k = max(A // k, B // k)`` for ``k > 0`` when each divides exactly.
    """

    __slots__ = ("members",)

    def __init__(self, members: Iterable[Poly | Peak]) -> None:
        self.members = _prune(members)

    def __repr__(self) -> str:
        return f"Peak({', '.join(map(repr, self.members))})"

    def at(self, batch: int) -> int:
        """The value at batch size ``batch``: the largest member's."""
        return max(member.at(batch) for member in self.members)

    def _map(self, operation: Any) -> Any:
        return _simplest(Peak(operation(member) for member in self.members))

    def __add__(self, other: Any) -> Any:
        if isinstance(other, Peak):
            return _simplest(Peak(a + b for a in self.members for b in other.members))
        return self._map(lambda member: member + other)

    __radd__ = __add__

    def __sub__(self, other: Any) -> Any:
        if isinstance(other, Peak):
            raise NotPolynomial("a maximum subtracted")
        return self._map(lambda member: member - other)

    def __rsub__(self, other: Any) -> Any:
        raise NotPolynomial("a maximum subtracted")

    def __mul__(self, other: Any) -> Any:
        if isinstance(other, Peak):
            if not all(p.nonnegative() for p in (*self.members, *other.members)):
                raise NotPolynomial("a product of maxima with negative terms")
            return _simplest(Peak(a * b for a in self.members for b in other.members))
        if not Poly(_ints(other, "*")).nonnegative():
            raise NotPolynomial("a maximum scaled by a negative factor")
        return self._map(lambda member: member * other)

    __rmul__ = __mul__

    def __floordiv__(self, other: Any) -> Any:
        if isinstance(other, Peak) or not Poly(_ints(other, "//")).nonnegative():
            raise NotPolynomial("a maximum divided by a maximum or a negative")
        return self._map(lambda member: member // other)


def _prune(members: Iterable[Poly | Peak]) -> tuple[Poly, ...]:
    """Drop duplicates and members no larger than another at every batch size (order kept)."""
    flat: list[Poly] = []
    for member in members:
        flat.extend(member.members if isinstance(member, Peak) else [member])
    kept: list[Poly] = []
    for i, member in enumerate(flat):
        later = flat[i + 1 :]
        if any(member.dominated_by(other) for other in kept) or any(
            member.dominated_by(other) and not other.dominated_by(member) for other in later
        ):
            continue
        kept.append(member)
    return tuple(kept)


def _simplest(peak: Peak) -> Poly | Peak:
    return peak.members[0] if len(peak.members) == 1 else peak


@overload
def maximum(*values: int) -> int: ...


@overload
def maximum(*values: Any) -> Any: ...


def maximum(*values: Any) -> Any:
    """``max(values)`` that also takes polynomials: an int when all are ints, else a Peak (or the one
    Poly that is largest at every batch size)."""
    if all(isinstance(value, int) for value in values):
        return max(values)
    members = [value if isinstance(value, Poly | Peak) else Poly(_ints(value, "max")) for value in values]
    return _simplest(Peak(members))


def evaluate(value: Any, batch: int) -> int:
    """An int, Poly or Peak at batch size ``batch``."""
    return value if isinstance(value, int) else value.at(batch)
