"""The estimate of one step: its components per phase, the peak phase and the runtime overhead
(int bytes), assembled from the phases a family estimator returns, with the family's details.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vramcalc.core.stack import Stack, overhead_terms
from vramcalc.spec.models import Spec

if TYPE_CHECKING:
    from vramcalc.llm.details import LlmDetails
    from vramcalc.parallel.layout import ParallelDetails

COMPONENTS = (
    "parameters",
    # the whole blocks max_memory_allocated() counts for the weights beyond their bytes (vramcalc/core/allocator.py)
    "allocator_rounding",
    "gradients",
    "optimizer_states",
    "activations",
    "inputs",
    "autocast_weight_copies",
    "temporaries",
    "workspace",
    "kv_cache",
    # several GPUs (vramcalc/families/per_rank.py): ZeRO-3/FSDP unsharded working set, DeepSpeed buckets
    "gathered_parameters",
    "communication_buffers",
)


@dataclass(frozen=True)
class Estimate:
    """Result of :func:`estimate`: int bytes throughout."""

    name: str
    params: int
    mode: str
    peak_phase: str
    components: dict[str, int]
    component_peaks: dict[str, int]
    phases: dict[str, int]
    phase_components: dict[str, dict[str, int]]
    overhead: dict[str, int]
    assumptions: list[str] = field(default_factory=list)
    llm: LlmDetails | None = None  # KV cache, adapter, experts, quantization
    parallel: ParallelDetails | None = None  # the plan across GPUs: stage, host memory
    host_bytes: int = 0  # one GPU: host memory of optimizer_offload / activation_offloading
    #: A paged optimizer's states in CUDA managed memory, outside the allocated peak and the total
    #: (vramcalc/stacks/bnb.py; None without a paged optimizer); ``paged_in_fit``: the fit verdict counts them
    #: (``paged_states: device``).
    paged_bytes: int | None = None
    paged_in_fit: bool = False

    @property
    def peak_allocated_bytes(self) -> int:
        return sum(self.components.values())

    @property
    def total_bytes(self) -> int:
        return self.peak_allocated_bytes + sum(self.overhead.values())


def assemble(
    spec: Spec, n_params: int, phases: dict[str, dict[str, int]], assumptions: list[str], stack: Stack
) -> Estimate:
    full = {name: {key: comps.get(key, 0) for key in COMPONENTS} for name, comps in phases.items()}
    totals = {name: sum(comps.values()) for name, comps in full.items()}
    peak_phase = max(totals, key=lambda name: totals[name])
    components = full[peak_phase]
    component_peaks = {key: max(comps[key] for comps in full.values()) for key in COMPONENTS}
    context, reserve, said = overhead_terms(spec.overhead, stack)
    overhead = {"cuda_context": context, "allocator_reserve": reserve.bytes_of(components)}
    return Estimate(
        name=spec.name or "unnamed",
        params=n_params,
        mode=spec.workload.mode.value,
        peak_phase=peak_phase,
        components=components,
        component_peaks=component_peaks,
        phases=totals,
        phase_components=full,
        overhead=overhead,
        assumptions=[*assumptions, *said],
    )
