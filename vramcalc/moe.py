"""Mixture of experts: parameters of every expert, the active parameters per token, routed activations.

Modelled on Hugging Face's ``MixtralSparseMoeBlock`` (transformers 4.x/5.x, ``modeling_mixtral.py``):
a bias-free router ``gate`` (hidden -> experts), ``experts`` SwiGLU MLPs of ``expert_ffn_size``
(``w1``/``w3`` hidden -> ffn, ``w2`` ffn -> hidden) of which ``experts_per_token`` (top-k) run for each
token, plus ``shared_experts`` that every token passes through (DeepSeek-MoE; a Qwen2-MoE shared expert
of width n x moe_intermediate_size is n shared experts here). Layer i (0-based) is a MoE layer when
``(i + 1) % moe_layer_frequency == 0`` (Qwen2-MoE's ``decoder_sparse_step``), so there are
``layers // moe_layer_frequency`` of them; the others keep a dense MLP of ``ffn_size``.

Routed tokens: dropless routing (Mixtral) sends every token to exactly k experts, T x k rows. With a
``capacity_factor`` (Switch Transformer, Fedus et al. 2021, eq. 3) each expert holds at most
``ceil(capacity_factor x T x k / experts)`` rows and the buffers are allocated at that size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from vramcalc.errors import SpecError

if TYPE_CHECKING:
    from vramcalc.activations import Dtypes
    from vramcalc.model import ModelShape
    from vramcalc.spec import ModelSpec

#: Mixtral's num_experts_per_tok, the default top-k.
DEFAULT_TOP_K = 2
#: Bytes of an int64 index (top-k expert ids, gathered token positions).
INDEX = 8
FP32 = 4


@dataclass(frozen=True)
class MoeShape:
    """The expert layout of a mixture-of-experts model (all fields filled)."""

    experts: int
    top_k: int
    shared: int
    expert_ffn: int
    frequency: int
    capacity_factor: float | None


def resolve_moe(spec: ModelSpec, ffn: int, notes: list[str]) -> MoeShape | None:
    """MoE keys of the spec with defaults (each recorded); None for a dense model."""
    if spec.experts is None:
        return None
    top_k = spec.experts_per_token
    if top_k is None:
        top_k = min(DEFAULT_TOP_K, spec.experts)
        notes.append(f"experts_per_token not given: {top_k} (Mixtral's top-2)")
    expert_ffn = spec.expert_ffn_size or ffn
    if spec.expert_ffn_size is None:
        notes.append(f"expert_ffn_size not given: {expert_ffn} (ffn_size)")
    moe = MoeShape(
        experts=spec.experts,
        top_k=top_k,
        shared=spec.shared_experts or 0,
        expert_ffn=expert_ffn,
        frequency=spec.moe_layer_frequency or 1,
        capacity_factor=spec.capacity_factor,
    )
    if spec.layers is not None and moe.frequency > spec.layers:
        raise SpecError(f"model.moe_layer_frequency: {moe.frequency} is more than layers ({spec.layers}): no MoE layer")
    return moe


def moe_layers(shape: ModelShape) -> int:
    """Number of MoE layers (0 for a dense model)."""
    return shape.layers // shape.moe.frequency if shape.moe else 0


def expert_params(shape: ModelShape) -> int:
    """One expert: an MLP of the model's kind at ``expert_ffn`` width (SwiGLU: 3 x hidden x ffn)."""
    from vramcalc.model import mlp_params

    assert shape.moe is not None
    return mlp_params(replace(shape, ffn=shape.moe.expert_ffn))


def moe_param_delta(shape: ModelShape) -> int:
    """Parameters a MoE model has beyond the same model with dense MLPs in every layer.

    Per MoE layer: (experts + shared) x expert MLP + router (hidden x experts, no bias) - dense MLP.
    """
    from vramcalc.model import mlp_params

    if shape.moe is None:
        return 0
    m = shape.moe
    per_layer = (m.experts + m.shared) * expert_params(shape) + shape.hidden * m.experts
    return moe_layers(shape) * (per_layer - mlp_params(shape))


def active_params(shape: ModelShape, n_params: int) -> int:
    """Parameters a token passes through: all but the (experts - top_k) unused experts of each MoE layer.

    Mixtral-8x7B: 46.7B total, 12.9B active (Mistral AI, "Mixtral of experts", 2023/2024).
    """
    if shape.moe is None:
        return n_params
    return n_params - moe_layers(shape) * (shape.moe.experts - shape.moe.top_k) * expert_params(shape)


def routed_rows(moe: MoeShape, n_tokens: int) -> int:
    """Token rows the experts of one layer process: T x k (dropless), or experts x capacity."""
    if moe.capacity_factor is None:
        return n_tokens * moe.top_k
    capacity = math.ceil(moe.capacity_factor * n_tokens * moe.top_k / moe.experts)
    return moe.experts * capacity


def _dense_saved(shape: ModelShape, n_tokens: int, dt: Dtypes, ffn: int) -> int:
    from vramcalc.activations import mlp_saved_bytes

    return mlp_saved_bytes(replace(shape, ffn=ffn), n_tokens, dt)


def saved_delta_per_layer(shape: ModelShape, n_tokens: int, dt: Dtypes) -> int:
    """Training: bytes one MoE layer saves for backward beyond the dense MLP it replaces.

    Router: logits (T x E, compute dtype), fp32 softmax (T x E), top-k ids (int64) and the renormalised
    fp32 weights (T x k) plus their sum. Per routed row: the gathered hidden state (saved by w1/w3), the
    expert's MLP tensors (as a dense MLP of expert width), the w2 output and its routing weight (saved by
    the weighting multiply) and its row index (int64). Shared experts: a dense MLP each over all tokens.
    """
    if shape.moe is None:
        return 0
    m, c, h = shape.moe, dt.compute, shape.hidden
    rows = routed_rows(m, n_tokens)
    router = n_tokens * (m.experts * (c + FP32) + m.top_k * (INDEX + FP32) + FP32)
    per_row = 2 * h * c + c + INDEX
    experts = rows * per_row + _dense_saved(shape, rows, dt, m.expert_ffn)
    shared = m.shared * _dense_saved(shape, n_tokens, dt, m.expert_ffn)
    return router + experts + shared - _dense_saved(shape, n_tokens, dt, shape.ffn)


def saved_delta(shape: ModelShape, n_tokens: int, dt: Dtypes) -> int:
    """Training: the MoE layers' extra saved bytes over the whole stack."""
    return moe_layers(shape) * saved_delta_per_layer(shape, n_tokens, dt)


def transient_mlp_bytes(shape: ModelShape, n_tokens: int, c: int) -> int:
    """No-grad forward: the largest MLP-side tensors alive at once in one layer.

    Dense: ffn-wide gate/up/product (3 for gated MLPs, 2 otherwise). MoE, as fused MoE kernels allocate
    (vLLM ``fused_moe``: gate_up cache of 2 x ffn, activation cache of ffn and the per-row output of
    hidden for every routed row; HF's per-expert loop needs less): routed rows x (3 x ffn + hidden),
    the router logits and fp32 softmax, and the shared experts run on all tokens.
    """
    if shape.moe is None or moe_layers(shape) == 0:
        return n_tokens * shape.ffn * c * (3 if shape.gated else 2)
    m = shape.moe
    rows = routed_rows(m, n_tokens)
    routed = rows * (3 * m.expert_ffn + shape.hidden) * c + n_tokens * m.experts * (c + FP32)
    shared = n_tokens * m.expert_ffn * c * 3 if m.shared else 0
    dense = n_tokens * shape.ffn * c * (3 if shape.gated else 2) if moe_layers(shape) < shape.layers else 0
    return max(routed + shared, dense)
