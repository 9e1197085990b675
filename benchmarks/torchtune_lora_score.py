"""vramcalc against torchtune's published "Optimization flags" table (Llama-3.2-3B, 2 x 4096 tokens, A100).

    python benchmarks/torchtune_lora_score.py

Each row of ``benchmarks/data/measured_torchtune_lora.yaml`` states the published "Peak Memory Active" (GiB,
torchtune's ``get_memory_stats``: the allocated peak) and the spec of the run, every technique of the table's rows
above it included; this prints vramcalc's allocated peak, the error, whether it is within 5 % and the host memory
the offloaded activations take. A row the table does not state enough to model is listed with the reason. Nothing
here is fitted to these rows.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vramcalc.api import estimate  # noqa: E402
from vramcalc.errors import SpecError  # noqa: E402
from vramcalc.spec.load import parse_spec  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "measured_torchtune_lora.yaml"
GIB = 1 << 30
#: Within this fraction of the published figure.
TOLERANCE = 0.05


def rows() -> list[dict[str, Any]]:
    loaded: list[dict[str, Any]] = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    return loaded


def error(row: dict[str, Any]) -> float:
    """vramcalc's allocated peak against the row's published figure, as a fraction."""
    spec = parse_spec(row["spec"], row["spec"]["name"])
    got = estimate(spec, gpu=row.get("gpu")).peak_allocated_bytes
    return float(got / (row["published_gib"] * GIB) - 1)


def score(row: dict[str, Any]) -> str:
    if "not_scored" in row:
        return f"{row['id']}: published {row['published_gib']:.1f} GiB  not scored: {row['not_scored']}"
    try:
        result = estimate(parse_spec(row["spec"], row["spec"]["name"]), gpu=row.get("gpu"))
    except SpecError as refused:
        return f"{row['id']}: published {row['published_gib']:.1f} GiB  refused: {refused}"
    got, published = result.peak_allocated_bytes, row["published_gib"] * GIB
    within = "within 5 %" if abs(got / published - 1) <= TOLERANCE else "outside 5 %"
    return (
        f"{row['id']}: published {row['published_gib']:.1f} GiB  vramcalc {got / GIB:.2f} GiB  "
        f"{got / published - 1:+.1%} ({within}); host {result.host_bytes / GIB:.2f} GiB"
    )


def main() -> None:
    for row in rows():
        print(score(row))


if __name__ == "__main__":
    main()
