"""The symbolic batch size (vramcalc/core/symbolic.py) and the prepared totals sweeps and max-batch use
(vramcalc/planning/batch_totals.py): the same integers as a full estimate at every batch size."""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spec_texts import TINY_MODEL  # the model of tests/core/test_dense.py's hand-derived cases

from vramcalc.core.symbolic import NotPolynomial, Peak, Poly, maximum
from vramcalc.families import estimate
from vramcalc.planning.batch_totals import BatchTotals
from vramcalc.planning.limits import with_workload
from vramcalc.planning.sweep import grid_totals
from vramcalc.spec.load import load_spec, parse_spec
from vramcalc.spec.models import Spec

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
b = Poly.batch()


# -- polynomial algebra ------------------------------------------------------------------------------


def test_poly_arithmetic_by_hand() -> None:
    tokens = b * 512  # 512 tokens per sequence
    assert (tokens * 8 + 100).coefs == (100, 4096)
    assert (tokens * 8 + 100).at(3) == 3 * 4096 + 100
    assert (tokens // b).coefs == (512,)  # tokens / batch = the sequence length, exactly
    assert (b * b - b).at(10) == 90
    assert (7 - b).at(2) == 5
    assert (tokens * 0).coefs == (0,)


@pytest.mark.parametrize(
    "operation",
    [
        lambda: (b + 1) // 2,  # a floor that does not divide
        lambda: (b + 1) // b,  # b + 1 is not a multiple of b
        lambda: b // (b + 1),  # division by more than one term
        lambda: b > 3,
        lambda: b == b,
        lambda: bool(b),
        lambda: max(b, 2 * b),  # builtins.max compares; formulas use maximum()
        lambda: b * 0.5,
        lambda: 10 - maximum(b, 5),  # max subtracted is a min: not a max of polynomials
        lambda: maximum(b, 5) * -1,
        lambda: maximum(b - 9, 5) * maximum(b, 5),  # a product of maxima with a negative member
    ],
)
def test_what_a_polynomial_cannot_follow_raises(operation: Any) -> None:
    with pytest.raises(NotPolynomial):
        operation()


def test_maximum_keeps_only_members_that_can_win() -> None:
    assert maximum(3, 7) == 7  # plain ints: builtins.max
    assert maximum(b, 2 * b).coefs == (0, 2)  # 2b >= b at every batch size
    peak = maximum(b + 10, 2 * b, 5)  # 5 <= b + 10 always: dropped
    assert isinstance(peak, Peak) and [m.coefs for m in peak.members] == [(10, 1), (0, 2)]
    assert peak.at(5) == 15 and peak.at(20) == 40  # the members cross at b = 10
    assert ((peak + 1) * 3).at(20) == 123  # max(A, B) + C and max(A, B) * k >= 0 distribute
    assert (peak - b).at(20) == 20


OPERATIONS = [operator.add, operator.sub, operator.mul]


@st.composite
def expressions(draw: st.DrawFn) -> tuple[Any, Any]:
    """A random expression built at once on the symbol and on an int batch size (the independent method)."""
    batch = draw(st.integers(1, 10**6))
    symbolic: Any = b
    numeric: Any = batch
    for _ in range(draw(st.integers(1, 8))):
        constant = draw(st.integers(0, 10**4))
        kind = draw(st.sampled_from(["add", "sub", "mul", "max", "max_const"]))
        if kind == "max":
            other_s, other_n = b * constant + 1, batch * constant + 1
            symbolic, numeric = maximum(symbolic, other_s), max(numeric, other_n)
        elif kind == "max_const":
            symbolic, numeric = maximum(symbolic, constant), max(numeric, constant)
        elif kind == "sub" and isinstance(symbolic, Peak):
            symbolic, numeric = symbolic + constant, numeric + constant
        else:
            op = {"add": operator.add, "sub": operator.sub, "mul": operator.mul}[kind]
            symbolic, numeric = op(symbolic, constant), op(numeric, constant)
    return (symbolic, batch), numeric


@settings(max_examples=300, deadline=None)
@given(case=expressions())
def test_symbolic_expressions_evaluate_like_ints(case: tuple[tuple[Any, int], int]) -> None:
    (symbolic, batch), numeric = case
    value = symbolic if isinstance(symbolic, int) else symbolic.at(batch)
    assert value == numeric


# -- prepared totals: hand-derived -------------------------------------------------------------------


def tiny(**workload: Any) -> Spec:
    wl = {"batch_size": 2, "seq_len": 4, "precision": "fp32", "optimizer": "sgd", **workload}
    return parse_spec({"name": "t", "model": TINY_MODEL, "workload": wl})


def test_tiny_training_peak_as_polynomials_by_hand() -> None:
    # From tests/core/test_dense.py::test_tiny_decoder_phases_by_hand, per sequence of 4 tokens:
    # last block's backward: saved minus the final LayerNorm 16,464 + temporaries 4 x 320 x 4 = 5,120
    #   -> 21,584 b on top of params 205,056 + workspaces 67,108,864 + head/block gradients 203,008
    #   = 67,516,928;
    # backward start: 67,313,920 + (18,544 saved + 480 loss) b -- never larger than the line above;
    # forward: 67,313,920 + 18,864 b -- likewise; optimizer step (every gradient): 67,518,976; the tied
    # head's gradient sum at the end of backward adds its two 10 x 64 fp32 contributions, 5,120: 67,524,096.
    totals = BatchTotals.of(tiny(), hopper_or_newer=True)
    assert totals.symbolic
    assert sorted(totals.peak) == sorted([(67_516_928, 21_584), (67_524_096,)])
    # batch 2: 67,560,096 + input ids (one 512 B block) = the hand total 67,560,608, + context and reserve.
    # The reserve is a quarter of the moment's transient bytes: all but the parameters, the gradients and the
    # workspaces (67,516,928 of the first line), so 21,584 x 2 + 512 = 43,680 -> 10,920.
    allocated = 67_560_608
    assert totals(2) == allocated + 512 * 2**20 + 10_920


def test_tiny_inference_peak_by_hand() -> None:
    # tests/core/test_dense.py::test_tiny_inference_by_hand per sequence: the MLP moment 12,288 b beats
    # the attention moment 7,168 b and the head 2,208 b; params 205,056 + one workspace 33,554,432
    totals = BatchTotals.of(tiny(mode="inference"), hopper_or_newer=True)
    assert totals.peak == ((33_759_488, 12_288),)


# -- prepared totals equal full estimates -------------------------------------------------------------


def _full_total(spec: Spec, batch: int, hopper: bool) -> int:
    return estimate(with_workload(spec, batch_size=batch), hopper_or_newer=hopper).total_bytes


DENSE_CONFIGS = [
    "bert-base.yaml",
    "bert-base-minimal.yaml",
    "bert-large.yaml",
    "gpt2.yaml",
    "llama-2-7b.yaml",
    "llama-3-8b.yaml",
    "t5-base.yaml",
    "vit-base.yaml",
]


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_config_matches_the_full_estimate(path: Path) -> None:
    spec = load_spec(path)
    for hopper in (True, False):
        totals = BatchTotals.of(spec, hopper_or_newer=hopper)
        # the dense single-GPU configs take the symbolic path (a regression to the slow path fails here)
        assert totals.symbolic == (path.name in DENSE_CONFIGS)
        for batch in (1, 2, 3, 17, 64, 1000, 10**9):
            assert totals(batch) == _full_total(spec, batch, hopper), batch


def test_formulas_a_polynomial_cannot_follow_fall_back_to_full_estimates() -> None:
    # T5 with full checkpointing in fp32 picks the larger of its two stacks' recomputed inputs by
    # comparing them (estimator.recomputed_input_bytes): not a polynomial, so every point is estimated
    spec = with_workload(load_spec(CONFIGS / "t5-base.yaml"), gradient_checkpointing="full", precision="fp32")
    totals = BatchTotals.of(spec, hopper_or_newer=True)
    assert not totals.symbolic
    assert [totals(n) for n in (1, 5, 40)] == [_full_total(spec, n, True) for n in (1, 5, 40)]


HIDDEN_HEADS = [(64, 4), (256, 4), (768, 12), (1024, 16), (4096, 32)]


@st.composite
def dense_specs(draw: st.DrawFn) -> Spec:
    """Dense single-GPU specs over every key the symbolic path reads."""
    hidden, heads = draw(st.sampled_from(HIDDEN_HEADS))
    arch = draw(st.sampled_from(["encoder", "decoder", "encoder-decoder", "vit"]))
    model: dict[str, Any] = {"architecture": arch, "layers": draw(st.integers(1, 6)), "hidden_size": hidden}
    model["heads"] = heads
    model["kv_heads"] = draw(st.sampled_from([heads, heads // 2, 1]))
    model["mlp"] = draw(st.sampled_from(["gelu", "gelu_tanh", "relu", "swiglu"]))
    model["norm"] = draw(st.sampled_from(["layernorm", "rmsnorm"]))
    model["dropout"] = draw(st.sampled_from([0.0, 0.1]))
    if arch != "vit":
        model["vocab_size"] = draw(st.integers(10, 60_000))
        model["position"] = draw(st.sampled_from(["learned", "rotary", "relative", "none"]))
        model["tie_embeddings"] = draw(st.booleans())
        model["head"] = draw(st.sampled_from(["lm", "classification", "none"]))
    mode = draw(st.sampled_from(["train", "inference"]))
    workload: dict[str, Any] = {
        "mode": mode,
        "batch_size": 1,
        "precision": draw(st.sampled_from(["fp32", "fp16", "bf16", "amp-fp16", "amp-bf16"])),
        "attention": draw(st.sampled_from(["eager", "sdpa"])),
    }
    if arch == "vit":
        workload["image_size"] = draw(st.sampled_from([32, 64, 224]))
    else:
        workload["seq_len"] = draw(st.sampled_from([7, 128, 1000, 4096]))
    if arch == "encoder-decoder" and draw(st.booleans()):
        workload["target_len"] = draw(st.sampled_from([1, 64, 300]))
    if mode == "train":
        workload["optimizer"] = draw(st.sampled_from(["sgd", "sgd-momentum", "adamw", "adamw-8bit", "adafactor"]))
        workload["optimizer_impl"] = draw(st.sampled_from(["foreach", "forloop", "fused"]))
        workload["gradient_checkpointing"] = draw(st.sampled_from(["none", "full", "selective"]))
    overhead = {"allocator_reserve": draw(st.sampled_from([0.0, 0.07, 0.12, 0.5]))}
    return parse_spec({"name": "p", "model": model, "workload": workload, "overhead": overhead})


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=dense_specs(),
    batches=st.lists(st.integers(1, 10**7), min_size=1, max_size=6),
    hopper=st.booleans(),
)
def test_prepared_totals_equal_full_estimates(spec: Spec, batches: list[int], hopper: bool) -> None:
    totals = BatchTotals.of(spec, hopper_or_newer=hopper)
    for batch in batches:
        assert totals(batch) == _full_total(spec, batch, hopper)


def test_grid_totals_equal_a_full_estimate_at_every_point() -> None:
    spec = load_spec(CONFIGS / "bert-base.yaml")
    batches, seqs = [1, 3, 32], [64, 500, 512]  # bert-base has 512 learned positions
    expected = [
        estimate(with_workload(spec, batch_size=b, seq_len=s), hopper_or_newer=False).total_bytes
        for b in batches
        for s in seqs
    ]
    assert grid_totals(spec, batches, seqs, hopper_or_newer=False) == expected  # batch outer
    vit = load_spec(CONFIGS / "vit-base.yaml")  # no free sequence length: None keeps the spec's
    assert grid_totals(vit, [1, 2], [None], hopper_or_newer=True) == [_full_total(vit, n, True) for n in (1, 2)]


def test_readme_quotes_the_gpt2_polynomials() -> None:
    # docs/planning.md "Speed" shows configs/gpt2.yaml's prepared peak; keep the quoted coefficients current
    readme = (CONFIGS.parent / "docs" / "planning.md").read_text(encoding="utf-8")
    peak = BatchTotals.of(load_spec(CONFIGS / "gpt2.yaml"), hopper_or_newer=True).peak
    terms = [f"{coefs[0]:,}" if len(coefs) == 1 else f"{coefs[0]:,} + {coefs[1]:,} b" for coefs in peak]
    assert f"`max({', '.join(terms)})`" in readme.replace("\n", " ")
