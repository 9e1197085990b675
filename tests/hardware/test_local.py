"""`--gpu local`: NVML reading (through an injected fake; this machine has no GPU), catalog matching,
free memory as the budget, and clear errors when NVML or a GPU is missing."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.errors import LocalGPUError
from vramcalc.hardware import local as local_gpu
from vramcalc.hardware.catalog import load_catalog
from vramcalc.hardware.local import NvmlReading, catalog_name, match_catalog, read_nvml
from vramcalc.hardware.lookup import get_gpu
from vramcalc.units import MiB

ROOT = Path(__file__).resolve().parents[2]
BERT = str(ROOT / "configs" / "bert-base.yaml")
runner = CliRunner()
#: An H100 SXM as NVML reports it: name as nvidia-smi prints it, total 81,559 MiB (the catalog's driver
#: total), 20,000 MiB held by another process.
H100 = NvmlReading(index=0, name="NVIDIA H100 80GB HBM3", total_bytes=81_559 * MiB, free_bytes=61_559 * MiB)


@pytest.mark.parametrize(
    ("nvml_name", "total_mib", "catalog_id"),
    [
        # names as nvidia-smi --query-gpu=name prints them
        ("NVIDIA H100 80GB HBM3", 81_559, "h100-sxm"),
        ("NVIDIA H100 PCIe", 81_559, "h100-pcie"),
        ("NVIDIA A100-SXM4-80GB", 81_920, "a100-80gb-sxm"),
        ("NVIDIA A100-PCIE-40GB", 40_960, "a100-40gb-pcie"),
        ("Tesla V100-SXM2-16GB", 16_160, "v100-16gb-sxm2"),
        ("NVIDIA GeForce RTX 4090", 24_564, "rtx-4090"),
        ("NVIDIA GeForce RTX 3090 Ti", 24_564, "rtx-3090-ti"),
        ("NVIDIA RTX A6000", 49_140, "rtx-a6000"),
        ("NVIDIA L40S", 46_068, "l40s"),
        ("NVIDIA H200", 143_771, "h200-sxm"),
        ("NVIDIA H200 NVL", 143_771, "h200-nvl"),
        ("Tesla T4", 15_360, "t4"),
    ],
)
def test_nvml_names_match_the_catalog(nvml_name: str, total_mib: int, catalog_id: str) -> None:
    reading = NvmlReading(0, nvml_name, total_mib * MiB, total_mib * MiB)
    assert match_catalog(load_catalog(), reading).id == catalog_id


def test_ambiguous_short_name_picks_the_closest_capacity() -> None:
    # "A100" alone names four cards; 40,960 MiB total picks a 40 GB variant, not the 80 GB default.
    reading = NvmlReading(0, "NVIDIA A100", 40_960 * MiB, 40_000 * MiB)
    assert match_catalog(load_catalog(), reading).capacity == 40


def test_catalog_name() -> None:
    assert catalog_name("NVIDIA GeForce RTX 4090") == "rtx-4090"
    assert catalog_name("NVIDIA A100-SXM4-80GB") == "a100-sxm4-80gb"


def test_unknown_card_is_a_clear_error() -> None:
    reading = NvmlReading(0, "NVIDIA Quadro P620", 2_048 * MiB, 2_000 * MiB)
    with pytest.raises(LocalGPUError, match=r"'NVIDIA Quadro P620' is not in the catalog; name the closest card"):
        match_catalog(load_catalog(), reading)


def test_local_gpu_budget_is_free_memory() -> None:
    gpu = local_gpu.local_gpu("local", load_catalog(), reader=lambda index: H100)
    assert gpu.free_bytes == 61_559 * MiB  # the one card type, carrying the reading
    assert gpu.id == "h100-sxm" and gpu.hopper_or_newer
    assert gpu.usable_bytes == 61_559 * MiB
    assert "free now per NVML: 61,559 of 81,559 MiB on device 0 (NVIDIA H100 80GB HBM3)" == gpu.usable_basis


def test_device_index() -> None:
    assert local_gpu.device_index("local") == 0
    assert local_gpu.device_index("LOCAL:3") == 3
    assert not local_gpu.is_local("localhost")


def fake_pynvml(names: list[object], init_error: bool = False) -> types.ModuleType:
    """A stand-in for nvidia-ml-py with the calls read_nvml makes; records shutdowns."""
    module = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    def init() -> None:
        if init_error:
            raise NVMLError("Driver Not Loaded")

    module.NVMLError = NVMLError  # type: ignore[attr-defined]
    module.calls = []  # type: ignore[attr-defined]
    module.nvmlInit = init  # type: ignore[attr-defined]
    module.nvmlShutdown = lambda: module.calls.append("shutdown")  # type: ignore[attr-defined]
    module.nvmlDeviceGetCount = lambda: len(names)  # type: ignore[attr-defined]
    module.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    module.nvmlDeviceGetName = lambda handle: names[handle]  # type: ignore[attr-defined]
    memory = types.SimpleNamespace(total=81_559 * MiB, free=61_559 * MiB, used=20_000 * MiB)
    module.nvmlDeviceGetMemoryInfo = lambda handle: memory  # type: ignore[attr-defined]
    return module


def test_read_nvml_with_fake_module(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_pynvml(["NVIDIA A10", b"NVIDIA H100 80GB HBM3"])  # old bindings return bytes
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert read_nvml(1) == NvmlReading(1, "NVIDIA H100 80GB HBM3", 81_559 * MiB, 61_559 * MiB)
    with pytest.raises(LocalGPUError, match=r"--gpu local:2: NVML sees 2 GPU\(s\), numbered 0 to 1"):
        read_nvml(2)
    assert fake.calls == ["shutdown", "shutdown"]  # type: ignore[attr-defined]


def test_read_nvml_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([]))
    with pytest.raises(LocalGPUError, match="NVML sees no GPU"):
        read_nvml(0)
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([], init_error=True))
    with pytest.raises(LocalGPUError, match=r"no NVIDIA driver or GPU found \(NVML: Driver Not Loaded\)"):
        read_nvml(0)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed: import raises ImportError
    with pytest.raises(LocalGPUError, match=r"NVML bindings: pip install nvidia-ml-py \("):
        read_nvml(0)


def test_real_pynvml_gives_a_reading_or_a_clean_error() -> None:
    pytest.importorskip("pynvml")
    try:
        reading = read_nvml(0)
    except LocalGPUError as exc:  # the usual case on CPU-only machines: no driver
        assert str(exc).startswith("--gpu local")
    else:
        assert 0 <= reading.free_bytes <= reading.total_bytes


def test_cli_estimate_gpu_local(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_gpu, "read_nvml", lambda index: H100)
    result = runner.invoke(app, ["estimate", BERT, "--gpu", "local", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["gpu"]["id"] == "h100-sxm"
    assert doc["gpu"]["usable_bytes"] == 61_559 * MiB
    assert doc["gpu"]["headroom_bytes"] == 61_559 * MiB - doc["total_bytes"]
    assert doc["gpu"]["usable_basis"].startswith("free now per NVML")
    table = runner.invoke(app, ["estimate", BERT, "--gpu", "local"])
    assert "free now per NVML: 61,559 of 81,559 MiB" in table.stdout


def test_cli_other_commands_take_gpu_local(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_gpu, "read_nvml", lambda index: H100)
    bandwidth = runner.invoke(app, ["bandwidth", "--gpu", "local", "--params", "7B"])
    assert bandwidth.exit_code == 0, bandwidth.output
    assert "H100" in bandwidth.stdout
    report = runner.invoke(app, ["report", BERT, "--gpu", "local"])
    assert report.exit_code == 0, report.output
    assert 'class="capacity"' in report.stdout
    assert get_gpu("h100-sxm").usable_bytes == 81_559 * MiB  # the catalog entry itself is unchanged


def test_cli_gpu_local_without_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    result = runner.invoke(app, ["estimate", BERT, "--gpu", "local"])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        "error: --gpu local needs NVML bindings: pip install nvidia-ml-py (NVIDIA's bindings, in the environment "
        "vramcalc runs in)"
    )


def test_the_install_hint_names_the_package_of_the_nvml_extra() -> None:
    # The hint installs NVIDIA's package itself, which works for any installation; the nvml extra of a
    # clone installs the same package.
    import tomllib
    from pathlib import Path

    from vramcalc.hardware.local import INSTALL_HINT

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8"))
    (requirement,) = pyproject["project"]["optional-dependencies"]["nvml"]
    package = requirement.split(">")[0].split("=")[0].strip()
    assert package == "nvidia-ml-py"
    assert INSTALL_HINT.startswith(f"pip install {package} ")
    assert "vramcalc-cli" not in INSTALL_HINT and "[" not in INSTALL_HINT
