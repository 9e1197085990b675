"""One serving verdict: for a vLLM serving spec every command judges by vLLM's pool and shows what it judged.

The property tests draw random serving specs (decoder shapes with grouped-query attention and sliding
windows, prompt and output lengths, batch sizes, memory_utilization, tensor parallelism), cards and reserves,
and compare what ``check``, ``estimate``, ``sweep``, ``max-batch`` and ``plan`` compute for them with one
another, never with a stored number. The regression tests are the disagreements users met: each names the
commands whose answers must be the same.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import yaml
from cli_json import run_json as _json
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.hardware.catalog import load_catalog
from vramcalc.hardware.lookup import get_gpu
from vramcalc.planning.budget import Budget, budget_for, estimate_on, fit_on
from vramcalc.planning.fit import check_on
from vramcalc.planning.limits import max_batch
from vramcalc.planning.outcome import estimate_outcome
from vramcalc.planning.plan_layouts import best_plans
from vramcalc.planning.sweep import sweep
from vramcalc.spec.load import parse_spec
from vramcalc.spec.models import Spec
from vramcalc.spec.target import parse_reserve
from vramcalc.units import GiB

runner = CliRunner()
CARDS = [gpu.id for gpu in load_catalog().gpus]
RESERVES = [None, "0%", "5%", "12.5%", "1GiB", "3GiB"]
#: ``SERVING_EXAMPLES=1000 pytest tests/planning/test_serving_verdict.py`` explores that many examples per
#: property; by default 150, derandomized, so CI is reproducible.
EXAMPLES = int(os.environ.get("SERVING_EXAMPLES", "0"))
PROPERTY = settings(
    max_examples=EXAMPLES or 150,
    deadline=None,
    derandomize=not EXAMPLES,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@st.composite
def serving_specs(draw: st.DrawFn) -> dict[str, Any]:
    """A decoder served by vLLM: 1-16 KV heads sharing 1-4 query heads each, head_dim 64 or 128, 2-64
    layers, optionally sliding windows on every layer, every other layer or 5 layers in 6; a context of up
    to 32k tokens, optionally a longer max_model_len, a scheduler budget and a pinned release."""
    kv_heads = draw(st.sampled_from([1, 2, 4, 8, 16]))
    heads = kv_heads * draw(st.sampled_from([1, 2, 4]))
    head_dim = draw(st.sampled_from([64, 128]))
    layers = draw(st.integers(2, 64))
    model = {
        "architecture": "decoder",
        "layers": layers,
        "hidden_size": heads * head_dim,
        "heads": heads,
        "kv_heads": kv_heads,
        "ffn_size": draw(st.sampled_from([2, 3, 4])) * heads * head_dim,
        "mlp": "swiglu",
        "norm": "rmsnorm",
        "position": "rotary",
        "vocab_size": draw(st.sampled_from([32000, 128256, 151936])),
    }
    if draw(st.booleans()):  # every layer slides (Mistral), every other (Gemma 2), 5 in 6 (Gemma 3: padded groups)
        model["sliding_window"] = draw(st.sampled_from([512, 1024, 4096]))
        pattern = draw(st.sampled_from([None, 2, 6]))
        if pattern is not None:
            model["sliding_window_pattern"] = pattern
    workload = {
        "mode": "inference",
        "batch_size": draw(st.integers(1, 300)),
        "prompt_len": draw(st.integers(1, 16384)),
        "max_new_tokens": draw(st.integers(1, 16384)),
        "precision": draw(st.sampled_from(["bf16", "fp16"])),
        "runtime": "vllm",
        "memory_utilization": draw(st.sampled_from([0.5, 0.8, 0.9, 0.95])),
    }
    if draw(st.booleans()):
        workload["kv_cache_dtype"] = "fp8"
    if draw(st.booleans()):  # the tokens a sliding window holds next to a chunked prefill; a longer max_model_len
        workload["max_num_batched_tokens"] = draw(st.sampled_from([512, 2048, 8192]))
        workload["max_model_len"] = workload["prompt_len"] + workload["max_new_tokens"] + draw(st.integers(0, 65536))
    if draw(st.booleans()):  # V0 (0.6) takes no scheduler budget below max_model_len: it does not chunk prefills
        releases = ["0.9.2", "0.11.0"] if "max_num_batched_tokens" in workload else ["0.6.4", "0.9.2", "0.11.0"]
        workload["versions"] = {"vllm": draw(st.sampled_from(releases))}
    doc: dict[str, Any] = {"name": "served", "model": model, "workload": workload}
    # vLLM splits the query heads evenly and the KV heads evenly or replicates them
    tensors = [t for t in (1, 2, 4, 8) if heads % t == 0 and (kv_heads % t == 0 or t % kv_heads == 0)]
    tensor = draw(st.sampled_from(tensors))
    if tensor > 1:
        doc["parallel"] = {"tensor": tensor}
    return doc


def _budget(gpu: str, reserve: str | None, spec: Spec) -> Budget:
    count = spec.parallel.tensor if spec.parallel is not None else 1
    return budget_for(get_gpu(gpu), parse_reserve(reserve) if reserve else parse_reserve("0%"), count, count > 1)


@PROPERTY
@given(doc=serving_specs(), gpu=st.sampled_from(CARDS), reserve=st.sampled_from(RESERVES))
def test_check_estimate_sweep_and_max_batch_judge_alike(doc: dict[str, Any], gpu: str, reserve: str | None) -> None:
    spec = parse_spec(doc)
    budget = _budget(gpu, reserve, spec)
    verdict = check_on(spec, budget).verdict  # what `check` says
    assert verdict.kv_pool is not None  # judged by vLLM's pool
    assert estimate_outcome(spec, budget).fit == verdict  # `estimate --gpu`, `report`
    batch = spec.workload.batch_size
    grid = sweep(spec, [batch], None, budget)  # `sweep`: the verdict, and the figures it shows
    assert grid.verdicts is not None and grid.verdicts[0] == verdict
    limit = max_batch(spec, budget)  # `max-batch`: the concurrent sequences the pool holds
    assert limit.value == verdict.kv_pool.max_sequences
    assert (batch <= limit.value) == verdict.fits
    # one concurrency figure: vLLM's "maximum concurrency" rounds down to the sequences that fit
    assert math.floor(verdict.kv_pool.max_concurrency) == verdict.kv_pool.max_sequences


@PROPERTY
@given(doc=serving_specs(), gpu=st.sampled_from(CARDS), reserve=st.sampled_from(RESERVES))
def test_plan_judges_its_layout_as_check_judges_the_spec(doc: dict[str, Any], gpu: str, reserve: str | None) -> None:
    """`plan --gpus N` on the spec's own layout (tensor N, one replica) lists it exactly when check says it
    fits, with check's needed and available bytes and the pool's sequences; when nothing fits, the closest
    plan of that layout needs what check says."""
    spec = parse_spec(doc)
    budget = _budget(gpu, reserve, spec)
    verdict = fit_on(spec, budget)
    assert verdict.kv_pool is not None
    tensor = spec.parallel.tensor if spec.parallel is not None else 1
    per_card = budget_for(get_gpu(gpu), budget.reserve)
    search = best_plans(spec.model_copy(update={"parallel": None}), per_card, gpus=tensor)
    same = [c for c in (*search.plans, search.closest) if c is not None and _layout(c.parallel) == (tensor, 1, 1)]
    if verdict.fits:
        assert same and same[0].fits
    if same:
        row = same[0]
        assert (row.needed_bytes, row.available_bytes) == (verdict.needed_bytes, verdict.available_bytes)
        assert row.max_sequences == verdict.kv_pool.max_sequences
        assert row.total_bytes == estimate_on(spec, budget).total_bytes


def _layout(parallel: dict[str, Any]) -> tuple[int, int, int]:
    return parallel["tensor"], parallel["pipeline"], parallel["data"]


# -- the disagreements users met ------------------------------------------------------------------------------


def _write(tmp: Path, name: str, doc: dict[str, Any]) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def _served(model: str, prompt: int, new: int, **workload: Any) -> dict[str, Any]:
    base = {"mode": "inference", "batch_size": 1, "prompt_len": prompt, "max_new_tokens": new, "runtime": "vllm"}
    return {"name": model, "model": model, "workload": base | workload}


def test_plan_on_one_card_agrees_with_check(tmp_path: Path) -> None:
    """Llama-3.1-70B in fp8 on one H100: check says it does not fit (vLLM's profile peak and one sequence's
    KV cache exceed what vLLM manages), so `plan --gpus 1` lists no plan, and its closest plan needs what
    check says, against the same available bytes."""
    path = _write(tmp_path, "l70-fp8", _served("llama-3.1-70b", 4096, 4096, quantization="fp8"))
    row = _json(["check", str(path), "--gpu", "h100-sxm", "--format", "json", "--max-gpus", "1"])[0]
    assert not row["fits"]
    plan = _json(["plan", str(path), "--gpu", "h100-sxm", "--gpus", "1", "--json"])
    assert plan["plans"] == []
    closest = plan["closest"]
    assert (closest["needed_bytes"], closest["available_bytes"]) == (row["needed_bytes"], row["available_bytes"])


def test_sweep_shows_the_figures_it_judged(tmp_path: Path) -> None:
    """A sweep of a vLLM serving spec shows what vLLM needs at each batch size, below what vLLM manages
    where it says "ok" and above it where it says "NO" (it used to show the estimate's total, above the
    card's whole memory, marked "ok")."""
    spec = Path(__file__).resolve().parents[2] / "configs" / "llama-3-8b-inference.yaml"
    args = ["sweep", str(spec), "--batch-size", "55,56", "--gpu", "h100-sxm"]
    points = _json([*args, "--json"])["points"]
    for point in points:
        changed = yaml.safe_load(spec.read_text(encoding="utf-8"))
        changed["workload"]["batch_size"] = point["batch_size"]
        row = _json(["check", str(_write(tmp_path, "b", changed)), "--gpu", "h100-sxm", "--format", "json"])[0]
        assert (point["needed_bytes"], point["available_bytes"], point["fits"]) == (
            row["needed_bytes"],
            row["available_bytes"],
            row["fits"],
        )
        assert (point["needed_bytes"] <= point["available_bytes"]) == point["fits"]
    text = runner.invoke(app, args, env={"COLUMNS": "120"}).stdout
    title = " ".join(text.split())  # the title wraps where the spec's path is long
    managed = f"vLLM manages {points[0]['available_bytes'] / GiB:,.2f}"
    assert managed in title
    for point in points:
        cell = f"{point['needed_bytes'] / GiB:,.2f} {'ok' if point['fits'] else 'NO'}"
        assert cell in text
    assert "total_bytes" not in text  # the legend is vLLM's rule


def test_fit_states_the_rule_its_serving_rows_follow() -> None:
    spec = Path(__file__).resolve().parents[2] / "configs" / "llama-3-8b-inference.yaml"
    text = runner.invoke(app, ["fit", str(spec)], env={"COLUMNS": "120"}).stdout
    assert "vLLM serving spec: needed = its profiling step's non-KV peak" in text
    assert "needed = the estimate's total_bytes" not in text


def test_one_concurrency_figure_with_sliding_windows(tmp_path: Path) -> None:
    """Gemma-2-9B at 32k on an H100: half its layers keep a 4,096-token window, so a sequence holds less
    than 32k tokens in the cache. The concurrency vLLM prints and the sequences that fit are one figure
    (it used to print 5.00x next to "at most 8 concurrent sequences"). 256 sequences, not the H100's default
    1,024: vLLM's profile sorts every sequence's logits over Gemma's 256,000-word vocabulary, which at 1,024
    rows leaves room for about one 32k context."""
    path = _write(tmp_path, "gemma", _served("gemma-2-9b", 16384, 16384, max_num_seqs=256))
    doc = _json(["estimate", str(path), "--gpu", "h100-sxm", "--json"])
    sequences = doc["max_concurrent_sequences"]
    assert sequences > doc["kv_cache_tokens"] // 32768  # the windows leave room for more than full contexts
    assert math.floor(doc["max_concurrency"]) == sequences
    text = runner.invoke(app, ["estimate", str(path), "--gpu", "h100-sxm"], env={"COLUMNS": "200"}).stdout
    assert f"{doc['max_concurrency']:.2f}x" in text and f"at most {sequences:,} concurrent sequences" in text


def test_tensor_parallel_serving_reads_the_named_card(tmp_path: Path) -> None:
    """Llama-3.1-70B in fp8 over two H100s: vLLM's default batch sizes follow the card (V1 `vllm serve`
    on a card of 70 GiB or more that is not an A100: max_num_batched_tokens 8,192, max_num_seqs 1,024),
    so the estimate on the named card equals the one that states those defaults, per GPU of the plan."""
    implicit = _served("llama-3.1-70b", 4096, 4096, quantization="fp8") | {"parallel": {"tensor": 2}}
    explicit = json.loads(json.dumps(implicit))
    explicit["workload"] |= {"max_num_batched_tokens": 8192, "max_num_seqs": 1024}
    docs = {
        name: _json(["estimate", str(_write(tmp_path, name, doc)), "--gpu", "h100-sxm", "--json"])
        for name, doc in (("implicit", implicit), ("explicit", explicit))
    }
    keys = ("max_concurrent_sequences", "kv_cache_budget_bytes", "total_bytes")
    assert [docs["implicit"][k] for k in keys] == [docs["explicit"][k] for k in keys]
    plan = _json(["plan", str(_write(tmp_path, "p", implicit)), "--gpu", "h100-sxm", "--gpus", "2", "--json"])
    row = next(p for p in plan["plans"] if p["parallel"]["tensor"] == 2)
    assert row["max_concurrent_sequences"] == docs["explicit"]["max_concurrent_sequences"]
