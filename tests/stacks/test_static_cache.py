"""Static KV caches: transformers' ``cache: static`` (``StaticCache``, cache_utils.py and generation/utils.py of
transformers 5.25) and ``runtime: gpt-fast`` (pytorch-labs/gpt-fast ``model.py`` ``setup_caches`` and
``KVCache``, ``generate.py`` ``generate``), by hand from those sources (vramcalc/stacks/transformers.py,
vramcalc/stacks/gpt_fast.py)."""

from __future__ import annotations

from typing import Any

import pytest
from cli_errors import estimate_error_line

from vramcalc.families import estimate
from vramcalc.spec.load import parse_spec

#: Llama-3-8B (meta-llama/Meta-Llama-3-8B config.json): 32 layers, 8 KV heads of 128, bf16
LLAMA3 = {
    "layers": 32, "hidden_size": 4096, "heads": 32, "kv_heads": 8, "ffn_size": 14336, "vocab_size": 128256,
    "mlp": "swiglu", "norm": "rmsnorm", "position": "rotary",
}  # fmt: skip
#: K and V of 8 heads x 128 at 2 B in 32 layers: 2 x 8 x 128 x 2 x 32 B per token
PER_TOKEN = 2 * 8 * 128 * 2 * 32
assert PER_TOKEN == 131_072


def llama3(**workload: Any) -> Any:
    wl = {"mode": "inference", "batch_size": 1, "prompt_len": 1024, "max_new_tokens": 7168, "precision": "bf16"}
    return estimate(parse_spec({"name": "l", "model": LLAMA3, "workload": wl | workload}))


def test_transformers_static_cache_is_allocated_for_max_length_less_one() -> None:
    # generate sizes the static cache max_length - 1 = 1024 + 7168 - 1 = 8191 tokens (generation/utils.py:
    # max_cache_length = generation_config.max_length - 1); StaticLayer allocates all of it in the prefill
    result = llama3(runtime="hf", cache="static")
    cache = 8191 * PER_TOKEN
    assert result.phase_components["prefill"]["kv_cache"] == cache
    # each decode step's boolean (batch, 1, 1, max_cache_len) mask: 8,191 B, one 512 B-rounded block of 8,192
    assert result.phase_components["decode"]["kv_cache"] == cache + 8192
    assert result.phase_components["decode"]["temporaries"] == 0  # written in place: no torch.cat


def test_static_against_dynamic_differs_by_the_hand_counted_bytes() -> None:
    # The last decode step. The dynamic cache holds 8,192 tokens and torch.cat keeps one layer's old cache beside
    # the new one (1/32 of it); its step gets no mask, and vramcalc counts K and V expanded over 8,192 tokens
    # (repeat_kv, or SDPA's math kernel with enable_gqa: 2 x 8,192 x 4,096 x 2 B = 128 MiB). The static cache
    # holds 8,191 tokens, written in place; its step adds an 8,192 B mask and packs the query by KV head
    # (pack_gqa), so nothing is expanded and the step's activations are its logits: 128,256 x (2 + 4) B plus
    # the last hidden state in and out of the norm (2 x 4,096 x 2 B). So the static run peaks in the prefill.
    dynamic, static = llama3(runtime="hf"), llama3(runtime="hf", cache="static")
    assert (dynamic.peak_phase, static.peak_phase) == ("decode", "prefill")
    fast, slow = static.phase_components["decode"], dynamic.phase_components["decode"]
    assert slow["kv_cache"] - fast["kv_cache"] == 8192 * PER_TOKEN - (8191 * PER_TOKEN + 8192)
    assert (slow["temporaries"], fast["temporaries"]) == (8192 * PER_TOKEN // 32, 0)
    assert fast["activations"] == 128256 * 6 + 2 * 4096 * 2 == 785_920
    assert slow["activations"] >= 2 * 8192 * 4096 * 2


def test_max_cache_len_sizes_the_static_cache() -> None:
    # generation_config.max_cache_len larger than max_length - 1 wins: 32,768 tokens of 131,072 B = 4 GiB.
    # The decode step's attention reads the grouped K/V: its activations stay the step's own (under 1 MiB for one
    # token: the logits are 128,256 x (2 + 4) B = 752 KiB), not K and V expanded over the cache (512 MiB)
    result = llama3(runtime="hf", cache="static", max_cache_len=32768)
    decode = result.phase_components["decode"]
    assert decode["kv_cache"] == 4 * 2**30 + 32768
    assert decode["activations"] < 2**20


def test_a_hybrid_models_sliding_layers_hold_at_most_the_window() -> None:
    # A Gemma-2-style model: 4 layers, every 2nd global (sliding_window_pattern 2: layers 2 and 4), a window of
    # 16, 2 KV heads of 8 at bf16: 2 x 2 x 8 x 2 = 64 B per layer and token. Context 20 + 12 = 32, static
    # cache 31 tokens: StaticLayer 31 in the global layers, StaticSlidingWindowLayer min(16, 31) = 16 in the
    # sliding ones, for each of 2 sequences
    model = {
        "layers": 4, "hidden_size": 64, "heads": 4, "kv_heads": 2, "head_dim": 8, "ffn_size": 128,
        "vocab_size": 256, "sliding_window": 16, "sliding_window_pattern": 2, "position": "rotary",
        "norm": "rmsnorm", "mlp": "geglu",
    }  # fmt: skip
    wl = {"mode": "inference", "batch_size": 2, "prompt_len": 20, "max_new_tokens": 12, "precision": "bf16"}
    result = estimate(parse_spec({"name": "g", "model": model, "workload": wl | {"runtime": "hf", "cache": "static"}}))
    assert result.phase_components["prefill"]["kv_cache"] == 2 * (2 * 64 * 31 + 2 * 64 * 16)


def test_gpt_fast_sets_up_the_cache_the_mask_and_the_rotary_table() -> None:
    # setup_caches: max_seq_length = find_multiple(1024 + 7168, 8) = 8192; k_cache and v_cache of (1, 8, 8192,
    # 128) bf16 in 32 layers; causal_mask tril(ones(8192, 8192, bool)): 8192^2 B; freqs_cis of block_size
    # (no max_position_embeddings given: the cache's 8192) x 64 x 2 bf16 = 8192 x 128 x 2 B. The prefill
    # indexes causal_mask[None, None, input_pos] (1024 x 8192 B) and freqs_cis[input_pos] (1024 x 256 B)
    result = llama3(runtime="gpt-fast")
    setup = 8192 * PER_TOKEN + 8192 * 8192 + 8192 * 128 * 2
    assert result.phase_components["prefill"]["kv_cache"] == setup + 1024 * 8192 + 1024 * 256
    # a decode step's rows: 8,192 B of mask and 256 B of rotary table (a 512 B block)
    assert result.phase_components["decode"]["kv_cache"] == setup + 8192 + 512


def test_gpt_fast_mask_at_a_long_cache_is_its_square() -> None:
    # torchao's long-context benchmark: a cache of 131,072 tokens (--cache_size) for a short prompt. The
    # causal mask alone is 131,072^2 B = 16 GiB, beside the 131,072 x 131,072 B = 16 GiB KV cache
    result = llama3(runtime="gpt-fast", prompt_len=64, max_new_tokens=64, max_cache_len=131072)
    decode = result.phase_components["decode"]
    assert decode["kv_cache"] == 131072 * PER_TOKEN + 131072**2 + 131072 * 256 + 131072 + 512
    assert 131072**2 == 16 * 2**30


BASE = "model: {preset: llama-2-7b}\nworkload: {mode: inference, batch_size: 1, prompt_len: 8, max_new_tokens: 8"


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        (", cache: static}", "workload.cache: vllm, the default runtime"),
        (", cache: static, runtime: llama.cpp}", "workload.cache: llama.cpp keeps"),
        (", max_cache_len: 64, runtime: hf}", "workload.max_cache_len: only with cache: static"),
        (", cache: static, max_cache_len: 8, runtime: hf}", "workload.max_cache_len: 8 is shorter than seq_len 16"),
        (", cache: static, runtime: hf, attention: eager}", "workload.attention: cache: static"),
        (", cache: static, runtime: hf-legacy}", "workload.cache: hf-legacy"),
        (", cache: dynamic, runtime: gpt-fast}", "workload.cache: gpt-fast sets up"),
        (", runtime: gpt-fast, quantization: nf4}", "workload.quantization: gpt-fast"),
        (", runtime: gpt-fast, kv_block_size: 16}", "workload.kv_block_size: not a setting of gpt-fast"),
        (", max_cache_len: 64, runtime: litgpt}", "workload.max_cache_len: not a setting of litgpt"),
    ],
)
def test_what_is_not_modelled_is_refused_in_one_line(tmp_path: Any, extra: str, key: str) -> None:
    assert key in estimate_error_line(tmp_path / "s.yaml", BASE + extra + "\n")
