"""A decoder's LoRA / QLoRA step: PEFT's k-bit preparation, what bitsandbytes keeps, the frozen decoder's
saved activations (:mod:`vramcalc.llm.adapters`) and its transients, for
:func:`vramcalc.families.llm.adapter_phases`.

``compile: true`` (the HF Trainer's ``torch_compile=True`` on a ``get_peft_model`` model, each block compiled by
inductor, partitioned as :mod:`vramcalc.stacks.inductor` says): peft 0.21.2's ``Linear.forward``
(peft/tuners/lora/layer.py) runs ``result = self.base_layer(x)``, then per adapter ``x =
self._cast_input_dtype(x, lora_A.weight.dtype)`` (peft/tuners/tuners_utils.py: ``x.to(dtype)`` unless it already has
the adapter's dtype) and ``result = result + lora_B(lora_A(dropout(x))) * scaling``, and casts the sum back to the
base's dtype. Traced with AOTAutograd and inductor's partitioner on the shared tracer's fake tensors
(``benchmarks/tracer_compile.py --peft-cases``, each block's saved tensors in
``benchmarks/data/tracer_compile_peft.json``; torch 2.13.0, transformers 5.25.0, peft 0.21.2):

* a frozen base weight has no gradient, so no matmul's input is materialized in backward for one
  (``is_materialized_backwards`` in ``torch/_functorch/partitioners.py``): a block keeps no norm output and not the
  down projection's input; it keeps its input, the norms' statistics, Q, K, V, the attention output, logsumexp and
  RNG state, the output projection's output (or the residual sum), each MLP up projection's output (the
  activation's backward reads them) and the residual dropouts' masks (:data:`PEFT_LORA_BLOCK`);
* each lora_A keeps its output (lora_B's weight gradient reads it: the same rule as torchtune's ``LoRALinear``,
  :func:`vramcalc.llm.adapters.lora_a_output_per_token`) and its input at the dtype its matmul runs in: without
  dropout one copy per input source, since the adapters of q, k and v cast the same tensor (one node after
  AOTAutograd's common-subexpression elimination); with dropout each module's mask (inductor's ``replace_random``
  makes it a bool) and its dropped input (:func:`vramcalc.llm.adapters.compiled_lora_saved_per_token`);
* under autocast every weight's 16-bit cast, the frozen ones too, is kept (the matmul computing the input's gradient
  reads it, so its recomputation is banned), each block's own until its backward;
* the first block, whose input (the frozen embedding's output) needs no gradient, keeps neither its input nor its
  first norm's statistics, nor the masks and weight casts of the linears reading that norm
  (:func:`vramcalc.core.compiled.unneeded_input_bytes`, shared with torchtune's layer); under autocast it keeps an
  fp32 hidden-wide tensor still (its input, or the residual sum), counted as its input.

Under gradient checkpointing each block keeps its input and the block recomputed in backward keeps the compiled set.
Not modelled (refused by :mod:`vramcalc.stacks.inductor`): DoRA, LoRA-FA and the other PEFT methods, a quantized
base (QLoRA), PEFT's k-bit preparation, litgpt's adapters.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from vramcalc.choices import AdapterType, Attention, Checkpointing, Mlp
from vramcalc.core import activations as act
from vramcalc.core import compiled
from vramcalc.core.shape import ModelShape
from vramcalc.llm import adapters, lora_targets, moe, quantization
from vramcalc.spec.models import Spec
from vramcalc.stacks import bnb
from vramcalc.stacks.inductor import INDUCTOR_BLOCK
from vramcalc.stacks.layouts import quant_layout


def step_bytes(
    spec: Spec,
    shape: ModelShape,
    tk: act.Tokens,
    dt: act.Dtypes,
    kbit: Kbit,
    matrices: list[adapters.LoraMatrix],
    a: int,
) -> tuple[int, int, int, int]:
    """A decoder's LoRA / QLoRA step: saved bytes, the recomputed block, the backward transient of a block
    and the forward's transient inside the last block (:mod:`vramcalc.llm.adapters`, :mod:`vramcalc.stacks.bnb`)."""
    wl, adt = spec.workload, kbit.dtypes
    adapter = wl.adapter
    assert adapter is not None
    if wl.compile:
        return compiled_step_bytes(spec, shape, tk, dt, matrices, a)
    saved, recompute_layer = _adapter_activations(spec, shape, tk, adt, matrices, a, kbit)
    q = wl.quantization
    method = q.method if q is not None else None
    # a block's largest linear (a quantized LM head dequantizes at the start of backward: families/llm.py)
    layout = quant_layout(q.method) if q is not None else None
    dequant = 0
    if q is not None and layout is not None:
        dequant = quantization.dequant_buffer_bytes(shape, q, tk.encoder, dt.compute, layout, True)
    largest = max((m.out * m.inp for m in quantization.linear_groups(shape, q)[0]), default=0) if q else 0
    if adapters.is_litgpt(adapter):
        dequant += bnb.lightning_load_copy(wl, largest)
    back = bnb.backward_dequant(method, dequant, largest, shape, tk.encoder, adt.compute)
    if q is not None and q.compute_dtype is not None:  # the forward casts to the compute dtype (bnb.py)
        assert layout is not None
        dequant = bnb.forward_buffer(wl, shape, tk.encoder, dt, adt.compute, layout)
    mlp_lora = adapters.mlp_lora_bytes(
        matrices, adapter.rank or 0, a, adt, adapter.dropout, tk.encoder, shape.layers, adapters.freezes_a(adapter)
    )
    freed = down_adapter_freed_bytes(spec, shape, tk.encoder, kbit, matrices, a)
    through = adapters.backward_block_bytes(shape, tk, adt, wl.attention, back, mlp_lora, freed)
    no_grad = bnb.forward_dequant(method, dequant, shape, tk.encoder, adt.compute)
    inside = adapters.forward_block_bytes(shape, tk, adt, wl.attention, dequant, kbit.checkpointing, no_grad)
    if adapters.freezes_a(adapter) and not kbit.checkpointing:
        inside += _lora_fa_down_bytes(matrices, adapter.dropout, a, adt, tk.encoder)
    return saved, recompute_layer, through, inside


#: What inductor's partitioner keeps of a block whose base linears are frozen (module docstring): no norm output
#: and no down projection input, which only the base weights' gradients read.
PEFT_LORA_BLOCK = replace(INDUCTOR_BLOCK, norm_output=False, mlp_activation_output=False)


def first_norm_linears(shape: ModelShape) -> int:
    """The weights of the linears that read a block's first norm: Q, K and V."""
    return (shape.q_width + 2 * shape.kv_width) * shape.hidden


def block_linears(shape: ModelShape) -> int:
    """The weights of one block's linears: Q, K, V, the output projection and the MLP's."""
    n_up = 2 if shape.gated else 1
    return first_norm_linears(shape) + shape.q_width * shape.hidden + (n_up + 1) * shape.hidden * shape.ffn


def compiled_block_bytes(
    shape: ModelShape, tk: act.Tokens, dt: act.Dtypes, matrices: list[adapters.LoraMatrix], rank: int, a: int, p: float
) -> tuple[int, int]:
    """What one compiled block keeps for backward, the first block's and every other's (module docstring): the
    frozen block's set (:data:`PEFT_LORA_BLOCK`) with each adapter's lora_A input and output at the dtype its matmul
    runs in (``a``, or the autocast dtype), dropout ``p``; under autocast the 16-bit cast of every frozen weight.
    The first block keeps neither its input, nor its first norm's statistics, nor the dropout masks and weight
    casts of the linears reading that norm (no gradient flows into it)."""
    t, layers = tk.encoder, max(1, shape.layers)
    width = dt.compute if dt.amp else a
    other = compiled.compiled_layer_saved_bytes(shape, tk, dt, Attention.sdpa, PEFT_LORA_BLOCK)
    other += t * adapters.compiled_lora_saved_per_token(matrices, rank, width, p) // layers
    other += block_linears(shape) * dt.compute if dt.amp else 0
    # under autocast the first block keeps an fp32 hidden-wide tensor still (its input, or the residual sum after
    # attention in place of the 16-bit output projection's output): counted as its input, an upper bound
    first = other - compiled.unneeded_input_bytes(shape, tk, dt)
    first += t * shape.hidden * dt.residual if dt.amp else 0
    if p > 0:
        first_norm = [m for m in matrices if lora_targets.INPUT_SOURCE[m.name] == "attn"]
        first -= t * sum(m.passes * m.inp for m in first_norm) * act.MASK // layers
    first -= first_norm_linears(shape) * dt.compute if dt.amp else 0
    return first, other


def compiled_step_bytes(
    spec: Spec, shape: ModelShape, tk: act.Tokens, dt: act.Dtypes, matrices: list[adapters.LoraMatrix], a: int
) -> tuple[int, int, int, int]:
    """:func:`step_bytes` with each block compiled: the compiled blocks' saved bytes (the embedding, the final norm
    and the head eager), the eager step's transients of a block."""
    wl = spec.workload
    adapter = wl.adapter
    assert adapter is not None
    rank, ckpt = adapter.rank or 0, wl.gradient_checkpointing is Checkpointing.full
    first, other = compiled_block_bytes(shape, tk, dt, matrices, rank, a, adapter.dropout)
    mlp_lora = adapters.mlp_lora_bytes(matrices, rank, a, dt, adapter.dropout, tk.encoder, shape.layers)
    through = adapters.backward_block_bytes(shape, tk, dt, wl.attention, 0, mlp_lora)
    # inductor fuses gelu_new's Python chain into one kernel: the block holds what an exact GELU's would
    fused = replace(shape, mlp=Mlp.gelu) if shape.mlp is Mlp.gelu_tanh else shape
    inside = adapters.forward_block_bytes(fused, tk, dt, wl.attention, 0, ckpt)
    outside = act.embedding_saved_bytes(shape, tk, dt) + adapters.frozen_norm_bytes(shape, tk.encoder, dt)
    if ckpt:  # the recomputed block's input is its checkpoint, counted once
        recomputed = other - tk.encoder * shape.hidden * dt.residual
        return outside + act.checkpoint_saved_bytes(shape, tk, dt), recomputed, through, inside
    return outside + first + max(shape.layers - 1, 0) * other, 0, through, inside


def reads_activation(spec: Spec, a: int, dt: act.Dtypes) -> bool:
    """Whether each ``lora_A`` reads the activation itself: ``_cast_input_dtype`` (peft/tuners/tuners_utils.py)
    returns its input unchanged when it already has the adapter dtype ``a`` (no autocast), and with no dropout
    ``lora_dropout`` is ``nn.Identity``; LoRA-FA's frozen ``lora_A`` saves no input at all."""
    adapter = spec.workload.adapter
    assert adapter is not None
    return adapter.dropout == 0 and a == dt.compute and not dt.amp and not adapters.freezes_a(adapter)


def down_adapter_freed_bytes(
    spec: Spec, shape: ModelShape, t: int, kbit: Kbit, matrices: list[adapters.LoraMatrix], a: int
) -> int:
    """What the ``down_proj`` adapter of the block in backward saved (its input and lora_A's output) and no
    longer holds at a gated MLP's backward peak, for :func:`vramcalc.llm.adapters.backward_block_bytes`.

    PEFT's LoRA layer (peft/tuners/lora/layer.py ``Linear.forward``, peft/tuners/lora/bnb.py
    ``Linear4bit.forward``) runs ``result = self.base_layer(x)`` first and adds ``lora_B(lora_A(dropout(x)))
    * scaling`` after, so the adapter's autograd nodes are younger than the base layer's. PyTorch's engine
    runs the ready node with the highest sequence number first (torch/csrc/autograd/engine.h
    ``CompareNodeTaskTime``) and releases a node's saved tensors once it has run (torch/csrc/autograd/
    engine.cpp ``evaluate_function``, ``fn.release_variables()`` without ``retain_graph``): the down
    projection's ``lora_B`` and ``lora_A`` backwards run before its base layer's and drop lora_A's output and
    lora_A's input. Where ``lora_A`` reads the activation itself (:func:`reads_activation`), that input is the
    MLP product ``act(gate) * up``, which nothing else keeps (the product's backward saves its two factors, a
    frozen linear saves no input, nor does bitsandbytes' ``MatMul4Bit`` from 0.43.2), so it is freed there.
    From then on a gated MLP holds its three saved ffn-wide tensors (gate, activation, up) and three ffn-wide
    gradients: the product's gradient from the adapter, the base layer's and their sum, then the product's
    gradient and the two factors' gradients it makes; those are the three transients of
    :func:`vramcalc.llm.adapters.backward_transients`, which are counted beside the whole block saved, so the
    adapter's input and lora_A output are taken off. Traced (benchmarks/tracer_flash.py, QLoRA all-linear
    after ``prepare_model_for_kbit_training``: fp32 activations, fp32 adapters): the recomputed block peaks in
    ``down_proj``'s backward after its adapter's, with no product alive: at that sum (six fp32 ffn-wide
    tensors) under flash, at the base layer's matmul beside its dequantized weight under SDPA at 512 tokens
    (where the math kernel's scores are still smaller).

    0 where not modelled this way, keeping the adapter's saved tensors in the count (an upper bound): an MLP
    without a gate (its product's backward makes one gradient fewer, and the down projection's sum, three
    gradients beside the one saved tensor, is what the count with the adapter's input gives); a cast copy
    (16-bit activations, fp32 adapters) or dropout in front of ``lora_A`` (its own input and that input's
    gradient meet in its backward); a base that keeps the product itself (:func:`vramcalc.stacks.bnb.holds_own_input`)
    or is quantized by another library; DoRA (its own ``forward`` through the weight norm); litgpt; MoE
    layers."""
    wl, dt = spec.workload, kbit.dtypes
    adapter, q = wl.adapter, wl.quantization
    assert adapter is not None
    gated_dense = shape.gated and shape.moe is None
    plain = adapter.type is AdapterType.lora and not adapters.is_litgpt(adapter)
    if not (gated_dense and plain and reads_activation(spec, a, dt)):
        return 0
    if q is not None and (
        kbit.release is None or bnb.holds_own_input(q.method, kbit.release, kbit.norm_out, kbit.bnb_compute)
    ):
        return 0
    down = [m for m in matrices if m.name == "down"]
    return adapters.mlp_lora_bytes(down, adapter.rank or 0, a, dt, adapter.dropout, t, shape.layers)


def _lora_fa_down_bytes(matrices: list[adapters.LoraMatrix], dropout: float, a: int, dt: act.Dtypes, t: int) -> int:
    """LoRA-FA: what the last ``down_proj``'s adapter holds while it runs beyond the forward's other
    transients: the copy of its input lora_A reads (the dropout output or the cast to the adapter dtype),
    which a frozen lora_A does not save, lora_B's output and its scaled copy (traced: the forward peak of
    ``llm-lorafa-all-*`` in benchmarks/data/tracer_llm.json; with a trained lora_A that moment stays below
    the loss's, as the traced LoRA cases show)."""
    down = next((m for m in matrices if m.name == "down"), None)
    if down is None:
        return 0
    held = 2 * t * down.out * a
    if dropout > 0:
        return held + t * down.inp * a
    return held + (t * down.inp * (dt.compute if dt.amp else a) if a != dt.compute or dt.amp else 0)


@dataclass(frozen=True)
class Kbit:
    """k-bit training settings in force: PEFT's preparation and what bitsandbytes keeps per block."""

    prepare: bool = False
    checkpointing: bool = False
    upcast_bytes: int = 0
    dtypes: act.Dtypes = act.Dtypes(param=2, compute=2, residual=2, amp=False)
    release: bnb.Release | None = None
    norm_out: int = 2
    bnb_compute: int = 2


def resolve_kbit(spec: Spec, dt: act.Dtypes, qinfo: dict[str, Any] | None) -> tuple[Kbit, list[str]]:
    """PEFT's prepare_model_for_kbit_training (on by default for PEFT on a bitsandbytes base: its
    documented first step for k-bit training, as in the QLoRA reference scripts; litgpt does not call
    it) and the bitsandbytes release (vramcalc/stacks/bnb.py); with the notes on the defaults taken and
    what the preparation changes."""
    wl = spec.workload
    adapter, q = wl.adapter, wl.quantization
    assert adapter is not None
    method = q.method if q is not None else None
    on_bnb = bnb.uses_bnb(method)
    release, notes = bnb.resolve(wl.versions) if on_bnb else (None, [])
    prepare = adapter.prepare_kbit
    if prepare is None:
        prepare = on_bnb and not adapters.is_litgpt(adapter)
        if prepare:
            notes.append("adapter.prepare_kbit not given: true (PEFT prepare_model_for_kbit_training on a k-bit base)")
    full = wl.gradient_checkpointing is Checkpointing.full
    if not prepare:
        kbit = Kbit(False, full, 0, dt, release, max(dt.param, dt.residual), bnb.compute_bytes(wl, release, dt.compute))
        return kbit, notes
    kept = int(qinfo["kept_params"]) if qinfo is not None else 0
    upcast = kept * (act.FP32 - dt.param) if dt.param < act.FP32 else 0
    ckpt = full
    if "gradient_checkpointing" not in wl.model_fields_set:
        ckpt = True
        notes.append("gradient_checkpointing not given: full (prepare_model_for_kbit_training enables it, reentrant)")
    notes.append(
        f"prepare_kbit: those {kept:,} parameters are upcast to fp32 (prepare_model_for_kbit_training), so the "
        + (
            "residual stream runs in fp32"
            if dt.amp
            else "activations run in fp32 (no autocast; amp-bf16 keeps them 16-bit)"
        )
    )
    adt = act.Dtypes(param=act.FP32, compute=dt.compute if dt.amp else act.FP32, residual=act.FP32, amp=dt.amp)
    kbit = Kbit(True, ckpt, upcast, adt, release, act.FP32, bnb.compute_bytes(wl, release, adt.compute, dt.compute))
    return kbit, notes


def _adapter_activations(
    spec: Spec,
    shape: ModelShape,
    tk: act.Tokens,
    dt: act.Dtypes,
    matrices: list[adapters.LoraMatrix],
    a: int,
    kbit: Kbit,
) -> tuple[int, int]:
    """Saved bytes kept through the forward pass, and the block recomputed under full checkpointing
    (there, the inputs bitsandbytes keeps are those of the recomputed block only)."""
    wl = spec.workload
    adapter = wl.adapter
    assert adapter is not None
    frozen_a = adapters.freezes_a(adapter)
    lora = tk.encoder * adapters.lora_saved_per_token(matrices, adapter.rank or 0, a, dt, adapter.dropout, frozen_a)
    bnb_layer = 0
    q = wl.quantization
    if kbit.release is not None and q is not None:
        shares = reads_activation(spec, a, dt)
        lora_shares = bnb.lora_reads({m.name for m in matrices}, shares)
        bnb_dt = replace(dt, compute=kbit.bnb_compute)
        bnb_layer = bnb.kept_layer_bytes(
            shape, q.method, kbit.release, tk.encoder, bnb_dt, kbit.norm_out, wl.attention, lora_shares
        )
    if not kbit.checkpointing:
        return adapters.frozen_saved_bytes(shape, tk, dt, wl.attention) + lora + shape.layers * bnb_layer, 0
    kept = act.checkpoint_saved_bytes(shape, tk, dt) + act.embedding_saved_bytes(shape, tk, dt)
    kept += adapters.frozen_norm_bytes(shape, tk.encoder, dt)  # the final norm, outside the blocks
    one = adapters.per_layer_shape(shape)
    layer = adapters.frozen_layer_bytes(one, tk, dt, wl.attention) + lora // max(1, shape.layers) + bnb_layer
    if shape.moe is not None:
        layer += moe.saved_delta_per_layer(shape, tk.encoder, dt)
    return kept, layer
