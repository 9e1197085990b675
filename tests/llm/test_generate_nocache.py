"""Generation without a KV cache (``use_cache: false`` with generation keys; vramcalc/llm/recompute.py).

References: the shared tracer's replays of the loops (benchmarks/tracer_bert_generate.py:
BertForMaskedLM.generate under transformers 4.41.0; benchmarks/tracer_generate_nocache.py: a Llama under
today's ``generate``, ``logits_to_keep=1`` and ``del outputs``), and hand counts of the release rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.spec.load import parse_spec

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"
BERT = {"preset": "bert-base-uncased", "head": "lm"}
LLAMA = {"preset": "llama-2-7b", "layers": 2, "hidden_size": 256, "heads": 4, "kv_heads": 2, "ffn_size": 688,
         "vocab_size": 1000}  # fmt: skip


def run(model: dict[str, Any], **workload: Any) -> Any:
    """The estimate with the replays' pre-Hopper cuBLAS workspace (8.125 MiB, an A100's)."""
    wl = {"mode": "inference", "use_cache": False, "runtime": "hf", **workload}
    return estimate(parse_spec({"name": "t", "model": model, "workload": wl}), hopper_or_newer=False)


@pytest.mark.parametrize("row", json.loads((DATA / "tracer_bert_generate.json").read_text())["rows"])
def test_masked_lm_generate_matches_the_tracer(row: dict[str, int]) -> None:
    r = run(BERT, batch_size=row["batch"], prompt_len=row["prompt"], max_new_tokens=128, precision="fp16",
            attention="eager", versions={"transformers": "4.41.0"})  # fmt: skip
    assert r.peak_phase == "generate"
    # the tracer sums tensors; the allocator also counts BERT-base's fp16 weights' whole blocks, 7,513,088 B
    # (worked out by hand in tests/core/test_allocator.py) ...
    tensors = row["generate_128"] + 7_513_088
    assert abs(r.peak_allocated_bytes - tensors) / tensors < 0.002
    # ... and the same trace replayed through the tracer's own allocator model counts every whole block
    assert abs(r.peak_allocated_bytes - row["generate_128_blocks"]) / row["generate_128_blocks"] < 0.004


@pytest.mark.parametrize("case", json.loads((DATA / "tracer_generate_nocache.json").read_text())["cases"].values())
def test_decoder_generate_matches_the_tracer(case: dict[str, Any]) -> None:
    a = case["args"].split()
    arg = dict(zip(a[::2], a[1::2], strict=True))
    r = run(LLAMA, batch_size=int(arg["--batch"]), prompt_len=int(arg["--prompt"]), max_new_tokens=int(arg["--new"]),
            precision=arg["--dtype"], attention=arg["--attn"])  # fmt: skip
    assert abs(r.peak_allocated_bytes - case["peak_bytes"]) / case["peak_bytes"] < 0.005


def test_releases_up_to_4_41_keep_the_previous_steps_logits() -> None:
    # BertForMaskedLM, batch 1, prompt 128, 128 new tokens: the last step runs 128 + 127 + 1 (the pad
    # position) = 256 positions; up to 4.41 the previous step's outputs, 255 positions of 30,522 fp16 logits,
    # are still allocated: 255 x 30,522 x 2 = 15,566,220 B more than under 4.42 (``del outputs``)
    wl = {"batch_size": 1, "prompt_len": 128, "max_new_tokens": 128, "precision": "fp16", "attention": "eager"}
    kept = run(BERT, **wl, versions={"transformers": "4.41.0"})
    deleted = run(BERT, **wl, versions={"transformers": "4.42.0"})
    assert kept.peak_allocated_bytes - deleted.peak_allocated_bytes == 255 * 30_522 * 2


def test_the_last_step_runs_the_whole_sequence() -> None:
    # today's release: the last step is a no-grad forward over prompt + new - 1 tokens with the last
    # position's logits; more new tokens only lengthen it: 60 + 8 - 1 = 67 positions either way
    a = run(LLAMA, batch_size=2, prompt_len=60, max_new_tokens=8, precision="bf16")
    b = run(LLAMA, batch_size=2, prompt_len=64, max_new_tokens=4, precision="bf16")
    assert a.peak_allocated_bytes == b.peak_allocated_bytes
    assert a.phase_components["generate"]["kv_cache"] == 0
    cached = estimate(parse_spec({"name": "t", "model": LLAMA, "workload": {
        "mode": "inference", "runtime": "hf", "batch_size": 2, "prompt_len": 60, "max_new_tokens": 8,
        "precision": "bf16"}}))  # fmt: skip
    assert "generate" not in cached.phase_components and cached.phase_components["decode"]["kv_cache"] > 0


@pytest.mark.parametrize(
    ("model", "workload", "message"),
    [
        (LLAMA, {"runtime": "vllm"}, r"^workload\.use_cache: false generates with transformers; runtime vllm"),
        (LLAMA, {"kv_cache_dtype": "fp8"}, r"^workload\.kv_cache_dtype: there is no KV cache"),
        (LLAMA, {"quantization": "q4_k_m", "runtime": "llama.cpp"}, r"^workload\.use_cache: false generates with"),
        (BERT, {}, r"^workload\.prompt_len: an encoder-only model generates only as a masked LM"),
        (BERT, {"versions": {"transformers": "4.50.0"}}, r"^workload\.prompt_len: an encoder-only model"),
        ({"preset": "bert-base-uncased", "head": "none"}, {"versions": {"transformers": "4.41.0"}}, r"as a masked"),
        ({"preset": "t5-small"}, {}, r"^workload\.use_cache: false generation of an encoder-decoder"),
    ],
)
def test_refused(model: dict[str, Any], workload: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        run(model, batch_size=1, prompt_len=16, max_new_tokens=4, precision="fp16", **workload)


def _cli(tmp_path: Path, workload: str, *args: str) -> tuple[Path, Any]:
    """Run ``vramcalc ARGS[0] SPEC ARGS[1:]`` on a GPT-2 generation spec with ``workload`` keys."""
    spec = tmp_path / "s.yaml"
    text = "name: s\nmodel: {preset: gpt2}\nworkload: {mode: inference, use_cache: false, " + workload + "}\n"
    spec.write_text(text, encoding="utf-8")
    return spec, CliRunner().invoke(app, [args[0], str(spec), *args[1:]])


def test_cli_refusal_is_one_line_with_exit_2(tmp_path: Path) -> None:
    spec, result = _cli(tmp_path, "batch_size: 1, prompt_len: 8, max_new_tokens: 2, runtime: vllm", "estimate")
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and str(spec) in lines[0] and "workload.use_cache" in lines[0]


def test_bandwidth_reads_no_cache(tmp_path: Path) -> None:
    workload = "batch_size: 2, prompt_len: 64, max_new_tokens: 8, runtime: hf"
    _, result = _cli(tmp_path, workload, "bandwidth", "--gpu", "a100-80gb-sxm")
    assert result.exit_code == 0, result.output
    assert "use_cache: false: no KV cache is read" in " ".join(result.output.split())
    assert "bytes per token" not in result.output  # the KV line of a cached generation


def test_hf_legacy_returns_and_keeps_every_positions_fp32_logits() -> None:
    # runtime hf-legacy (transformers before 4.36): the step returns every position's logits, upcast to fp32
    # in forward (2 + 4 B each while both exist), and the previous step's fp32 logits are still allocated.
    # GPT-2 (vocabulary 50,257, hidden 768), batch 1, prompt 32: one more new token adds one position to the
    # last step: a row of logits at 2 + 4 B, a previous-step row at 4 B, and the final hidden states in and
    # out of the last norm (2 x 768 x 2 B): 50,257 x 10 + 3,072 = 505,642 B
    wl = {"batch_size": 1, "prompt_len": 32, "precision": "fp16", "runtime": "hf-legacy"}
    four = run({"preset": "gpt2"}, **wl, max_new_tokens=4)
    five = run({"preset": "gpt2"}, **wl, max_new_tokens=5)
    assert five.peak_allocated_bytes - four.peak_allocated_bytes == 50_257 * 10 + 2 * 768 * 2
