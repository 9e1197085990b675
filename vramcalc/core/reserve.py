"""What the process holds beyond the allocated peak: the CUDA context, and the caching allocator's reserve
above the peak (:class:`ReserveRule`). Their defaults are today's stacks; a stack module that runs otherwise
(an older PyTorch, a runtime that allocates its buffers once) states its own (vramcalc/stacks/).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from vramcalc.units import MiB

#: CUDA context default: 512 MiB. Lazy module loading (CUDA >= 11.7) keeps it at 0.3-0.6 GiB on
#: current stacks (shared/calibration/tracer/README.md); 1343 MiB was measured on a V100 with 2022
#: PyTorch (measured.yaml case hf-perf-bert-large-load-context-only). Override with overhead.cuda_context.
DEFAULT_CUDA_CONTEXT = 512 * MiB
DEFAULT_CONTEXT_NOTE = "CUDA context 512 MiB (outside PyTorch's allocator; set overhead.cuda_context)"

#: The caching allocator's reserve above the allocated peak, as a share of the peak's *transient* bytes
#: (everything but :data:`LONG_LIVED`). Freed activations and temporaries stay cached in segments whose
#: free blocks later requests of other sizes cannot use, so the reserve grows with what comes and goes,
#: not with the weights. A quarter is what published reserved/allocated pairs show: HF Trainer on a V100
#: (nvidia-smi less the measured context), torchtitan's reserved peaks, and DeepSpeed's out-of-memory
#: message (1.37 GiB reserved beyond 29.09 GiB allocated, of which 5.88 GiB transient: 0.23); see
#: ``benchmarks/reserve_models.py``.
TRANSIENT_RESERVE = 0.25

#: Components allocated once, at sizes that do not change from step to step (gradients are freed and
#: allocated again at the same sizes, in the same order; cuBLAS keeps its workspace for the process): their
#: blocks are reused as they are, so they add no reserve beyond their own whole blocks (``allocator_rounding``).
LONG_LIVED = (
    "parameters",
    "allocator_rounding",
    "gradients",
    "optimizer_states",
    "workspace",
    "communication_buffers",
)


@dataclass(frozen=True)
class ReserveRule:
    """The allocator reserve of a moment: ``share`` of its transient bytes (the default model), or of its
    whole allocated bytes (``overhead.allocator_reserve`` given)."""

    share: float
    of_transient: bool = True
    long_lived: tuple[str, ...] = LONG_LIVED

    def bytes_of(self, components: dict[str, int]) -> int:
        """The reserve above ``components`` (component -> bytes at the moment)."""
        return self.of_base(self.base_of(components))

    def of_base(self, base: int) -> int:
        """The reserve for ``base`` bytes of :meth:`base_of` (rounded up to a whole byte)."""
        return math.ceil(base * self.share)

    def base_of(self, components: dict[str, Any], allocated: Any = None) -> Any:
        """The bytes the share applies to (an int, or a polynomial in a symbolic batch size) at a moment of
        ``allocated`` bytes (default: the sum of ``components``)."""
        allocated = sum(components.values()) if allocated is None else allocated
        return allocated - self.kept_of(components)

    def kept_of(self, components: dict[str, Any]) -> Any:
        """The bytes of a moment the share does not apply to: its long-lived state (none when the share is
        of the whole peak)."""
        return sum(components.get(key, 0) for key in self.long_lived) if self.of_transient else 0


def transient_reserve_note(also_kept: str = "") -> str:
    """The assumption line of the default reserve; ``also_kept``: long-lived state beyond the default's."""
    return (
        f"allocator reserve {100 * TRANSIENT_RESERVE:g} % of the peak's transient bytes (all but weights, gradients, "
        "optimizer states, workspaces"
        + (f" and {also_kept}" if also_kept else "")
        + "; set overhead.allocator_reserve for a share of the whole peak)"
    )


#: The default reserve: a quarter of the transient bytes.
DEFAULT_RESERVE = ReserveRule(TRANSIENT_RESERVE)
