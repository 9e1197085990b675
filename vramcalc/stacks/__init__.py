"""The stacks wing: one module per library, runtime or method family, each turning the spec's keys for it
into facts on the resolved :class:`~vramcalc.core.stack.Stack` that the formulas read.
"""

from __future__ import annotations

from dataclasses import replace

from vramcalc.core.shape import ModelShape
from vramcalc.core.stack import Stack
from vramcalc.spec.models import ModelSpec, Workload


def resolve_stack(spec: ModelSpec, workload: Workload, shape: ModelShape) -> tuple[ModelShape, Stack, list[str]]:
    """The stack a workload runs on, the model's shape as that stack's code runs it, and what the stack
    changes, in words: litgpt's own model code (``runtime: litgpt``, ``adapter.framework: litgpt``), else
    transformers at the release ``versions.transformers`` pins (today's when none is)."""
    from vramcalc.stacks import litgpt

    if litgpt.runs_model(workload):
        shape, code, notes = litgpt.model_code(workload, shape)
        return shape, Stack(code=code), notes
    from vramcalc.stacks import transformers

    code, notes = transformers.model_code(spec, workload, shape)
    return replace(shape, code=code), Stack(code=code), notes
