"""The estimate of one step: its components per phase, the peak phase and the runtime overhead
(int bytes), assembled from the phases a family estimator returns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from vramcalc.choices import Mode, Runtime
from vramcalc.spec.llamacpp import runs_llamacpp
from vramcalc.spec.models import Spec, is_generation
from vramcalc.spec.versions import torch_release
from vramcalc.units import MiB

#: CUDA context default: 512 MiB. Lazy module loading (CUDA >= 11.7) keeps it at 0.3-0.6 GiB on
#: current stacks (shared/calibration/tracer/README.md); 1343 MiB was measured on a V100 with 2022
#: PyTorch (measured.yaml case hf-perf-bert-large-load-context-only). Override with overhead.cuda_context.
DEFAULT_CUDA_CONTEXT = 512 * MiB
#: Before PyTorch 1.13 (which sets ``CUDA_MODULE_LOADING=LAZY`` unless the user chose otherwise) every kernel
#: module is loaded into the context at start-up: 1,343 MiB measured on a V100 with 2022 PyTorch (measured.yaml
#: case hf-perf-bert-large-load-context-only); DeepSpeed's 2020 out-of-memory message on a 32 GB V100 leaves
#: 1.26 GiB of the card outside PyTorch's reserve (case deepspeed-zero-tutorial-gpt2-1.5b-dp8-noZeRO-OOM).
EAGER_LOADING_CUDA_CONTEXT = 1343 * MiB
LAZY_LOADING_TORCH = (1, 13, 0)


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
    llm: Any = None  # vramcalc.families.llm.LlmDetails: KV cache, adapter, experts, quantization
    parallel: Any = None  # vramcalc.families.per_rank.ParallelDetails: plan, stage, host memory
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
        assumptions=assumptions,
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


def overhead_terms(spec: Spec, assumptions: list[str]) -> tuple[int, ReserveRule]:
    """The CUDA context's bytes and the allocator reserve's rule (the spec's ``overhead`` section, else
    the defaults, noted in ``assumptions``)."""
    context = spec.overhead.cuda_context
    if context is None:
        context = default_context(spec.workload.versions)
        assumptions.append(context_assumption(context))
    given = spec.overhead.allocator_reserve
    if given is not None:
        return context, ReserveRule(float(given), of_transient=False)
    if serves_llamacpp(spec):
        assumptions.append("allocator reserve 0: llama.cpp allocates its buffers once, at their exact sizes")
        return context, ReserveRule(0.0)
    long_lived: tuple[str, ...] = LONG_LIVED
    if serves_vllm(spec):  # vLLM allocates its whole KV pool once, at start-up
        long_lived += ("kv_cache",)
    assumptions.append(
        f"allocator reserve {100 * TRANSIENT_RESERVE:g} % of the peak's transient bytes (all but weights, gradients, "
        "optimizer states, workspaces"
        + (" and vLLM's KV pool" if serves_vllm(spec) else "")
        + "; set overhead.allocator_reserve for a share of the whole peak)"
    )
    return context, ReserveRule(TRANSIENT_RESERVE, long_lived=long_lived)


def default_context(versions: dict[str, str] | None) -> int:
    """The CUDA context when ``overhead.cuda_context`` is not given: larger before PyTorch 1.13, which
    loads every kernel module at start-up (it made CUDA's lazy module loading its default)."""
    release = torch_release(versions)
    return EAGER_LOADING_CUDA_CONTEXT if release is not None and release < LAZY_LOADING_TORCH else DEFAULT_CUDA_CONTEXT


def context_assumption(context: int) -> str:
    if context == EAGER_LOADING_CUDA_CONTEXT:
        return (
            "CUDA context 1,343 MiB: PyTorch before 1.13 loads every kernel at start-up (measured on a V100 "
            "with 2022 PyTorch; set overhead.cuda_context)"
        )
    return "CUDA context 512 MiB (outside PyTorch's allocator; set overhead.cuda_context)"


def serves_llamacpp(spec: Spec) -> bool:
    """A generation spec that runs in llama.cpp (vramcalc/llm/llamacpp.py)."""
    wl = spec.workload
    return wl.mode is Mode.inference and is_generation(wl) and runs_llamacpp(wl)


def serves_vllm(spec: Spec) -> bool:
    """A generation spec served by vLLM (the default runtime of a generation spec that is not a GGUF file)."""
    wl = spec.workload
    on_vllm = wl.runtime in (None, Runtime.vllm) and not runs_llamacpp(wl)
    return wl.mode is Mode.inference and is_generation(wl) and on_vllm
