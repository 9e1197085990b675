"""Memory of the optimizer: its state tensors and the temporaries of ``optimizer.step()``.

Per parameter tensor, as the optimizer allocates its states, each rounded to the caching allocator's
512-byte blocks. Every optimizer a spec can name has one row of :data:`LAYOUTS`: how many state tensors
it keeps per parameter, at which width, and what its step allocates. Pure: no I/O.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from vramcalc.choices import Optimizer, OptimizerImpl
from vramcalc.core.params import param_tensors
from vramcalc.core.shape import ModelShape
from vramcalc.units import FP32, allocation_bytes, ceil_div

#: The optimizer of a training step that names none (AdamW, the Hugging Face Trainer's and the torch recipes'),
#: and the assumption that says so.
DEFAULT_OPTIMIZER = Optimizer.adamw
DEFAULT_OPTIMIZER_NOTE = f"optimizer not given: {DEFAULT_OPTIMIZER.value}"


@dataclass(frozen=True)
class StateLayout:
    """The states of one optimizer, per parameter tensor, and what its step allocates."""

    #: State tensors per parameter tensor (0: stateless).
    states: int
    #: Bytes per state element (0: the parameter's dtype).
    width: int = 0
    #: Quantized states: elements per block, each block with an fp32 absmax (0: not quantized).
    block: int = 0
    #: Quantized states: tensors with fewer elements keep fp32 states.
    min_quantized: int = 0
    #: Adafactor's factored second moment: a row and a column vector per matrix, the full variance per vector.
    factored: bool = False
    #: The step updates the parameters in place, without temporaries.
    in_place: bool = False
    #: The step runs one fused kernel per tensor, without temporaries, whatever ``optimizer_impl`` says.
    fused_kernel: bool = False

    @property
    def no_step_temporaries(self) -> bool:
        return self.in_place or self.fused_kernel


#: One row per optimizer a spec can name.
LAYOUTS: dict[Optimizer, StateLayout] = {
    Optimizer.none: StateLayout(0, in_place=True),
    # torch.optim.SGD updates in place; with momentum one buffer (torch/optim/sgd.py)
    Optimizer.sgd: StateLayout(0, in_place=True),
    Optimizer.sgd_momentum: StateLayout(1, in_place=True),
    # exp_avg + exp_avg_sq, like the parameter (torch/optim/adamw.py)
    Optimizer.adam: StateLayout(2),
    Optimizer.adamw: StateLayout(2),
    # torch.optim.Adafactor: row and column second-moment vectors for matrices, a full variance for vectors
    Optimizer.adafactor: StateLayout(1, factored=True),
    # one momentum buffer
    Optimizer.lion: StateLayout(1),
    # bitsandbytes 8-bit AdamW (paged or not): two 1-byte states in 256-element blocks with an fp32 absmax
    # each (the block of the stack's release: Stack.optimizer_state_block); tensors under 4096 elements keep
    # 32-bit states (bitsandbytes/optim/optimizer.py, min_8bit_size); its optimizers update in one fused
    # kernel per tensor
    Optimizer.adamw_8bit: StateLayout(2, width=1, block=256, min_quantized=4096, fused_kernel=True),
    Optimizer.paged_adamw_8bit: StateLayout(2, width=1, block=256, min_quantized=4096, fused_kernel=True),
    # bitsandbytes paged 32-bit AdamW: fp32 states whatever the parameter's dtype
    Optimizer.paged_adamw_32bit: StateLayout(2, width=FP32, fused_kernel=True),
}


def _round_tensors(tensors: Sequence[tuple[int, int, int]], bytes_per_element: int) -> int:
    """Bytes of one state tensor per parameter tensor, each rounded to the allocator's 512 B."""
    return sum(n * allocation_bytes(r * c * bytes_per_element) for n, r, c in tensors)


@functools.lru_cache(maxsize=512)
def optimizer_state_bytes(optimizer: Optimizer, shape: ModelShape, state_bytes: int, block: int | None = None) -> int:
    """Optimizer state of the model's parameter tensors (:data:`LAYOUTS`; ``state_bytes``: the parameter's
    dtype, the width of the states that follow it; ``block``: a quantized state's elements per absmax block,
    the stack's, else the layout's)."""
    return optimizer_state_bytes_for(optimizer, param_tensors(shape), state_bytes, block)


def optimizer_state_bytes_for(
    optimizer: Optimizer, tensors: Sequence[tuple[int, int, int]], state_bytes: int, block: int | None = None
) -> int:
    """:func:`optimizer_state_bytes` for an explicit list of (count, rows, columns) parameter tensors."""
    layout = LAYOUTS[optimizer]
    width = layout.width or state_bytes
    if layout.states == 0:
        return 0
    if layout.factored:
        total = 0
        for n, rows, cols in tensors:
            factored = [rows, cols] if cols > 1 else [rows]
            total += n * sum(allocation_bytes(vector * width) for vector in factored)
        return total
    if not layout.block:
        return layout.states * _round_tensors(tensors, width)
    total = 0
    for n, rows, cols in tensors:
        numel = rows * cols
        if numel < layout.min_quantized:
            total += n * layout.states * allocation_bytes(numel * FP32)
        else:
            absmax = allocation_bytes(ceil_div(numel, block or layout.block) * FP32)
            total += n * layout.states * (allocation_bytes(numel * width) + absmax)
    return total


@dataclass(frozen=True)
class PagedStates:
    """Optimizer states split by where they live: ``device_bytes`` through PyTorch's caching allocator (what
    ``torch.cuda.max_memory_allocated()`` counts), ``managed_bytes`` in CUDA managed memory outside it."""

    device_bytes: int
    managed_bytes: int


def paged_state_bytes_for(
    optimizer: Optimizer,
    tensors: Sequence[tuple[int, int, int]],
    state_bytes: int,
    min_elements: int,
    block: int | None = None,
) -> PagedStates:
    """:func:`optimizer_state_bytes_for` when the state tensors of every parameter tensor of at least
    ``min_elements`` elements are allocated in managed memory (exact bytes, not the allocator's 512-byte
    blocks); a quantized layout's per-block scales and the smaller tensors' states stay device tensors."""
    layout = LAYOUTS[optimizer]
    total = optimizer_state_bytes_for(optimizer, tensors, state_bytes, block)
    if layout.states == 0 or layout.factored:
        return PagedStates(total, 0)
    moved, managed = 0, 0
    for n, rows, cols in tensors:
        numel = rows * cols
        if numel < min_elements:
            continue
        width = FP32 if layout.block and numel < layout.min_quantized else (layout.width or state_bytes)
        moved += n * layout.states * allocation_bytes(numel * width)
        managed += n * layout.states * numel * width
    return PagedStates(total - moved, managed)


@functools.lru_cache(maxsize=64)
def paged_state_bytes(
    optimizer: Optimizer, shape: ModelShape, state_bytes: int, min_elements: int, block: int | None = None
) -> PagedStates:
    """:func:`paged_state_bytes_for` of the model's parameter tensors."""
    return paged_state_bytes_for(optimizer, param_tensors(shape), state_bytes, min_elements, block)


def optimizer_temp_bytes(
    optimizer: Optimizer, impl: OptimizerImpl, shape: ModelShape, param_bytes: int, dt: int
) -> int:
    """Temporaries of ``optimizer.step()``. foreach Adam/AdamW/Adafactor/Lion: one parameter-sized
    list (sqrt of exp_avg_sq; Adafactor's update); forloop: the largest parameter; fused: none.
    SGD (with or without momentum) updates in place; bitsandbytes steps each tensor in one kernel."""
    if LAYOUTS[optimizer].no_step_temporaries or impl is OptimizerImpl.fused:
        return 0
    return optimizer_temp_bytes_for(optimizer, impl, param_tensors(shape), param_bytes, dt)


def optimizer_temp_bytes_for(
    optimizer: Optimizer, impl: OptimizerImpl, tensors: Sequence[tuple[int, int, int]], param_bytes: int, dt: int
) -> int:
    """:func:`optimizer_temp_bytes` for an explicit list of parameter tensors."""
    if LAYOUTS[optimizer].no_step_temporaries or impl is OptimizerImpl.fused:
        return 0
    if impl is OptimizerImpl.forloop:
        return max(allocation_bytes(r * c * dt) for _, r, c in tensors)
    return param_bytes
