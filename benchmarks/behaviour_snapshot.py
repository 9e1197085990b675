"""Record what the command line prints for a fixed set of invocations, to compare two builds byte for byte.

    python benchmarks/behaviour_snapshot.py OUT.jsonl [--jobs N]
    python benchmarks/behaviour_snapshot.py --compare OLD.jsonl NEW.jsonl

The set: every bundled config (configs/, examples/) under every command that takes a spec, with and
without a card, as text and JSON; every Hugging Face config of tests/data/hf_configs through ``import``;
the catalog listings; and the 197 catalog models through ``estimate``, ``bandwidth`` and ``max-batch``.
Run it with the Python of the build to record (a virtual environment's ``bin/python``): the CLI is
imported once, and each invocation runs the console entry point in a forked child whose standard output
and error are files, from the repository root with a fixed terminal width; its exit code, standard output
and standard error are recorded. ``--compare`` prints the invocations whose records differ and the counts;
it exits 1 when any differs. A refactoring that changes no behaviour leaves the two files equal.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CARDS = ("h100-sxm", "rtx-4090", "a100-40gb")


def spec_invocations(spec: str) -> list[list[str]]:
    """Every command that reads a spec, on the spec's own target and on named cards."""
    runs = [
        ["estimate", spec],
        ["estimate", spec, "--json"],
        ["estimate", spec, "--timeline"],
        ["estimate", spec, "--json", "--timeline"],
        ["check", spec],
        ["check", spec, "--format", "json"],
        ["check", spec, "--format", "junit"],
        ["check", spec, "--format", "github"],
        ["check", spec, "--format", "markdown"],
        ["fit", spec],
        ["fit", spec, "--json"],
        ["max-batch", spec],
        ["max-seq", spec],
        ["sweep", spec],
        ["plan", spec],
        ["plan", spec, "--json"],
        ["report", spec, "-o", "-"],
        ["bandwidth", spec],
    ]
    for card in CARDS:
        runs += [
            ["estimate", spec, "--gpu", card],
            ["estimate", spec, "--gpu", card, "--json"],
            ["check", spec, "--gpu", card],
            ["check", spec, "--gpu", card, "--json"],
            ["fit", spec, "--gpu", card],
            ["max-batch", spec, "--gpu", card],
            ["max-batch", spec, "--gpu", card, "--json"],
            ["max-seq", spec, "--gpu", card],
            ["max-seq", spec, "--gpu", card, "--json"],
            ["sweep", spec, "--gpu", card, "--batch-size", "1,2,8", "--seq-len", "128,512"],
            ["sweep", spec, "--gpu", card, "--format", "csv"],
            ["plan", spec, "--gpu", card],
            ["plan", spec, "--gpu", card, "--gpus", "8", "--json"],
            ["report", spec, "--gpu", card, "-o", "-"],
            ["bandwidth", spec, "--gpu", card],
            ["bandwidth", spec, "--gpu", card, "--json"],
        ]
    return runs


def invocations() -> list[list[str]]:
    specs = sorted(
        str(p.relative_to(ROOT)) for folder in ("configs", "examples") for p in (ROOT / folder).rglob("*.yaml")
    )
    runs: list[list[str]] = []
    for spec in specs:
        runs += spec_invocations(spec)
    runs.append(["check", *[s for s in specs if s.startswith("configs/")], "--gpu", "h100-sxm"])
    for config in sorted((ROOT / "tests" / "data" / "hf_configs").glob("*.json")):
        path = str(config.relative_to(ROOT))
        runs += [["import", path], ["estimate", "--hf-config", path], ["estimate", "--hf-config", path, "--json"]]
    runs += [["gpus"], ["gpus", "--json"], ["gpus", "--wide"], ["models"], ["models", "--json"], ["examples"]]
    runs += [["schema"], ["--help"], ["--version"]]
    for entry in json.loads(str(record(["models", "--json"])["stdout"])):
        model = entry["id"]
        runs += [
            ["estimate", "--model", model],
            ["estimate", "--model", model, "--json", "--gpu", "h100-sxm"],
            ["bandwidth", "--model", model, "--gpu", "h100-sxm"],
            ["bandwidth", "--model", model, "--gpu", "rtx-4090", "--json"],
            ["max-batch", "--model", model, "--gpu", "h100-sxm"],
            ["max-batch", "--model", model, "--gpu", "a100-40gb", "--json"],
        ]
    return runs


def _set_terminal() -> None:
    for var in ("FORCE_COLOR", "PY_COLORS", "GITHUB_ACTIONS"):
        os.environ.pop(var, None)
    os.environ.update(
        {"COLUMNS": "100", "TERMINAL_WIDTH": "100", "NO_COLOR": "1", "_TYPER_FORCE_DISABLE_TERMINAL": "1"}
    )


def _child(args: list[str], out_fd: int, err_fd: int) -> None:
    """In the forked child: the entry point with ``args``, its streams on the two files; never returns."""
    from vramcalc.cli.main import run

    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    sys.argv = ["vramcalc", *args]
    code = 0
    try:
        run()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # a traceback is behaviour too: recorded on standard error
        import traceback

        traceback.print_exc()
        code = 99
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


#: Modules every child would import again: imported once in the parent, so a child starts warm.
WARM = (
    "vramcalc.cli.main",
    "vramcalc.spec.load",
    "vramcalc.spec.presets",
    "vramcalc.hardware.lookup",
    "vramcalc.hardware.bandwidth",
    "vramcalc.families",
    "vramcalc.families.llm",
    "vramcalc.families.per_rank",
    "vramcalc.planning.check",
    "vramcalc.planning.fit",
    "vramcalc.planning.limits",
    "vramcalc.planning.sweep",
    "vramcalc.planning.plan_layouts",
    "vramcalc.render.estimate",
    "vramcalc.render.check",
    "vramcalc.render.planning",
    "vramcalc.render.html_report",
    "vramcalc.results.estimate",
    "rich.console",
    "rich.table",
)


def _warm() -> None:
    import importlib

    for name in WARM:
        try:
            importlib.import_module(name)
        except ImportError:  # a build without that module
            pass


def record(args: list[str]) -> dict[str, object]:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:
            _child(args, out.fileno(), err.fileno())
        _, status = os.waitpid(pid, 0)
        out.seek(0)
        err.seek(0)
        return {
            "args": args,
            "exit": os.waitstatus_to_exitcode(status),
            "stdout": out.read().decode("utf-8", "replace"),
            "stderr": err.read().decode("utf-8", "replace"),
        }


def compare(old_path: Path, new_path: Path) -> int:
    def load(path: Path) -> dict[str, dict[str, object]]:
        return {json.dumps(r["args"]): r for r in map(json.loads, path.read_text(encoding="utf-8").splitlines())}

    old, new = load(old_path), load(new_path)
    old = {key: record for key, record in old.items() if key in new} if len(new) < len(old) else old
    differing = [key for key in old if key in new and old[key] != new[key]]
    for key in differing:
        fields = [f for f in ("exit", "stdout", "stderr") if old[key][f] != new[key][f]]
        print(f"differs ({', '.join(fields)}): vramcalc {' '.join(json.loads(key))}")
    missing = sorted(set(old) ^ set(new))
    for key in missing:
        print(f"in one file only: vramcalc {' '.join(json.loads(key))}")
    exits: dict[object, int] = {}
    for r in old.values():
        exits[r["exit"]] = exits.get(r["exit"], 0) + 1
    print(
        f"{len(old)} invocations compared (exit codes {dict(sorted(exits.items(), key=str))}): "
        f"{len(old) - len(differing) - len(missing)} identical, {len(differing)} differ, {len(missing)} unmatched"
    )
    return 1 if differing or missing else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("OLD", "NEW"))
    parser.add_argument("--sample", type=int, default=1, metavar="K", help="record every K-th invocation only")
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        parser.error("give OUT.jsonl or --compare OLD NEW")
    _set_terminal()
    os.chdir(ROOT)
    _warm()

    runs = invocations()[:: args.sample]
    with ThreadPoolExecutor(args.jobs) as pool, args.out.open("w", encoding="utf-8") as out:
        for done in pool.map(record, runs):
            out.write(json.dumps(done, sort_keys=True) + "\n")
    print(f"{len(runs)} invocations recorded in {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
