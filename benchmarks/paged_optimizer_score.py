"""vramcalc against torchtune's published low-memory full fine-tunes with a bitsandbytes paged optimizer.

    python benchmarks/paged_optimizer_score.py

Each row of ``benchmarks/data/measured_paged.yaml`` states its published figure (allocated or reserved peak,
as the source printed it) and its spec; this prints vramcalc's estimate of the same quantity (allocated peak;
reserved = allocated + the allocator reserve), the error, whether it is within 5 %, the paged states kept in
managed memory (never part of those peaks), and the verdict on the row's card where it names one. Nothing
here is fitted to these rows.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vramcalc.api import estimate  # noqa: E402
from vramcalc.spec.load import parse_spec  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "measured_paged.yaml"
TOLERANCE = 0.05


def rows() -> list[dict[str, Any]]:
    loaded: list[dict[str, Any]] = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    return loaded


def score(row: dict[str, Any], seq_len: int) -> list[str]:
    raw = copy.deepcopy(row["spec"])
    raw["workload"]["seq_len"] = seq_len
    spec = parse_spec(raw, raw["name"])
    result = estimate(spec, gpu=row.get("gpu"))
    allocated = result.peak_allocated_bytes
    predicted = {"peak_allocated": allocated, "peak_reserved": allocated + result.overhead["allocator_reserve"]}
    lines = []
    for quantity, published in row["published"].items():
        got = predicted[quantity]
        error = got / published - 1
        ok = "within 5 %" if abs(error) <= TOLERANCE else "OUTSIDE 5 %"
        lines.append(
            f"  seq {seq_len:>5}  {quantity:<14} published {published / 1e9:6.2f} GB  vramcalc {got / 1e9:6.2f} GB"
            f"  {error:+6.1%}  {ok}"
        )
    managed = result.paged_optimizer_bytes or 0
    lines.append(f"  seq {seq_len:>5}  paged states in managed memory: {managed / 1e9:.2f} GB (not in the peaks)")
    if result.gpu is not None:
        verdict = "fits" if result.gpu.fits else "does not fit"
        needed = result.gpu.needed_bytes / 1e9
        lines.append(f"  seq {seq_len:>5}  {result.gpu.name}: needs {needed:.2f} GB -> {verdict}")
    return lines


def main() -> None:
    for row in rows():
        print(row["id"])
        for seq_len in row["seq_lens"]:
            print("\n".join(score(row, seq_len)))


if __name__ == "__main__":
    main()
