"""torchtune's generation (``runtime: torchtune``; pytorch/torchtune ``recipes/generate.py``,
``torchtune/generation/_generation.py`` ``generate``, ``torchtune/modules``): its own decoder with KV caches set
up for ``max_seq_len`` tokens before the prefill. Pure.

The recipe (``InferenceRecipe.generate``) calls ``model.setup_caches(batch_size=1, dtype=...,
decoder_max_seq_len=prompt.numel() + cfg.max_new_tokens)``: ``max_seq_len`` is the prompt and the new tokens,
not rounded; ``workload.max_cache_len`` gives a longer one (``TransformerDecoder.setup_caches`` without
``decoder_max_seq_len`` takes the model builder's ``max_seq_len``, 8,192 for ``llama3_8b``). Then:

* every self-attention layer's ``KVCache`` (``modules/kv_cache.py``): ``k_cache`` and ``v_cache`` of
  ``(batch, num_kv_heads, max_seq_len, head_dim)`` at the recipe's dtype and ``cache_pos =
  torch.arange(0, max_seq_len)``, int64;
* the rotary table the model built with it (``modules/position_embeddings.py``
  ``RotaryPositionalEmbeddings.build_rope_cache``): ``(max_seq_len, head_dim // 2, 2)`` in fp32 (``.float()``),
  one table all layers share, for the builder's ``max_seq_len`` (here ``max_position_embeddings``, the cache's
  length where the model does not give it);
* ``generate`` (``generation/_generation.py``), once per call: ``masks = torch.tril(torch.ones(prompt + new
  tokens, max_seq_len, dtype=torch.bool)).unsqueeze(0)``, one byte per pair and one mask for the batch (prompts
  of one length: no padding), and ``input_pos = torch.arange(prompt + new tokens)`` (int64); the prefill passes
  views of them, each decode step a ``.contiguous()`` copy of its mask row (``max_seq_len`` bytes);
* each forward indexes the rotary table by position (``self.cache[input_pos]``: a copy, fp32) and, in
  ``MultiHeadAttention.forward`` (``modules/attention.py``), expands K and V over the whole cache to every query
  head (``k.unsqueeze(2).expand(...).flatten(1, 2)``: a copy) for ``F.scaled_dot_product_attention`` with the
  mask;
* ``TransformerDecoder.unembed`` (``modules/transformer.py``) returns ``self.output(h).float()``: every prompt
  position's logits in fp32 beside the compute-dtype ones until the copy is made, and each step's row so;
* ``generate_next_token`` returns ``logits.unsqueeze(1)``, a view of the prefill's whole fp32 logits, which
  ``generated_logits`` holds until the first step's ``torch.cat``; each step then concatenates its row, so the
  last step keeps ``new tokens - 1`` rows of ``vocab`` fp32 values per sequence and builds ``new tokens`` rows
  beside them. The recipe throws them away after ``generate`` returns; they are alive until then.

Full fine-tuning (``runtime: torchtune`` with ``mode: train``; ``recipes/full_finetune_single_device.py``, the
model built by ``torchtune/models/llama3_2/_component_builders.py`` ``llama3_2``; traced:
``benchmarks/tracer_torchtune.py --full``, ``benchmarks/data/tracer_torchtune_full.json``) trains torchtune's own
decoder, whose code keeps other tensors than transformers' (:func:`model_code`, facts handed to the shared
activation formulas):

* ``MultiHeadAttention.forward`` (``modules/attention.py``) expands grouped K and V to every query head
  (``k.unsqueeze(2).expand(expand_shape).flatten(1, 2)``: a copy) before ``F.scaled_dot_product_attention``,
  so the kernel saves K and V at the query heads' width; the grouped K and V are read by the copy only (which
  saves nothing) and are freed;
* ``RMSNorm.forward`` (``modules/rms_norm.py``) is ``F.rms_norm(x.float(), ..., weight=self.scale,
  eps=self.eps).to(x.dtype)``: the fp32 input copy, the fp32 normalised tensor the weight's multiply keeps, the
  fp32 statistics, and the 16-bit output the next linear keeps;
* ``RotaryPositionalEmbeddings.forward`` (``modules/position_embeddings.py``) computes in fp32 (``x.float()``)
  and returns ``x_out.type_as(x)``: its fp32 products multiply the cache, which needs no gradient, so only the
  16-bit rotated Q is saved (by SDPA) and the rotated K is read by the expansion; the fp32 copies are
  momentary;
* the model's RoPE cache, fp32 over the builder's ``max_seq_len`` (131,072 positions for Llama 3.1 to 3.3:
  ``model.max_position_embeddings``), counted with the parameters
  (:func:`vramcalc.stacks.torchtune_lora.rope_cache_bytes`, as under torchtune's LoRA recipe).

The recipe's techniques (``enable_activation_checkpointing``, ``enable_activation_offloading``,
``optimizer_in_bwd``, ``CEWithChunkedOutputLoss``) are those of :mod:`vramcalc.stacks.techniques`; the recipe
deletes the logits before backward (``del logits``). ``compile: True`` (``torchtune/training/_compile.py``
``compile_model``: each ``TransformerSelfAttentionLayer`` compiled before checkpointing wraps it; ``compile_loss``:
the chunked loss's ``compute_cross_entropy``) keeps per layer what inductor's partitioner keeps when every weight
trains (:data:`vramcalc.stacks.torchtune_lora.TORCHTUNE_LAYER`, the set the LoRA recipe's compiled layer keeps
with an adapted MLP, less the adapters' outputs; traced: ``benchmarks/tracer_torchtune_compile.py --full``,
``benchmarks/data/tracer_torchtune_compile.json``): the layer's input, each RMSNorm's 16-bit output and fp32
statistics (the fp32 copies of ``x.float()`` are fused away), Q after the rotary embedding, K and V expanded to
every query head, the attention output, logsumexp and RNG state, the output projection's output, one MLP
up-projection output and the product ``w2`` reads, one more hidden-wide matmul output. Refused with one line:
``compile`` with ``optimizer_in_backward`` (the traced step holds less than the eager rules count; not
understood yet), ``compile`` with the plain ``CrossEntropyLoss`` (``compile_loss`` compiles it whole), an adapter
of another framework, quantized weights, another precision than bf16, several GPUs, other models than dense rotary
decoders.

Not counted: the momentary ``torch.ones`` beside ``masks`` while ``tril`` builds it (before the prefill), the
int32 token tensors (``generated_tokens``, ``stop_token_mask``), sampling's row-sized temporaries, the fp32 copies
of q and k inside the rotary embedding, and whatever SDPA's kernel makes of a boolean mask. The generation is
modelled to its ``max_new_tokens`` (no stop token reached earlier).
"""

from __future__ import annotations

from dataclasses import replace

from vramcalc.choices import Architecture, Attention, CrossEntropy, Head, KvCacheDtype, Mode, Norm, Position
from vramcalc.core.code import ModelCode
from vramcalc.core.shape import ModelShape
from vramcalc.core.stack import Stack
from vramcalc.errors import SpecError
from vramcalc.llm.generation import StaticCache, check_cache_len, prompt_and_context, refuse_paged_serving_keys
from vramcalc.llm.kvcache import self_attention_layers
from vramcalc.spec.models import ModelSpec, Spec, Workload
from vramcalc.stacks import inductor, torchtune_lora
from vramcalc.stacks.techniques import one_gpu_only
from vramcalc.units import FP32, allocation_bytes

#: ``cache_pos``, ``input_pos``: ``torch.arange`` of int64 positions.
POSITION_BYTES = 8


def check_keys(spec: Spec) -> None:
    """torchtune's generation rules, refused with one line naming the key: one GPU, SDPA, the cache at the
    recipe's dtype, the model's own weights (its torchao quantizers are not modelled), no adapter, no
    transformers release, a cache that holds the context."""
    wl = spec.workload
    if wl.mode is Mode.train:
        check_training_keys(spec)
        return
    reason = one_gpu_only(wl)
    if spec.parallel is not None and reason is not None:
        raise SpecError(reason)
    refuse_paged_serving_keys(wl, "torchtune")
    if wl.kv_cache_dtype not in (None, KvCacheDtype.auto):
        raise SpecError("workload.kv_cache_dtype: torchtune's KV cache has the recipe's dtype (runtime: torchtune)")
    if wl.quantization is not None:
        raise SpecError("workload.quantization: torchtune's quantized generation is not modelled (runtime: torchtune)")
    if wl.adapter is not None:
        raise SpecError("workload.adapter: torchtune's generate runs merged weights (runtime: torchtune)")
    if (wl.versions or {}).get("transformers") is not None:
        raise SpecError("workload.versions.transformers: torchtune runs its own model code (runtime: torchtune)")
    if wl.attention is not Attention.sdpa:
        raise SpecError(f"workload.attention: torchtune calls scaled_dot_product_attention (got {wl.attention.value})")
    if wl.use_cache is False:
        raise SpecError("workload.use_cache: torchtune's generation without a KV cache is not modelled")
    check_cache_len(wl)


def cache_tokens(spec: Spec) -> int:
    """``max_seq_len`` of the caches: the recipe's ``prompt + max_new_tokens`` (the context), or
    ``max_cache_len``."""
    _, context = prompt_and_context(spec.workload)
    return spec.workload.max_cache_len or context


def _check_shape(shape: ModelShape) -> None:
    """What torchtune's decoder is modelled for: a dense rotary decoder with an output layer."""
    if shape.architecture is not Architecture.decoder or shape.mla is not None or shape.moe is not None:
        raise SpecError("workload.runtime: torchtune's generate is modelled for dense decoders (no experts, no MLA)")
    if shape.sliding_window:
        raise SpecError("workload.runtime: torchtune's generate is not modelled with sliding-window attention")
    if shape.position is not Position.rotary or shape.head is not Head.lm:
        raise SpecError("workload.runtime: torchtune's generate is modelled for rotary decoders with an LM head")


def static_cache(spec: Spec, shape: ModelShape) -> StaticCache:
    """torchtune's caches and what ``generate`` keeps (see the module's notes): the KV cache for
    :func:`cache_tokens` tokens with each layer's ``cache_pos``, the rotary table, the call's mask and positions;
    the prefill's and a step's rotary rows and a step's mask row; K and V expanded over the whole cache; every
    prompt position's logits upcast to fp32; the fp32 logits ``generated_logits`` keeps in the first and the
    last decode step."""
    _check_shape(shape)
    wl = spec.workload
    tokens = cache_tokens(spec)
    prompt, context = prompt_and_context(wl)
    new = context - prompt
    positions = spec.model.max_position_embeddings or tokens
    rotary_row = shape.head_dim * FP32  # head_dim // 2 (cos, sin) pairs in fp32
    layers = self_attention_layers(shape)
    setup = layers * allocation_bytes(tokens * POSITION_BYTES) + allocation_bytes(positions * rotary_row)
    call = allocation_bytes(context * tokens) + allocation_bytes(context * POSITION_BYTES)
    row = wl.batch_size * shape.vocab * FP32  # one position's fp32 logits for the batch
    steps = []
    if new >= 2:  # the first step: the prefill's logits kept (a view), two rows built
        steps.append((allocation_bytes(prompt * row), allocation_bytes(2 * row)))
    if new >= 3:  # the last step: new - 1 rows kept, new rows built
        steps.append((allocation_bytes((new - 1) * row), allocation_bytes(new * row)))
    note = (
        f"torchtune: KV caches set up for max_seq_len {tokens:,} tokens "
        + ("(workload.max_cache_len)" if wl.max_cache_len else "(prompt + max_new_tokens, as recipes/generate.py)")
        + "; generate keeps every new token's fp32 logits (generated_logits)"
    )
    return StaticCache(
        tokens=tokens,
        buffers=setup + call,
        prefill_extra=allocation_bytes(prompt * rotary_row),
        decode_extra=allocation_bytes(tokens) + allocation_bytes(rotary_row),
        prefill_expands=True,
        prompt_logits=True,
        logits_upcast=True,
        kept_steps=tuple(steps),
        note=note,
    )


def check_training_keys(spec: Spec) -> None:
    """torchtune's fine-tuning recipes (``runtime: torchtune``, ``mode: train``), refused with one line naming
    the key: its LoRA recipe with ``adapter.framework: torchtune`` (checked there), else full fine-tuning of
    a dense decoder in bf16 on one GPU, with SDPA, not quantized, compiled with its chunked loss only."""
    wl = spec.workload
    if wl.adapter is not None:
        if wl.adapter.framework != "torchtune":
            raise SpecError(
                f"workload.adapter.framework: {wl.adapter.framework} with runtime: torchtune; torchtune's LoRA "
                "recipe is adapter.framework: torchtune"
            )
        return
    if spec.parallel is not None:
        raise SpecError(
            "workload.runtime: torchtune's full fine-tuning across several GPUs (parallel:) is not modelled"
        )
    if (wl.versions or {}).get("transformers") is not None:
        raise SpecError("workload.versions.transformers: torchtune runs its own model code (runtime: torchtune)")
    if wl.attention is not Attention.sdpa:
        raise SpecError(f"workload.attention: torchtune calls scaled_dot_product_attention (got {wl.attention.value})")
    if wl.precision.value != "bf16":
        raise SpecError(f"workload.precision: {wl.precision.value} with runtime: torchtune is not modelled (bf16)")
    if wl.quantization is not None:
        raise SpecError("workload.quantization: torchtune's full fine-tuning trains unquantized weights")
    if wl.compile and wl.cross_entropy is not CrossEntropy.chunked:
        raise SpecError(
            "workload.compile with runtime: torchtune is modelled with cross_entropy: chunked (compile_loss "
            "compiles a plain CrossEntropyLoss whole, not modelled)"
        )
    if wl.compile and wl.optimizer_in_backward:
        raise SpecError(
            "workload.compile with runtime: torchtune is not modelled with optimizer_in_backward (its compiled "
            "layers' gradients with the per-parameter optimizers are not verified)"
        )
    if wl.keep_outputs:
        raise SpecError("workload.keep_outputs: torchtune's recipe deletes the logits before backward")
    if wl.cross_entropy not in (CrossEntropy.standard, CrossEntropy.chunked):
        raise SpecError(f"workload.cross_entropy: {wl.cross_entropy.value} is not a torchtune loss (standard, chunked)")
    if spec.model.architecture not in (None, Architecture.decoder) or spec.model.experts is not None:
        raise SpecError("workload.runtime: torchtune's full fine-tuning is modelled for dense decoder models")


def model_code(spec: ModelSpec, workload: Workload, shape: ModelShape) -> tuple[ModelShape, list[str]]:
    """The shape as torchtune's own decoder runs it in training (module docstring): K and V expanded to every
    query head before SDPA, RMSNorm's fp32 normalised tensor kept, the fp32 RoPE cache with the parameters,
    and a note."""
    _check_trained_shape(shape)
    positions = spec.max_position_embeddings or workload.seq_len or 0
    code = ModelCode(
        release="torchtune",
        kv_expanded=shape.kv_heads < shape.heads,
        rmsnorm_normed_fp32=shape.norm is Norm.rmsnorm,
        buffer_bytes=torchtune_lora.rope_cache_bytes(shape, positions),
    )
    note = (
        "runtime torchtune: torchtune's own decoder (K and V expanded to every query head before SDPA, RMSNorm "
        f"in fp32, a float32 RoPE cache of {positions:,} positions)"
    )
    notes = [note]
    if spec.max_position_embeddings is None:
        notes.append(
            "model.max_position_embeddings not given: torchtune's RoPE cache counted for seq_len positions "
            "(its builders use the model's max_seq_len)"
        )
    return replace(shape, code=code), notes


def _check_trained_shape(shape: ModelShape) -> None:
    """What torchtune's decoder is modelled for in training: a dense rotary decoder with an LM head."""
    if shape.architecture is not Architecture.decoder or shape.mla is not None or shape.moe is not None:
        raise SpecError(
            "workload.runtime: torchtune's full fine-tuning is modelled for dense decoders (no experts, no MLA)"
        )
    if shape.position is not Position.rotary or shape.head is not Head.lm:
        raise SpecError(
            "workload.runtime: torchtune's full fine-tuning is modelled for rotary decoders with an LM head"
        )


#: The note on a compiled torchtune decoder in full fine-tuning, in place of the generic compiled block's.
COMPILE_NOTE = (
    "compile: each torchtune layer compiled by torch.compile with inductor's default partitioner "
    "(min_cut_rematerialization_partition, PyTorch 2.13): a layer keeps its input, norm outputs and statistics, Q, "
    "K and V expanded to every query head, the attention output, one MLP up-projection output and the product w2 "
    "reads, two hidden-wide matmul outputs; pointwise temporaries fused away; embedding and output layer eager"
)


def refine(stack: Stack, workload: Workload) -> Stack:
    """Full fine-tuning compiled (``compile_model``): each layer keeps what inductor's partitioner keeps of
    torchtune's layer (:data:`vramcalc.stacks.torchtune_lora.TORCHTUNE_LAYER`), with its note."""
    if not (workload.compile and workload.mode is Mode.train and workload.adapter is None):
        return stack
    notes = tuple(n for n in stack.workload_notes if n != inductor.NOTE)
    return replace(stack, compiled_block=torchtune_lora.TORCHTUNE_LAYER, workload_notes=(*notes, COMPILE_NOTE))
