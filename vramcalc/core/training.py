"""Training-step refinements as PyTorch itself runs them, applied to the step of :mod:`vramcalc.core.dense`
where the stack says so (:class:`vramcalc.core.stack.Stack`), and the results of the stacks' own policies.

* Gradients zeroed in place (``Stack.zero_grad_in_place``): :func:`kept_gradients`.
* Each parameter stepped as its gradient is accumulated (``Stack.optimizer_in_backward``;
  ``register_post_accumulate_grad_hook``): :func:`optimizer_in_backward`.
* The outputs a loop holds (``workload.keep_outputs``): :func:`held_outputs`.
* No loss (``cross_entropy: none``): backward from the logits themselves, :func:`no_loss_bytes`.
* What an optimizer offload or an activation offload leaves on the device: :class:`OffloadedOptimizer`,
  :class:`OffloadedActivations` (the stacks' policies compute them: vramcalc/stacks/techniques.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from vramcalc.choices import Architecture, Head, Optimizer, OptimizerImpl, Position
from vramcalc.core import activations as act
from vramcalc.core.optimizer import optimizer_temp_bytes_for
from vramcalc.core.params import param_tensors
from vramcalc.core.phases import Phase
from vramcalc.core.shape import ModelShape
from vramcalc.units import allocation_bytes


def no_loss_bytes(shape: ModelShape, tk: act.Tokens, dt: act.Dtypes) -> act.LossBytes:
    """``cross_entropy: none``: backward from the logits themselves (``logits.sum().backward()``, as
    transformers' SDPA benchmark scripts run). The logits stay alive (the caller holds the output) at the
    compute dtype; no fp32 copy, no log-softmax. ``SumBackward`` expands the scalar gradient (a view, no
    memory), and the LM head's matmul backward makes it contiguous: one logits-sized tensor at the compute
    dtype, the backward's vocabulary-sized temporary."""
    if shape.head is not Head.lm:
        return act.LossBytes(0, 0, 0)
    n = (tk.decoder if shape.architecture is Architecture.encoder_decoder else tk.encoder) * shape.vocab
    return act.LossBytes(n * dt.compute, 0, n * dt.compute)


@dataclass(frozen=True)
class OffloadedActivations:
    """Saved activations under activation offloading: what stays on the device, what goes to the host."""

    device: int
    host: int


def largest_param_bytes(shape: ModelShape, param_bytes: int) -> int:
    """The largest parameter tensor's bytes (as allocated): the most gradient one step-in-backward keeps."""
    return max(allocation_bytes(r * c * param_bytes) for _, r, c in param_tensors(shape))


def optimizer_in_backward(
    candidates: dict[str, list[Phase]], shape: ModelShape, optimizer: Optimizer, impl: OptimizerImpl, dt: act.Dtypes
) -> dict[str, list[Phase]]:
    """The step's moments when each parameter is stepped in backward: gradients capped at the largest
    parameter's, the step temporaries those of one parameter (the largest), no gradient at the end of
    backward; the "optimizer" phase is the last parameter's step (the embedding's, at the end of backward)."""
    largest = largest_param_bytes(shape, dt.param)
    rows, cols = max(((r, c) for _, r, c in param_tensors(shape)), key=lambda rc: rc[0] * rc[1])
    temp = optimizer_temp_bytes_for(optimizer, impl, [(1, rows, cols)], rows * cols * dt.param, dt.param)
    backward = []
    for moment in candidates["backward"]:
        grads = moment.get("gradients", 0)
        if grads:
            moment = {
                **moment,
                "gradients": min(grads, largest),
                "temporaries": max(moment.get("temporaries", 0), temp),
            }
        backward.append(moment)
    end = {**candidates["optimizer"][0], "gradients": 0, "temporaries": 0}
    step = {**end, "gradients": largest, "temporaries": temp}
    return {**candidates, "backward": [*backward[:-1], end], "optimizer": [step]}


def kept_gradients(candidates: dict[str, list[Phase]], grad_bytes: int, incoming: int) -> dict[str, list[Phase]]:
    """The moments of a step whose loop zeroes gradients in place (``zero_grad()`` before PyTorch 2.0,
    ``set_to_none=False``): every moment of the forward and backward passes holds all the gradients, and
    backward adds each new gradient into its ``.grad`` (``AccumulateGrad``), so the last one computed,
    ``incoming`` bytes (the embedding's), is a tensor of its own next to them at the end of backward. The
    last candidate of ``backward`` is that end. A block's weight gradients, added one at a time, are not
    counted beside them (one weight matrix at most)."""

    def keep(moment: Phase, extra: int = 0) -> Phase:
        return {**moment, "gradients": grad_bytes, "temporaries": moment.get("temporaries", 0) + extra}

    *during, end = candidates["backward"]
    return {
        **candidates,
        "forward": [keep(m) for m in candidates["forward"]],
        "backward": [*(keep(m) for m in during), keep(end, incoming)],
    }


@dataclass(frozen=True)
class OffloadedOptimizer:
    """torchao CPUOffloadOptimizer: the device's states and step temporaries, and the host bytes."""

    device_states: int
    device_temps: int
    host: int


@dataclass(frozen=True)
class HeldOutputs:
    """One step's returned outputs, kept by the loop: the logits, and the KV cache a decoder LM returns
    while training; ``fresh_cache``: the part of the cache that is a tensor of its own, alive from the forward
    on; the rest is among the saved tensors and counts once backward frees them."""

    logits: int
    cache: int
    fresh_cache: int


def held_outputs(shape: ModelShape, tk: act.Tokens, dt: act.Dtypes, checkpointing: bool) -> HeldOutputs:
    """The outputs ``keep_outputs`` holds (the cache by the model code's release: ``ModelCode``).

    Logits: every position at the compute dtype (fp32 under the Llama-derived classes' ``logits.float()`` of
    releases before 4.47). Cache: decoder LMs only, and none under gradient checkpointing (transformers turns
    ``use_cache`` off). Per token and layer, a copied cache is K and V (``2 x kv_width``), which the attention
    then reads and saves, so nothing is fresh; the attention's own tensors are V, or the whole fused QKV output
    that V is a view of, plus K (a view of that output too, unless the rotary embedding made a new tensor:
    fp32 in GPT-NeoX before 4.49, which saves its 16-bit cast instead, so that key is fresh)."""
    if shape.head is not Head.lm:
        return HeldOutputs(0, 0, 0)
    code, c = shape.code, dt.compute
    n_tokens = tk.decoder if shape.architecture is Architecture.encoder_decoder else tk.encoder
    upcast = code.logits_upcast
    logits = n_tokens * shape.vocab * (act.FP32 if upcast else c)
    if shape.architecture is not Architecture.decoder or checkpointing:
        return HeldOutputs(logits, 0, 0)
    token_layers = shape.layers * n_tokens
    if code.cache_copied:
        # the attention reads K and V back from the cache it updates: the copies are the saved tensors
        return HeldOutputs(logits, token_layers * 2 * shape.kv_width * c, 0)
    rotary = shape.position is Position.rotary
    kept, fresh = act.returned_cache_bytes(code, shape.fused_qkv, rotary, shape.q_width, shape.kv_width, c)
    return HeldOutputs(logits, token_layers * kept, token_layers * fresh)
