"""Per-rank estimates of multi-GPU plans against measured runs.

Cases: ``benchmarks/data/measured_multi_gpu.yaml`` (copied with citations from
``shared/calibration/measured.yaml``; cite the case ids). Scoring follows shared/calibration/README.md:

* ``peak_reserved`` (torchtitan, max over ranks): one-sided, the allocated-level estimate P must not
  exceed the reserved peak v; the table shows v / P (the caching allocator keeps more than it needs when
  there is headroom, so v / P > 1 is expected; P > v is a miss).
* ``peak_allocated`` with only the static part scoreable (Megatron-LM): weights + gradients + optimizer
  shard against ``memory_allocated`` after iteration 1, as a signed error.
* ``fits`` / ``oom`` (DeepSpeed tutorials): predicted to fit iff P + C <= the card's usable memory, with
  C the CUDA context measured on a V100 (1343 MiB, measured.yaml case hf-perf-bert-large-load-context-only);
  an OOM also needs P above the bytes already allocated when it happened.

    python benchmarks/parallel_accuracy.py [--json]

Nothing here is tuned to these cases: the estimates are the formulas of vramcalc/parallel*.py.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vramcalc.families import estimate  # noqa: E402
from vramcalc.spec.load import parse_spec  # noqa: E402

CASES = ROOT / "benchmarks" / "data" / "measured_multi_gpu.yaml"
GiB = 2**30
MiB = 2**20
#: CUDA context of the V100 stack (measured.yaml case hf-perf-bert-large-load-context-only).
V100_CONTEXT = 1343 * MiB
#: torchtitan's interleaved 1F1B splits each rank's layers into stages; the Dec 2024 run does not state how
#: many, so 2 per rank is assumed (and reported as an inferred input).
TORCHTITAN_VIRTUAL_STAGES = 2


def load_cases(path: Path = CASES) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def _model(m: dict[str, Any]) -> dict[str, Any]:
    model = {
        "architecture": "decoder",
        "layers": m["layers"],
        "hidden_size": m["hidden_size"],
        "heads": m["heads"],
        "kv_heads": m["kv_heads"],
        "ffn_size": m["ffn_size"],
        "vocab_size": m["vocab_size"],
        "tie_embeddings": m["tie_embeddings"],
        "mlp": m["mlp"],
    }
    if m["mlp"] == "gelu":  # Megatron-LM GPT-2: LayerNorm, learned positions (1024), biases, dropout 0.1
        model |= {"norm": "layernorm", "position": "learned", "max_position_embeddings": 1024, "bias": True}
    return model


def torchtitan_spec(case: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """FSDP2 (+ TP with sequence parallelism, + PP, + CP) as torchtitan applies them, bf16 mixed precision
    with fp32 reduce, AdamW. Local batch split into torchtitan's default micro-batches (one per stage)."""
    w, par = case["workload"], case["workload"]["parallelism"]
    inferred = list(w.get("inferred", []))
    tp, pp, cp = par.get("tp", 1), par.get("pp", 1), par.get("cp", 1)
    interleaved = par.get("pp_schedule") == "Interleaved1F1B"
    virtual = TORCHTITAN_VIRTUAL_STAGES if interleaved else 1
    micro = pp * virtual if pp > 1 else 1
    parallel: dict[str, Any] = {
        "fsdp": "full_shard",
        "data": par["fsdp_degree"],
        "tensor": tp,
        "pipeline": pp,
        "context": cp,
        "sequence_parallel": tp > 1,
    }
    if pp > 1:
        parallel |= {"micro_batches": micro, "uneven_pipeline": case["model"]["layers"] % (pp * virtual) != 0}
    if interleaved:
        parallel |= {"schedule": "interleaved", "virtual_stages": virtual}
        inferred.append(f"virtual_stages {virtual}")
    workload = {
        "batch_size": w["batch_size"] // micro,
        "seq_len": w["seq_len"],
        "precision": "mixed-bf16",
        "optimizer": "adamw",
        # torchtitan's "selective" here is its op-level policy (activation_checkpointing_detail)
        "gradient_checkpointing": {"selective": "selective-op"}.get(
            w["gradient_checkpointing"], w["gradient_checkpointing"]
        ),
        "attention": "sdpa",
    }
    return {"name": case["id"], "model": _model(case["model"]), "workload": workload, "parallel": parallel}, inferred


#: Settings a run's source does not show in its text, from the run's own config in the examples repository.
#: The ZeRO-Offload tutorial's 10B GPT-2: DeepSpeedExamples Megatron-LM/scripts/ds_zero-offload_10B_config.json
#: (beside ds_zero-offload_10B_pretrain_gpt2_model_parallel.sh, both added in ece5e0e0, 2020-09-09; its fixed
#: loss_scale 4096 is the one the tutorial's log shows): "reduce_bucket_size": 50000000 and
#: "activation_checkpointing": {"partition_activations": true, "contiguous_memory_optimization": true,
#: "cpu_checkpointing": true}.
RUN_CONFIGS: dict[str, dict[str, Any]] = {
    "deepspeed-zero-offload-gpt2-10b-1gpu-fits": {"reduce_bucket_size": 50_000_000, "offload_activations": "cpu"},
}


def deepspeed_spec(case: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """DeepSpeed fp16 (16-bit params and grads, fp32 master + Adam) with the case's ZeRO stage."""
    w, par = case["workload"], {**case["workload"]["parallelism"], **RUN_CONFIGS.get(case["id"], {})}
    inferred = list(w.get("inferred", []))
    if case["id"] in RUN_CONFIGS:
        inferred.append("reduce_bucket_size 5e7, cpu_checkpointing: the run's ds_zero-offload_10B_config.json")
    seq = w["seq_len"]
    if seq is None:
        seq = 1024
        inferred.append("seq_len 1024 (the GPT-2 examples' default)")
    parallel: dict[str, Any] = {"data": par.get("dp", 1), "zero": par.get("zero_stage", 0)}
    if par.get("offload_optimizer") == "cpu":
        parallel["offload"] = {"optimizer": "cpu"}
    if par.get("offload_activations") == "cpu":  # DeepSpeed's activation_checkpointing.cpu_checkpointing
        parallel["offload"] = {**parallel.get("offload", {}), "activations": "cpu"}
    if par.get("reduce_bucket_size"):
        parallel["buckets"] = {"reduce": int(par["reduce_bucket_size"])}
    ckpt = {True: "full", False: "none"}[w["gradient_checkpointing"]]
    workload = {
        "batch_size": w["batch_size"],
        "seq_len": seq,
        "precision": w["precision"],
        "optimizer": "adam",
        "gradient_checkpointing": ckpt,
        "attention": w["attention"],
    }
    return {"name": case["id"], "model": _model(case["model"]), "workload": workload, "parallel": parallel}, inferred


def megatron_spec(case: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Megatron-LM with the distributed optimizer; micro-batch and sequence are not stated (only the
    static part is scored, which does not depend on them)."""
    par = case["workload"]["parallelism"]
    parallel = {"data": par["dp"], "tensor": par["tp"], "pipeline": par["pp"], "distributed_optimizer": True}
    workload = {"batch_size": 1, "seq_len": 4096, "precision": "mixed-bf16", "optimizer": "adam"}
    spec = {"name": case["id"], "model": _model(case["model"]), "workload": workload, "parallel": parallel}
    return spec, ["batch_size 1, seq_len 4096 (not stated; not used by the static part)"]


def case_spec(case: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    if case["id"].startswith("torchtitan"):
        return torchtitan_spec(case)
    if case["id"].startswith("megatron"):
        return megatron_spec(case)
    return deepspeed_spec(case)


#: Why a case is reported but left out of the headline (not a comparison of like with like).
NOT_COMPARABLE = {
    "selective-compiled": "torchtitan's op-level selective checkpointing under torch.compile: the compiler's "
    "partitioner chooses what else each block saves beside the policy's outputs, which vramcalc does not model",
}


def comparability(case: dict[str, Any]) -> str:
    """'' when the case measures what vramcalc models, else the reason it does not. torchtitan's selective
    checkpointing in these runs is its op-level policy (``gradient_checkpointing: selective-op``)."""
    w = case["workload"]
    if case["id"].startswith("torchtitan") and w["gradient_checkpointing"] == "selective" and w.get("compile"):
        return NOT_COMPARABLE["selective-compiled"]
    return ""


def evaluate(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per case: the estimate, the measured figure and the verdict of its scoring rule."""
    rows = []
    for case in cases:
        spec_data, inferred = case_spec(case)
        result = estimate(parse_spec(spec_data, case["id"]))
        m = case["measured"]
        row = {
            "case": case["id"],
            "quantity": m["quantity"],
            "estimate_bytes": result.peak_allocated_bytes,
            "inferred": inferred,
            "stage": result.parallel.stage,
            "not_comparable": comparability(case),
        }
        if m["quantity"] == "peak_reserved":
            row |= {"measured_bytes": m["value_bytes"], "ratio": m["value_bytes"] / result.peak_allocated_bytes}
            row["ok"] = result.peak_allocated_bytes <= m["value_bytes"]
        elif m["quantity"] == "peak_allocated":
            static = next(a for a in m["also"] if a["quantity"] == "allocated")["value_bytes"]
            step = result.phase_components["optimizer"]
            states = step["parameters"] + step["gradients"] + step["optimizer_states"]
            row |= {"quantity": "static allocated", "measured_bytes": static, "estimate_bytes": states}
            row |= {"error_pct": 100.0 * (states - static) / static, "ok": abs(states - static) <= 0.01 * static}
        else:
            row |= _fit_row(case, result.peak_allocated_bytes)
        rows.append(row)
    return rows


def _fit_row(case: dict[str, Any], peak: int) -> dict[str, Any]:
    usable = case["gpu"]["vram_usable_bytes"]
    predicted_fits = peak + V100_CONTEXT <= usable
    at_oom = [a["value_bytes"] for a in case["measured"].get("also", []) if a["quantity"] == "allocated_at_oom"]
    fits = case["measured"]["quantity"] == "fits"
    ok = predicted_fits == fits and (fits or not at_oom or peak > at_oom[0])
    return {
        "measured_bytes": usable,
        "predicted": "fits" if predicted_fits else "oom",
        "label": "fits" if fits else "oom",
        "ok": ok,
    }


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Headline over the comparable cases; the others are counted apart."""
    comparable = [r for r in rows if not r["not_comparable"]]
    reserved = [r for r in comparable if r["quantity"] == "peak_reserved"]
    ratios = sorted(r["ratio"] for r in reserved)
    return {
        "cases": len(rows),
        "not_comparable": len(rows) - len(comparable),
        "comparable": len(comparable),
        "comparable_ok": sum(r["ok"] for r in comparable),
        "reserved_cases": len(reserved),
        "reserved_within_bound": sum(r["ok"] for r in reserved),
        "reserved_ratio_median": statistics.median(ratios) if ratios else None,
        "reserved_ratio_min": ratios[0] if ratios else None,
        "reserved_ratio_max": ratios[-1] if ratios else None,
    }


def _line(row: dict[str, Any]) -> str:
    est, meas = row["estimate_bytes"] / GiB, row["measured_bytes"] / GiB
    if row["quantity"] == "peak_reserved":
        verdict = f"v/P {row['ratio']:5.2f}  {'P <= v' if row['ok'] else 'P > v  MISS'}"
    elif "error_pct" in row:
        verdict = f"error {row['error_pct']:+.2f} %  {'ok' if row['ok'] else 'MISS'}"
    else:
        verdict = f"usable; {row['predicted']} (label {row['label']})  {'ok' if row['ok'] else 'MISS'}"
    flag = (" *" if row["inferred"] else "") + (" (not comparable)" if row["not_comparable"] else "")
    return f"{row['case'][:52]:52} {row['quantity'][:16]:16} {meas:9.2f} {est:9.2f}  {verdict}{flag}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = evaluate(load_cases())
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary(rows)}, indent=2))
        return
    print(f"{'case':52} {'quantity':16} {'meas GiB':>9} {'est GiB':>9}  verdict  (* inferred inputs)")
    for row in rows:
        print(_line(row))
    print()
    for reason in sorted({r["not_comparable"] for r in rows if r["not_comparable"]}):
        print(f"not comparable: {reason}")
    print(json.dumps(summary(rows)))


if __name__ == "__main__":
    main()
