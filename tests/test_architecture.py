"""docs/architecture.md is true: every package its tree names exists and every module of it is named, and
its recipes work as written (a card from a user's catalog; a quantization method added as one layout and
one registry row)."""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vramcalc.choices import QuantMethod
from vramcalc.cli import app
from vramcalc.families import estimate
from vramcalc.llm.quantization import QuantLayout
from vramcalc.spec.llm import QuantizationSpec
from vramcalc.spec.load import parse_spec
from vramcalc.stacks import layouts
from vramcalc.units import ceil_div

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "vramcalc"
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def _tree() -> dict[str, str]:
    """The tree block: each room (a package ``spec/`` or a line of top-level modules) and its text."""
    block = DOC.split("## The tree", 1)[1].split("```", 2)[1]
    rooms: dict[str, str] = {}
    for line in block.splitlines()[2:]:  # after the fence's language line and "vramcalc/"
        stripped = line.strip()
        if not stripped:
            continue
        first = stripped.split()[0]
        rooms[first] = stripped
    return rooms


def test_every_package_named_exists_and_every_module_is_named() -> None:
    rooms = _tree()
    packages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    assert sorted(name.rstrip("/") for name in rooms if name.endswith("/")) == packages
    for package in packages:
        text = rooms[f"{package}/"]
        named = set(re.findall(r"\b([a-z_0-9]+)\.py\b", text))
        modules = {p.stem for p in (PACKAGE / package).glob("*.py")} - {"__init__"}
        assert modules <= named, f"{package}/: modules not named in docs/architecture.md: {sorted(modules - named)}"
        assert named - {"__init__"} <= modules, f"{package}/: named but missing: {sorted(named - modules)}"
    top = {p.stem for p in PACKAGE.glob("*.py")}
    named_top = {
        m
        for line in rooms.values()
        if not line.split()[0].endswith("/")
        for m in re.findall(r"\b([a-z_0-9]+)\.py\b", line.split("  ")[0])
    }
    assert named_top == top


#: The public surface: the package's own names, the results' models and the command line.
PUBLIC_PACKAGES = {"results", "cli"}


def test_every_package_outside_the_public_surface_says_it_is_internal() -> None:
    # a reader of any other package learns from its first lines that it may change between releases
    import importlib

    for path in sorted(PACKAGE.iterdir()):
        if not (path / "__init__.py").is_file() or path.name in PUBLIC_PACKAGES:
            continue
        doc = importlib.import_module(f"vramcalc.{path.name}").__doc__ or ""
        assert "Internal: no stability promise" in doc, path.name


def test_the_public_names_are_the_api_and_the_types_it_returns() -> None:
    import vramcalc
    import vramcalc.api

    for name in vramcalc.__all__:
        if name == "__version__":
            continue
        value = getattr(vramcalc, name)
        from_api = getattr(vramcalc.api, name, None) is value
        returned = value.__module__.startswith("vramcalc.results") or name in {"Spec", "Estimate", "GPU"}
        assert from_api or returned, name


LAB_CARD = """\
- id: lab-card
  name: Lab Card 48GB
  vendor: nvidia
  variant: PCIe
  segment: workstation
  memory_type: GDDR6
  capacity: 48
  capacity_unit: GB
  capacity_is_binary: true
  bus_width_bits: 384
  data_rate_gbps: 20.0
  bandwidth_gb_s: 960
  host_link: {pcie_gen: 4, pcie_lanes: 16, nvlink_gb_s: null}
  source: "https://example.com/lab-card-datasheet"
"""


def test_recipe_add_a_card(tmp_path: Path) -> None:
    # The recipe's entry, as a user's catalog: 20 Gbps x 384 bits / 8 = 960 GB/s; 48 GB of binary DRAM is
    # 48 x 2^30 = 51,539,607,552 bytes usable (no driver total given)
    cards = tmp_path / "my-gpus.yaml"
    cards.write_text(LAB_CARD, encoding="utf-8")
    listed = CliRunner().invoke(app, ["gpus", "--gpus-file", str(cards), "--json"])
    assert listed.exit_code == 0, listed.output
    (entry,) = [e for e in json.loads(listed.stdout) if e["id"] == "lab-card"]
    assert entry["bandwidth_bytes_per_s"] == 960 * 10**9
    spec = ROOT / "configs" / "gpt2.yaml"
    checked = CliRunner().invoke(app, ["check", str(spec), "--gpus-file", str(cards), "--gpu", "lab-card", "--json"])
    assert checked.exit_code == 0, checked.output
    (row,) = json.loads(checked.stdout)
    assert row["gpu"] == "lab-card" and row["usable_bytes"] == 48 * 2**30 and row["fits"]


class Mxfp4Layout(QuantLayout):
    """The recipe's layout: 4-bit values in blocks of 32 with one 8-bit shared exponent each."""

    def matrix_bytes(self, q: QuantizationSpec, out: int, inp: int) -> int:
        return ceil_div(out * inp, 2) + ceil_div(out * inp, 32)

    def describe(self, q: QuantizationSpec) -> str:
        return "mxfp4: 4-bit values, an 8-bit exponent per 32"


def test_recipe_add_a_quantization_method(monkeypatch: pytest.MonkeyPatch) -> None:
    # The layout in a module of its own and one row naming it (fp8's row stands in for the new choice): the
    # weights follow it with nothing else changed. Tiny decoder: 2 layers, hidden 64, 4 heads, ffn 128,
    # vocabulary 1,000, SwiGLU, untied head. Quantized per layer: q, k, v, o (64 x 64: 4,096 weights,
    # 2,048 + 128 = 2,176 B each) and gate, up, down (8,192 weights, 4,096 + 256 = 4,352 B each):
    # 4 x 2,176 + 3 x 4,352 = 21,760 B; two layers 43,520 B for 81,920 weights. Kept at bf16: the embedding
    # and the head (64,000 each) and the norms (2 x 2 x 64 + 64 = 320): 128,320 x 2 = 256,640 B.
    module = types.ModuleType("mxfp4_stack")
    module.MXFP4 = Mxfp4Layout()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mxfp4_stack", module)
    monkeypatch.setitem(layouts.QUANT_LAYOUTS, QuantMethod.fp8, ("mxfp4_stack", "MXFP4"))
    model = {
        "architecture": "decoder",
        "layers": 2,
        "hidden_size": 64,
        "heads": 4,
        "ffn_size": 128,
        "vocab_size": 1000,
        "mlp": "swiglu",
        "tie_embeddings": False,
    }
    workload = {"mode": "inference", "batch_size": 1, "seq_len": 16, "precision": "bf16", "quantization": "fp8"}
    result = estimate(parse_spec({"name": "mx", "model": model, "workload": workload}))
    assert result.components["parameters"] == 43_520 + 256_640
    assert any(note.startswith("quantization mxfp4:") for note in result.assumptions)
