"""GPT-style decoder families (LayerNorm with biases, GELU/ReLU MLPs): GPT-2, GPT-NeoX/Pythia, Phi-1/2,
Falcon, OPT, BLOOM, GPT-J and GPT-BigCode (StarCoder), read with their transformers configuration
classes' defaults.
"""

from __future__ import annotations

from vramcalc.spec.hf_families import _activation, _dropout, _rope_notes
from vramcalc.spec.hf_heads import decoder_head, head_kind
from vramcalc.spec.hf_reader import Imported, Model, Reader


def _decoder(r: Reader, fields: Model, *, generic_token_head: bool = False) -> Model:
    """A decoder's keys and its head; the token classifier is the family's own (with a bias) unless
    ``generic_token_head`` (Phi's ``PhiForTokenClassification`` is transformers' generic one)."""
    head = decoder_head(r, head_kind(r, "lm"), generic_token_head=generic_token_head)
    return {"architecture": "decoder", **fields, **head}


def gpt2(r: Reader) -> Imported:
    """GPT-2: fused c_attn; the activation of ``activation_function`` and dropout on the residual branches
    (``resid_pdrop``) and the attention probabilities (``attn_pdrop``), 0.1 each by GPT2Config's defaults."""
    hidden = r.need("n_embd", "hidden_size")
    dropout, notes = _dropout(r, "resid_pdrop", "attn_pdrop", 0.1)
    model = _decoder(
        r,
        {
            "layers": r.need("n_layer", "num_hidden_layers"),
            "hidden_size": hidden,
            "heads": r.need("n_head", "num_attention_heads"),
            "ffn_size": r.count("n_inner", default=4 * hidden),
            "mlp": _activation(r, "activation_function", "gelu_new"),
            "norm": "layernorm",
            "position": "learned",
            "vocab_size": r.need("vocab_size"),
            "max_position_embeddings": r.count("n_positions", default=1024),
            "tie_embeddings": r.flag("tie_word_embeddings", True),
            "bias": True,
            "fused_qkv": True,
            "dropout": dropout,
        },
    )
    return model, notes


def gpt_neox(r: Reader) -> Imported:
    """GPT-NeoX/Pythia: fused query_key_value; two LayerNorms per layer even with the parallel residual."""
    notes = _rope_notes(r)
    model = _decoder(
        r,
        {
            "layers": r.need("num_hidden_layers"),
            "hidden_size": r.need("hidden_size"),
            "heads": r.need("num_attention_heads"),
            "ffn_size": r.need("intermediate_size"),
            "mlp": "gelu",
            "norm": "layernorm",
            "position": "rotary",
            "vocab_size": r.need("vocab_size"),
            "tie_embeddings": r.flag("tie_word_embeddings", False),
            "bias": True,
            "fused_qkv": True,
            "parallel_block": r.flag("use_parallel_residual", True),
            "norms_per_layer": 2,
            # GPTNeoXConfig's hidden_dropout default is 0.0 (post-attention and post-MLP dropout)
            "dropout": r.fraction("hidden_dropout", 0.0),
        },
    )
    if not r.flag("attention_bias", True):
        model["attention_bias"] = False
    return model, notes


def phi(r: Reader) -> Imported:
    """Phi-1/1.5/2: one LayerNorm feeding attention and MLP in parallel; a bias on the LM head."""
    if r.flag("qk_layernorm", False):
        raise r.fail("qk_layernorm", "true is not modelled (LayerNorms of head_dim on q and k)")
    if r.fraction("attention_dropout", 0.0) > 0:
        raise r.fail(
            "attention_dropout", "above 0 is not modelled for Phi (its checkpoints drop out on the residual only)"
        )
    notes = _rope_notes(r)
    heads = r.need("num_attention_heads")
    model = _decoder(
        r,
        {
            "layers": r.need("num_hidden_layers"),
            "hidden_size": r.need("hidden_size"),
            "heads": heads,
            "kv_heads": r.count("num_key_value_heads", default=heads),
            "ffn_size": r.need("intermediate_size"),
            "mlp": "gelu_tanh",
            "norm": "layernorm",
            "position": "rotary",
            "vocab_size": r.need("vocab_size"),
            "tie_embeddings": r.flag("tie_word_embeddings", False),
            "bias": True,
            "fused_qkv": False,
            "parallel_block": True,
            "norms_per_layer": 1,
            "lm_head_bias": True,
            "dropout": r.fraction("resid_pdrop", 0.0),
        },
        generic_token_head=True,
    )
    return model, notes


def falcon(r: Reader) -> Imported:
    """Falcon: fused QKV (multi-query in the 7B layout, grouped in ``new_decoder_architecture``).
    LayerNorms per layer as FalconDecoderLayer builds them: 2 (input, post-attention) without
    ``parallel_attn``; with it, 2 (ln_attn, ln_mlp) when ``num_ln_in_parallel_attn`` is 2 (its default in the
    new layout), else 1 (the 7B layout). The new layout always adds attention and MLP in parallel."""
    heads = r.need("num_attention_heads", "n_head")
    hidden = r.need("hidden_size")
    new = r.flag("new_decoder_architecture", False)
    parallel_attn = r.flag("parallel_attn", True)
    in_parallel = r.count("num_ln_in_parallel_attn", default=2 if new else 1)
    if in_parallel not in (1, 2):
        raise r.fail("num_ln_in_parallel_attn", f"{in_parallel}: Falcon has 1 or 2 LayerNorms per layer")
    norms = 2 if not parallel_attn else in_parallel
    parallel = new or parallel_attn
    dropout, notes = _dropout(r, "hidden_dropout", "attention_dropout", 0.0)
    if new:
        kv = r.count("num_kv_heads", default=heads)
    else:
        kv = 1 if r.flag("multi_query", True) else heads
    model = _decoder(
        r,
        {
            "layers": r.need("num_hidden_layers", "n_layer"),
            "hidden_size": hidden,
            "heads": heads,
            "kv_heads": kv,
            "ffn_size": r.count("ffn_hidden_size", default=4 * hidden),
            "mlp": "gelu",
            "norm": "layernorm",
            "position": "none" if r.flag("alibi", False) else "rotary",
            "vocab_size": r.need("vocab_size"),
            "tie_embeddings": r.flag("tie_word_embeddings", True),
            "bias": r.flag("bias", False),
            "fused_qkv": True,
            "parallel_block": parallel,
            "norms_per_layer": norms,
            "dropout": dropout,
        },
    )
    return model, notes


def opt(r: Reader) -> Imported:
    """OPT: learned positions with an offset of 2 rows; a narrower token embedding with bias-free
    project_in/project_out (OPT-350m); no final LayerNorm in the post-LN layout (do_layer_norm_before false)."""
    hidden = r.need("hidden_size")
    model = _decoder(
        r,
        {
            "layers": r.need("num_hidden_layers"),
            "hidden_size": hidden,
            "heads": r.need("num_attention_heads"),
            "ffn_size": r.need("ffn_dim"),
            "mlp": "relu",
            "norm": "layernorm",
            "position": "learned",
            "position_offset": 2,
            "vocab_size": r.need("vocab_size"),
            "max_position_embeddings": r.count("max_position_embeddings", default=2048),
            "tie_embeddings": r.flag("tie_word_embeddings", True),
            "bias": r.flag("enable_bias", True),
            "fused_qkv": False,
        },
    )
    width = r.count("word_embed_proj_dim", default=hidden)
    if width != hidden:
        if (
            model["head"] != "lm"
        ):  # project_out and a head of word_embed_proj_dim inputs are counted with the LM head only
            raise r.fail("word_embed_proj_dim", f"{width} != hidden_size is modelled with OPTForCausalLM only")
        model["embedding_dim"] = width
    if not r.flag("do_layer_norm_before", True) or r.flag("_remove_final_layer_norm", False):
        model["final_norm"] = False
    if not r.flag("layer_norm_elementwise_affine", True):
        model["norm_weights"] = False  # every LayerNorm, the final one included
    return model, []


def bloom(r: Reader) -> Imported:
    """BLOOM: ALiBi (no position parameters), a LayerNorm right after the word embeddings, fused QKV."""
    hidden = r.need("hidden_size", "n_embed")
    dropout, notes = _dropout(r, "hidden_dropout", "attention_dropout", 0.0)
    model = _decoder(
        r,
        {
            "layers": r.need("n_layer", "num_hidden_layers"),
            "hidden_size": hidden,
            "heads": r.need("n_head", "num_attention_heads"),
            "ffn_size": 4 * hidden,
            "mlp": "gelu",
            "norm": "layernorm",
            "position": "none",
            "vocab_size": r.need("vocab_size"),
            "tie_embeddings": r.flag("tie_word_embeddings", True),
            "bias": True,
            "fused_qkv": True,
            "embedding_norm": True,
            "dropout": dropout,
        },
    )
    return model, notes


def gptj(r: Reader) -> Imported:
    """GPT-J (``GPTJForCausalLM``): one LayerNorm feeding attention and MLP in parallel; bias-free q, k, v
    and out projections, fc_in/fc_out with biases; rotary on ``rotary_dim`` of each head; an LM head with
    a bias."""
    heads = r.need("n_head", "num_attention_heads")
    hidden = r.need("n_embd", "hidden_size")
    rotary = r.count("rotary_dim", default=None) if "rotary_dim" in r.config else 64  # null: whole head
    notes: list[str] = []
    if rotary is not None and rotary != hidden // heads:
        notes.append(f"rotary_dim {rotary}: rotary on part of each head (no parameters)")
    kind = head_kind(r, "lm")
    dropout, said = _dropout(r, "resid_pdrop", "attn_pdrop", 0.0)
    notes += said
    model = _decoder(
        r,
        {
            "layers": r.need("n_layer", "num_hidden_layers"),
            "hidden_size": hidden,
            "heads": heads,
            "ffn_size": r.count("n_inner", default=4 * hidden),
            "mlp": _activation(r, "activation_function", "gelu_new"),
            "norm": "layernorm",
            "position": "rotary",
            "vocab_size": r.need("vocab_size"),
            "max_position_embeddings": r.count("n_positions", "max_position_embeddings", default=2048),
            "tie_embeddings": r.flag("tie_word_embeddings", False),
            "bias": True,
            "attention_bias": False,
            "fused_qkv": False,
            "parallel_block": True,
            "norms_per_layer": 1,
            "dropout": dropout,
        },
    )
    return model | ({"lm_head_bias": True} if kind == "lm" else {}), notes


def gpt_bigcode(r: Reader) -> Imported:
    """GPT-BigCode (StarCoder, SantaCoder): GPT-2's layout with one fused c_attn of q + 2 x kv outputs,
    multi-query (one KV head) unless ``multi_query`` is false."""
    hidden = r.need("n_embd", "hidden_size")
    heads = r.need("n_head", "num_attention_heads")
    dropout, notes = _dropout(r, "resid_pdrop", "attn_pdrop", 0.1)
    model = _decoder(
        r,
        {
            "layers": r.need("n_layer", "num_hidden_layers"),
            "hidden_size": hidden,
            "heads": heads,
            "kv_heads": 1 if r.flag("multi_query", True) else heads,
            "ffn_size": r.count("n_inner", default=4 * hidden),
            "mlp": _activation(r, "activation_function", "gelu_pytorch_tanh"),
            "norm": "layernorm",
            "position": "learned",
            "vocab_size": r.need("vocab_size"),
            "max_position_embeddings": r.count("n_positions", "max_position_embeddings", default=1024),
            "tie_embeddings": r.flag("tie_word_embeddings", True),
            "bias": True,
            "fused_qkv": True,
            "dropout": dropout,
        },
    )
    return model, notes
