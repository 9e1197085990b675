"""``workload.keep_outputs``: a loop that binds ``outputs = model(**batch)`` keeps one step's logits and KV
cache through its backward and optimizer step and until the next forward returns.

Hand counts on the small decoder of tests/stacks/test_techniques.py (2 layers, hidden 256, 4 heads, vocab
32000, bf16, batch 2 x 512 = 1,024 tokens); allocator-level references for OPT-350m and Pythia-410m in
``benchmarks/data/tracer_hf_loop.json`` (``benchmarks/tracer_hf_loop.py``: the transformers SDPA benchmark
loop traced under the releases the tables ran, plus today's), each case with its command line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vramcalc.core import training
from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.families.resolve import resolve_workload
from vramcalc.spec.load import parse_spec
from vramcalc.spec.models import Spec

ROOT = Path(__file__).resolve().parents[2]
TRACED = json.loads((ROOT / "benchmarks" / "data" / "tracer_hf_loop.json").read_text(encoding="utf-8"))["cases"]

VOCAB = {"opt": 50272, "pythia": 50304}
LOGITS = 1024 * 32000 * 2  # every position's logits, bf16: 65,536,000 B
CACHE = 2 * 1024 * 2 * 256 * 2  # 2 layers x 1,024 tokens x (K + V) x 256 wide x 2 B: 2,097,152 B


def spec(**workload: Any) -> Spec:
    model = {"architecture": "decoder", "layers": 2, "hidden_size": 256, "heads": 4, "vocab_size": 32000}
    model |= workload.pop("model", {})
    wl = {"batch_size": 2, "seq_len": 512, "precision": "bf16", "optimizer": "adamw", **workload}
    return Spec.model_validate({"model": model, "workload": wl})


def test_today_the_cache_is_a_copy_the_attention_saves() -> None:
    # transformers >= 4.56 (the default release): DynamicLayer concatenates K and V onto an empty tensor and
    # the attention reads them back from it, so the step's own cache replaces the K/V it saves
    base, kept = estimate(spec()), estimate(spec(keep_outputs=True))
    # forward: the previous step's logits and cache
    assert kept.phases["forward"] - base.phases["forward"] == LOGITS + CACHE
    # backward starts with this step's logits kept (the loss works on its fp32 copy); its cache is among the
    # saved tensors until backward frees them, and held after: the optimizer step has both
    assert kept.phases["backward"] - base.phases["backward"] == LOGITS
    assert kept.phases["optimizer"] - base.phases["optimizer"] == LOGITS + CACHE


def test_no_cache_under_gradient_checkpointing() -> None:
    # transformers turns use_cache off when checkpointing: only the logits are kept
    base = estimate(spec(gradient_checkpointing="full"))
    kept = estimate(spec(gradient_checkpointing="full", keep_outputs=True))
    assert kept.phases["optimizer"] - base.phases["optimizer"] == LOGITS
    assert kept.phases["forward"] - base.phases["forward"] == LOGITS


def test_an_older_release_keeps_the_attentions_own_tensors() -> None:
    # Under 4.46 the tuple cache holds K and V as the attention made them: this GPT-2-style decoder splits one
    # fused QKV output (3 x 256 x 2 B = 1,536 B per token and layer) into views, so the cache keeps all of it,
    # 2 layers x 1,024 tokens x 1,536 B = 3,145,728 B, saved for backward anyway until backward frees it
    fused = 2 * 1024 * 3 * 256 * 2
    pinned = {"versions": {"transformers": "4.46.0"}}
    base, kept = estimate(spec(**pinned)), estimate(spec(**pinned, keep_outputs=True))
    assert kept.phases["forward"] - base.phases["forward"] == LOGITS + fused
    assert kept.phases["optimizer"] - base.phases["optimizer"] == LOGITS + fused


def test_a_lora_step_keeps_them_too() -> None:
    # PEFT's example loops bind outputs = model(**batch): the same logits and cache next to a LoRA step
    lora = {"adapter": {"type": "lora", "rank": 8}}
    base, kept = estimate(spec(**lora)), estimate(spec(**lora, keep_outputs=True))
    assert kept.phases["forward"] - base.phases["forward"] == LOGITS + CACHE
    assert kept.phases["backward"] - base.phases["backward"] == LOGITS
    assert kept.phases["optimizer"] - base.phases["optimizer"] == LOGITS + CACHE


def test_gpt_neox_before_4_49_keeps_its_fused_qkv_and_an_fp32_key() -> None:
    # pythia-70m: 6 layers, hidden 512, fused query_key_value. Per token and layer the cached V is a view of the
    # fused output (3 x 512 x 2 B = 3,072 B, all of it kept) and the key is the fp32 rotary result
    # (512 x 4 B = 2,048 B), a tensor of its own: fresh from the forward on.
    data = {"model": {"preset": "pythia-70m"}, "workload": {"batch_size": 1, "seq_len": 100, "precision": "fp16",
            "versions": {"transformers": "4.42.0"}}}  # fmt: skip
    work = resolve_workload(parse_spec(data, "t"))
    held = training.held_outputs(work.shape, work.tokens, work.dtypes, checkpointing=False)
    assert held.logits == 100 * 50304 * 2
    assert held.cache == 6 * 100 * (3_072 + 2_048)
    assert held.fresh_cache == 6 * 100 * 2_048


@pytest.mark.parametrize("case", TRACED, ids=[c["id"] for c in TRACED])
def test_against_the_traced_benchmark_loop(case: dict[str, Any]) -> None:
    model, release, attention, batch, seq = case["id"].split("-")[0:2], *case["id"].split("-")[2:6]
    workload: dict[str, Any] = {
        "mode": "train",
        "batch_size": int(batch[1:]),
        "seq_len": int(seq[1:]),
        "precision": "fp16",
        "optimizer": "none",
        "cross_entropy": "none",
        "attention": attention,
        "keep_outputs": not case["id"].endswith("-drop"),
    }
    if release != "5.24":
        workload["versions"] = {"transformers": f"{release}.0"}
    data = {"name": case["id"], "model": {"preset": "-".join(model)}, "workload": workload}
    result = estimate(parse_spec(data, case["id"]), hopper_or_newer=False)
    assert result.params == case["params"]
    reference = case["peak_bytes"]
    if case["id"].endswith("-drop"):
        # Without the kept outputs the peak is the start of backward: the forward's end (every saved tensor and
        # the logits) plus the expanded gradient of logits.sum(), which the LM head's matmul makes contiguous
        # inside the CUDA kernel (prepare_matrix_for_cublas in aten/src/ATen/native/cuda/Blas.cpp clones a
        # zero-stride matrix): one fp16 logits-sized tensor the tracer's meta kernels do not allocate.
        clone = workload["batch_size"] * workload["seq_len"] * VOCAB[model[0]] * 2
        reference = max(reference, case["phase_peaks"]["forward"] + clone)
    # OPT within 0.5 % (largest +0.1 %), GPT-NeoX within 2 % (4.42 eager -1.6 %, the rest within 0.4 %)
    tolerance = 0.005 if model[0] == "opt" else 0.02
    assert abs(result.peak_allocated_bytes / reference - 1) <= tolerance, case["id"]


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ({"mode": "inference", "keep_outputs": True}, r"keep_outputs: only valid with mode: train"),
        (
            {"keep_outputs": True, "adapter": {"type": "ia3"}},
            r"keep_outputs: modelled with adapter.type lora, dora or lora_fa on decoder models",
        ),
        ({"keep_outputs": True, "model": {"architecture": "encoder", "head": "classification"}}, "needs head: lm"),
    ],
)
def test_refused_combinations(workload: dict[str, Any], message: str) -> None:
    with pytest.raises((SpecError, ValueError), match=message):
        s = spec(**workload)
        estimate(s)
