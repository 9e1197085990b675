"""target.gpu honoured by every command that takes --gpu: estimate and report give the verdict check gives on
the spec's card, and bandwidth and compare use that card, each equal to the run that names the card with
--gpu (and the reserve with --reserve)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_json import doc_without_input as doc
from cli_json import model_spec as spec_file
from cli_json import run


@pytest.fixture
def targeted(tmp_path: Path) -> Path:
    """A spec planned for an A100 80GB with 10 % kept free (target.gpu, target.reserve)."""
    workload = {"batch_size": 8, "seq_len": 1024, "precision": "amp-bf16"}
    return spec_file(tmp_path, "gpt2", workload, target={"gpu": "a100-80gb-sxm", "reserve": "10%"})


def test_estimate_gives_the_verdict_of_check_on_the_target_card(targeted: Path) -> None:
    [row] = doc("check", targeted, "--format", "json")
    verdict = doc("estimate", targeted, "--json")["gpu"]
    assert verdict is not None
    for key in ("fits", "needed_bytes", "available_bytes", "headroom_bytes"):
        assert verdict[key] == row[key], key
    named = ["--gpu", "a100-80gb-sxm", "--reserve", "10%"]
    assert doc("estimate", targeted, "--json") == doc("estimate", targeted, *named, "--json")


def test_report_compare_and_bandwidth_use_the_target_card(targeted: Path, tmp_path: Path) -> None:
    card = ["--gpu", "a100-80gb-sxm"]
    assert run("report", targeted)[1] == run("report", targeted, *card, "--reserve", "10%")[1]
    assert "a100" in run("report", targeted)[1].lower()
    assert doc("bandwidth", str(targeted), "--json") == doc("bandwidth", str(targeted), *card, "--json")
    stats = tmp_path / "stats.json"
    stats.write_text(json.dumps({"allocated_bytes.all.peak": 10 * 2**30, "reserved_bytes.all.peak": 11 * 2**30}))
    measured = ["--measured", str(stats), "--json"]
    assert doc("compare", targeted, *measured) == doc("compare", targeted, *card, *measured)


def test_without_a_card_there_is_no_verdict(tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "gpt2", {"batch_size": 1, "seq_len": 128})
    assert "gpu" not in doc("estimate", spec, "--json")
    code, _, err = run("bandwidth", str(spec))
    assert code == 2 and err.startswith("error: give --gpu NAME")


def test_a_reserve_needs_a_card(tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "gpt2", {"batch_size": 1, "seq_len": 128})
    for command in ("estimate", "report"):
        code, out, err = run(command, spec, "--reserve", "10%")
        assert (code, out) == (2, "") and err == "error: --reserve: needs a card: --gpu or the spec's target.gpu\n"
