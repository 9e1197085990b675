"""`vramcalc gpus` and `vramcalc bandwidth`: tables, the --json contract, stderr notes, one-line errors."""

from __future__ import annotations

import json
import re

import pytest
from spec_texts import TINY_DECODER
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.hardware.bandwidth import DEFAULT_HOST_EFFICIENCY, DEFAULT_MEMORY_EFFICIENCY
from vramcalc.units import GB

runner = CliRunner()


BANDWIDTH_KEYS = {
    "gpu",
    "memory_type",
    "bus_width_bits",
    "data_rate_gbps",
    "bandwidth_bytes_per_s",
    "computed_bandwidth_bytes_per_s",
    "capacity_bytes",
}
WEIGHT_KEYS = {"weights_bytes", "weight_stream_s", "decode_tokens_per_s_upper_bound", "host_transfer_s"}


def run_json(args: list[str]) -> dict:  # type: ignore[type-arg]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


# --- gpus ----------------------------------------------------------------------------------------


def test_gpus_table() -> None:
    result = runner.invoke(app, ["gpus"])
    assert result.exit_code == 0, result.output
    assert "72 GPUs" in result.stdout
    assert re.search(r"a100-80gb-sxm\s.*80 GB\s.*80\.00\s.*HBM2e", result.stdout)
    assert "GiB: the DRAM" in result.stdout
    assert result.stderr == ""


def test_gpus_json_lists_every_entry_with_catalog_fields() -> None:
    result = runner.invoke(app, ["gpus", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert len(rows) == 72
    needed = {
        "id",
        "name",
        "vendor",
        "variant",
        "aliases",
        "default_for",
        "memory_type",
        "capacity",
        "capacity_unit",
        "capacity_bytes",
        "bus_width_bits",
        "data_rate_gbps",
        "bandwidth_gb_s",
        "bandwidth_bytes_per_s",
        "computed_bandwidth_bytes_per_s",
        "bandwidth_vendor_rounded",
        "fp16_tflops_dense",
        "fp8_tflops_dense",
        "host_link",
        "source",
    }
    assert all(needed <= row.keys() for row in rows)
    rtx_4090 = next(row for row in rows if row["id"] == "rtx-4090")
    # 21 Gbps x 384 / 8 = 1008 GB/s, equal to NVIDIA's figure.
    assert rtx_4090["bandwidth_bytes_per_s"] == rtx_4090["computed_bandwidth_bytes_per_s"] == 1008 * GB


def test_gpus_filters_and_sort() -> None:
    rows = run_json(["gpus", "--vendor", "amd", "--memory-type", "HBM3e", "--sort", "bandwidth"])
    # MI355X 8 TB/s before MI325X 6 TB/s (AMD product pages).
    assert [row["id"] for row in rows] == ["mi355x", "mi325x"]  # type: ignore[index]
    big = run_json(["gpus", "--min-memory", "150GB", "--sort", "memory"])
    sizes = [row["capacity_bytes"] for row in big]  # type: ignore[index]
    assert sizes == sorted(sizes, reverse=True) and min(sizes) >= 150 * GB


# --- bandwidth: catalog cards --------------------------------------------------------------------


def test_bandwidth_card_only_shows_the_formula() -> None:
    result = runner.invoke(app, ["bandwidth", "--gpu", "a100-40gb-pcie"])
    assert result.exit_code == 0, result.output
    # 2.43 Gbps x 5120 bit / 8 = 1555.2 GB/s; datasheet 1555 GB/s.
    assert "2.43 Gbps x 5,120 bit / 8 = 1,555.2 GB/s" in result.stdout
    assert "1,555.0 GB/s (vendor); computed is within 1 %" in result.stdout
    assert "40 GB HBM2 (as the vendor states it) = 40.00 GiB of DRAM" in result.stdout


def test_bandwidth_shows_both_figures_when_vendor_rounded() -> None:
    result = runner.invoke(app, ["bandwidth", "--gpu", "h200-sxm"])
    assert result.exit_code == 0, result.output
    # 6.402 x 6144 / 8 = 4916.7 GB/s vs official 4800: 4916.736 / 4800 - 1 = +2.4 %.
    assert "4,800.0 GB/s (vendor); computed 4,916.7 GB/s differs by +2.4%" in result.stdout


def test_ambiguous_name_notes_on_stderr_and_json_on_stdout() -> None:
    result = runner.invoke(app, ["bandwidth", "--gpu", "h100", "--params", "70B", "--dtype", "fp16", "--json"])
    assert result.exit_code == 0, result.output
    assert result.stderr.strip() == "note: 'h100' is ambiguous; using h100-sxm (others: h100-pcie, h100-nvl)"
    doc = json.loads(result.stdout)
    assert BANDWIDTH_KEYS | WEIGHT_KEYS <= doc.keys()
    assert doc["gpu"] == "h100-sxm" and doc["memory_type"] == "HBM3" and doc["bus_width_bits"] == 5120
    assert doc["bandwidth_bytes_per_s"] == 3350 * GB  # datasheet 3.35 TB/s
    assert doc["computed_bandwidth_bytes_per_s"] == 3_352_320_000_000  # 5.238 x 5120 / 8 = 3352.32 GB/s
    assert doc["weights_bytes"] == 140 * GB  # 70e9 x 2 bytes
    assert doc["weight_stream_s"] == pytest.approx(140 / 3350)  # 41.79 ms
    assert doc["decode_tokens_per_s_upper_bound"] == pytest.approx(3350 / 140)  # 23.93 tokens/s
    assert doc["host_transfer_s"] == pytest.approx(140 / 63.015385, rel=1e-6)  # PCIe 5.0 x16
    assert doc["roofline"]["bound"] == "memory"
    assert doc["roofline"]["first_compute_bound_batch"] == 296  # 989.4e12 / 3.35e12 = 295.34 FLOP/byte


def test_design_notes_example_in_the_table() -> None:
    result = runner.invoke(app, ["bandwidth", "--gpu", "h100-pcie", "--params", "70B", "--dtype", "fp16"])
    assert result.exit_code == 0, result.output
    # 140 GB / 2,000 GB/s = 70 ms -> 1 / 0.07 = 14.29 tokens/s; at 85 %: 82.35 ms, 12.14 tokens/s.
    assert "70.00 ms per decode step at 2,000.0 GB/s -> at most 14.29 tokens/s (batch 1)" in result.stdout
    assert "82.35 ms -> 12.14 tokens/s" in result.stdout
    # PCIe 5.0 x16: 63.015 GB/s -> 140 / 63.015 = 2.22 s; at 80 %: 2.78 s.
    assert "PCIe 5.0 x16 63.015 GB/s per direction: 2.22 s; at 80%: 2.78 s" in result.stdout
    assert result.stderr == ""


def test_weights_flag_and_efficiency() -> None:
    doc = run_json(["bandwidth", "--gpu", "rtx-4090", "--weights", "14GB", "--efficiency", "90%"])
    # 14e9 / 1008e9 = 13.89 ms; at 90 %: 15.43 ms.
    assert doc["weight_stream_s"] == pytest.approx(14 / 1008)
    assert doc["weight_stream_realistic_s"] == pytest.approx(14 / 1008 / 0.9)
    assert doc["roofline"] is None


def test_batch_option_moves_the_roofline() -> None:
    doc = run_json(["bandwidth", "--gpu", "h100-sxm", "--params", "70B", "--batch", "300"])
    assert doc["roofline"]["batch"] == 300 and doc["roofline"]["bound"] == "compute"  # 300 >= 295.34


# --- bandwidth: custom cards and specs -----------------------------------------------------------


def test_custom_gddr6_from_gpuz_clock() -> None:
    result = runner.invoke(
        app, ["bandwidth", "--memory-type", "gddr6", "--memory-clock", "1750MHz", "--bus-width", "256"]
    )
    assert result.exit_code == 0, result.output
    # 1750 MHz x 8 = 14 Gbps; 14 x 256 / 8 = 448 GB/s.
    assert "1750 MHz (GPU-Z) x 8 = 14 Gbps per pin" in result.stdout
    assert "14 Gbps x 256 bit / 8 = 448.0 GB/s" in result.stdout


def test_custom_card_json_from_data_rate() -> None:
    doc = run_json(["bandwidth", "--data-rate", "21Gbps", "--bus-width", "384"])
    assert doc["gpu"] is None and doc["capacity_bytes"] is None
    assert doc["bandwidth_bytes_per_s"] == doc["computed_bandwidth_bytes_per_s"] == 1008 * GB  # 21 x 384 / 8


def test_custom_card_nvidia_smi_clock() -> None:
    doc = run_json(
        [
            "bandwidth",
            "--memory-type",
            "HBM2",
            "--memory-clock",
            "1215MHz",
            "--clock-source",
            "nvidia-smi",
            "--bus-width",
            "5120",
        ]
    )
    assert doc["data_rate_gbps"] == pytest.approx(2.43)  # 1215 x 2
    assert doc["bandwidth_bytes_per_s"] == 1_555_200_000_000  # 2.43 x 5120 / 8 = 1555.2 GB/s


def test_spec_file_gives_weights_and_kv_cache(write_spec) -> None:  # type: ignore[no-untyped-def]
    path = write_spec(TINY_DECODER)
    doc = run_json(["bandwidth", "--gpu", "a100-40gb-pcie", str(path)])
    # 2 (K, V) x 2 layers x 2 kv heads x 16 head_dim x 2 bytes = 256 bytes per token;
    # x 32 tokens x batch 4 = 32,768 bytes read per decode step.
    assert doc["kv_cache_bytes_per_token"] == 256
    assert doc["kv_cache_read_bytes_per_step"] == 32_768
    assert doc["roofline"]["batch"] == 4
    assert doc["decode_step_s"] == pytest.approx((doc["weights_bytes"] + 32_768) / (1555 * GB))


def test_spec_table_shows_kv_line(write_spec) -> None:  # type: ignore[no-untyped-def]
    result = runner.invoke(app, ["bandwidth", "--gpu", "l4", str(write_spec(TINY_DECODER))])
    assert result.exit_code == 0, result.output
    assert "256 bytes per token; 32 tokens x batch 4" in result.stdout


# --- bad input: exit 2, one line on stderr, nothing on stdout ------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bandwidth", "--gpu", "a100-80gb-smx"], "unknown GPU 'a100-80gb-smx'; did you mean a100-80gb-sxm"),
        (["bandwidth", "--gpu", "a100 pcie"], "matches several cards"),  # 40 and 80 GB, no default among them
        (["bandwidth", "--data-rate", "21Gbps", "--bus-width", "-384"], "bus width: expected a positive"),
        (["bandwidth", "--memory-type", "gddr6", "--memory-clock", "1750", "--bus-width", "256"], "has no unit"),
        (
            ["bandwidth", "--memory-type", "gddr9", "--memory-clock", "1750MHz", "--bus-width", "256"],
            "memory type: unknown 'gddr9'",
        ),
        (["bandwidth", "--data-rate", "21GB/s", "--bus-width", "384"], "bytes per second"),
        (["bandwidth"], "give --gpu NAME"),
        (["bandwidth", "--gpu", "h100", "--bus-width", "256"], "drop --bus-width"),
        (
            ["bandwidth", "--gpu", "h100", "--params", "70B", "--batch", "0"],
            "batch: expected 1 to 10,000,000 sequences, got 0",
        ),
        (["bandwidth", "--gpu", "t4", "--efficiency", "150%"], "efficiency"),
        (["bandwidth", "--gpu", "t4", "--weights", "140"], "with a unit"),
        (["bandwidth", "--gpu", "t4", "missing.yaml"], "missing.yaml"),
        (["gpus", "--vendor", "nvidai"], "vendor: unknown 'nvidai'"),
        (["gpus", "--memory-type", "HBM5"], "memory type: unknown 'HBM5'"),
        (["gpus", "--min-memory", "40"], "with a unit"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and message in lines[0]
    assert result.stdout == ""
    assert "Traceback" not in result.output


def test_help_lists_the_options() -> None:
    result = runner.invoke(app, ["bandwidth", "--help"])
    assert result.exit_code == 0, result.output
    for option in ("--gpu", "--params", "--weights", "--memory-clock", "--clock-source", "--efficiency"):
        assert option in result.stdout
    # The help states the defaults; keep them in step with the constants.
    assert f"default {DEFAULT_MEMORY_EFFICIENCY:.0%}" in result.stdout
    assert f"default {DEFAULT_HOST_EFFICIENCY:.0%}" in result.stdout


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_bandwidth_spec_error_names_the_file(tmp_path, json_flag: list[str]) -> None:  # type: ignore[no-untyped-def]
    """A spec whose parallel degrees do not multiply to its GPUs: one line naming the file, exit 2."""
    path = tmp_path / "bad-degrees.yaml"
    path.write_text(
        "model: {architecture: decoder, layers: 2, hidden_size: 64, heads: 4, vocab_size: 100}\n"
        "workload: {batch_size: 2, seq_len: 16}\n"
        "parallel: {gpus: 2, data: 2, tensor: 11}\n",
        encoding="utf-8",
    )
    result = runner.invoke(app, ["bandwidth", str(path), "--gpu", "h100", *json_flag])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: {path}: parallel.gpus: 2 is not data x tensor x pipeline x context (2 x 11 x 1 x 1 = 22)"
    ]
