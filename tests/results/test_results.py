"""The result models are the JSON contract: what the CLI prints with --json is the models' dump, key for key
and in order, and every key it prints is in the models' JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.families import estimate
from vramcalc.hardware import bandwidth as bw
from vramcalc.hardware.lookup import get_gpu
from vramcalc.planning.budget import budget_for, estimate_on, fit_of
from vramcalc.planning.check import reserve_for
from vramcalc.results.bandwidth import BandwidthResult
from vramcalc.results.check import CheckErrorResult, CheckResult
from vramcalc.results.estimate import EstimateResult
from vramcalc.results.limits import LimitResult
from vramcalc.results.planning import FitResult, PlanResult, SweepResult
from vramcalc.spec.load import load_spec

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
CARDS = [None, "t4", "a100-80gb-sxm", "h100-sxm", "mi300x"]


def cli_json(*args: str) -> tuple[str, Any]:
    result = runner.invoke(app, list(args))
    assert result.exit_code in (0, 1), result.output
    return result.stdout, json.loads(result.stdout)


def schema_keys_cover(doc: Any, schema: dict[str, Any], defs: dict[str, Any], where: str = "") -> None:
    """Every key of ``doc`` (and of the nested documents that are models) is a property of ``schema``."""
    if "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[-1]]
    for option in schema.get("anyOf", []):
        if option.get("type") != "null":
            schema = option if "$ref" not in option else defs[option["$ref"].rsplit("/", 1)[-1]]
    if isinstance(doc, list) and "items" in schema:
        for item in doc:
            schema_keys_cover(item, schema["items"], defs, where + "[]")
    if not isinstance(doc, dict) or "properties" not in schema:
        return  # a plain mapping (components, phases...) or a scalar
    missing = sorted(set(doc) - set(schema["properties"]))
    assert not missing, f"keys the CLI prints that the schema lacks at {where or 'top'}: {missing}"
    for key, value in doc.items():
        schema_keys_cover(value, schema["properties"][key], defs, f"{where}.{key}")


def assert_in_schema(doc: Any, model: type) -> None:
    schema = model.model_json_schema()  # type: ignore[attr-defined]
    schema_keys_cover(doc, schema, schema.get("$defs", {}))


@pytest.mark.parametrize("config", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_estimate_json_is_the_model_dump(config: Path) -> None:
    spec = load_spec(config)
    for card in CARDS:
        args = ["estimate", str(config), "--json"] + (["--gpu", card] if card else [])
        text, doc = cli_json(*args)
        named = card or (spec.target.gpu if spec.target is not None else None)  # without --gpu: target.gpu
        if named is None:
            model = EstimateResult.of(estimate(spec))
        else:
            budget = budget_for(get_gpu(named), reserve_for(spec, None))
            result = estimate_on(spec, budget)  # the card's generation and, for vLLM, its batch defaults
            model = EstimateResult.of(result, budget, fit_of(result, budget))
        assert text == json.dumps(model.to_dict(), indent=2) + "\n", (config.name, card)  # values and key order
        assert doc == model.to_dict()
        assert_in_schema(doc, EstimateResult)


def test_estimate_keys_that_do_not_apply_are_absent_and_null_ones_stay() -> None:
    _, plain = cli_json("estimate", str(ROOT / "configs" / "bert-base.yaml"), "--json")
    assert "gpu" not in plain and "kv_cache_bytes" not in plain and "timeline" not in plain
    assert plain["parallel"] is None and plain["per_rank"] is False  # applies to every estimate, null here
    _, served = cli_json("estimate", str(ROOT / "configs" / "llama-3-8b-inference.yaml"), "--json", "--gpu", "h100")
    for key in ("gpu", "kv_cache_bytes", "memory_utilization", "max_concurrent_sequences"):
        assert key in served
    assert list(served)[-3:] == ["per_rank", "host_bytes", "parallel"]
    _, sharded = cli_json("estimate", str(ROOT / "configs" / "llama-2-70b-fsdp.yaml"), "--json", "--timeline")
    assert sharded["parallel"] is not None and list(sharded)[-1] == "timeline"
    for doc in (plain, served, sharded):
        assert_in_schema(doc, EstimateResult)


def test_estimate_schema_documents_every_field() -> None:
    schema = EstimateResult.model_json_schema()
    models = [schema, *schema["$defs"].values()]
    undocumented = [
        f"{model.get('title')}.{name}"
        for model in models
        for name, prop in model.get("properties", {}).items()
        if not prop.get("description")
    ]
    assert not undocumented


def test_check_json_rows_and_errors_are_in_the_schema() -> None:
    bad = ROOT / "no-such-spec.yaml"
    result = runner.invoke(
        app, ["check", str(ROOT / "configs" / "bert-large.yaml"), str(bad), "--gpu", "t4", "--gpu", "h100", "--json"]
    )
    assert result.exit_code == 2, result.output
    docs = json.loads(result.stdout)
    rows, errors = [d for d in docs if d["fits"] is not None], [d for d in docs if d["fits"] is None]
    assert len(rows) == 2 and len(errors) == 1
    for row in rows:
        assert list(row) == list(CheckResult.model_fields)
        assert_in_schema(row, CheckResult)
    assert list(errors[0]) == list(CheckErrorResult.model_fields)
    assert_in_schema(errors[0], CheckErrorResult)


def test_failing_check_row_with_suggestions_is_in_the_schema() -> None:
    _, docs = cli_json("check", str(ROOT / "examples" / "check" / "bert-large-v100.yaml"), "--json")
    assert docs[0]["fits"] is False and docs[0]["suggestions"]
    assert_in_schema(docs[0], CheckResult)


@pytest.mark.parametrize("command", ["max-batch", "max-seq"])
def test_limit_json_is_in_the_schema(command: str) -> None:
    text, doc = cli_json(command, str(ROOT / "configs" / "gpt2.yaml"), "--gpu", "a100", "--json")
    assert ("max_batch_size" in doc) == (command == "max-batch")
    assert ("seq_len" in doc) == (command == "max-batch") and ("batch_size" in doc) == (command == "max-seq")
    assert_in_schema(doc, LimitResult)
    model = LimitResult.model_validate(doc, strict=False)
    assert model.value == doc["max_batch_size" if command == "max-batch" else "max_seq_len"]


@pytest.mark.parametrize(
    "args",
    [
        ["--gpu", "h100"],
        ["--gpu", "a100", "--params", "70B"],
        ["--gpu", "rtx-4090", "--params", "7B", "--dtype", "fp8", "--batch", "64"],
        ["--gpu", "m4-max", "--weights", "14GB"],
        [str(ROOT / "configs" / "llama-3-8b-inference.yaml"), "--gpu", "l40s"],
        ["--bus-width", "384", "--memory-type", "GDDR6X", "--memory-clock", "1313MHz", "--params", "13B"],
    ],
    ids=lambda args: " ".join(Path(a).name for a in args),
)
def test_bandwidth_json_is_the_model_dump(args: list[str]) -> None:
    text, doc = cli_json("bandwidth", *args, "--json")
    assert_in_schema(doc, BandwidthResult)
    if args[0] == "--gpu" and len(args) == 2:
        bus, card, _ = bw.select_card(args[1])
        model = BandwidthResult.of(bw.analyse(bus, None, gpu=card))
        assert text == model.to_json() + "\n"
        assert "weights_bytes" not in doc and list(doc)[-1] == "notes"


@pytest.mark.parametrize(
    ("args", "model"),
    [
        (["fit", "configs/llama-2-7b.yaml", "--gpu", "t4"], FitResult),
        (["fit", "examples/check/gpt2-a100.yaml"], FitResult),
        (["sweep", "configs/gpt2.yaml", "--batch-size", "1,64", "--seq-len", "128,1024", "--gpu", "t4"], SweepResult),
        (["sweep", "configs/gpt2.yaml", "--batch-size", "1,2"], SweepResult),
        (["plan", "configs/llama-2-70b-fsdp.yaml", "--gpu", "h100"], PlanResult),
        (["plan", "configs/llama-2-70b-fsdp.yaml", "--gpu", "t4", "--max-gpus", "2"], PlanResult),
    ],
    ids=lambda value: " ".join(value[:2]) if isinstance(value, list) else "",
)
def test_planning_json_round_trips_through_its_model(args: list[str], model: type) -> None:
    text, doc = cli_json(*[str(ROOT / a) if a.endswith(".yaml") else a for a in args], "--json")
    assert_in_schema(doc, model)
    assert model.model_validate(doc, strict=False).to_json() + "\n" == text  # type: ignore[attr-defined]


def test_models_are_strict() -> None:
    with pytest.raises(ValueError, match="total_bytes_at_next"):
        LimitResult.model_validate(
            {
                **dict.fromkeys(("spec", "name", "gpu", "gpu_name", "capacity_basis"), "x"),
                **dict.fromkeys(("usable_bytes", "reserve_bytes", "available_bytes", "n_estimates"), 1),
                "total_bytes_at_max": None,
                "total_bytes_at_next": 1.5,  # bytes are ints
                "notes": [],
                "peak_bytes_by_batch": None,
            }
        )
