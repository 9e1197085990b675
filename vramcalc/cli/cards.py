"""``vramcalc bandwidth --gpu 48GiB``: a capacity-only card has no memory bus, so the command shows its
capacity and the weights, states what it cannot compute and exits 0. The JSON document has every key
of ``vramcalc bandwidth --json``; those the card cannot fill are null."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from vramcalc.hardware.custom import CustomCard
    from vramcalc.hardware.weights import Weights

NOT_COMPUTED = (
    "not computed for a capacity-only card: bandwidth, weight-streaming time, decode tokens/s bound, host copy "
    "time and roofline (describe its bus with --bus-width and --data-rate, or --memory-type and --memory-clock)"
)


def capacity_card(gpu: str) -> tuple[CustomCard, str | None] | None:
    """The custom card ``--gpu`` names and its note, or None when it names a catalog card (or ``local``)."""
    from vramcalc.hardware.custom import CustomCard
    from vramcalc.hardware.lookup import find_card

    card, note = find_card(gpu)
    return (card, note) if isinstance(card, CustomCard) else None


def capacity_doc(card: CustomCard, load: Weights | None) -> dict[str, Any]:
    """The ``--json`` document: the card's capacity, the weights, and nulls for every figure it lacks."""
    from vramcalc.results.bandwidth import BandwidthResult

    doc: dict[str, Any] = dict.fromkeys(BandwidthResult.model_fields)
    doc.update(gpu=card.id, name=card.name, capacity_bytes=card.usable_bytes, capacity_vendor=card.label)
    notes = [NOT_COMPUTED]
    if load is not None:
        doc.update(weights_bytes=load.weights_bytes, n_params=load.n_params, dtype=load.dtype)
        notes = [*load.notes, *_exceeds(card, load), NOT_COMPUTED]
    doc["notes"] = notes
    return doc


def _exceeds(card: CustomCard, load: Weights) -> list[str]:
    if load.weights_bytes <= card.usable_bytes:
        return []
    return [f"the weights exceed the card's {card.label}: one card cannot hold them"]


def show_capacity_only(card: CustomCard, note: str | None, load: Weights | None, json_out: bool) -> None:
    """Print the capacity-only report (the note on stderr first)."""
    from vramcalc.cli._common import notes_to_stderr, print_json
    from vramcalc.render.text import terminal_width, wrap
    from vramcalc.units import GiB

    notes_to_stderr([note] if note else [])
    doc = capacity_doc(card, load)
    if json_out:
        print_json(doc)
        return
    typer.echo(f"{card.name}: {card.size_text} usable, capacity only")
    if load is not None:
        params = f", {load.n_params:,} parameters" if load.n_params else ""
        dtype = f" {load.dtype}" if load.dtype else ""
        verdict = "more than" if load.weights_bytes > card.usable_bytes else "within"
        line = (
            f"weights: {load.weights_bytes:,} bytes ({load.weights_bytes / GiB:,.2f} GiB){params}{dtype}: "
            f"{verdict} the card's {card.label}"
        )
        for part in wrap(line, terminal_width()):
            typer.echo(part)

    for note in doc["notes"]:
        for line in wrap(f"note: {note}", terminal_width()):
            typer.echo(line)
