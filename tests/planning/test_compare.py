"""`vramcalc compare`: reading torch.cuda.memory_stats() JSON, the comparison, exit codes 0 / 1 / 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.errors import MeasuredStatsError, VramcalcError
from vramcalc.families.estimate import COMPONENTS, Estimate
from vramcalc.planning.compare import MeasuredStats, compare, load_memory_stats, parse_memory_stats
from vramcalc.units import GiB, MiB

ROOT = Path(__file__).resolve().parents[2]
BERT = str(ROOT / "configs" / "bert-base.yaml")
CALIBRATION = ROOT.parent / "shared" / "calibration"
runner = CliRunner()
#: The allocator-level tracer's peak of configs/bert-base.yaml (benchmarks/data/tracer_extra.json,
#: case config-bert-base_b32_s512_fp16_adamw): an independent measurement of the same step, its tensors'
#: bytes, plus the 7,513,088 B the allocator counts beyond BERT-base's fp16 weights as whole blocks
#: (worked out by hand in tests/core/test_allocator.py).
BERT_TRACED_PEAK = 9_010_003_456 + 7_513_088


def stats_text(allocated: int, reserved: int, **extra: int) -> str:
    """A memory_stats() dump as json.dump writes it (a few of its ~80 keys are enough)."""
    return json.dumps(
        {
            "active_bytes.all.peak": allocated,
            "allocated_bytes.all.current": 0,
            "allocated_bytes.all.peak": allocated,
            "reserved_bytes.all.peak": reserved,
            "num_alloc_retries": 0,
            **extra,
        }
    )


def fake_estimate(peak: int, context: int, reserve: int) -> Estimate:
    components = dict.fromkeys(COMPONENTS, 0) | {"parameters": peak // 4, "activations": peak - peak // 4}
    return Estimate(
        name="fake",
        params=1,
        mode="train",
        peak_phase="backward",
        components=components,
        component_peaks=components,
        phases={"backward": peak},
        phase_components={"backward": components},
        overhead={"cuda_context": context, "allocator_reserve": reserve},
    )


def test_parse_flat_and_nested() -> None:
    flat = parse_memory_stats(stats_text(4 * GiB, 5 * GiB, num_ooms=1), "s.json")
    assert flat == MeasuredStats(4 * GiB, 5 * GiB, {"num_alloc_retries": 0, "num_ooms": 1})
    nested = json.dumps({"allocated_bytes": {"all": {"peak": 7}}, "reserved_bytes": {"all": {"peak": 9}}})
    assert parse_memory_stats(nested, "n.json") == MeasuredStats(7, 9, {})


#: The start of an error about the allocated peak of a dump named s.json (a regular expression).
ALLOCATED = r"^s\.json: allocated_bytes\.all\.peak: "


def peaks(allocated: str, reserved: str = "5") -> str:
    """A dump's two peaks as JSON text, written out (NaN and duplicates included)."""
    return f'{{"allocated_bytes.all.peak": {allocated}, "reserved_bytes.all.peak": {reserved}}}'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", r"^s\.json: invalid JSON \(line 1, column 2\): Expecting property name enclosed in double quotes$"),
        ("[1, 2]", r"^s\.json: expected the JSON object torch\.cuda\.memory_stats\(\) returns, got list$"),
        ('{"reserved_bytes.all.peak": 5}', ALLOCATED + "missing"),
        (peaks("4.5"), ALLOCATED + r"must be a whole number, got 4\.5$"),
        (peaks("true"), ALLOCATED + "must be a whole number, got True$"),
        (peaks('"4"'), ALLOCATED + "must be a whole number, got '4'$"),
        (peaks("-4"), ALLOCATED + r"-4 is out of range \(0 to 2\*\*60 bytes, 1 EiB\)$"),
        (peaks(str(2**60 + 1)), ALLOCATED + "1152921504606846977 is out of range"),
        (peaks("1" + "0" * 400), ALLOCATED + r"an integer of 401 digits is out of range \(at most 30\)$"),
        (peaks("NaN"), ALLOCATED + "NaN is not a finite number$"),
        (peaks("1e999"), ALLOCATED + "'1e999' is out of range"),
        ('{"allocated_bytes.all.peak": 4, "allocated_bytes.all.peak": 5}', ALLOCATED + "duplicate key$"),
        (stats_text(6, 5), r"^s\.json: reserved_bytes\.all\.peak: 5 is below allocated_bytes\.all\.peak \(6\)"),
        (stats_text(0, 0), ALLOCATED + "is 0"),
        (stats_text(4, 5, num_ooms=-1), r"^s\.json: num_ooms: -1 is out of range"),
        (peaks("4")[:-1] + ', "num_ooms": "x"}', r"^s\.json: num_ooms: must be a whole number, got 'x'$"),
        ("[" * 100_000 + "]" * 100_000, r"^s\.json: invalid JSON: nested more than 64 levels deep$"),
    ],
)
def test_bad_stats(text: str, message: str) -> None:
    with pytest.raises(MeasuredStatsError, match=message) as caught:
        parse_memory_stats(text, "s.json")
    assert "\n" not in str(caught.value)


def test_nested_peaks_are_checked_under_their_dotted_key() -> None:
    nested = json.dumps({"allocated_bytes": {"all": {"peak": 2**61}}, "reserved_bytes": {"all": {"peak": 9}}})
    with pytest.raises(MeasuredStatsError, match=r"^n\.json: allocated_bytes\.all\.peak: 2305843009213693952 is out"):
        parse_memory_stats(nested, "n.json")


def test_load_errors(tmp_path: Path) -> None:
    # read through spec.read_regular_file, like every user file (never blocks on a FIFO)
    with pytest.raises(VramcalcError, match=r"missing\.json: no such file"):
        load_memory_stats(tmp_path / "missing.json")
    binary = tmp_path / "stats.pkl"
    binary.write_bytes(b"\x80\x04\x95\xff\xfe")  # a pickle header: never unpickled, rejected as not UTF-8
    with pytest.raises(MeasuredStatsError, match=r"stats\.pkl: not UTF-8 text"):
        load_memory_stats(binary)


def test_comparison_by_hand() -> None:
    # estimate: peak 4 GiB, context 512 MiB, reserve 480 MiB; measured: allocated 4.2 GiB, reserved 4.5 GiB
    est = fake_estimate(4 * GiB, 512 * MiB, 480 * MiB)
    measured = MeasuredStats(4 * GiB + 205 * MiB, 4 * GiB + 512 * MiB, {})
    result = compare(est, measured, tolerance=0.10, nvidia_smi_used_bytes=5 * GiB)
    rows = {row.key: row for row in result.rows}
    # (4096 - 4301) / 4301 MiB = -4.77 %: within 10 %
    assert rows["peak_allocated"].relative_error == pytest.approx(-205 / 4301)
    assert result.within_tolerance
    assert rows["peak_reserved"].estimated_bytes == 4 * GiB + 480 * MiB
    assert rows["fragmentation"].measured_bytes == 307 * MiB  # 4608 - 4301 MiB
    assert rows["cuda_context"].measured_bytes == 512 * MiB  # nvidia-smi 5120 MiB - reserved 4608 MiB
    assert rows["total"].estimated_bytes == 4 * GiB + 992 * MiB
    assert not compare(est, measured, tolerance=0.04).within_tolerance  # 4.77 % > 4 %
    assert [r.key for r in compare(est, measured).rows] == ["peak_allocated", "peak_reserved", "fragmentation"]


def test_nvidia_smi_below_reserved_is_an_error() -> None:
    est = fake_estimate(4 * GiB, 512 * MiB, 480 * MiB)
    with pytest.raises(MeasuredStatsError, match="--nvidia-smi-used"):
        compare(est, MeasuredStats(4 * GiB, 5 * GiB, {}), nvidia_smi_used_bytes=4 * GiB)


def test_cli_help_shows_the_snippet() -> None:
    result = runner.invoke(app, ["compare", "--help"])
    assert result.exit_code == 0, result.output
    assert 'json.dump(torch.cuda.memory_stats(), open("stats.json", "w"))' in result.stdout


def test_cli_against_the_traced_bert_peak(tmp_path: Path) -> None:
    stats = tmp_path / "stats.json"
    stats.write_text(stats_text(BERT_TRACED_PEAK, BERT_TRACED_PEAK + 1_000_000_000), encoding="utf-8")
    result = runner.invoke(app, ["compare", BERT, "--measured", str(stats), "--nvidia-smi-used", "10.9GiB"])
    assert result.exit_code == 0, result.output
    for text in ("peak allocated", "fragmentation", "CUDA context", "within 10%"):
        assert text in result.stdout
    doc = json.loads(runner.invoke(app, ["compare", BERT, "--measured", str(stats), "--json"]).stdout)
    assert abs(doc["rows"]["peak_allocated"]["relative_error"]) < 0.0001
    assert doc["within_tolerance"] is True


def test_cli_exit_1_when_off(tmp_path: Path) -> None:
    stats = tmp_path / "stats.json"
    stats.write_text(stats_text(BERT_TRACED_PEAK * 12 // 10, BERT_TRACED_PEAK * 13 // 10), encoding="utf-8")
    result = runner.invoke(app, ["compare", BERT, "--measured", str(stats)])
    assert result.exit_code == 1, result.output
    assert "off by more than 10%" in result.stdout
    assert runner.invoke(app, ["compare", BERT, "--measured", str(stats), "--tolerance", "20%"]).exit_code == 0


@pytest.mark.parametrize(
    ("content", "flags", "message"),
    [
        ("{not json", [], "stats.json: invalid JSON (line 1, column 2)"),
        ('{"reserved_bytes.all.peak": 1}', [], "stats.json: allocated_bytes.all.peak: missing"),
        (stats_text(5, 6), ["--tolerance", "ten"], "--tolerance: expected a percentage"),
        (stats_text(5, 6), ["--nvidia-smi-used", "23"], "--nvidia-smi-used: expected a size with a unit"),
        (stats_text(5, 6), ["--gpu", "no-such-card"], "unknown GPU 'no-such-card'"),
    ],
)
def test_cli_bad_input_exit_2(tmp_path: Path, content: str, flags: list[str], message: str) -> None:
    stats = tmp_path / "stats.json"
    stats.write_text(content, encoding="utf-8")
    result = runner.invoke(app, ["compare", BERT, "--measured", str(stats), *flags])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("[" * 100_000 + "]" * 100_000, "invalid JSON: nested more than 64 levels deep"),
        (
            peaks(str(10**400), str(10**400)),
            "allocated_bytes.all.peak: an integer of 401 digits is out of range (at most 30)",
        ),
        (stats_text(5, 2**60 + 1), "reserved_bytes.all.peak: 1152921504606846977 is out of range (0 to 2**60 bytes"),
        (stats_text(5, 6, num_alloc_retries=-1), "num_alloc_retries: -1 is out of range"),
        (stats_text(5, 6)[:-1] + ', "x": ' + "9" * 5000 + "}", "x: an integer of 5,000 digits is out of range"),
        (peaks('"' + "4" * 900_000 + '"'), "allocated_bytes.all.peak: must be a whole number, got '4444"),
    ],
)
def test_cli_bad_stats_file_is_one_line_naming_file_and_key(tmp_path: Path, content: str, problem: str) -> None:
    stats = tmp_path / "stats.json"
    stats.write_text(content, encoding="utf-8")
    for extra in ([], ["--json"]):
        result = runner.invoke(app, ["compare", BERT, "--measured", str(stats), *extra])
        assert result.exit_code == 2, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {stats}: {problem}"), result.stderr[:500]
        assert len(lines[0]) < len(f"error: {stats}: ") + 200  # a quoted value is truncated
        assert result.stdout == ""


@pytest.mark.skipif(not (CALIBRATION / "tracer_cases.json").exists(), reason="../shared/calibration not present")
def test_cli_with_tracer_allocator_replay(tmp_path: Path) -> None:
    # shared/calibration/tracer_cases.json, case bert-base_b32_s128_fp32_adamw: the tracer's exact allocated
    # peak and its allocator replay's reserved bytes (5,605,687,296, i.e. 3.0 % above allocated).
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import accuracy

    case = next(
        c
        for c in json.loads((CALIBRATION / "tracer_cases.json").read_text(encoding="utf-8"))
        if c["id"] == "bert-base_b32_s128_fp32_adamw"
    )
    spec = tmp_path / "bert.yaml"
    spec.write_text(yaml.safe_dump(accuracy.tracer_spec(case)), encoding="utf-8")
    stats = tmp_path / "stats.json"
    measured = case["measured"]
    stats.write_text(stats_text(measured["peak_allocated_bytes"], measured["est_reserved_bytes"]), encoding="utf-8")
    result = runner.invoke(app, ["compare", str(spec), "--measured", str(stats), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["rows"]
    assert rows["fragmentation"]["measured_bytes"] == 5_605_687_296 - 5_442_274_816
    assert abs(rows["peak_allocated"]["relative_error"]) < 0.01
