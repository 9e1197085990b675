"""Family details and heads of the config import, the torch_dtype default precision, and bad configs.

Expected keys come from the public configs and the transformers modelling code of each family
(named in each test); parameter counts are checked against transformers itself in test_hf_exact.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.errors import SpecError
from vramcalc.spec.hf_import import default_precision, import_yaml, model_from_config, read_config

runner = CliRunner()
CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf_configs"


def model_of(name: str) -> tuple[dict[str, Any], list[str]]:
    return model_from_config(read_config(CONFIGS / name), name)


@pytest.mark.parametrize(
    ("name", "window", "pattern"),
    [
        ("mistral-7b.json", 4096, None),  # Mistral-7B-v0.1: sliding_window 4096 on every layer
        ("starcoder2-3b.json", 4096, None),  # StarCoder2: sliding_window 4096
        ("gemma-2-2b.json", 4096, 2),  # Gemma 2: layer_types alternate sliding/full
        ("gemma-3-1b-pt.json", 512, 6),  # Gemma 3: five sliding layers, then one global
        ("gemma-3-270m.json", 512, 6),  # layer_types list as written by transformers 5
        ("qwen2.5-0.5b.json", None, None),  # use_sliding_window false: global attention
    ],
)
def test_sliding_windows(name: str, window: int | None, pattern: int | None) -> None:
    model, _ = model_of(name)
    assert (model.get("sliding_window"), model.get("sliding_window_pattern")) == (window, pattern)


def test_mla_and_moe_keys_of_deepseek() -> None:
    # deepseek-ai/DeepSeek-V2-Lite config.json: kv_lora_rank 512, q_lora_rank null, 64 routed + 2 shared
    # experts of 1408, top-6, first_k_dense_replace 1
    model, _ = model_of("deepseek-v2-lite.json")
    assert model["kv_lora_rank"] == 512 and "q_lora_rank" not in model
    assert (model["experts"], model["shared_experts"], model["expert_ffn_size"]) == (64, 2, 1408)
    assert (model["experts_per_token"], model["first_dense_layers"]) == (6, 1)
    model, _ = model_of("deepseek-v3.json")  # DeepSeek-V3: q_lora_rank 1536, first_k_dense_replace 3
    assert (model["q_lora_rank"], model["first_dense_layers"], model["shared_experts"]) == (1536, 3, 1)


def test_qwen2_moe_shared_expert() -> None:
    # Qwen/Qwen1.5-MoE-A2.7B: 60 experts of 1408, top-4, a shared expert of 5632 with a sigmoid gate
    model, _ = model_of("qwen1.5-moe-a2.7b.json")
    assert model["shared_expert_ffn_size"] == 5632 and model["shared_expert_gate"] is True
    assert model["qkv_bias"] is True and (model["experts"], model["experts_per_token"]) == (60, 4)


@pytest.mark.parametrize(
    ("name", "head", "pooler", "labels"),
    [
        ("bert-base-uncased.json", "lm", False, None),  # BertForMaskedLM: no pooler
        ("bert-base-uncased-pretraining.json", "pretraining", True, None),
        ("bert-base-ner.json", "token_classification", False, 9),  # dslim/bert-base-NER: 9 tags
        ("bert-base-cased-squad2.json", "question_answering", False, 2),
        ("all-minilm-l6-v2.json", "none", True, None),  # BertModel keeps its pooler
        ("twitter-roberta-base-sentiment-latest.json", "classification", True, 3),
        ("deberta-v3-base.json", "none", False, None),  # DebertaV2Model has no pooler
        ("dialogrpt-updown.json", "classification", None, 1),  # GPT2ForSequenceClassification
        ("skywork-reward-llama-3.1-8b.json", "classification", None, 1),
        ("vit-base-patch16-224-in21k.json", "none", True, None),  # ViTModel
        ("xlm-roberta-base.json", "lm", False, None),  # XLMRobertaForMaskedLM: no pooler
        ("distilbert-base-uncased.json", "lm", False, None),  # DistilBertForMaskedLM
        # DistilBertForSequenceClassification: pre_classifier (the pooler's tensors) + classifier, 2 labels
        ("distilbert-base-uncased-finetuned-sst-2-english.json", "classification", True, 2),
    ],
)
def test_heads_from_architectures(name: str, head: str, pooler: bool | None, labels: int | None) -> None:
    model, _ = model_of(name)
    assert (model["head"], model.get("pooler"), model.get("num_labels")) == (head, pooler, labels)


def test_decoder_classifier_has_no_bias() -> None:
    # LlamaForSequenceClassification / GPT2ForSequenceClassification: score = nn.Linear(..., bias=False)
    assert model_of("dialogrpt-updown.json")[0]["head_bias"] is False


def test_t5_encoder_model_is_the_encoder_stack() -> None:
    model, _ = model_of("t5-v1_1-small-encoder.json")
    assert (model["architecture"], model["mlp"], model["head"]) == ("encoder", "geglu", "none")


def test_flan_t5_with_an_untied_head_counts_it() -> None:
    """flan-t5-small's Hub config says tie_word_embeddings: false, and its checkpoint stores lm_head apart.
    Tied, transformers 5.24 counts 60,511,616 on the meta device (tests/data/hf_configs/meta_counts.json);
    the separate head adds vocab x d_model = 32,128 x 512 = 16,449,536, so 76,961,152: the model card's 77M."""
    from vramcalc.core.params import count_params
    from vramcalc.families.resolve import resolve_model
    from vramcalc.spec.hf_import import validated_spec

    config = json.loads((CONFIGS / "flan-t5-small.json").read_text(encoding="utf-8"))
    tied = validated_spec(config, "flan-t5-small.json", {"batch_size": 1, "seq_len": 128})
    untied = validated_spec(
        {**config, "tie_word_embeddings": False}, "flan-t5-small.json", {"batch_size": 1, "seq_len": 128}
    )
    counts = [count_params(resolve_model(spec.model, spec.workload)[0]) for spec in (tied, untied)]
    assert counts == [60_511_616, 76_961_152]
    _, notes = model_from_config({**config, "tie_word_embeddings": False}, "flan-t5-small.json")
    assert any("separate LM head" in note for note in notes)


def test_gemma3_multimodal_reads_the_text_model_and_the_default_tower() -> None:
    text = json.loads((CONFIGS / "gemma-3-1b-pt.json").read_text(encoding="utf-8"))
    wrapper = {"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"], "text_config": text}
    model, notes = model_from_config(wrapper, "gemma3.json")
    vision = model.pop("vision")
    assert model == model_of("gemma-3-1b-pt.json")[0] | {"head": "lm"}
    # no vision_config: transformers builds SiglipVisionConfig()'s tower (tests/spec/test_hf_vision.py)
    assert vision["params"] == 93_769_728
    assert any("vision_config not given" in note for note in notes)


@pytest.mark.parametrize(
    ("config", "mode", "expected"),
    [
        ({"torch_dtype": "bfloat16"}, None, "amp-bf16"),  # training default: HF Trainer's bf16=True
        ({"dtype": "float16"}, "train", "amp-fp16"),  # transformers 5 writes "dtype"
        ({"torch_dtype": "bfloat16"}, "inference", "bf16"),
        ({"torch_dtype": "float32"}, None, "fp32"),
        ({}, None, None),
    ],
)
def test_default_precision_from_torch_dtype(config: dict[str, Any], mode: str | None, expected: str | None) -> None:
    assert default_precision(config, "c.json", mode)[0] == expected


def test_estimate_without_precision_uses_torch_dtype() -> None:
    args = ["estimate", "--hf-config", str(CONFIGS / "llama-3.2-1b.json"), "--batch-size", "1", "--seq-len", "256"]
    default = runner.invoke(app, [*args, "--json"])
    assert default.exit_code == 0, default.output
    assert "note: precision not given: amp-bf16 (config.json dtype: bfloat16" in default.stderr
    explicit = runner.invoke(app, [*args, "--precision", "amp-bf16", "--json"])
    assert json.loads(default.stdout) == json.loads(explicit.stdout)
    assert "precision not given" not in explicit.stderr
    inference = runner.invoke(app, [*args, "--mode", "inference", "--json"])  # bf16 weights: half of fp32
    fp32 = runner.invoke(app, [*args, "--mode", "inference", "--precision", "fp32", "--json"])
    assert "precision not given: bf16" in inference.stderr
    assert json.loads(inference.stdout)["peak_allocated_bytes"] < json.loads(fp32.stdout)["peak_allocated_bytes"]


def test_hf_config_alone_fills_the_workload_and_says_so() -> None:
    """`estimate --hf-config F` with no flag: batch 1, seq_len min(4,096, the model's context), the
    config's dtype; each default one note, as `--model` does. Llama-3.2-1B: 131,072 positions -> 4,096."""
    alone = runner.invoke(app, ["estimate", "--hf-config", str(CONFIGS / "llama-3.2-1b.json"), "--json"])
    assert alone.exit_code == 0, alone.output
    notes = [line for line in alone.stderr.splitlines() if line.startswith("note: ")]
    assert notes[:2] == ["note: workload.batch_size not given: 1", "note: workload.seq_len not given: 4,096"]
    args = ["--batch-size", "1", "--seq-len", "4096", "--precision", "amp-bf16", "--json"]
    given = runner.invoke(app, ["estimate", "--hf-config", str(CONFIGS / "llama-3.2-1b.json"), *args])
    assert json.loads(alone.stdout)["total_bytes"] == json.loads(given.stdout)["total_bytes"]


def test_import_writes_the_config_dtype() -> None:
    assert "precision: fp16" in import_yaml(CONFIGS / "phi-1_5.json")  # torch_dtype float16
    assert "precision: bf16" in import_yaml(CONFIGS / "gemma-2-2b.json")  # bfloat16


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"model_type": "mamba"},
            r"model_type: 'mamba' is not supported \(supported: bert, bloom, deberta-v2, deepseek_v2",
        ),
        ({"architectures": ["BertForNextSentencePrediction"]}, "'BertForNextSentencePrediction': this head"),
        (
            {
                "model_type": "deberta-v2",
                "relative_attention": True,
                "share_att_key": False,
                "pos_att_type": ["p2c", "c2p"],
            },
            "share_att_key",
        ),
        ({"torch_dtype": "int8"}, "torch_dtype: 'int8' is not one of bfloat16"),
    ],
)
def test_bad_configs_are_one_error_line(tmp_path: Path, changes: dict[str, Any], message: str) -> None:
    config = json.loads((CONFIGS / "bert-base-uncased.json").read_text(encoding="utf-8")) | changes
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    for args in (["import", str(path)], ["estimate", "--hf-config", str(path), "--batch-size", "1", "--seq-len", "8"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {path}: "), result.stderr
        assert re.search(message, lines[0]), lines[0]


def test_dense_layers_other_than_the_first_are_refused(tmp_path: Path) -> None:
    config = json.loads((CONFIGS / "qwen1.5-moe-a2.7b.json").read_text(encoding="utf-8")) | {"mlp_only_layers": [3]}
    with pytest.raises(SpecError, match=r"mlp_only_layers: \[3\]: only the first layers can be dense"):
        model_from_config(config, "q.json")


def test_deepseek_v2_lite_kv_cache_is_the_mla_latent() -> None:
    # vLLM stores (kv_lora_rank 512 + qk_rope_head_dim 64) x 27 layers x 2 B = 31,104 B per token (bf16)
    args = ["estimate", "--hf-config", str(CONFIGS / "deepseek-v2-lite.json"), "--mode", "inference"]
    result = runner.invoke(app, [*args, "--batch-size", "1", "--seq-len", "512", "--max-new-tokens", "16", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["kv_cache_bytes_per_token"] == 31_104


def test_gpt_j_6b_by_hand() -> None:
    # EleutherAI/gpt-j-6b (modeling_gptj.py): wte 50400 x 4096; per layer ln_1 (2 x 4096), bias-free q/k/v/out
    # (4 x 4096^2), fc_in/fc_out with biases (2 x 4096 x 16384 + 16384 + 4096); ln_f; lm_head with a bias:
    # 206,438,400 + 28 x 201,355,264 + 8,192 + 206,438,400 + 50,400 = 6,050,882,784
    model, notes = model_of("gpt-j-6b.json")
    assert (model["attention_bias"], model["bias"], model["lm_head_bias"]) == (False, True, True)
    assert (model["parallel_block"], model["norms_per_layer"], model["fused_qkv"]) == (True, 1, False)
    assert notes == ["rotary_dim 64: rotary on part of each head (no parameters)"]  # head_dim 256
    args = ["estimate", "--hf-config", str(CONFIGS / "gpt-j-6b.json"), "--batch-size", "1", "--seq-len", "8"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["params"] == 6_050_882_784


def test_starcoder_is_multi_query() -> None:
    # bigcode/starcoderbase-1b: multi_query true, 16 heads of 128 -> one KV head; vLLM stores k and v of
    # 128 per layer: 2 x 24 layers x 128 x 2 B (bf16) = 12,288 B per token
    model, _ = model_of("starcoderbase-1b.json")
    assert (model["kv_heads"], model["fused_qkv"], model["position"]) == (1, True, "learned")
    args = ["estimate", "--hf-config", str(CONFIGS / "starcoderbase-1b.json"), "--mode", "inference"]
    result = runner.invoke(
        app, [*args, "--precision", "bf16", "--batch-size", "1", "--seq-len", "512", "--max-new-tokens", "16", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["kv_cache_bytes_per_token"] == 12_288


def test_phimoe_and_olmoe_keys() -> None:
    # microsoft/Phi-3.5-MoE-instruct: LayerNorms, biases on q/k/v/o and the LM head, 16 experts, top-2, 8 KV heads
    model, _ = model_of("phi-3.5-moe-instruct.json")
    assert (model["norm"], model["attention_bias"], model["lm_head_bias"]) == ("layernorm", True, True)
    assert (model["experts"], model["experts_per_token"], model["kv_heads"]) == (16, 2, 8)
    # allenai/OLMoE-1B-7B-0924: q_norm over hidden_size and k_norm over the k width; 64 experts, top-8
    model, _ = model_of("olmoe-1b-7b-0924.json")
    assert (model["qk_norm"], model["experts"], model["experts_per_token"]) == ("projection", 64, 8)
    assert "expert_ffn_size" not in model and model["ffn_size"] == 1024


@pytest.mark.parametrize(
    ("name", "changes", "message"),
    [
        ("starcoderbase-1b.json", {"add_cross_attention": True}, "add_cross_attention: true is not modelled"),
        ("starcoderbase-1b.json", {"activation_function": "swish"}, "activation_function: 'swish' is not supported"),
        ("olmoe-1b-7b-0924.json", {"head_dim": 64}, r"head_dim: 64 x heads != hidden_size"),
        (
            "distilbert-base-uncased.json",
            {"architectures": ["DistilBertForQuestionAnswering"], "num_labels": 3},
            # DistilBertForQuestionAnswering raises ValueError unless num_labels is 2 (transformers 5.25)
            "num_labels: 3: DistilBertForQuestionAnswering takes 2",
        ),
    ],
)
def test_new_families_refuse_what_they_cannot_express(name: str, changes: dict[str, Any], message: str) -> None:
    config = json.loads((CONFIGS / name).read_text(encoding="utf-8")) | changes
    with pytest.raises(SpecError, match=message):
        model_from_config(config, name)


#: Config fields as transformers writes them (each class's defaults where a field is absent): the dropout rates
#: the families' classes read, and the spec's one rate they make
DROPOUT_CASES = [
    # FalconConfig / BloomConfig: hidden_dropout = attention_dropout = 0.0 (falcon-7b's and bloom's configs too)
    ({"model_type": "falcon", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
      "vocab_size": 100}, 0.0),
    ({"model_type": "bloom", "hidden_size": 64, "n_head": 4, "n_layer": 2, "vocab_size": 100}, 0.0),
    # PhiConfig: resid_pdrop 0.0; phi-2 sets 0.1 on the residual branches, attention_dropout 0.0
    ({"model_type": "phi", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100,
      "intermediate_size": 256, "resid_pdrop": 0.1}, 0.1),
    # GPTJConfig: resid_pdrop = attn_pdrop = 0.0; GPTBigCodeConfig: both 0.1
    ({"model_type": "gptj", "n_embd": 64, "n_head": 4, "n_layer": 2, "vocab_size": 100}, 0.0),
    ({"model_type": "gpt_bigcode", "n_embd": 64, "n_head": 4, "n_layer": 2, "vocab_size": 100}, 0.1),
    # Starcoder2Config: residual_dropout = attention_dropout = 0.0
    ({"model_type": "starcoder2", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
      "vocab_size": 100, "intermediate_size": 256}, 0.0),
]  # fmt: skip


@pytest.mark.parametrize(("config", "dropout"), DROPOUT_CASES, ids=[c["model_type"] for c, _ in DROPOUT_CASES])
def test_the_families_dropout_rates_are_read(config: dict[str, Any], dropout: float) -> None:
    model, _ = model_from_config(config, "config.json")
    assert model["dropout"] == dropout


def test_differing_dropout_rates_count_the_larger_and_say_so() -> None:
    config = {"model_type": "falcon", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
              "vocab_size": 100, "attention_dropout": 0.1}  # fmt: skip
    model, notes = model_from_config(config, "config.json")
    assert model["dropout"] == 0.1
    assert any("attention_dropout 0.1 and hidden_dropout 0.0" in note for note in notes)


def test_phi_attention_dropout_is_refused_naming_the_field() -> None:
    config = {"model_type": "phi", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
              "vocab_size": 100, "intermediate_size": 256, "attention_dropout": 0.1}  # fmt: skip
    with pytest.raises(SpecError, match=r"config\.json: attention_dropout"):
        model_from_config(config, "config.json")
