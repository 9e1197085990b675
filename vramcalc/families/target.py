"""What an estimate is made for besides the spec: the card's generation, the card as a runtime sees it, and
how several of them talk."""

from __future__ import annotations

from dataclasses import dataclass

from vramcalc.core.stack import Device


@dataclass(frozen=True)
class Target:
    """The card an estimate is made for. ``hopper_or_newer``: its cuBLAS workspace size; ``card``: its name and
    total memory, where one is named (vLLM's default batch sizes depend on them); ``interconnect``: how its GPUs
    talk, unless the spec's ``parallel.interconnect`` says (NCCL's buffers across GPUs)."""

    hopper_or_newer: bool = True
    card: Device | None = None
    interconnect: str = "nvswitch"
