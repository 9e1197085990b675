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
OPT = {**SMALL, "ffn_dim": 256, "max_position_embeddings": 128}
VIT = {**SMALL, "intermediate_size": 256, "image_size": 32, "patch_size": 8}
FALCON = {**SMALL, "bias": True}
QWEN2_MOE = {**SMALL, "intermediate_size": 160, "num_experts": 4, "num_experts_per_tok": 2}
QWEN2_MOE |= {"moe_intermediate_size": 32, "num_key_value_heads": 2}

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
