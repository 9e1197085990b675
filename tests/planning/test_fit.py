"""Sharded plans in `fit` and `check` (vramcalc/planning/fit.py): the fewest cards of one kind, the
"shard over N GPUs" suggestion, and agreement with `vramcalc plan`'s own search."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from vramcalc.families import estimate
from vramcalc.hardware.catalog import load_catalog
from vramcalc.hardware.lookup import get_gpu
from vramcalc.planning.budget import Budget, budget_for
from vramcalc.planning.fit import CardFit, ShardSearch, check_on, fit_cards, plan_text
from vramcalc.planning.limits import with_workload
from vramcalc.planning.plan_search import _order, search_plans
from vramcalc.spec.load import load_spec
from vramcalc.spec.models import Spec
from vramcalc.spec.parallel import FsdpStrategy, ParallelSpec
from vramcalc.spec.target import parse_reserve

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
GiB, MiB = 2**30, 2**20
#: Llama-2-70B (configs/llama-2-70b-fsdp.yaml; meta-llama/Llama-2-70b-hf): 68,976,648,192 parameters.
LLAMA_70B_PARAMS = 68_976_648_192


def with_parallel(spec: Spec, **section: Any) -> Spec:
    return spec.model_copy(update={"parallel": ParallelSpec.model_validate(section)})


def llama_70b_one_gpu() -> Spec:
    """The FSDP config without its parallel section: mixed-bf16 AdamW training, planned for one GPU."""
    return load_spec(CONFIGS / "llama-2-70b-fsdp.yaml").model_copy(update={"parallel": None, "target": None})


def fewest_gpus_lower_bound(budget: Budget) -> int:
    """Independent of the search: mixed-precision AdamW keeps 16 bytes per parameter summed over all GPUs
    whatever the plan (FSDP: fp32 parameter + fp32 gradient + two fp32 Adam states; DeepSpeed: 2 + 2 + 12;
    vramcalc/parallel/layout.py's table), so the most loaded GPU holds at least 16 P / N; the 512 MiB CUDA
    context must fit too (the default allocator reserve is a share of the transient bytes only, so it adds
    nothing to this long-lived state): 16 P / N + 512 MiB <= available, i.e. N >= 16 P / (available - 512 MiB)."""
    return math.ceil(16 * LLAMA_70B_PARAMS / (budget.available_bytes - 512 * MiB))


@pytest.fixture(scope="module")
def llama_70b_rows() -> list[CardFit]:
    """fit_cards for the one-GPU Llama-2-70B over the whole catalog: computed once (about 1.5 s) for both
    cards below. Each card's search depends on the cards searched before it, so it is not narrowed to one."""
    return fit_cards(llama_70b_one_gpu(), load_catalog().gpus)


@pytest.mark.parametrize("card", ["a100-80gb-sxm", "h100-sxm"])
def test_fewest_cards_llama_2_70b_on_80gb_cards(card: str, llama_70b_rows: list[CardFit]) -> None:
    spec = llama_70b_one_gpu()
    budget = budget_for(get_gpu(card))
    (row,) = [r for r in llama_70b_rows if r.budget.gpu_id == card]
    assert not row.fits  # one GPU: 16 B x 69.0e9 parameters alone are ~1 TiB
    assert row.min_cards == 14 and row.plan is not None
    assert plan_text(row.plan) == "TP 2 x DP 7, FSDP full_shard + SP"
    assert row.sharding == f"14 x {card} with TP 2 x DP 7, FSDP full_shard + SP"
    # no plan of any kind can use fewer than 13: 16 x 68,976,648,192 / (80 GiB - 512 MiB) = 12.93 on the A100
    # (12.99 on the H100, whose driver total is 81,559 MiB)
    assert fewest_gpus_lower_bound(budget) == 13
    # 13 GPUs allow only data parallelism (64 heads do not split 13 ways), and FSDP over 13 does not fit (87.1
    # GiB per GPU); the plan fits per the estimator on 14, where FSDP alone does not (81.5 GiB): tensor
    # parallelism also splits the activations
    section = {"fsdp": "full_shard", "gpus_per_node": 8}
    at = estimate(
        with_parallel(spec, data=7, tensor=2, sequence_parallel=True, **section), hopper_or_newer=budget.hopper_or_newer
    )
    assert at.total_bytes == row.plan.needed_bytes <= budget.available_bytes
    for data in (13, 14):
        alone = estimate(with_parallel(spec, data=data, **section), hopper_or_newer=budget.hopper_or_newer)
        assert alone.total_bytes > budget.available_bytes
    # the sharded states alone: 16 P / 14 per GPU (73.4 GiB of the 79.6 GiB total)
    assert at.total_bytes > 16 * LLAMA_70B_PARAMS // 14


def test_fewest_cards_of_a_spec_with_a_parallel_section() -> None:
    # configs/llama-2-70b-fsdp.yaml: 32 GPUs, FSDP full_shard: 44.0 GiB per GPU
    spec = load_spec(CONFIGS / "llama-2-70b-fsdp.yaml")
    rows = {r.budget.gpu_id: r for r in fit_cards(spec, load_catalog().gpus)}
    # a card it fits: fewer cards would do (the search's first plan, as `vramcalc plan` lists it)
    h100 = rows["h100-sxm"]
    assert h100.fits and h100.budget.count == 32 and h100.min_cards == 14
    # a card it does not fit (40 GiB): 16 P / (40 GiB - 512 MiB) = 26.02, so at least 27 GPUs
    a100 = rows["a100-40gb-sxm"]
    assert not a100.fits and a100.min_cards == 28 and fewest_gpus_lower_bound(a100.budget) == 27
    assert a100.plan is not None and plan_text(a100.plan) == "TP 2 x DP 14, FSDP full_shard + SP"
    fewer = dict(a100.plan.parallel, data=13)  # the same plan on 26 GPUs
    assert estimate(with_parallel(spec, **fewer), hopper_or_newer=False).total_bytes > a100.budget.available_bytes
    # a card no plan within 64 GPUs fits (16 GiB): 16 P / (16 GiB - 512 MiB) = 66.3 > 64
    v100 = rows["v100-16gb-sxm2"]
    assert v100.min_cards is None and v100.sharding.startswith("no sharded plan fits within 64 GPUs")
    assert fewest_gpus_lower_bound(v100.budget) > 64


def test_shard_suggestion_only_when_it_fits() -> None:
    # Llama-2-7B, bf16 AdamW (configs/llama-2-7b.yaml): 70.8 GiB on one GPU. Pure bf16 keeps
    # 2 + 2 + 2 x 2 = 8 bytes per parameter, which FSDP full_shard / ZeRO-3 divide by the GPUs.
    spec = load_spec(CONFIGS / "llama-2-7b.yaml")
    a100 = budget_for(get_gpu("a100-40gb-sxm"))
    fit = check_on(spec, a100)
    (shard,) = [s for s in fit.suggestions if s.change.startswith("shard over")]
    assert shard.change == "shard over 2 GPUs (FSDP full_shard)"
    assert shard.parallel is not None and shard.parallel["data"] == 2
    # its total is the estimator's for that plan (the spec's own foreach AdamW kept)
    pinned = with_workload(spec, optimizer_impl="foreach")
    planned = with_parallel(pinned, fsdp="full_shard", data=2)
    assert shard.total_bytes == estimate(planned, hopper_or_newer=False).total_bytes <= a100.available_bytes
    assert shard.headroom_bytes == a100.available_bytes - shard.total_bytes
    assert [s.total_bytes for s in fit.suggestions] == sorted(s.total_bytes for s in fit.suggestions)
    assert all(s.total_bytes <= a100.available_bytes for s in fit.suggestions)
    # a one-GPU spec is offered only data-parallel sharding: ZeRO-3 or FSDP full_shard, no TP/PP
    assert (shard.parallel["tensor"], shard.parallel["pipeline"]) == (1, 1)
    # at most one GPU: nothing to shard over, so no such line
    assert not [s for s in check_on(spec, a100, ShardSearch(spec, max_gpus=1)).suggestions if s.parallel]


def test_no_shard_suggestion_when_activations_alone_exceed_the_card() -> None:
    # BERT-large fp32, eager, batch 32 (examples/check): batch_size is per GPU, so ZeRO-3/FSDP leave each
    # GPU its own activations, which alone exceed the V100's 15 GiB
    spec = load_spec(ROOT / "examples" / "check" / "bert-large-v100.yaml")
    v100 = budget_for(get_gpu("v100-16gb-sxm2"), parse_reserve("1GiB"))  # the spec's target.reserve
    assert estimate(spec, hopper_or_newer=False).component_peaks["activations"] > v100.available_bytes
    fit = check_on(spec, v100)
    assert fit.suggestions and not [s for s in fit.suggestions if s.change.startswith("shard over")]
    # tensor parallelism does split them: `fit` reports 8 cards (TP 8) as the fewest
    assert fit.min_cards == 8 and fit.plan is not None and fit.plan.parallel["tensor"] == 8


def test_unsearchable_specs_say_why() -> None:
    resnet = ShardSearch(load_spec(CONFIGS / "resnet-50.yaml"))
    assert resnet.reason is not None and "resnet" in resnet.reason
    inference = ShardSearch(with_workload(load_spec(CONFIGS / "gpt2.yaml"), mode="inference"))
    assert inference.reason == (
        "the sharded (ZeRO/FSDP) search covers training only; vramcalc plan lists tensor and pipeline layouts"
    )
    budget = budget_for(get_gpu("t4"))
    assert resnet.smallest(budget) is None and resnet.note(budget, None).startswith("not searched: ")


@pytest.mark.parametrize(
    ("config", "card"),
    [
        ("llama-2-70b-fsdp.yaml", "a100-40gb-sxm"),
        ("llama-2-70b-fsdp.yaml", "rtx-4090"),
        ("llama-2-7b.yaml", "l4"),
        ("gpt2.yaml", "rtx-3070"),
    ],
)
def test_first_plan_is_plan_searchs(config: str, card: str) -> None:
    """ShardSearch reuses plan_search's search with a shared cache and a tighter bound; its first plan is
    the one `vramcalc plan` lists first (for a one-GPU spec: over DeepSpeed's and FSDP's schemes)."""
    spec = load_spec(CONFIGS / config)
    search = ShardSearch(spec)
    fit_cards(spec, load_catalog().gpus, search=search)  # other cards searched first: the cache is shared
    budget = budget_for(get_gpu(card))
    variants = [search.base]
    if spec.parallel is None:
        variants.append(with_parallel(search.base, fsdp=FsdpStrategy.full_shard.value))
    plans = [c for v in variants for c in search_plans(v, budget, max_gpus=64, top=10**6).plans]
    expected = min(plans, key=_order)
    found = search.smallest(budget)
    assert found is not None and (found.parallel, found.needed_bytes) == (expected.parallel, expected.needed_bytes)
