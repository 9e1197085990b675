"""The bundled examples: configs/ ships in the wheel as `vramcalc.examples`, `vramcalc examples` lists
and prints them, and a SPEC argument that names no file here falls back to the example of that name
(for every command but check, the CI gate, where a file that is not there is bad input).

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
CONFIGS_BERT = ROOT / "configs" / "bert-base.yaml"
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


@pytest.mark.parametrize("name", ["bert-base.yaml", "bert-base", "./bert-base.yaml"])
def test_check_never_falls_back_to_a_bundled_example(empty_dir: Path, name: str) -> None:
    # A CI gate must not pass on a file that is not there: one error line naming the path, exit 2,
    # and the way to copy the example here.
    result = runner.invoke(app, ["check", name, "--gpu", "h100-sxm", "--json"])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: {name}: no such file")
    assert "'vramcalc examples bert-base.yaml > bert-base.yaml'" in line
    assert "note:" not in result.stderr
    assert all(row["fits"] is not True for row in json.loads(result.stdout))


def test_check_of_a_missing_file_beside_one_that_fits_is_still_exit_2(empty_dir: Path) -> None:
    (empty_dir / "tiny.yaml").write_text(TINY_SPEC, encoding="utf-8")
    result = runner.invoke(app, ["check", "tiny.yaml", "gpt2.yaml", "--gpu", "h100-sxm"])
    assert result.exit_code == 2, result.output
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [
        "error: gpt2.yaml: no such file (check reads only files that exist, never the bundled example gpt2.yaml; "
        "'vramcalc examples gpt2.yaml > gpt2.yaml' copies it here)"
    ]


def test_check_of_a_missing_close_name_lists_the_examples(empty_dir: Path) -> None:
    result = runner.invoke(app, ["check", "bert-bse.yaml", "--gpu", "h100-sxm"])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: bert-bse.yaml: no such file; bundled examples with a close name: bert-base.yaml")


def test_the_copy_the_check_error_suggests_is_checked(empty_dir: Path) -> None:
    copied = runner.invoke(app, ["examples", "bert-base.yaml"])
    (empty_dir / "bert-base.yaml").write_text(copied.stdout, encoding="utf-8")
    result = runner.invoke(app, ["check", "bert-base.yaml", "--gpu", "h100-sxm", "--json"])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert [row["spec"] for row in json.loads(result.stdout)] == ["bert-base.yaml"]


@pytest.mark.parametrize(
    "args",
    [
        ["sweep", "bert-base.yaml", "--batch-size", "1"],
        ["report", "bert-base.yaml"],
        ["check", "bert-base.yaml", "--gpu", "h100-sxm"],  # no fallback, and still never over the example
    ],
    ids=lambda args: args[0],
)
def test_output_never_replaces_the_bundled_example_fallen_back_to(
    empty_dir: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    # The examples folder stands in for the installed one, so the test writes nothing to configs/.
    installed = empty_dir / "installed"
    installed.mkdir()
    example = installed / "bert-base.yaml"
    example.write_text(CONFIGS_BERT.read_text(encoding="utf-8"), encoding="utf-8")
    work = empty_dir / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr("vramcalc.spec.load._examples_dir", lambda: installed)
    before = example.read_bytes()
    for output in (str(example), "../installed/bert-base.yaml"):
        result = runner.invoke(app, [*args, "-o", output])
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith(f"error: --output: {output}: is an input of this command")
        assert example.read_bytes() == before
    result = runner.invoke(app, [*args, "-o", "out.txt"])  # elsewhere the output is written
    assert result.exit_code == (2 if args[0] == "check" else 0), result.output
    assert (work / "out.txt").stat().st_size > 0


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
