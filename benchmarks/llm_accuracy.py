"""vramcalc against measured LLM runs: KV capacity (vLLM), quantized generation, LoRA (PEFT, torchtune).

Cases: ``benchmarks/data/measured_llm.yaml`` (each names its ``shared/calibration/measured.yaml`` id and
the spec of the run). Scoring follows ``shared/calibration/README.md``; quantities are never pooled.

    python benchmarks/llm_accuracy.py [--calibration ../shared/calibration] [--json]
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

from vramcalc.families import estimate  # noqa: E402
from vramcalc.families.llm import kvcache  # noqa: E402
from vramcalc.spec.load import parse_spec  # noqa: E402

DEFAULT_CALIBRATION = ROOT.parent / "shared" / "calibration"
CASES = ROOT / "benchmarks" / "data" / "measured_llm.yaml"
GiB = 2**30


def load(calibration: Path) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(our case, the measured.yaml record) pairs."""
    ours = yaml.safe_load(CASES.read_text(encoding="utf-8"))["cases"]
    measured = {c["id"]: c for c in yaml.safe_load((calibration / "measured.yaml").read_text(encoding="utf-8"))}
    return [(case, measured[case["id"]]) for case in ours]


def predict(case: dict[str, Any]) -> tuple[float, str]:
    """The predicted quantity (bytes or tokens) and a note."""
    spec = parse_spec({"name": case["id"], **case["spec"]}, case["id"])
    result = estimate(spec, hopper_or_newer=case.get("hopper_or_newer", True))
    kind = case["compare"]
    if kind == "kv_tokens":
        info = result.llm
        cap = kvcache.capacity(
            case["usable_bytes"],
            info.memory_utilization,
            info.non_kv_peak_bytes,
            info.kv_cache_bytes_per_token,
            info.kv_block_size,
            info.context_tokens,
        )
        return cap.tokens, f"non-KV {info.non_kv_peak_bytes / GiB:.2f} GiB, {info.kv_cache_bytes_per_token} B/token"
    if kind == "weights":
        return result.components["parameters"], "parameters component (weights + adapters)"
    if kind == "allocated+context":
        return result.peak_allocated_bytes + result.overhead["cuda_context"], f"peak in {result.peak_phase} + context"
    return result.peak_allocated_bytes, f"peak in {result.peak_phase}"


def evaluate(calibration: Path) -> list[dict[str, Any]]:
    rows = []
    for case, record in load(calibration):
        predicted, note = predict(case)
        m = record["measured"]
        value = m["value"] if case["compare"] == "kv_tokens" else m["value_bytes"]
        row = {
            "case": case["id"],
            "compare": case["compare"],
            "measured": value,
            "predicted": predicted,
            "error_pct": round(100 * (predicted - value) / value, 2),
            "note": note,
            "inferred": case.get("inferred", []),
        }
        if case["compare"] == "reserved":
            train = next((a["value_bytes"] for a in m.get("also", []) if a["quantity"] == "reserved_p99_train"), None)
            row["one_sided_ok"] = predicted <= value
            row["reserved_p99_train"] = train
        rows.append(row)
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for kind in sorted({r["compare"] for r in rows}):
        errors = [abs(r["error_pct"]) for r in rows if r["compare"] == kind]
        out[kind] = {
            "cases": len(errors),
            "median_abs_pct": round(statistics.median(errors), 2),
            "max_abs_pct": round(max(errors), 2),
        }
    return out


def _fmt(value: float, kind: str) -> str:
    return f"{value:,.0f} tok" if kind == "kv_tokens" else f"{value / GiB:,.3f} GiB"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration", type=Path, default=DEFAULT_CALIBRATION)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = evaluate(args.calibration)
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary(rows)}, indent=2))
        return
    for r in rows:
        flag = " (inferred: " + ", ".join(r["inferred"]) + ")" if r["inferred"] else ""
        side = f" one-sided P<=v: {r['one_sided_ok']}" if "one_sided_ok" in r else ""
        print(
            f"{r['case']:62s} {r['compare']:17s} measured {_fmt(r['measured'], r['compare']):>14s} "
            f"vramcalc {_fmt(r['predicted'], r['compare']):>14s} {r['error_pct']:+7.2f} %{side}{flag}"
        )
    for kind, s in summary(rows).items():
        print(f"summary {kind}: {s['cases']} cases, median |error| {s['median_abs_pct']} %, max {s['max_abs_pct']} %")


if __name__ == "__main__":
    main()
