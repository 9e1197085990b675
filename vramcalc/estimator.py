"""Phase-aware peak-memory estimate of one steady-state step (pure: no I/O, no printing).

A training step is modelled as PyTorch runs it on its second iteration with
``zero_grad(set_to_none=True)``: gradients do not exist during the forward pass, optimizer states do.

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

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from vramcalc import activations as act
from vramcalc.model import (
    DEFAULT_CHANNELS,
    ModelShape,
    count_params,
    head_params,
    layer_params,
    linear_weight_params,
    resolve_model,
)
from vramcalc.optimizer_memory import optimizer_state_bytes, optimizer_temp_bytes
from vramcalc.spec import (
    Architecture,
    Attention,
    Checkpointing,
    Head,
    Mode,
    Norm,
    Optimizer,
    Precision,
    Spec,
)
from vramcalc.spec_llm import uses_llm_keys
from vramcalc.units import MiB, allocation_bytes

#: cuBLAS workspace PyTorch allocates through its caching allocator, per handle: 32 MiB on Hopper
#: and newer (CUBLAS_WORKSPACE_CONFIG ":4096:8"), 8.125 MiB before (":4096:2:16:8"), per
#: aten/src/ATen/cuda/CublasHandlePool.cpp. Training uses two handles (forward and autograd threads).
CUBLAS_WORKSPACE_HOPPER = 32 * MiB
CUBLAS_WORKSPACE_PRE_HOPPER = 8 * MiB + 128 * 1024
#: CUDA context default: 512 MiB. Lazy module loading (CUDA >= 11.7) keeps it at 0.3-0.6 GiB on
#: current stacks (shared/calibration/tracer/README.md); 1343 MiB was measured on a V100 with 2022
#: PyTorch (measured.yaml case hf-perf-bert-large-load-context-only). Override with overhead.cuda_context.
DEFAULT_CUDA_CONTEXT = 512 * MiB
#: Caching-allocator reserve above the allocated peak: median of reserved/allocated - 1 over the 34
#: tracer cases' allocator replay (shared/calibration/tracer_cases.json, range 2-35 %).
DEFAULT_ALLOCATOR_RESERVE = 0.12
COMPONENTS = (
    "parameters",
    "gradients",
    "optimizer_states",
    "activations",
    "inputs",
    "autocast_weight_copies",
    "temporaries",
    "workspace",
    "kv_cache",
    # several GPUs (issue 7; vramcalc/parallel_phases.py): ZeRO-3/FSDP unsharded working set, DeepSpeed buckets
    "gathered_parameters",
    "communication_buffers",
)

DTYPES = {
    Precision.fp32: act.Dtypes(param=4, compute=4, residual=4, amp=False),
    Precision.fp16: act.Dtypes(param=2, compute=2, residual=2, amp=False),
    Precision.bf16: act.Dtypes(param=2, compute=2, residual=2, amp=False),
    Precision.amp_fp16: act.Dtypes(param=4, compute=2, residual=4, amp=True),
    Precision.amp_bf16: act.Dtypes(param=4, compute=2, residual=4, amp=True),
    # activations as pure 16-bit; master weights and states per vramcalc/parallel.py (``layout``)
    Precision.mixed_fp16: act.Dtypes(param=2, compute=2, residual=2, amp=False),
    Precision.mixed_bf16: act.Dtypes(param=2, compute=2, residual=2, amp=False),
}


@dataclass(frozen=True)
class Estimate:
    """Result of :func:`estimate`: int bytes throughout."""

    name: str
    params: int
    mode: str
    peak_phase: str
    components: dict[str, int]
    component_peaks: dict[str, int]
    phases: dict[str, int]
    phase_components: dict[str, dict[str, int]]
    overhead: dict[str, int]
    assumptions: list[str] = field(default_factory=list)
    llm: Any = None  # vramcalc.llm.LlmDetails: KV cache, adapter, experts, quantization (issue 6)
    parallel: Any = None  # vramcalc.parallel_phases.ParallelDetails: plan, stage, host memory (issue 7)

    @property
    def peak_allocated_bytes(self) -> int:
        return sum(self.components.values())

    @property
    def total_bytes(self) -> int:
        return self.peak_allocated_bytes + sum(self.overhead.values())


def workspace_bytes(mode: Mode, hopper_or_newer: bool = True) -> int:
    per_handle = CUBLAS_WORKSPACE_HOPPER if hopper_or_newer else CUBLAS_WORKSPACE_PRE_HOPPER
    return per_handle * (2 if mode is Mode.train else 1)


def input_bytes_images(pixels: int, pixel_bytes: int, batch: int, mode: Mode) -> int:
    """Image batch in the parameter dtype, plus int64 class labels when training."""
    labels = allocation_bytes(batch * act.TOKEN_ID) if mode is Mode.train else 0
    return allocation_bytes(pixels * pixel_bytes) + labels


def image_elements(spec: Spec, batch: Any = None) -> Any:
    """Pixels of one batch: batch x channels x height x width (square images); ``batch`` defaults
    to the spec's."""
    wl = spec.workload
    if wl.image_size is None:
        return 0
    return (wl.batch_size if batch is None else batch) * (wl.channels or DEFAULT_CHANNELS) * wl.image_size**2


def input_bytes(shape: ModelShape, tk: act.Tokens, mode: Mode, pixels: int = 0, pixel_bytes: int = 4) -> int:
    """Token ids (int64). Training: input_ids plus labels (a causal LM passes the same tensor as
    labels, so one); inference: input_ids (and decoder_input_ids for an encoder-decoder).
    Images: batch x channels x H x W in the parameter dtype, plus int64 class labels when training."""
    if pixels:
        return input_bytes_images(pixels, pixel_bytes, tk.batch, mode)
    ids = allocation_bytes(tk.encoder * act.TOKEN_ID)
    if shape.architecture is Architecture.decoder:
        return ids
    return ids + allocation_bytes(tk.decoder * act.TOKEN_ID)


def tokens_for(spec: Spec, shape: ModelShape, batch: Any) -> act.Tokens:
    """The batch shape of a step: ViT's length follows the image; an encoder-decoder's target is
    ``target_len`` (default: the source length). ``batch`` may be a symbolic batch size."""
    wl = spec.workload
    seq = shape.positions if shape.architecture is Architecture.vit else wl.seq_len or 0
    target = wl.target_len if wl.target_len is not None else seq
    if shape.architecture is not Architecture.encoder_decoder:
        target = seq
    return act.Tokens(batch=batch, seq=seq, target=target)


def weight_count(shape: ModelShape, assumptions: list[str]) -> int:
    """Parameters the weights are sized by: ``params`` when the spec states it, else the exact count."""
    derived = count_params(shape)
    if shape.stated_params and abs(shape.stated_params - derived) > 0.01 * derived:
        assumptions.append(f"params {shape.stated_params:,} used for weights; the shape gives {derived:,}")
    return shape.stated_params or derived


def _default_optimizer(spec: Spec) -> Optimizer:
    if spec.workload.optimizer is not None:
        return spec.workload.optimizer
    return Optimizer.adamw if spec.workload.mode is Mode.train else Optimizer.none


def estimate(spec: Spec, *, hopper_or_newer: bool = True) -> Estimate:
    """Estimate the peak allocated memory of one step of ``spec``."""
    if spec.parallel is not None or spec.workload.precision in (Precision.mixed_fp16, Precision.mixed_bf16):
        from vramcalc.parallel_phases import per_rank_estimate  # several GPUs: every figure per rank (issue 7)

        phases, n_params, assumptions, ranked = per_rank_estimate(spec, hopper_or_newer=hopper_or_newer)
        return dataclasses.replace(_assemble(spec, n_params, phases, assumptions), parallel=ranked)
    if spec.model.architecture is Architecture.resnet:
        from vramcalc import vision

        phases, n_params, assumptions = vision.resnet_phases(spec, hopper_or_newer=hopper_or_newer)
        return _assemble(spec, n_params, phases, assumptions)
    shape, assumptions = resolve_model(spec.model, spec.workload)
    wl = spec.workload
    dt = DTYPES[wl.precision]
    tk = tokens_for(spec, shape, wl.batch_size)
    n_params = weight_count(shape, assumptions)
    base = {
        "parameters": n_params * dt.param,
        "inputs": input_bytes(shape, tk, wl.mode, image_elements(spec), dt.param),
        "workspace": workspace_bytes(wl.mode, hopper_or_newer),
    }
    if not hopper_or_newer:
        assumptions.append("cuBLAS workspace 8.125 MiB per handle (pre-Hopper GPU)")
    if uses_llm_keys(spec):
        from vramcalc import llm

        phases, details = llm.llm_phases(spec, shape, tk, dt, base, n_params, assumptions)
        return dataclasses.replace(_assemble(spec, n_params, phases, assumptions), llm=details)
    if wl.mode is Mode.train and wl.optimizer is None:
        assumptions.append("optimizer not given: adamw")
    phases = select_phases(phase_candidates(spec, shape, tk, dt, base, n_params))
    return _assemble(spec, n_params, phases, assumptions)


Phase = dict[str, Any]  # component -> bytes (an int, or a polynomial in a symbolic batch size)


def phase_candidates(
    spec: Spec, shape: ModelShape, tk: act.Tokens, dt: act.Dtypes, base: Phase, n_params: int
) -> dict[str, list[Phase]]:
    """The moments that may set each phase's peak, for a dense single-GPU model (no LLM keys):
    inference is one forward working set; training is :func:`_training_phase_candidates`."""
    if spec.workload.mode is Mode.inference:
        activations = act.inference_transient_bytes(shape, tk, dt, spec.workload.attention)
        return {"forward": [{**base, "activations": activations}]}
    return _training_phase_candidates(spec, shape, tk, dt, _default_optimizer(spec), base, n_params)


def phase_total(components: Phase) -> Any:
    """Bytes allocated at one moment: the sum of its components."""
    return sum(components.values())


def select_phases(candidates: dict[str, list[Phase]]) -> dict[str, Phase]:
    """Each phase's largest moment (the first of equals)."""
    return {name: max(moments, key=phase_total) for name, moments in candidates.items()}


def _training_phases(
    spec: Spec,
    shape: ModelShape,
    tk: act.Tokens,
    dt: act.Dtypes,
    optimizer: Optimizer,
    base: dict[str, int],
    n_params: int,
) -> dict[str, dict[str, int]]:
    """Forward, backward and optimizer phases of a training step, each at its largest moment."""
    return select_phases(_training_phase_candidates(spec, shape, tk, dt, optimizer, base, n_params))


def _training_phase_candidates(
    spec: Spec,
    shape: ModelShape,
    tk: act.Tokens,
    dt: act.Dtypes,
    optimizer: Optimizer,
    base: Phase,
    n_params: int,
) -> dict[str, list[Phase]]:
    """Backward has several candidate moments: its start (every saved activation plus the loss
    gradients), the last block's backward, and its end (all gradients); under full checkpointing the
    start and the first recomputed block instead of the last block."""
    wl = spec.workload
    param_bytes = n_params * dt.param
    states = optimizer_state_bytes(optimizer, shape, dt.param)
    copies = linear_weight_params(shape) * dt.compute if dt.amp else 0
    loss = act.loss_bytes(shape, tk, dt)
    saved = act.saved_activation_bytes(shape, tk, dt, wl.attention)
    live = {**base, "optimizer_states": states}
    if wl.gradient_checkpointing is Checkpointing.full:
        outside = act.embedding_saved_bytes(shape, tk, dt) + act.head_saved_bytes(shape, tk, dt)
        kept = act.checkpoint_saved_bytes(shape, tk, dt) + outside
        layer = act.largest_layer_saved_bytes(shape, tk, dt, wl.attention)
        n_blocks = shape.layers + (shape.decoder_layers if shape.architecture is Architecture.encoder_decoder else 0)
        head_copy = shape.vocab * shape.hidden * dt.compute if dt.amp else 0
        forward = {**live, "autocast_weight_copies": copies, "activations": kept + loss.saved + loss.forward_transient}
        start = {
            **live,
            "autocast_weight_copies": head_copy,
            "activations": kept + loss.saved,
            "temporaries": loss.backward_temporaries,
        }
        recompute = {
            **live,
            "autocast_weight_copies": head_copy + (copies - head_copy) // max(1, n_blocks),
            "activations": kept + layer - recomputed_input_bytes(shape, tk, dt, wl.attention),
            "gradients": head_gradient_params(shape) * dt.param,
        }
        backward = [start, recompute]
    else:
        if wl.gradient_checkpointing is Checkpointing.selective and wl.attention is Attention.eager:
            saved -= _eager_score_bytes(shape, tk, dt)
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
            "gradients": (head_gradient_params(shape) + layer_params(shape)) * dt.param,
            "temporaries": act.block_backward_temp_bytes(shape, tk, dt),
        }
        backward = [start, last_block]
    end_of_backward = {**live, "gradients": param_bytes}
    temps = optimizer_temp_bytes(optimizer, wl.optimizer_impl, shape, param_bytes, dt.param)
    step = {**live, "gradients": param_bytes, "temporaries": temps}
    return {"forward": [forward], "backward": [*backward, end_of_backward], "optimizer": [step]}


def head_gradient_params(shape: ModelShape) -> int:
    """Gradients that exist once backward has left the head: the head's own parameters and, for a
    tied LM head, the embedding matrix (its gradient is written by the LM head's backward)."""
    tied_lm = shape.head is Head.lm and shape.tie_embeddings
    return head_params(shape) + (shape.vocab * shape.hidden if tied_lm else 0)


def recomputed_input_bytes(shape: ModelShape, tk: act.Tokens, dt: act.Dtypes, attention: Attention) -> int:
    """The recomputed block's input is its checkpoint; its first norm saves that same tensor (LayerNorm,
    or RMSNorm on an fp32 residual), so it is not counted twice."""
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


def _assemble(spec: Spec, n_params: int, phases: dict[str, dict[str, int]], assumptions: list[str]) -> Estimate:
    full = {name: {key: comps.get(key, 0) for key in COMPONENTS} for name, comps in phases.items()}
    totals = {name: sum(comps.values()) for name, comps in full.items()}
    peak_phase = max(totals, key=lambda name: totals[name])
    components = full[peak_phase]
    component_peaks = {key: max(comps[key] for comps in full.values()) for key in COMPONENTS}
    context, reserve = overhead_terms(spec, assumptions)
    overhead = {"cuda_context": context, "allocator_reserve": math.ceil(sum(components.values()) * reserve)}
    return Estimate(
        name=spec.name or "unnamed",
        params=n_params,
        mode=spec.workload.mode.value,
        peak_phase=peak_phase,
        components=components,
        component_peaks=component_peaks,
        phases=totals,
        phase_components=full,
        overhead=overhead,
        assumptions=assumptions,
    )


def overhead_terms(spec: Spec, assumptions: list[str]) -> tuple[int, float]:
    """The CUDA context's bytes and the allocator reserve's share of the allocated peak (the spec's
    ``overhead`` section, else the defaults, noted in ``assumptions``)."""
    context = spec.overhead.cuda_context
    if context is None:
        context = DEFAULT_CUDA_CONTEXT
        assumptions.append("CUDA context 512 MiB (outside PyTorch's allocator; set overhead.cuda_context)")
    reserve = spec.overhead.allocator_reserve
    if reserve is None:
        reserve = DEFAULT_ALLOCATOR_RESERVE
        assumptions.append("allocator reserve 12 % of the allocated peak (set overhead.allocator_reserve)")
    return context, reserve
