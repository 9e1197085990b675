"""What `vramcalc check` reads: each file once, through the bounded YAML loader of vramcalc.files, and
the bundled catalogs from their JSON copies, never by parsing their YAML."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from spec_texts import TINY_SPEC

from vramcalc import bundled, files
from vramcalc.hardware.catalog import load_catalog
from vramcalc.planning.check import TargetFlags, run_check
from vramcalc.spec import presets

CATALOG_SPEC = "model: gpt2\nworkload: {batch_size: 2, seq_len: 128, precision: bf16}\n"
ACCELERATE = "compute_environment: LOCAL_MACHINE\nnum_processes: 2\n"


def clear_catalogs() -> None:
    load_catalog.cache_clear()
    presets.catalog.cache_clear()
    presets._keys.cache_clear()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Every parse of YAML text by source, every ``yaml.load`` by loader, every bundled YAML parsed;
    the catalogs are loaded afresh (and again after the test)."""
    seen: dict[str, Any] = {"sources": Counter(), "loaders": Counter(), "bundled_yaml": 0}
    parse_yaml, load = files.parse_yaml, yaml.load

    def counting_parse(text: str, source: str) -> Any:
        seen["sources"][source] += 1
        return parse_yaml(text, source)

    def counting_load(stream: Any, Loader: Any) -> Any:  # noqa: N803 - PyYAML's name
        seen["loaders"][Loader.__name__] += 1
        return load(stream, Loader=Loader)

    def counting_bundled(text: bytes) -> Any:
        seen["bundled_yaml"] += 1
        raise AssertionError("a bundled YAML file was parsed")

    monkeypatch.setattr(files, "parse_yaml", counting_parse)
    monkeypatch.setattr(yaml, "load", counting_load)
    monkeypatch.setattr(bundled, "parse_source", counting_bundled)
    clear_catalogs()
    yield seen
    clear_catalogs()


def test_each_file_is_parsed_once(tmp_path: Path, reads: dict[str, Any]) -> None:
    folder = tmp_path / "specs"
    folder.mkdir()
    for index in range(5):
        (folder / f"tiny-{index}.yaml").write_text(TINY_SPEC.replace("batch_size: 2", f"batch_size: {index + 1}"))
    (folder / "catalog-model.yaml").write_text(CATALOG_SPEC)
    (folder / "accelerate.yaml").write_text(ACCELERATE)  # skipped: not a spec
    named = tmp_path / "named.yaml"
    named.write_text(TINY_SPEC)
    report = run_check([str(folder), str(named)], TargetFlags(("h100-sxm",)))
    assert not report.errors, report.errors
    assert len(report.rows) == 7 and len(report.skipped) == 1
    expected = [*(str(path) for path in sorted(folder.iterdir())), str(named)]
    assert reads["sources"] == Counter(expected)  # every file once, whether a spec or not
    assert sum(reads["loaders"].values()) == len(expected)  # user files only, with a bounded loader
    assert set(reads["loaders"]) <= {"BoundedLoader", "FastBoundedLoader"}
    assert reads["bundled_yaml"] == 0


def test_a_file_named_twice_is_parsed_once(write_spec, reads: dict[str, Any]) -> None:
    path = str(write_spec(TINY_SPEC))
    report = run_check([path, path, str(Path(path).parent)], TargetFlags(("h100-sxm",)))
    assert len(report.rows) == 1
    assert reads["sources"] == Counter({path: 1})


def test_a_file_that_is_not_valid_yaml_is_parsed_once(write_spec, reads: dict[str, Any]) -> None:
    path = str(write_spec("model: [\n"))
    report = run_check([path], TargetFlags(("h100-sxm",)))
    assert len(report.errors) == 1 and "invalid YAML" in report.errors[0].messages[0]
    assert reads["sources"] == Counter({path: 1})
