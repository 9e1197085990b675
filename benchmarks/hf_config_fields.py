"""Test data for the field classification of the config importer (vramcalc/spec/hf_fields.py), written by
transformers itself:

* ``tests/data/hf_config_defaults.json``: for every ``model_type`` the importer claims, the default
  configuration of its transformers class as ``to_dict()`` writes it (every field the class has);
  tests/spec/test_hf_fields.py checks that each field is read, known to change no memory, or refused.
* ``tests/data/hf_configs/fields/*.json``: small configs that set one field which changes the parameter
  count, saved by transformers (``to_dict()`` of the config class built with those arguments). Their
  reference counts come from ``benchmarks/hf_import_exact.py --configs tests/data/hf_configs/fields --record``
  (the model class built on the meta device), never from vramcalc.

Needs transformers (the data in the tests came from transformers 5.25)::

    PYTHONPATH=. /tmp/tracer-venv/bin/python benchmarks/hf_config_fields.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULTS = ROOT / "tests" / "data" / "hf_config_defaults.json"
CASES_DIR = ROOT / "tests" / "data" / "hf_configs" / "fields"

SMALL = {"vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
GPT2 = {"vocab_size": 1000, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 128}
BERT = {**SMALL, "intermediate_size": 256, "max_position_embeddings": 128}
DISTILBERT = {"vocab_size": 1000, "dim": 64, "n_layers": 2, "n_heads": 4, "hidden_dim": 256}
DISTILBERT |= {"max_position_embeddings": 128}
OPT = {**SMALL, "ffn_dim": 256, "max_position_embeddings": 128}
VIT = {**SMALL, "intermediate_size": 256, "image_size": 32, "patch_size": 8}
FALCON = {**SMALL, "bias": True}
QWEN2_MOE = {**SMALL, "intermediate_size": 160, "num_experts": 4, "num_experts_per_tok": 2}
QWEN2_MOE |= {"moe_intermediate_size": 32, "num_key_value_heads": 2}

LLAMA = {**SMALL, "intermediate_size": 160, "num_key_value_heads": 2}
T5 = {"vocab_size": 1000, "d_model": 64, "d_kv": 16, "d_ff": 128, "num_layers": 2, "num_heads": 4}
DEEPSEEK = {**LLAMA, "num_hidden_layers": 3, "kv_lora_rank": 32, "q_lora_rank": 48, "qk_rope_head_dim": 8}
DEEPSEEK |= {"qk_nope_head_dim": 16, "v_head_dim": 16, "n_routed_experts": 4, "num_experts_per_tok": 2}
DEEPSEEK |= {"moe_intermediate_size": 32, "n_shared_experts": 1, "first_k_dense_replace": 1, "n_group": 1}
DEEPSEEK |= {"topk_group": 1}
SIGLIP = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}
SIGLIP |= {"image_size": 32, "patch_size": 8}
GEMMA3 = {"text_config": {**LLAMA, "head_dim": 16}, "vision_config": SIGLIP, "mm_tokens_per_image": 4}
CLIP = {**SIGLIP, "model_type": "clip_vision_model"}
LLAMA4_VISION = {**SIGLIP, "vision_output_dim": 32, "projector_input_dim": 32, "projector_output_dim": 32}
LLAMA4_TEXT = {**LLAMA, "intermediate_size_mlp": 96, "num_local_experts": 2, "head_dim": 16}
MLLAMA_VISION = {**SIGLIP, "num_global_layers": 1, "attention_heads": 2, "vision_output_dim": 64}
MLLAMA_VISION |= {"max_num_tiles": 2, "supported_aspect_ratios": [[1, 1], [1, 2]], "intermediate_layers_indices": [0]}

#: name: (model_type, config arguments, architectures[0]); each sets a field that changes the count.
CASES: dict[str, tuple[str, dict[str, Any], str]] = {
    "bert-decoder-cross-attention": (
        "bert",
        {**BERT, "is_decoder": True, "add_cross_attention": True},
        "BertLMHeadModel",
    ),
    "roberta-decoder-cross-attention": (
        "roberta",
        {**BERT, "is_decoder": True, "add_cross_attention": True},
        "RobertaForCausalLM",
    ),
    "bert-decoder": ("bert", {**BERT, "is_decoder": True}, "BertLMHeadModel"),
    "gpt2-cross-attention": ("gpt2", {**GPT2, "add_cross_attention": True}, "GPT2LMHeadModel"),
    "gpt2-double-heads": ("gpt2", GPT2, "GPT2DoubleHeadsModel"),
    "opt-project-out-classification": (
        "opt",
        {**OPT, "word_embed_proj_dim": 32, "num_labels": 3},
        "OPTForSequenceClassification",
    ),
    "opt-project-out-qa": ("opt", {**OPT, "word_embed_proj_dim": 32}, "OPTForQuestionAnswering"),
    "opt-project-out-bare": ("opt", {**OPT, "word_embed_proj_dim": 32}, "OPTModel"),
    "opt-classification": ("opt", {**OPT, "num_labels": 3}, "OPTForSequenceClassification"),
    "vit-pooler-output-size": ("vit", {**VIT, "pooler_output_size": 32}, "ViTModel"),
    "vit-pooler-act": ("vit", {**VIT, "pooler_act": "relu"}, "ViTModel"),
    "vit-head-dim": ("vit", {**VIT, "head_dim": 8}, "ViTModel"),
    "deberta-v2-attention-head-size": (
        "deberta-v2",
        {**BERT, "attention_head_size": 32},
        "DebertaV2Model",
    ),
    "deberta-v2-attention-head-size-even": (
        "deberta-v2",
        {**BERT, "attention_head_size": 16},
        "DebertaV2Model",
    ),
    "falcon-sequential": (
        "falcon",
        {**FALCON, "new_decoder_architecture": False, "parallel_attn": False},
        "FalconForCausalLM",
    ),
    "falcon-parallel-two-norms": (
        "falcon",
        {**FALCON, "new_decoder_architecture": False, "parallel_attn": True, "num_ln_in_parallel_attn": 2},
        "FalconForCausalLM",
    ),
    "falcon-new-one-norm": (
        "falcon",
        {**FALCON, "new_decoder_architecture": True, "num_kv_heads": 2, "num_ln_in_parallel_attn": 1},
        "FalconForCausalLM",
    ),
    "falcon-new-sequential": (
        "falcon",
        {
            **FALCON,
            "new_decoder_architecture": True,
            "num_kv_heads": 2,
            "parallel_attn": False,
            "num_ln_in_parallel_attn": 1,
        },
        "FalconForCausalLM",
    ),
    "qwen2-moe-zero-shared-expert": (
        "qwen2_moe",
        {**QWEN2_MOE, "shared_expert_intermediate_size": 0},
        "Qwen2MoeForCausalLM",
    ),
    "bert-qa-3-labels": ("bert", {**BERT, "num_labels": 3}, "BertForQuestionAnswering"),
    "deberta-v2-qa-3-labels": ("deberta-v2", {**BERT, "num_labels": 3}, "DebertaV2ForQuestionAnswering"),
    "roberta-qa": ("roberta", BERT, "RobertaForQuestionAnswering"),
    # *ForMultipleChoice: the pooled output -> Linear(hidden, 1), the sequence classifier's tensors at 1 label
    "bert-multiple-choice": ("bert", BERT, "BertForMultipleChoice"),
    "roberta-multiple-choice": ("roberta", BERT, "RobertaForMultipleChoice"),
    "distilbert-multiple-choice": ("distilbert", DISTILBERT, "DistilBertForMultipleChoice"),
    "deberta-v2-multiple-choice": ("deberta-v2", BERT, "DebertaV2ForMultipleChoice"),
    "llama-qa-3-labels": (
        "llama",
        {**SMALL, "intermediate_size": 160, "num_labels": 3},
        "LlamaForQuestionAnswering",
    ),
    "llama-token-classification-no-bias": (
        "llama",
        {**SMALL, "intermediate_size": 160, "num_labels": 5, "token_classification_bias": False},
        "LlamaForTokenClassification",
    ),
    "phi-head-dim": ("phi", {**SMALL, "intermediate_size": 256, "head_dim": 8}, "PhiForCausalLM"),
    # Qwen3MoeConfig has no head_dim: the attention's is hidden_size // num_attention_heads (16 here)
    "qwen3-moe-no-head-dim": (
        "qwen3_moe",
        {**QWEN2_MOE, "num_local_experts": 4, "moe_intermediate_size": 32},
        "Qwen3MoeForCausalLM",
    ),
    # a layout that leaves no sparse layer: dense MLPs of intermediate_size in both layers
    "qwen2-moe-no-sparse-layer": ("qwen2_moe", {**QWEN2_MOE, "decoder_sparse_step": 3}, "Qwen2MoeForCausalLM"),
    "deepseek-v3-all-dense": ("deepseek_v3", {**DEEPSEEK, "first_k_dense_replace": 3}, "DeepseekV3ForCausalLM"),
    # DeepseekV2MLP reads mlp_bias, DeepseekV2Experts has no biases
    "deepseek-v2-mlp-bias-experts": ("deepseek_v2", {**DEEPSEEK, "mlp_bias": True}, "DeepseekV2ForCausalLM"),
    # fields a config carries that its class does not read
    "mistral-attention-bias": (
        "mistral",
        {**LLAMA, "attention_bias": True, "mlp_bias": True},
        "MistralForCausalLM",
    ),
    "olmo2-mlp-bias": ("olmo2", {**LLAMA, "mlp_bias": True}, "Olmo2ForCausalLM"),
    "gpt2-token-classification-bias": (
        "gpt2",
        {**GPT2, "num_labels": 3, "token_classification_bias": False},
        "GPT2ForTokenClassification",
    ),
    # T5Config keeps an is_gated_act / dense_act_fn it is given
    "t5-gated-act": (
        "t5",
        {**T5, "feed_forward_proj": "relu", "is_gated_act": True, "dense_act_fn": "gelu"},
        "T5ForConditionalGeneration",
    ),
    "t5-encoder-is-decoder": ("t5", {**T5, "is_decoder": True}, "T5EncoderModel"),
    # an untied masked-LM head keeps the decoder's bias and the head's own
    "bert-mlm-untied": ("bert", {**BERT, "tie_word_embeddings": False}, "BertForMaskedLM"),
    "roberta-causal-lm-untied": ("roberta", {**BERT, "tie_word_embeddings": False}, "RobertaForCausalLM"),
    "deberta-v2-mlm-untied": ("deberta-v2", {**BERT, "tie_word_embeddings": False}, "DebertaV2ForMaskedLM"),
    "deberta-v2-mlm-not-legacy": (
        "deberta-v2",
        {**BERT, "tie_word_embeddings": False, "legacy": False},
        "DebertaV2ForMaskedLM",
    ),
    # multimodal wrappers: the wrapper's class names the head, its tie_word_embeddings ties (Llama 4: the text's)
    "gemma3-wrapper-untied": (
        "gemma3",
        {**GEMMA3, "tie_word_embeddings": False},
        "Gemma3ForConditionalGeneration",
    ),
    "gemma3-sequence-classification": (
        "gemma3",
        {**GEMMA3, "num_labels": 3},
        "Gemma3ForSequenceClassification",
    ),
    "gemma3-model": ("gemma3", GEMMA3, "Gemma3Model"),
    "llava-model": ("llava", {"text_config": LLAMA, "vision_config": CLIP}, "LlavaModel"),
    "llama4-text-tied": (
        "llama4",
        {
            "text_config": {**LLAMA4_TEXT, "tie_word_embeddings": True},
            "vision_config": LLAMA4_VISION,
            "tie_word_embeddings": False,
        },
        "Llama4ForConditionalGeneration",
    ),
    # MllamaTextModel: layer i cross-attends when i is in cross_attention_layers (5 names no layer of 3)
    "mllama-cross-attention-past-last-layer": (
        "mllama",
        {
            "text_config": {**LLAMA, "num_hidden_layers": 3, "cross_attention_layers": [1, 5], "pad_token_id": None},
            "vision_config": MLLAMA_VISION,
        },
        "MllamaForConditionalGeneration",
    ),
}


def _plain(value: Any) -> Any:
    """A JSON value (a dtype or other object as its text)."""
    return json.loads(json.dumps(value, default=str))


def main() -> int:
    import transformers

    from vramcalc.spec.hf_import import FAMILIES, TEXT_CONFIGS

    defaults = {name: _plain(transformers.AutoConfig.for_model(name).to_dict()) for name in [*FAMILIES, *TEXT_CONFIGS]}
    doc = {"transformers_version": transformers.__version__, "method": "AutoConfig.for_model(model_type).to_dict()"}
    DEFAULTS.write_text(json.dumps(doc | {"defaults": defaults}, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {DEFAULTS.relative_to(ROOT)} ({len(defaults)} model types)")
    CASES_DIR.mkdir(exist_ok=True)
    for name, (model_type, kwargs, architecture) in CASES.items():
        config = transformers.AutoConfig.for_model(model_type, architectures=[architecture], **kwargs)
        text = json.dumps(_plain(config.to_dict()), indent=2, sort_keys=True) + "\n"
        (CASES_DIR / f"{name}.json").write_text(text, encoding="utf-8")
    print(f"wrote {len(CASES)} configs to {CASES_DIR.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
