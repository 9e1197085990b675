"""``-o`` never writes over what the command reads, never writes somewhere the user did not name, and never
hands a setuid bit to the file it writes."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest
import yaml
from gpu_entries import lab_card
from typer.testing import CliRunner

from vramcalc.cli import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "gpt2.yaml"
    shutil.copy(ROOT / "configs" / "gpt2.yaml", path)
    return path


def _catalog(tmp_path: Path) -> Path:
    path = tmp_path / "cards.yaml"
    path.write_text(yaml.safe_dump([lab_card()]), encoding="utf-8")
    return path


@pytest.mark.parametrize("command", [["check"], ["sweep", "--batch-size", "1"], ["report"]])
@pytest.mark.parametrize("how", ["flag", "env"])
def test_never_over_the_user_catalog_it_reads(tmp_path: Path, spec: Path, command: list[str], how: str) -> None:
    catalog = _catalog(tmp_path)
    before = catalog.read_bytes()
    args = [command[0], str(spec), *command[1:], "--gpu", "lab-card-48gb", "-o", str(catalog)]
    env = {"VRAMCALC_GPUS": str(catalog)} if how == "env" else {}
    result = runner.invoke(app, args + (["--gpus-file", str(catalog)] if how == "flag" else []), env=env)
    assert result.exit_code == 2, result.output
    assert "is an input of this command" in result.output and result.output.count("\n") == 1
    assert catalog.read_bytes() == before


def test_a_path_ending_in_a_slash_is_a_directory_not_a_file_name(tmp_path: Path, spec: Path) -> None:
    target = tmp_path / "newdir"
    result = runner.invoke(app, ["report", str(spec), "-o", f"{target}/"])
    assert result.exit_code == 2 and "names a directory that does not exist" in result.output
    assert not target.exists()


def test_a_dangling_symlink_is_not_followed(tmp_path: Path, spec: Path) -> None:
    link = tmp_path / "report.html"
    link.symlink_to(tmp_path / "elsewhere.html")
    result = runner.invoke(app, ["report", str(spec), "-o", str(link)])
    assert result.exit_code == 2 and "a symbolic link to a missing file" in result.output
    assert not (tmp_path / "elsewhere.html").exists()


def test_the_replaced_file_keeps_its_permissions_but_no_setuid(tmp_path: Path, spec: Path) -> None:
    target = tmp_path / "report.html"
    target.write_text("old")
    os.chmod(target, 0o4755 | stat.S_ISGID)
    result = runner.invoke(app, ["report", str(spec), "-o", str(target)])
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(target.stat().st_mode) == 0o755
    assert target.read_text() != "old"
