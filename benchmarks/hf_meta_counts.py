"""Parameter counts of small transformers models built on the meta device, next to vramcalc's count of
the same shape written as a spec: the independent reference for tests/core/test_shape_keys.py.

Each case is a transformers config (class and keyword arguments), the model class built from it, and the
``model:`` section of a vramcalc spec describing the same network. transformers instantiates the model
under ``torch.device("meta")`` (no memory, no weights) and the script sums ``p.numel()`` over
``model.parameters()`` (shared tensors once, as PyTorch lists them).

Needs torch and transformers (the counts in the tests came from transformers 5.24.0, torch 2.13.0)::

    PYTHONPATH=. /tmp/tracer-venv/bin/python benchmarks/hf_meta_counts.py          # table, exit 1 on a mismatch
    PYTHONPATH=. /tmp/tracer-venv/bin/python benchmarks/hf_meta_counts.py --json   # {case: transformers count}
"""

from __future__ import annotations

import json
import sys
from typing import Any

# name: (config class, config kwargs, model class, vramcalc model section)
SMALL = {"vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
LLAMA_LIKE = {**SMALL, "intermediate_size": 160, "num_key_value_heads": 2}
SPEC_LLAMA = {
    "architecture": "decoder",
    "layers": 2,
    "hidden_size": 64,
    "heads": 4,
    "kv_heads": 2,
    "ffn_size": 160,
    "mlp": "swiglu",
    "vocab_size": 1000,
}
BERT = {**SMALL, "intermediate_size": 256, "max_position_embeddings": 128}
SPEC_BERT = {
    "architecture": "encoder",
    "layers": 2,
    "hidden_size": 64,
    "heads": 4,
    "ffn_size": 256,
    "vocab_size": 1000,
    "max_position_embeddings": 128,
}
MLA = {
    **SMALL,
    "num_hidden_layers": 3,
    "num_key_value_heads": 4,
    "intermediate_size": 160,
    "moe_intermediate_size": 32,
    "n_routed_experts": 8,
    "n_shared_experts": 2,
    "num_experts_per_tok": 2,
    "first_k_dense_replace": 1,
    "kv_lora_rank": 32,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 16,
    "v_head_dim": 16,
    "tie_word_embeddings": False,
}
SPEC_MLA = {
    **SPEC_LLAMA,
    "layers": 3,
    "kv_heads": None,
    "tie_embeddings": False,
    "experts": 8,
    "experts_per_token": 2,
    "shared_experts": 2,
    "expert_ffn_size": 32,
    "first_dense_layers": 1,
    "kv_lora_rank": 32,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 16,
    "v_head_dim": 16,
}

CASES: dict[str, tuple[str, dict[str, Any], str, dict[str, Any]]] = {
    "qwen2-qkv-bias": (
        "Qwen2Config",
        {**LLAMA_LIKE, "tie_word_embeddings": False},
        "Qwen2ForCausalLM",
        {**SPEC_LLAMA, "tie_embeddings": False, "qkv_bias": True},
    ),
    "qwen3-qk-norm": (
        "Qwen3Config",
        {**LLAMA_LIKE, "head_dim": 32, "tie_word_embeddings": True},
        "Qwen3ForCausalLM",
        {**SPEC_LLAMA, "head_dim": 32, "tie_embeddings": True, "qk_norm": "head"},
    ),
    "llama-attention-mlp-bias": (
        "LlamaConfig",
        {**LLAMA_LIKE, "attention_bias": True, "mlp_bias": True, "tie_word_embeddings": False},
        "LlamaForCausalLM",
        {**SPEC_LLAMA, "tie_embeddings": False, "attention_bias": True, "mlp_bias": True},
    ),
    "llama-sequence-classification": (
        "LlamaConfig",
        {**LLAMA_LIKE, "num_labels": 3},
        "LlamaForSequenceClassification",
        {**SPEC_LLAMA, "head": "classification", "num_labels": 3},
    ),
    "llama-token-classification": (
        "LlamaConfig",
        {**LLAMA_LIKE, "num_labels": 5},
        "LlamaForTokenClassification",
        {**SPEC_LLAMA, "head": "token_classification", "num_labels": 5},
    ),
    "gemma2-geglu-4-norms": (
        "Gemma2Config",
        {**LLAMA_LIKE, "head_dim": 32, "sliding_window": 16},
        "Gemma2ForCausalLM",
        {
            **SPEC_LLAMA,
            "mlp": "geglu",
            "head_dim": 32,
            "norms_per_layer": 4,
            "tie_embeddings": True,
            "sliding_window": 16,
            "sliding_window_pattern": 2,
        },
    ),
    "gemma3-qk-norm": (
        "Gemma3TextConfig",
        {**LLAMA_LIKE, "num_hidden_layers": 6, "head_dim": 32, "sliding_window": 16},
        "Gemma3ForCausalLM",
        {
            **SPEC_LLAMA,
            "layers": 6,
            "mlp": "geglu",
            "head_dim": 32,
            "norms_per_layer": 4,
            "qk_norm": "head",
            "tie_embeddings": True,
            "sliding_window": 16,
            "sliding_window_pattern": 6,
        },
    ),
    "olmo2-projection-qk-norm": (
        "Olmo2Config",
        {**LLAMA_LIKE, "tie_word_embeddings": False},
        "Olmo2ForCausalLM",
        {**SPEC_LLAMA, "tie_embeddings": False, "qk_norm": "projection"},
    ),
    "deepseek-v2-lite-like": ("DeepseekV2Config", {**MLA, "q_lora_rank": None}, "DeepseekV2ForCausalLM", SPEC_MLA),
    "deepseek-v3-like": (
        "DeepseekV3Config",
        {**MLA, "q_lora_rank": 24, "n_group": 2, "topk_group": 1},
        "DeepseekV3ForCausalLM",
        {**SPEC_MLA, "q_lora_rank": 24},
    ),
    "qwen2-moe-shared-expert": (
        "Qwen2MoeConfig",
        {
            **LLAMA_LIKE,
            "num_experts": 8,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 96,
            "tie_word_embeddings": False,
        },
        "Qwen2MoeForCausalLM",
        {
            **SPEC_LLAMA,
            "tie_embeddings": False,
            "qkv_bias": True,
            "experts": 8,
            "experts_per_token": 2,
            "expert_ffn_size": 32,
            "shared_expert_ffn_size": 96,
            "shared_expert_gate": True,
        },
    ),
    "qwen3-moe": (
        "Qwen3MoeConfig",
        {**LLAMA_LIKE, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32},
        "Qwen3MoeForCausalLM",
        {
            **SPEC_LLAMA,
            "tie_embeddings": False,
            "qk_norm": "head",
            "experts": 8,
            "experts_per_token": 2,
            "expert_ffn_size": 32,
        },
    ),
    "falcon-7b-like-parallel": (
        "FalconConfig",
        {**SMALL, "multi_query": True, "parallel_attn": True, "new_decoder_architecture": False, "bias": False},
        "FalconForCausalLM",
        {
            "architecture": "decoder",
            "layers": 2,
            "hidden_size": 64,
            "heads": 4,
            "kv_heads": 1,
            "vocab_size": 1000,
            "mlp": "gelu",
            "norm": "layernorm",
            "position": "rotary",
            "bias": False,
            "parallel_block": True,
            "norms_per_layer": 1,
            "tie_embeddings": True,
        },
    ),
    "phi2-like-lm-head-bias": (
        "PhiConfig",
        {**SMALL, "intermediate_size": 256, "partial_rotary_factor": 0.4, "tie_word_embeddings": False},
        "PhiForCausalLM",
        {
            "architecture": "decoder",
            "layers": 2,
            "hidden_size": 64,
            "heads": 4,
            "ffn_size": 256,
            "vocab_size": 1000,
            "mlp": "gelu_tanh",
            "norm": "layernorm",
            "position": "rotary",
            "bias": True,
            "parallel_block": True,
            "norms_per_layer": 1,
            "lm_head_bias": True,
            "tie_embeddings": False,
        },
    ),
    "opt-offset-2": (
        "OPTConfig",
        {**SMALL, "ffn_dim": 256, "max_position_embeddings": 128, "word_embed_proj_dim": 64},
        "OPTForCausalLM",
        {
            "architecture": "decoder",
            "layers": 2,
            "hidden_size": 64,
            "heads": 4,
            "ffn_size": 256,
            "vocab_size": 1000,
            "mlp": "relu",
            "position": "learned",
            "max_position_embeddings": 128,
            "position_offset": 2,
            "tie_embeddings": True,
        },
    ),
    "opt-350m-like-projections": (
        "OPTConfig",
        {
            **SMALL,
            "ffn_dim": 256,
            "max_position_embeddings": 128,
            "word_embed_proj_dim": 32,
            "do_layer_norm_before": False,
        },
        "OPTForCausalLM",
        {
            "architecture": "decoder",
            "layers": 2,
            "hidden_size": 64,
            "heads": 4,
            "ffn_size": 256,
            "vocab_size": 1000,
            "mlp": "relu",
            "position": "learned",
            "max_position_embeddings": 128,
            "position_offset": 2,
            "embedding_dim": 32,
            "final_norm": False,
            "tie_embeddings": True,
        },
    ),
    "bloom-embedding-norm": (
        "BloomConfig",
        {"vocab_size": 1000, "hidden_size": 64, "n_layer": 2, "n_head": 4},
        "BloomForCausalLM",
        {
            "architecture": "decoder",
            "layers": 2,
            "hidden_size": 64,
            "heads": 4,
            "vocab_size": 1000,
            "mlp": "gelu",
            "position": "none",
            "embedding_norm": True,
            "tie_embeddings": True,
        },
    ),
    "starcoder2-bias-sliding": (
        "Starcoder2Config",
        {**LLAMA_LIKE, "intermediate_size": 256, "sliding_window": 16, "use_bias": True},
        "Starcoder2ForCausalLM",
        {
            **SPEC_LLAMA,
            "ffn_size": 256,
            "mlp": "gelu_tanh",
            "norm": "layernorm",
            "position": "rotary",
            "bias": True,
            "tie_embeddings": True,
            "sliding_window": 16,
        },
    ),
    "bert-token-classification": (
        "BertConfig",
        {**BERT, "num_labels": 5},
        "BertForTokenClassification",
        {**SPEC_BERT, "head": "token_classification", "num_labels": 5},
    ),
    "bert-question-answering": (
        "BertConfig",
        BERT,
        "BertForQuestionAnswering",
        {**SPEC_BERT, "head": "question_answering"},
    ),
    "bert-pretraining": ("BertConfig", BERT, "BertForPreTraining", {**SPEC_BERT, "head": "pretraining"}),
    "bert-sequence-classification": (
        "BertConfig",
        {**BERT, "num_labels": 3},
        "BertForSequenceClassification",
        {**SPEC_BERT, "head": "classification", "num_labels": 3, "pooler": True},
    ),
    "roberta-classification": (
        "RobertaConfig",
        {**BERT, "max_position_embeddings": 130, "type_vocab_size": 1, "num_labels": 3},
        "RobertaForSequenceClassification",
        {
            **SPEC_BERT,
            "max_position_embeddings": 130,
            "type_vocab_size": 1,
            "head": "classification",
            "num_labels": 3,
            "pooler": True,
        },
    ),
    "gpt2-sequence-classification": (
        "GPT2Config",
        {"vocab_size": 1000, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 128, "num_labels": 3},
        "GPT2ForSequenceClassification",
        {
            "architecture": "decoder",
            "layers": 2,
            "hidden_size": 64,
            "heads": 4,
            "vocab_size": 1000,
            "max_position_embeddings": 128,
            "mlp": "gelu_tanh",
            "head": "classification",
            "num_labels": 3,
        },
    ),
    "t5-v1.1-geglu": (
        "T5Config",
        {
            "vocab_size": 1000,
            "d_model": 64,
            "d_ff": 128,
            "d_kv": 16,
            "num_layers": 2,
            "num_heads": 4,
            "feed_forward_proj": "gated-gelu",
            "tie_word_embeddings": False,
        },
        "T5ForConditionalGeneration",
        {
            "architecture": "encoder-decoder",
            "layers": 2,
            "hidden_size": 64,
            "heads": 4,
            "ffn_size": 128,
            "vocab_size": 1000,
            "mlp": "geglu",
            # transformers 5 ties T5's LM head whatever the config says (T5Config pops tie_word_embeddings
            # and keeps only its "scale the decoder output" meaning); transformers 4.x kept v1.1's head apart
            "tie_embeddings": True,
        },
    ),
}


def transformers_count(case: str) -> int:
    """Parameters of the case's model as transformers builds it on the meta device."""
    import torch
    import transformers

    config_class, kwargs, model_class, _ = CASES[case]
    config = getattr(transformers, config_class)(**kwargs)
    with torch.device("meta"):
        model = getattr(transformers, model_class)(config)
    return sum(p.numel() for p in model.parameters())


def vramcalc_count(case: str) -> int:
    """vramcalc's exact count of the case's spec."""
    from vramcalc.core.params import count_params
    from vramcalc.families.resolve import resolve_model
    from vramcalc.spec.models import ModelSpec, Workload

    model = {k: v for k, v in CASES[case][3].items() if v is not None}
    shape, _ = resolve_model(ModelSpec(**model), Workload(batch_size=1, seq_len=64))
    return count_params(shape)


def main(argv: list[str]) -> int:
    counts = {case: transformers_count(case) for case in CASES}
    if "--json" in argv:
        print(json.dumps(counts, indent=1))
        return 0
    bad = 0
    for case, reference in counts.items():
        ours = vramcalc_count(case)
        bad += ours != reference
        print(f"{case:32} transformers {reference:>10,}  vramcalc {ours:>10,}  {'ok' if ours == reference else 'DIFF'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
