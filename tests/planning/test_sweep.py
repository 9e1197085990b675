"""sweep: the verdict at every grid point is the one ``check`` gives for that point."""

from __future__ import annotations

from conftest import CONFIGS

from vramcalc.hardware.lookup import get_gpu
from vramcalc.planning.budget import budget_for, fit_on
from vramcalc.planning.limits import with_workload
from vramcalc.planning.sweep import sweep
from vramcalc.spec.load import load_spec, parse_spec

SERVING = {
    "name": "serve",
    "model": {
        "architecture": "decoder",
        "layers": 32,
        "hidden_size": 4096,
        "heads": 32,
        "kv_heads": 8,
        "ffn_size": 14336,
        "mlp": "swiglu",
        "vocab_size": 128256,
    },
    "workload": {"mode": "inference", "batch_size": 4, "seq_len": 4096, "runtime": "vllm", "precision": "bf16"},
}


def test_vllm_grid_verdicts_equal_a_full_verdict_at_every_point() -> None:
    # The grid reads each length's KV pool once and scales the batch's KV by the batch size; the
    # reference runs the whole estimate and verdict at each point instead.
    spec = parse_spec(SERVING)
    budget = budget_for(get_gpu("h100-sxm"))
    batches, seqs = [1, 2, 7, 31, 32, 33, 64, 200], [512, 4096, 8192, 32768]
    grid = sweep(spec, batches, seqs, budget)
    expected = [fit_on(with_workload(spec, batch_size=b, seq_len=s), budget).fits for b in batches for s in seqs]
    assert grid.fits == expected
    assert any(expected) and not all(expected)  # the grid crosses the card's limit


def test_vllm_grid_without_free_length() -> None:
    spec = load_spec(CONFIGS / "llama-3-8b-inference.yaml")  # seq_len = prompt_len + max_new_tokens
    budget = budget_for(get_gpu("rtx-4090"))
    batches = [1, 2, 4, 5, 6, 8, 16]
    grid = sweep(spec, batches, None, budget)
    assert grid.fits == [fit_on(with_workload(spec, batch_size=b), budget).fits for b in batches]
    assert any(grid.fits) and not all(grid.fits)


def test_grid_bounds_depend_on_what_a_point_costs() -> None:
    """On the symbolic path a point is a polynomial evaluated (1,000,000 allowed); off it, each point is a
    full estimate, and 5,000 is the most one sweep computes. Both refusals come before any estimate."""
    import pytest

    from vramcalc.errors import SpecError

    qlora = load_spec(CONFIGS / "llama-2-7b-qlora.yaml")  # LLM keys: one full estimate per point
    batches, seqs = list(range(1, 72)), list(range(64, 64 * 72, 64))  # 71 x 71 = 5,041 points
    with pytest.raises(SpecError, match=r"^sweep: 5,041 points; at most 5,000 for this spec"):
        sweep(qlora, batches, seqs, None)
    small = sweep(qlora, batches[:2], seqs[:2], None)
    assert len(small.totals) == 4
    gpt2 = load_spec(CONFIGS / "gpt2.yaml")  # the symbolic path: the same grid is answered
    assert len(sweep(gpt2, batches, list(range(10, 720, 10)), None).totals) == 71 * 71
    with pytest.raises(SpecError, match=r"^sweep: 1,002,001 points; at most 1,000,000 per sweep$"):
        sweep(gpt2, list(range(1, 1002)), list(range(1, 1002)), None)
