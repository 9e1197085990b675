"""Fuzz target ``filesystem``: what the commands are pointed at and what ``-o`` writes onto.

Each input builds a small tree (specs, deep folders, symlink loops, symlinks out of the tree and to
the machine's root, FIFOs and devices named ``*.yaml``, a folder named ``*.yaml``, hidden files) and
runs a command on folders, globs or files of it, or on the machine itself (``/``, ``/**/*.yaml``),
sometimes with ``-o`` onto one of its inputs, a symlink to one, a FIFO, a folder or ``/dev/full``.

Rules: exit 0, 1 or 2 without a traceback; the command finishes within :data:`WALK_LIMIT_S` (a walk
is bounded, a FIFO is never opened blocking); and no input is written over: the bytes of every file
in the tree are the same afterwards, but for an ``-o`` target that is not an input.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from fuzz_checks import changed, check_stderr, snapshot
from fuzz_support import (
    ROOT,
    SPECIAL_FILE_LIMIT_S,
    TINY_SPEC,
    FuzzFailure,
    Tolerated,
    check_result,
    describe,
    invoke,
    tolerating_known_issues,
    usage_error,
    workspace,
)
from hypothesis import strategies as st

#: A command on a tree of a few files takes well under a second; past this its walk is unbounded.
WALK_LIMIT_S = 5.0
ENTRIES = [
    "deep", "loop-dot", "loop-up", "link-out", "link-root", "fifo", "dev-zero", "dev-null", "broken", "dir-yaml",
    "self-loop", "hidden", "many",
]  # fmt: skip
#: What the command is given: tree-relative paths, or the machine's own root.
GIVEN = [
    "{root}", "{root}", "{root}/*.yaml", "{root}/**/*.yaml", "{root}/ok.yaml", "{root}/fifo.yaml",
    "{root}/zero.yaml", "{root}/loop/loop/loop/ok.yaml", "{root}/deep", "/dev/zero", "/dev/null", "/", "/**/*.yaml",
]  # fmt: skip
OUTPUTS = ["none", "none", "input", "input-link", "fifo", "folder", "dev-full", "new", "missing-folder"]
COMMANDS = ["check", "check", "check", "report", "sweep", "import", "estimate"]


@dataclass(frozen=True)
class TreeCase:
    entries: tuple[str, ...]
    depth: int
    command: str
    given: tuple[str, ...]
    output: str


@st.composite
def tree_cases(draw: st.DrawFn, outputs: tuple[str, ...] = tuple(OUTPUTS)) -> TreeCase:
    """A tree and a command on it; ``outputs``: the -o choices drawn from ("none": no -o)."""
    entries = tuple(sorted(draw(st.sets(st.sampled_from(ENTRIES), max_size=6))))
    writes = [o for o in outputs if o != "none"]
    command = draw(st.sampled_from(COMMANDS if "none" in outputs else ["check", "report", "sweep", "import"]))
    pool = GIVEN if command == "check" else [g for g in GIVEN if g.endswith((".yaml", "zero", "null"))]
    if command == "import":
        pool = ["{root}/config.json", "{root}/fifo.yaml", "/dev/zero"]
    # The machine's root is drawn rarely: on a build that still walks it, each such input costs the time limit.
    given = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=1 if command in ("sweep", "import") else 3))
    if any(g in ("/", "/**/*.yaml") for g in given) and draw(st.integers(0, 3)):
        given = [g for g in given if g not in ("/", "/**/*.yaml")] or ["{root}"]
    can_write = command in ("check", "report", "sweep", "import") and writes
    output = draw(st.sampled_from(outputs if "none" in outputs else writes)) if can_write else "none"
    depth = draw(st.sampled_from([2, 40, 400]))
    return TreeCase(entries, depth, command, tuple(given), output)


def build_tree(case: TreeCase) -> Path:
    """The tree of ``case`` under a fresh folder of the workspace."""
    root = workspace().root / "tree"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    (root / "ok.yaml").write_text(TINY_SPEC, encoding="utf-8")
    (root / "loop").symlink_to(".")
    (root / "fifo.yaml").unlink(missing_ok=True)
    os.mkfifo(root / "fifo.yaml")
    (root / "zero.yaml").symlink_to("/dev/zero")
    shutil.copy(ROOT / "tests" / "data" / "hf_configs" / "gpt2.json", root / "config.json")
    deep = root / "deep"
    deep.mkdir()
    if "deep" in case.entries:
        leaf = deep.joinpath(*["d"] * case.depth)
        leaf.mkdir(parents=True)
        (leaf / "leaf.yaml").write_text(TINY_SPEC, encoding="utf-8")
    links = {
        "loop-dot": ("deep/again", "."),
        "loop-up": ("deep/up", ".."),
        "link-out": ("outside", str(workspace().fixtures)),
        "link-root": ("machine", "/"),
        "dev-null": ("null.yaml", "/dev/null"),
        "broken": ("broken.yaml", "missing.yaml"),
        "self-loop": ("self.yaml", "self.yaml"),
    }
    for entry, (name, target) in links.items():
        if entry in case.entries:
            (root / name).symlink_to(target)
    if "dev-zero" in case.entries:
        (root / "deep" / "zero.yaml").symlink_to("/dev/zero")
    if "fifo" in case.entries:
        os.mkfifo(root / "deep" / "pipe.yaml")
    if "dir-yaml" in case.entries:
        (root / "folder.yaml").mkdir()
    if "hidden" in case.entries:
        (root / ".hidden").mkdir()
        (root / ".hidden" / "h.yaml").write_text(TINY_SPEC, encoding="utf-8")
    if "many" in case.entries:
        many = root / "many"
        many.mkdir()
        for i in range(300):
            (many / f"s{i}.yaml").write_text(TINY_SPEC if i % 2 else "name: [", encoding="utf-8")
    return root


def command_line(case: TreeCase, root: Path) -> tuple[list[str], Path | None, bool]:
    """(argv, the -o target, whether that target is an input the command reads)."""
    given = [g.replace("{root}", str(root)) for g in case.given]
    args = {
        "check": ["check", *given, "--gpu", "h100", "--max-gpus", "8"],
        "report": ["report", *given, "--gpu", "h100"],
        "sweep": ["sweep", *given, "--batch-size", "1,2", "--format", "csv"],
        "import": ["import", *given],
        "estimate": ["estimate", *given],
    }[case.command]
    inputs = [Path(g) for g in given if Path(g).is_file() and not Path(g).is_symlink()]
    first_input = inputs[0] if inputs else root / "ok.yaml"
    reads_ok = case.command == "check" and any(g in (str(root), f"{root}/*.yaml", f"{root}/**/*.yaml") for g in given)
    is_input = bool(inputs) or reads_ok
    if case.output == "none":
        return args, None, False
    if case.output in ("input", "input-link"):
        target = first_input
        if case.output == "input-link":
            (root / "deep" / "alias.txt").symlink_to(target)
            target = root / "deep" / "alias.txt"
        return [*args, "-o", str(target)], target, is_input
    target = {
        "fifo": root / "fifo.yaml",
        "folder": root / "deep",
        "dev-full": Path("/dev/full"),
        "new": root / "deep" / "written.out",
        "missing-folder": root / "no" / "such" / "out",
    }[case.output]
    return [*args, "-o", str(target)], target, False


@tolerating_known_issues
def check_tree_case(case: TreeCase, limit: float = WALK_LIMIT_S) -> None:
    root = build_tree(case)
    args, target, onto_input = command_line(case, root)
    files = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]
    before = snapshot(files)
    fifo = case.output == "fifo" or any(g.endswith("fifo.yaml") for g in case.given)
    result = invoke(args, limit=min(limit, SPECIAL_FILE_LIMIT_S) if fifo else limit)

    def fail(why: str) -> None:
        raise FuzzFailure(f"{why}\n{case!r}\n" + describe(args, result))

    if not check_result(args, result):
        raise Tolerated("a known issue")
    check_stderr(result.stderr, fail, usage=usage_error(result))
    allowed = {target.resolve()} if target is not None and not onto_input else set()
    written = [p for p in changed(before) if p.resolve() not in allowed]
    if written:
        fail(f"an input was written over\n{[str(p.relative_to(root)) for p in written]}")
    if onto_input and result.exit_code != 2:
        fail(f"-o onto an input of the command gives exit {result.exit_code}, not 2 (refused)")
