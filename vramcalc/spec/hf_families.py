"""Dense decoder families of transformers configs mapped onto spec keys, tensor for tensor (the
mixture-of-experts families are in hf_moe.py).

Each converter reads the fields of one transformers configuration class (``LlamaConfig``, ``Gemma2Config``,
``DeepseekV3Config``, ...) with that class's defaults for absent fields, and returns the ``model`` mapping
of a spec. What changes no parameter or memory vramcalc counts (rotary variants, soft-capping, scaling
factors) is left out; what does and cannot be expressed is refused with the field named, never guessed.
"""

from __future__ import annotations

from collections.abc import Callable

from vramcalc.spec.hf_heads import decoder_head, head_kind
from vramcalc.spec.hf_reader import MAX_POSITIONS, Imported, Model, Reader
from vramcalc.units import quoted

Converter = Callable[[Reader], Imported]


#: ``activation_function`` values (transformers' ACT2FN names) and the MLP kind they make: ``gelu_new`` is written
#: out in Python (``gelu_tanh``: its chain's intermediates); ``gelu_pytorch_tanh`` (``GELUTanh``:
#: ``nn.functional.gelu(approximate="tanh")``) is one kernel, which holds what the exact GELU's does. The other
#: Python chains (``gelu_fast``, ``gelu_python``) keep other sets of intermediates (a traced GPT-2 step: counted as
#: ``gelu_tanh`` and ``gelu``, 16 % and 17 % under), so they are refused rather than counted as a kind they are not.
ACTIVATIONS = {
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu",
    "gelu": "gelu",
    "silu": "gelu",  # one kernel that saves its input, as the exact GELU's
    "relu": "relu",
}


def _activation(r: Reader, name: str, default: str) -> str:
    """The MLP kind of an activation field (no parameters depend on it; unknown ones are refused)."""
    value = r.text(name, default)
    if value not in ACTIVATIONS:
        raise r.fail(name, f"{quoted(value)} is not supported ({', '.join(ACTIVATIONS)})")
    return ACTIVATIONS[value]


def _dropout(r: Reader, residual: str, attention: str, default: float) -> tuple[float, list[str]]:
    """The spec's one dropout rate from a family's residual and attention rates (their config class's
    ``default``): where they differ, the larger, which counts the masks of both sites (an upper bound, said)."""
    rate, probs = r.fraction(residual, default), r.fraction(attention, default)
    if rate == probs:
        return rate, []
    return max(rate, probs), [
        f"{attention} {probs} and {residual} {rate}: dropout {max(rate, probs)} counted at both sites (an upper "
        "bound on the masks training keeps)"
    ]


def _sliding(r: Reader, default: int | None = None, pattern: int = 0) -> Imported:
    """Sliding-window attention as spec keys (none without a window): ``layer_types`` (transformers 5) where
    given, else ``sliding_window`` on every layer, or every layer but each ``pattern``-th (Gemma 2: 2,
    Gemma 3: 6); layers that slide only after the first few are ``full_attention_layers`` (Qwen2)."""
    window = r.count("sliding_window", default=default, minimum=0) or None  # 0: none (Qwen2-MoE)
    types = r.names("layer_types")
    if types:
        sliding = [kind == "sliding_attention" for kind in types]
        if window is None or not any(sliding):
            return {}, []
        full = sliding.index(True)
        if full and sliding == [False] * full + [True] * (len(sliding) - full):  # Qwen2: max_window_layers
            return {"sliding_window": window, "full_attention_layers": full}, []
        pattern = 0 if all(sliding) else sliding.index(False) + 1
        if pattern and sliding != [(i + 1) % pattern != 0 for i in range(len(sliding))]:
            return {}, ["layer_types: irregular sliding layers; KV cache counted in full"]
    elif window is None:
        return {}, []
    return {"sliding_window": window} | ({"sliding_window_pattern": pattern} if pattern else {}), []


def _qwen_window(r: Reader) -> Imported:
    """Qwen2/Qwen3: a window only with ``use_sliding_window``, on layers from ``max_window_layers`` on."""
    if r.names("layer_types"):
        return _sliding(r)
    if r.flag("use_sliding_window", False) and r.count("sliding_window", default=None, minimum=0):
        full = r.count("max_window_layers", default=0, minimum=0) or 0
        if full == 0:
            return _sliding(r)
        layers = r.count("num_hidden_layers", default=None, minimum=1)
        if layers is not None and full >= layers:  # every layer index is below it: none slides
            return {}, []
        fields, notes = _sliding(r)
        return fields | {"full_attention_layers": full}, notes
    return {}, []


def _rope_notes(r: Reader) -> list[str]:
    """What partial rotary (``partial_rotary_factor``, ``rotary_pct``) leaves out: no parameters depend on it."""
    notes: list[str] = []
    for name in ("partial_rotary_factor", "rotary_pct"):
        value = r.config.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool) and value != 1:
            notes.append(f"{name} {value}: rotary on part of each head (no parameters)")
    return notes


def _base(r: Reader, *, tie: bool, head_dim: int | None = None) -> Imported:
    """The fields every Llama-like config has, with the class defaults of ``LlamaConfig``."""
    heads = r.need("num_attention_heads")
    hidden = r.need("hidden_size")
    model: Model = {
        "architecture": "decoder",
        "layers": r.need("num_hidden_layers"),
        "hidden_size": hidden,
        "heads": heads,
        "kv_heads": r.count("num_key_value_heads", default=heads),
        "ffn_size": r.need("intermediate_size"),
        "mlp": "swiglu",
        "norm": "rmsnorm",
        "position": "rotary",
        "vocab_size": r.need("vocab_size"),
        "tie_embeddings": r.flag("tie_word_embeddings", tie),
        "bias": False,
        "dropout": 0.0,
    }
    dim = r.count("head_dim", default=head_dim)
    if dim is not None and dim * heads != hidden:
        model["head_dim"] = dim
    max_positions = r.count("max_position_embeddings", default=None, maximum=MAX_POSITIONS)
    if max_positions is not None:
        model["max_position_embeddings"] = max_positions
    model.update(decoder_head(r, head_kind(r, "lm")))
    return model, _rope_notes(r)


def _biases(r: Reader, model: Model, *, mlp: bool = False) -> Model:
    """``attention_bias`` on q, k, v and o (the attention classes of Llama, Qwen3, Gemma, OLMo read it);
    ``mlp``: the MLP reads ``mlp_bias`` too (``LlamaMLP``; the other families' MLPs are bias-free)."""
    if r.flag("attention_bias", False):
        model["attention_bias"] = True
    if mlp and r.flag("mlp_bias", False):
        model["mlp_bias"] = True
    return model


def mistral(r: Reader) -> Imported:
    """Mistral (and Mixtral's attention): ``MistralAttention`` and ``MistralMLP`` build bias-free linears
    whatever ``attention_bias`` or ``mlp_bias`` a config carries (modeling_mistral.py, modeling_mixtral.py)."""
    model, notes = _base(r, tie=False)
    window, said = _sliding(r)  # Mistral v0.1's 4,096
    return model | window, notes + said


def llama(r: Reader) -> Imported:
    """Llama: ``LlamaAttention`` reads ``attention_bias`` and ``LlamaMLP`` ``mlp_bias`` (modeling_llama.py)."""
    model, notes = mistral(r)
    return _biases(r, model, mlp=True), notes


def qwen2(r: Reader) -> Imported:
    model, notes = _base(r, tie=False)
    model["qkv_bias"] = True  # Qwen2Attention: q/k/v with bias, o_proj without
    window, said = _qwen_window(r)
    return model | window, notes + said


def qwen3(r: Reader, head_dim: int | None = 128) -> Imported:
    """Qwen3 (``Qwen3Config``: head_dim 128). ``Qwen3MoeConfig`` has no head_dim field: its attention takes
    ``getattr(config, "head_dim", hidden_size // num_attention_heads)`` (modeling_qwen3_moe.py,
    ``Qwen3MoeAttention``), so its converter passes None."""
    model, notes = _base(r, tie=False, head_dim=head_dim)
    model = {**_biases(r, model), "qk_norm": "head"}
    window, said = _qwen_window(r)
    return model | window, notes + said


def gemma(r: Reader) -> Imported:
    model, notes = _base(r, tie=True, head_dim=256)
    return {**_biases(r, model), "mlp": "geglu"}, notes


def _softcaps(r: Reader, capped: bool) -> dict[str, bool]:
    """Gemma's tanh soft-capping of the attention scores and of the logits: on where the field is a number, off
    where it is null, the config class's default where it is absent (``capped``: Gemma 2's 50.0 and 30.0; Gemma
    3's None)."""
    caps = {}
    for field, key in (("attn_logit_softcapping", "attention_softcap"), ("final_logit_softcapping", "logit_softcap")):
        value = r.config.get(field, 1.0 if capped else None)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
            raise r.fail(field, f"expected a positive number or null, got {quoted(value)}")
        caps[key] = value is not None
    return caps


def gemma2(r: Reader) -> Imported:
    model, notes = gemma(r)
    window, said = _sliding(r, default=4096, pattern=2)
    return {**model, "norms_per_layer": 4, **window, **_softcaps(r, True)}, notes + said


def gemma3_text(r: Reader) -> Imported:
    model, notes = gemma(r)
    window, said = _sliding(r, default=4096, pattern=r.count("sliding_window_pattern", default=6) or 6)
    return {**model, "norms_per_layer": 4, "qk_norm": "head", **window, **_softcaps(r, False)}, notes + said


def olmo(r: Reader) -> Imported:
    """OLMo 1: LayerNorm without weights before attention, MLP and the LM head."""
    model, notes = _base(r, tie=False)
    return {**_biases(r, model), "norm": "layernorm", "norm_weights": False}, notes


def olmo2(r: Reader) -> Imported:
    """OLMo 2: RMSNorm on the whole q and k projections; norms after attention and after the MLP."""
    model, notes = _base(r, tie=False)
    return {**_biases(r, model), "qk_norm": "projection"}, notes


def phi3(r: Reader) -> Imported:
    model, notes = _base(r, tie=False)
    window, said = _sliding(r)
    return {**model, "fused_qkv": True, **window}, notes + said  # qkv_proj and gate_up_proj


def starcoder2(r: Reader) -> Imported:
    model, notes = _base(r, tie=True)
    mlp = _activation(r, "hidden_act", "gelu_pytorch_tanh")  # c_fc -> act -> c_proj
    dropout, said = _dropout(r, "residual_dropout", "attention_dropout", 0.0)
    model.update(mlp=mlp, norm="layernorm", bias=r.flag("use_bias", True), dropout=dropout)
    window, more = _sliding(r)
    return model | window, notes + said + more
