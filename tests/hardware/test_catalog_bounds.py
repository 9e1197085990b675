"""A user GPU catalog is checked like a spec: every figure finite and within what a card could physically
have, a bad one is one line naming the file, the entry and the field (exit 2), never a traceback from the
arithmetic later (``.inf`` capacities overflowed, ``1e300`` ones too)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from gpu_entries import lab_card
from typer.testing import CliRunner

from vramcalc.cli import app

runner = CliRunner()
SPEC = str(Path(__file__).resolve().parents[2] / "configs" / "gpt2.yaml")
CASES = [
    ({"capacity": float("inf")}, "capacity: expected a finite number"),
    ({"capacity": float("nan")}, "capacity: expected a finite number"),
    ({"capacity": 1e300}, "capacity: must be at most"),
    ({"bandwidth_gb_s": float("inf")}, "bandwidth_gb_s: expected a finite number"),
    ({"data_rate_gbps": 1e-300}, "data_rate_gbps: must be at least"),
    ({"fp16_tflops_dense": 1e300}, "fp16_tflops_dense: must be at most"),
    ({"driver_total_mib": 10**300, "driver_total_source": "x"}, "driver_total_mib: must be at most"),
    ({"host_link": {"pcie_gen": 4, "pcie_lanes": 16, "nvlink_gb_s": float("inf")}}, "host_link.nvlink_gb_s"),
]
COMMANDS = [
    ["gpus"],
    ["bandwidth", "--gpu", "lab-card-48gb", "--params", "7B"],
    ["check", SPEC, "--gpu", "lab-card-48gb"],
]


@pytest.mark.parametrize(("change", "problem"), CASES, ids=[c[1].split(":")[0] + str(i) for i, c in enumerate(CASES)])
@pytest.mark.parametrize("command", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_a_figure_no_card_could_have_is_one_error_line(
    tmp_path: Path, change: dict[str, Any], problem: str, command: list[str]
) -> None:
    catalog = tmp_path / "cards.yaml"
    catalog.write_text(yaml.safe_dump([lab_card(**change)]), encoding="utf-8")
    result = runner.invoke(app, [*command, "--gpus-file", str(catalog)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {catalog}: entry lab-card-48gb: "), lines
    assert problem in lines[0]
