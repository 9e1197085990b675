"""vramcalc against every published GPU measurement of ``shared/calibration/measured.yaml``, per kind.

    python benchmarks/measured_score.py [--calibration ../shared/calibration] [--json] [--rows]

Each case gets the spec of its run (``benchmarks/measured_cases.py``) and one comparison, by what the
source measured (shared/calibration/README.md):

* ``peak_allocated``: the estimate's allocated peak; ``peak_reserved``: allocated + the allocator reserve;
  ``nvml_used``: reserved + the CUDA context (the stack's measured context where the set has one);
  ``max_context``: vLLM's KV tokens; weights-only loads: the parameters component;
* ``fits`` / ``oom``: the fit verdict ``check`` gives on a card of the run's usable memory;
* a measurement that only bounds the step (variable-length batches, a whole-run reserved peak that
  includes evaluation) is checked one-sidedly and kept out of the signed medians.

Per kind it prints the signed median error, the median |error|, the share of cases a spec expresses,
the one-sided checks and the fit/OOM labels. Nothing here is fitted to these cases.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import measured_cases as mc  # noqa: E402

from vramcalc.api import estimate as estimate_on_card  # noqa: E402
from vramcalc.errors import VramcalcError  # noqa: E402
from vramcalc.families import estimate  # noqa: E402
from vramcalc.families.llm import kvcache  # noqa: E402
from vramcalc.spec.load import parse_spec  # noqa: E402

DEFAULT_CALIBRATION = ROOT.parent / "shared" / "calibration"
GiB = 2**30


def load(calibration: Path) -> list[dict[str, Any]]:
    return yaml.safe_load((calibration / "measured.yaml").read_text(encoding="utf-8"))


def predict(case: mc.Case) -> float:
    """The estimate of what the case measured (bytes or tokens)."""
    result = estimate(parse_spec(case.spec, case.spec["name"]), hopper_or_newer=case.hopper_or_newer)
    reserve = result.overhead.get("allocator_reserve", 0)
    if case.compare == mc.ALLOCATED:
        return result.peak_allocated_bytes
    if case.compare == mc.RESERVED:
        return result.peak_allocated_bytes + (0 if case.bound else reserve)
    if case.compare == mc.ALLOCATED_CONTEXT:
        return result.peak_allocated_bytes + result.overhead["cuda_context"]
    if case.compare == mc.NVML:
        return result.total_bytes
    if case.compare == mc.WEIGHTS:
        return result.components["parameters"] - case.offload_bytes
    if case.compare == mc.WEIGHTS_CONTEXT:
        return result.components["parameters"] + result.overhead["cuda_context"]
    if case.compare == mc.STATIC:
        step = result.phase_components["optimizer"]
        return step["parameters"] + step["gradients"] + step["optimizer_states"]
    info = result.llm  # KV tokens as vLLM's profiler computes them
    return kvcache.capacity(
        case.usable_bytes,
        info.memory_utilization,
        info.non_kv_peak_bytes,
        info.kv_cache_bytes_per_token,
        info.kv_block_size,
        info.context_tokens,
    ).tokens


def fits_on(case: mc.Case) -> tuple[bool, int]:
    """The one fit verdict (as ``check`` gives it) on a card of the run's usable memory."""
    result = estimate_on_card(case.spec, gpu=f"{case.usable_bytes}B")
    return result.gpu.fits, result.gpu.needed_bytes


def score(record: dict[str, Any]) -> dict[str, Any]:
    """One row: the comparison of one measured.yaml case, or why no spec expresses it."""
    row: dict[str, Any] = {"case": record["id"], "kind": record["kind"], "quantity": record["measured"]["quantity"]}
    if record["measured"].get("suspect"):
        return row | {"status": "suspect", "reason": str(record["measured"]["suspect"])[:120]}
    case = mc.case_for(record)
    if isinstance(case, mc.NotExpressible):
        return row | {"status": "not_expressible", "reason": case.reason}
    row["inferred"] = case.inferred
    if case.compare == mc.LABEL:
        try:
            fits, needed = fits_on(case)
        except VramcalcError as exc:
            return row | {"status": "not_expressible", "reason": str(exc)}
        label = row["quantity"] == "fits"
        return row | {
            "status": "label",
            "ok": fits == label,
            "predicted": "fits" if fits else "oom",
            "needed_bytes": needed,
            "usable_bytes": case.usable_bytes,
        }
    try:
        predicted = predict(case)
    except VramcalcError as exc:  # a combination vramcalc refuses: the spec does not express this run
        return row | {"status": "not_expressible", "reason": str(exc)}
    m = record["measured"]
    measured = m["value"] if case.compare == mc.KV_TOKENS else m["value_bytes"]
    if case.compare == mc.STATIC:  # memory_allocated after the step, the figure the source states apart
        measured = next(a["value_bytes"] for a in m["also"] if a["quantity"] == "allocated")
    row |= {
        "compare": case.compare,
        "measured": measured,
        "predicted": predicted,
        "error_pct": round(100 * (predicted - measured) / measured, 2),
    }
    if case.bound:
        ok = predicted >= measured if case.bound_is_upper else predicted <= measured
        return row | {"status": "bound", "ok": ok, "reason": case.bound}
    return row | {"status": "scored"}


def summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per kind: signed and absolute median error of the two-sided rows, share expressible, checks."""
    out: dict[str, dict[str, Any]] = {}
    for kind in sorted({r["kind"] for r in rows} | {"all"}):
        mine = [r for r in rows if kind in ("all", r["kind"])]
        scored = [r["error_pct"] for r in mine if r["status"] == "scored"]
        counted = [r for r in mine if r["status"] != "suspect"]
        expressible = [r for r in counted if r["status"] != "not_expressible"]
        labels = [r for r in mine if r["status"] == "label"]
        bounds = [r for r in mine if r["status"] == "bound"]
        out[kind] = {
            "cases": len(mine),
            "expressible": len(expressible),
            "expressible_pct": round(100 * len(expressible) / len(counted), 1) if counted else None,
            "scored": len(scored),
            "signed_median_pct": round(statistics.median(scored), 2) if scored else None,
            "median_abs_pct": round(statistics.median(abs(e) for e in scored), 2) if scored else None,
            "max_abs_pct": round(max(abs(e) for e in scored), 2) if scored else None,
            "labels_right": sum(r["ok"] for r in labels),
            "labels": len(labels),
            "bounds_held": sum(r["ok"] for r in bounds),
            "bounds": len(bounds),
        }
    return out


def _value(row: dict[str, Any], key: str) -> str:
    if row.get("compare") == mc.KV_TOKENS:
        return f"{row[key]:,.0f} tok"
    return f"{row[key] / GiB:.3f} GiB"


def print_rows(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        head = f"{r['case'][:60]:60} {r['kind'][:16]:16}"
        if r["status"] in ("scored", "bound"):
            mark = "" if r["status"] == "scored" else ("  bound ok" if r["ok"] else "  BOUND MISSED")
            print(
                f"{head} {r['compare']:9} {_value(r, 'measured'):>14} {_value(r, 'predicted'):>14} "
                f"{r['error_pct']:+8.2f} %{mark}"
            )
        elif r["status"] == "label":
            verdict = "right" if r["ok"] else "WRONG"
            print(f"{head} label     {r['quantity']:>14} {r['predicted']:>14}  {verdict}")
        else:
            print(f"{head} {r['status']}: {r['reason']}")


def _pct(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.2f} %" if signed else f"{value:.2f} %"


def print_summary(table: dict[str, dict[str, Any]]) -> None:
    print(
        f"{'kind':22} {'cases':>5} {'expr.':>6} {'scored':>6} {'signed med':>10} {'med |err|':>9} "
        f"{'max |err|':>9} {'labels':>7} {'bounds':>7}"
    )
    for kind, s in table.items():
        print(
            f"{kind:22} {s['cases']:5} {s['expressible_pct'] or 0:5.1f}% {s['scored']:6} "
            f"{_pct(s['signed_median_pct'], True):>10} {_pct(s['median_abs_pct']):>9} {_pct(s['max_abs_pct']):>9} "
            f"{s['labels_right']:>3}/{s['labels']:<3} {s['bounds_held']:>3}/{s['bounds']}".rstrip()
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration", type=Path, default=DEFAULT_CALIBRATION)
    parser.add_argument("--json", action="store_true", help="rows and summary as JSON")
    parser.add_argument("--rows", action="store_true", help="print every case, not only the summary")
    args = parser.parse_args(argv)
    rows = [score(r) for r in load(args.calibration)]
    table = summary(rows)
    if args.json:
        print(json.dumps({"rows": rows, "summary": table}, indent=2))
        return
    if args.rows:
        print_rows(rows)
        print()
    print_summary(table)


if __name__ == "__main__":
    main()
