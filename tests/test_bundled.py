"""vramcalc.bundled: the JSON copies of the bundled catalogs are current, hold exactly what PyYAML's safe
loader reads from the YAML files, are read instead of them, and are never read once the YAML changed."""

from __future__ import annotations

import datetime
import tomllib
from pathlib import Path

import pytest
import yaml

from vramcalc import bundled
from vramcalc.bundled import SOURCES, copy_name, copy_text, folder_of, parse_source, read_bundled

ROOT = Path(__file__).resolve().parent.parent
REGENERATE = "the JSON copy is out of date: run 'python -m vramcalc.bundled' and commit the result"


@pytest.mark.parametrize(("where", "name"), SOURCES)
def test_each_copy_is_current_and_equals_what_the_safe_loader_reads(where: str, name: str) -> None:
    folder = folder_of(where)
    text = (folder / name).read_bytes()
    assert (folder / copy_name(name)).read_text(encoding="utf-8") == copy_text(name, text), REGENERATE
    assert read_bundled(folder, name) == yaml.load(text.decode("utf-8"), Loader=yaml.SafeLoader)  # noqa: S506


@pytest.mark.parametrize(("where", "name"), SOURCES)
def test_libyaml_reads_each_yaml_file_as_the_pure_python_loader_does(where: str, name: str) -> None:
    """What is read when a copy is out of date: libyaml's parser (where PyYAML has it) reads the same."""
    text = (folder_of(where) / name).read_bytes()
    assert parse_source(text) == yaml.load(text.decode("utf-8"), Loader=yaml.SafeLoader)  # noqa: S506


@pytest.mark.parametrize(("where", "name"), SOURCES)
def test_a_current_copy_is_read_without_parsing_yaml(monkeypatch: pytest.MonkeyPatch, where: str, name: str) -> None:
    def no_yaml(text: bytes) -> None:
        raise AssertionError("the YAML file was parsed")

    monkeypatch.setattr(bundled, "parse_source", no_yaml)
    assert isinstance(read_bundled(folder_of(where), name), list)


def write_pair(folder: Path, yaml_text: str, copied_from: str | None) -> None:
    """A YAML file ``data.yaml`` and, unless ``copied_from`` is None, a copy made from that text."""
    (folder / "data.yaml").write_text(yaml_text, encoding="utf-8")
    if copied_from is not None:
        (folder / "data.json").write_text(copy_text("data.yaml", copied_from.encode()), encoding="utf-8")


def test_a_copy_of_another_text_is_ignored(tmp_path: Path) -> None:
    write_pair(tmp_path, "- {id: a, size: 2}\n", copied_from="- {id: a, size: 1}\n")
    assert read_bundled(tmp_path, "data.yaml") == [{"id": "a", "size": 2}]


def test_a_copy_of_the_same_text_is_read(tmp_path: Path) -> None:
    write_pair(tmp_path, "- {id: a, size: 1}\n", copied_from="- {id: a, size: 1}\n")
    (tmp_path / "data.json").write_text(
        (tmp_path / "data.json").read_text(encoding="utf-8").replace('"size": 1', '"size": 7'), encoding="utf-8"
    )  # the data is taken from the copy, not parsed again
    assert read_bundled(tmp_path, "data.yaml") == [{"id": "a", "size": 7}]


@pytest.mark.parametrize("copy", [None, "", "{not json", "[1, 2]", '{"sha256": "x"}'])
def test_a_missing_or_unreadable_copy_falls_back_to_the_yaml(tmp_path: Path, copy: str | None) -> None:
    write_pair(tmp_path, "- {id: a}\n", copied_from=None)
    if copy is not None:
        (tmp_path / "data.json").write_text(copy, encoding="utf-8")
    assert read_bundled(tmp_path, "data.yaml") == [{"id": "a"}]


def test_without_libyaml_the_yaml_is_read_by_the_pure_python_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    assert parse_source(b"- {id: a, rate: 1.0e-05}\n") == [{"id": "a", "rate": 1e-05}]


def test_a_copy_refuses_values_json_cannot_carry() -> None:
    assert yaml.safe_load("- 2024-01-01\n") == [datetime.date(2024, 1, 1)]
    with pytest.raises(ValueError, match="JSON cannot carry"):
        copy_text("data.yaml", b"- 2024-01-01\n")


def test_the_copies_are_package_data() -> None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]
    for where, name in SOURCES:
        assert f"{where}/{name}" in data["vramcalc"] and f"{where}/{copy_name(name)}" in data["vramcalc"]


@pytest.mark.parametrize("text", ["- {id: a, size: 1}\n- {id: b}\n", "a: {b: [1, 2.5, null, true]}\n", "[]\n", "7\n"])
def test_a_copy_holds_any_document_json_can_carry(tmp_path: Path, text: str) -> None:
    write_pair(tmp_path, text, copied_from=text)
    assert (tmp_path / "data.json").read_text(encoding="utf-8").endswith("\n")
    assert read_bundled(tmp_path, "data.yaml") == yaml.safe_load(text)
