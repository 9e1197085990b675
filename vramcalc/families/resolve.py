"""A spec resolved once: the model's shape as its stack's code runs it, and the whole
:class:`~vramcalc.core.workload.ResolvedWorkload` every family estimator reads.
"""

from __future__ import annotations

from vramcalc.core.resolve import resolve_shape, workload_notes
from vramcalc.core.shape import ModelShape
from vramcalc.core.stack import Stack
from vramcalc.core.workload import ResolvedWorkload, build_workload
from vramcalc.spec.models import ModelSpec, Spec, Workload
from vramcalc.stacks import resolve_stack


def resolve_model(spec: ModelSpec, workload: Workload) -> tuple[ModelShape, list[str]]:
    """The model's shape with its defaults filled, as the workload's stack runs it, and the assumptions made
    (the shape's defaults, what the stack changes, the workload's defaults)."""
    shape, notes = resolve_shape(spec, workload)
    shape, _, said = resolve_stack(spec, workload, shape)
    return shape, notes + said + workload_notes(workload)


def resolve_with_stack(spec: ModelSpec, workload: Workload) -> tuple[ModelShape, Stack, list[str]]:
    """:func:`resolve_model` with the stack it resolved."""
    shape, notes = resolve_shape(spec, workload)
    shape, stack, said = resolve_stack(spec, workload, shape)
    return shape, stack, notes + said + workload_notes(workload)


def resolve_workload(spec: Spec) -> ResolvedWorkload:
    """Resolve ``spec`` (not ResNet, which has no transformer shape): the model shape with its defaults, the
    stack, the dtypes, the step's tokens, the weight count and the optimizer."""
    shape, stack, notes = resolve_with_stack(spec.model, spec.workload)
    return build_workload(spec, shape, notes, stack)
