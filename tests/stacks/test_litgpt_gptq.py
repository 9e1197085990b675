"""``runtime: litgpt`` with ``quantization: gptq``: litgpt's own ``gptq.int4`` (vramcalc/stacks/litgpt.py).

Expected values are worked out by hand from litgpt's source at commit 8641822 (quantize/gptq.py:
``ColBlockQuantizedLinear`` lines 226-255 and ``qlinear_4bit_weight`` lines 177-222; generate/base.py lines
149-183) and triton 2.1's ``testing.do_bench`` (its 256e6-byte L2-flush buffer), and checked against litgpt's
published peaks: tutorials/resource-tables.md lines 110-125 at 0cc02afa (one A100 40GB, litgpt 8641822,
bf16-true, 50 new tokens) and tutorials/quantize.md lines 136-141 (falcon-7b, 32-true, 256 new tokens), all
``torch.cuda.max_memory_allocated() / 1e9``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.spec.load import parse_spec

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import litgpt_score  # noqa: E402  (the spec of each published row, as the score script writes it)

#: falcon-7b in litgpt: 32 layers, 4,544 wide, 71 query heads and one KV head of 64, MLP 18,176, padded
#: vocabulary 65,024 (lit_gpt/config.py at 8641822).
H, FFN, VOCAB, LAYERS = 4_544, 18_176, 65_024, 32
QKV = (71 + 2) * 64


def falcon(precision: str = "fp32", prompt: int = 6, **quantization: Any) -> Any:
    wl: dict[str, Any] = {"mode": "inference", "batch_size": 1, "prompt_len": prompt, "max_new_tokens": 256}
    wl |= {"precision": precision, "runtime": "litgpt", "quantization": {"method": "gptq", **quantization}}
    return estimate(parse_spec({"name": "f", "model": {"preset": "falcon-7b"}, "workload": wl}), hopper_or_newer=False)


def test_weights_are_a_nibble_each_plus_a_scale_and_zero_per_row() -> None:
    # quant_weight uint8 [out, in/2]; scales and zeros [out, 1] at the model's dtype (fp32 under 32-true);
    # every linear of the blocks and the LM head
    linears = [(QKV, H), (H, H), (FFN, H), (H, FFN)]
    per_block = sum(out * inp // 2 + 2 * out * 4 for out, inp in linears)
    head = VOCAB * H // 2 + 2 * VOCAB * 4
    info = falcon().llm.quantization
    assert info["quantized_bytes"] == LAYERS * per_block + head
    assert info["quantized_params"] == LAYERS * sum(out * inp for out, inp in linears) + VOCAB * H


def test_the_prefill_autotunes_beside_the_padded_lm_head_call() -> None:
    # Six prompt tokens pad to 256 rows: the LM head call holds its input (6 x 4,544), the padded copy
    # (256 x 4,544) and the padded output (256 x 65,024), fp32; Triton's autotuner adds 256e6 B; no cuBLAS
    result = falcon()
    prefill = result.phase_components["prefill"]
    assert prefill["activations"] == ((6 + 256) * H + 256 * VOCAB) * 4
    assert prefill["temporaries"] == 256_000_000
    assert prefill["workspace"] == 0
    assert result.peak_phase == "prefill"


def test_decode_autotunes_again_only_when_the_prompt_padded_past_256_rows() -> None:
    # one token pads to 256 rows: the prefill's shapes when the prompt is at most 256 tokens, new ones at 300
    assert falcon(prompt=6).phase_components["decode"]["temporaries"] == 0
    long = falcon(prompt=300)
    assert long.phase_components["decode"]["temporaries"] == 256_000_000
    assert long.phase_components["prefill"]["activations"] == (300 * H + 512 * H + 512 * VOCAB) * 4


def test_the_published_falcon_7b_figure() -> None:
    # tutorials/quantize.md lines 136-141: --precision 32-true --max_new_tokens 256, "Memory used: 5.05 GB"
    assert falcon().peak_allocated_bytes == pytest.approx(5.05e9, rel=0.01)


@pytest.mark.parametrize("case_id", ["rt-gen-phi-15-1.3b", "rt-gen-stablelm-3b", "rt-gen-llama-7b", "rt-gen-llama-13b"])
def test_the_published_resource_table_rows(case_id: str) -> None:
    # tutorials/resource-tables.md lines 110, 115, 120, 125: 1.16, 2.43, 3.93 and 7.14 GB
    rows = yaml.safe_load((BENCHMARKS / "data" / "measured_litgpt.yaml").read_text(encoding="utf-8"))
    row = next(r for r in rows if r["id"] == f"{case_id}-gptqint4")
    result = estimate(parse_spec(litgpt_score.spec_of(row)), hopper_or_newer=False)
    assert result.peak_allocated_bytes == pytest.approx(row["value_gb"] * 1e9, rel=0.01)


def test_the_lm_head_is_quantized_unless_told_otherwise() -> None:
    assert falcon().llm.quantization["quantized_params"] - falcon(lm_head=False).llm.quantization[
        "quantized_params"
    ] == (VOCAB * H)


GENERATE = {"mode": "inference", "batch_size": 1, "prompt_len": 6, "max_new_tokens": 8, "runtime": "litgpt"}
FINETUNE = {"mode": "train", "batch_size": 1, "seq_len": 512, "adapter": {"rank": 8, "framework": "litgpt"}}


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        (
            GENERATE | {"quantization": {"method": "gptq", "bits": 8}},
            r"quantization\.bits: litgpt's gptq\.int4 is 4-bit",
        ),
        (GENERATE | {"quantization": {"method": "gptq", "group_size": 128}}, r"quantization\.group_size: litgpt's"),
        (GENERATE | {"quantization": "awq"}, r"workload\.quantization: awq is not one of litgpt's"),
        (GENERATE | {"quantization": {"method": "gptq", "skip_modules": ["mlp"]}}, r"replaces every nn\.Linear"),
        (FINETUNE | {"quantization": "gptq"}, r"quantization: gptq is not one of litgpt's fine-tuning quantizations"),
    ],
)
def test_what_litgpt_does_not_run_is_refused(workload: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):  # refused when the spec is estimated
        estimate(parse_spec({"name": "f", "model": {"preset": "falcon-7b"}, "workload": workload}))
