"""A card that is not in the catalog, named by its capacity: ``--gpu 48GiB`` or ``target: {gpu: 48GiB}``.

The size is read like every other size (:func:`vramcalc.units.parse_size`): ``GB`` is 10^9 bytes,
``GiB`` 2^30. It is the card's *usable* memory, what the estimate is compared with (give what
``nvidia-smi`` reports as ``memory.total``, or less). The card has nothing else: no memory bus, no
TFLOPS, no host link, so what needs them (``vramcalc bandwidth`` timings, the roofline) is not
computed for it. Its cuBLAS workspace is the larger one of Hopper and newer cards (32 MiB), as for
an estimate with no card, so the estimate never comes out low.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vramcalc.errors import UnitError
from vramcalc.units import GiB, MiB, parse_size

#: A name that reads as a size: a number and a size unit ("48GiB", "24 GB", "1.5TB").
SIZE_NAME = re.compile(r"^\s*(\d[\d_]*(?:\.\d+)?|\.\d+)\s*([kmgt]i?b|b)\s*$", re.IGNORECASE)
UNIT_LABELS = {"b": "B", "kb": "KB", "mb": "MB", "gb": "GB", "tb": "TB"}
#: The smallest custom card: below this a "size" is surely a typing slip (4090B is 4,090 bytes).
MIN_CUSTOM_BYTES = MiB


def is_size(name: str) -> bool:
    """True when ``name`` reads as a size (a number with a size unit) rather than a card name."""
    return SIZE_NAME.match(name) is not None


@dataclass(frozen=True)
class CustomCard:
    """A card known only by its usable memory (int bytes); ``label`` is the size as given ("48 GiB")."""

    label: str
    usable_bytes: int
    hopper_or_newer: bool = True  # the larger cuBLAS workspace (see the module docstring)
    has_bf16: bool = True
    interconnect: str = "nvswitch"  # NCCL's larger buffers (vramcalc/stacks/nccl.py)

    @property
    def id(self) -> str:
        """A card id for reports and JSON: ``custom-48gib``."""
        return "custom-" + re.sub(r"[^a-z0-9]+", "-", self.label.lower().replace(" ", "")).strip("-")

    @property
    def name(self) -> str:
        return f"custom {self.label} card"

    @property
    def capacity_bytes(self) -> int:
        return self.usable_bytes

    @property
    def capacity_label(self) -> str:
        """The capacity as given ("48 GiB")."""
        return self.label

    @property
    def size_text(self) -> str:
        """'48 GiB (51,539,607,552 bytes)'; a decimal size also in GiB: '48 GB (48,000,000,000 bytes; 44.70 GiB)'."""
        exact = f"{self.usable_bytes:,} bytes"
        if self.label.endswith("iB"):
            return f"{self.label} ({exact})"
        return f"{self.label} ({exact}; {self.usable_bytes / GiB:,.2f} GiB)"

    @property
    def usable_basis(self) -> str:
        """Which capacity figure ``usable_bytes`` is (one line)."""
        return f"{self.label} as given (a custom card: capacity only)"

    @property
    def description(self) -> str:
        """The note a command prints about the card."""
        return f"a custom card with {self.size_text} usable, capacity only; no bandwidth or TFLOPS figures"


def custom_card(name: str, what: str = "--gpu") -> CustomCard:
    """The card a size names; :class:`UnitError` (naming ``what``) for a bad or too small size."""
    match = SIZE_NAME.match(name)
    if match is None:
        raise UnitError(f"{what}: {name!r} is not a size such as 48GiB or 24GB")
    n_bytes = parse_size(name, what)
    if n_bytes < MIN_CUSTOM_BYTES:
        raise UnitError(
            f"{what}: {name!r} is {n_bytes:,} bytes; a custom card needs at least 1 MiB "
            "(give its capacity with a unit, such as 48GiB, or a card name: see 'vramcalc gpus')"
        )
    number, unit = match.groups()
    unit = UNIT_LABELS.get(unit.lower(), unit[0].upper() + "iB")
    return CustomCard(f"{number} {unit}", n_bytes)
