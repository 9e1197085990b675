"""The caching allocator's whole blocks when weights load (vramcalc/core/allocator.py).

Expected values are worked out by hand from the rules of c10/cuda/CUDACachingAllocator.cpp (512-byte
rounding; requests over 1 MiB from the large pool, best fit, new segments of 20 MiB under 10 MiB and
rounded up to 2 MiB above; a large block is split only when more than 1 MiB would remain). Where
``../shared`` is present, random sequences are also replayed through the shared tracer's own model of the
allocator (``shared/calibration/tracer/allocsim.py``, written independently) and must agree to the byte.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import pytest

from vramcalc.core.allocator import load_rounding_bytes, weights_rounding_bytes
from vramcalc.core.params import count_params, load_order
from vramcalc.families import estimate
from vramcalc.families.resolve import resolve_workload
from vramcalc.spec.load import load_spec, parse_spec
from vramcalc.units import MiB

ROOT = Path(__file__).resolve().parents[2]
ALLOCSIM = ROOT.parent / "shared" / "calibration" / "tracer" / "allocsim.py"

#: BERT-base in fp16, loaded in module order. Large-pool tensors: the word embedding (30,522 x 768 x 2 =
#: 46,881,792 B), per layer Q, K, V, O (1.125 MiB each) and the two 4.5 MiB MLP matrices, the MLM
#: transform (1.125 MiB). The embedding gets a 46 MiB segment; its 1,352,704 B remainder is then the best
#: fit of layer 0's Q, which takes it whole (173,056 B more). The 20 MiB segments that follow fill so that
#: a 1.125 MiB weight meets a 2 MiB remainder eight times (layer 2's K, 3's V, 4's O, 6's Q, 7's K, 9's V;
#: layer 9's second MLP matrix meets a 5.375 MiB remainder; the MLM transform the last 2 MiB), each
#: 0.875 MiB = 917,504 B more: 173,056 + 8 x 917,504 = 7,513,088 B.
BERT_BASE_FP16 = 7_513_088


def shape_of(model: dict[str, Any], **workload: Any) -> Any:
    wl = {"mode": "inference", "batch_size": 1, "seq_len": 128, "precision": "bf16", **workload}
    return resolve_workload(parse_spec({"name": "t", "model": model, "workload": wl})).shape


def test_bert_base_fp16_by_hand() -> None:
    shape = shape_of({"preset": "bert-base-uncased", "head": "lm"}, precision="fp16")
    assert weights_rounding_bytes(shape, 2) == BERT_BASE_FP16


def test_the_load_order_lists_every_parameter() -> None:
    for model in ("bert-base-uncased", "gpt2", "llama-3.1-8b", "mixtral-8x7b", "t5-base", "deepseek-v3", "falcon-7b"):
        shape = shape_of({"preset": model})
        assert sum(sum(tensors) * count for tensors, count in load_order(shape)) == count_params(shape), model


def test_segment_rules_by_hand() -> None:
    # 4.5 MiB requests: four fill 18 MiB of a 20 MiB segment and the 2 MiB left is split off (> 1 MiB)
    assert load_rounding_bytes([((int(4.5 * MiB),), 4)]) == 0
    # a 15 MiB tensor gets a 16 MiB segment: 1 MiB would remain, not more, so the block is handed out whole
    assert load_rounding_bytes([((15 * MiB,), 3)]) == 3 * MiB
    # requests up to 1 MiB use the small pool, which splits at 512 bytes
    assert load_rounding_bytes([((MiB, 1000), 100)]) == 0
    # 4 MiB requests: five fill a 20 MiB segment exactly (the last takes a 4 MiB block, nothing left)
    assert load_rounding_bytes([((4 * MiB,), 10)]) == 0


def test_repeats_are_multiplied_out_exactly() -> None:
    # 1.125 MiB requests: sixteen split a 20 MiB segment down to 2 MiB, the seventeenth takes those 2 MiB
    # whole (0.875 MiB more), and the next segment starts the same way
    request = 1_179_648
    assert load_rounding_bytes([((request,), 17)]) == 917_504
    assert load_rounding_bytes([((request,), 17 * 10**12)]) == 10**12 * 917_504
    assert load_rounding_bytes([((request,), 17 * 10**12 + 16)]) == 10**12 * 917_504


@pytest.mark.skipif(not ALLOCSIM.exists(), reason="needs ../shared/calibration/tracer (the allocator model)")
def test_random_sequences_match_the_tracers_allocator_model() -> None:
    sys.path.insert(0, str(ALLOCSIM.parent))
    import allocsim  # type: ignore[import-not-found]

    rng = random.Random(1)
    sizes = [int(1.125 * MiB), int(4.5 * MiB), 15 * MiB, int(17.5 * MiB)]
    for _ in range(300):
        groups = []
        for _ in range(rng.randint(1, 4)):
            pick = (rng.randint(1, 3 * MiB), rng.randint(MiB, 25 * MiB), rng.choice(sizes))
            tensors = tuple(rng.choice(pick) for _ in range(rng.randint(1, 6)))
            groups.append((tensors, rng.randint(1, 60)))
        flat = [n for tensors, count in groups for _ in range(count) for n in tensors]
        replay = allocsim.replay([("a", i, n) for i, n in enumerate(flat)])["peak_allocated_bytes"]
        assert load_rounding_bytes(groups) == replay - sum(allocsim.round_size(n) for n in flat), groups


def test_experts_per_module_under_an_older_release() -> None:
    # DeepSeek-V2's experts: 1,536 x 5,120 in bf16 = 15 MiB each, so under a release that keeps one module
    # per expert every expert weight is handed a whole 16 MiB block: 1 MiB more per expert and projection
    model = {"preset": "deepseek-v2"}
    fused = weights_rounding_bytes(shape_of(model), 2)
    pinned = weights_rounding_bytes(shape_of(model, versions={"transformers": "4.46.0"}), 2)
    moe_layers, experts = 59, 160  # deepseek-ai/DeepSeek-V2 config.json: 60 layers, the first dense
    whole = moe_layers * experts * 3 * MiB  # 29,695,672,320 B
    assert fused < 100 * MiB
    assert whole - 2 * MiB <= pinned - fused <= whole  # the fused order also leaves a remainder or two


def test_the_estimate_counts_them_where_weights_load_whole() -> None:
    bert = load_spec(ROOT / "configs" / "bert-base.yaml")  # fp16 BertForMaskedLM
    r = estimate(bert)
    assert r.components["allocator_rounding"] == BERT_BASE_FP16
    assert r.peak_allocated_bytes == sum(r.components.values())
    base = {"name": "t", "model": {"preset": "qwen2.5-3b", "layers": 2}}  # 2 MiB remainders in its MLP
    serve = {"mode": "inference", "batch_size": 1, "prompt_len": 64, "max_new_tokens": 8, "precision": "bf16"}
    vllm = estimate(parse_spec({**base, "workload": serve}))  # vLLM's own loader
    nf4 = estimate(parse_spec({**base, "workload": {**serve, "runtime": "hf", "quantization": "nf4"}}))
    train = {"mode": "train", "batch_size": 1, "seq_len": 64, "precision": "bf16"}
    fsdp = estimate(parse_spec({**base, "workload": train, "parallel": {"gpus": 2, "fsdp": "full_shard"}}))
    ddp = estimate(parse_spec({**base, "workload": train, "parallel": {"gpus": 2}}))
    one = estimate(parse_spec({**base, "workload": train}))
    assert vllm.components["allocator_rounding"] == nf4.components["allocator_rounding"] == 0
    assert fsdp.components["allocator_rounding"] == 0  # flat sharded parameters
    assert ddp.components["allocator_rounding"] == one.components["allocator_rounding"] > 0
    lora = {**train, "adapter": {"rank": 8, "targets": "all-linear"}}
    lora_one = estimate(parse_spec({**base, "workload": lora}))
    lora_ddp = estimate(parse_spec({**base, "workload": lora, "parallel": {"gpus": 2}}))
    assert lora_ddp.components["allocator_rounding"] == lora_one.components["allocator_rounding"]
