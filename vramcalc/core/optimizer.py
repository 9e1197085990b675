"""Memory of the optimizer: its state tensors and the temporaries of ``optimizer.step()``.

Per parameter tensor, as torch.optim and bitsandbytes allocate them, each rounded to the caching
allocator's 512-byte blocks. Pure: no I/O.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from vramcalc.choices import Optimizer, OptimizerImpl
from vramcalc.core.params import param_tensors
from vramcalc.core.shape import ModelShape
from vramcalc.units import allocation_bytes, ceil_div

#: bitsandbytes 8-bit optimizers: 2048-element blocks with an fp32 absmax each; tensors under
#: 4096 elements keep 32-bit states (bitsandbytes/optim/optimizer.py, min_8bit_size=4096).
BNB_BLOCK = 2048
BNB_MIN_8BIT_SIZE = 4096
#: bitsandbytes optimizers update in one fused kernel per tensor: no step temporaries.
BNB_FUSED = (Optimizer.adamw_8bit, Optimizer.paged_adamw_8bit, Optimizer.paged_adamw_32bit)


def _round_tensors(tensors: Sequence[tuple[int, int, int]], bytes_per_element: int) -> int:
    """Bytes of one state tensor per parameter tensor, each rounded to the allocator's 512 B."""
    return sum(n * allocation_bytes(r * c * bytes_per_element) for n, r, c in tensors)


@functools.lru_cache(maxsize=512)
def optimizer_state_bytes(optimizer: Optimizer, shape: ModelShape, state_bytes: int) -> int:
    """Optimizer state, allocated like the parameter as torch.optim does (dtype of the param).

    Adam/AdamW: exp_avg + exp_avg_sq (torch/optim/adamw.py). SGD momentum and Lion: one buffer.
    Adafactor (torch.optim.Adafactor): row and column second-moment vectors for matrices, a full
    variance for vectors. 8-bit AdamW (paged or not): two 1-byte states + fp32 absmax per 2048-block;
    paged 32-bit AdamW: two fp32 states.
    """
    return optimizer_state_bytes_for(optimizer, param_tensors(shape), state_bytes)


def optimizer_state_bytes_for(optimizer: Optimizer, tensors: Sequence[tuple[int, int, int]], state_bytes: int) -> int:
    """:func:`optimizer_state_bytes` for an explicit list of (count, rows, columns) parameter tensors."""
    if optimizer in (Optimizer.none, Optimizer.sgd):
        return 0
    if optimizer in (Optimizer.sgd_momentum, Optimizer.lion):
        return _round_tensors(tensors, state_bytes)
    if optimizer in (Optimizer.adam, Optimizer.adamw):
        return 2 * _round_tensors(tensors, state_bytes)
    if optimizer is Optimizer.paged_adamw_32bit:  # bitsandbytes 32-bit states are fp32 whatever the param dtype
        return 2 * _round_tensors(tensors, 4)
    if optimizer is Optimizer.adafactor:
        total = 0
        for n, rows, cols in tensors:
            factored = [rows, cols] if cols > 1 else [rows]
            total += n * sum(allocation_bytes(width * state_bytes) for width in factored)
        return total
    total = 0
    for n, rows, cols in tensors:
        numel = rows * cols
        if numel < BNB_MIN_8BIT_SIZE:
            total += n * 2 * allocation_bytes(numel * 4)
        else:
            total += n * 2 * (allocation_bytes(numel) + allocation_bytes(ceil_div(numel, BNB_BLOCK) * 4))
    return total


def optimizer_temp_bytes(
    optimizer: Optimizer, impl: OptimizerImpl, shape: ModelShape, param_bytes: int, dt: int
) -> int:
    """Temporaries of ``optimizer.step()``. foreach Adam/AdamW/Adafactor/Lion: one parameter-sized
    list (sqrt of exp_avg_sq; Adafactor's update); forloop: the largest parameter; fused: none.
    SGD (with or without momentum) updates in place."""
    if optimizer in (Optimizer.none, Optimizer.sgd, Optimizer.sgd_momentum, *BNB_FUSED):
        return 0
    if impl is OptimizerImpl.fused:
        return 0
    return optimizer_temp_bytes_for(optimizer, impl, param_tensors(shape), param_bytes, dt)


def optimizer_temp_bytes_for(
    optimizer: Optimizer, impl: OptimizerImpl, tensors: Sequence[tuple[int, int, int]], param_bytes: int, dt: int
) -> int:
    """:func:`optimizer_temp_bytes` for an explicit list of parameter tensors."""
    if optimizer in (Optimizer.none, Optimizer.sgd, Optimizer.sgd_momentum, *BNB_FUSED):
        return 0
    if impl is OptimizerImpl.fused:
        return 0
    if impl is OptimizerImpl.forloop:
        return max(allocation_bytes(r * c * dt) for _, r, c in tensors)
    return param_bytes
