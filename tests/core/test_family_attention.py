"""OPT and GPT-NeoX under transformers 5: the shared ``eager_attention_forward`` (fp32 softmax, the
configs' attention dropout 0.0) and GPT-NeoX's hidden dropout default (0.0).

References: ``benchmarks/data/tracer_families.json``, exact allocator-level peaks of real
``OPTForCausalLM`` / ``GPTNeoXForCausalLM`` steps traced on fake CUDA tensors (each case keeps its
``benchmarks/tracer_llm.py --family`` command line), and hand counts below.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vramcalc.core import activations as act
from vramcalc.families import estimate
from vramcalc.families.resolve import resolve_model
from vramcalc.spec.load import parse_spec

ROOT = Path(__file__).resolve().parents[2]
CASES = json.loads((ROOT / "benchmarks" / "data" / "tracer_families.json").read_text(encoding="utf-8"))["cases"]
PRESET = {"opt": "opt-125m", "gpt_neox": "pythia-70m"}


def spec(family: str, attention: str, checkpointing: str = "none") -> Any:
    model = {"preset": PRESET[family], "layers": 2, "hidden_size": 512, "heads": 8, "ffn_size": 2048,
             "vocab_size": 1000, "max_position_embeddings": 2048}  # fmt: skip
    workload = {"mode": "train", "batch_size": 2, "seq_len": 512, "precision": "fp16", "optimizer": "none",
                "attention": attention, "gradient_checkpointing": checkpointing}  # fmt: skip
    return parse_spec({"name": "t", "model": model, "workload": workload})


def test_eager_scores_bytes_by_hand() -> None:
    # fp16 training: the fp32 softmax output (4 B) is saved, and the matmul with V saves its fp16 cast (2 B);
    # attention dropout 0.0 adds no mask although OPT's hidden dropout is 0.1
    s = spec("opt", "eager")
    shape, _ = resolve_model(s.model, s.workload)
    assert shape.dropout == 0.1
    assert act.score_bytes_per_element(shape, act.Dtypes(param=2, compute=2, residual=2, amp=False), True) == 6


def test_gpt_neox_dropout_default_is_zero() -> None:
    # GPTNeoXConfig: hidden_dropout = attention_dropout = 0.0; Pythia's configs do not set them
    s = spec("gpt_neox", "sdpa")
    assert resolve_model(s.model, s.workload)[0].dropout == 0.0


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_against_the_tracer(case: dict[str, Any]) -> None:
    family, attention = case["id"].split("-")[:2]
    checkpointing = "full" if case["id"].endswith("-gc") else "none"
    result = estimate(spec(family, attention, checkpointing))
    assert result.params == case["params"]
    # within 1 %: OPT eager -0.16 %, SDPA +0.41 %; GPT-NeoX eager +0.13 %, SDPA +0.17 % (traced with the
    # configs' use_cache on, as the checkpoints train). Under full checkpointing (the -gc cases) the peak is
    # the bottom block's backward with every other gradient: eager -0.9 %, SDPA +2.0 % (within 2.5 %)
    tolerance = 0.025 if checkpointing == "full" else 0.01
    assert abs(result.peak_allocated_bytes / case["peak_bytes"] - 1) <= tolerance, case["id"]
