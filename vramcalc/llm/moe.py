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

from dataclasses import replace
from typing import TYPE_CHECKING

from vramcalc.core.shape import expert_rows, moe_layers, routed_rows
from vramcalc.units import FP32

if TYPE_CHECKING:
    from vramcalc.core.activations import Dtypes
    from vramcalc.core.shape import ModelShape

#: Bytes of an int64 index (top-k expert ids, gathered token positions).
INDEX = 8


def _dense_saved(shape: ModelShape, n_tokens: int, dt: Dtypes, ffn: int) -> int:
    from vramcalc.core.activations import mlp_saved_bytes

    return mlp_saved_bytes(replace(shape, ffn=ffn), n_tokens, dt)


def saved_delta_per_layer(shape: ModelShape, n_tokens: int, dt: Dtypes) -> int:
    """Training: bytes one MoE layer saves for backward beyond the dense MLP it replaces.

    Router: logits (T x E, compute dtype), fp32 softmax (T x E), top-k ids (int64) and the renormalised
    fp32 weights (T x k) plus their sum; where the router runs in fp32 (``ModelCode.router_fp32``), its
    fp32 copies of the input and the weight. Per routed row: the gathered hidden state (saved by w1/w3), the
    expert's MLP tensors (as a dense MLP of expert width), the w2 output and its routing weight (saved by
    the weighting multiply) and its row index (int64). Shared experts: a dense MLP each over all tokens, of the
    shared width; Qwen2-MoE's sigmoid gate on them has its multiply keep their output (tokens x hidden).
    """
    if shape.moe is None:
        return 0
    m, c, h = shape.moe, dt.compute, shape.hidden
    rows = expert_rows(shape, n_tokens)
    router = n_tokens * (m.experts * (c + FP32) + m.top_k * (INDEX + FP32) + FP32)
    if shape.code.router_fp32:  # the router's matmul keeps its fp32 copies of the input and its weight
        router += n_tokens * h * FP32 + m.experts * h * FP32
    per_row = 2 * h * c + c + INDEX
    experts = rows * per_row + _dense_saved(shape, rows, dt, m.expert_ffn)
    shared = m.shared * _dense_saved(shape, n_tokens, dt, m.shared_width)
    if m.shared and m.shared_gate:
        shared += n_tokens * h * c
    return router + experts + shared - _dense_saved(shape, n_tokens, dt, shape.ffn)


def saved_delta(shape: ModelShape, n_tokens: int, dt: Dtypes) -> int:
    """Training: the MoE layers' extra saved bytes over the whole stack."""
    return moe_layers(shape) * saved_delta_per_layer(shape, n_tokens, dt)


def transient_mlp_bytes(shape: ModelShape, n_tokens: int, c: int, grouped: bool = False) -> int:
    """No-grad forward: the largest MLP-side tensors alive at once in one layer.

    Dense: ffn-wide gate/up/product (3 for gated MLPs, 2 otherwise). MoE, as fused MoE kernels allocate
    (vLLM ``fused_moe``: gate_up cache of 2 x ffn, activation cache of ffn and the per-row output of
    hidden for every routed row; HF's per-expert loop of transformers 4 needs less): routed rows x (3 x ffn +
    hidden), the router logits and fp32 softmax, and the shared experts run on all tokens. ``grouped``:
    transformers 5's grouped GEMMs (``grouped_mm_experts_forward``, read at 5.25), which hold the gathered rows,
    their gate_up output, the activation and the product at once: rows x (4 x ffn + hidden), with the shared
    experts' output (tokens x hidden) waiting where they ran first (Qwen2-MoE); or the shared experts' MLP (3 x
    their total width), with the routed output waiting where they run last (``ModelCode.shared_experts_last``:
    Llama 4, DeepSeek). Traced: Mixtral, Qwen2-MoE, DeepSeek-V2, Llama 4.
    """
    if shape.moe is None or moe_layers(shape) == 0:
        return n_tokens * shape.ffn * c * (3 if shape.gated else 2)
    m = shape.moe
    rows = expert_rows(shape, n_tokens) if grouped else routed_rows(m, n_tokens)
    router = n_tokens * m.experts * (c + FP32)
    shared = n_tokens * m.shared * m.shared_width * c * 3  # one MLP of the shared experts' total width
    dense = n_tokens * shape.ffn * c * (3 if shape.gated else 2) if moe_layers(shape) < shape.layers else 0
    if grouped:
        routed = rows * (4 * m.expert_ffn + shape.hidden) * c + router
        if not m.shared:
            return max(routed, dense)
        if shape.code.shared_experts_last:  # the routed output waits (Llama 4: every expert's rows, not yet summed)
            waiting = (rows if shape.code.experts_see_all_tokens else n_tokens) * shape.hidden * c
            return max(routed, shared + waiting, dense)
        return max(routed + n_tokens * shape.hidden * c, shared, dense)  # the shared output waits
    routed = rows * (3 * m.expert_ffn + shape.hidden) * c + router
    return max(routed + shared, dense)
