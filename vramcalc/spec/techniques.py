"""The training-technique keys of ``workload`` (``optimizer_in_backward``, ``optimizer_offload``,
``activation_offloading``, ``cross_entropy``, ``keep_outputs``) and which of them a workload turns on; the
techniques are modelled, and their rules checked, in vramcalc/stacks/techniques.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vramcalc.choices import CrossEntropy

if TYPE_CHECKING:
    from vramcalc.spec.models import Workload

#: The technique keys, in the order their errors are reported.
TECHNIQUE_KEYS = (
    "optimizer_in_backward",
    "optimizer_offload",
    "activation_offloading",
    "cross_entropy",
    "keep_outputs",
)


def given_techniques(wl: Workload) -> list[str]:
    """The technique keys a workload turns on (``false``, ``none`` and ``standard`` are off)."""
    on = {
        "optimizer_in_backward": bool(wl.optimizer_in_backward),
        "optimizer_offload": wl.optimizer_offload == "cpu",
        "activation_offloading": bool(wl.activation_offloading),
        "cross_entropy": wl.cross_entropy not in (None, CrossEntropy.standard),
        "keep_outputs": bool(wl.keep_outputs),
    }
    return [key for key in TECHNIQUE_KEYS if on[key]]
