"""Layering: the core imports neither typer nor rich (checked in a fresh interpreter), and the static
import graph of vramcalc/ (every import statement, read with ast) has no cycle, goes down the layers,
keeps typer/rich/click in cli/ and render/, and core/ imports nothing from the stacks wing. Module length is
a prompt to read, not a rule: a module is split by meaning, and only one past 800 lines fails."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

CORE = [
    "vramcalc",
    "vramcalc.units",
    "vramcalc.errors",
    "vramcalc.spec.models",
    "vramcalc.files",
    "vramcalc.core.shape",
    "vramcalc.core.activations",
    "vramcalc.core.dense",
    "vramcalc.core.optimizer",
    "vramcalc.core.symbolic",
    "vramcalc.planning.batch_totals",
    "vramcalc.planning.limits",
    "vramcalc.hardware.catalog",
    "vramcalc.families.timeline",
    "vramcalc.planning.compare",
    "vramcalc.hardware.local",
    "vramcalc.results.estimate",
    "vramcalc.results.check",
    "vramcalc.results.limits",
    "vramcalc.results.bandwidth",
    "vramcalc.results.planning",
    "vramcalc.results.catalog",
    "vramcalc.results.imported",
    "vramcalc.api",
]


def test_core_does_not_import_cli_libraries() -> None:
    code = (
        f"import sys; import {', '.join(CORE)}; "
        "bad = [m for m in ('typer', 'rich', 'click', 'torch') if m in sys.modules]; print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_estimate_path_does_not_import_yaml_catalog_or_torch_eagerly() -> None:
    code = "import sys, vramcalc.cli.main; print(','.join(m for m in ('torch', 'numpy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_estimate_without_a_card_loads_no_catalog_planning_or_multi_gpu_module() -> None:
    """What `vramcalc estimate SPEC` needs is imported, not the GPU catalog, the fit verdict or the planning
    and multi-GPU code that a card (--gpu) or a parallel section brings in."""
    spec = Path(__file__).resolve().parent.parent / "configs" / "bert-base.yaml"
    code = (
        "import atexit, runpy, sys\n"
        "loaded = lambda: ' '.join(m for m in sys.modules if m.startswith('vramcalc'))\n"
        "atexit.register(lambda: print(loaded(), file=sys.stderr))\n"
        f"sys.argv = ['vramcalc', 'estimate', {str(spec)!r}]\n"
        "runpy.run_module('vramcalc', run_name='__main__')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    loaded = out.stderr.split()
    assert "vramcalc.spec.models" in loaded and "vramcalc.render.estimate" in loaded  # it did estimate
    unwanted = ("vramcalc.bundled", "vramcalc.hardware.catalog", "vramcalc.parallel.")
    unwanted_planning = [m for m in loaded if m.startswith("vramcalc.planning.") and m != "vramcalc.planning.outcome"]
    assert unwanted_planning == []  # the shared estimate-and-verdict sequence only, which needs no card
    assert [m for m in loaded if m.startswith(unwanted)] == []


# --- static structure: every import statement of every module, read with ast -----------------------
#
# Every `import` and `from ... import` anywhere in a module counts: top level, inside functions, under
# `if TYPE_CHECKING:`, in try/except. A module that calls importlib.import_module / __import__ also
# imports each vramcalc module it names in a string constant (the lazy table of vramcalc/__init__.py).
# The implicit import of parent packages (vramcalc.core.params runs vramcalc/__init__.py and
# vramcalc/core/__init__.py first) is not an edge: every module would import the package root.

PACKAGE = Path(__file__).resolve().parent.parent / "vramcalc"
#: Past this a module holds more than one idea, whatever it says: split it by meaning.
MAX_LINES = 800
#: Lowest first. A module's layer is its sub-package, or its own name for a top-level module; the
#: package's __init__ and __main__ are the top. A module may import its own layer and lower ones.
LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(names)
    for names in (
        {"errors", "choices", "version"},
        {"units", "files", "paths", "bundled"},
        {"sources"},
        {"spec"},
        {"hardware"},
        {"core"},
        {"llm", "parallel"},
        {"stacks"},
        {"families"},
        {"planning"},
        {"results"},
        {"render"},
        {"cli"},
        {"api"},
        {"__init__", "__main__"},
    )
)
CLI_LIBRARIES = frozenset({"typer", "rich", "click"})
CLI_LAYERS = frozenset({"cli", "render"})
#: Upward imports the tree has today, each (importer, imported). The test fails if one disappears, so
#: the entry goes when the import is fixed; it never grows.
KNOWN_UPWARD: frozenset[tuple[str, str]] = frozenset(set())


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int
    text: str  # the statement as written (ast.unparse)

    def __str__(self) -> str:
        return f"{self.importer} (line {self.line}: {self.text}) -> {self.imported}"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str:
    return "__init__" if module == "vramcalc" else module.split(".")[1]


def rank_of(module: str) -> int | None:
    layer = layer_of(module)
    return next((rank for rank, names in enumerate(LAYERS) if layer in names), None)


@functools.cache
def sources() -> dict[str, tuple[Path, ast.Module]]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        found[module_name(path)] = (path, ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return found


def resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module a `from` statement reads from (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def known(name: str, modules: dict[str, object]) -> str:
    """The longest prefix of a dotted name that is a vramcalc module (``name`` itself when none is)."""
    parts = name.split(".")
    return next((".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in modules), name)


@functools.cache
def imports() -> tuple[Import, ...]:
    """Every import of a vramcalc module by a vramcalc module (third-party ones: see all_imports)."""
    return tuple(i for i in all_imports() if i.imported == "vramcalc" or i.imported.startswith("vramcalc."))


@functools.cache
def all_imports() -> tuple[Import, ...]:
    modules = sources()
    edges = []
    for importer, (path, tree) in modules.items():
        dynamic = False
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = known(alias.name, modules)
                    edges.append(Import(importer, target, node.lineno, ast.unparse(node)))
            elif isinstance(node, ast.ImportFrom):
                base = resolve(importer, path.name == "__init__.py", node)
                for alias in node.names:
                    target = known(f"{base}.{alias.name}" if alias.name != "*" else base, modules)
                    edges.append(Import(importer, target, node.lineno, ast.unparse(node)))
            elif isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                dynamic = dynamic or name in ("import_module", "__import__")
        if dynamic:
            edges.extend(
                Import(importer, node.value, node.lineno, f"dynamic import {node.value!r}")
                for node in ast.walk(tree)
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in modules
            )
    return tuple(e for e in edges if e.imported != e.importer)


def find_cycles(edges: tuple[Import, ...]) -> list[list[Import]]:
    """One cycle per strongly connected component of the import graph (Tarjan), as its edges."""
    graph: dict[str, list[Import]] = {}
    for edge in edges:
        graph.setdefault(edge.importer, []).append(edge)
        graph.setdefault(edge.imported, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for edge in graph[node]:
            if edge.imported not in index:
                visit(edge.imported)
                low[node] = min(low[node], low[edge.imported])
            elif edge.imported in stack:
                low[node] = min(low[node], index[edge.imported])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)

    cycles = []
    for component in components:
        start = min(component)
        # breadth-first from start back to start inside the component: the shortest cycle through it
        paths: dict[str, list[Import]] = {start: []}
        queue = [start]
        while queue:
            node = queue.pop(0)
            for edge in graph[node]:
                if edge.imported == start:
                    cycles.append([*paths[node], edge])
                    queue = []
                    break
                if edge.imported in component and edge.imported not in paths:
                    paths[edge.imported] = [*paths[node], edge]
                    queue.append(edge.imported)
    return cycles


def test_no_import_cycles() -> None:
    cycles = find_cycles(imports())
    assert not cycles, "import cycles (each edge: importer (line: statement) -> imported):\n" + "\n".join(
        "  " + "\n    ".join(str(edge) for edge in cycle) for cycle in cycles
    )


def test_imports_go_down_the_layers() -> None:
    unplaced = sorted(
        {m for m in sources() if rank_of(m) is None} | {str(i) for i in imports() if i.imported not in sources()}
    )
    assert not unplaced, f"modules in no layer of LAYERS, or imports of no vramcalc module: {unplaced}"
    upward = [i for i in imports() if rank_of(i.imported) > rank_of(i.importer)]  # type: ignore[operator]
    new = [i for i in upward if (i.importer, i.imported) not in KNOWN_UPWARD]
    assert not new, "imports from a lower layer to a higher one:\n" + "\n".join(
        f"  {i} (layer {layer_of(i.importer)} imports layer {layer_of(i.imported)})" for i in new
    )
    gone = KNOWN_UPWARD - {(i.importer, i.imported) for i in upward}
    assert not gone, f"KNOWN_UPWARD entries no longer in the tree (remove them): {sorted(gone)}"


def test_modules_stay_short() -> None:
    lines = {m: len(path.read_text(encoding="utf-8").splitlines()) for m, (path, _) in sources().items()}
    long = {m: n for m, n in lines.items() if n > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (module: lines): {long}"


def test_core_imports_nothing_from_the_stacks_wing() -> None:
    """The first-order model reads the stack's facts (vramcalc/core/stack.py); the libraries' modules that
    make them sit above it."""
    bad = [i for i in imports() if layer_of(i.importer) == "core" and layer_of(i.imported) == "stacks"]
    assert not bad, "core/ imports the stacks wing:\n" + "\n".join(f"  {i}" for i in bad)


def test_cli_libraries_only_in_cli_and_render() -> None:
    bad = [
        i for i in all_imports() if i.imported.split(".")[0] in CLI_LIBRARIES and layer_of(i.importer) not in CLI_LAYERS
    ]
    assert not bad, "typer/rich/click imported outside vramcalc.cli and vramcalc.render:\n" + "\n".join(
        f"  {i}" for i in bad
    )
