"""TinyLoRA (``adapter.type: tinylora``, PEFT ``TinyLoraConfig``): a trained vector per adapted linear
through frozen SVD factors of its weight.

The expected values are worked out by hand or cited. The tracer runs the same method on a 2-layer Llama
(``llm-peft-tinylora-*`` in benchmarks/data/tracer_llm.json), which tests/llm/test_adapters.py checks to
within 3.5 %.
"""

from __future__ import annotations

from typing import Any

import pytest

from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.spec.load import parse_spec

TINY = {
    "architecture": "decoder", "layers": 2, "hidden_size": 512, "heads": 8, "kv_heads": 2, "ffn_size": 1408,
    "mlp": "swiglu", "norm": "rmsnorm", "position": "rotary", "vocab_size": 1000, "tie_embeddings": False,
}  # fmt: skip


def run(model: Any, adapter: dict[str, Any], seq: int = 256, batch: int = 2) -> Any:
    wl = {"mode": "train", "batch_size": batch, "seq_len": seq, "precision": "bf16", "optimizer": "adamw"}
    return estimate(parse_spec({"name": "t", "model": model, "workload": {**wl, "adapter": adapter}}))


def test_trainable_count_of_the_peft_method_comparison() -> None:
    # PEFT's MetaMathQA method comparison (tinylora--llama-3.2-3B-default): 3,584 trainable parameters,
    # 28 layers x q_proj and v_proj x the default u of 64
    r = run({"preset": "llama-3.2-3b"}, {"type": "tinylora", "rank": 2, "targets": ["q_proj", "v_proj"]})
    assert r.llm.trainable_params == 3_584
    assert r.params + r.llm.trainable_params == 3_212_753_408  # the run's total (A, B and P are buffers)


def test_states_and_saved_tensors_by_hand() -> None:
    r = run(TINY, {"type": "tinylora", "rank": 2, "u": 64, "targets": ["q_proj", "v_proj"]})
    # AdamW keeps two fp32 states of each of the 4 vectors (64 x 4 B = 256 B, a 512-byte block each)
    assert r.component_peaks["optimizer_states"] == 2 * 4 * 512
    wider = run(TINY, {"type": "tinylora", "rank": 4, "u": 64, "targets": ["q_proj", "v_proj"]})
    # A(x) is kept per token and adapted linear at the adapter dtype (fp32): 2 more ranks x 4 B x 512 tokens
    # x 4 modules = 16,384 B more at the backward peak; the frozen factors A and B grow with the rank too
    extra_buffers = 2 * 2 * (512 * 4 + 512 * 4) + 2 * (2 * 512 * 4 + 2 * 128 * 4)  # A (r x 512), B (out x r)
    extra_projections = 4 * (64 * 4 * 4 * 4 - 64 * 2 * 2 * 4)  # P: u x r x r fp32, one per adapted linear
    grown = wider.peak_allocated_bytes - r.peak_allocated_bytes
    assert grown == 16_384 + extra_buffers + extra_projections


def test_refused_keys() -> None:
    with pytest.raises(SpecError, match="alpha: not a key of adapter type tinylora"):
        run(TINY, {"type": "tinylora", "alpha": 4, "targets": ["q_proj"]})
    with pytest.raises(SpecError, match="u: not a key of adapter type lora "):
        run(TINY, {"type": "lora", "rank": 4, "u": 8})
