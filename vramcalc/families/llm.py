"""The LLM workloads, assembled into phases for :func:`vramcalc.core.dense.estimate`.

One entry point, :func:`llm_phases`, used when a spec has quantized weights, a LoRA adapter, experts,
a KV cache (generation keys or ``use_cache``). It returns the phases (component -> bytes, the
estimator's contract) and :class:`LlmDetails`, the extra numbers of the ``--json`` document.
Formulas live in :mod:`vramcalc.llm.quantization`, :mod:`vramcalc.llm.kvcache`, :mod:`vramcalc.llm.generation`,
:mod:`vramcalc.llm.adapters` and :mod:`vramcalc.llm.moe`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from vramcalc.choices import (
    TORCHAO_INT8,
    AdapterType,
    Architecture,
    Checkpointing,
    Head,
    Mode,
    Optimizer,
    OptimizerImpl,
    Runtime,
)
from vramcalc.core import activations as act
from vramcalc.core import optimizer as optimizer_mod
from vramcalc.core import training
from vramcalc.core.dense import host_bytes, paged_bytes, training_phases
from vramcalc.core.optimizer import DEFAULT_OPTIMIZER_NOTE
from vramcalc.core.params import active_params
from vramcalc.core.reserve import DEFAULT_CUDA_CONTEXT
from vramcalc.core.shape import ModelShape
from vramcalc.core.stack import Device, Stack
from vramcalc.core.workload import ResolvedWorkload, default_optimizer
from vramcalc.errors import SpecError
from vramcalc.families.checkpoint import stored_weight_bytes
from vramcalc.families.dense import base_components, paged_states, without_unallocated_workspace
from vramcalc.families.estimate import Estimate, assemble
from vramcalc.families.resolve import resolve_workload
from vramcalc.families.target import Target
from vramcalc.llm import (
    adapters,
    generation,
    kvcache,
    lora_encdec,
    moe,
    quantization,
    recompute,
)
from vramcalc.llm.details import LlmDetails
from vramcalc.spec.llm import GGUF, litgpt_gptq
from vramcalc.spec.models import Spec, is_generation, runs_llamacpp
from vramcalc.stacks import (
    bnb,
    gguf,
    litgpt,
    llamacpp,
    peft_lora,
    peft_methods,
    registry,
    torchao,
    torchtune_lora,
    vllm,
)
from vramcalc.stacks.layouts import quant_layout

Phases = dict[str, dict[str, int]]
#: Adapters with LoRA's A and B matrices, estimated here (the others in :mod:`vramcalc.stacks.peft_methods`).
LORA_TYPES = (AdapterType.lora, AdapterType.dora, AdapterType.lora_fa)


def _weights(spec: Spec, shape: ModelShape, dt: act.Dtypes, n_params: int) -> tuple[int, Any, list[str]]:
    """The weights' bytes, their quantization details for ``--json`` (None: not quantized) and their notes."""
    q = spec.workload.quantization
    stored = stored_weight_bytes(spec)  # pre-quantized files, loaded as they are stored
    if q is None:
        return (n_params * dt.param if stored is None else stored), None, []
    layout = quant_layout(q.method, litgpt_gptq(spec.workload), torchtune_lora.uses_torchtune(spec.workload))
    wb = quantization.weight_bytes(shape, q, n_params, dt.param, layout)
    if stored is not None:
        wb = replace(wb, total_bytes=stored)
    gw = gguf.spec_weights(shape, q, n_params) if q.method in GGUF else None
    if gw is not None:
        notes = [f"quantization {gw.describe()}; the file's header (metadata, vocabulary) is not weights"]
    else:
        notes = [
            f"quantization {layout.describe(q)}",
            quantization.kept_line(shape, q, wb.kept_params, spec.workload.precision.value),
        ]
        if q.compute_dtype is not None:
            release = bnb.release_of(spec.workload.versions)
            given = (spec.workload.versions or {}).get("bitsandbytes") is not None
            inp = bnb.dtype_name(spec.workload.precision.value, dt.compute)
            notes.append(bnb.compute_note(q.compute_dtype, release, inp, given))
    info: dict[str, Any] = {
        "method": q.method.value,
        "bits_per_weight": round(wb.bits_per_quantized_weight, 4),
        "quantized_params": wb.quantized_params,
        "quantized_bytes": wb.quantized_bytes,
        "kept_params": wb.kept_params,
        "kept_bytes": wb.kept_bytes,
    }
    if gw is not None:
        info["gguf_types"] = {
            n: {"tensors": t.tensors, "params": t.params, "bytes": t.bytes} for n, t in gw.by_type.items()
        }
    return wb.total_bytes, info, notes


def estimate(spec: Spec, stack: Stack, target: Target) -> Estimate:
    """A step with LLM keys on one GPU: quantized weights, an adapter, experts, a KV cache."""
    work = resolve_workload(spec, stack)
    base, assumptions = base_components(work, target)
    phases, details, notes = llm_phases(work, base, target.card)
    managed = details.paged_optimizer_bytes if spec.workload.adapter is not None else paged_bytes(work)
    fields, said = paged_states(work, managed)
    assumptions = [*without_unallocated_workspace(assumptions, phases), *notes, *said]
    result = assemble(spec, work.n_params + details.frozen_adapter_params, phases, assumptions, stack)
    return replace(result, llm=details, host_bytes=host_bytes(work), **fields)


def llm_phases(
    work: ResolvedWorkload, base: dict[str, int], card: Device | None = None
) -> tuple[Phases, LlmDetails, list[str]]:
    """Phases of one step of an LLM workload, the details for the ``--json`` document and the notes on what
    was assumed; ``card`` is the GPU where one is named (vLLM's batch defaults depend on it)."""
    spec, shape, tk, dt, n_params = work.spec, work.shape, work.tokens, work.dtypes, work.n_params
    wl = spec.workload
    weights, qinfo, notes = _weights(spec, shape, dt, n_params)
    # a pinned older transformers release's per-layer buffers load with the weights (vramcalc/stacks/transformers.py)
    base = {**base, "parameters": weights + shape.code.buffer_bytes}
    active = active_params(shape, n_params) if shape.moe is not None else None
    details = LlmDetails(quantization=qinfo, active_params=active)
    if wl.mode is Mode.train:
        if wl.adapter is not None:
            phases, (trainable, frozen, managed), said = adapter_phases(
                spec, shape, tk, dt, base, qinfo, stack=work.stack
            )
            details = replace(
                details, trainable_params=trainable, frozen_adapter_params=frozen, paged_optimizer_bytes=managed
            )
            return phases, details, notes + said
        if wl.quantization is not None:
            raise SpecError("workload.quantization: training quantized weights needs an adapter (QLoRA: adapter + nf4)")
        phases, said = moe_training_phases(work, base)
        return phases, details, notes + said
    if is_generation(wl) and runs_llamacpp(wl):
        if recompute.is_recompute(wl):
            raise SpecError("workload.use_cache: false generates with transformers; llama.cpp caches")
        phases, details, said = llamacpp_phases(spec, shape, n_params, base, details)
        return phases, details, notes + said
    phases, details, said = inference_phases(spec, shape, tk, dt, base, details, card)
    return phases, details, notes + said


def _dequant(
    spec: Spec,
    shape: ModelShape,
    n_tokens: int,
    dt: act.Dtypes,
    act_bytes: int | None = None,
    at: tuple[act.Tokens, int, int] | None = None,
) -> int:
    """The dequantization buffer beyond the block's activation peak (:func:`bnb.forward_dequant`); for
    torchao's int8 configurations the calls beyond the phase's ``at`` = (tokens, LM-head rows, activations)
    (:func:`vramcalc.stacks.torchao.torchao_int8_extra`)."""
    q = spec.workload.quantization
    if q is None:
        return 0
    if q.method in TORCHAO_INT8 and at is not None:
        tk, head_rows, activations = at
        block = generation.block_transient(shape, tk, dt, spec.workload.attention)
        return torchao.torchao_int8_extra(shape, q, tk.encoder, head_rows, dt.compute, block, activations)
    full = bnb.forward_buffer(spec.workload, shape, n_tokens, dt, dt.compute, quant_layout(q.method))
    return bnb.forward_dequant(q.method, full, shape, n_tokens, act_bytes or dt.compute)


def inference_phases(
    spec: Spec,
    shape: ModelShape,
    tk: act.Tokens,
    dt: act.Dtypes,
    base: dict[str, int],
    details: LlmDetails,
    card: Device | None = None,
) -> tuple[Phases, LlmDetails, list[str]]:
    """A plain forward (with its cache when ``use_cache``) or a generation's prefill and decode, with the notes
    on the defaults taken."""
    wl = spec.workload
    attention = wl.attention
    if not is_generation(wl):
        per_token = kvcache.shape_bytes_per_token(shape, kvcache.KvCacheDtype.auto, dt.compute)
        sliding = kvcache.sliding_bytes_per_token(shape, kvcache.KvCacheDtype.auto, dt.compute)
        one = kvcache.sequence_bytes(per_token, sliding, shape.sliding_window, wl.seq_len or 0, 1)
        one += kvcache.cross_attention_bytes(
            shape,
            kvcache.cross_attention_tokens(shape, 0, wl.cross_attention_tokens or 0),
            kvcache.KvCacheDtype.auto,
            dt.compute,
        )
        kv = tk.batch * one if wl.use_cache else 0
        activations = generation.forward_activations(shape, tk, dt, attention)
        temporaries = _dequant(spec, shape, tk.encoder, dt, at=(tk, tk.encoder, activations))
        forward = {**base, "activations": activations, "kv_cache": kv, "temporaries": temporaries}
        notes: list[str] = []
        if wl.use_cache is None and per_token:
            notes.append("use_cache not given: false (one forward, no KV cache kept; give prompt_len to generate)")
        details = replace(
            details, kv_cache_bytes=kv, kv_cache_bytes_per_token=per_token, kv_block_size=1, context_tokens=wl.seq_len
        )
        return {"forward": forward}, details, notes
    if recompute.is_recompute(wl):  # generation without a KV cache: one phase, the last step
        comps, tokens, context, notes = recompute.phase(shape, wl, dt)
        step = {**base, **comps, "temporaries": _dequant(spec, shape, wl.batch_size * tokens, dt)}
        return {"generate": step}, replace(details, kv_cache_bytes=0, context_tokens=context), notes
    gen, notes = generation.resolve(shape, wl, dt.compute, registry.static_cache(spec, shape))
    states = kvcache.cross_attention_tokens(shape, gen.prompt, wl.cross_attention_tokens or 0)
    cross = gen.batch * kvcache.cross_attention_bytes(shape, states, gen.kv_dtype, dt.compute)
    prefill = {**base, **generation.prefill_phase(shape, gen, dt, attention)}
    prefill["kv_cache"] += cross
    prompt = act.Tokens(batch=gen.batch, seq=gen.prompt, target=gen.prompt)
    head_rows = prompt.encoder if gen.runtime is Runtime.hf_legacy else gen.batch
    prefill["temporaries"] = _dequant(spec, shape, prompt.encoder, dt, at=(prompt, head_rows, prefill["activations"]))
    decode = {**base, **generation.decode_phase(shape, gen, dt, attention)}
    decode["kv_cache"] += cross
    step_tokens = act.Tokens(batch=gen.batch, seq=1, target=1)
    decode["temporaries"] += _dequant(spec, shape, gen.batch, dt, at=(step_tokens, gen.batch, decode["activations"]))
    phases = {"prefill": prefill, "decode": decode}
    if gen.runtime is Runtime.litgpt:
        phases, said = litgpt.generate_phases(spec, shape, base, phases)
        notes += said
    non_kv = max(sum(p.values()) - p["kv_cache"] for p in phases.values())
    pool = None
    if gen.runtime is Runtime.vllm:
        non_kv, profile, activations, non_torch, said = profile_non_kv_bytes(spec, shape, gen, dt, base, card)
        notes += said
        per_sequence = decode["kv_cache"] // gen.batch
        layer = kvcache.layer_bytes(shape, gen.kv_dtype, dt.compute)
        layout = vllm.kv_layout(shape, profile, layer, gen.block)
        if layout is not None:  # the blocks vLLM reserves for one request in every group of layers
            per_sequence = layout.request_bytes(gen.context)
            for phase in (prefill, decode):
                phase["kv_cache"] = gen.batch * per_sequence
        pool = kvcache.KvPool(
            gen.memory_utilization,
            non_kv,
            gen.per_token,
            gen.block,
            gen.context,
            per_sequence,
            decode["kv_cache"],
            unseen_bytes=vllm.UNSEEN_BYTES,
            engine=kvcache.EngineProfile(
                profile.version,
                profile.engine,
                profile.max_model_len,
                profile.max_num_batched_tokens,
                profile.max_num_seqs,
                activations,
                non_torch,
            ),
            layout=layout,
            max_model_len=profile.max_model_len,
        )
    details = replace(
        details,
        kv_pool=pool,
        kv_cache_bytes=decode["kv_cache"],
        kv_cache_bytes_per_token=gen.per_token,
        kv_block_size=gen.block,
        context_tokens=gen.context,
        memory_utilization=gen.memory_utilization,
        non_kv_peak_bytes=non_kv,
    )
    return phases, details, notes


def llamacpp_phases(
    spec: Spec, shape: ModelShape, n_params: int, base: dict[str, int], details: LlmDetails
) -> tuple[Phases, LlmDetails, list[str]]:
    """llama.cpp serving a GGUF file (:mod:`vramcalc.stacks.llamacpp`): one phase, its buffers allocated once
    (no PyTorch cuBLAS handles: no workspace); with the notes on llama.cpp's settings."""
    if spec.parallel is not None:
        raise SpecError("workload.runtime: llama.cpp across several GPUs (parallel:) is not modelled")
    phase, setup, notes = llamacpp.phase(shape, spec.workload, base["parameters"], n_params)
    per_token = llamacpp.cell_bytes(shape, setup.type_k, setup.type_v) * shape.layers
    details = replace(
        details,
        kv_cache_bytes=phase["kv_cache"],
        kv_cache_bytes_per_token=per_token,
        kv_block_size=1,
        context_tokens=setup.n_ctx_seq,
        non_kv_peak_bytes=phase["parameters"] + phase["temporaries"],
    )
    return {"serving": phase}, details, notes


def profile_non_kv_bytes(
    spec: Spec,
    shape: ModelShape,
    gen: generation.Generation,
    dt: act.Dtypes,
    base: dict[str, int],
    card: Device | None = None,
) -> tuple[int, vllm.Profile, int, int, list[str]]:
    """The non-KV peak of vLLM's profiling step, from which it sizes the KV pool (:mod:`vramcalc.stacks.vllm`):
    weights plus one forward of ``max_num_batched_tokens`` tokens over ``min(max_num_seqs, tokens)`` dummy
    requests (logits for each request's last token) plus memory outside PyTorch, whatever the number of
    requests the spec serves; the activation peak is the larger of that forward and the sampling step after it
    (:func:`vllm.sampler_bytes`). Returns the bytes, the engine settings, the profile's activation peak, the
    memory outside PyTorch it counts and its notes."""
    profile, notes = vllm.resolve(spec.workload, gen.context, card)
    tokens, rows = profile.max_num_batched_tokens, profile.requests
    flat = act.Tokens(batch=1, seq=tokens, target=tokens)  # varlen attention: no S x S scores
    head = generation.head_bytes(shape, rows, rows, dt, fp32_copy=True)
    block = vllm.eager_block_bytes(shape, spec.model.model_type or "", tokens, dt.compute)
    if profile.engine == "V0" and block is not None:  # V0 runs vLLM's model code eagerly
        forward = max(block, head)
    else:
        forward = generation.prefill_transient(shape, flat, dt, spec.workload.attention, head)
    sampler = vllm.sampler_bytes(profile, shape.vocab, shape.hidden, dt.compute) if shape.head is Head.lm else 0
    activations = max(forward, sampler)
    peak = {**base, "activations": activations, "inputs": generation.ids_bytes(tokens)}
    peak["temporaries"] = _dequant(spec, shape, tokens, dt)
    step = "its sampling step (top-k/top-p sort of the logits)" if sampler > forward else "the forward"
    notes.append(
        f"vLLM KV pool: sized after a profiling forward of {tokens:,} tokens over {rows:,} requests and their "
        f"sampling (vLLM {profile.version}, {profile.engine}; independent of batch_size); peak in {step}; "
        "CUDA graphs are captured after the KV cache, outside its budget"
    )
    context = spec.overhead.cuda_context if spec.overhead.cuda_context is not None else DEFAULT_CUDA_CONTEXT
    non_torch, said = vllm.non_torch_bytes(profile, context)
    notes += [said] if said else []
    return sum(peak.values()) + non_torch, profile, activations, non_torch, notes


def moe_training_phases(work: ResolvedWorkload, base: dict[str, int]) -> tuple[Phases, list[str]]:
    """Full fine-tuning of a MoE model: the dense phases plus the routed activations of the MoE layers; with
    the note on the optimizer's default."""
    spec, shape, tk, dt = work.spec, work.shape, work.tokens, work.dtypes
    notes = [DEFAULT_OPTIMIZER_NOTE] if spec.workload.optimizer is None else []
    phases = training_phases(work, base)
    full = spec.workload.gradient_checkpointing is Checkpointing.full
    extra = moe.saved_delta_per_layer(shape, tk.encoder, dt) if full else moe.saved_delta(shape, tk.encoder, dt)
    for name in ("forward", "backward"):
        if phases[name].get("gradients", 0) < base["parameters"]:  # not the end-of-backward state
            phases[name] = {**phases[name], "activations": phases[name].get("activations", 0) + extra}
    return phases, notes


def adapter_phases(
    spec: Spec,
    shape: ModelShape,
    tk: act.Tokens,
    dt: act.Dtypes,
    base: dict[str, int],
    qinfo: dict[str, Any] | None = None,
    *,
    stack: Stack,
) -> tuple[Phases, tuple[int, int, int | None], list[str]]:
    """LoRA / QLoRA (and DoRA) training step: frozen (possibly quantized) base, trainable fp32 adapters; the
    other PEFT methods in :mod:`vramcalc.stacks.peft_methods`. With the trainable parameters, the frozen
    ones the adapter adds and a paged optimizer's states in managed memory (None where they are counted on
    the GPU: the other PEFT methods), and the notes on what was assumed."""
    wl = spec.workload
    adapter = wl.adapter
    assert adapter is not None
    adapters.check_supported(shape, adapter)
    notes: list[str] = []
    if wl.versions and "peft" in wl.versions:
        notes.append(peft_methods.PEFT_PINNED.format(wl.versions["peft"]))
    encdec = shape.architecture is Architecture.encoder_decoder
    if encdec and adapter.type is not AdapterType.lora:
        raise SpecError(f"workload.adapter.type: {adapter.type.value} is modelled for decoder models; use lora")
    if wl.keep_outputs and (encdec or adapter.type not in LORA_TYPES):
        raise SpecError("workload.keep_outputs: modelled with adapter.type lora, dora or lora_fa on decoder models")
    if adapter.type not in LORA_TYPES:
        phases, trainable, frozen, said = peft_methods.method_phases(spec, shape, tk, dt, base, stack)
        return phases, (trainable, frozen, None), notes + said
    rank = adapter.rank or 0
    if encdec and wl.quantization is not None:
        raise SpecError(
            "workload.quantization: QLoRA (a quantized base under an adapter) is not modelled for "
            "encoder-decoder models; drop quantization for LoRA on the full-precision base"
        )
    targets, said = adapters.resolve_targets(shape, adapter)
    notes += said
    matrices = adapters.lora_matrices(shape, targets, adapters.is_litgpt(adapter))
    a = adapters.adapter_bytes_per_param(adapter, dt)
    dora = peft_methods.dora_for(adapter, matrices, a, dt, tk.encoder, shape.layers, wl.quantization is not None)
    frozen_a = adapters.freezes_a(adapter)
    trainable = adapters.trainable_params(matrices, rank, frozen_a) + dora.params
    frozen = adapters.lora_a_params(matrices, rank) if frozen_a else 0  # LoRA-FA's lora_A, stored, not trained
    optimizer = default_optimizer(spec)
    if wl.optimizer is None:
        notes.append(DEFAULT_OPTIMIZER_NOTE)
    tensors = adapters.adapter_tensors(matrices, rank, frozen_a) + dora.tensors
    states = adapters.adapter_states(optimizer, tensors, a, stack.paged_state_min_elements, stack.optimizer_state_block)
    torchtune, rope = torchtune_lora.uses_torchtune(wl), 0
    if torchtune:  # no k-bit preparation, no bitsandbytes: the model's dtype throughout
        torchtune_lora.check_nf4_sizes(shape, wl.quantization)
        kbit = peft_lora.Kbit(checkpointing=wl.gradient_checkpointing is Checkpointing.full, dtypes=dt)
        positions, said = torchtune_lora.rope_positions(spec, tk.seq)
        rope = torchtune_lora.rope_cache_bytes(shape, positions)
        notes += torchtune_lora.notes(spec) + said
    else:
        kbit, said = peft_lora.resolve_kbit(spec, dt, qinfo)
        notes += said
    live = {
        **base,
        "parameters": base["parameters"] + (trainable + frozen) * a + kbit.upcast_bytes + rope,
        "optimizer_states": states.device_bytes,
        "autocast_weight_copies": trainable * dt.compute if dt.amp else 0,
    }
    if stack.zero_grad_in_place:  # allocated from the start of the step
        live["gradients"] = trainable * a
    adt = kbit.dtypes
    if adt != dt:  # a k-bit base's fp32 upcast can change the kernel the workload's notes named
        scores = act.scores_note(shape, tk, adt, wl.attention, registry.flash_runs(spec, shape))
        notes += [scores] if scores else []
    loss = litgpt.loss_bytes(shape, tk, adt) if adapters.is_litgpt(adapter) else act.loss_bytes(shape, tk, adt)
    if stack.loss is not None:  # cross_entropy: chunked (torchtune's CEWithChunkedOutputLoss)
        loss = stack.loss(shape, tk, adt)
    if torchtune:
        loss = torchtune_lora.loop_loss(loss, wl)
    if encdec:
        lora = (rank, a, adapter.dropout)
        saved, recompute_layer, through, inside = lora_encdec.step_bytes(
            shape, tk, adt, wl.attention, matrices, lora, kbit.checkpointing
        )
    elif torchtune:
        offload = stack.activation_offload is not None
        saved, recompute_layer, through, inside = torchtune_lora.step_bytes(spec, shape, tk, dt, matrices, offload)
    else:
        saved, recompute_layer, through, inside = peft_lora.step_bytes(spec, shape, tk, dt, kbit, matrices, a)
        saved += 0 if kbit.checkpointing else dora.saved
        recompute_layer += dora.saved_per_layer if kbit.checkpointing else 0
        through = max(through, dora.transient if kbit.checkpointing else 0)
        inside = max(inside, dora.transient)
    head = loss.saved + loss.forward_transient
    forward = {**live, "activations": saved + head, "temporaries": max(0, inside - head)}
    head_dequant = litgpt.head_dequant(wl, shape, kbit.bnb_compute, adapters.is_litgpt(adapter))
    start = {**live, "activations": saved + loss.saved, "temporaries": loss.backward_temporaries + head_dequant}
    block = {**live, "activations": saved + recompute_layer, "temporaries": through}
    end = {**live, "gradients": trainable * a}
    backward = max(start, block, end, key=lambda p: sum(p.values()))
    temp = trainable * a if optimizer is not Optimizer.none and wl.optimizer_impl is OptimizerImpl.foreach else 0
    if optimizer_mod.LAYOUTS[optimizer].fused_kernel:
        temp = 0
    if frozen_a:  # PEFT's LoraFAOptimizer: a loop over the adapter pairs
        temp = adapters.lora_fa_step_bytes(matrices, rank, a)
    step = {**live, "gradients": trainable * a, "temporaries": temp}
    if wl.keep_outputs:  # vramcalc/core/training.py: held_outputs
        held = training.held_outputs(shape, tk, adt, kbit.checkpointing)
        during, after = held.logits + held.fresh_cache, held.logits + held.cache
        forward = _plus(forward, after + held.fresh_cache)
        backward = max(_plus(start, during), _plus(block, during), _plus(end, after), key=lambda p: sum(p.values()))
        step = _plus(step, after)
    phases = {"forward": forward, "backward": backward, "optimizer": step}
    return phases, (trainable, frozen, states.managed_bytes), notes


def _plus(phase: dict[str, int], activations: int) -> dict[str, int]:
    return {**phase, "activations": phase.get("activations", 0) + activations}
