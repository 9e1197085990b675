"""Card names as the catalog compares them: normalised keys, tokens, variant tokens and starts of names
(the rules are in :mod:`vramcalc.hardware.catalog`)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar


class Named(Protocol):
    """A card, as far as names go: its id."""

    @property
    def id(self) -> str: ...


#: The card type a :class:`Pick` holds (the catalog's ``GPU``).
C = TypeVar("C", bound=Named)

#: Name tokens that only tell variants of one product apart (see :mod:`vramcalc.hardware.catalog`).
VARIANT_TOKEN = re.compile(r"^(?:\d+gb?|sxm\d?|pcie\d?|nvl|oam|hbm\d?e?)$")


def normalise(name: str) -> str:
    """Case- and punctuation-insensitive key: 'A100_80GB-SXM' -> 'a10080gbsxm'."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


@functools.lru_cache(maxsize=4096)  # the catalog's names are tokenised once per entry they are compared with
def tokens(name: str) -> frozenset[str]:
    """Lower-case name tokens split on punctuation: 'A100_80GB-SXM' -> {'a100', '80gb', 'sxm'}."""
    return frozenset(t for t in re.split(r"[^a-z0-9]+", name.lower()) if t)


def prefix_matches(norm: str, key: str) -> bool:
    """True when the normalised name ``norm`` starts ``key`` (rule 2b of :mod:`vramcalc.hardware.catalog`):
    ending inside one of its tokens (``rtx-409`` of ``rtx-4090``), or where a number ends and only
    variant tokens follow (``a100-80`` of ``a100-80gb-sxm``, but not ``4060`` of ``4060ti-16gb``)."""
    parts = [t for t in re.split(r"[^a-z0-9]+", key.lower()) if t]
    if not norm or not "".join(parts).startswith(norm):
        return False
    used = 0
    for i, part in enumerate(parts):
        used += len(part)
        rest = parts[i + 1 :]
        if used > len(norm):
            cut = len(norm) - (used - len(part))  # where the name ends inside this token
            if not (part[cut - 1].isdigit() and part[cut].isalpha()):
                return True  # inside a number or a word: the rest of the name is still being typed
            rest = parts[i:]  # a number ends here: "80" of "80gb", "4060" of "4060ti"
        if used >= len(norm):
            return all(VARIANT_TOKEN.match(t) for t in rest)
    return False


@dataclass(frozen=True)
class Pick(Generic[C]):
    """What a name picks: the card, the other cards it could have meant, and a note when the name was
    not an exact id or alias (None when it was)."""

    gpu: C
    others: list[str]
    note: str | None = None


def ambiguity_note(name: str, gpu: Named, others: list[str]) -> str:
    """One line for stderr: "'a100' is ambiguous; using a100-80gb-sxm (others: ...)"."""
    return f"{name!r} is ambiguous; using {gpu.id} (others: {', '.join(others)})"
