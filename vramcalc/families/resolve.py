"""A spec resolved once: its stack, the model's shape as that stack's code runs it, and the whole
:class:`~vramcalc.core.workload.ResolvedWorkload` every family estimator reads.
"""

from __future__ import annotations

from vramcalc.core.resolve import resolve_shape, vision_notes, workload_notes
from vramcalc.core.shape import ModelShape
from vramcalc.core.stack import Stack
from vramcalc.core.workload import ResolvedWorkload, build_workload
from vramcalc.families.checkpoint import checkpoint_shape
from vramcalc.spec.models import ModelSpec, Spec, Workload
from vramcalc.stacks.registry import check_keys, check_stack, flash_runs, model_code, resolve_stack


def stack_of(spec: Spec) -> Stack:
    """The stack ``spec`` runs on (:func:`vramcalc.stacks.resolve_stack`), once the rules of the libraries'
    keys hold (:func:`vramcalc.stacks.registry.check_keys`)."""
    check_keys(spec)
    return resolve_stack(spec.model, spec.workload)


def resolve_model(spec: ModelSpec, workload: Workload, stack: Stack | None = None) -> tuple[ModelShape, list[str]]:
    """The model's shape with its defaults filled, as the code that runs it allocates, and the assumptions
    made (the shape's defaults, what the model's code changes, the workload's defaults and what the stack
    changes in them)."""
    stack = stack or resolve_stack(spec, workload)
    shape, notes = resolve_shape(spec, workload)
    shape, said = model_code(spec, workload, shape)
    shape, read = checkpoint_shape(spec, workload, shape)
    return shape, notes + read + said + workload_notes(workload, stack.workload_notes) + vision_notes(spec, workload)


def resolve_workload(spec: Spec, stack: Stack | None = None) -> ResolvedWorkload:
    """Resolve ``spec`` (not ResNet, which has no transformer shape) on its stack (``stack``, when the caller
    resolved it already): the model shape with its defaults, the dtypes, the step's tokens, the weight count
    and the optimizer."""
    from vramcalc.stacks.transformers import attention_run

    spec = attention_run(spec)  # the attention transformers runs (idempotent)
    stack = stack or stack_of(spec)
    shape, notes = resolve_model(spec.model, spec.workload, stack)
    check_stack(spec, shape)
    return build_workload(spec, shape, notes, stack, flash_runs(spec, shape))
