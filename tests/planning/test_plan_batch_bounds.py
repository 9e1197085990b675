"""`vramcalc plan` with a batch per GPU far beyond any real run: the micro-batch sizes it tries are found
from the batch's divisors (not by counting down from it), and gradient accumulation stays within
``parallel.micro_batches``' bound, so a batch of 10^12 is planned in bounded work, without a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.planning.plan_layouts import micro_batch_sizes, workload_variants
from vramcalc.spec.load import parse_spec
from vramcalc.spec.target import MAX_GPU_COUNT

runner = CliRunner()
MODEL = {"architecture": "decoder", "layers": 4, "hidden_size": 512, "heads": 8, "ffn_size": 2048, "vocab_size": 32000}


def spec_with_batch(batch: int) -> dict[str, object]:
    workload = {"mode": "train", "batch_size": batch, "seq_len": 512, "precision": "bf16", "optimizer": "adamw"}
    return {"name": "b", "model": MODEL, "workload": workload, "target": {"gpu": "h100-sxm"}}


def counted_down(n: int) -> list[int]:
    """The definition, by counting: ``n``, then each divisor from ``n // 2`` down to 1 that is at most half
    the last one kept."""
    out = [n]
    for d in range(n // 2, 0, -1):
        if n % d == 0 and 2 * d <= out[-1]:
            out.append(d)
    return out


def test_micro_batch_sizes_are_the_counted_ones() -> None:
    for n in [*range(1, 300), 720, 1024, 5040, 65536, 99991, 100_000]:
        assert micro_batch_sizes(n) == counted_down(n), n


def test_micro_batch_sizes_of_a_huge_batch_by_hand() -> None:
    # 10^12 = 2^12 x 5^12: halving from 10^12 takes 5 x 10^11, 2.5 x 10^11, ...; and a prime is itself and 1
    sizes = micro_batch_sizes(10**12)
    assert sizes[:3] == [10**12, 5 * 10**11, 25 * 10**10] and sizes[-1] == 1
    assert all(10**12 % s == 0 and 2 * b <= a for s, a, b in zip(sizes, sizes, sizes[1:], strict=False))
    assert micro_batch_sizes(1_000_000_007) == [1_000_000_007, 1]


@pytest.mark.parametrize("batch", [100_001, 10**9, 10**12])
def test_accumulation_stays_within_the_micro_batch_bound(batch: int) -> None:
    variants = workload_variants(parse_spec(spec_with_batch(batch)), batch)
    assert variants
    assert all(v.micro_batches is not None and 1 <= v.micro_batches <= MAX_GPU_COUNT for v in variants)
    # the largest accumulation tried: the smallest micro-batch dividing the batch with at most 100,000 of them
    smallest = min(v.micro_batch for v in variants)
    assert smallest == min(d for d in counted_down_divisors(batch) if batch // d <= MAX_GPU_COUNT)


def counted_down_divisors(n: int) -> list[int]:
    """The halving chain of :func:`counted_down`, without counting down from ``n`` (too long for 10^12):
    the divisors below sqrt(n) and their cofactors, then the same halving rule."""
    small = [d for d in range(1, int(n**0.5) + 2) if d * d <= n and n % d == 0]
    out = [n]
    for d in sorted({*small, *(n // d for d in small)} - {n}, reverse=True):
        if 2 * d <= out[-1]:
            out.append(d)
    return out


@pytest.mark.parametrize("batch", [100_001, 10**12])
def test_plan_with_a_huge_batch_answers_without_a_traceback(tmp_path: Path, batch: int) -> None:
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump(spec_with_batch(batch)))
    result = runner.invoke(app, ["plan", str(path), "--json"])
    assert result.exit_code in (0, 1), result.output
    assert "Traceback" not in result.output and "ValidationError" not in result.output
