"""Docs are tests: every `console` block of the README and of docs/*.md is what the command prints now,
docs/cli.md is the app's own help, every command is documented there, every spec key is in docs/spec.md,
the Python examples print what their comments say, and every relative link points to a file."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
from pathlib import Path
from types import ModuleType

import pytest
import typer
from doc_blocks import printed_by, python_example
from typer.testing import CliRunner

from vramcalc.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
CLI_MD = ROOT / "docs" / "cli.md"
BLOCK = re.compile(r"```console\n\$ vramcalc (?P<args>[^\n]+)\n(?P<body>.*?)```", re.S)
LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")


def _blocks(docs: list[Path] = DOCS) -> list[tuple[str, str]]:
    return [(m["args"], m["body"]) for doc in docs for m in BLOCK.finditer(doc.read_text(encoding="utf-8"))]


def test_docs_have_console_examples() -> None:
    # The README shows three worked examples (a training fit, a serving capacity, the CI gate); the pages
    # under docs/ carry the rest. Both counts can only drop if examples are deleted or stop being tested.
    assert len(_blocks([README])) >= 3
    assert len(_blocks(DOCS[1:])) >= 20


def test_readme_is_short_and_the_rest_is_in_docs() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 250
    assert len(DOCS) - 1 >= 5


@pytest.mark.parametrize(("args", "body"), _blocks(), ids=[a for a, _ in _blocks()])
def test_readme_shows_real_output(args: str, body: str) -> None:
    # The blocks were generated at a 120-column terminal, from the repository root.
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        result = runner.invoke(app, shlex.split(args), env={"COLUMNS": "120", "TERMINAL_WIDTH": "120"})
    finally:
        os.chdir(cwd)
    expected, _, code = body.partition("$ echo $?\n")
    assert result.exit_code == (int(code) if code else 0), result.output
    lines = [line.rstrip() for line in (result.stderr + result.stdout).splitlines()]
    assert "\n".join(lines).rstrip() == expected.rstrip()


def _commands() -> list[str]:
    group = typer.main.get_command(app)
    return sorted(group.commands)  # type: ignore[attr-defined]


def _gen_cli() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_cli", ROOT / "docs" / "gen_cli.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_generated_from_the_app() -> None:
    expected = _gen_cli().render()
    assert CLI_MD.read_text(encoding="utf-8") == expected, (
        "docs/cli.md differs from the app's --help: regenerate it with `python docs/gen_cli.py`"
    )


@pytest.mark.parametrize("name", _commands())
def test_every_command_documented(name: str) -> None:
    assert f"## vramcalc {name}\n" in CLI_MD.read_text(encoding="utf-8"), "run `python docs/gen_cli.py`"
    result = runner.invoke(app, [name, "--help"])
    assert result.exit_code == 0, result.output
    group = typer.main.get_command(app)
    assert group.commands[name].help  # type: ignore[attr-defined]
    assert group.commands[name].help.strip()  # type: ignore[attr-defined]


def _schema_keys() -> set[str]:
    """Every property name of the spec's JSON Schema (top-level sections and the keys inside them)."""
    result = runner.invoke(app, ["schema"])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.stdout)
    keys = set(schema["properties"])
    for definition in schema.get("$defs", {}).values():
        keys |= set(definition.get("properties", {}))
    return keys


def test_every_spec_key_is_in_the_spec_reference() -> None:
    text = (ROOT / "docs" / "spec.md").read_text(encoding="utf-8")
    # in code (`kv_heads`, `{method: nf4, double_quant: true}`) or as a key of the YAML examples
    missing = sorted(
        key
        for key in _schema_keys()
        if not re.search(rf"`[^`\n]*\b{re.escape(key)}\b[^`\n]*`|^\s*#?\s*{re.escape(key)}:", text, re.M)
    )
    assert not missing, f"docs/spec.md does not mention these spec keys: {missing}"


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation other than '-' and '_' dropped, spaces
    to '-'."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(doc: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


def _links() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)
        found += [(str(doc.relative_to(ROOT)), m["target"]) for m in LINK.finditer(text)]
    return found


@pytest.mark.parametrize(("doc", "target"), _links(), ids=[f"{d}->{t}" for d, t in _links()])
def test_relative_links_point_to_files(doc: str, target: str) -> None:
    if re.match(r"[a-z]+:", target):
        return  # an absolute URL (https:, mailto:)
    path, _, anchor = target.partition("#")
    resolved = (ROOT / doc).parent / path if path else ROOT / doc
    assert resolved.exists(), f"{doc}: link to {target}: no such file"
    if anchor and resolved.suffix == ".md":
        assert anchor in _anchors(resolved), f"{doc}: link to {target}: no such heading"


def test_api_page_example_prints_what_its_comments_say() -> None:
    code, expected = python_example(ROOT / "docs" / "api.md", "# Python API")
    assert len(expected) >= 4
    assert printed_by(code, "docs/api.md", ROOT) == expected


def test_readme_set_up_commands_match_ci() -> None:
    readme = README.read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    test_command = (
        'python3 -m venv .venv && . .venv/bin/activate && python -m pip install -q -e ".[test]" '
        "&& ruff check . && ruff format --check . && mypy && python -m pytest"
    )
    assert test_command in readme and test_command in ci  # the quality gates run in CI too
    assert "vramcalc estimate configs/bert-base.yaml" in readme
    assert "not on PyPI yet" in readme
