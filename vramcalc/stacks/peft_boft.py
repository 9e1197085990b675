"""BOFT (PEFT ``BOFTConfig``): each adapted linear's input rotated by a trained block-diagonal orthogonal matrix.

Read from PEFT 0.21 (``peft/tuners/boft/layer.py``, ``Linear.forward`` and ``update_layer``; the same forward
since PEFT 0.19.2, which rotates the input, where 0.19.1 and older rotated the weight) and checked against
the CPU tracer (benchmarks/data/tracer_llm.json, ``llm-peft-boft-*``). Per adapted linear of ``in -> out``
features, with ``b`` the block size (``in / block_num`` when the block count is given instead):

* **trained**: ``boft_R`` (``in / b`` blocks of ``b x b``) and ``boft_s`` (``out``), in the adapter dtype (fp32
  under PEFT's default ``autocast_adapter_dtype`` on a 16-bit base);
* **the permutation** ``boft_P``: a dense ``in x in`` fp32 buffer (the identity with one butterfly factor).
  It is built on the host; it reaches the GPU when the model is moved after ``get_peft_model`` (the
  Trainer moves it) and stays on the host when the model was loaded onto the GPU and never moved
  (``permutation: host``);
* **every forward** builds the ``in x in`` rotation: the Cayley transform of the blocks (``linalg.solve``
  keeps its LU factors, pivots and solution, fp32), their ``block_diag`` (fp32), its cast to the input's
  dtype, two ``bmm`` with the permutation (cast to the input's dtype: a copy, unless the input is fp32 and the
  permutation on the GPU) and a product with an identity
  (``torch.eye(in)``). It then runs ``base(x @ R) * scale``. Autograd keeps the permutation's copy and the
  identity (for the rotation's gradient), ``R`` wherever the input needs a gradient (not layer 0's q/k/v
  inputs), the input ``x`` (shared by the linears that read it), the base output (for ``boft_s``'s
  gradient) and the small scale vectors;
* **forward transients**: the ``block_diag`` and its cast, the second ``bmm``'s result and ``x @ R`` alive
  until the module returns, the scaled output in the adapter dtype and its cast back;
* **backward transients**: the scaled output's gradient in the adapter dtype (three ``tokens x out``
  tensors), ``x @ R``'s gradients (two ``tokens x in``) beside the rotation's (``in x in``), and the
  rotation's tail (an ``in x in`` zeros and its cast to fp32).

Before PEFT 0.19.2 (``versions: {peft: ...}``) the forward rotated the weight instead: ``R @ W^T`` (``in x
out``, kept for the scale's gradient), scaled by ``boft_s`` in the adapter dtype, cast back (kept where the
input needs a gradient) and applied with ``F.linear``: no base output is kept, two ``in x out`` tensors are.

One butterfly factor: PEFT's default, and what PEFT falls back to when its CUDA extension (``fbd_cuda``)
does not build, which it does not against recent PyTorch.
"""

from __future__ import annotations

from vramcalc.core import activations as act
from vramcalc.core.shape import ModelShape
from vramcalc.errors import SpecError
from vramcalc.llm import adapters
from vramcalc.llm.adapters import MLP_TARGETS
from vramcalc.spec.llm import AdapterSpec
from vramcalc.stacks.peft_more import (
    Method,
    adapted_linears,
    inputs_needing_grad,
    kept_after,
    kept_input_bytes,
)
from vramcalc.units import FP32, allocation_bytes

#: PEFT's default block size (``BOFTConfig.boft_block_size``; ``boft_block_num`` 0).
BOFT_BLOCK_SIZE = 4
#: The first PEFT release whose forward rotates the input, not the weight (peft#3117).
BOFT_INPUT_ROTATION = (0, 19, 2)
#: ``torch.linalg.solve``'s pivots: int32.
PIVOT = 4


def block_size(adapter: AdapterSpec, inp: int, name: str) -> int:
    """The block size of a linear with ``inp`` input features (PEFT's divisibility rules)."""
    if adapter.block_num is not None:
        if inp % adapter.block_num:
            raise SpecError(
                f"workload.adapter.block_num: {adapter.block_num} does not divide the {name} projection's {inp} inputs"
            )
        return inp // adapter.block_num
    size = adapter.block_size or BOFT_BLOCK_SIZE
    if inp % size:
        raise SpecError(f"workload.adapter.block_size: {size} does not divide the {name} projection's {inp} inputs")
    return size


def boft(
    shape: ModelShape,
    adapter: AdapterSpec,
    tk: act.Tokens,
    dt: act.Dtypes,
    a: int,
    rotates_weight: bool = False,
) -> tuple[Method, list[str]]:
    """BOFT's trained blocks and scales, the permutation buffers and what every forward keeps; with
    ``rotates_weight`` the forward of PEFT before 0.19.2. With the notes on the targets and the defaults taken."""
    matrices, notes = adapted_linears(shape, adapter)
    if any(m.count != m.passes or m.stack for m in matrices):
        raise SpecError("workload.adapter.type: boft is modelled on the linears of decoder-only dense models")
    if adapter.block_size is None and adapter.block_num is None:
        notes.append(f"adapter.block_size not given: {BOFT_BLOCK_SIZE} (PEFT's BOFT default)")
    on_gpu = adapter.permutation != "host"
    n, layers = tk.encoder, shape.layers
    x = dt.param if dt.amp else dt.compute  # the input's dtype: the rotation is built in it
    product = max(a, x)  # base output x the adapter-dtype scale
    tensors: list[tuple[int, int, int]] = []
    buffers = per_forward = mlp_forward = 0
    out = 0 if rotates_weight else x  # the base output, for boft_s's gradient (rotating the input only)
    block: dict[str, int] = {}  # what each target keeps in one block
    for m in matrices:
        i, o, b = m.inp, m.out, block_size(adapter, m.inp, m.name)
        square = allocation_bytes(i * i * x)
        tensors += [(m.count, i, b), (m.count, o, 1)]
        buffers += m.count * allocation_bytes(i * i * FP32) if on_gpu else 0
        cayley = 3 * allocation_bytes(i * b * a) + allocation_bytes(i * PIVOT)
        dropout = allocation_bytes(i // b * FP32) if adapter.dropout > 0 else 0
        scales = allocation_bytes(o * x) + allocation_bytes(o * product)
        # the permutation in the input's dtype (the fp32 buffer itself for an fp32 input on the GPU, else a
        # copy) and the identity in every call; R where the input needs a gradient
        permutation = 0 if on_gpu and x == FP32 else square
        kept = m.count * (permutation + square + cayley + dropout + scales)
        if rotates_weight:  # R W^T kept, and the scaled weight where the input needs a gradient
            weight = allocation_bytes(i * o * x)
            kept += m.count * weight + inputs_needing_grad(m, layers) * weight
        else:
            kept += inputs_needing_grad(m, layers) * square
        per_forward += kept
        mlp_forward += kept if m.name in MLP_TARGETS else 0
        block[m.name] = kept // layers + n * o * out
    mlp_targets = [m for m in matrices if m.name in MLP_TARGETS]
    per_token = sum(m.passes * m.out * out for m in matrices) + kept_input_bytes(matrices, x, dt)  # and x
    mlp_tokens = sum(m.passes * m.out * out for m in mlp_targets) + kept_input_bytes(mlp_targets, x, dt)
    mlp = (n * mlp_tokens + mlp_forward) // layers
    # an attention target runs before its block's MLP half is saved, and back through after it is freed
    mlp_half = adapters.frozen_mlp_bytes(shape, n, dt) + mlp
    forward = backward = 0
    for m in matrices:
        i, o = m.inp, m.out
        square = allocation_bytes(i * i * x)
        # not there yet forward, freed again backward: the targets after this one, the MLP half for attention
        earlier = kept_after(block, m.name) + (0 if m.name in MLP_TARGETS else mlp_half)
        cast = n * o * x if product != x else 0
        if rotates_weight:
            # the block_diag's cast, the second bmm and R beside the scaled weight in the adapter dtype;
            # backward: the scaled weight's gradient (three in the adapter dtype) beside the input's
            forward = max(forward, 3 * square + i * o * product - earlier)
            # backward: the scaled weight's gradient in the adapter dtype, that times the rotated weight and
            # the rotated weight's gradient (the scaled weight itself freed), beside the input's gradient
            moments: tuple[int, ...] = (n * i * x + 3 * i * o * product - i * o * x - n * o * x, 2 * square)
        else:
            # at the output: the block_diag's cast, the second bmm, x @ R, the scaled output and its cast (the
            # earlier moments, the fp32 block_diag beside its cast or three bmm results, come before R and the
            # base output exist, which are kept: they are no higher)
            forward = max(forward, 2 * square + n * (i * x + o * product) + cast - earlier)
            # the scaled output's gradient (three in the adapter dtype); x @ R's two gradients and the
            # rotation's once the base output is freed; the rotation's gradient through the identity product
            moments = (3 * n * o * product, 2 * n * i * x + square - n * o * x, 2 * square + n * (i - o) * x)
        backward = max(backward, max(moments) - earlier)
    params = sum(k * rows * cols for k, rows, cols in tensors)
    where = "on the GPU" if on_gpu else "on the host"
    rotated = "the weight rotated (PEFT before 0.19.2)" if rotates_weight else "the input rotated"
    note = (
        f"BOFT on {', '.join(sorted({m.name for m in matrices}))} ({params:,} trained; one butterfly factor; "
        f"each linear's in x in permutation {where}, and an in x in rotation built every forward; {rotated})"
    )
    saved = n * per_token + per_forward
    return Method(
        params, tensors, a, tk, saved, saved // layers, note, mlp, backward, buffers=buffers, forward_transient=forward
    ), notes
