"""Python examples in the docs: the code of a block and what its comments say it prints."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path


def python_example(doc: Path, section: str) -> tuple[str, list[str]]:
    """The first python block under the heading ``section`` of ``doc``, and the lines its comments say
    it prints (``print(...)  # out`` or a ``# out`` line right after a print)."""
    text = doc.read_text(encoding="utf-8")
    body = text.split(f"{section}\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```python\n(.*?)```", body, re.S)
    assert block is not None, f"{doc.name}: no python block under {section!r}"
    lines = block.group(1).splitlines()
    expected = []
    for before, line in zip(["", *lines], lines, strict=False):
        if line.startswith("print(") and "  # " in line:
            expected.append(line.split("  # ", 1)[1])
        elif line.startswith("# ") and before.startswith("print("):
            expected.append(line[2:])
    return block.group(1), expected


def printed_by(code: str, name: str, cwd: Path) -> list[str]:
    """The lines ``code`` prints when run from ``cwd``."""
    out, before = io.StringIO(), os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, name, "exec"), {})
    finally:
        os.chdir(before)
    return out.getvalue().splitlines()
