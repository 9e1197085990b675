"""Rules for the caching allocator's reserve above the allocated peak, scored against every reference that
states reserved memory.

vramcalc's default reserve is a quarter of the peak's transient bytes: everything but the weights, their
whole blocks, gradients, optimizer states, cuBLAS workspaces and communication buffers, which are
allocated once at sizes that do not change between steps (``vramcalc/core/reserve.py``, ``LONG_LIVED``).
This script scores that rule, the same rule at other shares, and the flat 12 % of the whole peak that
vramcalc used before, on:

* **real GPUs** (``shared/calibration/measured.yaml``, the cases ``benchmarks/measured_score.py`` scores
  two-sided): NVML figures (reserved + the CUDA context; HF Trainer on a V100, PEFT's QLoRA runs, Megatron)
  and reserved peaks (torchtitan). The allocated peak is vramcalc's estimate in every row, so each error
  mixes the estimate's own error with the reserve's;
* the **fit/OOM labels** of measured.yaml, with ``check``'s verdict;
* two **reserved/allocated pairs read directly off real runs**, independent of vramcalc's allocated
  estimate: DeepSpeed's out-of-memory message (GPT-2 1.5B, 8 x V100) and Megatron-LM's memory report
  (Llama-2-7B, pipeline stage 0), each as reserve / transient bytes at that moment;
* the shared tracer's **replays of its 34 traced steps through a model of PyTorch's allocator**
  (``benchmarks/data/reserve_pressure.json``: a card with room to spare, and the smallest card each step
  runs on), with the reserve added to the replay's own allocated peak. This is a model of the allocator,
  not a GPU.

    python benchmarks/reserve_models.py [--calibration ../shared/calibration]

The run quoted in docs/design.md is the output of this script.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import accuracy  # noqa: E402
import measured_cases as mc  # noqa: E402
import measured_score as ms  # noqa: E402

from vramcalc.core.reserve import LONG_LIVED  # noqa: E402
from vramcalc.errors import VramcalcError  # noqa: E402
from vramcalc.families import estimate  # noqa: E402
from vramcalc.families.estimate import Estimate  # noqa: E402
from vramcalc.spec.load import parse_spec  # noqa: E402

Rule = Callable[[Estimate], int]


def transient_bytes(result: Estimate) -> int:
    """The allocated peak less its long-lived components."""
    return result.peak_allocated_bytes - sum(result.components.get(key, 0) for key in LONG_LIVED)


def flat(share: float) -> Rule:
    return lambda result: math.ceil(share * result.peak_allocated_bytes)


def of_transient(share: float) -> Rule:
    return lambda result: math.ceil(share * transient_bytes(result))


RULES: dict[str, Rule] = {
    "flat 12 % of the peak": flat(0.12),
    "15 % of transient": of_transient(0.15),
    "20 % of transient": of_transient(0.20),
    "25 % of transient (default)": of_transient(0.25),
    "30 % of transient": of_transient(0.30),
}

#: Pairs read off real runs: (case, what, reserved - allocated, allocated - long-lived state) in bytes.
#: DeepSpeed (docs/_tutorials/zero.md, oom_dp8_1.5B_log.png): 29.09 GiB allocated, 30.46 GiB reserved when
#: the forward failed; the long-lived state is 16 B per parameter (fp16 weights and gradients, fp32 master
#: weights and Adam states) x 1,557,686,400 parameters. Megatron-LM (rank 0, first pipeline stage): 30,227.65
#: MiB peak allocated, 31,086 MiB reserved after iteration 1, 20,034.75 MiB allocated after the step
#: (weights, gradients and optimizer shard). The reserved figure is read after the step, so it bounds the
#: peak reserve from below.
REAL_PAIRS = (
    ("deepspeed-zero-tutorial-gpt2-1.5b-dp8-noZeRO-OOM", "at OOM", 32_706_175_959 - 31_235_149_660,
     31_235_149_660 - 16 * 1_557_686_400),
    ("megatron-llama2-7b-pp4-static", "after step 1 (>=)", round((31_086 - 30_227.65) * 2**20),
     round((30_227.65 - 20_034.75) * 2**20)),
)  # fmt: skip


def measured_rows(calibration: Path) -> list[dict[str, Any]]:
    """Per measured.yaml case scored two-sided on reserved or NVML memory, or labelled fits/oom: the
    estimate and what the rule is compared with."""
    records = yaml.safe_load((calibration / "measured.yaml").read_text(encoding="utf-8"))
    rows = []
    for record in records:
        if record["measured"].get("suspect"):
            continue
        case = mc.case_for(record)
        if isinstance(case, mc.NotExpressible) or case.bound:
            continue
        if case.compare not in (mc.NVML, mc.RESERVED, mc.LABEL):
            continue
        try:
            result = estimate(parse_spec(case.spec, case.spec["name"]), hopper_or_newer=case.hopper_or_newer)
            row = {"case": record["id"], "compare": case.compare, "result": result}
            if case.compare == mc.LABEL:
                _, needed = ms.fits_on(case)  # check's verdict with the default reserve ...
                row |= {
                    "fits": record["measured"]["quantity"] == "fits",
                    "needed_without_reserve": needed - result.overhead["allocator_reserve"],  # ... less it
                    "usable": case.usable_bytes,
                }
            else:
                row["measured"] = record["measured"]["value_bytes"]
        except VramcalcError:
            continue
        rows.append(row)
    return rows


def tracer_rows(calibration: Path) -> list[dict[str, Any]]:
    """Per shared tracer case: the estimate, the replay's allocated peak and its reserved peaks."""
    replays = json.loads((ROOT / "benchmarks" / "data" / "reserve_pressure.json").read_text(encoding="utf-8"))
    by_id = {case["id"]: case for case in replays["cases"]}
    rows = []
    for case in json.loads((calibration / "tracer_cases.json").read_text(encoding="utf-8")):
        spec = accuracy.tracer_spec(case)
        if spec is None or case["id"] not in by_id:
            continue
        rows.append({"result": estimate(parse_spec(spec, case["id"])), **by_id[case["id"]]})
    return rows


def _stats(errors: list[float]) -> str:
    if not errors:
        return "-"
    signed, absolute = statistics.median(errors), statistics.median(abs(e) for e in errors)
    return f"{signed:+6.2f} / {absolute:5.2f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration", type=Path, default=ms.DEFAULT_CALIBRATION)
    args = parser.parse_args(argv)
    measured = measured_rows(args.calibration)
    traced = tracer_rows(args.calibration)
    print("signed median / median |error| in %; labels right; tracer replays: reserve added to the replay's peak")
    print(f"{'rule':28} {'NVML':>15} {'reserved':>15} {'labels':>7} {'tracer roomy':>15} {'tracer full':>15}")
    for name, rule in RULES.items():
        errors: dict[str, list[float]] = {mc.NVML: [], mc.RESERVED: []}
        right = 0
        labels = [row for row in measured if row["compare"] == mc.LABEL]
        for row in measured:
            result = row["result"]
            if row["compare"] == mc.LABEL:
                right += (row["needed_without_reserve"] + rule(result) <= row["usable"]) == row["fits"]
                continue
            predicted = result.peak_allocated_bytes + rule(result)
            if row["compare"] == mc.NVML:
                predicted += result.overhead["cuda_context"]
            errors[row["compare"]].append(100 * (predicted - row["measured"]) / row["measured"])
        roomy = [
            100 * (r["allocated"] + rule(r["result"]) - r["reserved_large_card"]) / r["reserved_large_card"]
            for r in traced
        ]
        full = [100 * (r["allocated"] + rule(r["result"]) - r["smallest_card"]) / r["smallest_card"] for r in traced]
        print(
            f"{name:28} {_stats(errors[mc.NVML]):>15} {_stats(errors[mc.RESERVED]):>15} "
            f"{right:>3}/{len(labels):<3} {_stats(roomy):>15} {_stats(full):>15}"
        )
    print(f"cases: NVML {len(errors[mc.NVML])}, reserved {len(errors[mc.RESERVED])}, tracer {len(traced)}")
    print("reserve over transient bytes read off real runs (independent of vramcalc's estimate):")
    for case, moment, reserve, transient in REAL_PAIRS:
        ratio = f"{reserve / 2**30:6.2f} GiB / {transient / 2**30:6.2f} GiB = {reserve / transient:.3f}"
        print(f"  {case:50} {moment:18} {ratio}")


if __name__ == "__main__":
    main()
