"""The decode roofline: FLOPs of a decode step over the weight bytes it reads (pure: no typer, no rich).

Units: bytes are ints, rates FLOP/s and bytes/s, intensities FLOP per byte.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vramcalc.hardware.weights import ExpertStream

#: FLOPs per parameter per generated token in a decode step (one multiply-add per weight).
FLOPS_PER_PARAM = 2


@dataclass(frozen=True)
class Roofline:
    """Decode step at batch B: 2 x params x B FLOPs over the weight bytes the step reads.

    ``n_params`` are the parameters a token multiplies through (a mixture of experts: the active ones);
    ``weights_bytes`` is every parameter. A dense step reads all of them; with ``experts`` a step reads
    the routed experts its batch is expected to use (:class:`~vramcalc.hardware.weights.ExpertStream`).
    """

    n_params: int
    weights_bytes: int
    batch: int
    flops_per_s: float
    bytes_per_s: int
    precision: str
    experts: ExpertStream | None = None

    def read_bytes(self, batch: int) -> int:
        """Weight bytes a step of ``batch`` sequences reads."""
        if self.experts is None:
            return self.weights_bytes
        return self.experts.streamed_bytes(self.weights_bytes, batch)

    @property
    def bytes_per_step(self) -> int:
        return self.read_bytes(self.batch)

    def intensity_at(self, batch: float) -> float:
        """FLOP per byte at a (possibly fractional) batch: 2 x params x B / bytes read at B."""
        if self.experts is None:
            read: float = self.weights_bytes
        else:
            read = self.weights_bytes - self.experts.all_bytes + self.experts.routed_bytes(batch)
        return FLOPS_PER_PARAM * self.n_params * batch / read

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOP per byte of weights read: 2 x params x B / bytes read at B."""
        return FLOPS_PER_PARAM * self.n_params * self.batch / self.bytes_per_step

    @property
    def ridge(self) -> float:
        """The card's ridge point, FLOP per byte: peak FLOP/s / peak bytes/s."""
        return self.flops_per_s / self.bytes_per_s

    @property
    def crossover_batch(self) -> float:
        """Batch where the step turns compute-bound. Dense: ridge x weights_bytes / (2 x params). A mixture
        of experts reads more experts as the batch grows; its intensity still rises with B (the bytes grow
        less than linearly), so the crossover is found by bisection, between the dense formula at the
        batch-1 bytes and at all the bytes."""
        dense = self.ridge * self.weights_bytes / (FLOPS_PER_PARAM * self.n_params)
        if self.experts is None:
            return dense
        low, high = self.ridge * self.read_bytes(1) / (FLOPS_PER_PARAM * self.n_params), dense
        for _ in range(200):
            if high - low <= 1e-9 * high:
                break
            middle = (low + high) / 2
            low, high = (low, middle) if self.intensity_at(middle) >= self.ridge else (middle, high)
        return high

    @property
    def first_compute_bound_batch(self) -> int:
        """Smallest whole batch at or past the crossover."""
        batch = max(1, math.ceil(self.crossover_batch))
        while self.experts is not None and batch > 1 and self.intensity_at(batch - 1) >= self.ridge:  # bisection slack
            batch -= 1
        return batch

    @property
    def bound(self) -> str:
        return "compute" if self.intensity >= self.ridge else "memory"

    @property
    def compute_s(self) -> float:
        """Time for the step's FLOPs at the peak dense rate."""
        return FLOPS_PER_PARAM * self.n_params * self.batch / self.flops_per_s
