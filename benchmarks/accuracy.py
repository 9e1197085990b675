"""Accuracy of vramcalc's peak_allocated_bytes against allocator-level references.

Reference: ``shared/calibration/tracer_cases.json`` -- exact ``torch.cuda.max_memory_allocated()``
of real PyTorch 2.13 / transformers 5.24 steps (BertForMaskedLM, GPT2LMHeadModel, LlamaForCausalLM,
T5ForConditionalGeneration), traced on fake CUDA tensors with H100 cuBLAS workspaces.

    python benchmarks/accuracy.py [--calibration ../shared/calibration] [--json]

Prints one row per case (reference, estimate, error %) and the summary (median |error|, p90, max). The
reference sums the tensors' bytes; ``max_memory_allocated()`` also counts whole blocks where the caching
allocator hands a block out unsplit. For the shared cases the ``blocks GiB`` column is the same trace
replayed through the tracer's model of the allocator, which counts them (``allocated`` of
``benchmarks/data/reserve_pressure.json``: the whole run, the first iteration included); vramcalc counts
those of the weights (``allocator_rounding``), not those of gradients and transient tensors.
Families: BERT, GPT-2, Llama, T5 (transformers) and ViT, ResNet-50 (vision), training and inference.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vramcalc.families import estimate  # noqa: E402
from vramcalc.spec.load import parse_spec  # noqa: E402

DEFAULT_CALIBRATION = ROOT.parent / "shared" / "calibration"

#: Model families of the tracer (HF classes) as vramcalc spec keys.
FAMILIES: dict[str, dict[str, Any]] = {
    "bert": {"architecture": "encoder", "mlp": "gelu", "norm": "layernorm", "position": "learned"},
    "gpt2": {"architecture": "decoder", "mlp": "gelu_tanh", "norm": "layernorm", "position": "learned"},
    "llama": {"architecture": "decoder", "mlp": "swiglu", "norm": "rmsnorm", "position": "rotary"},
    "t5": {"architecture": "encoder-decoder", "mlp": "relu", "norm": "rmsnorm", "position": "relative"},
}
#: Learned position tables of the HF defaults (BERT 512, GPT-2 1024); they grow with seq_len.
DEFAULT_POSITIONS = {"bert": 512, "gpt2": 1024}


def tracer_spec(case: dict[str, Any]) -> dict[str, Any] | None:
    """The vramcalc spec of one tracer case, or None for families not modelled here."""
    model, workload = case["model"], case["workload"]
    if model["arch"] in VISION:
        return vision_spec(case)
    family = FAMILIES.get(model["arch"])
    if family is None:
        return None
    spec_model: dict[str, Any] = {
        **family,
        "layers": model["layers"],
        "hidden_size": model["hidden_size"],
        "heads": model["heads"],
        "kv_heads": model["kv_heads"],
        "ffn_size": model["ffn_size"],
        "vocab_size": model["vocab_size"],
        "tie_embeddings": model["tie_embeddings"],
    }
    if model["arch"] in DEFAULT_POSITIONS:
        spec_model["max_position_embeddings"] = max(DEFAULT_POSITIONS[model["arch"]], workload["seq_len"])
    spec_workload = {
        "mode": "train" if workload["mode"] == "train" else "inference",
        "batch_size": workload["batch_size"],
        "seq_len": workload["seq_len"],
        "precision": workload["precision"],
        "gradient_checkpointing": workload["gradient_checkpointing"],
        "attention": workload["attention"],
    }
    if workload.get("target_len"):
        spec_workload["target_len"] = workload["target_len"]
    if workload["mode"] == "train":
        spec_workload["optimizer"] = workload["optimizer"] or "none"
    return {"name": case["id"], "model": spec_model, "workload": spec_workload}


#: Tracer runs of this repository's configs (same tracer, run by us; ids start with "config-").
EXTRA_CASES = ROOT / "benchmarks" / "data" / "tracer_extra.json"


VISION = ("vit", "resnet50")


def vision_spec(case: dict[str, Any]) -> dict[str, Any]:
    """ViTForImageClassification (patch 16, 1000 labels) or ResNetForImageClassification (ResNet-50)."""
    model, workload = case["model"], case["workload"]
    if model["arch"] == "vit":
        spec_model: dict[str, Any] = {
            "architecture": "vit",
            "layers": model["layers"],
            "hidden_size": model["hidden_size"],
            "heads": model["heads"],
            "ffn_size": model["ffn_size"],
        }
    else:
        spec_model = {"architecture": "resnet", "depth": 50}
    spec_workload = {
        "mode": "train" if workload["mode"] == "train" else "inference",
        "batch_size": workload["batch_size"],
        "image_size": workload["image_size"],
        "precision": workload["precision"],
        "attention": workload["attention"],
        "gradient_checkpointing": workload["gradient_checkpointing"],
    }
    if workload["mode"] == "train":
        spec_workload["optimizer"] = workload["optimizer"] or "none"
    if model["arch"] != "vit":
        spec_workload.pop("attention")
    return {"name": case["id"], "model": spec_model, "workload": spec_workload}


def load_cases(calibration: Path | None) -> list[dict[str, Any]]:
    """The shared tracer cases (when shared/ is present) plus the repository's own tracer runs."""
    cases: list[dict[str, Any]] = []
    if calibration is not None and (calibration / "tracer_cases.json").exists():
        with open(calibration / "tracer_cases.json", encoding="utf-8") as fh:
            cases += json.load(fh)
    with open(EXTRA_CASES, encoding="utf-8") as fh:
        cases += json.load(fh)
    return cases


#: The tracer's allocator model replayed over the shared cases (benchmarks/reserve_pressure.py).
BLOCKS = ROOT / "benchmarks" / "data" / "reserve_pressure.json"


def evaluate(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per modelled case: reference and estimated peak, error in percent."""
    blocks = {c["id"]: c["allocated"] for c in json.loads(BLOCKS.read_text(encoding="utf-8"))["cases"]}
    rows = []
    for case in cases:
        spec_data = tracer_spec(case)
        if spec_data is None:
            continue
        result = estimate(parse_spec(spec_data, case["id"]))
        reference = case["measured"]["peak_allocated_bytes"]
        rows.append(
            {
                "case": case["id"],
                "family": "vision" if case["model"]["arch"] in VISION else "transformer",
                "mode": "train" if case["workload"]["mode"] == "train" else "inference",
                "reference_bytes": reference,
                "estimate_bytes": result.peak_allocated_bytes,
                "error_pct": 100.0 * (result.peak_allocated_bytes - reference) / reference,
                "reference_phase": case["measured"]["peak_phase"],
                "estimate_phase": result.peak_phase,
                "params_match": result.params == case["model"]["params"],
                "blocks_bytes": blocks.get(case["id"]),
            }
        )
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    errors = sorted(abs(r["error_pct"]) for r in rows)
    p90 = errors[min(len(errors) - 1, int(round(0.9 * (len(errors) - 1))))]
    return {
        "count": len(errors),
        "median_abs_pct": statistics.median(errors),
        "p90_abs_pct": p90,
        "max_abs_pct": errors[-1],
    }


#: Real-GPU measurements copied from shared/calibration/measured.yaml with their citations.
MEASURED_CASES = ROOT / "benchmarks" / "data" / "measured_bert_large_v100.yaml"
#: HF Trainer of 2022 (transformers ~4.17): optimizer names as vramcalc spells them. Its default
#: "adamw_hf" is transformers' own AdamW, a per-parameter loop (temporaries of one tensor at a time).
#: The PyTorch of the V100 runs: not stated; transformers 4.16-4.18 (early 2022) shipped beside 1.10 and 1.11.
V100_TORCH = "1.11"
#: Its bitsandbytes (for Adam8bit): not stated either; early 2022 was 0.26-0.27, and every release before
#: 0.44.0 keeps an 8-bit state's absmax per 2,048 elements (vramcalc/stacks/bnb.py).
V100_BITSANDBYTES = "0.26.0"
MEASURED_OPTIMIZERS = {
    "adamw": ("adamw", "forloop"),
    "adafactor": ("adafactor", "forloop"),
    "adam8bit": ("adamw-8bit", "foreach"),
}


def measured_spec(case: dict[str, Any], context_bytes: int) -> dict[str, Any]:
    """BertForSequenceClassification (pooler + 2 labels) as in the HF performance guide's runs."""
    model, workload = case["model"], case["workload"]
    optimizer, impl = MEASURED_OPTIMIZERS[workload["optimizer"]]
    return {
        "name": case["id"],
        "model": {
            "architecture": "encoder",
            "layers": model["layers"],
            "hidden_size": model["hidden_size"],
            "heads": model["heads"],
            "ffn_size": model["ffn_size"],
            "vocab_size": model["vocab_size"],
            "head": "classification",
            "num_labels": 2,
            "pooler": True,
        },
        "workload": {
            "batch_size": workload["batch_size"],
            "seq_len": workload["seq_len"],
            "precision": workload["precision"],
            "optimizer": optimizer,
            "optimizer_impl": impl,
            "gradient_checkpointing": "full" if workload["gradient_checkpointing"] else "none",
            "attention": workload["attention"],
            # early 2022: PyTorch 1.10/1.11 (unstated; every release before 2.0 zeroes gradients in place)
            "versions": {"torch": V100_TORCH}
            | ({"bitsandbytes": V100_BITSANDBYTES} if optimizer == "adamw-8bit" else {}),
        },
        "overhead": {"cuda_context": f"{context_bytes}B", "allocator_reserve": "0%"},
    }


def evaluate_measured() -> list[dict[str, Any]]:
    """nvml_used on a V100 (device total read after the run): compare one-sided, P + C <= measured,
    and report (measured - C) / P, the implied reserved-over-allocated ratio (>= 1 when consistent)."""
    import yaml

    with open(MEASURED_CASES, encoding="utf-8") as fh:
        cases = yaml.safe_load(fh)
    context = next(c for c in cases if c["id"] == "hf-perf-bert-large-load-context-only")["measured"]["value_bytes"]
    rows = []
    for case in cases:
        if case["kind"] != "training_full":
            continue
        result = estimate(parse_spec(measured_spec(case, context), case["id"]), hopper_or_newer=False)
        measured = case["measured"]["value_bytes"]
        rows.append(
            {
                "case": case["id"],
                "measured_bytes": measured,
                "estimate_total_bytes": result.peak_allocated_bytes + context,
                "implied_reserve_ratio": (measured - context) / result.peak_allocated_bytes,
                "consistent": result.peak_allocated_bytes + context <= measured,
            }
        )
    return rows


def print_measured(rows: list[dict[str, Any]]) -> None:
    gib = 2**30
    print("\nReal GPU (V100 16 GB, HF Trainer 2022, nvml_used after the run incl. the 1343 MiB CUDA context):")
    print(f"{'case':48} {'measured GiB':>12} {'P + C GiB':>10} {'(v-C)/P':>8}  P + C <= v")
    for r in rows:
        print(
            f"{r['case']:48} {r['measured_bytes'] / gib:12.3f} {r['estimate_total_bytes'] / gib:10.3f} "
            f"{r['implied_reserve_ratio']:8.2f}  {'yes' if r['consistent'] else 'NO'}"
        )


def groups(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Summary groups: all cases, then by family and by mode."""
    out = {"all": rows}
    for key in ("family", "mode"):
        for value in sorted({r[key] for r in rows}):
            out[value] = [r for r in rows if r[key] == value]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration", type=Path, default=DEFAULT_CALIBRATION)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = evaluate(load_cases(args.calibration))
    if args.json:
        print(json.dumps({"rows": rows, "summary": {k: summary(v) for k, v in groups(rows).items()}}, indent=2))
        return 0
    gib = 2**30
    print(f"{'case':48} {'reference GiB':>13} {'estimate GiB':>12} {'error':>8}  {'blocks GiB':>10}  phase (ref/est)")
    for r in rows:
        b = f"{r['blocks_bytes'] / gib:10.3f}" if r["blocks_bytes"] else f"{'-':>10}"
        print(
            f"{r['case']:48} {r['reference_bytes'] / gib:13.3f} {r['estimate_bytes'] / gib:12.3f} "
            f"{r['error_pct']:+7.1f}%  {b}  {r['reference_phase']}/{r['estimate_phase']}"
        )
    print_measured(evaluate_measured())
    print()
    for label, subset in groups(rows).items():
        st = summary(subset)
        print(
            f"peak_allocated, {label}: {st['count']} cases, median |error| {st['median_abs_pct']:.1f} %, "
            f"p90 {st['p90_abs_pct']:.1f} %, max {st['max_abs_pct']:.1f} %"
        )
    with_blocks = [r for r in rows if r["blocks_bytes"]]
    off = [100.0 * (r["estimate_bytes"] - r["blocks_bytes"]) / r["blocks_bytes"] for r in with_blocks]
    print(
        f"against the blocks (allocator model), {len(off)} cases: median {statistics.median(off):+.1f} %, "
        f"median |error| {statistics.median(map(abs, off)):.1f} %, range {min(off):+.1f} % to {max(off):+.1f} %"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
