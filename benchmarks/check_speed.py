"""Speed of `vramcalc check` over many specs: 1,000 generated spec files in one directory, one run.

    python benchmarks/check_speed.py [--specs 1000] [--runs 3] [--gpu h100-sxm] [--misfits 0.0]
                                     [--compare OTHER_CHECKOUT] [--keep DIR] [--profile]

The specs are generated reproducibly (a fixed seed) into a temporary directory: a third are the bundled
examples (configs/) with another batch size, sequence length or precision, the rest name a model of the
bundled catalog (``model: llama-3.1-8b``) with a training or inference workload of varied batch size,
sequence length and precision, as a repository's specs do. Each draw is read and estimated here before it
is written (one vramcalc refuses is drawn again), and by default every spec fits the card, as in a
repository whose CI gate passes; ``--misfits 0.05`` makes 5 % of them too big for it, which adds the
search for the changes that would make each fit.

Each command runs in a fresh interpreter, its output discarded: ``vramcalc check DIR --gpu CARD`` (the
table), the same with ``--format json`` (no table to lay out) and, for scale, ``check`` of one bundled
spec (start-up). The runs are interleaved, after one warm-up run of each that also writes the bytecode
caches; the script prints the median wall time and CPU time (user + system of the child: the wall time
less the waiting for a core on a busy machine) of each. ``--compare`` times another checkout of vramcalc
(a git worktree of an earlier commit, say) on the same specs in the same rounds, and warns when the
outputs differ. ``--profile`` runs the table command once more under cProfile and prints the functions
with the largest cumulative and own times. A measurement, not a test: it always exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: Goal for the 1,000-spec run (wall seconds, a quiet 2-core machine).
TARGET_S = 1.5
BATCHES = (1, 2, 4, 8, 16, 32)
SEQS = (128, 256, 512, 1024, 2048, 4096, 8192)
TRAIN_PRECISIONS = ("fp32", "amp-bf16", "amp-fp16", "bf16", "fp16")
INFERENCE_PRECISIONS = ("bf16", "fp16", "fp32")
OPTIMIZERS = ("adamw", "adam", "sgd-momentum", "adafactor")
CHECKPOINTING = ("none", "full")
#: Children may write bytecode caches, as an installed package has them (see benchmarks/startup.py); the
#: table is laid out at a fixed width.
ENV = {**{key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}, "COLUMNS": "120"}


def _catalog_spec(rng: random.Random, entry: Any) -> dict[str, Any]:
    """A spec naming a catalog model, with a workload drawn for its kind."""
    model, _ = entry.model_mapping()
    workload: dict[str, Any] = {"batch_size": rng.choice(BATCHES)}
    if rng.random() < 0.5:
        workload["mode"] = "inference"
        workload["precision"] = rng.choice(INFERENCE_PRECISIONS)
    else:
        workload["mode"] = "train"
        workload["precision"] = rng.choice(TRAIN_PRECISIONS)
        workload["optimizer"] = rng.choice(OPTIMIZERS)
        workload["gradient_checkpointing"] = rng.choice(CHECKPOINTING)
    if model.get("architecture") in ("vit", "resnet"):
        workload["image_size"] = entry.config_value("image_size") or 224
    else:
        context = entry.context_length or max(SEQS)
        workload["seq_len"] = rng.choice([seq for seq in SEQS if seq <= context] or [context])
    spec: dict[str, Any] = {"model": entry.id, "workload": workload}
    if rng.random() < 0.3:
        spec = {"name": f"{entry.id}-{workload['mode']}", **spec}
    return spec


def _example_spec(rng: random.Random, text: str) -> dict[str, Any]:
    """A bundled example with one or two workload keys changed."""
    import yaml

    spec = yaml.safe_load(text)
    workload = spec["workload"]
    workload["batch_size"] = rng.choice(BATCHES)
    if "seq_len" in workload and rng.random() < 0.5:
        workload["seq_len"] = rng.choice([seq for seq in SEQS if seq <= 2048])
    if workload.get("mode", "train") == "train" and "quantization" not in workload and rng.random() < 0.3:
        workload["precision"] = rng.choice(TRAIN_PRECISIONS)
    return spec


def generate(folder: Path, count: int, gpu: str, misfits: float = 0.0, seed: int = 2026) -> int:
    """Write ``count`` spec files (``spec-0000.yaml``, ...) into ``folder``: drawn until vramcalc reads and
    estimates each, and fitting ``gpu`` but for a share ``misfits`` of them; returns how many do not fit."""
    import yaml

    from vramcalc.errors import VramcalcError
    from vramcalc.hardware.lookup import get_gpu
    from vramcalc.planning.budget import budget_for, fit_on
    from vramcalc.planning.check import gpu_count
    from vramcalc.spec.load import bundled_examples, parse_spec
    from vramcalc.spec.presets import catalog

    rng = random.Random(seed)
    card = get_gpu(gpu)
    models = list(catalog())
    examples = [item.read_text(encoding="utf-8") for item in bundled_examples().values()]
    written = misfit = 0
    while written < count:
        example = rng.random() < 1 / 3
        data = _example_spec(rng, rng.choice(examples)) if example else _catalog_spec(rng, rng.choice(models))
        try:
            spec = parse_spec(json.loads(json.dumps(data)), "generated")
            budget = budget_for(card, count=gpu_count(spec, "generated", None), sharded=spec.parallel is not None)
            fits = fit_on(spec, budget).fits
        except VramcalcError:
            continue  # a combination vramcalc refuses: draw another
        if not fits and misfit + 1 > misfits * (written + 1):  # spread the misfits
            continue
        misfit += not fits
        text = yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
        (folder / f"spec-{written:04d}.yaml").write_text(f"# generated by benchmarks/check_speed.py\n{text}")
        written += 1
    return misfit


def run_once(cmd: list[str], cwd: Path) -> tuple[float, float, int, bytes]:
    """(CPU seconds of the child, wall seconds, exit code, standard output) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=cwd, env=ENV)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, done.returncode, done.stdout


def profile(cmd: list[str], top: int) -> None:
    """Run ``cmd`` (a ``python -m vramcalc ...`` command) under cProfile and print the top functions."""
    import pstats

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "check.prof"
        subprocess.run(
            [cmd[0], "-m", "cProfile", "-o", str(out), *cmd[1:]],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
            env=ENV,
        )
        stats = pstats.Stats(str(out))
        stats.sort_stats("cumulative").print_stats(top)
        stats.sort_stats("tottime").print_stats(top)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--specs", type=int, default=1000, help="spec files to generate (default 1000)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each command (default 3)")
    parser.add_argument("--gpu", action="append", help="card to check on (repeatable; default h100-sxm)")
    parser.add_argument(
        "--misfits", type=float, default=0.0, help="share of the specs that do not fit the card (default 0)"
    )
    parser.add_argument(
        "--compare", type=Path, action="append", default=[], help="another checkout of vramcalc to time alike"
    )
    parser.add_argument("--keep", type=Path, help="generate into this (empty or new) directory and keep it")
    parser.add_argument("--profile", action="store_true", help="also run once under cProfile")
    parser.add_argument("--top", type=int, default=30, help="functions the profile lists (default 30)")
    args = parser.parse_args()
    checkouts = [ROOT, *(path.resolve() for path in args.compare)]
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp) / "specs"
        folder.mkdir(parents=True, exist_ok=True)
        if any(folder.iterdir()):
            parser.error(f"{folder} is not empty")
        cards = args.gpu or ["h100-sxm"]
        misfit = generate(folder, args.specs, cards[0], args.misfits)
        gpus = [flag for card in cards for flag in ("--gpu", card)]
        check = [sys.executable, "-m", "vramcalc", "check", str(folder), *gpus]
        commands = {
            "check DIR (table)": check,
            "check DIR --format json": [*check, "--format", "json"],
            "check bert-base.yaml": [*check[:4], str(ROOT / "configs" / "bert-base.yaml"), *gpus],
        }
        cpu: dict[tuple[str, Path], list[float]] = {(label, root): [] for label in commands for root in checkouts}
        wall: dict[tuple[str, Path], list[float]] = {key: [] for key in cpu}
        outputs: dict[str, set[tuple[int, bytes]]] = {label: set() for label in commands}
        for label, cmd in commands.items():  # warm the file cache and the bytecode caches
            for root in checkouts:
                run_once(cmd, root)
        for _ in range(max(1, args.runs)):
            for label, cmd in commands.items():
                for root in checkouts:
                    seconds, elapsed, code, out = run_once(cmd, root)
                    cpu[label, root].append(seconds)
                    wall[label, root].append(elapsed)
                    outputs[label].add((code, out))
        rows = json.loads(next(iter(outputs["check DIR --format json"]))[1] or b"[]")
        fits = sum(bool(row.get("fits")) for row in rows)
        print(f"{args.specs} specs ({misfit} generated not to fit {cards[0]}): {len(rows)} rows, {fits} fit")
        print(f"medians of {max(1, args.runs)} interleaved runs, {sys.executable}")
        print(f"{'':58} {'wall s':>7} {'CPU s':>7}")
        for label in commands:
            for root in checkouts:
                where = "" if root == ROOT else f" [{root}]"
                median_wall, median_cpu = statistics.median(wall[label, root]), statistics.median(cpu[label, root])
                print(f"{label + where + ':':58} {median_wall:7.2f} {median_cpu:7.2f}")
            if len(outputs[label]) > 1:
                print(f"warning: {label}: the exit code or output differs between runs or checkouts")
        print(f"goal: check DIR (table) <= {TARGET_S} s wall")
        if args.profile:
            profile(commands["check DIR (table)"], args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
