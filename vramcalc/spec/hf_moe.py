"""Mixture-of-experts decoder families of transformers configs mapped onto spec keys, tensor for tensor:
Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek V2/V3, PhiMoE (Phi-3.5-MoE) and OLMoE.

As in hf_families.py, each converter reads its configuration class's fields with that class's defaults,
and refuses, with the field named, what the spec cannot express.
"""

from __future__ import annotations

from vramcalc.spec.hf_families import _base, _sliding, mistral, qwen2, qwen3
from vramcalc.spec.hf_reader import Imported, Model, Reader
from vramcalc.units import quoted


def mixtral(r: Reader) -> Imported:
    model, notes = mistral(r)
    model["experts"] = r.count("num_local_experts", "num_experts", default=8)
    model["experts_per_token"] = r.count("num_experts_per_tok", default=2)
    return model, notes


#: The spec keys of a mixture of experts (none of them in a model whose layers are all dense).
MOE_KEYS = (
    "experts",
    "experts_per_token",
    "expert_ffn_size",
    "shared_experts",
    "shared_expert_ffn_size",
    "shared_expert_gate",
    "moe_layer_frequency",
    "first_dense_layers",
)


def _dense(model: Model) -> Model:
    """The model without its MoE keys: a config whose layer layout leaves no sparse layer builds dense
    MLPs of ``intermediate_size`` in every layer."""
    return {key: value for key, value in model.items() if key not in MOE_KEYS}


def _moe_layers(r: Reader, model: Model, step_field: str) -> Model:
    """Qwen MoE layer layout: layer i is sparse when not in ``mlp_only_layers`` and (i + 1) % step == 0
    (``Qwen2MoeDecoderLayer``, ``Qwen3MoeDecoderLayer``); ``mlp_only_layers`` must be the first layers (a
    dense prefix) to be expressed, and indices at or past ``num_hidden_layers`` name no layer."""
    step = r.count(step_field, default=1) or 1
    layers = model["layers"]
    dense = sorted({i for i in r.numbers("mlp_only_layers") if i < layers})
    if dense != list(range(len(dense))):
        raise r.fail("mlp_only_layers", f"{quoted(dense)}: only the first layers can be dense in vramcalc")
    if not [i for i in range(len(dense), layers) if (i + 1) % step == 0]:
        return _dense(model)
    if step != 1:
        model["moe_layer_frequency"] = step
    if dense:
        model["first_dense_layers"] = len(dense)
    return model


def qwen2_moe(r: Reader) -> Imported:
    model, notes = qwen2(r)
    if not r.flag("qkv_bias", True):
        del model["qkv_bias"]
    model["experts"] = r.count("num_experts", "num_local_experts", default=60)
    model["experts_per_token"] = r.count("num_experts_per_tok", default=4)
    model["expert_ffn_size"] = r.count("moe_intermediate_size", default=1408)
    # Qwen2MoeSparseMoeBlock always builds the shared expert and its gate: 0 leaves a gate of hidden_size
    shared = r.count("shared_expert_intermediate_size", default=5632, minimum=0)
    if shared == 0:
        raise r.fail("shared_expert_intermediate_size", "0 is not modelled (a shared-expert gate without an expert)")
    model.update(shared_experts=1, shared_expert_ffn_size=shared, shared_expert_gate=True)
    return _moe_layers(r, model, "decoder_sparse_step"), notes


def qwen3_moe(r: Reader) -> Imported:
    model, notes = qwen3(r, head_dim=None)
    model["experts"] = r.count("num_experts", "num_local_experts", default=128)
    model["experts_per_token"] = r.count("num_experts_per_tok", default=8)
    model["expert_ffn_size"] = r.count("moe_intermediate_size", default=768)
    return _moe_layers(r, model, "decoder_sparse_step"), notes


def deepseek(r: Reader, *, mlp_bias: bool = False) -> Imported:
    """DeepSeek V2/V3: multi-head latent attention, routed + shared experts after dense first layers.
    ``mlp_bias``: whether the class reads the field (``DeepseekV2MLP`` does, for the dense and shared-expert
    MLPs only: ``DeepseekV2Experts`` holds bias-free expert tensors; ``DeepseekV3MLP`` has no biases)."""
    model, notes = _base(r, tie=False)
    if r.flag("attention_bias", False):
        model["attention_bias"] = True
    biased = mlp_bias and r.flag("mlp_bias", False)
    model.pop("head_dim", None)
    model.pop("kv_heads", None)
    model["kv_lora_rank"] = r.count("kv_lora_rank", default=512)
    if "q_lora_rank" not in r.config or r.config["q_lora_rank"] is not None:  # null: one q_proj (V2-Lite)
        model["q_lora_rank"] = r.count("q_lora_rank", default=1536)
    model["qk_rope_head_dim"] = r.count("qk_rope_head_dim", default=64)
    model["qk_nope_head_dim"] = r.count("qk_nope_head_dim", default=128)
    model["v_head_dim"] = r.count("v_head_dim", default=128)
    experts = r.count("n_routed_experts", default=None, minimum=0)
    if biased and experts:
        raise r.fail("mlp_bias", "true with routed experts is not modelled (biases on the dense MLPs only)")
    if biased:
        model["mlp_bias"] = True
    if not experts:
        return model, notes
    if r.count("moe_layer_freq", default=1) != 1:
        raise r.fail("moe_layer_freq", "only 1 (every layer after first_k_dense_replace) is modelled")
    model["experts"] = experts
    model["experts_per_token"] = r.count("num_experts_per_tok", default=None) or min(6, experts)
    model["expert_ffn_size"] = r.need("moe_intermediate_size")
    model["shared_experts"] = r.count("n_shared_experts", default=0, minimum=0)
    first_dense = r.count("first_k_dense_replace", default=0, minimum=0) or 0
    if first_dense >= model["layers"]:  # every layer's MLP is dense (DeepseekV3DecoderLayer)
        return _dense(model), notes
    if first_dense:
        model["first_dense_layers"] = first_dense
    return model, notes


def deepseek_v2(r: Reader) -> Imported:
    return deepseek(r, mlp_bias=True)


def phimoe(r: Reader) -> Imported:
    """PhiMoE (Phi-3.5-MoE, ``PhimoeForCausalLM``): LayerNorms with weight and bias (two per layer and the
    final one), ``attention_bias`` on q, k, v and o, a bias-free router and gated experts in every layer,
    and ``lm_head_bias``. ``PhimoeConfig`` defaults to 8 KV heads and 16 experts."""
    model, notes = _base(r, tie=False)
    model.update(norm="layernorm", kv_heads=r.count("num_key_value_heads", default=8))
    if r.flag("attention_bias", False):
        model["attention_bias"] = True
    if r.flag("lm_head_bias", False) and model["head"] == "lm":
        model["lm_head_bias"] = True
    model["experts"] = r.count("num_local_experts", "num_experts", default=16)
    model["experts_per_token"] = r.count("num_experts_per_tok", default=2)
    window, said = _sliding(r)
    return model | window, notes + said


def olmoe(r: Reader) -> Imported:
    """OLMoE (``OlmoeForCausalLM``): OLMo-style RMSNorms on the whole q (``hidden_size`` wide) and k
    projections, a bias-free router and gated experts of ``intermediate_size`` in every layer."""
    model, notes = _base(r, tie=False)
    if "head_dim" in model:  # q_norm is hidden_size wide: only the same as the q projection without head_dim
        raise r.fail("head_dim", f"{model['head_dim']} x heads != hidden_size is not modelled (q_norm width)")
    if r.flag("attention_bias", False):
        model["attention_bias"] = True
    model["qk_norm"] = "projection"
    model["experts"] = r.count("num_experts", "num_local_experts", default=64)
    model["experts_per_token"] = r.count("num_experts_per_tok", default=8)
    return model, notes


def _llama4_moe_layers(r: Reader, model: Model) -> bool:
    """Llama 4's MoE layers (``moe_layers``, else every ``interleave_moe_layer_step``-th from layer step - 1)
    as ``moe_layer_frequency`` and ``first_dense_layers``; False when no layer is MoE."""
    layers = model["layers"]
    step = r.count("interleave_moe_layer_step", default=1) or 1
    if r.config.get("moe_layers") is None:
        sparse = list(range(step - 1, layers, step))
    else:
        sparse = sorted({i for i in r.numbers("moe_layers") if i < layers})
    if not sparse:
        return False
    frequency = sparse[1] - sparse[0] if len(sparse) > 1 else sparse[0] + 1
    first_dense = 0 if sparse[0] == frequency - 1 else sparse[0]
    if [i for i in range(first_dense, layers) if (i + 1) % frequency == 0] != sparse:
        raise r.fail("moe_layers", f"{quoted(sparse)}: only every n-th layer after dense first layers is modelled")
    if frequency != 1:
        model["moe_layer_frequency"] = frequency
    if first_dense:
        model["first_dense_layers"] = first_dense
    return True


def llama4_text(r: Reader) -> Imported:
    """Llama 4's text model (``Llama4ForCausalLM``): dense layers with a SwiGLU MLP of
    ``intermediate_size_mlp``; MoE layers with ``num_local_experts`` experts of ``intermediate_size``, a
    bias-free router and one shared expert of ``intermediate_size``. The L2 q/k norm has no weights."""
    model, notes = _base(r, tie=False, head_dim=128)  # Llama4TextConfig: head_dim 128
    if r.flag("attention_bias", False):
        model["attention_bias"] = True
    model["ffn_size"] = r.count("intermediate_size_mlp", default=16384)
    expert_ffn = r.need("intermediate_size")
    if _llama4_moe_layers(r, model):
        model["experts"] = r.count("num_local_experts", "num_experts", default=16)
        model["experts_per_token"] = r.count("num_experts_per_tok", default=1)
        model.update(expert_ffn_size=expert_ffn, shared_experts=1)
    if r.flag("use_qk_norm", True):  # Llama4TextL2Norm on the RoPE layers' q and k heads; counted on every layer
        model["qk_norm"] = "l2"
    chunk = r.count("attention_chunk_size", default=None if "attention_chunk_size" in r.config else 8192)
    if chunk:
        notes.append(f"attention_chunk_size {chunk}: chunked attention on the RoPE layers; KV cache counted in full")
    return model, notes
