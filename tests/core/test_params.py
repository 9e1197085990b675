"""Exact parameter counts against published totals."""

from __future__ import annotations

import pytest

from vramcalc.core.params import count_params
from vramcalc.families.resolve import resolve_model
from vramcalc.spec.models import ModelSpec, Workload


def params(seq_len: int = 128, **model: object) -> int:
    shape, _ = resolve_model(ModelSpec(**model), Workload(batch_size=1, seq_len=seq_len))
    return count_params(shape)


def test_bert_base_uncased_bertmodel_with_pooler() -> None:
    # 109,482,240: sum(p.numel()) of transformers' BertModel.from_pretrained("bert-base-uncased")
    # (the figure the issue pins; the model card rounds it to 110M)
    assert (
        params(architecture="encoder", layers=12, hidden_size=768, heads=12, vocab_size=30522, head="none", pooler=True)
        == 109_482_240
    )


def test_bert_base_masked_lm() -> None:
    # BertForMaskedLM: no pooler; MLM transform (768x768 + 768), its LayerNorm (1536) and the
    # decoder bias (30522): 109,482,240 - 590,592 + 590,592 + 1,536 + 30,522 = 109,514,298,
    # which is also the tracer's count (shared/calibration/tracer_cases.json, bert-base cases)
    assert params(architecture="encoder", layers=12, hidden_size=768, heads=12, vocab_size=30522) == 109_514_298


def test_gpt2_small() -> None:
    # 124,439,808: GPT2LMHeadModel("gpt2"), tied LM head (Radford et al. 2019; HF model card "124M")
    assert (
        params(architecture="decoder", layers=12, hidden_size=768, heads=12, vocab_size=50257, mlp="gelu_tanh")
        == 124_439_808
    )


def test_llama_2_7b() -> None:
    # 6,738,415,616: LlamaForCausalLM from meta-llama/Llama-2-7b-hf (safetensors metadata total)
    got = params(
        architecture="decoder", layers=32, hidden_size=4096, heads=32, vocab_size=32000, mlp="swiglu", ffn_size=11008
    )
    assert got == 6_738_415_616


def test_llama_3_8b_gqa() -> None:
    # 8,030,261,248: meta-llama/Meta-Llama-3-8B (safetensors metadata); GQA with 8 KV heads
    got = params(
        architecture="decoder",
        layers=32,
        hidden_size=4096,
        heads=32,
        kv_heads=8,
        vocab_size=128256,
        mlp="swiglu",
        ffn_size=14336,
    )
    assert got == 8_030_261_248


def test_t5_base() -> None:
    # 222,903,552: T5ForConditionalGeneration("t5-base"), tied LM head; hand check:
    # shared 32128*768 + 12*(4*768^2 + 2*768*3072 + 2*768) + 12*(8*768^2 + 2*768*3072 + 3*768)
    # + 2 relative-bias tables 32*12 + 2 final norms 768 = 222,903,552
    got = params(
        architecture="encoder-decoder",
        layers=12,
        hidden_size=768,
        heads=12,
        vocab_size=32128,
        mlp="relu",
        ffn_size=3072,
        tie_embeddings=True,
    )
    assert got == 222_903_552


def test_hand_derived_tiny_decoder() -> None:
    # embeddings (10 + 8) * 64 = 1,152; block: attention 4 * (64*64 + 64) = 16,640,
    # MLP 64*256 + 256 + 256*64 + 64 = 33,088, two LayerNorms 256 -> 49,984; final LN 128: 51,264
    assert (
        params(
            architecture="decoder",
            layers=1,
            hidden_size=64,
            heads=1,
            ffn_size=256,
            vocab_size=10,
            max_position_embeddings=8,
            seq_len=8,  # within the 8 learned positions
        )
        == 51_264
    )


def test_untied_head_adds_vocab_times_hidden() -> None:
    tied = params(architecture="decoder", layers=2, hidden_size=64, vocab_size=100, tie_embeddings=True)
    untied = params(architecture="decoder", layers=2, hidden_size=64, vocab_size=100, tie_embeddings=False)
    assert untied - tied == 100 * 64


@pytest.mark.parametrize("kv_heads", [1, 2, 4, 8])
def test_gqa_shrinks_k_and_v(kv_heads: int) -> None:
    # K and V projections are hidden x (kv_heads * head_dim) each, no bias in the Llama family
    full = params(architecture="decoder", layers=1, hidden_size=512, heads=8, vocab_size=10, mlp="swiglu")
    grouped = params(
        architecture="decoder", layers=1, hidden_size=512, heads=8, kv_heads=kv_heads, vocab_size=10, mlp="swiglu"
    )
    assert full - grouped == 2 * 512 * (8 - kv_heads) * 64
