"""QLoRA's fp32 upcast explained and undone: the estimate says when attention materialises its scores, and
`check` suggests ``adapter.prepare_kbit: false`` where one card then holds the step (instead of a second
GPU)."""

from __future__ import annotations

from typing import Any

from vramcalc.families import estimate
from vramcalc.hardware.lookup import get_gpu
from vramcalc.planning.budget import budget_for, fit_on
from vramcalc.planning.fit import check_on
from vramcalc.spec.load import parse_spec

QLORA = {
    "mode": "train", "batch_size": 1, "seq_len": 6144, "precision": "bf16",
    "adapter": {"type": "lora", "rank": 16, "targets": "all-linear"}, "quantization": "nf4",
}  # fmt: skip


def _spec(**workload: Any) -> Any:
    return parse_spec({"name": "qlora", "model": "llama-3.1-8b", "workload": QLORA | workload})


def test_the_estimate_names_the_math_kernel_and_its_scores() -> None:
    # by hand: 1 sequence x 32 heads x 6,144^2 x 4 bytes (fp32) = 4,831,838,208 B = 4.50 GiB per layer
    notes = estimate(_spec()).assumptions
    line = next(n for n in notes if n.startswith("attention: sdpa runs its math kernel (fp32 inputs"))
    assert "4.50 GiB per layer at batch 1 x 6,144 tokens" in line
    # without the upcast SDPA's flash kernel runs: no scores, no note
    assert not any(
        "materialises" in n for n in estimate(_spec(adapter=QLORA["adapter"] | {"prepare_kbit": False})).assumptions
    )


def test_check_suggests_prepare_kbit_false_where_it_fits_one_card() -> None:
    budget = budget_for(get_gpu("rtx-4090"))
    row = check_on(_spec(), budget)
    assert not row.fits
    found = [s for s in row.suggestions if s.change == "adapter.prepare_kbit: false"]
    assert len(found) == 1
    # the change, written as a user would, fits with the figures check quotes
    changed = fit_on(_spec(adapter=QLORA["adapter"] | {"prepare_kbit": False}, gradient_checkpointing="full"), budget)
    assert changed.fits and (found[0].total_bytes, found[0].headroom_bytes) == (
        changed.needed_bytes,
        changed.headroom_bytes,
    )
