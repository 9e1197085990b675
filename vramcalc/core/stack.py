"""The software stack of one run, resolved once: facts and policies the formulas read.

The formulas of :mod:`vramcalc.core` count what a model's tensors take as PyTorch runs them. What the
libraries around them change (the runtime that serves the model, the PyTorch release, the training
techniques of a recipe) reaches them as facts on a :class:`Stack`, built once per estimate by the stack
modules (``vramcalc/stacks/``) where the workload is resolved; how the code that builds the model allocates
is on its shape (:class:`vramcalc.core.code.ModelCode`). The formulas never look a library up themselves:
every fact here has a default that is today's behaviour, and a stack module states when and why it differs
(its notes become the estimate's assumptions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from vramcalc.choices import Runtime
from vramcalc.core.reserve import (
    DEFAULT_CONTEXT_NOTE,
    DEFAULT_CUDA_CONTEXT,
    DEFAULT_RESERVE,
    ReserveRule,
    transient_reserve_note,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from vramcalc.choices import Optimizer, OptimizerImpl
    from vramcalc.core.activations import Dtypes, LossBytes, Tokens
    from vramcalc.core.checkpointing import KeptOps
    from vramcalc.core.compiled import CompiledBlock
    from vramcalc.core.shape import ModelShape
    from vramcalc.core.training import OffloadedActivations, OffloadedOptimizer
    from vramcalc.spec.models import Overhead

    #: A loss kernel: the saved, forward-transient and backward-temporary bytes of the loss over a step's logits.
    LossRule = Callable[["ModelShape", "Tokens", "Dtypes"], "LossBytes"]
    #: An optimizer offload: the optimizer's states and step temporaries left on the device, and the host's share.
    OptimizerOffload = Callable[["ModelShape", "Optimizer", "OptimizerImpl", "Dtypes"], "OffloadedOptimizer"]
    #: An activation offload: of ``kept`` saved bytes, with ``head`` bytes the head keeps and a ``stash`` of one
    #: block's, what stays on the device and what goes to the host.
    ActivationOffload = Callable[[int, int, int], "OffloadedActivations"]


@dataclass(frozen=True)
class Stack:
    """The resolved software stack of one run: what the formulas read instead of the spec's library keys.
    (How the model's own code allocates is on its shape: :class:`ModelCode`.)"""

    #: The runtime that serves a generation (None: the workload is not served by a runtime).
    runtime: Runtime | None = None
    #: ``zero_grad()`` zeroes the gradients in place, so they are allocated from the start of a step.
    zero_grad_in_place: bool = False
    #: The CUDA context when ``overhead.cuda_context`` is not given, and the assumption that says so.
    cuda_context_bytes: int = DEFAULT_CUDA_CONTEXT
    cuda_context_note: str = DEFAULT_CONTEXT_NOTE
    #: The weights are 16/32-bit PyTorch tensors placed through the caching allocator one by one (their whole
    #: blocks count: :func:`vramcalc.core.allocator.weights_rounding_bytes`), not quantized nor loaded by a
    #: runtime of its own.
    loads_plain_weights: bool = True
    #: The caching allocator's reserve when ``overhead.allocator_reserve`` is not given, and its assumption.
    reserve: ReserveRule = DEFAULT_RESERVE
    reserve_note: str = transient_reserve_note()
    #: What the stack changes in the workload's defaults, said after them (a pinned PyTorch's).
    workload_notes: tuple[str, ...] = ()
    #: The training loss kernel (None: PyTorch's cross-entropy, :func:`vramcalc.core.activations.loss_bytes`).
    loss: LossRule | None = None
    #: What keeps the optimizer on the host (None: its states and step on the device).
    optimizer_offload: OptimizerOffload | None = None
    #: What moves saved activations to the host (None: they stay on the device).
    activation_offload: ActivationOffload | None = None
    #: Each parameter stepped as its gradient is accumulated (:func:`vramcalc.core.training.optimizer_in_backward`).
    optimizer_in_backward: bool = False
    #: What a selective checkpointing policy keeps of each block besides its input (None: no such policy).
    kept_ops: KeptOps | None = None
    #: The optimizer allocates the states of every parameter tensor of at least this many elements in CUDA managed
    #: memory, outside the caching allocator (:func:`vramcalc.core.optimizer.paged_state_bytes_for`; None: every
    #: state is an ordinary device tensor).
    paged_state_min_elements: int | None = None
    #: The runtime serves the model with attention kernels of its own that never materialise the scores.
    fused_attention: bool = False
    #: Each transformer block runs as a compiled graph, keeping what its compiler's partitioner chooses
    #: (:mod:`vramcalc.core.compiled`; None: blocks run eagerly).
    compiled_block: CompiledBlock | None = None
    #: Elements per fp32 absmax block of a quantized optimizer state (bitsandbytes' 8-bit optimizers: the
    #: release's; None: :data:`vramcalc.core.optimizer.LAYOUTS`' block).
    optimizer_state_block: int | None = None


@dataclass(frozen=True)
class Device:
    """A card as the stacks read it: its name and the total memory its driver reports (bytes)."""

    name: str
    total_bytes: int


#: Today's stack: nothing pinned, no serving runtime.
TODAY_STACK = Stack()


def overhead_terms(overhead: Overhead, stack: Stack) -> tuple[int, ReserveRule, list[str]]:
    """The CUDA context's bytes and the allocator reserve's rule: the spec's ``overhead`` section, else the
    stack's, with the assumptions that state the stack's."""
    notes: list[str] = []
    context = overhead.cuda_context
    if context is None:
        context = stack.cuda_context_bytes
        notes.append(stack.cuda_context_note)
    given = overhead.allocator_reserve
    if given is not None:
        return context, ReserveRule(float(given), of_transient=False), notes
    return context, stack.reserve, [*notes, stack.reserve_note]
