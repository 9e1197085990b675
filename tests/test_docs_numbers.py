"""Worked numbers quoted in the docs' prose, recomputed: a test fails when the tool and the text drift apart.

Console blocks are checked by tests/test_docs.py; these are the figures sentences quote. Each test reads
the sentence from the doc (so editing either side alone fails), runs the estimate it describes, and where a
figure can be worked by hand it checks that too.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from cli_json import run_json

from vramcalc.families import estimate
from vramcalc.hardware.lookup import get_gpu
from vramcalc.planning.budget import budget_for, estimate_on, fit_of
from vramcalc.spec.load import parse_spec
from vramcalc.units import GiB

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _sentence(doc: str, start: str) -> str:
    """The paragraph of ``doc`` that begins with ``start``, on one line."""
    text = (DOCS / doc).read_text(encoding="utf-8")
    at = text.index(start)
    return " ".join(text[at : text.index("\n\n", at)].split())


def _number(pattern: str, text: str) -> float:
    match = re.search(pattern, text)
    assert match is not None, f"{pattern!r} not in: {text}"
    return float(match.group(1).replace(",", ""))


def _served(model: str, **workload: Any) -> dict[str, Any]:
    base = {"mode": "inference", "batch_size": 1, "prompt_len": 4096, "max_new_tokens": 4096, "precision": "bf16"}
    base["runtime"] = "vllm"
    return {"name": model, "model": model, "workload": base | workload}


def test_multi_gpu_serving_example() -> None:
    text = _sentence("multi-gpu.md", "Example: Llama-3-70B in fp8 on 2 x H100")
    budget = budget_for(get_gpu("h100-sxm"), count=2, sharded=True)
    results = {}
    for kv in ("auto", "fp8"):
        doc = _served("llama-3-70b", quantization="fp8", kv_cache_dtype=kv) | {"parallel": {"tensor": 2}}
        results[kv] = estimate_on(parse_spec(doc), budget)
    llm = results["auto"].llm
    assert llm is not None and llm.kv_pool is not None
    # by hand: K and V x 80 layers x (8 KV heads / 2 ranks) x head_dim 128 x 2 bytes
    assert llm.kv_cache_bytes_per_token == 2 * 80 * 4 * 128 * 2 == _number(r"GiB of weights and ([\d,]+) B", text)
    assert round(results["auto"].components["parameters"] / GiB, 2) == _number(r"holds ([\d.]+) GiB of weights", text)
    pools = {kv: fit_of(result, budget).kv_pool for kv, result in results.items()}
    sequences = {kv: pool.max_sequences for kv, pool in pools.items() if pool is not None}
    assert sequences["auto"] == _number(r"serves (\d+) sequences", text)
    assert sequences["fp8"] == _number(r"\((\d+) with `kv_cache_dtype: fp8`\)", text)
    # a KV cache half the size holds about twice the sequences (the non-KV peak does not move)
    assert 2 * sequences["auto"] <= sequences["fp8"] <= 2 * sequences["auto"] + 1


def test_multi_gpu_405b_fp8_checkpoint_example() -> None:
    """Meta's FP8 layout of Llama-3.1-405B at tensor parallel 8, as multi-gpu.md and llm.md quote it."""
    text = _sentence("multi-gpu.md", "Example: Llama-3-70B in fp8 on 2 x H100")
    first_and_last = [{"layers": [n, n], "modules": ["mlp"]} for n in (0, 125)]
    layout = {"method": "fp8", "skip_modules": ["attention", *first_and_last]}
    budget = budget_for(get_gpu("h100-sxm"), count=8, sharded=True)
    weights = {}
    for name, quantization in (("all fp8", "fp8"), ("Meta's", layout)):
        doc = _served("llama-3.1-405b", quantization=quantization) | {"parallel": {"tensor": 8}}
        weights[name] = round(estimate_on(parse_spec(doc), budget).components["parameters"] / GiB, 2)
    assert weights["all fp8"] == _number(r"the all-fp8 estimate is ([\d.]+) GiB", text)
    assert weights["Meta's"] == _number(r"expresses \(\[llm.md\]\(llm.md\)\): ([\d.]+) GiB per GPU", text)
    llm_text = " ".join((DOCS / "llm.md").read_text(encoding="utf-8").split())
    meta = weights["Meta's"]
    assert f"{meta:.2f} GiB per GPU at TP 8" in llm_text


def test_qlora_above_lora_at_long_sequences() -> None:
    """llm.md: QLoRA is not always below LoRA; its fp32 upcast sends SDPA to the math kernel."""
    text = _sentence("llm.md", "- **LoRA**: trainable parameters")
    cases = {
        "LoRA": {},
        "QLoRA": {"quantization": "nf4"},
        "QLoRA without prepare_kbit": {"quantization": "nf4", "prepare_kbit": False},
    }
    totals = {}
    for name, case in cases.items():
        adapter = {"type": "lora", "rank": 16, "targets": "all-linear"}
        if "prepare_kbit" in case:
            adapter["prepare_kbit"] = case["prepare_kbit"]
        workload = {"mode": "train", "batch_size": 1, "seq_len": 8192, "precision": "bf16"}
        workload |= {"gradient_checkpointing": "full", "adapter": adapter}
        workload |= {k: v for k, v in case.items() if k == "quantization"}
        spec = parse_spec({"name": "lora", "model": "llama-3.1-8b", "workload": workload})
        totals[name] = round(estimate(spec).total_bytes / GiB, 2)
    assert totals["QLoRA"] > totals["LoRA"] > totals["QLoRA without prepare_kbit"]
    assert totals["LoRA"] == _number(r"needs ([\d.]+) GiB with LoRA", text)
    assert totals["QLoRA"] == _number(r", ([\d.]+) GiB with QLoRA and", text)
    assert totals["QLoRA without prepare_kbit"] == _number(
        r"and ([\d.]+) GiB with QLoRA and `prepare_kbit: false`", text
    )


def test_bandwidth_of_a_model_in_fp8() -> None:
    """hardware.md: --model llama-3.1-70b --dtype fp8 streams its linear layers at 1 byte per parameter."""
    from vramcalc.planning.stream import weights_from_spec

    text = _sentence("hardware.md", "Give the weights in one of three ways")
    served = {"mode": "inference", "batch_size": 1, "seq_len": 4096, "precision": "bf16"}
    spec = parse_spec({"name": "m", "model": "llama-3.1-70b", "workload": served})
    weights = weights_from_spec(spec, dtype="fp8")
    # by hand: untied embeddings and LM head (2 x 128,256 x 8,192) and 161 norms of 8,192 stay at bf16
    kept = 2 * 128_256 * 8192 + (2 * 80 + 1) * 8192
    linear = weights.n_params - kept  # type: ignore[operator]
    assert round(linear / 1e9, 2) == _number(r"\(`--model llama-3.1-70b --dtype fp8`: ([\d.]+) billion", text)
    assert round(kept / 1e9, 2) == _number(r"and ([\d.]+) billion at 2 bytes", text)
    assert weights.weights_bytes == linear + 7 * 80 * 4 + 2 * kept  # 7 weight matrices per layer, one fp32 scale each
    assert round(weights.weights_bytes / 1e9, 2) == _number(r"at 2 bytes: ([\d.]+) GB", text)


def _readme_questions() -> list[list[str]]:
    """The commands of the README's "Five questions, one command each" block."""
    text = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    block = text.split("## Five questions, one command each", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [shlex.split(line.split("  #", 1)[0])[1:] for line in block.splitlines() if line.startswith("vramcalc ")]


def test_the_readme_s_five_questions_are_answered() -> None:
    """Each question is one command that answers it: the table of what runs (the QLoRA row holding a batch
    and a longest sequence), the concurrency at 8k, the TP2 serving row with its sequences, and plans that
    hold the global batch of 512 on 8 GPUs."""
    questions = _readme_questions()
    assert len(questions) == 5
    answers = [run_json([*args, "--json"]) for args in questions]
    what_runs, qlora_card, awq, tp2, pretrain = answers
    assert [row["row"] for row in what_runs["what_runs"]["rows"]][-3:] == ["lora", "qlora", "full"]
    qlora = next(row for row in qlora_card["what_runs"]["rows"] if row["row"] == "qlora")
    assert qlora["max_batch_size"] >= 1 and qlora["longest_context_tokens"] >= qlora["context_tokens"]
    assert awq["max_batch_size"] >= 1 and awq["seq_len"] == 8192
    row = next(p for p in tp2["plans"] if p["parallel"]["tensor"] == 2)
    assert row["gpus"] == 2 and row["max_concurrent_sequences"] >= 1
    assert pretrain["plans"] and all(
        p["parallel"]["data"] * p["micro_batch"] * p["grad_accumulation"] == 512 for p in pretrain["plans"]
    )
