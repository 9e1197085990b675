"""The BERT "inference" table of the transformers SDPA docs is ``generate``, not one forward: the recorded
tracer replay of both loops (benchmarks/tracer_bert_generate.py, benchmarks/data/tracer_bert_generate.json)
against the table's own figures, which the data file carries (``measured_bytes``, MB x 1e6 as printed)."""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "tracer_bert_generate.json"
VOCAB, FP16 = 30_522, 2


def _rows() -> dict[tuple[int, int], dict[str, int]]:
    return {(r["batch"], r["prompt"]): r for r in json.loads(DATA.read_text(encoding="utf-8"))["rows"]}


def test_the_table_grows_by_two_logits_of_128_positions_per_sequence() -> None:
    # Same tokens, one more sequence: (2, 128) against (1, 256), and (4, 128) against (2, 256) for two more.
    # By hand, two fp16 logits of 128 positions of a 30,522-token vocabulary: 2 x 128 x 30,522 x 2 B =
    # 15,627,264 B. The table grows by 15,837,000 B and 2 x 15,674,500 B
    rows = _rows()
    per_sequence = 2 * 128 * VOCAB * FP16
    one = rows[2, 128]["measured_bytes"] - rows[1, 256]["measured_bytes"]
    two = rows[4, 128]["measured_bytes"] - rows[2, 256]["measured_bytes"]
    assert abs(one - per_sequence) / per_sequence < 0.02
    assert abs(two / 2 - per_sequence) / per_sequence < 0.02


def test_generate_leaves_a_constant_and_one_forward_does_not() -> None:
    # generate with 128 new tokens: the table is 23.0-24.0 MB (rounded) above the replay on every row (a constant the
    # tracer does not count); the plain forward loop misses more with every sequence of the batch
    rows = _rows()
    gaps = [r["measured_bytes"] - r["generate_128"] for r in rows.values()]
    assert all(22_900_000 <= g <= 24_000_000 for g in gaps), gaps
    forward = {k: r["measured_bytes"] - r["forward_loop"] for k, r in rows.items()}
    assert forward[4, 128] - forward[1, 128] > 3 * 15_000_000
    assert forward[4, 256] - forward[1, 256] > 3 * 15_000_000
