"""Bandwidth maths: clock semantics, weight streaming, host transfer, KV cache and the decode roofline.

Every expected number is worked out by hand in the comment beside it, or quoted from a datasheet.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from spec_texts import TINY_DECODER

from vramcalc.errors import UnitError, UnknownGPUError
from vramcalc.families import estimate
from vramcalc.hardware.bandwidth import (
    DEFAULT_HOST_EFFICIENCY,
    DEFAULT_MEMORY_EFFICIENCY,
    Report,
    Roofline,
    Streaming,
    analyse,
    custom_card,
    parse_efficiency,
    pcie_bytes_per_s,
    select_card,
)
from vramcalc.hardware.lookup import get_gpu
from vramcalc.hardware.memory_bus import (
    MemoryBus,
    data_rate_from_clock,
    memory_type,
    parse_bus_width,
    parse_clock_mhz,
    parse_data_rate_gbps,
    peak_bandwidth_bytes_per_s,
)
from vramcalc.hardware.weights import Weights, weights_from_flags
from vramcalc.planning.stream import select_weights, weights_from_spec
from vramcalc.spec.load import load_spec
from vramcalc.units import GB


def on_card(name: str, weights: Weights | None, **options: Any) -> Report:
    """analyse() on a catalog card: its memory bus, and the card for capacity, compute and host link."""
    gpu = get_gpu(name)
    return analyse(gpu.memory_bus, weights, gpu=gpu, **options)


# --- clock semantics -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("clock_mhz", "kind", "source", "gbps"),
    [
        (1750, "GDDR6", "gpuz", 14.0),  # 1750 x 8 = 14000 Mbps (RTX 3070 as GPU-Z shows it)
        (1312.5, "GDDR6X", "gpuz", 21.0),  # 1312.5 x 16 = 21000 Mbps
        (1750, "GDDR7", "gpuz", 28.0),  # 1750 x 16 = 28000 Mbps (RTX 5090)
        (1215, "HBM2", "gpuz", 2.43),  # 1215 x 2 = 2430 Mbps (A100 40GB)
        (1251, "GDDR5X", "gpuz", 10.008),  # 1251 x 8 = 10008 Mbps (GTX 1080, "10 Gbps")
        (1215, "HBM2", "nvidia-smi", 2.43),  # 1215 x 2
        (2619, "HBM3", "nvidia-smi", 5.238),  # 2619 x 2 (H100 SXM)
        (10501, "GDDR6X", "nvidia-smi", 21.002),  # 10501 x 2 (RTX 4090)
        (5001, "GDDR6", "nvidia-smi", 10.002),  # 5001 x 2 (T4)
    ],
)
def test_data_rate_from_clock(clock_mhz: float, kind: str, source: str, gbps: float) -> None:
    assert data_rate_from_clock(clock_mhz, kind, source) == pytest.approx(gbps)


@pytest.mark.parametrize(
    ("gbps", "bits", "gb_s"),
    [
        (14.0, 256, 448.0),  # GDDR6 1750 MHz GPU-Z: 14 x 256 / 8 = 448 (RTX 3070 spec: 448 GB/s)
        (21.0, 384, 1008.0),  # RTX 4090: 21 x 384 / 8 = 1008 (NVIDIA spec: 1008 GB/s)
        (2.43, 5120, 1555.2),  # A100 40GB: 2.43 x 5120 / 8 = 1555.2 (datasheet: 1555 GB/s)
        (5.24, 5120, 3353.6),  # H100 SXM: 5.24 x 5120 / 8 = 3353.6 (datasheet: 3.35 TB/s)
        (28.0, 512, 1792.0),  # RTX 5090: 28 x 512 / 8 = 1792 (NVIDIA spec: 1792 GB/s)
    ],
)
def test_peak_bandwidth(gbps: float, bits: int, gb_s: float) -> None:
    assert peak_bandwidth_bytes_per_s(gbps, bits) == round(gb_s * GB)


def test_custom_card_from_gpuz_clock() -> None:
    card = custom_card(bus_width="256", mem_type="gddr6", memory_clock="1750MHz", data_rate=None, clock_source=None)
    # GPU-Z is the default source: 1750 x 8 = 14 Gbps; 14 x 256 / 8 = 448 GB/s.
    assert (card.memory_type, card.clock_source, card.data_rate_gbps) == ("GDDR6", "gpuz", 14.0)
    assert card.bytes_per_s == 448 * GB
    assert card.official_bytes_per_s is None


def test_custom_card_from_data_rate() -> None:
    card = custom_card(bus_width="384-bit", mem_type=None, memory_clock=None, data_rate="21Gbps", clock_source=None)
    assert card.bytes_per_s == 1008 * GB  # 21 x 384 / 8


def test_custom_card_from_nvidia_smi_clock() -> None:
    card = custom_card(
        bus_width="5120", mem_type="HBM3", memory_clock="2619 MHz", data_rate=None, clock_source="nvidia-smi"
    )
    assert card.bytes_per_s == 3_352_320_000_000  # 2619 x 2 = 5.238 Gbps; 5.238 x 5120 / 8 = 3352.32 GB/s


@pytest.mark.parametrize(
    ("text", "mhz"),
    [("1750MHz", 1750.0), ("1750 mhz", 1750.0), ("1.75GHz", 1750.0)],
)
def test_parse_clock(text: str, mhz: float) -> None:
    assert parse_clock_mhz(text) == pytest.approx(mhz)


@pytest.mark.parametrize(
    ("text", "gbps"),
    [("21Gbps", 21.0), ("21 Gb/s", 21.0), ("2.43GT/s", 2.43), ("6400MT/s", 6.4), ("14000Mbps", 14.0)],
)
def test_parse_data_rate(text: str, gbps: float) -> None:
    assert parse_data_rate_gbps(text) == pytest.approx(gbps)


@pytest.mark.parametrize(
    ("func", "text", "message"),
    [
        (parse_clock_mhz, "1750", "has no unit"),
        (parse_clock_mhz, "1750kHz", "unknown unit"),
        (parse_clock_mhz, "0MHz", "between 1 MHz and 1,000 GHz"),
        (parse_clock_mhz, "fast", "expected a clock"),
        (parse_data_rate_gbps, "21", "has no unit"),
        (parse_data_rate_gbps, "21GB/s", "bytes per second"),
        (parse_data_rate_gbps, "-21Gbps", "between 1 Mbps and 1,000 Gbps"),
        (parse_bus_width, "-256", "positive whole number"),
        (parse_bus_width, "0", "positive whole number"),
        (parse_bus_width, "255.5", "positive whole number"),
        (parse_bus_width, "wide", "positive whole number"),
        (memory_type, "GDDR9", "unknown 'GDDR9'"),
    ],
)
def test_parse_errors(func: object, text: str, message: str) -> None:
    with pytest.raises(UnitError, match=message):
        func(text)  # type: ignore[operator]


def test_memory_type_is_case_insensitive() -> None:
    assert memory_type("hbm2e") == "HBM2e"
    assert parse_bus_width("256 bits") == 256


def test_gpuz_convention_unknown_for_hbm3() -> None:
    with pytest.raises(UnitError, match="no known GPU-Z convention for HBM3"):
        data_rate_from_clock(2619, "HBM3", "gpuz")


def test_nvidia_smi_does_not_report_lpddr() -> None:
    with pytest.raises(UnitError, match="nvidia-smi does not report LPDDR5"):
        data_rate_from_clock(3200, "LPDDR5", "nvidia-smi")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bus_width": None, "data_rate": "21Gbps"}, "--bus-width is required"),
        ({"bus_width": "256", "data_rate": "21Gbps", "memory_clock": "1750MHz", "mem_type": "GDDR6"}, "exactly one"),
        ({"bus_width": "256", "memory_clock": "1750MHz"}, "needs --memory-type"),
        ({"bus_width": "256", "data_rate": "21Gbps", "clock_source": "gpuz"}, "--clock-source applies"),
    ],
)
def test_custom_card_flag_rules(kwargs: dict[str, str | None], message: str) -> None:
    full: dict[str, str | None] = {
        "bus_width": None,
        "mem_type": None,
        "memory_clock": None,
        "data_rate": None,
        "clock_source": None,
    }
    full.update(kwargs)
    with pytest.raises(UnitError, match=message):
        custom_card(**full)


# --- catalog cards -------------------------------------------------------------------------------


def test_catalog_card_bus_uses_the_official_figure() -> None:
    card = get_gpu("h200-sxm").memory_bus
    # Official 4.8 TB/s; computed 6.402 x 6144 / 8 = 4916.736 GB/s, +2.43 % (vendor rounding).
    assert card.bytes_per_s == 4800 * GB
    assert card.computed_bytes_per_s == 4_916_736_000_000
    assert card.bandwidth_differs
    assert card.bandwidth_gap == pytest.approx(4916.736 / 4800 - 1)


def test_select_card_notes_an_ambiguous_name() -> None:
    bus, card, note = select_card("a100")
    assert card is not None and card.id == "a100-80gb-sxm" and bus == card.memory_bus
    assert note == "'a100' is ambiguous; using a100-80gb-sxm (others: a100-40gb-pcie, a100-40gb-sxm, a100-80gb-pcie)"
    assert select_card("a100-80gb-sxm")[2] is None


def test_select_card_rules() -> None:
    with pytest.raises(UnitError, match="drop --bus-width"):
        select_card("h100", bus_width="256")
    with pytest.raises(UnitError, match="give --gpu NAME"):
        select_card(None)
    with pytest.raises(UnknownGPUError, match="vramcalc gpus"):
        select_card("h1000")


# --- weights -------------------------------------------------------------------------------------


def test_weights_from_params_and_dtype() -> None:
    weights = weights_from_flags("70B", "fp16", None)
    assert weights is not None
    assert (weights.weights_bytes, weights.n_params) == (140 * GB, 70 * GB)  # 70e9 x 2 bytes


def test_weights_default_dtype_is_fp16_and_said() -> None:
    weights = weights_from_flags("70B", None, None)
    assert weights is not None and weights.weights_bytes == 140 * GB
    assert weights.notes == ("--dtype not given: fp16",)


def test_weights_int4() -> None:
    weights = weights_from_flags("7B", "int4", None)
    assert weights is not None and weights.weights_bytes == 3_500_000_000  # 7e9 x 4 bits / 8


def test_weights_from_size_and_dtype_give_params() -> None:
    weights = weights_from_flags(None, "fp16", "140GB")
    assert weights is not None and weights.n_params == 70 * GB  # 140e9 bytes / 2 bytes


def test_weights_from_size_alone_have_no_param_count() -> None:
    weights = weights_from_flags(None, None, "140GB")
    assert weights is not None and (weights.weights_bytes, weights.n_params) == (140 * GB, None)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("70B", "fp16", "140GB"), "not all three"),
        ((None, "fp16", None), "needs --params or --weights"),
        (("70B", "fp7", None), "unknown 'fp7'"),
        ((None, None, "140"), "with a unit"),
        (("0", None, None), "above zero"),
    ],
)
def test_weights_flag_errors(args: tuple[str | None, str | None, str | None], message: str) -> None:
    with pytest.raises(UnitError, match=message):
        weights_from_flags(*args)


def test_kv_bytes_per_token_llama2_7b() -> None:
    # Llama-2-7B: 2 (K, V) x 32 layers x 32 kv heads x 128 head_dim x 2 bytes = 524,288 bytes (0.5 MiB).
    from vramcalc.choices import KvCacheDtype
    from vramcalc.llm.kvcache import bytes_per_token

    assert bytes_per_token(32, 32, 128, KvCacheDtype.auto, 2) == 524_288


def test_bandwidth_reads_the_mla_latent_and_the_kv_dtype(tmp_path: Path) -> None:
    """The KV bytes a decode step reads per token are the cache's own: DeepSeek-V2-Lite's MLA latent is
    27 layers x (512 + 64) x 2 B = 31,104 B (vLLM's MLA layout), and fp8 KV halves Llama-2-7B's 524,288 B."""
    from vramcalc.planning.stream import weights_from_spec

    mla = tmp_path / "mla.yaml"
    mla.write_text(
        "model: {architecture: decoder, layers: 27, hidden_size: 2048, heads: 16, ffn_size: 10944, mlp: swiglu,\n"
        "  norm: rmsnorm, position: rotary, vocab_size: 102400, kv_lora_rank: 512, qk_rope_head_dim: 64,\n"
        "  qk_nope_head_dim: 128, v_head_dim: 128}\n"
        "workload: {mode: inference, batch_size: 1, seq_len: 4096, precision: bf16}\n",
        encoding="utf-8",
    )
    assert weights_from_spec(mla).kv_bytes_per_token == 31_104
    fp8 = tmp_path / "fp8.yaml"
    fp8.write_text(
        "model: {architecture: decoder, layers: 32, hidden_size: 4096, heads: 32, ffn_size: 11008, mlp: swiglu,\n"
        "  norm: rmsnorm, position: rotary, vocab_size: 32000}\n"
        "workload: {mode: inference, batch_size: 1, seq_len: 4096, precision: bf16, kv_cache_dtype: fp8}\n",
        encoding="utf-8",
    )
    assert weights_from_spec(fp8).kv_bytes_per_token == 524_288 // 2


def test_weights_from_inference_spec(write_spec) -> None:  # type: ignore[no-untyped-def]
    path = write_spec(TINY_DECODER)
    weights = weights_from_spec(path)
    result = estimate(load_spec(path))
    assert weights.weights_bytes == result.components["parameters"]
    assert weights.n_params == result.params
    # 2 (K, V) x 2 layers x 2 kv heads x (64 / 4 = 16 head_dim) x 2 bytes (bf16) = 256.
    assert weights.kv_bytes_per_token == 256
    assert (weights.batch, weights.context_tokens) == (4, 32)


def test_training_and_encoder_specs_have_no_kv(write_spec) -> None:  # type: ignore[no-untyped-def]
    training = weights_from_spec(write_spec(TINY_DECODER.replace("mode: inference", "mode: train")))
    assert training.kv_bytes_per_token is None and "training workload" in training.notes[0]
    encoder = TINY_DECODER.replace("architecture: decoder", "architecture: encoder").replace("  kv_heads: 2\n", "")
    assert "encoder-only" in weights_from_spec(write_spec(encoder, "enc.yaml")).notes[0]


def test_spec_and_flags_are_exclusive(write_spec) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UnitError, match="not both"):
        select_weights(write_spec(TINY_DECODER), params="7B", dtype=None, weights=None)


# --- streaming, host transfer, roofline ----------------------------------------------------------


def test_design_notes_example_70b_fp16_at_2_tb_s_is_70_ms() -> None:
    # 70B x 2 bytes = 140 GB; 140e9 / 2e12 B/s = 0.070 s per decode step -> 1 / 0.07 = 14.29 tokens/s.
    stream = Streaming(140 * GB, 2000 * GB, DEFAULT_MEMORY_EFFICIENCY)
    assert stream.weight_stream_s == pytest.approx(0.070)
    assert stream.tokens_per_s_upper_bound == pytest.approx(1 / 0.070)
    # At 85 % of peak: 0.070 / 0.85 = 0.08235 s -> 12.14 tokens/s.
    assert stream.realistic_s == pytest.approx(0.070 / 0.85)
    assert stream.tokens_per_s_realistic == pytest.approx(0.85 / 0.070)


def test_default_efficiencies_are_stated_constants() -> None:
    assert DEFAULT_MEMORY_EFFICIENCY == 0.85  # middle of the 80-90 % achieved HBM bandwidth
    assert DEFAULT_HOST_EFFICIENCY == 0.8


@pytest.mark.parametrize(
    ("gen", "lanes", "gb_s"),
    [
        (3, 16, 15.753846),  # 8 GT/s x 128/130 / 8 x 16 = 15.7538 GB/s
        (4, 16, 31.507692),  # 16 GT/s x 128/130 / 8 x 16 = 31.5077
        (5, 16, 63.015385),  # 32 GT/s x 128/130 / 8 x 16 = 63.0154
        (6, 16, 121.0),  # 64 GT/s x 242/256 (FLIT) / 8 x 16 = 121.0
        (4, 8, 15.753846),  # RTX 4060 Ti: x8 link, half of gen4 x16
        (2, 16, 8.0),  # 5 GT/s x 8/10 / 8 x 16 = 8.0
        (1, 16, 4.0),  # 2.5 GT/s x 8/10 / 8 x 16 = 4.0
        (7, 16, 242.0),  # 128 GT/s x 242/256 / 8 x 16 = 242.0
    ],
)
def test_pcie_rates(gen: int, lanes: int, gb_s: float) -> None:
    assert pcie_bytes_per_s(gen, lanes) / GB == pytest.approx(gb_s, abs=1e-6)


def test_host_transfer_of_70b_fp16_over_gen5() -> None:
    report = on_card("h100-sxm", weights_from_flags("70B", "fp16", None))
    assert report.host is not None
    # 140e9 / 63.0154e9 = 2.2217 s theoretical; / 0.8 = 2.7771 s.
    assert report.host.seconds == pytest.approx(140 / 63.015385, rel=1e-6)
    assert report.host.realistic_s == pytest.approx(140 / 63.015385 / 0.8, rel=1e-6)


def test_roofline_h100_sxm_fp16() -> None:
    roof = Roofline(
        n_params=70 * GB,
        weights_bytes=140 * GB,
        batch=1,
        flops_per_s=989.4e12,
        bytes_per_s=3350 * GB,
        precision="FP16/BF16",
    )
    assert roof.intensity == 1.0  # 2 x 70e9 x 1 / 140e9
    assert roof.ridge == pytest.approx(295.343, abs=1e-3)  # 989.4e12 / 3.35e12
    assert roof.crossover_batch == pytest.approx(295.343, abs=1e-3)  # ridge x 140e9 / (2 x 70e9)
    assert (roof.bound, roof.first_compute_bound_batch) == ("memory", 296)
    at_296 = Roofline(70 * GB, 140 * GB, 296, 989.4e12, 3350 * GB, "FP16/BF16")
    assert at_296.bound == "compute"  # 296 FLOP/byte >= 295.34


def test_roofline_int4_crosses_over_four_times_sooner() -> None:
    # int4: 0.5 byte/param, intensity 2 x B / 0.5 = 4B; crossover = 295.343 / 4 = 73.84.
    roof = Roofline(70 * GB, 35 * GB, 1, 989.4e12, 3350 * GB, "FP16/BF16")
    assert roof.intensity == 4.0
    assert roof.crossover_batch == pytest.approx(73.836, abs=1e-3)


def test_roofline_uses_fp8_rate_for_fp8_weights() -> None:
    report = on_card("h100-sxm", weights_from_flags("70B", "fp8", None))
    assert report.roofline is not None and report.roofline.precision == "FP8"
    # Ridge 1978.9e12 / 3.35e12 = 590.72; 1 byte/param, so crossover = 590.72 / 2 = 295.36.
    assert report.roofline.crossover_batch == pytest.approx(295.358, abs=1e-3)


def test_roofline_skipped_without_tflops_or_params() -> None:
    no_tflops = on_card("m2-ultra", weights_from_flags("7B", "fp16", None))
    assert no_tflops.roofline is None
    assert any("no dense FP16 tensor TFLOPS" in note for note in no_tflops.notes)
    no_params = on_card("h100-sxm", weights_from_flags(None, None, "140GB"))
    assert no_params.roofline is None
    assert any("parameter count unknown" in note for note in no_params.notes)


def test_custom_card_has_no_host_link() -> None:
    bus = MemoryBus(bus_width_bits=256, data_rate_gbps=14.0)
    report = analyse(bus, weights_from_flags("7B", "fp16", None))
    assert report.host is None and any("host transfer skipped" in note for note in report.notes)


def test_weights_larger_than_the_card_are_flagged() -> None:
    report = on_card("h100-sxm", weights_from_flags("70B", "fp16", None))
    assert any("exceed the card's 80 GB" in note for note in report.notes)


def test_decode_step_with_kv_cache(write_spec) -> None:  # type: ignore[no-untyped-def]
    weights = weights_from_spec(write_spec(TINY_DECODER))
    report = on_card("a100-40gb-pcie", weights)
    assert report.kv is not None and report.roofline is not None
    assert report.roofline.batch == 4  # the spec's batch_size when --batch is not given
    assert report.kv.read_bytes_per_step == 32_768  # 256 bytes x 32 tokens x batch 4
    expected = (weights.weights_bytes + 32_768) / (1555 * GB)
    assert report.decode_step_s == pytest.approx(expected)
    batch_1 = on_card("a100-40gb-pcie", weights, batch=1)
    assert batch_1.kv is not None and batch_1.kv.read_bytes_per_step == 8192  # 256 x 32 x 1


def test_batch_must_be_positive() -> None:
    with pytest.raises(UnitError, match="expected 1 to 10,000,000 sequences"):
        on_card("t4", weights_from_flags("7B", None, None), batch=0)


@pytest.mark.parametrize(("text", "value"), [("85%", 0.85), ("0.9", 0.9), ("100%", 1.0), (None, 0.5)])
def test_parse_efficiency(text: str | None, value: float) -> None:
    assert parse_efficiency(text, 0.5, "efficiency") == pytest.approx(value)


@pytest.mark.parametrize("text", ["0", "120%", "abc", "-5%", "nan"])
def test_parse_efficiency_errors(text: str) -> None:
    with pytest.raises(UnitError):
        parse_efficiency(text, 0.5, "efficiency")


def test_bandwidth_modules_import_neither_typer_nor_rich() -> None:
    code = (
        "import sys, vramcalc.hardware.bandwidth, vramcalc.hardware.memory_bus, vramcalc.hardware.weights; "
        "print(','.join(m for m in ('typer', 'rich', 'click') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.stdout.strip() == ""


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--data-rate", "21Gbps", "--bus-width", "9" * 400], "bus width: .* longer than any number"),
        (["--data-rate", "21Gbps", "--bus-width", "9" * 40], "bus width: .* out of range"),
        (["--data-rate", "21Gbps", "--bus-width", "70000"], "at most 65,536 bits"),
        (["--data-rate", "1e308Gbps", "--bus-width", "384"], "data rate: .* out of range"),
        (["--data-rate", "1e-320Gbps", "--bus-width", "384"], "data rate: .* out of range"),
        (["--data-rate", "0.0001Gbps", "--bus-width", "384"], "between 1 Mbps and 1,000 Gbps"),
        (
            ["--memory-clock", "1e400MHz", "--memory-type", "GDDR6", "--bus-width", "384"],
            "memory clock: .* out of range",
        ),
        (["--gpu", "a100-80gb-sxm", "--efficiency", "1e-320%"], "efficiency: .* out of range"),
        (["--gpu", "a100-80gb-sxm", "--efficiency", "0.5%"], "between 1% and 100%"),
        (["--gpu", "a100-80gb-sxm", "--efficiency", "inf"], "expected a fraction"),
    ],
)
def test_hostile_bandwidth_flags_exit_2_in_one_line(flags: list[str], message: str) -> None:
    from typer.testing import CliRunner

    from vramcalc.cli import app

    result = CliRunner().invoke(app, ["bandwidth", *flags, "--params", "7B", "--dtype", "fp16", "--json"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and re.search(message, lines[0]), lines
    assert result.stdout == ""


def test_smallest_efficiency_gives_strict_json() -> None:
    from typer.testing import CliRunner

    from vramcalc.cli import app

    args = ["bandwidth", "--gpu", "a100-80gb-sxm", "--efficiency", "1%", "--params", "70B", "--dtype", "fp16"]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON (RFC 8259)")

    json.loads(result.stdout, parse_constant=refuse)  # finite everywhere at the lowest efficiency


def test_bandwidth_of_a_resnet_spec_streams_its_weights() -> None:
    """A ResNet has no transformer shape (no experts, no KV cache): bandwidth streams its parameters, as for
    any spec (ResNet-50: 25,557,032 parameters, torchvision's count, in configs/resnet-50.yaml)."""
    from vramcalc.planning.stream import weights_from_spec

    weights = weights_from_spec(Path(__file__).resolve().parents[2] / "configs" / "resnet-50.yaml")
    assert weights.n_params == 25_557_032 and weights.kv_bytes_per_token is None and weights.experts is None
