"""``runtime: torchtune``: torchtune's ``generate`` (pytorch/torchtune ``recipes/generate.py``,
``torchtune/generation/_generation.py`` ``generate``, ``torchtune/modules/kv_cache.py`` ``KVCache``,
``modules/transformer.py`` ``TransformerDecoder.unembed``, ``modules/position_embeddings.py``), counted by hand
from those sources (vramcalc/stacks/torchtune.py)."""

from __future__ import annotations

from typing import Any

import pytest
from cli_errors import estimate_error_line

from vramcalc.families import estimate
from vramcalc.spec.load import parse_spec

#: Llama-3-8B (meta-llama/Meta-Llama-3-8B config.json): 32 layers, 8 KV heads of 128, bf16, vocab 128,256
LLAMA3 = {
    "layers": 32, "hidden_size": 4096, "heads": 32, "kv_heads": 8, "ffn_size": 14336, "vocab_size": 128256,
    "mlp": "swiglu", "norm": "rmsnorm", "position": "rotary",
}  # fmt: skip
#: KVCache: k_cache and v_cache of (1, 8, max_seq_len, 128) bf16 in 32 layers: 2 x 8 x 128 x 2 x 32 B per token
PER_TOKEN = 2 * 8 * 128 * 2 * 32
#: one position's logits for one sequence in fp32 (unembed's ``self.output(h).float()``)
ROW = 128256 * 4
assert PER_TOKEN == 131_072 and ROW == 513_024


def llama3(**workload: Any) -> Any:
    wl = {"mode": "inference", "batch_size": 1, "prompt_len": 1024, "max_new_tokens": 7168, "precision": "bf16"}
    return estimate(parse_spec({"name": "l", "model": LLAMA3, "workload": wl | {"runtime": "torchtune"} | workload}))


#: max_seq_len = prompt + new tokens = 1,024 + 7,168 = 8,192 (recipes/generate.py: decoder_max_seq_len=
#: prompt.numel() + cfg.max_new_tokens). Set up before the prefill and alive to the end:
SETUP = (
    8192 * PER_TOKEN  # every layer's k_cache and v_cache
    + 32 * 8192 * 8  # every layer's cache_pos = torch.arange(0, 8192), int64
    + 8192 * 128 * 4  # the rotary cache (8,192 positions: the cache's, no max_position_embeddings given) x 64 x 2 fp32
    + 8192 * 8192  # generate's masks = tril(ones(8192, 8192, bool)).unsqueeze(0): one for the batch
    + 8192 * 8  # generate's input_pos = arange(8192), int64
)


def test_the_caches_the_mask_and_the_rotary_rows_by_hand() -> None:
    result = llama3()
    assert SETUP == 1_147_207_680
    # the prefill indexes the rotary cache at its 1,024 positions: 1,024 x 128 x 4 B
    assert result.phase_components["prefill"]["kv_cache"] == SETUP + 1024 * 512
    # a step's mask row masks[:, pos, None, :].contiguous() (8,192 B) and rotary row (512 B)
    assert result.phase_components["decode"]["kv_cache"] == SETUP + 8192 + 512


def test_the_last_step_keeps_every_generated_tokens_fp32_logits() -> None:
    # generated_logits holds 7,167 rows through the last step's forward; its torch.cat builds 7,168 rows beside
    # them and the step's own fp32 row: (7,167 + 7,168) x 513,024 B = 6.85 GiB on top of the 1 GiB cache
    result = llama3()
    decode = result.phase_components["decode"]
    assert result.peak_phase == "decode"
    assert decode["temporaries"] == (7167 + 7168) * ROW == 7_354_199_040
    assert decode["activations"] == ROW


def test_the_prefill_upcasts_every_prompt_positions_logits() -> None:
    # unembed returns self.output(h).float(): 1,024 x 128,256 bf16 logits and their fp32 copy alive together,
    # where gpt-fast (same 8,192-token cache: find_multiple(8192, 8)) returns the bf16 ones only: 4 B more per value
    torchtune, gpt_fast = llama3(), llama3(runtime="gpt-fast")
    prefill = torchtune.phase_components["prefill"]["activations"]
    assert prefill - gpt_fast.phase_components["prefill"]["activations"] == 1024 * ROW


def test_a_two_token_generation_keeps_the_prompts_logits_through_its_one_step() -> None:
    # max_new_tokens 2: one decode step, whose forward runs while generated_logits is still a view of the
    # prefill's whole fp32 logits (1,024 x 513,024 B); its cat then builds 2 rows beside them. The forward is
    # the larger moment: it expands K and V over the 1,026-token cache (2 x 1,026 x 4,096 x 2 B = 16.8 MB),
    # more than the cat's 2 rows and the step's own row (3 x 513,024 B = 1.5 MB)
    decode = llama3(max_new_tokens=2).phase_components["decode"]
    assert decode["temporaries"] == 1024 * ROW == 525_336_576
    assert decode["activations"] >= 2 * 1026 * 4096 * 2


def test_max_cache_len_sets_max_seq_len() -> None:
    # a short generation (8 + 300 tokens) with the caches set up for the builder's max_seq_len 8,192: the KV
    # cache is 8,192 x 131,072 B = 1 GiB whatever it generates; the mask is 308 x 8,192 B
    decode = llama3(prompt_len=8, max_new_tokens=300, max_cache_len=8192).phase_components["decode"]
    setup = 8192 * PER_TOKEN + 32 * 8192 * 8 + 8192 * 128 * 4 + 308 * 8192 + 308 * 8
    setup_rounded = setup + 512 - (308 * 8) % 512  # input_pos: 2,464 B in the allocator's 512 B blocks
    assert decode["kv_cache"] == setup_rounded + 8192 + 512
    # and the recipe's default: only the context, 308 tokens
    short = llama3(prompt_len=8, max_new_tokens=300).phase_components["decode"]["kv_cache"]
    assert short < 308 * PER_TOKEN + 2**20


def test_the_assumption_states_max_seq_len() -> None:
    notes = " ".join(llama3().assumptions)
    assert "max_seq_len 8,192" in notes and "recipes/generate.py" in notes


BASE = "model: {preset: llama-2-7b}\nworkload: {mode: inference, batch_size: 1, prompt_len: 8, max_new_tokens: 8"


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        (", cache: dynamic, runtime: torchtune}", "workload.cache: torchtune sets up"),
        (", runtime: torchtune, quantization: nf4}", "workload.quantization: torchtune"),
        (", runtime: torchtune, kv_block_size: 16}", "workload.kv_block_size: not a setting of torchtune"),
        (", runtime: torchtune, kv_cache_dtype: fp8}", "workload.kv_cache_dtype: torchtune"),
        (", runtime: torchtune, attention: eager}", "workload.attention: torchtune"),
        (", runtime: torchtune, max_cache_len: 8}", "workload.max_cache_len: 8 is shorter than seq_len 16"),
        (", runtime: torchtune, use_cache: false}", "workload.use_cache: torchtune"),
        (", runtime: torchtune, versions: {transformers: 4.40.0}}", "workload.versions.transformers: torchtune"),
    ],
)
def test_what_is_not_modelled_is_refused_in_one_line(tmp_path: Any, extra: str, key: str) -> None:
    assert key in estimate_error_line(tmp_path / "s.yaml", BASE + extra + "\n")
