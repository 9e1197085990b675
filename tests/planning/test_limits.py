"""Planning core: budgets, the exact max-batch / max-seq search, suggestions, fit over the catalog,
path expansion, and max-batch against measured fits and OOMs (shared/calibration/measured.yaml)."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from measured_records import measured_records

from vramcalc.errors import SpecError, UnitError
from vramcalc.families import estimate
from vramcalc.families.estimate import Estimate
from vramcalc.hardware.catalog import NO_BF16, load_catalog
from vramcalc.hardware.lookup import get_gpu
from vramcalc.planning.budget import Budget, budget_for
from vramcalc.planning.check import CheckError, CheckReport, expand_paths
from vramcalc.planning.fit import fit_cards
from vramcalc.planning.limits import largest_fitting, max_batch, max_seq, with_workload
from vramcalc.planning.suggest import accumulation_total, suggestions
from vramcalc.planning.sweep import parse_values, sweep
from vramcalc.spec.load import load_spec, parse_spec
from vramcalc.spec.models import Spec
from vramcalc.spec.target import Reserve, parse_reserve

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
MEASURED = ROOT.parent / "shared" / "calibration" / "measured.yaml"
GiB, MiB = 2**30, 2**20


def spec_of(model: dict[str, Any], **workload: Any) -> Spec:
    return parse_spec({"name": "t", "model": model, "workload": workload})


TINY = {"architecture": "decoder", "layers": 2, "hidden_size": 64, "heads": 4, "vocab_size": 100}


# -- reserve and budget arithmetic ----------------------------------------------------------------


def test_reserve_share_and_size() -> None:
    # A100 80GB SXM: nvidia-smi total 81,920 MiB (catalog driver_total_mib) = 85,899,345,920 B.
    usable = 81920 * MiB
    assert parse_reserve("10%").bytes_of(usable) == 8_589_934_592  # ceil(0.1 x 85,899,345,920)
    assert parse_reserve("2GiB").bytes_of(usable) == 2 * GiB
    assert parse_reserve("1.5 GB").bytes_of(usable) == 1_500_000_000
    budget = budget_for(get_gpu("a100-80gb-sxm"), parse_reserve("10%"))
    assert budget.usable_bytes == usable
    assert budget.available_bytes == 85_899_345_920 - 8_589_934_592
    assert "driver total 81,920 MiB" in budget.capacity_basis


@pytest.mark.parametrize("text", ["10", "abc", "150%", "-5%", "", "5 potatoes"])
def test_reserve_rejects_unitless_and_out_of_range(text: str) -> None:
    with pytest.raises(UnitError):
        parse_reserve(text)


def test_spec_target_section() -> None:
    spec = parse_spec(
        {
            "model": TINY,
            "workload": {"batch_size": 1, "seq_len": 8},
            "target": {"gpu": "t4", "count": 4, "reserve": "1GiB"},
        }
    )
    assert spec.target is not None and spec.target.count == 4
    assert spec.target.reserve == Reserve(n_bytes=GiB, text="1GiB")
    with pytest.raises(SpecError, match=r"<spec>: target.reserve: '10' needs a unit"):
        parse_spec({"model": TINY, "workload": {"batch_size": 1, "seq_len": 8}, "target": {"reserve": "10"}})
    with pytest.raises(SpecError, match=r"target.gpus: unknown key"):
        parse_spec({"model": TINY, "workload": {"batch_size": 1, "seq_len": 8}, "target": {"gpus": 2}})


# -- the search ----------------------------------------------------------------------------------------


def test_largest_fitting_on_a_known_line() -> None:
    calls: list[int] = []

    def total_at(n: int) -> int:
        calls.append(n)
        return 100 * n + 7

    # 100 x 9 + 7 = 907 <= 1000 < 1007 = 100 x 10 + 7
    value, seen = largest_fitting(total_at, 1000)
    assert value == 9 and seen[9] == 907 and seen[10] == 1007
    # doubling 1, 2, 4, 8, 16 then bisection 12, 10, 9: 8 calls = O(log n), each value once
    assert len(calls) == len(set(calls)) == 8
    assert largest_fitting(total_at, 100) == (0, {1: 107})
    assert largest_fitting(lambda n: 0, 10, cap=1000)[0] == 1000  # everything fits: the cap


def test_largest_fitting_is_logarithmic() -> None:
    for answer in (1, 2, 3, 1000, 123_456, 10**9):

        def step(n: int, a: int = answer) -> int:
            return 0 if n <= a else 1

        value, seen = largest_fitting(step, 0)
        assert value == answer
        assert len(seen) <= 2 * answer.bit_length() + 2


CARDS = [gpu.id for gpu in load_catalog().gpus]
OPTIMIZER_CHOICES = ["none", "sgd", "sgd-momentum", "adam", "adamw", "adamw-8bit", "adafactor", "lion"]
HIDDEN_HEADS = [(256, 4), (512, 8), (768, 12), (1024, 16), (2048, 16), (4096, 32)]


@st.composite
def text_specs(draw: st.DrawFn) -> Spec:
    hidden, heads = draw(st.sampled_from(HIDDEN_HEADS))
    arch = draw(st.sampled_from(["encoder", "decoder", "encoder-decoder"]))
    model = {
        "architecture": arch,
        "layers": draw(st.integers(1, 48)),
        "hidden_size": hidden,
        "heads": heads,
        "vocab_size": draw(st.integers(1000, 130_000)),
    }
    mode = draw(st.sampled_from(["train", "inference"]))
    workload: dict[str, Any] = {
        "mode": mode,
        "batch_size": draw(st.integers(1, 64)),
        "seq_len": draw(st.sampled_from([128, 512, 1024, 2048, 4096])),
        "precision": draw(st.sampled_from(["fp32", "fp16", "bf16", "amp-fp16", "amp-bf16"])),
        "attention": draw(st.sampled_from(["eager", "sdpa"])),
    }
    if mode == "train":
        workload["optimizer"] = draw(st.sampled_from(OPTIMIZER_CHOICES))
        workload["gradient_checkpointing"] = draw(st.sampled_from(["none", "full", "selective"]))
    return spec_of(model, **workload)


def _total(spec: Spec, budget: Budget, **counts: int) -> int:
    return estimate(with_workload(spec, **counts), hopper_or_newer=budget.hopper_or_newer).total_bytes


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=text_specs(), card=st.sampled_from(CARDS), reserve=st.sampled_from(["0%", "10%", "2GiB"]))
def test_max_batch_fits_and_the_next_does_not(spec: Spec, card: str, reserve: str) -> None:
    budget = budget_for(get_gpu(card), parse_reserve(reserve))
    limit = max_batch(spec, budget)
    # checked against estimate() directly, not against the search's own numbers
    after = _total(spec, budget, batch_size=limit.value + 1)
    assert after > budget.available_bytes
    assert limit.total_at_next == after
    if limit.value:
        at = _total(spec, budget, batch_size=limit.value)
        assert at <= budget.available_bytes and limit.total_at_max == at
    else:
        assert limit.total_at_max is None
    assert limit.n_estimates <= 2 * (limit.value + 1).bit_length() + 2


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=text_specs(), card=st.sampled_from(CARDS))
def test_max_seq_fits_and_the_next_does_not(spec: Spec, card: str) -> None:
    budget = budget_for(get_gpu(card))
    limit = max_seq(spec, budget)
    assert _total(spec, budget, seq_len=limit.value + 1) > budget.available_bytes
    if limit.value:
        assert _total(spec, budget, seq_len=limit.value) <= budget.available_bytes


def test_max_seq_needs_a_free_sequence_length() -> None:
    vision = load_spec(CONFIGS / "vit-base.yaml")
    with pytest.raises(SpecError, match="no seq_len"):
        max_seq(vision, budget_for(get_gpu("a100-80gb-sxm")))


def test_max_seq_notes_the_position_table() -> None:
    # gpt2.yaml has 1,024 learned positions; an 80 GB card would hold longer sequences at batch 8, but
    # position 1,025 has no embedding, so the search stops at the table and says why
    limit = max_seq(load_spec(CONFIGS / "gpt2.yaml"), budget_for(get_gpu("h200-sxm")))
    assert limit.value == 1024 and "max_position_embeddings (1,024)" in limit.notes[0]


# -- what would make it fit --------------------------------------------------------------------------


def three_phases(phase_components: dict[str, dict[str, int]]) -> Estimate:
    """A training estimate of 100 / 150 / 120 bytes (forward, backward, optimizer), 40 of gradients at most."""
    return Estimate(
        name="x",
        params=1,
        mode="train",
        peak_phase="backward",
        components={},
        component_peaks={"gradients": 40},
        phases={"forward": 100, "backward": 150, "optimizer": 120},
        phase_components=phase_components,
        overhead={"cuda_context": 10, "allocator_reserve": 0},
    )


def test_accumulation_total_by_hand() -> None:
    result = three_phases({"forward": {"gradients": 0}, "backward": {"gradients": 0}, "optimizer": {"gradients": 40}})
    spec = parse_spec(
        {"model": TINY, "workload": {"batch_size": 1, "seq_len": 8}, "overhead": {"allocator_reserve": "50%"}}
    )
    # peak = max(100 + 40, 150 + 40, 120 - 40 + 40) = 190; + context 10 + ceil(0.5 x 190) = 295
    assert accumulation_total(result, spec) == 295


def test_suggestions_fit_and_come_best_first() -> None:
    # BERT-large, fp32, eager, batch 32 on a 16 GB V100: 69 GiB needed
    spec = with_workload(load_spec(CONFIGS / "bert-large.yaml"), batch_size=32, precision="fp32", attention="eager")
    budget = budget_for(get_gpu("v100-16gb-sxm2"))
    found = suggestions(spec, budget)
    assert found, "checkpointing alone fits (13 GiB)"
    assert [s.total_bytes for s in found] == sorted(s.total_bytes for s in found)
    for item in found:
        assert item.total_bytes <= budget.available_bytes
        assert item.headroom_bytes == budget.available_bytes - item.total_bytes
        assert "bf16" not in item.change  # the V100 has no bf16 (NO_BF16)
    assert "v100-16gb-sxm2" in NO_BF16
    by_change = {s.change: s for s in found}
    full = with_workload(spec, gradient_checkpointing="full")
    assert by_change["gradient_checkpointing: full"].total_bytes == estimate(full, hopper_or_newer=False).total_bytes
    batch = next(s for s in found if s.change.startswith("batch_size"))
    micro, steps = int(batch.change.split()[1]), int(batch.change.split()[3])
    assert micro * steps == 32 and micro <= max_batch(spec, budget).value


def test_no_suggestion_when_nothing_single_fits() -> None:
    # Llama-2-7B at batch 8: no single change brings it under a T4's 15 GiB (fp32 AdamW weights alone: 27 GB)
    spec = with_workload(load_spec(CONFIGS / "llama-2-7b.yaml"), precision="fp32", optimizer="adamw")
    assert suggestions(spec, budget_for(get_gpu("t4"))) == []


def test_fit_cards_uses_each_generations_estimate() -> None:
    spec = load_spec(CONFIGS / "bert-base.yaml")
    cards = {card.budget.gpu_id: card for card in fit_cards(spec, load_catalog().gpus)}
    assert len(cards) == len(load_catalog().gpus)
    assert cards["h100-sxm"].needed_bytes == estimate(spec, hopper_or_newer=True).total_bytes
    assert cards["a100-80gb-sxm"].needed_bytes == estimate(spec, hopper_or_newer=False).total_bytes
    for card in cards.values():
        assert card.fits == (card.needed_bytes <= card.budget.available_bytes)
        # one card when it fits; otherwise the sharded plan's GPU count (two or more), or None
        assert card.min_cards == (1 if card.fits else (card.plan.gpus if card.plan else None))
        assert card.fits or card.plan is None or (card.plan.gpus >= 2 and card.plan.fits)
    ordered = fit_cards(spec, load_catalog().gpus)
    first_no = next(i for i, card in enumerate(ordered) if not card.fits)
    assert all(card.fits for card in ordered[:first_no]) and not any(card.fits for card in ordered[first_no:])


# -- sweeps ----------------------------------------------------------------------------------------------


def test_parse_values() -> None:
    assert parse_values("8,1, 2,4,8k,2", "--batch-size") == [1, 2, 4, 8, 8000]
    for bad in ("0", "x", "1,,2", "2e12"):
        with pytest.raises((SpecError, UnitError)):
            parse_values(bad, "--batch-size")


def test_sweep_equals_estimate_at_every_point() -> None:
    spec = load_spec(CONFIGS / "t5-base.yaml")
    budget = budget_for(get_gpu("l4"))
    grid = sweep(spec, [1, 3, 8], [64, 200, 512], budget)
    assert len(grid.points()) == 9
    for batch, seq, total in grid.points():
        assert seq is not None and total == _total(spec, budget, batch_size=batch, seq_len=seq)
    with pytest.raises(SpecError, match="no seq_len"):
        sweep(load_spec(CONFIGS / "vit-base.yaml"), [1], [128], None)


# -- paths and exit codes ------------------------------------------------------------------------------


def test_expand_paths(tmp_path: Path) -> None:
    (tmp_path / "a" / "deep").mkdir(parents=True)
    (tmp_path / "a" / ".hidden").mkdir()
    for name in ("a/x.yaml", "a/deep/y.yml", "a/.hidden/z.yaml", "a/readme.md"):
        (tmp_path / name).write_text("x: 1\n")
    paths, errors = expand_paths([str(tmp_path / "a"), str(tmp_path / "a" / "*.yaml"), str(tmp_path / "none*.yaml")])
    assert paths == [str(tmp_path / "a" / "deep" / "y.yml"), str(tmp_path / "a" / "x.yaml")]
    assert [e.messages[0] for e in errors] == [f"{tmp_path / 'none*.yaml'}: no spec files match this pattern"]
    (tmp_path / "empty").mkdir()
    assert "no *.yaml or *.yml files" in expand_paths([str(tmp_path / "empty")])[1][0].messages[0]


def test_report_exit_codes() -> None:
    assert CheckReport().exit_code == 0
    assert CheckReport(errors=[CheckError("x", ("x: bad",))]).exit_code == 2


def test_core_does_not_import_cli_libraries() -> None:
    code = (
        "import sys; import vramcalc.planning.limits, vramcalc.planning.fit, vramcalc.planning.check, "
        "vramcalc.spec.target; "
        "print(','.join(m for m in ('typer', 'rich', 'click') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# -- max-batch against measured runs (shared/calibration/measured.yaml; skipped without ../shared) ----
#
# Overhead assumption, unless a case says otherwise: vramcalc's defaults, a 512 MiB CUDA context and the
# allocator reserve (a quarter of the transient bytes) on top of the allocated peak. "Fits" = total_bytes <=
# the card's usable memory.

needs_shared = pytest.mark.skipif(not MEASURED.exists(), reason="../shared/calibration not present")


@functools.cache
def measured() -> dict[str, dict[str, Any]]:
    return {case["id"]: case for case in measured_records()}


def bracket(cases: dict[str, dict[str, Any]], fits_id: str, oom_id: str | None) -> tuple[int, int | None]:
    """(largest batch measured to run, smallest batch measured to OOM) from two cited cases."""
    assert cases[fits_id]["measured"]["quantity"] in ("peak_allocated", "nvml_used")
    low = cases[fits_id]["workload"]["batch_size"]
    if oom_id is None:
        return low, None
    assert cases[oom_id]["measured"]["quantity"] == "oom"
    return low, cases[oom_id]["workload"]["batch_size"]


def fwd_bwd_spec(case: dict[str, Any], **model: Any) -> Spec:
    """A fwd_bwd case (forward + logits.sum().backward(), no optimizer) as a training step without an
    optimizer; vramcalc models a cross-entropy loss instead of logits.sum(), a small difference here."""
    m, w = case["model"], case["workload"]
    shape = {
        "architecture": "decoder",
        "layers": m["layers"],
        "hidden_size": m["hidden_size"],
        "heads": m["heads"],
        "ffn_size": m["ffn_size"],
        "vocab_size": m["vocab_size"],
        "mlp": m["mlp"],
        "norm": "layernorm",
        "tie_embeddings": m["tie_embeddings"],
        "params": m["params"],
        **model,
    }
    return spec_of(
        shape,
        mode="train",
        batch_size=w["batch_size"],
        seq_len=w["seq_len"],
        precision=w["precision"],
        optimizer="none",
        attention=w["attention"],
    )


@needs_shared
def test_max_batch_opt_350m_l40s_between_measured_fit_and_oom() -> None:
    cases = measured()
    low, oom = bracket(cases, "hf-sdpa-opt-350m-train-bs2-seq2048-eager", "hf-sdpa-opt-350m-train-bs4-seq2048-eager")
    case = cases["hf-sdpa-opt-350m-train-bs2-seq2048-eager"]
    spec = fwd_bwd_spec(case, position="learned", max_position_embeddings=2050)
    l40s = get_gpu("l40s")
    assert l40s.usable_bytes == case["gpu"]["vram_usable_bytes"]  # 46,068 MiB, nvidia-smi
    value = max_batch(spec, budget_for(l40s)).value
    assert oom is not None and low <= value < oom  # batch 2 ran (30.6 GB allocated), batch 4 ran out of memory


@needs_shared
@pytest.mark.parametrize(
    ("fits_id", "oom_id"),
    [
        ("hf-sdpa-pythia-410m-train-bs1-seq2048-eager", "hf-sdpa-pythia-410m-train-bs2-seq2048-eager"),
        ("hf-sdpa-pythia-410m-train-bs2-seq1024-eager", "hf-sdpa-pythia-410m-train-bs4-seq1024-eager"),
    ],
)
def test_max_batch_pythia_laptop_between_measured_fit_and_oom(fits_id: str, oom_id: str) -> None:
    cases = measured()
    low, oom = bracket(cases, fits_id, oom_id)
    case = cases[fits_id]
    spec = fwd_bwd_spec(case, position="rotary")
    # RTX 3080 Ti Laptop (not in the catalog): the case gives only vram_bytes (16 GiB), used as usable
    assert case["gpu"]["vram_usable_bytes"] is None
    laptop = Budget("rtx-3080-ti-laptop", case["gpu"]["name"], case["gpu"]["vram_bytes"], "vram_bytes of the case")
    value = max_batch(spec, laptop).value
    assert oom is not None and low <= value < oom  # seq 2048: exactly 1; seq 1024: 2 or 3


BERT_LARGE_V100 = [
    "hf-perf-bert-large-vanilla-bs4",
    "hf-perf-bert-large-bs4-fp16",
    "hf-perf-bert-large-bs4-adafactor",
    "hf-perf-bert-large-bs4-adam8bit",
]
PRECISIONS = {"fp32": "fp32", "amp-fp16": "amp-fp16"}
OPTIMIZERS = {"adamw": "adamw", "adafactor": "adafactor", "adam8bit": "adamw-8bit"}


@needs_shared
@pytest.mark.parametrize("case_id", BERT_LARGE_V100)
def test_max_batch_bert_large_v100_at_least_the_batch_that_ran(case_id: str) -> None:
    """HF Trainer, BertForSequenceClassification, seq 512, eager, on a V100 16 GB: batch 4 ran.

    Overhead assumption: the CUDA context measured on that stack, 1343 MiB (case hf-perf-bert-large-load-
    context-only), and the default allocator reserve (a quarter of the transient bytes); usable memory is the
    case's nvidia-smi total (16,160 MiB). The 2022 stack's PyTorch (before 2.0) kept zeroed gradients allocated
    (``versions: {torch: "1.11"}``). For fp32 AdamW the answer is exactly 4: extrapolating the two measured NVML
    figures (batch 1: 8,681 MiB, hf-perf-bert-large-bs1-ga4; batch 4: 14,949 MiB) puts batch 5 at about 17,038
    MiB, over the card. The other optimizers and precisions have no measured upper bound, so only the lower
    bound is asserted for them.
    """
    case = measured()[case_id]
    m, w = case["model"], case["workload"]
    spec = parse_spec(
        {
            "model": {
                "architecture": "encoder",
                "layers": m["layers"],
                "hidden_size": m["hidden_size"],
                "heads": m["heads"],
                "ffn_size": m["ffn_size"],
                "vocab_size": m["vocab_size"],
                "head": "classification",
                "num_labels": 2,
                "pooler": True,
                "max_position_embeddings": 512,
            },
            "workload": {
                "batch_size": w["batch_size"],
                "seq_len": w["seq_len"],
                "precision": PRECISIONS[w["precision"]],
                "optimizer": OPTIMIZERS[w["optimizer"]],
                "attention": w["attention"],
                "versions": {"torch": "1.11"},  # early 2022 (unstated); any release before 2.0 keeps gradients
            },
            "overhead": {"cuda_context": "1343MiB"},
        }
    )
    assert estimate(spec).params == m["params"] == 335_143_938
    v100 = Budget("v100-16gb-sxm2", case["gpu"]["name"], case["gpu"]["vram_usable_bytes"], "nvidia-smi total")
    value = max_batch(spec, v100).value
    assert value >= w["batch_size"] == 4
    if case_id == "hf-perf-bert-large-vanilla-bs4":
        assert value == 4


@needs_shared
@pytest.mark.parametrize("case_id", ["peft-readme-bloomz-7b1-full", "peft-readme-mt0-xxl-full"])
def test_max_batch_zero_where_full_fine_tuning_ran_out_of_memory(case_id: str) -> None:
    """PEFT README: full fp32 AdamW fine-tuning OOMed on an A100 80GB at batch 8. fp32 weights,
    gradients and two Adam states are 16 B per parameter (113 GB for 7.07B parameters), so no batch
    fits, whatever the (unstated) sequence length: max-batch is 0 even at seq_len 1."""
    case = measured()[case_id]
    m = case["model"]
    arch = "encoder-decoder" if m["arch_family"] == "encoder-decoder" else "decoder"
    model = {
        "architecture": arch,
        "layers": m["layers"],
        "hidden_size": m["hidden_size"],
        "heads": m["heads"],
        "vocab_size": m["vocab_size"],
        "params": m["params"],
    }
    spec = spec_of(model, batch_size=8, seq_len=1, precision="fp32", optimizer="adamw")
    a100 = get_gpu("a100-80gb-sxm")
    assert a100.usable_bytes == case["gpu"]["vram_bytes"] and case["measured"]["quantity"] == "oom"
    assert max_batch(spec, budget_for(a100)).value == 0 < case["workload"]["batch_size"]


def test_accumulation_total_reserves_a_quarter_of_the_transient_bytes_by_hand() -> None:
    # backward: 150 allocated, of which parameters 60 and workspace 10 are long-lived; under accumulation the
    # gradients (40) stay allocated, also long-lived: 190 allocated, transient 150 - 70 = 80, reserve 80 / 4 = 20
    result = three_phases(
        {
            "forward": {"parameters": 60, "workspace": 10, "gradients": 0, "activations": 30},
            "backward": {"parameters": 60, "workspace": 10, "gradients": 0, "activations": 80},
            "optimizer": {"parameters": 60, "workspace": 10, "gradients": 40, "optimizer_states": 10},
        }
    )
    spec = parse_spec({"model": TINY, "workload": {"batch_size": 1, "seq_len": 8}})
    assert accumulation_total(result, spec) == 190 + 10 + 20
