"""GGUF weights: llama.cpp's per-tensor types applied to a model's own tensors, checked against published file sizes.

The published sizes are Hugging Face's file listings in GB (1e9 B, three significant figures). A file holds the
weights plus its header (metadata and vocabulary: about 1 MB for a 32k vocabulary, up to about 10 MB with a
128k-152k vocabulary and its merges) and 32-byte tensor padding; vramcalc counts only the weights, which stay
within 1 % of the whole file.
"""

from __future__ import annotations

from typing import Any

import pytest

from vramcalc.core.params import count_params
from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.families.resolve import resolve_model
from vramcalc.spec.load import parse_spec
from vramcalc.stacks import gguf


def _spec(model: Any, quantization: Any = None) -> Any:
    wl: dict[str, Any] = {"mode": "inference", "batch_size": 1, "seq_len": 1, "precision": "fp16"}
    if quantization is not None:
        wl["quantization"] = quantization
    return parse_spec({"name": "t", "model": model, "workload": wl})


def _shape(model: str) -> tuple[Any, int]:
    s = _spec(model)
    shape, _ = resolve_model(s.model, s.workload)
    return shape, count_params(shape)


def test_block_arithmetic_of_one_row() -> None:
    # ggml-common.h: block_q4_K = 2 x fp16 (d, dmin) + 12 B scales + 128 B quants = 144 B per 256 weights;
    # a 4096-wide row is 16 blocks = 2,304 B (4.5 bits per weight)
    assert gguf.row_bytes("q4_K", 4096) == 2_304
    # block_q6_K = 128 B ql + 64 B qh + 16 B scales + 2 B d = 210 B / 256: 16 x 210 = 3,360
    assert gguf.row_bytes("q6_K", 4096) == 3_360
    # block_q8_0 = 2 B d + 32 B quants = 34 B / 32: 128 blocks x 34 = 4,352
    assert gguf.row_bytes("q8_0", 4096) == 4_352
    # block_q3_K = 32 B hmask + 64 B qs + 12 B scales + 2 B d = 110 B / 256 (3.4375 bits)
    assert gguf.row_bytes("q3_K", 256) == 110
    # a row of 896 (Qwen2.5-0.5B hidden) is not whole 256-blocks
    with pytest.raises(ValueError):
        gguf.row_bytes("q4_K", 896)


def test_use_more_bits_for_32_layers() -> None:
    # i < 32/8 = 4, i >= 7*32/8 = 28, or (i - 4) % 3 == 2 -> 6, 9, ..., 27: 4 + 4 + 8 = 16 layers
    chosen = [i for i in range(32) if gguf.use_more_bits(i, 32)]
    assert chosen == [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]


def _types(model: str, ftype: str) -> dict[str, str]:
    shape, n = _shape(model)
    return {t.name: ty for t, ty in gguf.tensor_types(shape, ftype, n)}


def test_q4_k_m_mix_of_llama_3_1_8b() -> None:
    types = _types("llama-3.1-8b", "q4_k_m")
    # attn_v and ffn_down at Q6_K in the 16 use_more_bits layers, Q4_K elsewhere; output Q6_K; embedding Q4_K
    assert types["blk.6.attn_v"] == types["blk.6.ffn_down"] == "q6_K"
    assert types["blk.7.attn_v"] == types["blk.7.ffn_down"] == "q4_K"
    assert types["output"] == "q6_K" and types["token_embd"] == "q4_K"
    assert sum(ty == "q6_K" for ty in types.values()) == 16 + 16 + 1


def test_q2_k_attn_v_depends_on_gqa() -> None:
    # Llama-3.1-8B: 32 heads / 8 KV heads = 4 -> Q4_K; Llama-2-7B: n_gqa 1 -> Q3_K
    assert _types("llama-3.1-8b", "q2_k")["blk.0.attn_v"] == "q4_K"
    assert _types("llama-2-7b", "q2_k")["blk.0.attn_v"] == "q3_K"


def test_tied_embedding_and_row_fallback() -> None:
    # Qwen2.5-0.5B: tied embedding, hidden 896 (not a multiple of 256): the embedding takes the output rule
    # (896 % 256 != 0 -> Q8_0) and Q4_K rows of 896 fall back to Q5_0 (896 / 32 = 28 blocks x 22 B = 616 B)
    types = _types("qwen2.5-0.5b", "q4_k_m")
    assert "output" not in types and types["token_embd"] == "q8_0"
    assert types["blk.1.attn_q"] == "q5_0"
    # ffn_down rows of 4,864 = 19 blocks of 256: Q4_K in layer 4 of 24 (not a use_more_bits layer)
    assert types["blk.4.ffn_down"] == "q4_K"


# Published file sizes (GB = 1e9 B):
# Llama-3.1-8B, llama.cpp b3613: https://huggingface.co/second-state/Meta-Llama-3.1-8B-GGUF
#   (Q6_K_L "Q8_0 for embed and output weights": https://huggingface.co/bartowski/Meta-Llama-3.1-8B-Instruct-GGUF)
# Llama-3.1-70B: https://huggingface.co/second-state/Meta-Llama-3.1-70B-Instruct-GGUF
# Mistral-7B-v0.1: https://huggingface.co/mradermacher/Mistral-7B-v0.1-GGUF/tree/main
# Qwen2-7B(-Instruct): https://huggingface.co/RichardErkhov/Qwen_-_Qwen2-7B-Instruct-gguf/tree/main
# Qwen2.5-7B-Instruct: https://huggingface.co/DevQuasar-2/Qwen.Qwen2-VL-7B-Instruct-GGUF/tree/main
# Mixtral-8x7B-v0.1: https://huggingface.co/mradermacher/Mixtral-8x7B-v0.1-GGUF/tree/main
PUBLISHED = [
    ("llama-3.1-8b", "q2_k", 3.18), ("llama-3.1-8b", "q3_k_s", 3.66), ("llama-3.1-8b", "q3_k_m", 4.02),
    ("llama-3.1-8b", "q3_k_l", 4.32), ("llama-3.1-8b", "q4_0", 4.66), ("llama-3.1-8b", "q4_k_s", 4.69),
    ("llama-3.1-8b", "q4_k_m", 4.92), ("llama-3.1-8b", "q5_0", 5.60), ("llama-3.1-8b", "q5_k_s", 5.60),
    ("llama-3.1-8b", "q5_k_m", 5.73), ("llama-3.1-8b", "q6_k", 6.60), ("llama-3.1-8b", "q8_0", 8.54),
    ("llama-3.1-8b", "f16", 16.1),
    ("llama-3.1-70b", "q2_k", 26.4), ("llama-3.1-70b", "q3_k_s", 30.9), ("llama-3.1-70b", "q4_k_m", 42.5),
    ("mistral-7b-v0.1", "q2_k", 2.72), ("mistral-7b-v0.1", "q3_k_s", 3.16), ("mistral-7b-v0.1", "q3_k_m", 3.52),
    ("mistral-7b-v0.1", "q3_k_l", 3.82), ("mistral-7b-v0.1", "q4_k_s", 4.14), ("mistral-7b-v0.1", "q4_k_m", 4.37),
    ("mistral-7b-v0.1", "q5_k_m", 5.13), ("mistral-7b-v0.1", "q8_0", 7.70),
    ("qwen2-7b", "q2_k", 3.02), ("qwen2-7b", "q3_k_s", 3.49), ("qwen2-7b", "q3_k_m", 3.81),
    ("qwen2-7b", "q3_k_l", 4.09), ("qwen2-7b", "q4_0", 4.43), ("qwen2-7b", "q4_1", 4.87),
    ("qwen2-7b", "q4_k_s", 4.46), ("qwen2-7b", "q4_k_m", 4.68), ("qwen2-7b", "q5_0", 5.32),
    ("qwen2.5-7b", "q5_k_m", 5.44), ("qwen2.5-7b", "q6_k", 6.25), ("qwen2.5-7b", "q8_0", 8.10),
    ("mixtral-8x7b", "q2_k", 17.3), ("mixtral-8x7b", "q3_k_m", 22.5), ("mixtral-8x7b", "q4_k_m", 28.4),
    ("mixtral-8x7b", "q5_k_m", 33.2),
]  # fmt: skip


@pytest.mark.parametrize(("model", "ftype", "gb"), PUBLISHED)
def test_weights_within_1_percent_of_the_published_file(model: str, ftype: str, gb: float) -> None:
    shape, n = _shape(model)
    weights = gguf.file_weights(shape, ftype, n).total_bytes
    assert abs(weights / (gb * 1e9) - 1) < 0.01


def test_output_and_embedding_overrides_from_the_spec() -> None:
    # bartowski's Q6_K_L = Q6_K with --output-tensor-type q8_0 --token-embedding-type q8_0: 6.85 GB (Q6_K 6.60 GB)
    q = {"method": "q6_k", "output_tensor_type": "q8_0", "token_embedding_type": "q8_0"}
    params = estimate(_spec("llama-3.1-8b", q)).components["parameters"]
    assert abs(params / 6.85e9 - 1) < 0.01
    # the two 128,256-row tensors of 4,096 move from Q6_K (3,360 B a row) to Q8_0 (4,352 B a row)
    plain = estimate(_spec("llama-3.1-8b", "q6_k")).components["parameters"]
    assert params - plain == 2 * 128_256 * (4_352 - 3_360)


def test_spec_parameters_are_the_file_weights() -> None:
    shape, n = _shape("mistral-7b-v0.1")
    result = estimate(_spec("mistral-7b-v0.1", "q4_k_m"))
    assert result.components["parameters"] == gguf.file_weights(shape, "q4_k_m", n).total_bytes
    assert any("q6_K" in a for a in result.assumptions)


def test_gguf_keys_only_for_gguf_and_decoders() -> None:
    with pytest.raises(SpecError, match="output_tensor_type"):
        _spec("llama-3.1-8b", {"method": "nf4", "output_tensor_type": "q8_0"})
    with pytest.raises(SpecError, match="GGUF"):
        estimate(_spec("bert-base-uncased", "q4_k_m"))
