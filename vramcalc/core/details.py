"""The model keys that make a shape match its Hugging Face implementation tensor for tensor (biases per
projection, q/k norms, norm counts, embedding extras, head bias, sliding windows, MLA), resolved with
their defaults. A default that fills a gap the estimate depends on is recorded as an assumption.
"""

from __future__ import annotations

from typing import Any

from vramcalc.choices import Architecture, Head, QkNorm
from vramcalc.core.shape import MlaShape
from vramcalc.spec.models import ModelSpec

#: DeepSeek-V2's config defaults (transformers ``DeepseekV2Config``): rotary and non-rotary parts of each
#: query/key head, and the value head width.
DEFAULT_QK_ROPE_HEAD_DIM = 64
DEFAULT_QK_NOPE_HEAD_DIM = 128
DEFAULT_V_HEAD_DIM = 128
#: Norms in a pre-LN block: one before attention, one before the MLP.
DEFAULT_NORMS_PER_LAYER = 2


def resolve_details(spec: ModelSpec, arch: Architecture, head: Head) -> tuple[dict[str, Any], list[str]]:
    """Fields of :class:`~vramcalc.core.shape.ModelShape` beyond the basic shape, and the defaults filled."""
    notes: list[str] = []
    norms = spec.norms_per_layer
    if norms is None:
        norms = DEFAULT_NORMS_PER_LAYER
        if spec.parallel_block:
            notes.append(
                "norms_per_layer not given: 2 (a norm for each parallel branch, as GPT-NeoX; Falcon-7B, GPT-J "
                "and Phi-2 have 1)"
            )
    head_bias = spec.head_bias
    if head_bias is None:
        # Decoders' sequence-classification heads (``score`` of Llama, GPT-2, Mistral, Qwen2) have no bias;
        # token-classification and QA heads, and encoders' classifiers, have one.
        head_bias = not (arch is Architecture.decoder and head is Head.classification)
        if head in (Head.classification, Head.token_classification, Head.question_answering):
            notes.append(f"head_bias not given: {str(head_bias).lower()}")
    if spec.sliding_window is not None and spec.sliding_window_pattern is None and spec.full_attention_layers is None:
        notes.append(f"sliding_window_pattern not given: every layer attends over {spec.sliding_window:,} tokens")
    mla, mla_notes = _resolve_mla(spec)
    fields = {
        "attention_bias": spec.attention_bias,
        "qkv_bias": spec.qkv_bias,
        "mlp_bias": spec.mlp_bias,
        "lm_head_bias": bool(spec.lm_head_bias),
        "head_bias": head_bias,
        "qk_norm": spec.qk_norm or QkNorm.none,
        "norms_per_layer": norms,
        "parallel_block": bool(spec.parallel_block),
        "final_norm": spec.final_norm is not False,
        "norm_weights": spec.norm_weights is not False,
        "embedding_norm": bool(spec.embedding_norm),
        "attention_softcap": bool(spec.attention_softcap),
        "relative_attention_span": spec.relative_attention_span or 0,
        "relative_attention_terms": (spec.relative_attention_terms or 0) if spec.relative_attention_span else 0,
        "logit_softcap": bool(spec.logit_softcap),
        "position_offset": spec.position_offset or 0,
        "embedding_dim": spec.embedding_dim if spec.embedding_dim not in (None, spec.hidden_size) else 0,
        "sliding_window": spec.sliding_window or 0,
        "sliding_window_pattern": spec.sliding_window_pattern or 0,
        "full_attention_layers": spec.full_attention_layers or 0,
        "mla": mla,
    }
    return fields, notes + mla_notes


def _resolve_mla(spec: ModelSpec) -> tuple[MlaShape | None, list[str]]:
    if spec.kv_lora_rank is None:
        return None, []
    notes, picked = [], []
    for key, default in (
        ("qk_rope_head_dim", DEFAULT_QK_ROPE_HEAD_DIM),
        ("qk_nope_head_dim", DEFAULT_QK_NOPE_HEAD_DIM),
        ("v_head_dim", DEFAULT_V_HEAD_DIM),
    ):
        value = getattr(spec, key)
        if value is None:
            value = default
            notes.append(f"{key} not given: {default} (DeepSeek-V2's)")
        picked.append(value)
    rope, nope, v = picked
    mla = MlaShape(
        kv_lora_rank=spec.kv_lora_rank, q_lora_rank=spec.q_lora_rank or 0, rope_dim=rope, nope_dim=nope, v_dim=v
    )
    return mla, notes
