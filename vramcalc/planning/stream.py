"""The weights (and KV cache) a decode step streams, from a spec: the input of ``vramcalc bandwidth --spec``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from vramcalc.errors import UnitError
from vramcalc.hardware.weights import ExpertStream, Weights, weights_from_flags

if TYPE_CHECKING:
    from vramcalc.core.shape import ModelShape
    from vramcalc.spec.models import Spec


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

    if shape.moe is None or not moe_layers(shape) or spec.parallel is not None:
        return None  # a parallel spec's parameters are one GPU's share: the expert split is not known here
    per_expert = expert_params(shape)
    param_bytes = DTYPES[spec.workload.precision].param
    q = spec.workload.quantization
    if q is None:
        n_bytes = per_expert * param_bytes
    else:
        wb = quantization.weight_bytes(shape, q, weight_count(shape, []), param_bytes)
        n_bytes = round(Fraction(wb.quantized_bytes, max(1, wb.quantized_params)) * per_expert)
    return ExpertStream(shape.moe.experts, shape.moe.top_k, moe_layers(shape), per_expert, n_bytes)


def weights_from_spec(path: str | Path | Spec) -> Weights:
    """Weights (the estimate's parameter bytes) and, for an inference spec, KV-cache bytes per token;
    from a spec file or an already loaded :class:`~vramcalc.spec.models.Spec`."""
    from vramcalc.choices import Architecture, KvCacheDtype, Mode
    from vramcalc.core.params import active_params
    from vramcalc.core.resolve import resolve_model
    from vramcalc.core.workload import DTYPES
    from vramcalc.engine import estimate
    from vramcalc.llm.kvcache import self_attention_layers, shape_bytes_per_token
    from vramcalc.spec.load import load_spec_arg

    found = None
    if isinstance(path, str | Path):
        (spec, found), label = load_spec_arg(path), Path(path).name
    else:
        spec, label = path, "spec"
    result = estimate(spec)
    workload = spec.workload
    per_token, notes = None, [found] if found else []
    shape, _ = resolve_model(spec.model, workload)
    experts = expert_stream(shape, spec)
    if workload.mode is not Mode.inference:
        notes.append("spec is a training workload: no KV cache read")
    else:
        if shape.architecture is Architecture.encoder:
            notes.append("encoder-only model: no KV cache (it does not decode token by token)")
        else:
            # the KV cache's own bytes per token: MLA's latent, the spec's kv_cache_dtype (vramcalc/llm/kvcache.py)
            kv_dtype = workload.kv_cache_dtype or KvCacheDtype.auto
            per_token = shape_bytes_per_token(shape, kv_dtype, DTYPES[workload.precision].compute)
            if shape.sliding_layers(self_attention_layers(shape)):
                notes.append(
                    "sliding-window layers read at most their window of the context; the KV read below counts "
                    "every layer over the whole context (an upper bound)"
                )
    return Weights(
        weights_bytes=result.components["parameters"],
        n_params=result.params,
        dtype=workload.precision.value,
        origin=f"{label}: parameters of {result.name}",
        batch=workload.batch_size,
        context_tokens=workload.seq_len,
        kv_bytes_per_token=per_token,
        notes=tuple(notes),
        experts=experts,
        active_params=active_params(shape, result.params) if experts is not None else None,
    )


def select_weights(
    spec: str | Path | Spec | None, *, params: str | None, dtype: str | None, weights: str | None
) -> Weights | None:
    """Weights from a spec (a file or a loaded one) or from --params/--dtype/--weights (never both); None
    when none is given."""
    if spec is not None:
        if params is not None or dtype is not None or weights is not None:
            raise UnitError("give either a spec file or --params/--dtype/--weights, not both")
        return weights_from_spec(spec)
    return weights_from_flags(params, dtype, weights)
