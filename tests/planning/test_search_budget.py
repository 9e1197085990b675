"""The searches' budget of estimates: `plan`, `fit` and `check`'s "shard over N GPUs" estimate at most
SEARCH_ESTIMATES plans per command, say so when they reach it, and never pass off a cut search as a
complete one ("no plan fits", "> 64 cards").

References: the complete search's own answers (the same code with the budget out of reach) and, for
the real-size case, a model of 720,720 layers whose pipeline degrees (the divisors of 720,720 up to
100,000: 233 of them) times the tensor degrees and schemes make far more layouts than the budget."""

from __future__ import annotations

import glob
import json
from pathlib import Path

import pytest
from plan_shapes import SMALL_DECODER, SMALL_WORKLOAD, card
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.hardware.catalog import load_catalog
from vramcalc.planning import plan_search
from vramcalc.planning.fit import ShardSearch, fit_cards
from vramcalc.planning.plan_layouts import plans_for
from vramcalc.planning.plan_search import SEARCH_ESTIMATES, Allowance, AllowanceSpent
from vramcalc.render.planning import cards_needed
from vramcalc.spec.load import load_spec, parse_spec

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


def test_allowance_counts_and_refuses() -> None:
    allowance = Allowance(2)
    allowance.take()
    allowance.take()
    assert not allowance.reached and allowance.spent == 2
    with pytest.raises(AllowanceSpent):
        allowance.take()
    assert allowance.reached and allowance.spent == 2


@pytest.mark.parametrize("limit", [0, 7, 40])
def test_a_cut_plan_search_lists_only_plans_that_fit_and_says_it_was_cut(
    limit: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = parse_spec({"name": "m", "model": SMALL_DECODER, "workload": SMALL_WORKLOAD})
    budget = card(3.4)
    whole = plans_for(spec, budget, max_gpus=16)
    assert whole.complete and whole.n_estimates > 40  # the complete search needs more than any limit here
    monkeypatch.setattr(plan_search, "SEARCH_ESTIMATES", limit)
    cut = plans_for(spec, budget, max_gpus=16)
    assert not cut.complete and cut.n_estimates <= limit
    assert all(c.fits for c in cut.plans)
    # what it did estimate is what the complete search estimated for those layouts: every plan it lists is
    # one the complete search found too, or a larger one of a layout whose smallest it did not reach
    assert {c.gpus for c in cut.plans} <= set(range(whole.min_gpus or 1, 17))


def test_the_bundled_configs_are_searched_completely() -> None:
    """fit over the whole catalog with the default 64 GPUs: no card's search reaches the budget."""
    gpus = load_catalog().gpus
    for path in sorted(glob.glob(str(ROOT / "configs" / "*.yaml"))):
        search = ShardSearch(load_spec(path))
        fit_cards(search.spec, gpus, search=search)
        assert not search.allowance.reached, path
        assert search.allowance.spent < SEARCH_ESTIMATES / 2, (path, search.allowance.spent)


@pytest.mark.parametrize("limit", [0, 3, 30, 300])
def test_a_cut_fit_never_claims_more_than_it_searched(limit: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cards searched before the budget ran out agree with the complete search; the others say 'unknown',
    never '> 64' (which would claim that no plan of 64 GPUs fits)."""
    spec = load_spec(ROOT / "configs" / "llama-2-70b-fsdp.yaml").model_copy(update={"parallel": None})
    gpus = load_catalog().gpus
    whole = {row.budget.gpu_id: row for row in fit_cards(spec, gpus)}
    monkeypatch.setattr(plan_search, "SEARCH_ESTIMATES", limit)
    search = ShardSearch(spec)
    rows = fit_cards(spec, gpus, search=search)
    assert search.allowance.reached and search.allowance.spent == limit
    assert any(row.search_cut for row in rows)
    for row in rows:
        full = whole[row.budget.gpu_id]
        if row.fits or not row.search_cut:
            assert row.min_cards == full.min_cards, row.budget.gpu_id
            continue
        cell = cards_needed(row, search)
        if row.plan is None:
            assert cell == "unknown (search budget spent)"
            assert "budget of" in row.sharding and "no sharded plan fits" not in row.sharding
        else:  # the best found before the budget ran out: never fewer cards than the complete search's
            assert row.plan.fits and row.plan.gpus >= (full.min_cards or 0)
            assert "the best found before the search reached its budget" in row.sharding


@pytest.fixture(scope="module")
def huge(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """GPT-2 small's shape with 720,720 layers (5.1 trillion parameters)."""
    text = (ROOT / "configs" / "gpt2.yaml").read_text().replace("layers: 12", "layers: 720720")
    path = tmp_path_factory.mktemp("huge") / "huge.yaml"
    path.write_text(text)
    return path


def test_plan_of_a_huge_model_stops_at_the_budget(huge: Path) -> None:
    result = runner.invoke(app, ["plan", str(huge), "--gpu", "h100-sxm", "--max-gpus", "100000", "--json"])
    doc = json.loads(result.stdout)
    assert doc["search_complete"] is False and doc["max_estimates"] == SEARCH_ESTIMATES
    assert doc["n_estimates"] <= SEARCH_ESTIMATES


def test_plan_of_a_huge_model_says_it_stopped(huge: Path) -> None:
    text = runner.invoke(app, ["plan", str(huge), "--gpu", "h100-sxm", "--max-gpus", "100000"], terminal_width=400)
    assert f"the search stopped at its budget of {SEARCH_ESTIMATES:,} estimates" in text.stdout


def test_fit_of_a_huge_model_says_its_search_was_cut(huge: Path) -> None:
    result = runner.invoke(app, ["fit", str(huge), "--gpu", "h100-sxm", "--max-gpus", "100000", "--json"])
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    target = doc["target"]
    assert target["fits"] is False and target["min_cards_search_complete"] is False
    assert f"budget of {SEARCH_ESTIMATES:,} estimates" in target["min_cards_note"]


@pytest.mark.parametrize("command", ["plan", "fit"])
def test_help_states_the_budget(command: str) -> None:
    result = runner.invoke(app, [command, "--help"], terminal_width=400)
    assert f"{SEARCH_ESTIMATES:,} plans" in " ".join(result.stdout.split())
