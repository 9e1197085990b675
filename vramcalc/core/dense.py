"""Phase-aware peak-memory estimate of one steady-state step (pure: no I/O, no printing).

A training step is modelled as PyTorch runs it on its second iteration with
``zero_grad(set_to_none=True)``: gradients do not exist during the forward pass, optimizer states do
(where the stack zeroes them in place they do: :func:`vramcalc.core.training.kept_gradients`).

* forward: parameters + optimizer states + saved activations growing to the loss, where the logits,
  their fp32 copy and the log-softmax output are alive together;
* backward: starts with every saved activation plus the vocabulary-sized loss gradients (usually
  the step's peak), ends with parameters + gradients + states;
* optimizer: PyTorch's default ``foreach`` AdamW allocates a parameter-sized temporary
  (``torch._foreach_sqrt`` of ``exp_avg_sq``); fused implementations allocate none.

``peak_allocated_bytes`` is what ``torch.cuda.max_memory_allocated()`` reports: the largest phase.
``total_bytes`` adds the runtime overhead that lives outside the allocator's tensors.
"""

from __future__ import annotations

from vramcalc.choices import Architecture, Attention, Checkpointing, CrossEntropy, Head, Mode, Norm
from vramcalc.core import activations as act
from vramcalc.core import checkpointing, t5
from vramcalc.core.optimizer import optimizer_state_bytes, optimizer_temp_bytes, paged_state_bytes
from vramcalc.core.params import head_params, layer_params, linear_weight_params, relative_bias_params
from vramcalc.core.phases import Phase, select_phases
from vramcalc.core.shape import ModelShape
from vramcalc.core.stack import Stack
from vramcalc.core.workload import ResolvedWorkload
from vramcalc.units import allocation_bytes


def phase_candidates(work: ResolvedWorkload, base: Phase) -> dict[str, list[Phase]]:
    """The moments that may set each phase's peak, for a dense single-GPU model (no LLM keys):
    inference is one forward working set; training is :func:`_training_phase_candidates`."""
    if work.mode is Mode.inference:
        activations = act.inference_transient_bytes(work.shape, work.tokens, work.dtypes, work.spec.workload.attention)
        if work.stack.compiled_block is not None:
            from vramcalc.core import compiled  # only a compiled model reads it: kept off the start-up path

            activations = compiled.compiled_inference_bytes(work.shape, work.tokens, work.dtypes)
        return {"forward": [{**base, "activations": activations}]}
    return _training_phase_candidates(work, base)


def training_phases(work: ResolvedWorkload, base: dict[str, int]) -> dict[str, dict[str, int]]:
    """Forward, backward and optimizer phases of a training step, each at its largest moment."""
    return select_phases(_training_phase_candidates(work, base))


def _training_phase_candidates(work: ResolvedWorkload, base: Phase) -> dict[str, list[Phase]]:
    """Backward has several candidate moments: its start (every saved activation plus the loss
    gradients), the last block's backward, and its end (all gradients); under full checkpointing the
    start and the first recomputed block instead of the last block."""
    wl, shape, tk, dt, stack = work.spec.workload, work.shape, work.tokens, work.dtypes, work.stack
    optimizer, n_params = work.optimizer, work.n_params
    param_bytes = n_params * dt.param
    states = optimizer_state_bytes(optimizer, shape, dt.param, stack.optimizer_state_block)
    temps = optimizer_temp_bytes(optimizer, wl.optimizer_impl, shape, param_bytes, dt.param)
    if stack.optimizer_offload is not None:
        offloaded = stack.optimizer_offload(shape, optimizer, wl.optimizer_impl, dt)
        states, temps = offloaded.device_states, offloaded.device_temps
    elif stack.paged_state_min_elements is not None:  # the rest is managed memory: paged_bytes
        min_elements, block = stack.paged_state_min_elements, stack.optimizer_state_block
        states = paged_state_bytes(optimizer, shape, dt.param, min_elements, block).device_bytes
    copies = linear_weight_params(shape) * dt.compute if dt.amp else 0
    loss = stack.loss(shape, tk, dt) if stack.loss is not None else act.loss_bytes(shape, tk, dt)
    saved = saved_activation_bytes(work)
    live = {**base, "optimizer_states": states}
    head_grads = head_gradient_params(shape) * dt.param
    if checkpointing.recomputes_blocks(wl.gradient_checkpointing):
        outside = act.embedding_saved_bytes(shape, tk, dt) + act.head_saved_bytes(shape, tk, dt)
        # a selective policy also keeps some outputs of every block (vramcalc/core/checkpointing.py)
        op_kept = checkpointing.kept_per_block_bytes(stack.kept_ops, shape, tk.encoder, dt, wl.attention)
        kept = act.checkpoint_saved_bytes(shape, tk, dt) + shape.layers * op_kept + outside
        if stack.activation_offload is not None:
            stash = tk.encoder * shape.hidden * dt.residual  # one block input
            kept = stack.activation_offload(kept, act.head_saved_bytes(shape, tk, dt), stash).device
        layer = largest_layer_saved_bytes(work)
        n_blocks = shape.layers + (shape.decoder_layers if shape.architecture is Architecture.encoder_decoder else 0)
        head_copy = shape.vocab * shape.hidden * dt.compute if dt.amp else 0
        in_graph = stack.compiled_block is not None and stack.compiled_block.weight_casts_in_graph
        forward_copies = head_copy if in_graph else copies  # autocast's cache holds every cast until the forward ends
        forward = {
            **live,
            "autocast_weight_copies": forward_copies,
            "activations": kept + loss.saved + loss.forward_transient,
        }
        start = {
            **live,
            "autocast_weight_copies": head_copy,
            "activations": kept + loss.saved,
            "temporaries": loss.backward_temporaries,
        }
        recompute = {
            **live,
            "autocast_weight_copies": head_copy + (copies - head_copy) // max(1, n_blocks),
            "activations": kept + layer - recomputed_input_bytes(shape, tk, dt, wl.attention, stack) - op_kept,
            "gradients": head_gradient_params(shape) * dt.param,
        }
        backward = [start, recompute]
        if checkpointing.has_block_moments(shape):
            backward += checkpointing.block_backward_moments(recompute, shape, tk, dt, op_kept)
        first_block = t5_first_block_recompute(work)
        if first_block is not None:
            backward.append({**live, **first_block})
    else:
        if wl.gradient_checkpointing is Checkpointing.selective and wl.attention is Attention.eager:
            saved -= _eager_score_bytes(shape, tk, dt)
        if stack.activation_offload is not None:
            stash = largest_layer_saved_bytes(work)
            saved = stack.activation_offload(saved, act.head_saved_bytes(shape, tk, dt), stash).device
        forward = {**live, "autocast_weight_copies": copies, "activations": saved + loss.saved + loss.forward_transient}
        start = {
            **live,
            "autocast_weight_copies": copies,
            "activations": saved + loss.saved,
            "temporaries": loss.backward_temporaries,
        }
        last_block = {
            **live,
            "autocast_weight_copies": copies,
            "activations": saved - act.head_saved_bytes(shape, tk, dt),
            "gradients": head_grads + layer_params(shape) * dt.param,
            "temporaries": act.block_backward_temp_bytes(shape, tk, dt),
        }
        backward = [start, last_block]
        experts = act.moe_block_backward(shape, tk, dt)
        if experts is not None:
            freed, down_gradients, temporaries = experts
            backward.append(
                {
                    **last_block,
                    "activations": last_block["activations"] - freed,
                    "gradients": head_grads + down_gradients * dt.param,
                    "temporaries": temporaries,
                }
            )
        if checkpointing.has_block_moments(shape) and stack.activation_offload is None:
            # the top and the bottom block's backward, each block keeping all it saved (beside its input)
            held = {**live, "autocast_weight_copies": copies, "activations": saved, "gradients": head_grads}
            layer = largest_layer_saved_bytes(work) - tk.encoder * shape.hidden * dt.residual
            if wl.gradient_checkpointing is Checkpointing.selective and wl.attention is Attention.eager:
                layer -= _eager_score_bytes(shape, tk, dt) // shape.layers  # recomputed, not kept
            backward += checkpointing.block_backward_moments(held, shape, tk, dt, layer)
    end_of_backward = {**live, "gradients": param_bytes, "temporaries": tied_gradient_sum_bytes(shape, dt.param)}
    step = {**live, "gradients": param_bytes, "temporaries": temps}
    candidates = {"forward": [forward], "backward": [*backward, end_of_backward], "optimizer": [step]}
    candidates = _with_held_outputs(candidates, work, end_of_backward)
    if stack.zero_grad_in_place or stack.optimizer_in_backward:
        from vramcalc.core import training  # refinements few steps need, imported when one does
    if stack.zero_grad_in_place:
        incoming = shape.vocab * shape.embed_width * dt.param or training.largest_param_bytes(shape, dt.param)
        candidates = training.kept_gradients(candidates, param_bytes, allocation_bytes(incoming))
    if stack.optimizer_in_backward:
        return training.optimizer_in_backward(candidates, shape, optimizer, wl.optimizer_impl, dt)
    return candidates


def _with_held_outputs(
    candidates: dict[str, list[Phase]], work: ResolvedWorkload, end: Phase
) -> dict[str, list[Phase]]:
    """The outputs the loop holds (:func:`vramcalc.core.training.held_outputs`): with ``keep_outputs`` the
    previous step's through this forward; with it or ``cross_entropy: none`` (the caller keeps the logits it
    sums) this step's through backward and the optimizer step. The logits already count at the loss under
    ``none``; the cache's fresh tensors count from the forward on, the rest once backward frees it."""
    wl = work.spec.workload
    no_loss = wl.cross_entropy is CrossEntropy.none
    if not (wl.keep_outputs or no_loss):
        return candidates
    full = wl.gradient_checkpointing is Checkpointing.full
    from vramcalc.core import training  # only when the loop holds its outputs

    held = training.held_outputs(work.shape, work.tokens, work.dtypes, full)
    copy = held.fresh_cache
    during = (0 if no_loss else held.logits) + copy
    after = held.logits + held.cache
    previous = after if wl.keep_outputs else 0

    def add(phase: Phase, extra: int) -> Phase:
        return {**phase, "activations": phase.get("activations", 0) + extra}

    return {
        "forward": [add(p, previous + copy) for p in candidates["forward"]],
        "backward": [add(p, after if p is end else during) for p in candidates["backward"]],
        "optimizer": [add(p, after) for p in candidates["optimizer"]],
    }


def t5_first_block_recompute(work: ResolvedWorkload) -> Phase | None:
    """Full checkpointing of a gated T5: the encoder's first block recomputed at the end of backward, when
    every other parameter's gradient exists (:func:`vramcalc.core.t5.first_block_recompute_bytes`): the
    copies, activations and gradients alive then (None for other models)."""
    shape, tk, dt, attention = work.shape, work.tokens, work.dtypes, work.spec.workload.attention
    if not t5.is_t5(shape) or t5.gated_mlp_per_element(shape, dt.compute, dt.amp) is None:
        return None
    # T5LayerNorm keeps its input itself (fp32 or 16-bit, vramcalc.core.t5): the checkpoint, counted once
    block = act.layer_saved_bytes(shape, tk, dt, attention) - tk.encoder * shape.hidden * dt.residual
    block += t5.recomputed_mlp_transient_bytes(shape, tk.encoder, dt.compute, dt.amp)
    kept = t5.first_block_recompute_bytes(shape, tk.seq, tk.target, tk.encoder, (dt.param, dt.compute, dt.residual))
    stacks = 2 if shape.architecture is Architecture.encoder_decoder else 1
    first_block = layer_params(shape) + relative_bias_params(shape) // stacks
    return {
        "autocast_weight_copies": t5.first_block_copies(shape, dt.compute) if dt.amp else 0,
        "activations": kept + block,
        # never below 0: a stated ``params`` may be smaller than the shape's own count of the first block
        "gradients": max(work.n_params - first_block, 0) * dt.param,
    }


def host_bytes(work: ResolvedWorkload) -> int:
    """Host memory the step's process holds for offloaded tensors: the optimizer's (``optimizer_offload``)
    and the saved activations' (``activation_offloading``)."""
    wl, shape, tk, dt, stack = work.spec.workload, work.shape, work.tokens, work.dtypes, work.stack
    total = 0
    if stack.optimizer_offload is not None:
        total += stack.optimizer_offload(shape, work.optimizer, wl.optimizer_impl, dt).host
    if stack.activation_offload is not None:
        head = act.head_saved_bytes(shape, tk, dt)
        if wl.gradient_checkpointing is Checkpointing.full:
            kept = act.checkpoint_saved_bytes(shape, tk, dt) + act.embedding_saved_bytes(shape, tk, dt) + head
        else:
            kept = saved_activation_bytes(work)
            if wl.gradient_checkpointing is Checkpointing.selective and wl.attention is Attention.eager:
                kept -= _eager_score_bytes(shape, tk, dt)
        total += stack.activation_offload(kept, head, 0).host
    return total


def paged_bytes(work: ResolvedWorkload) -> int:
    """The optimizer states the stack keeps in CUDA managed memory, outside the caching allocator
    (:attr:`vramcalc.core.stack.Stack.paged_state_min_elements`; 0 without, or when the optimizer is offloaded)."""
    stack = work.stack
    if work.mode is not Mode.train or stack.paged_state_min_elements is None or stack.optimizer_offload is not None:
        return 0
    min_elements, block = stack.paged_state_min_elements, stack.optimizer_state_block
    paged = paged_state_bytes(work.optimizer, work.shape, work.dtypes.param, min_elements, block)
    return paged.managed_bytes


def head_gradient_params(shape: ModelShape) -> int:
    """Gradients that exist once backward has left the head: the head's own parameters and, for a
    tied LM head, the embedding matrix (its gradient is written by the LM head's backward)."""
    tied_lm = shape.head is Head.lm and shape.tie_embeddings
    return head_params(shape) + (shape.vocab * shape.embed_width if tied_lm else 0)


def tied_gradient_sum_bytes(shape: ModelShape, param_bytes: int) -> int:
    """A tied LM head's weight gets two gradients, the head's (from the start of backward) and the
    embedding's (at its very end); autograd's input buffer sums them out of place (the head's arrives as
    the transposed view of a matmul output, which it cannot reuse). At that ``add`` both contributions and
    their sum are alive next to every other gradient: two embedding-sized tensors beyond the gradients
    (traced: ``benchmarks/data/tracer_extra.json``, id ``extra-gpt2-tied_b1_s32_fp32_noopt``)."""
    if shape.head is not Head.lm or not shape.tie_embeddings:
        return 0
    return 2 * shape.vocab * shape.embed_width * param_bytes


def saved_activation_bytes(work: ResolvedWorkload) -> int:
    """Everything autograd keeps from the forward pass, without the loss tensors: each block as it runs, eagerly
    (:func:`vramcalc.core.activations.saved_activation_bytes`) or compiled (:mod:`vramcalc.core.compiled`)."""
    shape, tk, dt, attention = work.shape, work.tokens, work.dtypes, work.spec.workload.attention
    compiled_block = work.stack.compiled_block
    if compiled_block is None:
        return act.saved_activation_bytes(shape, tk, dt, attention)
    from vramcalc.core import compiled  # only a compiled model reads it: kept off the start-up path

    return compiled.compiled_saved_activation_bytes(shape, tk, dt, attention, compiled_block)


def largest_layer_saved_bytes(work: ResolvedWorkload) -> int:
    """What the block recomputed at one time during backward keeps, eager or compiled."""
    shape, tk, dt, attention = work.shape, work.tokens, work.dtypes, work.spec.workload.attention
    compiled_block = work.stack.compiled_block
    if compiled_block is None:
        return act.largest_layer_saved_bytes(shape, tk, dt, attention)
    from vramcalc.core import compiled  # only a compiled model reads it: kept off the start-up path

    return compiled.compiled_layer_saved_bytes(shape, tk, dt, attention, compiled_block)


def recomputed_input_bytes(
    shape: ModelShape, tk: act.Tokens, dt: act.Dtypes, attention: Attention, stack: Stack | None = None
) -> int:
    """The recomputed block's input is its checkpoint; its first norm saves that same tensor (LayerNorm,
    or RMSNorm on an fp32 residual), or the compiled block keeps it as it is, so it is not counted twice."""
    if stack is not None and stack.compiled_block is not None:
        return tk.encoder * shape.hidden * dt.residual
    if shape.norm is not Norm.layernorm and dt.residual != act.FP32:
        return 0  # HF RMSNorm saves an fp32 copy, a different tensor from the 16-bit checkpoint
    decoder_larger = shape.architecture is Architecture.encoder_decoder and act.layer_saved_bytes(
        shape, tk, dt, attention, decoder=True
    ) > act.layer_saved_bytes(shape, tk, dt, attention)
    return (tk.decoder if decoder_larger else tk.encoder) * shape.hidden * dt.residual


def _eager_score_bytes(shape: ModelShape, tk: act.Tokens, dt: act.Dtypes) -> int:
    """Score-sized tensors of eager attention, the part selective recomputation drops."""
    per = act.score_bytes_per_element(shape, dt, training=True)
    total = shape.layers * tk.batch * shape.heads * tk.seq * tk.seq * per
    if shape.architecture is Architecture.encoder_decoder:
        total += shape.decoder_layers * tk.batch * shape.heads * tk.target * (tk.target + tk.seq) * per
    return total
