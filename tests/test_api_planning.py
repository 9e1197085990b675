"""The planning and catalog functions of the Python API (vramcalc.plan, fit, sweep, models, import_config):
the same documents as the commands of the same name for the same input, the same planning functions
behind both, one-line errors, TypeError for a wrong Python type, and the package's public names."""

from __future__ import annotations

import importlib
import inspect
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import vramcalc
from vramcalc.cli import app
from vramcalc.errors import SpecError, UnitError, UnknownGPUError, VramcalcError

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"
BERT = CONFIGS / "bert-base.yaml"
GPT2 = CONFIGS / "gpt2.yaml"
LLAMA_7B = CONFIGS / "llama-2-7b.yaml"
LLAMA_70B = CONFIGS / "llama-2-70b-fsdp.yaml"
SERVED = CONFIGS / "llama-3-8b-inference.yaml"
VIT = CONFIGS / "vit-base.yaml"
GPT2_A100 = ROOT / "examples" / "check" / "gpt2-a100.yaml"  # target: a100-80gb-sxm, reserve 10%
HF = ROOT / "tests" / "data" / "hf_configs"
BERT_CONFIG = HF / "bert-base-uncased.json"


def invoke(*args: Any) -> Any:
    return runner.invoke(app, [str(a) for a in args])


def cli(*args: Any) -> Any:
    """The parsed ``--json`` document of a command that ran (exit 0, or 1: does not fit)."""
    result = invoke(*args)
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def cli_error(*args: Any) -> str:
    """The one ``error:`` line of a command refused as bad input (exit 2), without ``error: ``."""
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0].removeprefix("error: ")


def mapping(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(exc.value)
    assert text and "\n" not in text
    return text


# -- the same documents as the commands ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "card", "kwargs", "args"),
    [
        (LLAMA_7B, "a100", {}, []),
        (LLAMA_7B, "a100-40gb-sxm", {"max_gpus": 8, "top": 3}, ["--max-gpus", 8, "--top", 3]),
        (LLAMA_70B, "h100-sxm", {"gpus": 8}, ["--gpus", 8]),
        (LLAMA_70B, "h100-sxm", {"gpus": 1}, ["--gpus", 1]),  # none fits: the closest plan, exit 1
        (GPT2, "a100-40gb-sxm", {"gpus": 8, "global_batch": 64}, ["--gpus", 8, "--global-batch", 64]),
        (GPT2, "l4", {"global_batch": 32, "reserve": "10%"}, ["--global-batch", 32, "--reserve", "10%"]),
        (SERVED, "l4", {}, []),
        (GPT2_A100, None, {}, []),  # the spec's target.gpu and target.reserve
    ],
)
def test_plan_matches_the_cli(spec: Path, card: str | None, kwargs: dict[str, Any], args: list[Any]) -> None:
    expected = cli("plan", spec, "--json", *(["--gpu", card] if card else []), *args)
    result = vramcalc.plan(spec, card, **kwargs)
    assert isinstance(result, vramcalc.PlanResult)
    assert result.to_dict() == expected
    assert result.min_gpus == (result.plans[0].gpus if result.plans else None)


def test_plan_takes_every_kind_of_spec_and_card() -> None:
    expected = cli("plan", BERT, "--json", "--gpu", "t4", "--gpus", 2)
    for given in (BERT, str(BERT), mapping(BERT), vramcalc.load_spec(BERT)):
        assert vramcalc.plan(given, "t4", gpus=2).to_dict() == expected
    assert vramcalc.plan(BERT, vramcalc.gpu("t4"), gpus=2).to_dict() == expected
    by_size = cli("plan", BERT, "--json", "--gpu", "16GiB")
    assert vramcalc.plan(BERT, "16GiB").to_dict() == by_size


@pytest.mark.parametrize(
    ("spec", "card", "kwargs", "args"),
    [
        (BERT, None, {}, []),
        (BERT, "t4", {"reserve": "2GiB"}, ["--gpu", "t4", "--reserve", "2GiB"]),
        (LLAMA_7B, None, {"max_gpus": 8}, ["--max-gpus", 8]),
        (GPT2_A100, None, {}, []),  # the spec's target card, with what would make it fit
        (SERVED, "l4", {}, ["--gpu", "l4"]),
    ],
)
def test_fit_matches_the_cli(spec: Path, card: str | None, kwargs: dict[str, Any], args: list[Any]) -> None:
    expected = cli("fit", spec, "--json", *args)
    result = vramcalc.fit(spec, card, **kwargs)
    assert isinstance(result, vramcalc.FitResult)
    assert result.to_dict() == expected
    assert len(result.cards) == len(expected["cards"]) > 10
    assert vramcalc.fit(mapping(spec), card, **kwargs).cards == result.cards


@pytest.mark.parametrize(
    ("spec", "card", "kwargs", "args"),
    [
        (
            BERT,
            None,
            {"batch_sizes": [1, 2, 4], "seq_lens": [128, 512]},
            ["--batch-size", "1,2,4", "--seq-len", "128,512"],
        ),
        (BERT, "t4", {"batch_sizes": "64,1,8k", "reserve": "10%"}, ["--batch-size", "1,64,8k", "--reserve", "10%"]),
        (BERT, None, {"batch_sizes": (8, 8, 2)}, ["--batch-size", "2,8"]),  # sorted, duplicates dropped
        (SERVED, "l4", {"batch_sizes": [1, 4, 16, 64]}, ["--batch-size", "1,4,16,64"]),  # vLLM's pool judges
        (VIT, "t4", {"batch_sizes": [1, 32]}, ["--batch-size", "1,32"]),
        (GPT2_A100, None, {"batch_sizes": [1, 64, 256]}, ["--batch-size", "1,64,256"]),  # target.gpu judges
    ],
)
def test_sweep_matches_the_cli(spec: Path, card: str | None, kwargs: dict[str, Any], args: list[Any]) -> None:
    expected = cli("sweep", spec, "--json", *(["--gpu", card] if card else []), *args)
    result = vramcalc.sweep(spec, card, **kwargs)
    assert isinstance(result, vramcalc.SweepResult)
    assert result.to_dict() == expected
    assert (result.gpu is None) == (expected["gpu"] is None)


@pytest.mark.parametrize("query", [None, "qwen", "llama 3", "resnet", "meta-llama/Llama-3.1-8B"])
def test_models_match_the_cli(query: str | None) -> None:
    expected = cli("models", *([query] if query else []), "--json")
    found = vramcalc.models(query)
    assert all(isinstance(entry, vramcalc.ModelResult) for entry in found)
    assert [entry.to_dict() for entry in found] == expected
    assert expected  # every query above names at least one model


def test_a_catalog_model_is_a_spec_model() -> None:
    entry = vramcalc.models("llama-3.1-8b")[0]
    spec = {"model": entry.id, "workload": {"mode": "inference", "batch_size": 1, "seq_len": 1024}}
    assert vramcalc.estimate(spec).params == cli("estimate", "--model", entry.id, "--seq-len", 1024, "--json")["params"]


@pytest.mark.parametrize(
    "config",
    ["bert-base-uncased.json", "gemma-2-2b.json", "gpt-j-6b.json", "vit-base-patch16-224.json", "t5-small.json"],
)
def test_import_config_matches_the_cli(config: str, tmp_path: Path) -> None:
    result = invoke("import", HF / config)
    assert result.exit_code == 0, result.output
    imported = vramcalc.import_config(HF / config)
    assert isinstance(imported, vramcalc.ImportResult)
    assert imported.to_yaml() == result.stdout  # the file the command writes, byte for byte
    assert imported.spec == yaml.safe_load(result.stdout)
    notes = [line.removeprefix("# note: ") for line in result.stdout.splitlines() if line.startswith("# note: ")]
    assert imported.notes == notes
    assert f"(model_type {imported.model_type})" in result.stdout.splitlines()[0]
    written = tmp_path / "spec.yaml"
    written.write_text(result.stdout, encoding="utf-8")
    assert vramcalc.estimate(imported.spec).to_dict() == cli("estimate", written, "--json")


def test_import_config_from_a_mapping() -> None:
    from_file = vramcalc.import_config(str(BERT_CONFIG))
    from_mapping = vramcalc.import_config(json.loads(BERT_CONFIG.read_text(encoding="utf-8")))
    assert from_mapping.spec == from_file.spec and from_mapping.notes == from_file.notes
    assert from_mapping.config == "<config>" and from_file.config == str(BERT_CONFIG)
    assert from_mapping.to_yaml().startswith("# Imported by vramcalc from <config> (model_type bert).\n")


# -- one planning function behind the command and the function -----------------------------------------


@pytest.mark.parametrize(
    ("module", "function", "args", "call"),
    [
        (
            "vramcalc.planning.plan_layouts",
            "plans_for",
            ["plan", BERT, "--gpu", "t4", "--json"],
            lambda: vramcalc.plan(BERT, "t4"),
        ),
        ("vramcalc.planning.fit", "fit_report", ["fit", BERT, "--json"], lambda: vramcalc.fit(BERT)),
        (
            "vramcalc.planning.sweep",
            "sweep",
            ["sweep", BERT, "--batch-size", "1,2", "--json"],
            lambda: vramcalc.sweep(BERT, batch_sizes=[1, 2]),
        ),
        ("vramcalc.spec.presets", "matching", ["models", "qwen", "--json"], lambda: vramcalc.models("qwen")),
        (
            "vramcalc.spec.hf_import",
            "import_spec",
            ["import", BERT_CONFIG],
            lambda: vramcalc.import_config(BERT_CONFIG),
        ),
    ],
)
def test_the_command_and_the_function_call_the_same_planning_function(
    monkeypatch: pytest.MonkeyPatch, module: str, function: str, args: list[Any], call: Callable[[], Any]
) -> None:
    owner = importlib.import_module(module)
    real = getattr(owner, function)
    calls: list[str] = []

    def spy(*a: Any, **k: Any) -> Any:
        calls.append(function)
        return real(*a, **k)

    monkeypatch.setattr(owner, function, spy)
    assert invoke(*args).exit_code == 0
    assert calls == [function]
    call()
    assert calls == [function, function]


# -- bad input: one line, the CLI's words -------------------------------------------------------------


def test_plan_input_errors_are_the_clis() -> None:
    line = cli_error("plan", BERT, "--gpu", "t4", "--gpus", 8, "--max-gpus", 16)
    with pytest.raises(VramcalcError) as info:
        vramcalc.plan(BERT, "t4", gpus=8, max_gpus=16)
    assert one_line(info) == line
    line = cli_error("plan", SERVED, "--gpu", "l4", "--global-batch", 8)
    with pytest.raises(SpecError) as info:
        vramcalc.plan(SERVED, "l4", global_batch=8)
    assert line.endswith(one_line(info)) and "--global-batch: only for training" in line
    line = cli_error("plan", GPT2, "--gpu", "a100-80gb-sxm", "--global-batch", 10**8)
    with pytest.raises(SpecError) as info:
        vramcalc.plan(GPT2, "a100-80gb-sxm", global_batch=10**8)
    assert line.endswith(one_line(info)) and "--global-batch: expected 1 to" in line


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: vramcalc.plan(BERT), SpecError, "target.gpu: no GPU given"),
        (lambda: vramcalc.plan(BERT, "t4", gpus=0), SpecError, "--gpus: expected 1 to 100,000, got 0"),
        (lambda: vramcalc.plan(BERT, "t4", max_gpus=100_001), SpecError, "--max-gpus: expected 1 to 100,000"),
        (lambda: vramcalc.plan(BERT, "t4", top=0), SpecError, "--top: expected 1 or more, got 0"),
        (lambda: vramcalc.plan(BERT, "t4", reserve="10"), UnitError, "reserve"),
        (lambda: vramcalc.plan(BERT, "no-such-card"), UnknownGPUError, "no-such-card"),
        (lambda: vramcalc.fit(BERT, max_gpus=0), SpecError, "--max-gpus: expected 1 to 100,000, got 0"),
        (lambda: vramcalc.fit(BERT, reserve="lots"), UnitError, "reserve"),
        (lambda: vramcalc.sweep(BERT, batch_sizes=[]), SpecError, "--batch-size: no values"),
        (lambda: vramcalc.sweep(BERT, batch_sizes=[0]), SpecError, "--batch-size: 0 is outside 1.."),
        (lambda: vramcalc.sweep(BERT, batch_sizes="1,,2"), UnitError, "--batch-size"),
        (lambda: vramcalc.sweep(VIT, batch_sizes=[1], seq_lens=[128]), SpecError, "no seq_len"),
        (lambda: vramcalc.models("zzzz-no-such-model"), SpecError, "no catalog model matches 'zzzz-no-such-model'"),
        (lambda: vramcalc.import_config(HF / "unknown-mamba.json"), SpecError, "model_type: 'mamba' is not supported"),
        (lambda: vramcalc.import_config({"model_type": "bert"}), SpecError, "^<config>: "),
        (lambda: vramcalc.import_config(HF / "no-such.json"), SpecError, "no-such.json"),
    ],
)
def test_bad_input_is_one_line(call: Callable[[], Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match) as info:
        call()
    one_line(info)


def test_sweep_and_models_errors_are_the_clis() -> None:
    line = cli_error("sweep", BERT, "--batch-size", "0,2")
    with pytest.raises(SpecError) as info:
        vramcalc.sweep(BERT, batch_sizes="0,2")
    assert line.endswith(one_line(info))
    line = cli_error("models", "zzzz", "no-such")
    with pytest.raises(SpecError) as info:
        vramcalc.models("zzzz no-such")
    assert one_line(info) == line
    line = cli_error("import", HF / "unknown-mamba.json")
    with pytest.raises(SpecError) as info:
        vramcalc.import_config(HF / "unknown-mamba.json")
    assert one_line(info) == line


# -- a wrong Python type: TypeError naming the argument -------------------------------------------------


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: vramcalc.plan(42), "^spec: expected a Spec, a path or a mapping, got int$"),
        (lambda: vramcalc.plan(BERT, 80), "^gpu: expected a card name, got int$"),
        (lambda: vramcalc.plan(BERT, "t4", gpus="8"), "^gpus: expected an int, got str$"),
        (lambda: vramcalc.plan(BERT, "t4", max_gpus=8.0), "^max_gpus: expected an int, got float$"),
        (lambda: vramcalc.plan(BERT, "t4", top=None), "^top: expected an int, got NoneType$"),
        (lambda: vramcalc.plan(BERT, "t4", top=True), "^top: expected an int, got bool$"),
        (lambda: vramcalc.plan(BERT, "t4", global_batch="64"), "^global_batch: expected an int, got str$"),
        (lambda: vramcalc.plan(BERT, "t4", reserve=0.1), "^reserve: expected text such as '10%' or '2GiB', got float$"),
        (lambda: vramcalc.fit(BERT, max_gpus="64"), "^max_gpus: expected an int, got str$"),
        (lambda: vramcalc.fit(BERT, reserve=2), "^reserve: expected text"),
        (lambda: vramcalc.fit([BERT]), "^spec: expected a Spec"),
        (lambda: vramcalc.sweep(BERT, batch_sizes=8), "^batch_sizes: expected a list of ints or text"),
        (lambda: vramcalc.sweep(BERT, batch_sizes={1, 2}), "^batch_sizes: expected a list of ints or text"),
        (lambda: vramcalc.sweep(BERT, batch_sizes=[1, "2"]), r"^batch_sizes: expected ints, got a str \('2'\)$"),
        (lambda: vramcalc.sweep(BERT, batch_sizes=[1], seq_lens=[512.0]), "^seq_lens: expected ints, got a float"),
        (lambda: vramcalc.sweep(BERT, batch_sizes=[True]), "^batch_sizes: expected ints, got a bool"),
        (lambda: vramcalc.models(["qwen"]), "^query: expected text, got list$"),
        (lambda: vramcalc.import_config(42), "^config: expected a path or a mapping, got int$"),
        (lambda: vramcalc.check(BERT, "t4", max_gpus="4"), "^max_gpus: expected an int, got str$"),
        (lambda: vramcalc.estimate(BERT, "t4", reserve=5), "^reserve: expected text"),
        (lambda: vramcalc.bandwidth("h100", batch="8"), "^batch: expected an int, got str$"),
        (lambda: vramcalc.bandwidth(gpu=3.5), "^gpu: expected a card name, got float$"),
        (lambda: vramcalc.bandwidth("24GB", memory_type=[6141]), "^memory_type: expected text, got list$"),
        (lambda: vramcalc.bandwidth("h100", params=3.5), "^params: expected text or int, got float$"),
        (lambda: vramcalc.bandwidth("h100", efficiency=[1]), "^efficiency: expected text or int or float, got list$"),
        (lambda: vramcalc.gpu(80), "^name: expected a card name, got int$"),
    ],
)
def test_wrong_python_type_is_a_type_error_naming_the_argument(call: Callable[[], Any], match: str) -> None:
    with pytest.raises(TypeError, match=match):
        call()


@pytest.mark.parametrize("function", [vramcalc.plan, vramcalc.fit, vramcalc.sweep])
def test_options_are_keyword_only(function: Callable[..., Any]) -> None:
    params = list(inspect.signature(function).parameters.values())
    assert [p.name for p in params[:2]] == ["spec", "gpu"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[2:])
    with pytest.raises(TypeError):
        function(BERT, "t4", "10%")


# -- the public names -------------------------------------------------------------------------------


NEW = ("plan", "sweep", "fit", "models", "import_config", "PlanResult", "SweepResult", "FitResult")


def test_dir_lists_exactly_the_public_names() -> None:
    assert dir(vramcalc) == sorted(vramcalc.__all__)
    assert "__version__" in vramcalc.__all__
    assert not {"Any", "annotations", "TYPE_CHECKING", "importlib"} & set(dir(vramcalc))
    assert set(NEW) | {"ModelResult", "ImportResult", "VramcalcError"} <= set(vramcalc.__all__)
    for name in vramcalc.__all__:
        assert getattr(vramcalc, name) is not None


def test_new_functions_import_neither_typer_nor_rich() -> None:
    code = (
        "import sys, vramcalc\n"
        "spec = 'configs/bert-base.yaml'\n"
        "vramcalc.plan(spec, 't4', gpus=2)\n"
        "vramcalc.fit(spec)\n"
        "vramcalc.sweep(spec, 't4', batch_sizes='1,2', seq_lens=[128])\n"
        "vramcalc.models('qwen')\n"
        "vramcalc.import_config('tests/data/hf_configs/bert-base-uncased.json').to_yaml()\n"
        "print(sorted(m for m in ('typer', 'rich', 'click') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
