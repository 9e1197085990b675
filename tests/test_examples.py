"""The bundled examples: configs/ ships in the wheel as `vramcalc.examples`, `vramcalc examples` lists
and prints them, and a SPEC argument that names no file here falls back to the example of that name.

Building a wheel is slow, so the packaging is checked on pyproject.toml itself: every configs/*.yaml
is package data of `vramcalc.examples`, which maps to configs/, and every sub-package is listed.
"""

from __future__ import annotations

import fnmatch
import importlib.resources
import json
import tomllib
from pathlib import Path

import pytest
from spec_texts import TINY_SPEC
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.spec.load import bundled_examples, example_description, load_spec_arg

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
NOTE = "note: bert-base.yaml is not a file here; using the bundled example bert-base.yaml\n"

runner = CliRunner()


# --- packaging -------------------------------------------------------------------------------------


def test_pyproject_ships_every_config_as_package_data() -> None:
    assert SETUPTOOLS["package-dir"]["vramcalc.examples"] == "configs"
    patterns = SETUPTOOLS["package-data"]["vramcalc.examples"]
    assert CONFIGS, "configs/ has no examples"
    for path in CONFIGS:
        assert any(fnmatch.fnmatch(path.name, pattern) for pattern in patterns), path.name


def test_pyproject_lists_every_sub_package() -> None:
    # An explicit list (a package search cannot find vramcalc.examples, which lives in configs/):
    # a new sub-package missing from it would be missing from the wheel.
    found = {"vramcalc"} | {"vramcalc." + init.parent.name for init in (ROOT / "vramcalc").glob("*/__init__.py")}
    assert set(SETUPTOOLS["packages"]) == found | {"vramcalc.examples"}


def test_license_is_the_apache_2_text_and_is_packaged() -> None:
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert PYPROJECT["project"]["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    # The official text (https://www.apache.org/licenses/LICENSE-2.0.txt): its title, its 9 sections
    # and the appendix on applying it.
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "9. Accepting Warranty or Additional Liability." in text
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX: How to apply the Apache License" in text


def test_examples_found_are_the_configs() -> None:
    found = bundled_examples()
    assert list(found) == [path.name for path in CONFIGS]
    for path in CONFIGS:
        assert found[path.name].read_text(encoding="utf-8") == path.read_text(encoding="utf-8")


def test_installed_examples_package_holds_every_config() -> None:
    # A wheel install has the package; an editable install or a source checkout on PYTHONPATH reads
    # configs/ beside the package instead (setuptools' editable finder cannot import a package
    # mapped outside vramcalc/ that has no __init__.py).
    try:
        folder = importlib.resources.files("vramcalc.examples")
    except ModuleNotFoundError:
        pytest.skip("vramcalc.examples is not importable here (editable install or source checkout)")
    for path in CONFIGS:
        assert folder.joinpath(path.name).read_text(encoding="utf-8") == path.read_text(encoding="utf-8")


# --- the fallback ----------------------------------------------------------------------------------


@pytest.fixture
def empty_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _json(*args: str):
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), result.stderr


def test_estimate_uses_the_bundled_example_with_a_note(empty_dir: Path) -> None:
    expected, _ = _json("estimate", str(ROOT / "configs" / "bert-base.yaml"))
    doc, stderr = _json("estimate", "bert-base.yaml")
    assert stderr == NOTE
    assert doc == expected  # the same spec, so the same estimate
    doc, stderr = _json("estimate", "bert-base")  # the name without its suffix
    assert stderr == "note: bert-base is not a file here; using the bundled example bert-base.yaml\n"
    assert doc == expected


def test_a_file_that_exists_wins(empty_dir: Path) -> None:
    (empty_dir / "bert-base.yaml").write_text(TINY_SPEC, encoding="utf-8")
    doc, stderr = _json("estimate", "bert-base.yaml")
    assert doc["name"] == "tiny" and stderr == ""


def test_a_path_with_a_directory_is_never_redirected(empty_dir: Path) -> None:
    result = runner.invoke(app, ["estimate", "sub/bert-base.yaml"])
    assert result.exit_code == 2
    assert result.stderr == "error: sub/bert-base.yaml: no such file\n"
    _, note = load_spec_arg(ROOT / "configs" / "bert-base.yaml")
    assert note is None


def test_a_close_name_is_suggested(empty_dir: Path) -> None:
    result = runner.invoke(app, ["estimate", "bert-bse.yaml"])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: bert-bse.yaml: no such file; bundled examples with a close name: bert-base.yaml")
    result = runner.invoke(app, ["estimate", "my-model.yaml"])  # close to no example: the error alone
    assert result.exit_code == 2 and result.stderr == "error: my-model.yaml: no such file\n"


@pytest.mark.parametrize(
    "args",
    [
        ["fit", "bert-base.yaml"],
        ["max-batch", "bert-base.yaml", "--gpu", "h100-sxm"],
        ["max-seq", "bert-base.yaml", "--gpu", "h100-sxm"],
        ["sweep", "bert-base.yaml", "--batch-size", "1,2"],
        ["plan", "bert-base.yaml", "--gpu", "h100-sxm"],
        ["check", "bert-base.yaml", "--gpu", "h100-sxm"],
        ["estimate", "bert-base.yaml", "--timeline"],
        ["report", "bert-base.yaml", "--output", "report.html"],
    ],
    ids=lambda args: args[0] + ("-timeline" if "--timeline" in args else ""),
)
def test_every_spec_command_falls_back(empty_dir: Path, args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code in (0, 1), result.output  # 1: plan or a limit found nothing that fits
    assert NOTE in result.stderr
    assert "error" not in result.stderr


def test_bandwidth_notes_the_bundled_example(empty_dir: Path) -> None:
    """On stderr, as every command that reads a spec says it (the spec is read by the one loader)."""
    doc, stderr = _json("bandwidth", "bert-base.yaml", "--gpu", "h100-sxm")
    assert stderr == NOTE and NOTE.removeprefix("note: ").rstrip() not in doc["notes"]


def test_check_notes_the_bundled_example_and_reports_the_name_given(empty_dir: Path) -> None:
    result = runner.invoke(app, ["check", "bert-base.yaml", "--gpu", "h100-sxm", "--json"])
    assert result.exit_code == 0, result.output
    assert result.stderr == NOTE
    assert [row["spec"] for row in json.loads(result.stdout)] == ["bert-base.yaml"]


# --- vramcalc examples -----------------------------------------------------------------------------


def test_examples_lists_each_with_a_description() -> None:
    result = runner.invoke(app, ["examples"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == [path.name for path in CONFIGS]
    # configs/bert-base.yaml's first comment line, whole: it is one sentence.
    bert = "The design notes' worked example: BERT-base, pure fp16, batch 32, sequence 512, Adam."
    assert next(line for line in lines if line.startswith("bert-base.yaml ")).endswith("  " + bert)


def test_examples_prints_one_to_start_a_spec(empty_dir: Path) -> None:
    result = runner.invoke(app, ["examples", "bert-base"])
    assert result.exit_code == 0, result.output
    assert result.stdout == (ROOT / "configs" / "bert-base.yaml").read_text(encoding="utf-8")
    (empty_dir / "my.yaml").write_text(result.stdout, encoding="utf-8")
    doc, stderr = _json("estimate", "my.yaml")
    assert doc["name"] == "bert-base" and stderr == ""


def test_examples_unknown_name() -> None:
    result = runner.invoke(app, ["examples", "bert-bse"])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: bert-bse: no bundled example of that name; bundled examples with a close name:")
    assert "bert-base.yaml" in line
    result = runner.invoke(app, ["examples", "zzz"])
    assert result.exit_code == 2
    assert result.stderr == "error: zzz: no bundled example of that name; 'vramcalc examples' lists them\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("# One. Two.\nname: x\n", "One."),
        # "et al." and a period inside parentheses do not end the sentence
        ("# A (Smith et al. 2020; v1.0) model.\n# More.\n", "A (Smith et al. 2020; v1.0) model."),
        ("# Split over\n# two lines. Then more.\n", "Split over two lines."),
        ("name: no-comment\nmodel: {}\n", "no-comment"),  # no comment: the spec's name
        ("model: {}\n", ""),
    ],
)
def test_example_description(text: str, expected: str) -> None:
    assert example_description(text) == expected


def test_example_description_is_bounded() -> None:
    # 30 words of 4 letters: 149 characters; cut at a word boundary under 100, "..." added
    description = example_description("# " + " ".join(["word"] * 30) + "\n")
    assert len(description) <= 100 and description.endswith("word...")
