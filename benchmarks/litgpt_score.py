"""vramcalc against litgpt's published LoRA / QLoRA fine-tuning peaks, and against the tracer running litgpt.

Each row of ``benchmarks/data/measured_litgpt.yaml`` (litgpt's resource tables: one A100-SXM4-40GB,
``torch.cuda.max_memory_allocated()`` in decimal GB) is given the spec a user of litgpt's
``finetune/lora.py`` would write, and three figures are compared: what litgpt measured, what the CPU tracer
gives for one training step of litgpt's own model code at the same commit (``benchmarks/tracer_litgpt.py``,
stored in ``benchmarks/data/tracer_litgpt.json``), and vramcalc's allocated peak. Out-of-memory rows are
checked against the fit verdict on a 40 GiB card (allocated + CUDA context + allocator reserve).

    python benchmarks/litgpt_score.py [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

from vramcalc.api import estimate as estimate_on_card
from vramcalc.families import estimate
from vramcalc.spec.load import parse_spec

DATA = Path(__file__).resolve().parent / "data"
A100_40GB = 40 * 2**30
#: vramcalc catalog models of litgpt's configs (StableLM Alpha is GPT-NeoX: Pythia's family, its own shape).
PRESETS = {
    "phi-1_5": "phi-1.5",
    "Llama-2-7b-hf": "llama-2-7b",
    "Llama-2-13b-hf": "llama-2-13b",
    "falcon-40b": "falcon-40b",
    "microsoft/phi-1_5": "phi-1.5",
    "meta-llama/Llama-2-7b-hf": "llama-2-7b",
    "meta-llama/Llama-2-13b-hf": "llama-2-13b",
    "meta-llama/Llama-2-70b-hf": "llama-2-70b",
    "codellama/CodeLlama-34b-hf": "codellama-34b",
    "tiiuae/falcon-40b": "falcon-40b",
    "tiiuae/falcon-7b": "falcon-7b",
}
#: litgpt's quantize flags as vramcalc quantizations (``gptq``: with runtime: litgpt, its own gptq.int4).
QUANTIZE = {
    "bnb.nf4": {"method": "nf4"},
    "bnb.nf4-dq": {"method": "nf4", "double_quant": True},
    "bnb.fp4": {"method": "fp4"},
    "bnb.fp4-dq": {"method": "fp4", "double_quant": True},
    "bnb.int8": {"method": "int8"},
    "gptq.int4": {"method": "gptq"},
}
PRECISION = {"bf16-true": "bf16", "16-true": "fp16", "32-true": "fp32"}
#: The default prompt "Hello, my name is": five tokens and the BOS token (inferred; litgpt's tokenizers).
PROMPT_TOKENS = 6


def model_of(row: dict[str, Any]) -> dict[str, Any]:
    name = row.get("litgpt_config", row["model"])
    if name in PRESETS:
        return {"preset": PRESETS[name]}
    a = row["arch"]
    return {
        "preset": "pythia-410m",
        "layers": a["n_layer"],
        "hidden_size": a["n_embd"],
        "heads": a["n_head"],
        "ffn_size": a["intermediate_size"],
        "vocab_size": a["padded_vocab_size"],
        "tie_embeddings": False,
    }


def generate_spec_of(row: dict[str, Any]) -> dict[str, Any] | None:
    """The spec of one ``generate/base.py`` run (``runtime: litgpt``), or None where vramcalc has none."""
    quantize = row["quantize"]
    if quantize is not None and quantize not in QUANTIZE:
        return None
    workload: dict[str, Any] = {
        "mode": "inference",
        "batch_size": 1,
        "prompt_len": PROMPT_TOKENS,
        "max_new_tokens": row["max_new_tokens"],
        "precision": PRECISION[row["precision"]],
        "runtime": "litgpt",
        "versions": {"bitsandbytes": "0.41.1"},
    }
    if quantize is not None:
        workload["quantization"] = QUANTIZE[quantize]
    return {"name": row["id"], "model": model_of(row), "workload": workload}


def spec_of(row: dict[str, Any]) -> dict[str, Any]:
    """The spec of one litgpt run (module docstring of benchmarks/data/measured_litgpt.yaml)."""
    if row.get("kind") == "generate":
        generate = generate_spec_of(row)
        assert generate is not None
        return generate
    workload: dict[str, Any] = {
        "mode": "train",
        "batch_size": row["micro_batch_size"],
        "seq_len": row["longest_sample_tokens"],
        "precision": "bf16",
        "attention": "sdpa",
        "optimizer": "adamw",
        "adapter": {"rank": 8, "alpha": 16, "dropout": 0.05, "targets": ["q", "v"], "framework": "litgpt"},
        "versions": {"torch": "2.1.0"},  # the tables' PyTorch 2.1.0+cu121 (resource-tables.md line 11)
    }
    if row["quantize"]:
        workload["quantization"] = {"method": "nf4", "double_quant": row["quantize"].endswith("-dq")}
        workload["optimizer"] = "paged-adamw-32bit"
        workload["versions"] |= {"bitsandbytes": "0.41.1"}
    return {"name": row["id"], "model": model_of(row), "workload": workload}


def score(row: dict[str, Any], traced: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"case": row["id"], "outcome": row["outcome"], "kind": row.get("kind", "finetune")}
    if row["outcome"] not in ("measured", "OOM"):
        return out | {"outcome": "not scored", "reason": row["outcome"]}
    if row.get("kind") == "generate" and generate_spec_of(row) is None:
        return out | {"outcome": "not scored", "reason": f"{row['quantize']}: not a quantization of runtime: litgpt"}
    spec = spec_of(row)
    if row["outcome"] == "OOM":
        result = estimate_on_card(spec, gpu=f"{A100_40GB}B")
        return out | {"predicted": "fits" if result.gpu.fits else "oom", "ok": not result.gpu.fits}
    result = estimate(parse_spec(spec, row["id"]), hopper_or_newer=False)  # an A100: pre-Hopper cuBLAS workspaces
    measured = row["value_gb"] * 1e9
    est = result.peak_allocated_bytes
    out |= {"measured": measured, "estimate": est, "error_pct": 100 * (est / measured - 1)}
    trace = traced.get(row["id"])
    if trace is not None:
        out |= {"tracer": trace["peak_bytes"], "tracer_error_pct": 100 * (trace["peak_bytes"] / measured - 1)}
        out["vs_tracer_pct"] = 100 * (est / trace["peak_bytes"] - 1)
    return out


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    a = parser.parse_args(argv)
    rows = yaml.safe_load((DATA / "measured_litgpt.yaml").read_text(encoding="utf-8"))
    traced_path = DATA / "tracer_litgpt.json"
    traced = json.loads(traced_path.read_text(encoding="utf-8"))["cases"] if traced_path.exists() else {}
    scored = [score(row, traced) for row in rows]
    if a.json:
        print(json.dumps(scored, indent=1))
        return
    print(f"{'case':42} {'measured':>9} {'tracer':>13} {'vramcalc':>14} {'vs tracer':>9}")
    for s in scored:
        if s["outcome"] == "not scored":
            print(f"{s['case']:42} not scored: {s['reason']}")
            continue
        if s["outcome"] == "OOM":
            verdict = "right" if s["ok"] else "WRONG"
            print(f"{s['case']:42} {'OOM':>9} {'':>13} {s['predicted']:>14} {verdict:>9}")
            continue
        tracer = f"{s['tracer'] / 1e9:6.2f} {s['tracer_error_pct']:+5.1f}%" if "tracer" in s else ""
        versus = f"{s['vs_tracer_pct']:+8.1f}%" if "tracer" in s else ""
        line = f"{s['case']:42} {s['measured'] / 1e9:6.2f} GB {tracer:>13} "
        print(line + f"{s['estimate'] / 1e9:6.2f} {s['error_pct']:+6.1f}% {versus:>9}")
    kinds = (
        ("LoRA", lambda s: s["kind"] == "finetune" and "bnb" not in s["case"]),
        ("QLoRA", lambda s: s["kind"] == "finetune" and "bnb" in s["case"]),
        ("generate", lambda s: s["kind"] == "generate"),
    )
    for kind, pick in kinds:
        chosen = [s for s in scored if s["outcome"] == "measured" and pick(s)]
        errors = [s["error_pct"] for s in chosen]
        tracer = [s["tracer_error_pct"] for s in chosen if "tracer" in s]
        versus = [s["vs_tracer_pct"] for s in chosen if "tracer" in s]
        line = f"{kind:6} {len(chosen):2} rows: vramcalc vs measured median {statistics.median(errors):+.1f} %"
        if tracer:
            line += f"; tracer vs measured {statistics.median(tracer):+.1f} %; vramcalc vs tracer"
            line += f" {statistics.median(versus):+.1f} %"
        print(line)
    labels = [s for s in scored if s["outcome"] == "OOM"]
    print(f"OOM labels: {sum(s['ok'] for s in labels)}/{len(labels)} right")


if __name__ == "__main__":
    main(sys.argv[1:])
