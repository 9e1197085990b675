"""Mixture of experts: total vs active parameters (Mixtral), routed activations, capacity factor."""

from __future__ import annotations

from typing import Any

import pytest

from vramcalc.core.params import active_params, moe_param_delta
from vramcalc.core.shape import MoeShape, moe_layers, routed_rows
from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.families.resolve import resolve_model
from vramcalc.spec.load import parse_spec

MIXTRAL = {
    "architecture": "decoder", "layers": 32, "hidden_size": 4096, "heads": 32, "kv_heads": 8, "ffn_size": 14336,
    "mlp": "swiglu", "vocab_size": 32000, "tie_embeddings": False, "experts": 8, "experts_per_token": 2,
}  # fmt: skip


def spec(model: dict[str, Any], **workload: Any) -> Any:
    wl = {"mode": "inference", "batch_size": 1, "seq_len": 128, "precision": "bf16", **workload}
    return parse_spec({"name": "t", "model": model, "workload": wl})


def test_mixtral_total_and_active_params() -> None:
    # Mistral AI, "Mixtral of experts" (2024): 46.7B total, 12.9B active. By hand, per layer:
    # attention 2 x 4096^2 + 2 x 4096 x 1024 = 41,943,040; expert 3 x 4096 x 14336 = 176,160,768;
    # router 4096 x 8 = 32,768; norms 8,192. Total: 32 x (41,943,040 + 8 x 176,160,768 + 40,960)
    # + 2 x 32000 x 4096 + 4096 = 46,702,792,704; active: 6 unused experts less per layer = 12,879,925,248
    result = estimate(spec(MIXTRAL))
    assert result.params == 46_702_792_704
    assert result.llm.active_params == 12_879_925_248
    assert round(result.params / 1e9, 1) == 46.7 and round(result.llm.active_params / 1e9, 1) == 12.9


def test_moe_layer_frequency_and_shared_experts() -> None:
    # 4 layers, every 2nd is MoE (2 MoE layers), 4 experts + 1 shared of width 32, hidden 16, dense ffn 64
    model = {
        "architecture": "decoder",
        "layers": 4,
        "hidden_size": 16,
        "heads": 2,
        "ffn_size": 64,
        "mlp": "swiglu",
        "vocab_size": 10,
        "experts": 4,
        "experts_per_token": 1,
        "shared_experts": 1,
        "expert_ffn_size": 32,
        "moe_layer_frequency": 2,
    }
    s = spec(model)
    shape, _ = resolve_model(s.model, s.workload)
    assert moe_layers(shape) == 2
    # per MoE layer: (4 + 1) x 3 x 16 x 32 + router 16 x 4 = 7,680 + 64 = 7,744, replacing a dense 3 x 16 x 64 = 3,072
    assert moe_param_delta(shape) == 2 * (7_744 - 3_072)
    # active: drop (4 - 1) unused experts of 1,536 per MoE layer
    assert active_params(shape, 100_000) == 100_000 - 2 * 3 * 1_536


def test_capacity_factor_sets_routed_rows() -> None:
    # dropless: 1,000 tokens x top-2 = 2,000 rows; capacity 1.25: 8 x ceil(1.25 x 2,000 / 8) = 8 x 313 = 2,504
    m = MoeShape(experts=8, top_k=2, shared=0, expert_ffn=1, frequency=1, capacity_factor=None)
    assert routed_rows(m, 1000) == 2000
    assert routed_rows(MoeShape(8, 2, 0, 1, 1, 1.25), 1000) == 2504


def test_moe_activations_grow_with_top_k() -> None:
    top1 = estimate(spec({**MIXTRAL, "experts_per_token": 1}, seq_len=2048))
    top2 = estimate(spec(MIXTRAL, seq_len=2048))
    assert top2.components["activations"] > top1.components["activations"]
    train = {"mode": "train", "seq_len": 512, "optimizer": "adamw"}
    t1 = estimate(spec({**MIXTRAL, "layers": 2, "experts_per_token": 1}, **train))
    t2 = estimate(spec({**MIXTRAL, "layers": 2}, **train))
    assert t2.component_peaks["activations"] > t1.component_peaks["activations"]


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({**MIXTRAL, "experts_per_token": 9}, "experts_per_token: 9 is more than experts"),
        ({k: v for k, v in MIXTRAL.items() if k != "experts"}, "experts_per_token: only valid with experts"),
    ],
)
def test_bad_moe_keys(model: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        spec(model)
