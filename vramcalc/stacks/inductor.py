"""``workload.compile: true``: each transformer block compiled by ``torch.compile`` with its default backend,
inductor, as torchtune's ``compile_model`` compiles a model (one region per layer, torchtune/training/_compile.py,
v0.6.1) and as ``torch.compile(model)`` compiles a transformers model whose layers are its graphs.

Read at PyTorch 2.13.0 (git cf30153c4c131c8164ee7798e5022d810682e2cb). AOTAutograd traces a block's forward and
backward as one joint graph, decomposed with inductor's table (``torch/_inductor/decomposition.py``
``select_decomp_table``); inductor's ``partition_fn`` (``torch/_inductor/compile_fx.py``) runs its joint-graph
passes and splits it with ``min_cut_rematerialization_partition(..., compiler="inductor")``
(``torch/_functorch/partitioners.py``). The forward keeps for backward the cheapest cut of the graph that the
backward can be recomputed from, under these rules of ``solve_min_cut``:

* ``get_default_op_list``: pointwise ops (``Tag.pointwise``), reductions (``sum``, ``mean``, ``amax``, ``var_mean``),
  casts and views are recomputable and fusible; ``mm``, ``addmm``, ``bmm`` and the flash / memory-efficient SDPA ops
  are ``compute_intensive_ops``, and ``native_dropout``, ``rand_like`` are ``random_ops``;
* ``should_ban_recomputation``: a compute-intensive or random op is never recomputed (its output is saved where the
  backward needs it); nor is a node whose output is "materialized in backward" (``is_materialized_backwards``: a
  non-fusible backward op reads it, such as the matmul that computes a weight's gradient from its input), nor a
  reduction whose output is 4x smaller than its input (``ban_recompute_reductions``: norm statistics are saved);
* ``get_node_weight``: the cut weighs each saved tensor by its bytes, so the backward recomputes the residual
  stream, norm inputs, casts, the rotary embedding's products and the activation's intermediates from smaller or
  already-saved tensors.

For a block of the models vramcalc counts (:mod:`vramcalc.core.activations`), the partitioned graph keeps (traced
with AOTAutograd on the shared tracer's fake CUDA tensors: ``benchmarks/tracer_compile.py``, each saved tensor
listed in ``benchmarks/data/tracer_compile.json``): the block input; each norm's output (the input of the Q/K/V
and MLP-up matmuls, materialized in backward) and its statistics; Q, K (after the rotary embedding) and V, the
attention's output, logsumexp and RNG state; the attention output projection's output (a post-LN block keeps the
residual sum its second norm reads instead); each MLP matmul's output and the activation's output (the down
projection's input); one bool mask per residual dropout (inductor's ``replace_random`` pass makes the random
numbers, the mask the partitioner keeps). None of the eager step's fp32 norm copies, cast copies or activation
intermediates exists (:class:`vramcalc.core.compiled.CompiledBlock`).

Autocast (``precision: amp-bf16`` / ``amp-fp16``, as the HF Trainer's ``torch_compile=True`` with ``bf16=True`` or
``fp16=True`` runs): AOTAutograd traces under the ambient autocast state, so autocast's casts are nodes of the joint
graph (``convert_element_type``, inductor's decomposition of ``_to_copy``). A weight's 16-bit cast is fusible and
recomputable from the fp32 parameter, but the backward matmul that computes the block input's gradient reads it, so
``is_materialized_backwards`` bans its recomputation: the forward saves every weight's cast, the bytes of eager
autocast's weight-cast cache, now held by the graph (a checkpointed block's forward keeps none of them, unlike the
eager cache, which holds them to the end of the forward). The residual stream and the block input stay fp32 (the
embedding's output); each norm's output, Q, K, V and the matmul inputs are saved as the 16-bit casts the matmuls
read (the rotated Q and K are cast for SDPA after the fp32 rotary products), the norm statistics fp32: the 16-bit
step's saved set with the block input at 4 bytes. A post-LN block (BERT) keeps each LayerNorm's fp32 normalized
output and the block input's 16-bit cast instead (about 5 % more of that block; not counted). ``amp-fp16`` adds
the HF Trainer's ``GradScaler`` (``torch/amp/grad_scaler.py``: the scale, its growth tracker and ``found_inf`` are
one-element tensors, ``unscale_`` works in place), a few allocator blocks left out. Traced as the other cases.

Inductor fuses every pointwise chain into the kernels that read it, so only a matmul's or SDPA's input and a
graph's outputs are allocated (``torch/_inductor/scheduler.py``): no pointwise temporary of a block is counted.
Inductor's own workspace: none in the allocator's peak (its generated kernels take no scratch buffers beyond
those outputs; autotuning runs at compile time, before the step). The embedding, the final norm and the LM head
run eagerly, as torchtune compiles only the layers and the loss.

Interactions: gradient checkpointing wraps the compiled block (torchtune's ``checkpoint_wrapper`` around a
compiled layer): each block keeps its input and the block recomputed in backward keeps the compiled set.
``cross_entropy: chunked`` compiles torchtune's ``compute_cross_entropy`` (``compile_loss``): per chunk the
partitioner keeps the 16-bit logits chunk it reads (already alive) and fp32 per-token statistics, not the fp32
log-softmax (:func:`compiled_chunked_loss`). ``optimizer_in_backward``, ``activation_offloading`` and
``keep_outputs`` act on the tensors the compiled graph saves as they do on eager ones.

Inference (``mode: inference``): a no-grad forward of compiled blocks holds each block's matmul and attention
inputs and outputs alive at once, a fused chain's inputs until the kernel that reads it has run (``scheduler.py``;
the rotary embedding's ``cat`` lowered pointwise by ``torch/_inductor/lowering.py`` ``cat`` → ``pointwise_cat``):
:func:`vramcalc.core.compiled.compiled_inference_bytes`, traced in ``benchmarks/data/tracer_compile_infer.json``;
under autocast beside the 16-bit cast of the weight the running matmul reads.
Generation (``runtime: hf``, ``cache: static``): transformers' "static cache and torch.compile" recipe replaces
``model.forward`` by its compiled form; transformers 5.25's ``_prefill`` (``generation/utils.py``) calls ``self(...)``,
so the prefill runs compiled, and ``_sample``'s decode steps call ``get_compiled_call`` (``torch.compile`` of
``self.__call__``, ``CompileConfig`` mode ``reduce-overhead``) where ``_valid_auto_compile_criteria`` finds a
compileable cache, else ``self``: every forward runs compiled. Under compile ``masking_utils._ignore_causal_mask_sdpa``
sees the cache's position as a traced tensor and builds the prefill's mask, and ``sdpa_attention_forward`` skips
``pack_gqa`` (``is_torchdynamo_compiling``): each layer reads a float mask and, with grouped KV heads, K and V
expanded over the whole cache (``vramcalc.core.compiled.compiled_static_step_bytes``, set by
:func:`vramcalc.stacks.transformers.static_cache`); ``StaticLayer.update``'s ``index_copy_`` is put back in place by
inductor's re-inplacing (``torch/_inductor/fx_passes/reinplace.py``). Traced in mode default
(``benchmarks/data/tracer_compile_generate.json``): CUDA graphs (``torch/_inductor/cudagraph_trees.py``: each shape's
recording in one private pool shared by the graphs, replays allocating nothing) are not counted. Refused: generation
without ``cache: static`` or on another runtime (vLLM and gpt-fast compile by themselves), and autocast.

torchtune's LoRA and QLoRA recipe compiled (``adapter.framework: torchtune``) is counted by
:mod:`vramcalc.stacks.torchtune_lora`, PEFT's LoRA (``adapter.framework: peft``, ``type: lora``, an unquantized
base) by :mod:`vramcalc.stacks.peft_lora`. Not modelled, refused with one line: other adapters (DoRA, LoRA-FA,
the other PEFT methods, litgpt's) and quantized weights,
mixture-of-experts, encoder-decoder and vision models, other generation and a forward's ``use_cache``, latent
attention, q/k norms and parallel blocks, eager attention or SDPA's math kernel, flash-attn's
library kernels, ``mixed-*`` precision (16-bit parameters with fp32 master weights: DeepSpeed's and FSDP's, several
GPUs), selective checkpointing, Liger's fused loss, several GPUs, a pinned transformers release, and PyTorch before 2.0
(no ``torch.compile``). Releases 2.0 to 2.12 are assumed to partition as 2.13 does: the op lists and ban rules
above are those of every 2.x release read, but the ``ban_recompute_*`` settings have changed defaults over time.
"""

from __future__ import annotations

from dataclasses import replace

from vramcalc.choices import (
    AdapterType,
    Architecture,
    Attention,
    Checkpointing,
    CrossEntropy,
    KvCache,
    Mode,
    Optimizer,
    Precision,
)
from vramcalc.core import activations as act
from vramcalc.core.compiled import CompiledBlock
from vramcalc.core.shape import ModelShape
from vramcalc.core.stack import Stack
from vramcalc.errors import SpecError
from vramcalc.spec.models import Spec, Workload, is_generation
from vramcalc.spec.versions import TORCH_2, torch_release
from vramcalc.units import ceil_div

#: What inductor's partitioner keeps of a block (module docstring).
INDUCTOR_BLOCK = CompiledBlock(
    norm_output=True,
    norm_stats=True,
    projection_output=True,
    mlp_matmul_outputs=True,
    mlp_activation_output=True,
    dropout_mask_bytes=1,
    fuses_pointwise=True,
    weight_casts_in_graph=True,
)
#: torchtune CEWithChunkedOutputLoss(num_output_chunks=8) (as :data:`vramcalc.stacks.techniques.CE_CHUNKS`).
CE_CHUNKS = 8
#: Per token of a compiled loss chunk: the fp32 row maximum and log-sum-exp the partitioner keeps.
LOSS_STATS_PER_TOKEN = 2 * act.FP32

#: Why a generation under ``compile`` is refused, per runtime (``hf`` is modelled with ``cache: static``).
GENERATION_REFUSALS = {
    "hf": "transformers' generate compiles its forward with a static cache: give cache: static",
    "hf-legacy": "transformers' releases before 4.36 have no static cache",
    "vllm": "vLLM compiles its model itself; its profile is modelled without this key",
    "gpt-fast": "gpt-fast compiles its decode step by design; drop the key",
    "torchtune": "torchtune's generation recipe compiles with its own settings, not modelled",
    "litgpt": "litgpt's generate compiles with its own settings, not modelled",
}

NOTE = (
    "compile: each transformer block compiled by torch.compile with inductor's default partitioner "
    "(min_cut_rematerialization_partition, PyTorch 2.13): a block keeps its input, norm outputs and statistics, "
    "Q/K/V, the attention output, matmul outputs and the MLP activation; pointwise temporaries fused away; "
    "embedding and LM head eager"
)
#: Added to the note under autocast.
AMP_NOTE = "; under autocast each block's graph keeps its weights' 16-bit casts for backward and an fp32 input"
GENERATION_NOTE = (
    "compile: transformers' generate with a static cache and model.forward compiled by torch.compile with "
    "inductor (PyTorch 2.13), mode default: the prefill and each decode step one graph, the cache written in "
    "place, each layer's float mask and (grouped KV heads) K and V expanded over the whole cache; "
    "mode reduce-overhead (CUDA graphs) also holds each recorded shape's graph memory in its private pool, "
    "not counted"
)
INFERENCE_NOTE = (
    "compile: each transformer block compiled by torch.compile with inductor (PyTorch 2.13): pointwise chains "
    "fused, a block's working set is its matmul and attention inputs and outputs alive at once; embedding and "
    "LM head eager"
)


def compiled_chunked_loss(shape: ModelShape, tk: act.Tokens, dt: act.Dtypes) -> act.LossBytes:
    """torchtune's chunked cross-entropy with ``compute_cross_entropy`` compiled: the 16-bit logit chunks are kept
    (the compiled chunks read them in backward) with two fp32 statistics per token; the upcast and the log-softmax
    are fused, so the forward holds the logits alone; backward writes one chunk's gradient at the compute dtype."""
    n = tk.encoder * shape.vocab
    chunk = tk.batch * ceil_div(tk.seq, CE_CHUNKS) * shape.vocab
    saved = n * dt.compute + tk.encoder * LOSS_STATS_PER_TOKEN
    return act.LossBytes(saved, 0, chunk * dt.compute)


def check_keys(spec: Spec) -> None:
    """What ``compile`` is not modelled with, in the spec's own keys, refused with one line naming the key."""
    wl, model = spec.workload, spec.model
    if not wl.compile:
        return
    key = "workload.compile"
    release = torch_release(wl.versions)
    if release is not None and release < TORCH_2:
        raise SpecError(f"{key}: torch.compile arrived in PyTorch 2.0 (versions.torch pins an older release)")
    if (wl.versions or {}).get("transformers") is not None:
        raise SpecError(f"{key} is modelled with today's transformers (drop versions.transformers)")
    torchtune = wl.adapter is not None and wl.adapter.framework == "torchtune"  # its recipe's compile_model
    if wl.adapter is not None and not torchtune:
        _check_peft_lora(wl)
    if wl.quantization is not None and not torchtune:
        raise SpecError(
            f"{key} is not modelled with workload.quantization (full fine-tuning, plain inference, PEFT's LoRA on "
            "an unquantized base, and adapter.framework: torchtune)"
        )
    if spec.parallel is not None:
        raise SpecError(f"{key} is not modelled with parallel: (one GPU)")
    if wl.precision in (Precision.mixed_bf16, Precision.mixed_fp16):
        raise SpecError(
            f"{key} is not modelled with precision: {wl.precision.value} (fp32, bf16, fp16, amp-bf16 or amp-fp16)"
        )
    if wl.mode is Mode.inference:
        _check_inference(wl)
    if wl.attention is not Attention.sdpa:
        raise SpecError(f"{key} is modelled with attention: sdpa (its fused kernels), not {wl.attention.value}")
    if wl.gradient_checkpointing in (Checkpointing.selective, Checkpointing.selective_op):
        raise SpecError(f"{key} is not modelled with gradient_checkpointing: {wl.gradient_checkpointing.value}")
    if wl.cross_entropy is CrossEntropy.fused_linear:
        raise SpecError(f"{key} is not modelled with cross_entropy: fused_linear")
    if model.architecture not in (None, Architecture.decoder, Architecture.encoder):
        raise SpecError(f"{key} is modelled for decoder and encoder transformers, not {model.architecture.value}")
    if model.experts is not None:
        raise SpecError(f"{key} is not modelled for mixture-of-experts models")


def _check_peft_lora(wl: Workload) -> None:
    """An adapter under ``compile``: PEFT's plain LoRA (``LoraLayer``'s ``Linear``) or torchtune's; the rest refused
    in one line naming the key."""
    key, adapter = "workload.compile", wl.adapter
    assert adapter is not None
    if adapter.framework != "peft":
        raise SpecError(f"{key} is not modelled with adapter.framework: {adapter.framework} (peft or torchtune)")
    if adapter.type is not AdapterType.lora:
        raise SpecError(f"workload.adapter.type: {adapter.type.value} is not modelled with {key} (lora)")
    if adapter.prepare_kbit:
        raise SpecError(f"workload.adapter.prepare_kbit is not modelled with {key} (a k-bit base's preparation)")


def _check_inference(wl: Workload) -> None:
    """A compiled no-grad forward is modelled; generation and a forward's KV cache are refused in one line."""
    key = "workload.compile"
    if is_generation(wl):
        _check_generation(wl)
        return
    if wl.use_cache:
        raise SpecError(f"{key} is modelled for a forward without a KV cache (drop use_cache: true)")


def _check_generation(wl: Workload) -> None:
    """Generation under ``compile``: transformers' ``generate`` with a static cache and 16-bit or fp32 weights (the
    traced recipe); other runtimes and settings refused in one line naming the key."""
    key = "workload.compile"
    runtime = wl.runtime.value if wl.runtime is not None else "vllm"
    if runtime != "hf" or wl.cache is not KvCache.static:
        raise SpecError(f"{key} is not modelled for generation ({GENERATION_REFUSALS.get(runtime, runtime)})")
    if wl.precision in (Precision.amp_bf16, Precision.amp_fp16):
        raise SpecError(f"{key} with generation is modelled with bf16, fp16 or fp32 weights (not {wl.precision.value})")


def check_spec(spec: Spec, shape: ModelShape) -> None:
    """What ``compile`` is not modelled with on the resolved model, refused with one line naming the key."""
    if not spec.workload.compile:
        return
    key = "workload.compile"
    if shape.architecture not in (Architecture.decoder, Architecture.encoder) or shape.moe is not None:
        raise SpecError(f"{key} is modelled for dense decoder and encoder transformers")
    if shape.mla is not None or shape.qk_norm.value != "none" or shape.parallel_block:
        raise SpecError(f"{key} is not modelled for latent attention, q/k norms or parallel attention/MLP blocks")
    compute = act.FP32 if spec.workload.precision is Precision.fp32 else 2
    if act.sdpa_kernel(shape, act.Dtypes(compute, compute, compute, False)) == "math":
        raise SpecError(
            f"{key}: SDPA runs its math kernel here (fp32 with grouped K/V, or head_dim > 256), not modelled"
        )


#: The note under torchtune's adapters, whose compiled layer keeps another set (:mod:`vramcalc.stacks.torchtune_lora`).
ADAPTER_NOTE = (
    "compile: each torchtune layer compiled by torch.compile with inductor's default partitioner "
    "(min_cut_rematerialization_partition, PyTorch 2.13), with LoRALinear: no frozen base matmul keeps its input, "
    "each lora_a keeps its output, K and V are kept expanded to every query head, and under QLoRA the 16-bit "
    "weights the input gradients read are kept dequantized; pointwise temporaries fused away; embedding and "
    "output layer eager"
)


#: The note under PEFT's LoRA, whose compiled block keeps another set (:mod:`vramcalc.stacks.peft_lora`).
PEFT_ADAPTER_NOTE = (
    "compile: each transformer block compiled by torch.compile with inductor's default partitioner "
    "(min_cut_rematerialization_partition, PyTorch 2.13), with PEFT's LoRA: no frozen linear keeps its input (no "
    "norm output, no down projection input), each lora_A keeps its output and one copy of each input it reads at "
    "its matmul's dtype (with dropout, each module's dropped input and mask); under autocast each block keeps "
    "every weight's 16-bit cast, the frozen ones too; pointwise temporaries fused away; embedding and LM head eager"
)


#: Said where a published compiled step peaks above the count: torchtune's README (v0.6.1, "Optimization flags",
#: Llama-3.2-3B, 2 x 4,096 packed tokens, A100), scored by benchmarks/torchtune_lora_score.py. The traced graphs
#: agree with the count (benchmarks/tracer_compile.py), so the gap is in what the trace cannot see.
PUBLISHED_ABOVE_NOTE = (
    "compile: torchtune publishes compiled full fine-tuning with chunked cross-entropy 6 to 8 % above this count "
    "(Llama-3.2-3B, its README's optimization-flags table: + chunked CE -7.6 %, + optimizer in backward -6.2 %, "
    "+ activation offloading -6.4 %); not explained (the traced graphs agree within 2.5 %): allow that margin"
)
#: Added where an 8-bit optimizer's step is compiled with the model (torchtune's row with torchao's AdamW8bit).
EIGHT_BIT_ABOVE_NOTE = (
    "; with an 8-bit AdamW torchtune's row is 17.5 % above: torchao's compiled AdamW8bit step upcasts a "
    "parameter, its gradient and states to fp32 (two parameter-sized fp32 buffers, 2.94 GiB for that model's "
    "tied embedding), not counted"
)


def _note(workload: Workload) -> str:
    """The estimate's note on compile, for training or a forward, with or without autocast; where a published
    compiled step peaks above the count, what it publishes."""
    if workload.adapter is not None:
        return ADAPTER_NOTE if workload.adapter.framework == "torchtune" else PEFT_ADAPTER_NOTE
    if is_generation(workload):
        return GENERATION_NOTE
    note = NOTE if workload.mode is Mode.train else INFERENCE_NOTE
    autocast = workload.precision in (Precision.amp_bf16, Precision.amp_fp16)
    note = note + AMP_NOTE if autocast and workload.mode is Mode.train else note
    full_chunked = workload.mode is Mode.train and workload.adapter is None
    if full_chunked and workload.cross_entropy is CrossEntropy.chunked:
        eight_bit = workload.optimizer in (Optimizer.adamw_8bit, Optimizer.paged_adamw_8bit)
        note += "; " + PUBLISHED_ABOVE_NOTE + (EIGHT_BIT_ABOVE_NOTE if eight_bit else "")
    return note


def refine(stack: Stack, workload: Workload) -> Stack:
    """``stack`` with each block compiled, and the compiled chunked loss where torchtune's chunked loss is used."""
    loss = compiled_chunked_loss if workload.cross_entropy is CrossEntropy.chunked else stack.loss
    return replace(
        stack,
        compiled_block=INDUCTOR_BLOCK,
        loss=loss,
        workload_notes=(*stack.workload_notes, _note(workload)),
    )
