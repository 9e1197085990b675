"""The weights (and KV cache) a decode step streams, from a spec: the input of ``vramcalc bandwidth --spec``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from vramcalc.errors import UnitError
from vramcalc.hardware.weights import WEIGHT_DTYPES, ExpertStream, Weights, weights_from_flags

if TYPE_CHECKING:
    from vramcalc.core.shape import ModelShape
    from vramcalc.spec.models import Spec, Workload


def expert_stream(shape: ModelShape, spec: Spec) -> ExpertStream | None:
    """The routed experts of a mixture-of-experts model, sized by vramcalc's own parameter split
    (:func:`vramcalc.core.params.expert_params`, :func:`vramcalc.core.shape.moe_layers`); None for a dense
    model. An expert's bytes: its parameters at the parameter dtype; quantized, at the model's mean bytes
    per quantized weight (experts are quantized like every other linear layer)."""
    from fractions import Fraction

    from vramcalc.core.params import expert_params
    from vramcalc.core.shape import moe_layers
    from vramcalc.core.workload import DTYPES, weight_count
    from vramcalc.llm import quantization
    from vramcalc.spec.llm import litgpt_gptq
    from vramcalc.stacks.layouts import quant_layout

    if shape.moe is None or not moe_layers(shape) or spec.parallel is not None:
        return None  # a parallel spec's parameters are one GPU's share: the expert split is not known here
    per_expert = expert_params(shape)
    param_bytes = DTYPES[spec.workload.precision].param
    q = spec.workload.quantization
    if q is None:
        n_bytes = per_expert * param_bytes
    else:
        layout = quant_layout(q.method, litgpt_gptq(spec.workload))
        wb = quantization.weight_bytes(shape, q, weight_count(shape), param_bytes, layout)
        n_bytes = round(Fraction(wb.quantized_bytes, max(1, wb.quantized_params)) * per_expert)
    return ExpertStream(shape.moe.experts, shape.moe.top_k, moe_layers(shape), per_expert, n_bytes)


def weights_from_spec(
    path: str | Path | Spec, tensor_parallel: int | None = None, dtype: str | None = None, label: str = "spec"
) -> Weights:
    """Weights (the estimate's parameter bytes, less the model's buffers: a RoPE or causal-mask table is
    not read whole per token) and, for an inference spec, KV-cache bytes per token;
    from a spec file or an already loaded :class:`~vramcalc.spec.models.Spec` (named ``label``). With a
    ``parallel`` section (or ``tensor_parallel``, which gives it ``tensor: N``) both are one GPU's share
    (:func:`_per_gpu`); with ``dtype``, the weights are stored in it (:func:`with_weight_dtype`)."""
    from vramcalc.choices import Architecture, Mode
    from vramcalc.core.params import active_params
    from vramcalc.core.workload import DTYPES
    from vramcalc.families import estimate
    from vramcalc.families.resolve import resolve_model
    from vramcalc.llm.kvcache import self_attention_layers
    from vramcalc.spec.load import load_spec_arg
    from vramcalc.spec.models import is_generation
    from vramcalc.stacks.llamacpp import bytes_per_token

    found = None
    if isinstance(path, str | Path):
        (spec, found), label = load_spec_arg(path), Path(path).name
    else:
        spec = path
    if dtype is not None:
        spec = with_weight_dtype(spec, dtype)
    if tensor_parallel is not None:
        spec = _with_tensor(spec, tensor_parallel)
    if spec.parallel is not None:
        return _per_gpu(spec, label, found)
    result = estimate(spec)
    workload = spec.workload
    per_token, notes = None, [found] if found else []
    # a ResNet has no transformer shape: no experts and no KV cache
    shape = None if spec.model.architecture is Architecture.resnet else resolve_model(spec.model, workload)[0]
    experts = expert_stream(shape, spec) if shape is not None else None
    if workload.mode is not Mode.inference:
        notes.append("spec is a training workload: no KV cache read")
    elif shape is None:
        notes.append("a convolutional network: no KV cache")
    else:
        if shape.architecture is Architecture.encoder:
            notes.append("encoder-only model: no KV cache (it does not decode token by token)")
        elif workload.use_cache is False and is_generation(workload):
            notes.append(NO_CACHE_NOTE)
        else:
            # the KV cache's own bytes per token: MLA's latent, the spec's kv_cache_dtype (vramcalc/llm/kvcache.py),
            # or llama.cpp's cache_type_k / cache_type_v for a spec that runs in llama.cpp (vramcalc/stacks/llamacpp.py)
            per_token = bytes_per_token(shape, workload, DTYPES[workload.precision].compute)
            if shape.sliding_layers(self_attention_layers(shape)):
                notes.append(
                    "sliding-window layers read at most their window of the context; the KV read below counts "
                    "every layer over the whole context (an upper bound)"
                )
    return Weights(
        weights_bytes=result.components["parameters"] - (shape.code.buffer_bytes if shape is not None else 0),
        n_params=result.params,
        dtype=stored_dtype(workload),
        origin=f"{label}: parameters of {result.name}{_stored(workload)}",
        batch=workload.batch_size,
        context_tokens=workload.seq_len,
        kv_bytes_per_token=per_token,
        notes=tuple(notes),
        experts=experts,
        active_params=active_params(shape, result.params) if experts is not None and shape is not None else None,
    )


def stored_dtype(workload: Workload) -> str:
    """What the weights are stored in: the quantization method of a quantized workload (its linear layers;
    the rest is at the precision), else the precision. An ``fp8`` one puts the roofline on FP8 compute."""
    q = workload.quantization
    return q.method.value if q is not None else workload.precision.value


def _stored(workload: Workload) -> str:
    """What the origin of a quantized spec's weights adds: how its linear layers are stored."""
    q = workload.quantization
    return f"; {q.method.value} linear layers, the rest {workload.precision.value}" if q is not None else ""


def select_weights(
    spec: str | Path | Spec | None,
    *,
    params: str | None,
    dtype: str | None,
    weights: str | None,
    tensor_parallel: int | None = None,
    label: str = "spec",
) -> Weights | None:
    """Weights from a spec (a file, or a loaded one named ``label``), in ``dtype`` when given
    (:func:`with_weight_dtype`), or from --params/--dtype/--weights (never both); None when none is
    given. ``tensor_parallel``: one GPU's share of N (--tensor-parallel)."""
    if tensor_parallel is not None and tensor_parallel < 1:
        raise UnitError(f"--tensor-parallel: {tensor_parallel} must be 1 or more")
    if spec is not None:
        if params is not None or weights is not None:
            raise UnitError("give either a spec file or --params/--weights, not both")
        return weights_from_spec(spec, tensor_parallel, dtype, label)
    found = weights_from_flags(params, dtype, weights)
    if found is None or tensor_parallel is None or tensor_parallel == 1:
        return found
    return split_flags(found, tensor_parallel)


#: ``--dtype`` with a spec: the dtypes a whole model is loaded in are its precision; the 8- and 4-bit ones
#: quantize its linear layers by the method of that name (fp8; bitsandbytes' int8; torchao's int4), as the
#: quantization layouts compute them, and the rest stays at the precision.
PRECISION_DTYPES = ("fp32", "bf16", "fp16")


def with_weight_dtype(spec: Spec, dtype: str) -> Spec:
    """``spec`` with its weights stored in ``dtype`` (one of :data:`WEIGHT_DTYPES`): ``precision: dtype``
    for fp32, bf16 and fp16, else ``quantization: dtype``, validated like the file."""
    from vramcalc.spec.load import override_workload

    if dtype not in WEIGHT_DTYPES:
        raise UnitError(f"dtype: unknown {dtype!r} (one of {', '.join(WEIGHT_DTYPES)})")
    key = "precision" if dtype in PRECISION_DTYPES else "quantization"
    return override_workload(spec, f"--dtype {dtype}", **{key: dtype if key == "precision" else {"method": dtype}})


def split_flags(found: Weights, tensor: int) -> Weights:
    """--params/--weights over ``tensor`` GPUs: each streams ``1 / tensor`` of the bytes (its column- and
    row-parallel shares; the replicated norms are not known without a model and are left out)."""
    from dataclasses import replace

    return replace(
        found,
        weights_bytes=-(-found.weights_bytes // tensor),
        n_params=-(-found.n_params // tensor) if found.n_params is not None else None,
        origin=f"{found.origin}, 1/{tensor} per GPU (tensor parallel {tensor})",
        notes=(*found.notes, TP_NOTE),
    )


#: ``use_cache: false`` generation: no cache is read, and each token is a whole forward.
NO_CACHE_NOTE = (
    "use_cache: false: no KV cache is read; every new token runs the whole sequence again, so a step takes "
    "longer than this weight-streaming bound"
)
#: What ``bandwidth`` leaves out with several GPUs.
TP_NOTE = (
    "tensor parallel: each GPU streams its share of the weights and KV cache per decode step; the two "
    "all-reduces per layer (batch x hidden elements each) are not modelled (latency-bound on NVLink)"
)


def _with_tensor(spec: Spec, tensor: int) -> Spec:
    """``spec`` served with ``tensor`` GPUs of tensor parallelism (refused when it has its own section)."""
    from vramcalc.spec.parallel import ParallelSpec

    if spec.parallel is not None:
        raise UnitError("--tensor-parallel: the spec has a parallel section; set parallel.tensor there")
    return spec.model_copy(update={"parallel": ParallelSpec(tensor=tensor)})


def _per_gpu(spec: Spec, label: str, found: str | None) -> Weights:
    """One GPU's weights and KV bytes per token under the spec's parallel section. A decode step passes
    through the pipeline stages in turn, so its weights are one tensor-parallel rank's share of every
    stage: the most loaded stage's times ``pipeline``."""
    from vramcalc.choices import KvCacheDtype, Mode
    from vramcalc.core.workload import DTYPES
    from vramcalc.families import estimate
    from vramcalc.families.resolve import resolve_model
    from vramcalc.families.serving import rank_shape
    from vramcalc.llm.kvcache import shape_bytes_per_token
    from vramcalc.spec.models import is_generation

    result = estimate(spec)
    ranked = result.parallel
    assert ranked is not None and spec.parallel is not None
    t, p = ranked.plan.tensor, ranked.plan.pipeline
    wl = spec.workload
    notes = [found] if found else []
    per_token = None
    shape, _ = resolve_model(spec.model, wl)
    if wl.mode is Mode.inference and wl.use_cache is False and is_generation(wl):
        notes.append(NO_CACHE_NOTE)
    elif wl.mode is Mode.inference:
        kv_dtype = wl.kv_cache_dtype or KvCacheDtype.auto
        per_token = shape_bytes_per_token(rank_shape(shape, t), kv_dtype, DTYPES[wl.precision].compute)
    else:
        notes.append("spec is a training workload: no KV cache read")
    notes.append(TP_NOTE)
    if p > 1:
        notes.append(f"pipeline {p}: a token passes through the stages in turn (most loaded stage x {p})")
    return Weights(
        weights_bytes=(result.components["parameters"] - shape.code.buffer_bytes) * p,
        n_params=ranked.params_per_rank * p,
        dtype=stored_dtype(wl),
        origin=f"{label}: one GPU's share of {result.name}{_stored(wl)} (tensor {t} x pipeline {p})",
        batch=wl.batch_size,
        context_tokens=wl.seq_len,
        kv_bytes_per_token=per_token,
        notes=tuple(notes),
    )
