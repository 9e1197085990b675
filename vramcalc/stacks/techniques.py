"""Training techniques of current stacks (torchtune, torchao, Liger), handed to the dense training step of
:mod:`vramcalc.core.dense` (one GPU) on the stack (:func:`refine`). Each follows its library's source:

* ``optimizer_in_backward`` (torchtune ``optimizer_in_bwd``: ``register_optim_in_bwd_hooks`` in
  torchtune/training/memory.py, one optimizer per parameter stepped from PyTorch's
  ``register_post_accumulate_grad_hook``, then ``zero_grad``): a gradient lives from its accumulation to
  its parameter's step, so at most the largest parameter's gradient exists at once; no gradient survives
  backward, and each step's temporary is that one parameter's.
* ``optimizer_offload: cpu`` (torchao ``CPUOffloadOptimizer`` in torchao/optim/cpu_offload.py): every
  parameter of at least ``minimal_size`` (4096) elements gets a pinned host copy and a pinned host
  gradient of its dtype, and its optimizer (fused AdamW by default) steps on the CPU. On the device stay the
  parameters, the gradients (``offload_gradients`` is off by default: a gradient is copied, not freed, until
  ``zero_grad``) and the smaller tensors' states, stepped there by a fused AdamW. With ``mixed-*``
  precision the DeepSpeed ZeRO-Offload layout is used instead (vramcalc/parallel/layout.py).
* ``activation_offloading`` (torchtune ``OffloadActivations`` in torchtune/training/_activation_offloading.py,
  ``get_act_offloading_ctx_manager``): every saved tensor of at least 1024 bytes inside the model is copied
  to pinned host memory during forward. The output layer is excluded (a ``NoOpManager`` around it), the loss
  runs outside the context, and ``max_fwd_stash_size`` (5) tensors are kept on the device until their copy
  completes; in backward the tensors of the node being differentiated are brought back. Counted on the
  device: the head's saved tensors and the loss, plus one block's saved tensors (with checkpointing, one
  block input) for the stash and the tensors brought back. The rest is host memory.
* ``cross_entropy`` (:func:`loss_bytes`): torchtune ``CEWithChunkedOutputLoss`` and Liger
  ``LigerFusedLinearCrossEntropyLoss``.
* ``keep_outputs`` (:func:`vramcalc.core.training.held_outputs`): the loop binds the model's outputs to a name
  (``outputs = model(**batch)``, as Accelerate's and the transformers course's loops and the SDPA benchmark
  scripts do), so a step's logits and returned KV cache stay allocated through its backward and optimizer
  step and until the next step's forward returns.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from vramcalc.choices import TORCHAO_INT8, Architecture, CrossEntropy, Head, Mode, Optimizer, OptimizerImpl, Precision
from vramcalc.core import activations as act
from vramcalc.core.optimizer import optimizer_state_bytes_for, optimizer_temp_bytes_for
from vramcalc.core.params import param_tensors
from vramcalc.core.shape import ModelShape
from vramcalc.core.stack import Stack
from vramcalc.core.training import OffloadedActivations, OffloadedOptimizer, no_loss_bytes
from vramcalc.errors import SpecError
from vramcalc.spec.models import Spec, Workload
from vramcalc.spec.techniques import TECHNIQUE_KEYS, given_techniques
from vramcalc.units import allocation_bytes, ceil_div

#: torchtune CEWithChunkedOutputLoss(num_output_chunks=8), its recipes' default.
CE_CHUNKS = 8
#: torchao CPUOffloadOptimizer(minimal_size=4096): smaller tensors keep their optimizer on the device.
CPU_OFFLOAD_MIN_SIZE = 4096


def _next_pow2(value: int) -> int:
    return 1 << max(0, value - 1).bit_length()


def liger_chunk_tokens(n_tokens: int, vocab: int, hidden: int) -> int:
    """Liger's ``fused_linear_cross_entropy_forward``: ``inc_factor = cdiv(V, H)``,
    ``chunk_size = next_power_of_2(cdiv(BT, inc_factor))``, at most the BT tokens there are."""
    return min(n_tokens, _next_pow2(ceil_div(n_tokens, ceil_div(vocab, hidden))))


def loss_bytes(
    shape: ModelShape, tk: act.Tokens, dt: act.Dtypes, cross_entropy: CrossEntropy, head_trainable: bool = True
) -> act.LossBytes:
    """The loss tensors (:func:`vramcalc.core.activations.loss_bytes`) under each ``cross_entropy``.

    chunked (torchtune, eager): the model returns its logits as 8 chunks split along the sequence
    (``tensor_split``), all alive at the loss in the compute dtype; ``compute_cross_entropy`` upcasts one
    chunk at a time (``logits.float()``), and each chunk's log-softmax output (fp32) is saved for backward,
    so the saved bytes are those of the standard loss but the forward transient holds the 16-bit logits
    plus one chunk's upcast, and backward one chunk's fp32 gradients.

    fused_linear (Liger): per chunk of tokens, the logits are computed in the compute dtype, the loss and
    their gradient written in place, and the input and weight gradients accumulated in forward
    (``grad_input`` like the hidden state, ``grad_weight`` like the head weight when it is trained); those
    are what backward keeps. Transient: one chunk of logits and the fp32 per-token losses.
    """
    tokens = tk.encoder
    if cross_entropy is CrossEntropy.none:
        return no_loss_bytes(shape, tk, dt)
    if cross_entropy is CrossEntropy.chunked:
        n = tokens * shape.vocab
        chunk = tk.batch * ceil_div(tk.seq, CE_CHUNKS) * shape.vocab
        upcast = chunk * act.FP32 if dt.compute != act.FP32 else 0
        return act.LossBytes(n * act.FP32, n * dt.compute + upcast, 2 * chunk * act.FP32)
    if cross_entropy is CrossEntropy.fused_linear:
        grad_weight = shape.vocab * shape.hidden * dt.param if head_trainable else 0
        saved = tokens * shape.hidden * dt.compute + grad_weight
        chunk = liger_chunk_tokens(tokens, shape.vocab, shape.hidden)
        return act.LossBytes(saved, chunk * shape.vocab * dt.compute + tokens * act.FP32, 0)
    return act.loss_bytes(shape, tk, dt)


def offload_activations(kept: int, head: int, stash: int) -> OffloadedActivations:
    """``kept``: the saved bytes without offloading (loss tensors excluded); ``head``: the head's share, which
    stays; ``stash``: the device bytes of the forward stash and the tensors brought back (one block)."""
    host = max(0, kept - head)
    return OffloadedActivations(device=head + min(stash, host), host=host)


def cpu_offload_optimizer(
    shape: ModelShape, optimizer: Optimizer, impl: OptimizerImpl, dt: act.Dtypes
) -> OffloadedOptimizer:
    """Tensors of at least 4096 elements: host parameter copy + host gradient (the parameter's dtype) + their
    optimizer states on the host. Smaller ones: states on the device, stepped by the same optimizer class
    (AdamW fused by default, so no temporaries)."""
    tensors = param_tensors(shape)
    large = [t for t in tensors if t[1] * t[2] >= CPU_OFFLOAD_MIN_SIZE]
    small = [t for t in tensors if t[1] * t[2] < CPU_OFFLOAD_MIN_SIZE]
    copies = sum(n * 2 * r * c * dt.param for n, r, c in large)
    host = copies + optimizer_state_bytes_for(optimizer, large, dt.param)
    if not small:
        return OffloadedOptimizer(0, 0, host)
    small_impl = OptimizerImpl.fused if optimizer is Optimizer.adamw else impl
    small_bytes = sum(n * allocation_bytes(r * c * dt.param) for n, r, c in small)
    temps = optimizer_temp_bytes_for(optimizer, small_impl, small, small_bytes, dt.param)
    return OffloadedOptimizer(optimizer_state_bytes_for(optimizer, small, dt.param), temps, host)


def notes(wl: Workload) -> list[str]:
    """One assumption line per technique the workload turns on (what stays on the device)."""
    lines = []
    deepspeed = (getattr(wl, "versions", None) or {}).get("deepspeed")
    if deepspeed is not None:  # this path runs no DeepSpeed plan (parallel: goes to vramcalc/parallel)
        lines.append(
            f"versions.deepspeed {deepspeed}: no DeepSpeed plan here (one GPU); it applies to the ZeRO-3 plans "
            "that parallel: names, or plan and fit try"
        )
    if getattr(wl, "optimizer_in_backward", False):
        lines.append(
            "optimizer_in_backward: each parameter stepped as its gradient is accumulated (torchtune), "
            "at most the largest parameter's gradient alive"
        )
    if getattr(wl, "optimizer_offload", "none") == "cpu":
        lines.append(
            "optimizer_offload: states and a copy of each parameter and gradient of >= 4096 elements in host "
            "memory (torchao CPUOffloadOptimizer); parameters and gradients stay on the GPU"
        )
    if getattr(wl, "activation_offloading", False):
        lines.append(
            "activation_offloading: saved activations in host memory (torchtune); the head's, the loss and one "
            "block's stay on the GPU"
        )
    ce = getattr(wl, "cross_entropy", CrossEntropy.standard)
    if ce is CrossEntropy.none:
        lines.append("cross_entropy: none: no loss; backward starts from the logits (their gradient at their dtype)")
    if ce is CrossEntropy.chunked:
        lines.append(
            f"cross_entropy: chunked (torchtune, {CE_CHUNKS} chunks): 16-bit logits whole, fp32 upcast per chunk"
        )
    if ce is CrossEntropy.fused_linear:
        lines.append(
            "cross_entropy: fused_linear (Liger): one chunk of logits at a time, gradients computed in forward"
        )
    if getattr(wl, "keep_outputs", False):
        lines.append(
            "keep_outputs: each step's logits and returned KV cache stay allocated until the next forward returns "
            "(decoder LMs return the cache unless gradient checkpointing is on)"
        )
    return lines


def refine(stack: Stack, workload: Workload) -> Stack:
    """``stack`` with the training techniques the workload turns on: the loss kernel of ``cross_entropy``,
    torchao's optimizer offload, torchtune's activation offloading and optimizer step in backward."""
    ce = workload.cross_entropy
    return replace(
        stack,
        loss=partial(loss_bytes, cross_entropy=ce) if ce is not CrossEntropy.standard else None,
        optimizer_offload=cpu_offload_optimizer if workload.optimizer_offload == "cpu" else None,
        activation_offload=offload_activations if workload.activation_offloading else None,
        optimizer_in_backward=workload.optimizer_in_backward,
    )


def check_keys(spec: Spec) -> None:
    """The technique keys' rules, within ``workload`` and with the rest of the spec: what is not modelled
    together is refused with one line naming the key."""
    wl, model, parallel = spec.workload, spec.model, spec.parallel
    given = given_techniques(wl)
    if not given:
        return
    if wl.mode is not Mode.train:
        raise SpecError(f"workload.{given[0]}: only valid with mode: train")
    if wl.optimizer_in_backward and wl.optimizer_offload == "cpu":
        raise SpecError("workload.optimizer_offload: not modelled together with optimizer_in_backward")
    # torchtune's LoRA recipe has its own rules (vramcalc/stacks/torchtune_lora.py)
    if wl.adapter is not None and wl.adapter.framework != "torchtune":
        for key in TECHNIQUE_KEYS[:-1]:  # keep_outputs: LoRA and DoRA (vramcalc/families/llm.py)
            if key in given:
                raise SpecError(f"workload.{key}: only modelled for full fine-tuning (not with adapter)")
    micro = parallel.micro_batches if parallel is not None else None
    if wl.optimizer_in_backward and micro is not None and micro > 1:
        raise SpecError(
            f"workload.optimizer_in_backward: steps each parameter as soon as its gradient exists, so it cannot "
            f"accumulate gradients over parallel.micro_batches {micro} (torchtune refuses it too)"
        )
    if parallel is not None:
        raise SpecError(one_gpu_only(wl) or "parallel: not modelled with these techniques")
    mixed = wl.precision in (Precision.mixed_fp16, Precision.mixed_bf16)
    for key in given:
        if key != "optimizer_offload" and mixed:
            precision = wl.precision.value
            raise SpecError(
                f"workload.{key}: not modelled with precision: {precision} (one GPU, without mixed-* precision)"
            )
    if model.architecture is Architecture.resnet:
        raise SpecError(f"workload.{given[0]}: not modelled for architecture: resnet (transformers only)")
    decoder = model.architecture in (None, Architecture.decoder)
    no_loss = wl.cross_entropy is CrossEntropy.none  # backward from the logits: any model with an LM head
    for key in ("activation_offloading", "cross_entropy"):
        if key in given and not decoder and not (key == "cross_entropy" and no_loss):
            raise SpecError(f"workload.{key}: modelled for decoder language models only (as torchtune trains them)")
    if "activation_offloading" in given and model.experts is not None:
        raise SpecError("workload.activation_offloading: not modelled for mixture-of-experts models")
    if "cross_entropy" in given and model.head not in (None, Head.lm):
        raise SpecError("workload.cross_entropy: needs head: lm (the loss over the vocabulary)")
    if "keep_outputs" in given and model.head not in (None, Head.lm):
        raise SpecError("workload.keep_outputs: needs head: lm (the outputs it keeps are the logits and KV cache)")


def one_gpu_only(wl: Workload) -> str | None:
    """Why the workload is modelled on one GPU only, or None: the reason a ``parallel:`` section is refused,
    in the spec (:func:`check_keys`, and litgpt's and torchao's rules) or as a plan or fit candidate."""
    for key in given_techniques(wl):
        if key == "optimizer_offload":
            return "workload.optimizer_offload: one GPU only; with parallel: use parallel.offload.optimizer"
        return f"workload.{key}: not modelled with parallel: (one GPU, without mixed-* precision)"
    if wl.paged_states is not None:
        return "workload.paged_states: one GPU only (not modelled with parallel:)"
    if wl.runtime is not None and wl.runtime.value == "litgpt":
        return "workload.runtime: litgpt across several GPUs (parallel:) is not modelled"
    if wl.runtime is not None and wl.runtime.value == "gpt-fast":
        return "workload.runtime: gpt-fast across several GPUs (parallel:) is not modelled"
    if wl.runtime is not None and wl.runtime.value == "torchtune":
        return "workload.runtime: torchtune's generate across several GPUs (parallel:) is not modelled"
    if wl.cache is not None and wl.cache.value == "static":
        return "workload.cache: static across several GPUs (parallel:) is not modelled"
    q = wl.quantization
    if q is not None and q.method in TORCHAO_INT8:
        return f"workload.quantization: torchao {q.method.value} across several GPUs (parallel:) is not modelled"
    return None
