"""The one entry point of the estimators: picks the family (several GPUs, ResNet, LLM keys, dense)
and returns its :class:`~vramcalc.core.estimate.Estimate`.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from vramcalc.choices import Architecture, Mode, Precision
from vramcalc.core.allocator import loads_plain_weights, weights_rounding_bytes
from vramcalc.core.dense import host_bytes, phase_candidates
from vramcalc.core.estimate import Estimate, assemble, select_phases
from vramcalc.core.techniques import notes as technique_notes
from vramcalc.core.workload import image_elements, input_bytes, workspace_bytes
from vramcalc.families.resolve import resolve_workload
from vramcalc.spec.models import Spec, uses_llm_keys

if TYPE_CHECKING:
    from vramcalc.llm.vllm import Card


def estimate(
    spec: Spec, *, hopper_or_newer: bool = True, card: Card | None = None, interconnect: str = "nvswitch"
) -> Estimate:
    """Estimate the peak allocated memory of one step of ``spec``; ``card``: the GPU it is checked on, where
    one is named (vLLM's default batch sizes depend on it, vramcalc/llm/vllm.py); ``interconnect``: how that
    card's GPUs talk, unless the spec's ``parallel.interconnect`` says (NCCL's buffers across GPUs)."""
    if spec.parallel is not None and spec.workload.mode is Mode.inference and uses_llm_keys(spec):
        from vramcalc.families.serving import serving_estimate  # serving across GPUs: per rank

        phases, n_params, assumptions, ranked, details = serving_estimate(spec, hopper_or_newer=hopper_or_newer)
        return dataclasses.replace(assemble(spec, n_params, phases, assumptions), parallel=ranked, llm=details)
    wl = spec.workload
    if spec.parallel is not None and wl.mode is Mode.train and (wl.adapter or wl.quantization) is not None:
        from vramcalc.families.lora_ranks import adapter_rank_estimate  # LoRA / QLoRA across GPUs: per rank

        phases, n_params, assumptions, ranked, details = adapter_rank_estimate(spec, hopper_or_newer=hopper_or_newer)
        result = dataclasses.replace(assemble(spec, n_params, phases, assumptions), parallel=ranked, llm=details)
        return _with_nccl(result, spec, hopper_or_newer, interconnect)
    if spec.parallel is not None or wl.precision in (Precision.mixed_fp16, Precision.mixed_bf16):
        from vramcalc.families.per_rank import per_rank_estimate  # several GPUs: every figure per rank

        phases, n_params, assumptions, ranked = per_rank_estimate(spec, hopper_or_newer=hopper_or_newer)
        result = dataclasses.replace(assemble(spec, n_params, phases, assumptions), parallel=ranked)
        return _with_nccl(result, spec, hopper_or_newer, interconnect)
    if spec.model.architecture is Architecture.resnet:
        from vramcalc.core import vision

        phases, n_params, assumptions = vision.resnet_phases(spec, hopper_or_newer=hopper_or_newer)
        return assemble(spec, n_params, phases, assumptions)
    work = resolve_workload(spec)
    assumptions = [*work.notes, *technique_notes(spec.workload)]
    base = {
        # a pinned older transformers release may add per-layer buffers (vramcalc/stacks/transformers.py)
        "parameters": work.n_params * work.dtypes.param + work.shape.code.buffer_bytes,
        "inputs": input_bytes(work.shape, work.tokens, wl.mode, image_elements(spec), work.dtypes.param),
        "workspace": workspace_bytes(wl.mode, hopper_or_newer),
        # the whole allocator blocks the weights take as they load (vramcalc/core/allocator.py)
        "allocator_rounding": weights_rounding_bytes(work.shape, work.dtypes.param) if loads_plain_weights(wl) else 0,
    }
    if not hopper_or_newer:
        assumptions.append("cuBLAS workspace 8.125 MiB per handle (pre-Hopper GPU)")
    if uses_llm_keys(spec):
        import vramcalc.families.llm as llm

        phases, details = llm.llm_phases(work, base, assumptions, card)
        result = assemble(spec, work.n_params + details.frozen_adapter_params, phases, assumptions)
        return dataclasses.replace(result, llm=details, host_bytes=host_bytes(work))
    if wl.mode is Mode.train and wl.optimizer is None:
        assumptions.append("optimizer not given: adamw")
    phases = select_phases(phase_candidates(work, base))
    return dataclasses.replace(assemble(spec, work.n_params, phases, assumptions), host_bytes=host_bytes(work))


def _with_nccl(result: Estimate, spec: Spec, hopper_or_newer: bool, interconnect: str) -> Estimate:
    """A training estimate across GPUs with NCCL's buffers among its overhead (vramcalc/parallel/nccl.py)."""
    from vramcalc.parallel.nccl import nccl_overhead

    assert result.parallel is not None  # the per-rank paths
    nccl, note = nccl_overhead(spec, result.parallel.plan, hopper_or_newer, interconnect)
    if not note:
        return result
    overhead = {**result.overhead, "nccl": nccl} if nccl else result.overhead
    return dataclasses.replace(result, overhead=overhead, assumptions=[*result.assumptions, note])
