"""`--gpu 48GiB` (a capacity-only card) and `--gpus-file` / VRAMCALC_GPUS (a user catalog) on every command
that takes a card; name-resolution notes on stderr."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from gpu_entries import lab_card
from spec_texts import TINY_DECODER, TINY_SPEC
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.hardware.catalog import load_catalog
from vramcalc.hardware.lookup import active_catalog

runner = CliRunner()

#: 48 GiB = 48 x 2^30 bytes (hand calculation).
GIB_48 = 48 * 2**30
NOTE_48GIB = (
    "note: --gpu 48GiB: a custom card with 48 GiB (51,539,607,552 bytes) usable, capacity only; "
    "no bandwidth or TFLOPS figures"
)


@pytest.fixture
def spec(tmp_path: Path) -> str:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY_SPEC, encoding="utf-8")
    return str(path)


def measured(tmp_path: Path, hopper_or_newer: bool) -> str:
    """A "measured" run equal to the estimate on such a card (compare then exits 0: within tolerance). A
    custom card takes the 32 MiB cuBLAS workspace of Hopper and newer; the made-up lab card does not."""
    from vramcalc.families import estimate
    from vramcalc.spec.load import parse_spec

    peak = estimate(parse_spec(yaml.safe_load(TINY_SPEC), "tiny"), hopper_or_newer=hopper_or_newer)
    path = tmp_path / f"stats-{hopper_or_newer}.json"
    allocated = peak.peak_allocated_bytes
    path.write_text(json.dumps({"allocated_bytes.all.peak": allocated, "reserved_bytes.all.peak": 2 * allocated}))
    return str(path)


@pytest.fixture
def stats(tmp_path: Path) -> str:
    return measured(tmp_path, True)


@pytest.fixture
def lab_stats(tmp_path: Path) -> str:
    return measured(tmp_path, False)


@pytest.fixture
def gpus_file(tmp_path: Path) -> str:
    path = tmp_path / "my-gpus.yaml"
    path.write_text(yaml.safe_dump([lab_card()]), encoding="utf-8")
    return str(path)


def commands(spec: str, stats: str, gpu: str) -> dict[str, list[str]]:
    """Every command that takes --gpu, with arguments that make it succeed on a 48 GiB card."""
    return {
        "estimate": ["estimate", spec, "--gpu", gpu],
        "check": ["check", spec, "--gpu", gpu],
        "fit": ["fit", spec, "--gpu", gpu],
        "max-batch": ["max-batch", spec, "--gpu", gpu],
        "max-seq": ["max-seq", spec, "--gpu", gpu],
        "sweep": ["sweep", spec, "--batch-size", "1,2", "--gpu", gpu],
        "plan": ["plan", spec, "--gpu", gpu, "--max-gpus", "2"],
        "report": ["report", spec, "--gpu", gpu],
        "compare": ["compare", spec, "--measured", stats, "--gpu", gpu],
        "bandwidth": ["bandwidth", "--gpu", gpu, "--params", "7B"],
    }


COMMANDS = ["estimate", "check", "fit", "max-batch", "max-seq", "sweep", "plan", "report", "compare", "bandwidth"]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_capacity_works_wherever_gpu_does(command: str, spec: str, stats: str) -> None:
    result = runner.invoke(app, commands(spec, stats, "48GiB")[command])
    assert result.exit_code == 0, result.output
    assert NOTE_48GIB in result.stderr.splitlines()
    assert "Traceback" not in result.output


@pytest.mark.parametrize("command", COMMANDS)
def test_gpus_file_works_wherever_gpu_does(command: str, spec: str, lab_stats: str, gpus_file: str) -> None:
    result = runner.invoke(app, [*commands(spec, lab_stats, "labcard")[command], "--gpus-file", gpus_file])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""  # an exact alias: no note
    assert active_catalog() is load_catalog()  # the user catalog ends with the command


@pytest.mark.parametrize("command", COMMANDS)
def test_vramcalc_gpus_names_the_user_catalog(command: str, spec: str, lab_stats: str, gpus_file: str) -> None:
    result = runner.invoke(app, commands(spec, lab_stats, "labcard")[command], env={"VRAMCALC_GPUS": gpus_file})
    assert result.exit_code == 0, result.output


def test_json_names_the_custom_card(spec: str) -> None:
    result = runner.invoke(app, ["check", spec, "--gpu", "48GiB", "--json"])
    row = json.loads(result.stdout)["results"][0] if "results" in result.stdout else json.loads(result.stdout)
    text = json.dumps(row)
    assert '"custom-48gib"' in text and '"custom 48 GiB card"' in text
    doc = json.loads(runner.invoke(app, ["estimate", spec, "--gpu", "48GiB", "--json"]).stdout)
    assert doc["gpu"]["id"] == "custom-48gib"
    assert doc["gpu"]["usable_bytes"] == GIB_48


def test_decimal_gigabytes_are_labelled(spec: str) -> None:
    result = runner.invoke(app, ["estimate", spec, "--gpu", "48GB", "--json"])
    assert result.exit_code == 0
    assert "48 GB (48,000,000,000 bytes; 44.70 GiB)" in result.stderr  # 48e9 / 2^30 = 44.703
    assert json.loads(result.stdout)["gpu"]["usable_bytes"] == 48 * 10**9


def test_capacity_in_the_spec_target(tmp_path: Path) -> None:
    path = tmp_path / "target.yaml"
    path.write_text(TINY_SPEC + "target:\n  gpu: 24GiB\n", encoding="utf-8")
    result = runner.invoke(app, ["check", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert f"note: {path}: target.gpu 24GiB: a custom card with 24 GiB (25,769,803,776 bytes)" in result.stderr
    assert "custom-24gib" in result.stdout


def test_bandwidth_of_a_capacity_only_card_says_what_it_cannot_compute() -> None:
    result = runner.invoke(app, ["bandwidth", "--gpu", "48GiB", "--params", "7B", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["gpu"] == "custom-48gib" and doc["capacity_bytes"] == GIB_48
    assert doc["weights_bytes"] == 14 * 10**9  # 7e9 parameters x 2 bytes (fp16)
    assert doc["bandwidth_bytes_per_s"] is None and doc["weight_stream_s"] is None
    assert any("not computed for a capacity-only card" in note for note in doc["notes"])
    text = runner.invoke(app, ["bandwidth", "--gpu", "48GiB"])
    assert text.exit_code == 0 and "capacity only" in text.stdout and "not computed" in text.stdout


def test_bandwidth_of_a_capacity_with_its_bus() -> None:
    # 20 Gbps x 384 bit / 8 = 960 GB/s
    result = runner.invoke(
        app, ["bandwidth", "--gpu", "48GiB", "--bus-width", "384", "--data-rate", "20Gbps", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["bandwidth_bytes_per_s"] == 960 * 10**9


@pytest.mark.parametrize(
    "bus",
    [
        ["--bus-width", "256", "--data-rate", "20Gbps"],
        ["--bus-width", "256", "--memory-type", "GDDR6", "--memory-clock", "1750MHz"],
    ],
    ids=["data-rate", "memory-clock"],
)
def test_a_capacity_with_its_bus_keeps_the_capacity(bus: list[str]) -> None:
    # The card is 32 GB (32 x 10^9 bytes) with the bus the flags describe: both are in the answer.
    result = runner.invoke(app, ["bandwidth", "--gpu", "32GB", *bus, "--params", "7B", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert (doc["gpu"], doc["name"]) == ("custom-32gb", "custom 32 GB card")
    assert (doc["capacity_bytes"], doc["capacity_vendor"]) == (32 * 10**9, "32 GB")
    assert doc["bus_width_bits"] == 256
    assert "32 GB (32,000,000,000 bytes; 29.80 GiB) usable" in result.stderr
    text = runner.invoke(app, ["bandwidth", "--gpu", "32GB", *bus])
    assert text.exit_code == 0, text.output
    assert "custom 32 GB card (custom-32gb)" in text.stdout
    assert "32 GB (32,000,000,000 bytes; 29.80 GiB) usable" in text.stdout


def test_weights_past_a_capacity_with_its_bus_are_noted() -> None:
    # 7B parameters x 2 bytes (fp16) = 14 GB > 8 GB
    args = ["bandwidth", "--gpu", "8GB", "--bus-width", "256", "--data-rate", "20Gbps", "--params", "7B", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["weights_bytes"] == 14 * 10**9 and doc["capacity_bytes"] == 8 * 10**9
    assert any(note.startswith("the weights exceed the card's 8 GB") for note in doc["notes"])


def test_gpus_lists_the_user_cards(gpus_file: str) -> None:
    result = runner.invoke(app, ["gpus", "--gpus-file", gpus_file, "--json"])
    assert result.exit_code == 0, result.output
    ids = [row["id"] for row in json.loads(result.stdout)]
    assert ids[-1] == "lab-card-48gb" and len(ids) == len(load_catalog().gpus) + 1


def test_replacing_a_bundled_card_is_noted(tmp_path: Path, spec: str) -> None:
    path = tmp_path / "t4.yaml"
    path.write_text(yaml.safe_dump([lab_card(id="t4", aliases=[], name="T4 of my lab")]), encoding="utf-8")
    result = runner.invoke(app, ["estimate", spec, "--gpu", "t4", "--gpus-file", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert f"note: {path}: entry t4 replaces the bundled entry of that id" in result.stderr
    assert json.loads(result.stdout)["gpu"]["name"] == "T4 of my lab"


BAD_CATALOGS = {
    "wrong-field": (yaml.safe_dump([lab_card(memory_type="GDDR9")]), "entry lab-card-48gb: memory_type"),
    "unknown-field": (yaml.safe_dump([lab_card(colour="red")]), "entry lab-card-48gb: colour"),
    "not-a-list": ("id: lab\n", "expected a list of GPU entries"),
    "bad-yaml": ("- [\n", "invalid YAML"),
}


@pytest.mark.parametrize("case", [*BAD_CATALOGS, "missing"])
@pytest.mark.parametrize("command", ["estimate", "check", "fit", "plan", "bandwidth", "gpus"])
def test_bad_user_catalog_is_one_error_naming_the_file(tmp_path: Path, spec: str, case: str, command: str) -> None:
    path = tmp_path / f"{case}.yaml"
    if case != "missing":
        text, _ = BAD_CATALOGS[case]
        path.write_text(text, encoding="utf-8")
    args = {"gpus": ["gpus"], "bandwidth": ["bandwidth", "--gpu", "t4"]}.get(command, [command, spec, "--gpu", "t4"])
    result = runner.invoke(app, [*args, "--gpus-file", str(path)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: "), result.stderr
    expected = "no such file" if case == "missing" else BAD_CATALOGS[case][1]
    assert expected in lines[0]
    assert result.stdout == ""


def test_bad_vramcalc_gpus_is_one_error(tmp_path: Path, spec: str) -> None:
    result = runner.invoke(app, ["estimate", spec, "--gpu", "t4"], env={"VRAMCALC_GPUS": str(tmp_path / "nope.yaml")})
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {tmp_path / 'nope.yaml'}: no such file"


def test_name_notes_on_stderr(spec: str) -> None:
    result = runner.invoke(app, ["estimate", spec, "--gpu", "a100-80", "--json"])
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("note: 'a100-80' matches several cards; using a100-80gb-sxm")
    assert json.loads(result.stdout)["gpu"]["id"] == "a100-80gb-sxm"


def test_unknown_and_ambiguous_names_exit_2_in_one_line(spec: str) -> None:
    for name, text in [("mi3", "matches several cards: mi300x, "), ("m4", "did you mean m4-max")]:
        result = runner.invoke(app, ["estimate", spec, "--gpu", name])
        assert result.exit_code == 2
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and text in lines[0]


def test_help_documents_the_forms() -> None:
    for command in COMMANDS + ["gpus"]:
        result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        assert "--gpus-file" in result.stdout and "VRAMCALC_GPUS" in result.stdout, command
    assert "48GiB" in runner.invoke(app, ["estimate", "--help"], env={"COLUMNS": "200"}).stdout


def test_tiny_decoder_bandwidth_from_spec_on_a_capacity(tmp_path: Path) -> None:
    path = tmp_path / "dec.yaml"
    path.write_text(TINY_DECODER, encoding="utf-8")
    result = runner.invoke(app, ["bandwidth", str(path), "--gpu", "1GiB", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["weights_bytes"] > 0
