"""The stacks wing: one module per library, runtime or method family, each turning the spec's keys for it
into facts the formulas read: on the resolved :class:`~vramcalc.core.stack.Stack`, and on the model's
shape as the code that runs it allocates (:class:`~vramcalc.core.stack.ModelCode`).
"""

from __future__ import annotations

from dataclasses import replace

from vramcalc.choices import Mode, Runtime
from vramcalc.core.shape import ModelShape
from vramcalc.core.stack import Stack
from vramcalc.spec.llamacpp import runs_llamacpp
from vramcalc.spec.models import ModelSpec, Workload, is_generation
from vramcalc.spec.techniques import given_techniques
from vramcalc.stacks import sac


def serving_runtime(workload: Workload) -> Runtime | None:
    """The runtime that serves a generation: llama.cpp for a GGUF file (unless ``runtime`` says otherwise),
    else ``runtime``, vLLM by default; None when the workload generates nothing."""
    if workload.mode is not Mode.inference or not is_generation(workload):
        return None
    if runs_llamacpp(workload):
        return Runtime.llama_cpp
    return workload.runtime or Runtime.vllm


def loads_plain_weights(workload: Workload) -> bool:
    """The weights are 16/32-bit PyTorch tensors placed through the caching allocator one by one: not
    quantized, and not served by vLLM (its own weight loader and profile) or llama.cpp."""
    if workload.quantization is not None:
        return False
    runs = workload.runtime or Runtime.vllm
    return not (is_generation(workload) and runs in (Runtime.vllm, Runtime.llama_cpp))


def resolve_stack(spec: ModelSpec, workload: Workload) -> Stack:
    """The stack a workload runs on: the PyTorch release it pins, the training techniques it turns on, its
    checkpointing policy, and the runtime that serves it (its CUDA context and allocator reserve where it has
    its own)."""
    from vramcalc.stacks import torch

    pinned = torch.facts(workload)
    stack = Stack(
        runtime=serving_runtime(workload),
        loads_plain_weights=loads_plain_weights(workload),
        zero_grad_in_place=pinned.zero_grad_in_place,
        cuda_context_bytes=pinned.cuda_context_bytes,
        cuda_context_note=pinned.cuda_context_note,
        workload_notes=pinned.workload_notes,
    )
    if given_techniques(workload):
        from vramcalc.stacks import techniques

        stack = techniques.with_techniques(stack, workload)
    stack = replace(stack, kept_ops=sac.kept_ops(workload))
    if stack.runtime is Runtime.llama_cpp:
        from vramcalc.stacks import llamacpp

        return replace(stack, reserve=llamacpp.RESERVE, reserve_note=llamacpp.RESERVE_NOTE)
    if stack.runtime is Runtime.vllm:
        from vramcalc.stacks import vllm

        return replace(stack, reserve=vllm.RESERVE, reserve_note=vllm.RESERVE_NOTE)
    return stack


def model_code(spec: ModelSpec, workload: Workload, shape: ModelShape) -> tuple[ModelShape, list[str]]:
    """The model's shape as the code that runs it allocates, and what that code changes, in words: litgpt's
    own model code (``runtime: litgpt``, ``adapter.framework: litgpt``), else transformers at the release
    ``versions.transformers`` pins (today's when none is)."""
    from vramcalc.stacks import litgpt

    if litgpt.runs_model(workload):
        shape, _, notes = litgpt.model_code(workload, shape)
        return shape, notes
    from vramcalc.stacks import transformers

    code, notes = transformers.model_code(spec, workload, shape)
    return replace(shape, code=code), notes
