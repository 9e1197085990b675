"""The bundled model catalog (vramcalc/spec/models.yaml): entries, names, counts, and every entry estimated.

References: ``meta_params`` of each entry is the count of transformers 5.24.0 instantiating the entry's
config on the meta device (benchmarks/model_catalog_counts.py computes and records it; it is not
vramcalc's output). ``published_params`` is the model card's figure (or the Hub's, or the cited table),
as the entry's ``source`` and the file header say.

Families the config.json importer does not convert yet fail the estimate and count tests here until it
does: that is the test doing its job, not a reason to mark them.
"""

from __future__ import annotations

import pytest

from vramcalc.families import estimate
from vramcalc.spec.model_flag import spec_with_model
from vramcalc.spec.presets import catalog, find_model, normalise

ENTRIES = catalog()
IDS = [entry.id for entry in ENTRIES]

#: The families the brief of the catalog names (each must have at least one entry).
FAMILIES = {
    "llama", "mistral", "mixtral", "qwen2", "qwen2.5", "qwen3", "qwen3-moe", "qwen2-moe", "gemma", "gemma2",
    "gemma3", "phi", "phi3", "deepseek-v2", "deepseek-v3", "r1-distill", "falcon", "gpt-neox", "pythia", "opt",
    "bloom", "starcoder2", "olmo", "olmo2", "gpt2", "bert", "roberta", "deberta", "t5", "vit", "resnet",
}  # fmt: skip


def published_bounds(text: str, coarse: bool) -> tuple[float, float]:
    """(value, allowed distance) of a published figure: half a unit of its last digit ("8.03B": 0.005e9;
    an exact "70,426,624": 0.5), plus 0.5 % where the entry says the card rounds coarsely."""
    text = text.replace(",", "")
    scale = {"K": 1e3, "M": 1e6, "B": 1e9}.get(text[-1], 1.0)
    digits = text.rstrip("KMB")
    decimals = len(digits.partition(".")[2])
    value = float(digits) * scale
    return value, 0.5 * scale * 10.0**-decimals + (0.005 * value if coarse else 0.0)


def test_catalog_size_and_families() -> None:
    assert len(ENTRIES) >= 150
    assert FAMILIES <= {entry.family for entry in ENTRIES}


def test_ids_are_unique_lower_case_and_every_name_names_one_entry() -> None:
    assert len(set(IDS)) == len(IDS)
    owner: dict[str, str] = {}
    for entry in ENTRIES:
        assert entry.id == entry.id.lower() and " " not in entry.id
        for name in (entry.id, *entry.aliases):
            key = normalise(name)
            assert owner.setdefault(key, entry.id) == entry.id, f"{name} names {owner[key]} and {entry.id}"


@pytest.mark.parametrize("entry_id", IDS)
def test_every_entry_is_resolvable_by_any_spelling(entry_id: str) -> None:
    entry = find_model(entry_id)
    assert entry is not None and entry.id == entry_id
    assert find_model(entry_id.upper().replace("-", "_")) is entry
    assert find_model(" ".join(entry_id.split("-"))) is entry
    assert find_model(entry.repo) is entry or find_model(entry.repo).repo == entry.repo  # same config, same repo


def test_every_entry_has_a_source_and_a_transformers_count() -> None:
    for entry in ENTRIES:
        assert entry.source and entry.repo and entry.name, entry.id
        assert isinstance(entry.meta_params, int) and entry.meta_params > 0, entry.id
        assert (entry.config is None) != (entry.model is None), entry.id


def test_published_figures_match_the_transformers_counts() -> None:
    """Checks the configs against the model cards: a wrong layer count or vocabulary shows here."""
    checked, wrong = 0, []
    for entry in ENTRIES:
        if entry.published_params is None:
            continue
        value, allowed = published_bounds(entry.published_params, entry.published_coarse is not None)
        checked += 1
        if abs(entry.meta_params - value) > allowed:
            wrong.append(f"{entry.id}: {entry.meta_params:,} vs published {entry.published_params}")
    assert not wrong
    assert checked >= 100


def test_published_bounds_by_hand() -> None:
    assert published_bounds("8.03B", False) == pytest.approx((8.03e9, 0.005e9))
    assert published_bounds("70,426,624", False) == (70426624.0, 0.5)
    value, allowed = published_bounds("336M", True)  # +-0.5M, plus 0.5 % of 336M = 1.68M
    assert value == 336e6 and allowed == pytest.approx(2.18e6)


@pytest.mark.parametrize("entry_id", IDS)
def test_every_entry_estimates_and_counts_as_transformers_does(entry_id: str) -> None:
    """`vramcalc estimate --model ID` in-process: the spec the flag builds, then the engine. The count
    must equal transformers' (meta_params) exactly."""
    spec, _ = spec_with_model(None, entry_id, {"mode": "inference", "batch_size": 1})
    result = estimate(spec)
    assert result.peak_allocated_bytes > 0
    assert result.params == find_model(entry_id).meta_params
