"""The single-GPU families without LLM keys: a dense transformer step (:mod:`vramcalc.core.dense`) and a
ResNet step (:mod:`vramcalc.core.vision`); and the components every single-GPU transformer step starts from.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from vramcalc.choices import Mode, PagedStates
from vramcalc.core.allocator import weights_rounding_bytes
from vramcalc.core.dense import host_bytes, paged_bytes, phase_candidates
from vramcalc.core.optimizer import DEFAULT_OPTIMIZER_NOTE
from vramcalc.core.phases import select_phases
from vramcalc.core.stack import Stack
from vramcalc.core.workload import ResolvedWorkload, image_elements, input_bytes, workspace_bytes
from vramcalc.families.checkpoint import stored_weight_bytes
from vramcalc.families.estimate import Estimate, assemble
from vramcalc.families.resolve import resolve_workload
from vramcalc.families.target import Target
from vramcalc.spec.models import Spec
from vramcalc.stacks.registry import technique_notes


def base_components(work: ResolvedWorkload, target: Target) -> tuple[dict[str, int], list[str]]:
    """What a single-GPU transformer step holds whatever it does: the weights (with the buffers the model's code
    allocates beside them, and the whole allocator blocks they take as they load), the inputs and the cuBLAS
    workspace; and the assumptions so far (the resolution's and the training techniques')."""
    wl = work.spec.workload
    assumptions = [*work.notes, *technique_notes(wl)]
    base = {
        # a pinned older transformers release may add per-layer buffers (vramcalc/stacks/transformers.py)
        "parameters": _weight_bytes(work) + work.shape.code.buffer_bytes,
        "inputs": input_bytes(work.shape, work.tokens, wl.mode, image_elements(work.spec), work.dtypes.param),
        "workspace": workspace_bytes(wl.mode, target.hopper_or_newer),
        # the whole allocator blocks the weights take as they load (vramcalc/core/allocator.py)
        "allocator_rounding": weights_rounding_bytes(work.shape, work.dtypes.param)
        if work.stack.loads_plain_weights
        else 0,
    }
    if not target.hopper_or_newer:
        assumptions.append("cuBLAS workspace 8.125 MiB per handle (pre-Hopper GPU)")
    return base, assumptions


def _weight_bytes(work: ResolvedWorkload) -> int:
    """The weights' bytes: the parameters at their dtype, or pre-quantized files' bytes as stored."""
    stored = stored_weight_bytes(work.spec)
    return work.n_params * work.dtypes.param if stored is None else stored


def without_unallocated_workspace(assumptions: list[str], phases: dict[str, dict[str, int]]) -> list[str]:
    """``assumptions`` less the size of the cuBLAS workspace where no phase allocates one (llama.cpp; litgpt's
    gptq.int4, whose linears are Triton kernels)."""
    if any(phase.get("workspace") for phase in phases.values()):
        return assumptions
    return [note for note in assumptions if not note.startswith("cuBLAS workspace")]


def estimate_dense(spec: Spec, stack: Stack, target: Target) -> Estimate:
    """A transformer step without LLM keys on one GPU."""
    work = resolve_workload(spec, stack)
    base, assumptions = base_components(work, target)
    if spec.workload.mode is Mode.train and spec.workload.optimizer is None:
        assumptions.append(DEFAULT_OPTIMIZER_NOTE)
    phases = select_phases(phase_candidates(work, base))
    managed, said = paged_states(work, paged_bytes(work))
    result = assemble(spec, work.n_params, phases, [*assumptions, *said], stack)
    return dataclasses.replace(result, host_bytes=host_bytes(work), **managed)


def paged_states(work: ResolvedWorkload, managed_bytes: int | None) -> tuple[dict[str, Any], list[str]]:
    """A paged optimizer's states in managed memory as the Estimate's fields, and the note that says where
    they are (nothing without a paged optimizer; ``managed_bytes`` None: a step that counts them on the GPU)."""
    wl = work.spec.workload
    if work.stack.paged_state_min_elements is None or wl.mode is not Mode.train or work.stack.optimizer_offload:
        return {}, []
    from vramcalc.stacks import bnb  # a paged optimizer only: bitsandbytes is not loaded otherwise

    note = [bnb.paged_state_note(work.optimizer.value, managed_bytes, wl.paged_states)]
    if managed_bytes is None:
        return {}, note
    return {"paged_bytes": managed_bytes, "paged_in_fit": wl.paged_states is PagedStates.device}, note


def estimate_resnet(spec: Spec, stack: Stack, target: Target) -> Estimate:
    """A ResNet step on one GPU."""
    from vramcalc.core import vision

    phases, n_params, assumptions = vision.resnet_phases(spec, stack, hopper_or_newer=target.hopper_or_newer)
    return assemble(spec, n_params, phases, assumptions, stack)
