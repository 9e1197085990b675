"""vramcalc against vLLM's published start-up logs: the KV budget and the KV tokens (or blocks) per row.

Each row of ``benchmarks/data/vllm_logs.yaml`` (a published log with its URL, the vLLM build and the
settings it states) is run as the spec a user would write for it, on the catalog card named, and compared:
``kv_budget`` (vLLM's ``available_kv_cache_memory``), ``kv_tokens`` ("GPU KV cache size") or ``blocks``
("# GPU blocks"), and where the log breaks them down, the weights, the profile's activation peak and the
memory outside PyTorch. A positive error is optimistic (more KV than vLLM found room for).

    python benchmarks/vllm_log_score.py [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from vramcalc.api import estimate

DATA = Path(__file__).resolve().parent / "data" / "vllm_logs.yaml"
GIB = 2**30


def rows() -> list[dict[str, Any]]:
    loaded: list[dict[str, Any]] = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    return loaded


def spec_of(row: dict[str, Any]) -> dict[str, Any]:
    """The spec of one log: its model, vLLM runtime, one request of max_model_len, the workload keys given."""
    workload = {"mode": "inference", "batch_size": 1, "runtime": "vllm", **row["workload"]}
    doc: dict[str, Any] = {"name": row["id"], "model": row["model"], "workload": workload}
    if row.get("tensor", 1) > 1:
        doc["parallel"] = {"tensor": row["tensor"]}
    return doc


def score(row: dict[str, Any]) -> dict[str, Any]:
    """Estimate and log side by side (GiB figures in GiB, tokens and blocks as counts)."""
    doc = estimate(spec_of(row), row["gpu"]).model_dump()
    engine = doc["vllm"]
    weights = doc["components"]["parameters"] / GIB
    ours = {
        "kv_budget_gib": doc["kv_cache_budget_bytes"] / GIB,
        "kv_tokens": doc["kv_cache_tokens"],
        "blocks": doc["kv_cache_blocks"],
        "weights_gib": weights,
        "activation_peak_gib": (engine["activation_peak_bytes"] + doc["components"].get("workspace", 0)) / GIB,
        "non_torch_gib": engine["non_torch_bytes"] / GIB,
    }
    logged = {k: v for k, v in row["logged"].items() if k in ours}
    error = {k: ours[k] / v - 1 for k, v in logged.items() if k in ("kv_budget_gib", "kv_tokens", "blocks")}
    return {"id": row["id"], "url": row["url"], "logged": logged, "estimate": ours, "error": error}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    results = [score(row) for row in rows()]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for result in results:
        print(f"{result['id']}  ({result['url']})")
        for key, value in result["logged"].items():
            ours = result["estimate"][key]
            error = f"  {result['error'][key]:+.1%}" if key in result["error"] else ""
            shown = f"{value:,}" if isinstance(value, int) else f"{value:.2f}"
            mine = f"{ours:,}" if isinstance(ours, int) else f"{ours:.2f}"
            print(f"  {key:<22} log {shown:>10}   vramcalc {mine:>10}{error}")


if __name__ == "__main__":
    main(sys.argv[1:])
