"""vramcalc against torchtune's published LoRA and QLoRA peaks (Llama-3.2-3B, the README's optimization table).

    python benchmarks/torchtune_lora_score.py

Each row of ``benchmarks/data/measured_torchtune_lora.yaml`` states the published "Peak Memory Active" (GiB,
torchtune's ``get_memory_stats``: the allocated peak) and the spec of the run; this prints vramcalc's allocated
peak, the error and the host memory the offloaded activations take. The published runs were compiled
(``compile=True``); vramcalc estimates the eager step, so those rows are scored without compile and the line
says so. Nothing here is fitted to these rows.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vramcalc.api import estimate  # noqa: E402
from vramcalc.spec.load import parse_spec  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "measured_torchtune_lora.yaml"
GIB = 1 << 30


def rows() -> list[dict[str, Any]]:
    loaded: list[dict[str, Any]] = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    return loaded


def score(row: dict[str, Any]) -> str:
    spec = parse_spec(row["spec"], row["spec"]["name"])
    result = estimate(spec, gpu=row.get("gpu"))
    got, published = result.peak_allocated_bytes, row["published_gib"] * GIB
    compiled = " (published run compiled; scored eager)" if row.get("compiled") else ""
    return (
        f"{row['id']}: published {row['published_gib']:.1f} GiB  vramcalc {got / GIB:.2f} GiB  "
        f"{got / published - 1:+.1%}{compiled}; host {result.host_bytes / GIB:.2f} GiB"
    )


def main() -> None:
    for row in rows():
        print(score(row))


if __name__ == "__main__":
    main()
