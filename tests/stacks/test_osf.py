"""OSF (``adapter.type: osf``, PEFT 0.21 ``OSFConfig``): the low singular subspace of each target trained.

Expected values are worked out by hand or cited; the tracer runs PEFT's own OSF on a 2-layer Llama
(``llm-peft-osf-*`` in benchmarks/data/tracer_llm.json, checked to 3.5 % by tests/llm/test_adapters.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.spec.load import parse_spec

ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def run(model: Any, adapter: dict[str, Any]) -> Any:
    wl = {"mode": "train", "batch_size": 1, "seq_len": 128, "precision": "bf16", "optimizer": "adamw"}
    return estimate(parse_spec({"name": "t", "model": model, "workload": {**wl, "adapter": adapter}}))


def test_trainable_count_of_the_peft_method_comparison() -> None:
    # PEFT's MetaMathQA method comparison (osf--llama-3.2-3B-rank128): 194,535,936 trainable parameters, rank
    # 128 x (out + in + 1) for each of the seven linears of 28 layers:
    # 128 x (2 x 6,145 + 2 x 4,097 + 3 x 11,265) x 28
    r = run({"preset": "llama-3.2-3b"}, {"type": "osf", "rank": 128, "targets": ALL})
    assert r.llm.trainable_params == 194_535_936
    assert r.params + r.llm.trainable_params == 3_407_285_760  # the run's total_params_with_adapter


def test_frozen_subspace_by_hand() -> None:
    # Llama-3.2-3B's gate_proj is 8,192 x 3,072: at rank 128 the preserved U_high is 8,192 x 2,944 fp32
    # (96,468,992 B) beside the initial copies of U_low, S_low, V_low (128 x (8,192 + 1 + 3,072) x 4 B), per layer
    model = {"preset": "llama-3.2-3b"}
    gate = run(model, {"type": "osf", "rank": 128, "targets": ["gate_proj"]})
    base = run(model, {"type": "lora", "rank": 1, "targets": ["gate_proj"]})
    trained = 128 * (8192 + 1 + 3072) * 4  # the trainable fp32 tensors
    frozen = 8192 * 2944 * 4 + 128 * 8192 * 4 + 512 + 128 * 3072 * 4  # U_high, then the copies (S: 512 B block)
    lora = (8192 + 3072) * 1 * 4  # rank-1 lora_A and lora_B, fp32
    params = gate.components["parameters"] - base.components["parameters"]
    assert params == 28 * (trained + frozen) - 28 * lora


def test_rank_must_leave_a_preserved_subspace() -> None:
    with pytest.raises(SpecError, match="adapter.rank: OSF trains fewer than the 1024 singular directions"):
        run({"preset": "llama-3.2-3b"}, {"type": "osf", "rank": 1024, "targets": ["k_proj"]})


def pinned(model: Any, adapter: dict[str, Any], peft: str) -> Any:
    wl = {"mode": "train", "batch_size": 1, "seq_len": 128, "precision": "bf16", "optimizer": "adamw"}
    wl |= {"adapter": adapter, "versions": {"peft": peft}}
    return estimate(parse_spec({"name": "t", "model": model, "workload": wl}))


def test_before_peft_0_21_the_weight_is_rebuilt_by_hand() -> None:
    # PEFT 0.19/0.20 (osf/layer.py, utils.reconstruct_weight_matrix): the frozen U_high, S_high, V_high of the
    # preserved rank (buffers PEFT upcasts with the adapters: fp32), no initial copies; every forward rebuilds
    # the 8,192 x 3,072 gate_proj weight in fp32 and keeps it where its input needs a gradient, with U_low S_low
    model = {"preset": "llama-3.2-3b"}
    gate = {"type": "osf", "rank": 128, "targets": ["gate_proj"]}
    old, base = pinned(model, gate, "0.19.1"), run(model, {"type": "lora", "rank": 1, "targets": ["gate_proj"]})
    trained = 128 * (8192 + 1 + 3072) * 4
    frozen = 8192 * 2944 * 4 + 2944 * 4 + 2944 * 3072 * 4  # U_high, S_high (a whole block: 11,776 B), V_high
    lora = (8192 + 3072) * 1 * 4
    assert old.components["parameters"] - base.components["parameters"] == 28 * (trained + frozen) - 28 * lora
    assert any("peft 0.19.1 (workload.versions.peft)" in note for note in old.assumptions)


def test_the_method_comparison_run_keeps_its_adapters_at_bf16() -> None:
    # osf--llama-3.2-3B-rank128 ran PEFT 0.19.2.dev0 with autocast_adapter_dtype false (its training_params.json):
    # weights 3,212,749,824 x 2 B, U_high/S_high/V_high of the preserved ranks and the trained rank 128 at bf16,
    # AdamW's two states of the trained tensors at bf16 too
    model, rank = {"preset": "llama-3.2-3b"}, 128
    adapter = {"type": "osf", "rank": rank, "targets": ALL, "autocast_adapter_dtype": False}
    r = pinned(model, adapter, "0.19.2.dev0")
    shapes = [(3072, 3072)] * 2 + [(1024, 3072)] * 2 + [(8192, 3072)] * 2 + [(3072, 8192)]  # q o k v gate up down
    preserved = sum(o * (min(o, i) - rank) + (min(o, i) - rank) + (min(o, i) - rank) * i for o, i in shapes)
    static = 3_212_749_824 * 2 + 28 * preserved * 2 + 194_535_936 * 2 * 3
    rounding = r.components["parameters"] + r.components["optimizer_states"] - static
    assert 0 <= rounding < 28 * 7 * 6 * 512  # each tensor's last 512-byte block at most
    # the run's "memory_allocated after each step" (15.281 GiB, the most of its 250-step means) is that
    # static memory plus what a step leaves; the estimate's static part is 14.53 GiB
    assert 0.90 < (static + rounding) / (15.281 * 2**30) < 1.0
