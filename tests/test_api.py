"""The Python API (vramcalc.load_spec, estimate, max_batch, max_seq, check, gpu, bandwidth): the same
numbers and verdicts as the CLI's --json output for the same input, one-line errors naming the key or the
card, and an import that loads neither typer nor rich."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import vramcalc
from vramcalc.cli import app
from vramcalc.errors import SpecError, UnitError, UnknownGPUError

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
BERT = ROOT / "configs" / "bert-base.yaml"
GPT2_A100 = ROOT / "examples" / "check" / "gpt2-a100.yaml"  # target: a100-80gb-sxm, reserve 10%
BERT_V100 = ROOT / "examples" / "check" / "bert-large-v100.yaml"
SERVED = ROOT / "configs" / "llama-3-8b-inference.yaml"


def flags(card: str | None, reserve: str | None) -> list[str]:
    return [*(["--gpu", card] if card else []), *(["--reserve", reserve] if reserve else [])]


def cli(*args: Any) -> Any:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def mapping(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("spec", "card", "reserve"),
    [
        (BERT, None, None),
        (BERT, "a100", None),
        (BERT, "t4", "2GiB"),
        (SERVED, "h100", "10%"),
        (GPT2_A100, "a100-80gb-sxm", None),  # the spec's target.reserve applies
        (ROOT / "configs" / "llama-2-70b-fsdp.yaml", "h100-sxm", None),
        (ROOT / "configs" / "llama-2-7b-qlora.yaml", "rtx-4090", None),
    ],
)
def test_estimate_matches_the_cli(spec: Path, card: str | None, reserve: str | None) -> None:
    expected = cli("estimate", spec, "--json", *flags(card, reserve))
    for given in (spec, str(spec), mapping(spec), vramcalc.load_spec(spec)):
        result = vramcalc.estimate(given, card, reserve=reserve)
        assert isinstance(result, vramcalc.EstimateResult)
        assert result.to_dict() == expected
    if card is not None:
        on_entry = vramcalc.estimate(spec, vramcalc.gpu(card), reserve=reserve)
        assert on_entry.to_dict() == expected


def test_estimate_numbers_for_a_notebook() -> None:
    result = vramcalc.estimate(BERT, "a100")
    assert result.total_bytes == result.peak_allocated_bytes + sum(result.overhead.values())
    assert result.gpu is not None and result.gpu.fits
    assert result.gpu.headroom_bytes == result.gpu.available_bytes - result.gpu.needed_bytes
    assert vramcalc.estimate(BERT).gpu is None
    assert GPT2_A100.exists() and vramcalc.estimate(GPT2_A100, "a100-80gb-sxm").gpu.reserve_bytes > 0  # type: ignore[union-attr]


def test_estimate_gives_the_verdict_on_the_target_card() -> None:
    """Without a card the spec's target.gpu and target.reserve are used, as on the command line and in check."""
    result = vramcalc.estimate(GPT2_A100)
    assert result.to_dict() == cli("estimate", GPT2_A100, "--json")
    assert result.to_dict() == vramcalc.estimate(GPT2_A100, "a100-80gb-sxm", reserve="10%").to_dict()
    row = vramcalc.check(GPT2_A100)
    assert result.gpu is not None and (result.gpu.fits, result.gpu.headroom_bytes) == (row.fits, row.headroom_bytes)


def test_bandwidth_of_a_spec_in_a_dtype_on_its_target_card(tmp_path: Path) -> None:
    spec = tmp_path / "served.yaml"
    spec.write_text(SERVED.read_text(encoding="utf-8") + "\ntarget: {gpu: h100-sxm}\n", encoding="utf-8")
    expected = cli("bandwidth", spec, "--dtype", "fp8", "--json")
    assert vramcalc.bandwidth(spec=spec, dtype="fp8").to_dict() == expected
    assert expected["gpu"] == "h100-sxm" and expected["dtype"] == "fp8"
    quantized = mapping(SERVED) | {"target": {"gpu": "h100-sxm"}}
    quantized["workload"] |= {"quantization": "fp8"}
    assert vramcalc.bandwidth(spec=quantized).weights_bytes == expected["weights_bytes"]


def test_estimate_timeline_matches_the_cli() -> None:
    expected = cli("estimate", BERT, "--json", "--timeline")
    assert vramcalc.estimate(BERT, timeline=True).to_dict() == expected


def test_reserve_needs_a_card() -> None:
    with pytest.raises(SpecError, match="reserve: needs a gpu"):
        vramcalc.estimate(BERT, reserve="10%")
    with pytest.raises(UnitError, match="reserve"):
        vramcalc.estimate(BERT, "a100", reserve="10")


@pytest.mark.parametrize(
    ("spec", "card", "reserve"),
    [(BERT, "a100", None), (GPT2_A100, None, None), (GPT2_A100, "h100", "5%"), (SERVED, "h100", None)],
)
def test_max_batch_matches_the_cli(spec: Path, card: str | None, reserve: str | None) -> None:
    expected = cli("max-batch", spec, "--json", *flags(card, reserve))
    result = vramcalc.max_batch(spec, card, reserve=reserve)
    assert result.to_dict() == expected
    assert result.max_batch_size == expected["max_batch_size"] > 0
    assert vramcalc.max_batch(mapping(spec), card, reserve=reserve).max_batch_size == result.max_batch_size


def test_max_seq_matches_the_cli() -> None:
    expected = cli("max-seq", BERT, "--json", "--gpu", "t4")
    result = vramcalc.max_seq(BERT, "t4")
    assert result.to_dict() == expected and result.max_seq_len == result.value == expected["max_seq_len"]


def test_max_batch_needs_a_card() -> None:
    with pytest.raises(SpecError, match="target.gpu: no GPU given") as info:
        vramcalc.max_batch(BERT)
    assert str(BERT) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(("spec", "card"), [(BERT_V100, None), (BERT, "t4"), (GPT2_A100, None), (SERVED, "l4")])
def test_check_matches_the_cli(spec: Path, card: str | None) -> None:
    expected = cli("check", spec, "--json", *(["--gpu", card] if card else []))
    assert len(expected) == 1
    result = vramcalc.check(spec, card)
    assert result.to_dict() == expected[0]
    assert result.fits == expected[0]["fits"]
    assert result.headroom_bytes == result.available_bytes - result.needed_bytes
    if not result.fits:
        assert result.suggestions and result.suggestions[0].total_bytes <= result.available_bytes


def test_check_and_estimate_agree() -> None:
    for card in ("t4", "a10", "h100"):
        verdict = vramcalc.estimate(BERT, card).gpu
        row = vramcalc.check(BERT, card)
        assert verdict is not None
        assert (row.fits, row.needed_bytes, row.available_bytes) == (
            verdict.fits,
            verdict.needed_bytes,
            verdict.available_bytes,
        )


def test_gpu_lookup() -> None:
    card = vramcalc.gpu("h100-sxm")
    assert isinstance(card, vramcalc.GPU) and card.id == "h100-sxm" and card.capacity_bytes > 0
    assert vramcalc.gpu("a100").id == cli("estimate", BERT, "--json", "--gpu", "a100")["gpu"]["id"]
    with pytest.raises(UnknownGPUError, match="h100") as info:
        vramcalc.gpu("h1000")
    assert "\n" not in str(info.value)
    with pytest.raises(UnknownGPUError):
        vramcalc.estimate(BERT, "no-such-card")


@pytest.mark.parametrize(
    ("card", "kwargs", "args"),
    [
        ("h100", {}, []),
        ("a100", {"params": "70B"}, ["--params", "70B"]),
        ("a100", {"params": 70_000_000_000}, ["--params", "70B"]),
        ("rtx-4090", {"params": "7B", "dtype": "fp8", "batch": 64}, ["--params", "7B", "--dtype=fp8", "--batch", 64]),
        ("m4-max", {"weights": "14GB", "efficiency": 0.7}, ["--weights", "14GB", "--efficiency", "70%"]),
        ("m4-max", {"weights": 14_000_000_000}, ["--weights", "14GB"]),
        ("l40s", {"spec": SERVED}, [SERVED]),
        ("l40s", {"spec": mapping(SERVED)}, [SERVED]),
        ("h100", {"spec": BERT, "host_efficiency": "50%"}, [BERT, "--host-efficiency", "50%"]),
        (
            None,
            {"bus_width": 384, "memory_type": "GDDR6X", "memory_clock": "1313MHz", "params": "13B"},
            ["--bus-width", "384", "--memory-type", "GDDR6X", "--memory-clock", "1313MHz", "--params", "13B"],
        ),
        # a capacity as the card, with its bus: the capacity is kept (custom-32gb, 32 x 10^9 bytes)
        (
            "32GB",
            {"bus_width": 256, "data_rate": "20Gbps", "params": "7B"},
            ["--bus-width", "256", "--data-rate", "20Gbps", "--params", "7B"],
        ),
    ],
)
def test_bandwidth_matches_the_cli(card: str | None, kwargs: dict[str, Any], args: list[Any]) -> None:
    expected = cli("bandwidth", *args, *flags(card, None), "--json")
    result = vramcalc.bandwidth(card, **kwargs)
    assert isinstance(result, vramcalc.BandwidthResult)
    assert result.to_dict() == expected
    if card == "32GB":  # not a catalog card: vramcalc.gpu() does not take it
        assert (result.gpu, result.capacity_bytes) == ("custom-32gb", 32 * 10**9)
    elif card is not None:
        assert vramcalc.bandwidth(vramcalc.gpu(card), **kwargs).to_dict() == expected


def test_bandwidth_input_errors() -> None:
    with pytest.raises(UnitError, match="not both"):
        vramcalc.bandwidth("h100", spec=BERT, params="7B")
    with pytest.raises(UnitError, match="dtype: unknown"):
        vramcalc.bandwidth("h100", spec=BERT, dtype="fp12")
    with pytest.raises(SpecError, match="drop bus_width"):
        vramcalc.bandwidth(vramcalc.gpu("h100"), bus_width=256)


@pytest.mark.parametrize(
    ("change", "key", "message"),
    [
        ({"workload": {"batch_size": 0}}, "workload.batch_size", "greater than"),
        ({"workload": {"precision": "fp12"}}, "workload.precision", ""),
        ({"model": {"layerz": 12}}, "model.layerz", "unknown key"),
        ({"extra": 1}, "extra", "unknown key"),
    ],
)
def test_bad_mapping_is_a_spec_error_naming_the_key(change: dict[str, Any], key: str, message: str) -> None:
    data = mapping(BERT)
    for section, value in change.items():
        data[section] = {**data[section], **value} if isinstance(value, dict) else value
    for call in (vramcalc.load_spec, vramcalc.estimate, vramcalc.check):
        with pytest.raises(SpecError) as info:
            call(data)
        text = str(info.value)
        assert text.startswith(f"<spec>: {key}: ") and message in text and "\n" not in text


def test_bad_inputs() -> None:
    with pytest.raises(SpecError) as info:
        vramcalc.load_spec({})
    assert str(info.value).splitlines() == ["<spec>: model: Field required", "<spec>: workload: Field required"]
    with pytest.raises(SpecError, match="no-such.yaml"):
        vramcalc.load_spec(ROOT / "no-such.yaml")
    with pytest.raises(TypeError, match="spec"):
        vramcalc.estimate(42)  # type: ignore[arg-type]


def test_public_names_resolve() -> None:
    for name in vramcalc.__all__:
        assert getattr(vramcalc, name) is not None
    assert set(vramcalc.__all__) <= set(dir(vramcalc))
    with pytest.raises(AttributeError):
        vramcalc.no_such_name  # type: ignore[attr-defined]  # noqa: B018


def _python(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return out.stdout.strip()


def test_api_imports_neither_typer_nor_rich() -> None:
    code = (
        "import vramcalc, sys; vramcalc.estimate('configs/bert-base.yaml', 'a100'); "
        "print('typer' in sys.modules or 'rich' in sys.modules)"
    )
    assert _python(code) == "False"


def test_import_is_lazy() -> None:
    code = (
        "import sys, vramcalc; print(sorted(m for m in sys.modules if m.startswith(('vramcalc.', 'pydantic', 'yaml'))))"
    )
    assert _python(code) == "['vramcalc.version']"
    code = (
        "import sys, vramcalc; vramcalc.estimate('configs/bert-base.yaml'); "
        "print(sorted(m for m in sys.modules if m.startswith('vramcalc.results.')))"
    )
    assert _python(code) == "['vramcalc.results.base', 'vramcalc.results.estimate', 'vramcalc.results.timeline']"


def test_readme_python_example_prints_what_its_comments_say() -> None:
    from doc_blocks import printed_by, python_example

    code, expected = python_example(ROOT / "README.md", "## Python API")
    assert expected
    assert printed_by(code, "README.md", ROOT) == expected


def test_an_error_message_is_at_most_2000_characters() -> None:
    """An error quoting a huge input keeps its start (what went wrong, and where) and its end, 2,000
    characters in all, as the CLI's lines are."""
    import vramcalc
    from vramcalc.api import MAX_MESSAGE
    from vramcalc.errors import UnknownGPUError

    with pytest.raises(UnknownGPUError) as caught:
        vramcalc.gpu("y" * 100_000)
    message = str(caught.value)
    assert len(message) == MAX_MESSAGE == 2000 and "…" in message
    assert message.startswith("unknown GPU 'yyy")  # what went wrong comes first
