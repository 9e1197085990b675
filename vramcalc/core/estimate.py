"""The estimate of one step: its components per phase, the peak phase and the runtime overhead
(int bytes), assembled from the phases a family estimator returns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from vramcalc.choices import Mode
from vramcalc.spec.llamacpp import runs_llamacpp
from vramcalc.spec.models import Spec, is_generation
from vramcalc.units import MiB

#: CUDA context default: 512 MiB. Lazy module loading (CUDA >= 11.7) keeps it at 0.3-0.6 GiB on
#: current stacks (shared/calibration/tracer/README.md); 1343 MiB was measured on a V100 with 2022
#: PyTorch (measured.yaml case hf-perf-bert-large-load-context-only). Override with overhead.cuda_context.
DEFAULT_CUDA_CONTEXT = 512 * MiB


#: Caching-allocator reserve above the allocated peak: median of reserved/allocated - 1 over the 34
#: tracer cases' allocator replay (shared/calibration/tracer_cases.json, range 2-35 %).
DEFAULT_ALLOCATOR_RESERVE = 0.12


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
    # several GPUs (vramcalc/parallel/phases.py): ZeRO-3/FSDP unsharded working set, DeepSpeed buckets
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
    llm: Any = None  # vramcalc.llm.phases.LlmDetails: KV cache, adapter, experts, quantization
    parallel: Any = None  # vramcalc.parallel.phases.ParallelDetails: plan, stage, host memory
    host_bytes: int = 0  # one GPU: host memory of optimizer_offload / activation_offloading (core/techniques.py)

    @property
    def peak_allocated_bytes(self) -> int:
        return sum(self.components.values())

    @property
    def total_bytes(self) -> int:
        return self.peak_allocated_bytes + sum(self.overhead.values())


Phase = dict[str, Any]  # component -> bytes (an int, or a polynomial in a symbolic batch size)


def phase_total(components: Phase) -> Any:
    """Bytes allocated at one moment: the sum of its components."""
    return sum(components.values())


def select_phases(candidates: dict[str, list[Phase]]) -> dict[str, Phase]:
    """Each phase's largest moment (the first of equals)."""
    return {name: max(moments, key=phase_total) for name, moments in candidates.items()}


def assemble(spec: Spec, n_params: int, phases: dict[str, dict[str, int]], assumptions: list[str]) -> Estimate:
    full = {name: {key: comps.get(key, 0) for key in COMPONENTS} for name, comps in phases.items()}
    totals = {name: sum(comps.values()) for name, comps in full.items()}
    peak_phase = max(totals, key=lambda name: totals[name])
    components = full[peak_phase]
    component_peaks = {key: max(comps[key] for comps in full.values()) for key in COMPONENTS}
    context, reserve = overhead_terms(spec, assumptions)
    overhead = {"cuda_context": context, "allocator_reserve": math.ceil(sum(components.values()) * reserve)}
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
        assumptions=assumptions,
    )


def overhead_terms(spec: Spec, assumptions: list[str]) -> tuple[int, float]:
    """The CUDA context's bytes and the allocator reserve's share of the allocated peak (the spec's
    ``overhead`` section, else the defaults, noted in ``assumptions``)."""
    context = spec.overhead.cuda_context
    if context is None:
        context = DEFAULT_CUDA_CONTEXT
        assumptions.append("CUDA context 512 MiB (outside PyTorch's allocator; set overhead.cuda_context)")
    reserve = spec.overhead.allocator_reserve
    if reserve is None and serves_llamacpp(spec):
        reserve = 0.0
        assumptions.append("allocator reserve 0: llama.cpp allocates its buffers once, at their exact sizes")
    elif reserve is None:
        reserve = DEFAULT_ALLOCATOR_RESERVE
        assumptions.append("allocator reserve 12 % of the allocated peak (set overhead.allocator_reserve)")
    return context, reserve


def serves_llamacpp(spec: Spec) -> bool:
    """A generation spec that runs in llama.cpp (vramcalc/llm/llamacpp.py)."""
    wl = spec.workload
    return wl.mode is Mode.inference and is_generation(wl) and runs_llamacpp(wl)
