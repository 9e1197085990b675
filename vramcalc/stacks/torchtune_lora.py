"""torchtune's LoRA and QLoRA fine-tuning (``adapter.framework: torchtune``; pytorch/torchtune v0.6.1
``recipes/lora_finetune_single_device.py``, torchao 0.14.1 for QLoRA). Pure.

* ``LoRALinear`` (torchtune/modules/peft/lora.py, ``forward``): ``out = F.linear(x, weight)`` (or
  ``linear_nf4``) first, then ``lora_b(lora_a(dropout(x))) * (alpha / rank)`` added. ``dropout`` is
  ``nn.Identity`` at 0.0 (the recipes' ``lora_dropout: 0.0``), so ``lora_a`` saves the activation ``x``
  itself (shared with the other adapters reading it), ``lora_b`` saves lora_a's output (rank wide); the scaling
  by a Python float saves nothing. The adapters are built with the model (``training.set_default_dtype``) at
  the model's dtype, bf16 in the recipes (``validate_expected_param_dtype``), as are their gradients and
  AdamW states. ``lora_attn_modules`` (``q_proj``, ``k_proj``, ``v_proj``, ``output_proj``) and
  ``apply_lora_to_mlp`` (``w1``, ``w2``, ``w3``) are ``adapter.targets``; ``apply_lora_to_output`` is refused
  for tied heads by torchtune's builders and not modelled. Everything else a frozen decoder saves follows
  :mod:`vramcalc.llm.adapters` (traced: benchmarks/tracer_torchtune.py).
* The model keeps one RoPE cache (``RotaryPositionalEmbeddings``/``Llama3ScaledRoPE.build_rope_cache``:
  ``torch.stack([cos, sin], dim=-1)`` over ``max_seq_len`` positions, float32, shared by the layers) and its
  ``theta`` (``head_dim / 2`` floats): :func:`rope_cache_bytes`.
* QLoRA (``quantize_base=True``): every block linear is an ``NF4Tensor`` (torchao/dtypes/nf4tensor.py,
  ``to_nf4(tensor, block_size=64, scaler_block_size=256)``, ``NF4Tensor.from_tensor`` and
  ``double_quantize_scalers``): ``quantized_data``, two 4-bit codes per uint8; ``quantized_scalers``, one int8
  per 64 weights; ``quantization_factor``, one per 256 scalers at the weight's dtype (``256 / (2 *
  scaler_absmax)``); ``scaler_mean`` (one value) and the 16 ``nf4`` values at the weight's dtype
  (:func:`nf4_tensors`). ``to_nf4`` asserts that the weight's size is a multiple of 64 and its scalers' of
  256. The embedding, the norms and the output layer stay at the model's dtype (``TiedLinear`` or
  ``nn.Linear``; torchtune/models/llama3_2/_component_builders.py ``lora_llama3_2``). ``linear_nf4``
  (``LinearNF4``) saves only the NF4 weight and runs ``F.linear(input, weight.to(input.dtype))`` forward and
  ``grad_output @ weight.to(grad_output.dtype)`` backward; ``weight.to(dtype)`` is ``get_original_weight``,
  which holds its two int64 code tensors, the two decoded halves, the two scaled halves and their ``stack``
  at once (:func:`nf4_dequant_bytes`).
* ``activation_offloading`` (torchtune/training/_activation_offloading.py ``OffloadActivations``, 1024-byte
  minimum, ``max_fwd_stash_size`` 5; parameters are never offloaded): the recipe turns it on only with
  activation checkpointing (``lora_finetune_single_device.py``: "enable_activation_offloading should only be
  True when enable_activation_checkpointing is True"), so what it moves is each checkpointed block's input
  (PyTorch's non-reentrant checkpoint saves it through ``_NoopSaveInputs``, outside the block's own hooks)
  and the final norm's saved tensors; the output layer runs under a ``NoOpManager`` and the loss outside the
  context. The forward's stash of the last 5 tensors saved stays on the device until backward
  (:func:`offload_stash_bytes`): the final norm's and the last block's input.
* ``compile: True`` (torchtune/training/_compile.py ``compile_model``: each ``TransformerSelfAttentionLayer``
  compiled, before ``set_activation_checkpointing`` wraps it; ``compile_loss``: ``CEWithChunkedOutputLoss``'s
  ``compute_cross_entropy``), partitioned by inductor as :mod:`vramcalc.stacks.inductor` says, with what a
  ``LoRALinear`` changes (traced: ``benchmarks/tracer_torchtune_compile.py``, each compiled layer's saved tensors
  in ``benchmarks/data/tracer_torchtune_compile.json``): a frozen base weight has no gradient, so no base matmul
  keeps its input for a weight gradient; each ``lora_a`` keeps its output (``lora_b``'s weight gradient reads
  it) and the activation it reads is kept where an adapter reads it. A layer keeps its input and first norm's
  statistics, the first norm's output (the adapters of q_proj and v_proj read it), Q after the rotary embedding
  and K and V expanded to every query head (``MultiHeadAttention.forward`` expands grouped K/V before SDPA),
  the attention output, logsumexp and RNG state, one residual-stream tensor and one h-wide matmul output, the
  second norm's statistics; with adapters on the MLP the second norm's output, one MLP matmul output and the
  product (w2's input), without them one MLP matmul output (:func:`compiled_block_bytes`): the set a layer keeps
  whose every weight trains (:data:`TORCHTUNE_LAYER`, full fine-tuning under ``runtime: torchtune``: the norm
  outputs and the product are what the weight gradients read, the second h-wide matmul output is kept as in the
  LoRA layer) with each ``lora_a``'s output, less what a frozen MLP does not need. The first layer's
  input needs no gradient (the embedding is frozen): it keeps neither its input nor its first norm's
  statistics. Under QLoRA, ``linear_nf4``'s ``weight.to(dtype)`` is traced into the graph as plain ops on the
  ``NF4Tensor``'s inner tensors (AOTAutograd flattens the subclass, ``NF4Tensor.__tensor_flatten__``): its
  pointwise decode is fused, and the partitioner keeps the dequantized 16-bit weight of each linear whose
  input gradient the backward computes: the attention's four and two of the MLP's three (the third is
  dequantized again in backward); the first layer only ``output_proj``'s and the MLP's. The non-chunked
  ``CrossEntropyLoss``, which ``compile_loss`` compiles whole on float32 logits, is not modelled.
* The LoRA recipe has no ``optimizer_in_bwd`` (torchtune's README: "LoRA and QLoRA ... do not use
  ``optimizer_in_bwd``"), so ``optimizer_in_backward`` is refused.
"""

from __future__ import annotations

from dataclasses import replace

from vramcalc.choices import Architecture, Attention, Checkpointing, CrossEntropy, Position, QuantMethod
from vramcalc.core import activations as act
from vramcalc.core import compiled
from vramcalc.core.shape import ModelShape
from vramcalc.errors import SpecError
from vramcalc.llm import adapters, quantization
from vramcalc.llm.quantization import Matrix, QuantLayout
from vramcalc.spec.llm import QuantizationSpec
from vramcalc.spec.models import Spec, Workload
from vramcalc.stacks.inductor import INDUCTOR_BLOCK
from vramcalc.units import FP32, allocation_bytes, ceil_div

#: ``to_nf4``'s defaults, which torchtune's ``LoRALinear`` and ``FrozenNF4Linear`` use.
NF4_BLOCK = 64
NF4_SCALER_BLOCK = 256
#: The NF4 code book each ``NF4Tensor`` keeps (``nf4 = torch.tensor([...16 values...])``, the weight's dtype).
NF4_VALUES = 16
#: ``get_original_weight`` widens each 4-bit code to int64 (``.to(torch.long)``) before indexing the code book.
INT64 = 8
#: ``OffloadActivations(max_fwd_stash_size=5)``: the last tensors offloaded stay until their copy is done.
FWD_STASH = 5
#: What inductor's partitioner keeps of a compiled ``TransformerSelfAttentionLayer`` whose weights all train
#: (module docstring): the block input, each norm's output and statistics, Q and K/V, the attention output, its
#: output projection's output, one MLP up-projection output and the product w2 reads, one more hidden-wide
#: matmul output.
TORCHTUNE_LAYER = replace(INDUCTOR_BLOCK, mlp_up_outputs=1, hidden_matmul_outputs=1)


def uses_torchtune(wl: Workload) -> bool:
    """``adapter.framework: torchtune``: torchtune's LoRA recipe and model code."""
    return wl.adapter is not None and wl.adapter.framework == "torchtune"


def nf4_tensors(out: int, inp: int, param_bytes: int) -> tuple[int, int, int, int, int]:
    """Bytes of one ``NF4Tensor``'s storages for an ``out x inp`` weight of ``param_bytes`` a value:
    ``quantized_data`` (uint8, two codes a byte), ``quantized_scalers`` (int8, one per 64 weights),
    ``quantization_factor`` (one per 256 scalers, the weight's dtype), ``scaler_mean`` and ``nf4`` (16 values)."""
    n = out * inp
    scalers = ceil_div(n, NF4_BLOCK)
    return (
        ceil_div(n, 2),
        scalers,
        ceil_div(scalers, NF4_SCALER_BLOCK) * param_bytes,
        param_bytes,
        NF4_VALUES * param_bytes,
    )


def nf4_bytes(out: int, inp: int, param_bytes: int) -> int:
    """Bytes one ``NF4Tensor`` allocates: each of its five storages a caching-allocator block."""
    return sum(allocation_bytes(b) for b in nf4_tensors(out, inp, param_bytes))


def nf4_dequant_bytes(elements: int, dtype_bytes: int) -> int:
    """The most ``get_original_weight`` holds for a weight of ``elements`` values (torchao 0.14.1): the high and
    low codes as int64 (``elements / 2`` each), their decoded values ``nf4[codes]``, the two scaled halves and
    the ``stack`` of them (the weight), all at ``dtype_bytes``, with the dequantized scalers (one per 64)."""
    half = ceil_div(elements, 2)
    codes = 2 * half * INT64
    return (
        codes
        + 2 * half * dtype_bytes
        + 2 * half * dtype_bytes
        + elements * dtype_bytes
        + (ceil_div(elements, NF4_BLOCK) * dtype_bytes)
    )


class Nf4Layout(QuantLayout):
    """torchao's ``NF4Tensor`` as torchtune's QLoRA stores and runs it (module docstring)."""

    def matrix_bytes(self, q: QuantizationSpec, out: int, inp: int) -> int:
        raise NotImplementedError("an NF4Tensor keeps its factors at the weight's dtype: see stored_bytes")

    def describe(self, q: QuantizationSpec) -> str:
        return (
            f"nf4: torchao NF4Tensor (torchtune QLoRA), 4-bit codes, an int8 scaler per {NF4_BLOCK} weights, "
            f"a 16-bit factor per {NF4_SCALER_BLOCK} scalers"
        )

    def stored_bytes(self, q: QuantizationSpec, out: int, inp: int, param_bytes: int) -> int:
        return nf4_bytes(out, inp, param_bytes)

    def largest_dequant_bytes(self, largest: Matrix, n_tokens: int, compute_bytes: int) -> int:
        return nf4_dequant_bytes(largest.out * largest.inp, compute_bytes)


NF4 = Nf4Layout()


def rope_cache_bytes(shape: ModelShape, positions: int) -> int:
    """torchtune's RoPE buffers: the float32 cos/sin cache over the model's ``positions`` (its builder's
    ``max_seq_len``) and ``theta``; none without rotary positions."""
    if shape.position is not Position.rotary:
        return 0
    return allocation_bytes(positions * shape.head_dim * FP32) + allocation_bytes(shape.head_dim // 2 * FP32)


def rope_positions(spec: Spec, seq_len: int) -> tuple[int, list[str]]:
    """The positions torchtune's builder gives the model: ``max_position_embeddings`` (the builders use the
    checkpoint's, 131072 for Llama 3.1 to 3.3), else the sequence, with a note."""
    given = spec.model.max_position_embeddings
    if given is not None:
        return given, []
    return seq_len, [
        "model.max_position_embeddings not given: torchtune's RoPE cache counted for seq_len positions "
        "(its builders use the model's max_seq_len)"
    ]


def block_dequant_bytes(shape: ModelShape, q: QuantizationSpec | None, n_tokens: int, compute: int) -> int:
    """``get_original_weight`` of the largest block linear (QLoRA), or 0."""
    if q is None:
        return 0
    return quantization.dequant_buffer_bytes(shape, q, n_tokens, compute, NF4, blocks_only=True)


def offload_stash_bytes(shape: ModelShape, tk: act.Tokens, dt: act.Dtypes) -> int:
    """What stays on the device under ``activation_offloading`` at the end of the forward: the stash of the
    last :data:`FWD_STASH` tensors saved (each counted, offloaded or not). Those are the final norm's three (its
    float32 input, its weight, a parameter that stays anyway, and its statistics) and the last checkpointed
    block's two: PyTorch's checkpoint saves a 0-element tensor beside the block's input
    (``_NoopSaveInputs.apply(dummy, kwargs, *args)``, torch/utils/checkpoint.py). So: the final norm's saved
    tensors and the last block's input."""
    block_input = tk.encoder * shape.hidden * dt.residual
    return adapters.frozen_norm_bytes(shape, tk.encoder, dt) + min(shape.layers, 1) * block_input


def saved_outside_blocks(shape: ModelShape, tk: act.Tokens, dt: act.Dtypes) -> int:
    """What a checkpointed frozen decoder saves outside its blocks: each block's input, the embedding's and
    the final norm's."""
    kept = act.checkpoint_saved_bytes(shape, tk, dt) + act.embedding_saved_bytes(shape, tk, dt)
    return kept + adapters.frozen_norm_bytes(shape, tk.encoder, dt)


def loop_loss(loss: act.LossBytes, wl: Workload) -> act.LossBytes:
    """The loss as torchtune's loop holds it. With ``compile`` the recipe deletes the logits before backward
    (``del logits``), so each compiled loss chunk holds its logits alone; inductor writes the chunk's gradient
    into that dead buffer (``torch/_inductor/config.py`` ``inplace_buffers``, the scheduler's buffer reuse): no
    backward temporary beyond what the loss saved."""
    if not wl.compile:
        return loss
    return replace(loss, backward_temporaries=0)


def trained_layer_bytes(shape: ModelShape, tk: act.Tokens, dt: act.Dtypes) -> int:
    """What one compiled ``TransformerSelfAttentionLayer`` keeps when its input and every activation a weight
    gradient reads are needed (:data:`TORCHTUNE_LAYER`, K and V expanded to every query head)."""
    expanded = replace(shape, code=replace(shape.code, kv_expanded=shape.kv_heads < shape.heads))
    return compiled.compiled_layer_saved_bytes(expanded, tk, dt, Attention.sdpa, TORCHTUNE_LAYER)


def compiled_block_bytes(
    shape: ModelShape, tk: act.Tokens, dt: act.Dtypes, matrices: list[adapters.LoraMatrix], rank: int, nf4: bool
) -> tuple[int, int]:
    """What one compiled layer keeps for backward, the first layer's and every other's (module docstring): the
    trained layer's set (:func:`trained_layer_bytes`) with each lora_a's output, less the second norm's output
    and the product of a frozen MLP, and, in the first layer, less its input and first norm's statistics."""
    t, h, c, q = tk.encoder, shape.hidden, dt.compute, shape.q_width
    mlp_adapted = any(m.name in adapters.MLP_TARGETS for m in matrices)
    other = trained_layer_bytes(shape, tk, dt)
    other += t * adapters.lora_a_output_per_token(matrices, rank, dt.param)
    other -= 0 if mlp_adapted else t * (h + shape.ffn) * c
    first = other - compiled.unneeded_input_bytes(shape, tk, dt)
    if nf4:
        attn = (2 * q * h + 2 * shape.kv_width * h) * c  # q_proj, k_proj, v_proj, output_proj
        mlp = 2 * shape.ffn * h * c
        first += q * h * c + mlp
        other += attn + mlp
    return first, other


def compiled_step_bytes(
    spec: Spec, shape: ModelShape, tk: act.Tokens, dt: act.Dtypes, matrices: list[adapters.LoraMatrix], offload: bool
) -> tuple[int, int, int, int]:
    """:func:`step_bytes` with each layer compiled: the compiled layers' saved bytes, a weight's fused
    dequantization (its 16-bit copy alone) in place of ``get_original_weight``'s buffers."""
    wl = spec.workload
    rank = (wl.adapter.rank if wl.adapter is not None else 0) or 0
    ckpt = wl.gradient_checkpointing is Checkpointing.full
    first, other = compiled_block_bytes(shape, tk, dt, matrices, rank, wl.quantization is not None)
    dequant = shape.ffn * shape.hidden * dt.compute if wl.quantization is not None else 0
    mlp_lora = adapters.mlp_lora_bytes(matrices, rank, dt.param, dt, 0.0, tk.encoder, shape.layers)
    through = adapters.backward_block_bytes(shape, tk, dt, wl.attention, dequant, mlp_lora)
    inside = adapters.forward_block_bytes(shape, tk, dt, wl.attention, dequant, ckpt, dequant)
    if not ckpt:
        outside = act.embedding_saved_bytes(shape, tk, dt) + adapters.frozen_norm_bytes(shape, tk.encoder, dt)
        return outside + first + max(shape.layers - 1, 0) * other, 0, through, inside
    kept = saved_outside_blocks(shape, tk, dt)
    if offload:
        kept = min(kept, offload_stash_bytes(shape, tk, dt))
    return kept, other, through, inside


def step_bytes(
    spec: Spec, shape: ModelShape, tk: act.Tokens, dt: act.Dtypes, matrices: list[adapters.LoraMatrix], offload: bool
) -> tuple[int, int, int, int]:
    """A decoder's torchtune LoRA / QLoRA step: saved bytes through the forward (on the device), the block
    recomputed under checkpointing, the backward transient of a block and the forward's transient inside the
    last block (:mod:`vramcalc.llm.adapters`), with the NF4 dequantization of the largest block linear."""
    wl = spec.workload
    if wl.compile:
        return compiled_step_bytes(spec, shape, tk, dt, matrices, offload)
    adapter = wl.adapter
    assert adapter is not None
    rank, a = adapter.rank or 0, dt.param
    ckpt = wl.gradient_checkpointing is Checkpointing.full
    dequant = block_dequant_bytes(shape, wl.quantization, tk.encoder, dt.compute)
    lora = tk.encoder * adapters.lora_saved_per_token(matrices, rank, a, dt, adapter.dropout)
    mlp_lora = adapters.mlp_lora_bytes(matrices, rank, a, dt, adapter.dropout, tk.encoder, shape.layers)
    freed = down_adapter_freed_bytes(shape, tk.encoder, dt, matrices, rank, adapter.dropout)
    through = adapters.backward_block_bytes(shape, tk, dt, wl.attention, dequant, mlp_lora, freed)
    inside = adapters.forward_block_bytes(shape, tk, dt, wl.attention, dequant, ckpt, dequant)
    if not ckpt:
        return adapters.frozen_saved_bytes(shape, tk, dt, wl.attention) + lora, 0, through, inside
    kept = saved_outside_blocks(shape, tk, dt)
    if offload:
        kept = min(kept, offload_stash_bytes(shape, tk, dt))
    one = adapters.per_layer_shape(shape)
    layer = adapters.frozen_layer_bytes(one, tk, dt, wl.attention) + lora // max(1, shape.layers)
    return kept, layer, through, inside


def down_adapter_freed_bytes(
    shape: ModelShape, t: int, dt: act.Dtypes, matrices: list[adapters.LoraMatrix], rank: int, dropout: float
) -> int:
    """What ``w2``'s adapter saved and frees before a gated MLP's backward peak
    (:func:`vramcalc.stacks.peft_lora.down_adapter_freed_bytes`: the adapter's nodes are younger than the base
    layer's, as ``LoRALinear.forward`` runs the base first; ``linear_nf4`` keeps no input either): with no
    dropout, the MLP product lora_a reads and lora_a's output."""
    if not (shape.gated and shape.moe is None) or dropout > 0:
        return 0
    down = [m for m in matrices if m.name == "down"]
    return adapters.mlp_lora_bytes(down, rank, dt.param, dt, dropout, t, shape.layers)


def notes(spec: Spec) -> list[str]:
    """What torchtune's recipe does, in words, for the estimate's notes."""
    wl = spec.workload
    lines = [
        "adapter.framework torchtune: LoRALinear adapters at the model's dtype (their gradients and optimizer "
        "states too); lora_a reads the activation itself (no dropout), lora_b keeps lora_a's output; the model "
        "keeps a float32 RoPE cache of its max_seq_len positions"
    ]
    if wl.quantization is not None:
        lines.append(
            "quantization nf4 with framework torchtune: torchao NF4Tensor block linears (FrozenNF4Linear, "
            "linear_nf4); each linear dequantizes its weight through int64 codes in forward and again in backward; "
            "embedding, norms and output layer stay 16-bit"
        )
    if wl.activation_offloading:
        lines.append(
            "activation_offloading with framework torchtune: the checkpointed blocks' inputs and the final norm's "
            "tensors go to pinned host memory; the final norm's and the last block's input stay on the GPU"
        )
    return lines


def check_keys(spec: Spec) -> None:
    """torchtune's LoRA recipe, refused with one line naming the key where vramcalc does not model it or
    torchtune does not run it."""
    wl = spec.workload
    adapter = wl.adapter
    if adapter is None or adapter.framework != "torchtune":
        return
    if adapter.type.value != "lora":
        raise SpecError(f"workload.adapter.type: {adapter.type.value} is not modelled with framework torchtune (lora)")
    if adapter.targets is None:
        raise SpecError(
            "workload.adapter.targets: required with framework torchtune (its lora_attn_modules, and w1, w2, w3 "
            "for apply_lora_to_mlp)"
        )
    if adapter.autocast_adapter_dtype or adapter.prepare_kbit:
        key = "autocast_adapter_dtype" if adapter.autocast_adapter_dtype else "prepare_kbit"
        raise SpecError(f"workload.adapter.{key}: a PEFT setting; torchtune builds adapters at the model's dtype")
    if wl.optimizer_in_backward:
        raise SpecError(
            "workload.optimizer_in_backward: torchtune's LoRA recipe (lora_finetune_single_device) has no "
            "optimizer_in_bwd"
        )
    if wl.keep_outputs:
        raise SpecError("workload.keep_outputs: torchtune's LoRA recipe deletes the logits before backward")
    if wl.optimizer_offload != "none":
        raise SpecError("workload.optimizer_offload: not modelled with adapter.framework torchtune")
    if wl.activation_offloading and wl.gradient_checkpointing is not Checkpointing.full:
        raise SpecError(
            "workload.activation_offloading: torchtune's LoRA recipe needs gradient_checkpointing: full with it "
            "(it raises otherwise)"
        )
    if wl.cross_entropy not in (CrossEntropy.standard, CrossEntropy.chunked):
        raise SpecError(f"workload.cross_entropy: {wl.cross_entropy.value} is not a torchtune loss (standard, chunked)")
    if spec.parallel is not None:
        raise SpecError("workload.adapter.framework: torchtune across several GPUs (parallel:) is not modelled")
    if spec.model.architecture not in (None, Architecture.decoder) or spec.model.experts is not None:
        raise SpecError("workload.adapter.framework: torchtune is modelled for dense decoder models")
    if wl.precision.value != "bf16":
        raise SpecError(f"workload.precision: {wl.precision.value} with framework torchtune is not modelled (bf16)")
    _check_quantization(wl.quantization)
    _check_compile(spec)


def _check_compile(spec: Spec) -> None:
    """``compile`` with torchtune's LoRA recipe: its chunked loss, and an MLP adapted whole or not at all."""
    wl = spec.workload
    if not wl.compile or wl.adapter is None:
        return
    if wl.cross_entropy is not CrossEntropy.chunked:
        raise SpecError(
            "workload.compile with framework torchtune is modelled with cross_entropy: chunked (compile_loss "
            "compiles a plain CrossEntropyLoss whole, not modelled)"
        )
    targets = set(wl.adapter.targets or ())
    if targets & {"w1", "w2", "w3"} not in (set(), {"w1", "w2", "w3"}):
        raise SpecError("workload.compile with framework torchtune is modelled with all of w1, w2, w3 adapted or none")
    if "k_proj" in targets:
        raise SpecError("workload.compile with framework torchtune is not modelled with k_proj adapted")


def _check_quantization(q: QuantizationSpec | None) -> None:
    """torchtune's QLoRA: ``nf4`` (torchao ``NF4Tensor``) at ``to_nf4``'s block sizes, block linears only."""
    if q is None:
        return
    if q.method is not QuantMethod.nf4:
        raise SpecError(f"workload.quantization: {q.method.value} with framework torchtune; its QLoRA is nf4")
    for key in ("double_quant", "block_size", "compute_dtype", "quant_storage", "skip_modules"):
        if getattr(q, key) is not None:
            raise SpecError(f"workload.quantization.{key}: a bitsandbytes setting; torchtune's NF4Tensor has none")
    if q.lm_head:
        raise SpecError("workload.quantization.lm_head: torchtune's QLoRA keeps the output layer 16-bit")


def check_nf4_sizes(shape: ModelShape, q: QuantizationSpec | None) -> None:
    """``to_nf4`` asserts each weight's size is a multiple of 64 and its scalers' count of 256."""
    if q is None:
        return
    for m in quantization.linear_groups(shape, q)[0]:
        if (m.out * m.inp) % (NF4_BLOCK * NF4_SCALER_BLOCK):
            raise SpecError(
                f"workload.quantization: torchao's to_nf4 refuses a {m.out} x {m.inp} weight (its size must be a "
                f"multiple of {NF4_BLOCK * NF4_SCALER_BLOCK})"
            )
