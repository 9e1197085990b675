"""``runtime: litgpt``: litgpt's ``generate/base.py`` through Lightning's ``BitsandbytesPrecision``
(vramcalc/llm/generation.py, vramcalc/stacks/litgpt.py), by hand from litgpt's source at 982abcbc
(generate/base.py, lit_gpt/model.py ``set_kv_cache``) and Lightning's plugin (``_quantize_weight``,
``_quantize_on_load_hook``), and against litgpt's published falcon-7b figures (tutorials/quantize.md at
982abcbc, A100 40GB, ``torch.cuda.max_memory_allocated() / 1e9``)."""

from __future__ import annotations

from typing import Any

import pytest

from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.spec.load import parse_spec

#: falcon-7b's LM head, 65,024 x 4,544 (litgpt's padded vocabulary; its own head, never tied)
HEAD = 65_024 * 4_544


def falcon(precision: str, quantization: Any = None, **extra: Any) -> Any:
    wl: dict[str, Any] = {"mode": "inference", "batch_size": 1, "prompt_len": 6, "max_new_tokens": 256}
    wl |= {"precision": precision, "runtime": "litgpt", "versions": {"bitsandbytes": "0.41.1"}, **extra}
    if quantization is not None:
        wl["quantization"] = quantization
    return estimate(parse_spec({"name": "f", "model": {"preset": "falcon-7b"}, "workload": wl}), hopper_or_newer=False)


def test_the_cache_is_set_up_for_the_whole_context() -> None:
    # set_kv_cache: K and V of 1 KV head x 64 per layer, 32 layers, fp16: 8,192 B per token, for prompt + new
    # tokens = 262 from the start, and the 262 x 262 boolean mask (rounded to the allocator's 512 B)
    result = falcon("fp16")
    cache = 262 * 8_192 + 69_120
    assert result.phase_components["prefill"]["kv_cache"] == result.phase_components["decode"]["kv_cache"] == cache


def test_int8_peaks_when_the_checkpoint_requantizes_the_lm_head() -> None:
    # The model is built on the GPU, every linear quantized as it is made; loading the checkpoint quantizes
    # each weight again from an fp16 copy, the whole model allocated: for the LM head, the largest, its fp16
    # copy and double_quant's CB and CBt, 4 B per element. Published: 8.70 GB (tutorials/quantize.md)
    result = falcon("fp16", "int8")
    load = result.phase_components["load"]
    assert result.peak_phase == "load"
    assert load["temporaries"] == 4 * HEAD
    assert result.peak_allocated_bytes == pytest.approx(8.70e9, rel=0.01)


def test_nf4_peaks_at_the_prefill_dequantizing_the_head_twice() -> None:
    # Lightning quantized an fp16 copy, so bitsandbytes 0.41's dequantize_4bit returns fp16 and .to(bf16)
    # copies it: the LM head at both, 2 x 2 x 65,024 x 4,544 B, less the one ffn-wide activation the matmul
    # stands in for (6 tokens x 18,176 x 2 B). Published: 5.72 GB
    result = falcon("bf16", "nf4")
    assert result.peak_phase == "prefill"
    assert result.phase_components["prefill"]["temporaries"] == 4 * HEAD - 6 * 18_176 * 2
    assert result.peak_allocated_bytes == pytest.approx(5.72e9, rel=0.01)


def test_lightning_quantizes_the_lm_head_under_litgpt() -> None:
    workload = {"mode": "inference", "batch_size": 1, "prompt_len": 6, "max_new_tokens": 8, "runtime": "litgpt"}
    spec = parse_spec({"name": "f", "model": {"preset": "falcon-7b"}, "workload": workload | {"quantization": "nf4"}})
    assert spec.workload.quantization is not None and spec.workload.quantization.lm_head is True


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"quantization": {"method": "awq", "bits": 4}}, r"workload\.quantization: awq is not one of litgpt's"),
        ({"parallel": {"tensor": 2}}, r"workload\.runtime: litgpt across several GPUs"),
        ({"kv_cache_dtype": "fp8"}, r"workload\.kv_cache_dtype: litgpt's KV cache has the model's dtype"),
        ({"kv_block_size": 16}, r"workload\.kv_block_size: not a setting of litgpt's generate"),
    ],
)
def test_what_litgpt_does_not_run_is_refused(extra: dict[str, Any], message: str) -> None:
    data: dict[str, Any] = {
        "name": "f",
        "model": {"preset": "falcon-7b"},
        "workload": {"mode": "inference", "batch_size": 1, "prompt_len": 6, "max_new_tokens": 8, "runtime": "litgpt"},
    }
    if "parallel" in extra:
        data["parallel"] = extra["parallel"]
    else:
        data["workload"] |= extra
    with pytest.raises(SpecError, match=message):  # refused when the spec is estimated
        estimate(parse_spec(data))
