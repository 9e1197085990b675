"""Every field of the transformers configuration classes the importer claims, classified: **read** (the
converter in hf_families.py, hf_moe.py, hf_gpt.py or hf_encoders.py reads it), **quiet** (known to change no
parameter and no memory vramcalc counts, in the groups below with the reason) or **refused** (the import
stops with the field named unless it holds its default). ``refuse`` applies the refusals before a converter
runs; tests/spec/test_hf_fields.py checks that each field of each class's default config (as transformers
writes it, tests/data/hf_config_defaults.json) has exactly one of these kinds.

Fields a config may carry that its class does not define (a custom field, a newer release's) are neither
read nor refused: only what the transformers class builds is counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vramcalc.spec.hf_reader import Reader
from vramcalc.units import quoted


@dataclass(frozen=True)
class Refused:
    """A field refused unless it holds ``default`` (JSON null counts as absent, so as the default)."""

    default: Any
    reason: str


@dataclass(frozen=True)
class Fields:
    """One configuration class's fields by kind."""

    read: frozenset[str]
    quiet: frozenset[str]
    refused: Mapping[str, Refused] = field(default_factory=dict)


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


#: Quiet fields, by group: why none changes a parameter or memory vramcalc counts.
QUIET_GROUPS: dict[str, tuple[str, frozenset[str]]] = {
    "bookkeeping": (
        "names, versions, loading and serialisation flags of transformers",
        _names(
            "transformers_version _commit_hash _attn_implementation _attn_implementation_autoset auto_map "
            "tokenizer_class prefix task_specific_params finetuning_task custom_pipelines torchscript "
            "use_bfloat16 tf_legacy_loss gradient_checkpointing _experts_implementation is_encoder_decoder "
            "cross_attention_hidden_size"
        ),
    ),
    "unread_chunking": (
        "PretrainedConfig's feed-forward chunking, which only BERT-style layers read (apply_chunking_to_forward "
        "in modeling_bert.py, modeling_roberta.py, modeling_xlm_roberta.py, modeling_distilbert.py; refused there)",
        _names("chunk_size_feed_forward"),
    ),
    "tokens": (
        "special token ids and the label names (the label count is read from id2label or num_labels)",
        _names(
            "bos_token_id eos_token_id pad_token_id sep_token_id decoder_start_token_id forced_bos_token_id "
            "forced_eos_token_id label2id problem_type"
        ),
    ),
    "outputs": (
        "what forward returns and whether generate keeps a cache (the KV cache is the workload's)",
        _names(
            "output_attentions output_hidden_states return_dict use_cache output_scores "
            "return_dict_in_generate output_router_logits cache_implementation"
        ),
    ),
    "generation": (
        "decoding settings of generate, not of the network",
        _names(
            "max_length min_length do_sample early_stopping num_beams num_beam_groups diversity_penalty "
            "temperature top_k top_p typical_p repetition_penalty length_penalty no_repeat_ngram_size "
            "encoder_no_repeat_ngram_size bad_words_ids num_return_sequences remove_invalid_values "
            "exponential_decay_length_penalty suppress_tokens begin_suppress_tokens"
        ),
    ),
    "initialisation": (
        "how weights are initialised, not their shapes",
        _names("initializer_range init_std initializer_factor"),
    ),
    "dropout": (
        "dropout rates that have no parameters (the spec's dropout, which sets the masks training keeps, "
        "is read where a family's rate is)",
        _names(
            "attention_dropout attn_pdrop embd_pdrop resid_pdrop hidden_dropout_prob "
            "attention_probs_dropout_prob classifier_dropout summary_first_dropout qa_dropout seq_classif_dropout "
            "pooler_dropout cls_dropout layerdrop embedding_dropout residual_dropout hidden_dropout dropout"
        ),
    ),
    "epsilon": (
        "the norms' epsilon",
        _names("rms_norm_eps layer_norm_eps layer_norm_epsilon norm_epsilon"),
    ),
    "activation": (
        "activation functions, which have no parameters (the MLP's gating is the family's)",
        _names("hidden_act hidden_activation dense_act_fn is_gated_act activation pooler_act pooler_hidden_act"),
    ),
    "positions": (
        "rotary and relative-position settings with no parameters (frequencies, scaling, which layers)",
        _names(
            "rope_parameters rope_theta rope_scaling partial_rotary_factor rotary_pct rope_interleave "
            "original_max_position_embeddings no_rope_layers no_rope_layer_interval attn_temperature_tuning "
            "attn_scale floor_scale relative_attention_max_distance n_ctx"
        ),
    ),
    "attention_math": (
        "attention scaling, capping, clipping and precision; the attention mask's direction",
        _names(
            "attn_logit_softcapping final_logit_softcapping query_pre_attn_scalar scale_attn_weights "
            "scale_attn_by_inverse_layer_idx reorder_and_upcast_attn attention_softmax_in_fp32 "
            "scale_attention_softmax_in_fp32 clip_qkv slow_but_exact pretraining_tp "
            "apply_residual_connection_post_layernorm use_bidirectional_attention is_decoder "
            "scale_decoder_outputs use_qk_norm sliding_window_size"
        ),
    ),
    "routing": (
        "how the router picks and weights experts and its training losses (the router's weights are counted)",
        _names(
            "router_aux_loss_coef router_jitter_noise input_jitter_noise norm_topk_prob routed_scaling_factor "
            "topk_method n_group topk_group aux_loss_alpha seq_aux scoring_func"
        ),
    ),
}
QUIET = frozenset().union(*(names for _, names in QUIET_GROUPS.values()))

#: Read for every family: the class list (the head), the model type, the label count, the vocabulary,
#: tying, the dtype (the default precision) and the name; quantization_config by the checkpoint reader.
COMMON_READ = _names(
    "architectures model_type id2label num_labels vocab_size tie_word_embeddings dtype torch_dtype "
    "_name_or_path quantization_config"
)
#: Refused for every family unless at the default.
COMMON_REFUSED = {
    "pruned_heads": Refused({}, "pruned attention heads"),
    "tie_encoder_decoder": Refused(False, "an encoder and decoder sharing their weights"),
}
CROSS_ATTENTION = Refused(False, "cross-attention blocks in a decoder")
#: Read by the BERT-style layers only (``apply_chunking_to_forward``): quiet in the other families.
FF_CHUNKING = {"chunk_size_feed_forward": Refused(0, "feed-forward chunking, which changes activation memory")}

_LLAMA = "hidden_size num_hidden_layers num_attention_heads num_key_value_heads intermediate_size head_dim "
_LLAMA += "max_position_embeddings attention_bias mlp_bias token_classification_bias "
_WINDOW = "sliding_window layer_types use_sliding_window max_window_layers "
_SOFTCAP = "attn_logit_softcapping final_logit_softcapping "
_MOE = "num_experts num_local_experts num_experts_per_tok moe_intermediate_size decoder_sparse_step mlp_only_layers "
_MLA = "kv_lora_rank q_lora_rank qk_rope_head_dim qk_nope_head_dim v_head_dim n_routed_experts n_shared_experts "
_MLA += "moe_layer_freq first_k_dense_replace moe_intermediate_size num_experts_per_tok"
_GPT2 = "n_embd n_layer n_head n_inner n_positions hidden_size num_hidden_layers num_attention_heads "
_GPT2 += "max_position_embeddings activation_function"
_BERT = "hidden_size num_hidden_layers num_attention_heads intermediate_size max_position_embeddings type_vocab_size"
_DERIVED = "qk_head_dim num_key_value_heads"  # computed by the class from fields that are read

#: Quiet fields of one family only, with the reason.
QUIET_FAMILY: dict[str, tuple[str, frozenset[str]]] = {
    "gpt2_summary": (
        "the summary head of GPT2DoubleHeadsModel, a class that is refused",
        _names("summary_type summary_use_proj summary_activation summary_proj_to_labels"),
    ),
    "derived": ("computed by the class from fields that are read", _names(_DERIVED)),
    "deepseek_mtp": (
        "multi-token-prediction layers: not built by transformers' DeepseekV3ForCausalLM",
        _names("num_nextn_predict_layers"),
    ),
    "deberta_conv": (
        "the convolution's activation and groups: only with conv_kernel_size, which is refused",
        _names("conv_act conv_groups"),
    ),
    "vit_masked": ("only ViTForMaskedImageModeling's decoder, a class that is refused", _names("encoder_stride")),
    "rotary_head_dim": (
        "head_dim sizes only the rotary table of this family's class (its projections are hidden_size wide)",
        _names("head_dim"),
    ),
    "rotary_length": (
        "the rotary table's length (no parameters) in this family's class",
        _names("max_position_embeddings"),
    ),
    "own_token_head": (
        "the generic token classifier's bias switch: this family's own token classifier always has a bias",
        _names("token_classification_bias"),
    ),
    "unread_biases": (
        "bias switches this family's classes do not read (their q, k, v, o and MLP linears are bias-free)",
        _names("attention_bias mlp_bias"),
    ),
    "unread_mlp_bias": (
        "an MLP bias switch this family's classes do not read (their MLPs are bias-free)",
        _names("mlp_bias"),
    ),
    "t5_legacy": ("an old T5 field its class ignores", _names("n_positions")),
    "multimodal": (
        "the vision tower and image tokens of a multimodal checkpoint (noted, not counted)",
        _names("vision_config boi_token_index eoi_token_index image_token_index mm_tokens_per_image"),
    ),
    "image_ids": (
        "the ids of the image tokens in the vocabulary (no parameters)",
        _names(
            "boi_token_index eoi_token_index image_token_index image_token_id video_token_id vision_start_token_id "
            "vision_end_token_id vision_token_id image_seq_length projector_hidden_act image_grid_pinpoints "
            "use_image_newline_parameter"
        ),
    ),
}


def _table(read: str, quiet: tuple[str, ...] = (), refused: Mapping[str, Refused] | None = None) -> Fields:
    extra = frozenset().union(*(QUIET_FAMILY[group][1] for group in quiet))
    refusals = {**COMMON_REFUSED, **(refused or {})}
    read_names = (COMMON_READ | _names(read)) - set(refusals) - extra  # a family's quiet group overrides
    return Fields(read_names, (QUIET | extra) - read_names - set(refusals), refusals)


_HEAD_DIM = Refused(None, "this family's q, k and v of heads x head_dim, not hidden_size")
_POSITIONS = Refused("absolute", "relative position tables, as transformers 4 builds them")
_BERT_TABLE = _table(
    _BERT, refused={"add_cross_attention": CROSS_ATTENTION, "position_embedding_type": _POSITIONS, **FF_CHUNKING}
)

#: model_type -> its class's fields by kind.
FIELDS: dict[str, Fields] = {
    "llama": _table(_LLAMA + _WINDOW),
    "mistral": _table(_LLAMA + _WINDOW, ("unread_biases",)),
    "mixtral": _table(_LLAMA + _WINDOW + _MOE, ("unread_biases",)),
    "qwen2": _table(_LLAMA + _WINDOW, ("unread_biases",)),
    "qwen2_moe": _table(_LLAMA + _WINDOW + _MOE + "qkv_bias shared_expert_intermediate_size", ("unread_biases",)),
    "qwen3": _table(_LLAMA + _WINDOW, ("unread_mlp_bias",)),
    "qwen3_moe": _table(_LLAMA + _WINDOW + _MOE, ("unread_mlp_bias",)),
    "gemma": _table(_LLAMA, ("unread_mlp_bias",)),
    "gemma2": _table(_LLAMA + _WINDOW + _SOFTCAP, ("unread_mlp_bias",)),
    "gemma3_text": _table(
        _LLAMA + _WINDOW + _SOFTCAP + "sliding_window_pattern _sliding_window_pattern", ("unread_mlp_bias",)
    ),
    "olmo": _table(_LLAMA, ("unread_mlp_bias",)),
    "olmo2": _table(_LLAMA, ("unread_mlp_bias",)),
    "phi3": _table(_LLAMA + _WINDOW, ("unread_biases",)),
    "starcoder2": _table(_LLAMA + _WINDOW + "use_bias", ("unread_biases",)),
    "deepseek_v2": _table(_LLAMA + _MLA, ("derived",)),
    "deepseek_v3": _table(_LLAMA + _MLA, ("derived", "deepseek_mtp", "unread_mlp_bias")),
    "phimoe": _table(_LLAMA + _WINDOW + _MOE + "lm_head_bias", ("unread_mlp_bias",)),
    "olmoe": _table(_LLAMA + _MOE, ("unread_mlp_bias",)),
    "llama4_text": _table(
        _LLAMA + _WINDOW + _MOE + "intermediate_size_mlp moe_layers interleave_moe_layer_step attention_chunk_size "
        "use_qk_norm",
        ("unread_mlp_bias",),
    ),
    "phi": _table(_LLAMA + "qk_layernorm", refused={"head_dim": _HEAD_DIM}),
    "gpt2": _table(_GPT2, ("gpt2_summary", "own_token_head"), {"add_cross_attention": CROSS_ATTENTION}),
    "gpt_neox": _table(
        "hidden_size num_hidden_layers num_attention_heads intermediate_size attention_bias hidden_dropout "
        "use_parallel_residual",
        ("rotary_head_dim", "rotary_length", "own_token_head"),
    ),
    "falcon": _table(
        "hidden_size num_hidden_layers num_attention_heads n_head n_layer num_kv_heads multi_query "
        "new_decoder_architecture parallel_attn num_ln_in_parallel_attn ffn_hidden_size alibi bias",
        ("derived", "rotary_head_dim", "rotary_length", "own_token_head"),
    ),
    "opt": _table(
        "hidden_size num_hidden_layers num_attention_heads ffn_dim max_position_embeddings enable_bias "
        "word_embed_proj_dim do_layer_norm_before _remove_final_layer_norm layer_norm_elementwise_affine "
        "activation_function"
    ),
    "bloom": _table("hidden_size n_embed n_layer n_head num_hidden_layers num_attention_heads", ("own_token_head",)),
    "gptj": _table(_GPT2 + " rotary_dim"),
    "gpt_bigcode": _table(
        _GPT2 + " multi_query", ("derived", "own_token_head"), {"add_cross_attention": CROSS_ATTENTION}
    ),
    "bert": _BERT_TABLE,
    "roberta": _BERT_TABLE,
    "xlm-roberta": _BERT_TABLE,
    "distilbert": _table(
        "dim n_layers n_heads hidden_dim hidden_size num_hidden_layers num_attention_heads max_position_embeddings "
        "activation sinusoidal_pos_embds",
        refused=FF_CHUNKING,
    ),
    "deberta-v2": _table(
        _BERT + " conv_kernel_size embedding_size position_biased_input relative_attention share_att_key pos_att_type "
        "position_buckets max_relative_positions norm_rel_ebd pooler_hidden_size attention_head_size legacy",
        ("deberta_conv",),
    ),
    "t5": _table(
        "d_model d_kv d_ff num_layers num_decoder_layers num_heads feed_forward_proj dropout_rate "
        "relative_attention_num_buckets is_gated_act dense_act_fn is_decoder",
        ("t5_legacy",),
    ),
    "vit": _table(
        "hidden_size num_hidden_layers num_attention_heads intermediate_size patch_size image_size num_channels "
        "qkv_bias pooler_output_size",
        ("vit_masked",),
        {"head_dim": _HEAD_DIM},
    ),
    # multimodal wrappers: the text model's own config (text_config) is read under its own type, the vision
    # tower's (vision_config) by vramcalc/spec/hf_vision.py
    "gemma3": _table("text_config vision_config mm_tokens_per_image", ("image_ids",)),
    "llama4": _table("text_config vision_config", ("image_ids",)),
    "llava": _table(
        "text_config vision_config vision_feature_layer vision_feature_select_strategy multimodal_projector_bias",
        ("image_ids",),
    ),
    "llava_next": _table(
        "text_config vision_config vision_feature_layer vision_feature_select_strategy multimodal_projector_bias",
        ("image_ids",),
    ),
    "mistral3": _table(
        "text_config vision_config vision_feature_layer spatial_merge_size multimodal_projector_bias", ("image_ids",)
    ),
    "mllama": _table("text_config vision_config", ("image_ids",)),
    # Qwen2-VL's Hub configs hold the language model's fields at the top level: read under qwen2
    "qwen2_vl": _table("text_config vision_config", ("image_ids",)),
    "qwen2_5_vl": _table("text_config vision_config", ("image_ids",)),
}


def kind_of(model_type: str, name: str) -> str | None:
    """``read``, ``quiet`` or ``refused`` for a field of a claimed type; None when the class has no such field."""
    fields = FIELDS[model_type]
    if name in fields.refused:
        return "refused"
    if name in fields.read:
        return "read"
    return "quiet" if name in fields.quiet else None


def refuse(r: Reader, model_type: str) -> None:
    """Stop at the first refused field of ``model_type`` that does not hold its default."""
    for name, rule in FIELDS[model_type].refused.items():
        value = r.config.get(name)
        if value is not None and value != rule.default and not (value == [] and rule.default == {}):
            shown = str(value).lower() if isinstance(value, bool) else quoted(value)  # JSON spelling
            raise r.fail(name, f"{shown} is not modelled ({rule.reason})")
