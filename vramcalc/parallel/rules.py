"""What the per-rank model refuses: combinations it does not cover, and shapes a plan cannot split.

Pure. Each refusal is one :class:`SpecError` naming the key (``parallel.tensor``, ``workload.versions.torch``)
rather than an estimate of a run the model does not describe.
"""

from __future__ import annotations

from vramcalc.choices import Architecture, Attention, Checkpointing, Mode
from vramcalc.core.shape import ModelShape
from vramcalc.errors import SpecError
from vramcalc.spec.models import Spec
from vramcalc.spec.parallel import ParallelSpec
from vramcalc.spec.versions import zeroes_gradients_in_place

LLM_KEYS = ("quantization", "adapter", "use_cache", "prompt_len", "max_new_tokens", "runtime", "kv_cache_dtype")
TRAIN_ONLY = ("zero", "fsdp", "distributed_optimizer", "micro_batches")


def check_supported(spec: Spec, section: ParallelSpec) -> None:
    """Combinations the per-rank model does not cover are refused rather than estimated wrongly."""
    model, wl = spec.model, spec.workload
    key = "parallel" if spec.parallel is not None else f"workload.precision: {wl.precision.value}"
    if model.architecture is Architecture.resnet:
        raise SpecError(f"{key}: not modelled for architecture: resnet (transformers only)")
    if model.experts is not None:
        raise SpecError(f"{key}: not modelled for mixture-of-experts models (no expert parallelism)")
    given = [name for name in LLM_KEYS if getattr(wl, name) is not None]
    if spec.parallel is not None and wl.adapter is not None:  # LoRA / QLoRA: vramcalc/families/lora_ranks.py
        given = [name for name in given if name not in ("adapter", "quantization")]
    if given and wl.mode is Mode.train:  # serving (mode: inference) is vramcalc/families/serving.py
        raise SpecError(f"{key}: not modelled together with workload.{given[0]} in training (an LLM workload key)")
    if wl.mode is Mode.train and zeroes_gradients_in_place(wl.versions):  # gradients zeroed in place: one GPU only
        raise SpecError(
            f"workload.versions.torch: {(wl.versions or {})['torch']} is not modelled with {key} (one GPU only)"
        )
    if wl.mode is Mode.inference:
        train_keys = [k for k in TRAIN_ONLY if getattr(section, k) is not None]
        if "cpu" in (section.offload.optimizer, section.offload.params, section.offload.activations):
            train_keys.append("offload")
        if train_keys:
            raise SpecError(f"parallel.{train_keys[0]}: only valid with mode: train")
    elif section.offload.activations == "cpu" and wl.gradient_checkpointing is not Checkpointing.full:
        raise SpecError("parallel.offload.activations: offloads the checkpoints; needs gradient_checkpointing: full")


def check_shape(spec: Spec, section: ParallelSpec, shape: ModelShape) -> None:
    """Divisibility rules: heads, kv_heads and ffn_size by tensor; layers by pipeline; tokens by context."""
    t, p = section.tensor, section.pipeline
    for what, value in (("heads", shape.heads), ("kv_heads", shape.kv_heads), ("ffn_size", shape.ffn)):
        if what == "kv_heads" and spec.workload.mode is Mode.inference and value and t % value == 0:
            continue  # serving replicates each KV head over tensor / kv_heads ranks (vLLM's QKVParallelLinear)
        if value % t:
            extra = (
                " and is not a multiple of it" if what == "kv_heads" and spec.workload.mode is Mode.inference else ""
            )
            raise SpecError(f"parallel.tensor: {t} does not divide {what} ({value}){extra}")
    if p > 1 and shape.architecture is Architecture.encoder_decoder:
        raise SpecError("parallel.pipeline: not modelled for encoder-decoder models")
    chunks = p * (section.virtual_stages or 1)
    if p > shape.layers:
        raise SpecError(f"parallel.pipeline: {p} is more than layers ({shape.layers})")
    if shape.layers % chunks and not section.uneven_pipeline:
        what = f"{p}" if chunks == p else f"{p} x virtual_stages {section.virtual_stages}"
        raise SpecError(
            f"parallel.pipeline: {what} does not divide layers ({shape.layers}); set uneven_pipeline: true "
            "for stages of up to ceil(layers / pipeline)"
        )
    if section.context > 1 and (spec.workload.seq_len is None or spec.workload.attention is Attention.eager):
        raise SpecError("parallel.context: context parallelism needs a text model with attention: sdpa")
