"""The cases of ``benchmarks/data/tracer_bnb.json``: each a ``benchmarks/tracer_bnb.py`` command and the
vramcalc workload that describes the same step.

Regenerate (a few seconds per case, CPU only)::

    /tmp/tracer-venv/bin/python benchmarks/tracer_bnb.py --regenerate
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "tracer_bnb.json"
#: A Llama-style model at Llama-3.2-1B widths, 2 layers, a small vocabulary (so that the linears, not the
#: loss, decide the peak of most cases) and untied embeddings.
ARCH = "--arch llama --layers 2 --hidden 2048 --heads 32 --kv-heads 8 --ffn 8192 --vocab 1000"
MODEL = {
    "architecture": "decoder", "layers": 2, "hidden_size": 2048, "heads": 32, "kv_heads": 8, "ffn_size": 8192,
    "mlp": "swiglu", "norm": "rmsnorm", "position": "rotary", "vocab_size": 1000, "tie_embeddings": False,
}  # fmt: skip
NF4_DQ = {"method": "nf4", "double_quant": True}

# (id, tracer flags after ARCH, vramcalc workload without versions)
CASES: list[tuple[str, str, dict[str, Any]]] = [
    (
        "qlora-nf4-dq-all-prepare-b2-s1024",
        "--batch 2 --seq 1024 --dtype bf16 --optimizer adamw --mode train --quant nf4 --double-quant "
        "--lora 16:all-linear",
        {"mode": "train", "batch_size": 2, "seq_len": 1024, "precision": "bf16", "optimizer": "adamw",
         "quantization": NF4_DQ, "adapter": {"rank": 16, "targets": "all-linear"}},
    ),
    (
        "qlora-nf4-dq-all-prepare-nogc-b2-s1024",
        "--batch 2 --seq 1024 --dtype bf16 --optimizer adamw --mode train --quant nf4 --double-quant "
        "--lora 16:all-linear --no-checkpointing",
        {"mode": "train", "batch_size": 2, "seq_len": 1024, "precision": "bf16", "optimizer": "adamw",
         "gradient_checkpointing": "none", "quantization": NF4_DQ, "adapter": {"rank": 16, "targets": "all-linear"}},
    ),
    (
        "qlora-nf4-qv-noprepare-b2-s1024",
        "--batch 2 --seq 1024 --dtype bf16 --optimizer adamw --mode train --quant nf4 --double-quant "
        "--lora 16:q_proj,v_proj --no-prepare",
        {"mode": "train", "batch_size": 2, "seq_len": 1024, "precision": "bf16", "optimizer": "adamw",
         "quantization": NF4_DQ, "adapter": {"rank": 16, "targets": ["q_proj", "v_proj"], "prepare_kbit": False}},
    ),
    (
        "qlora-fp4-all-prepare-b1-s1024",
        "--batch 1 --seq 1024 --dtype bf16 --optimizer adamw --mode train --quant fp4 --lora 16:all-linear",
        {"mode": "train", "batch_size": 1, "seq_len": 1024, "precision": "bf16", "optimizer": "adamw",
         "quantization": {"method": "fp4", "double_quant": False}, "adapter": {"rank": 16, "targets": "all-linear"}},
    ),
    (
        "qlora-nf4-dq-all-dropout-prepare-b2-s1024",
        "--batch 2 --seq 1024 --dtype bf16 --optimizer adamw --mode train --quant nf4 --double-quant "
        "--lora 16:all-linear --lora-dropout 0.05",
        {"mode": "train", "batch_size": 2, "seq_len": 1024, "precision": "bf16", "optimizer": "adamw",
         "quantization": NF4_DQ, "adapter": {"rank": 16, "targets": "all-linear", "dropout": 0.05}},
    ),
    (
        "lora-int8-qv-prepare-b2-s1024",
        "--batch 2 --seq 1024 --dtype bf16 --optimizer adamw --mode train --quant int8 --lora 16:q_proj,v_proj",
        {"mode": "train", "batch_size": 2, "seq_len": 1024, "precision": "bf16", "optimizer": "adamw",
         "quantization": "int8", "adapter": {"rank": 16, "targets": ["q_proj", "v_proj"]}},
    ),
    (
        "lora-int8-all-noprepare-b2-s1024",
        "--batch 2 --seq 1024 --dtype bf16 --optimizer adamw --mode train --quant int8 --lora 16:all-linear "
        "--no-prepare",
        {"mode": "train", "batch_size": 2, "seq_len": 1024, "precision": "bf16", "optimizer": "adamw",
         "quantization": "int8", "adapter": {"rank": 16, "targets": "all-linear", "prepare_kbit": False}},
    ),
    (
        "infer-nf4-dq-prefill-last-b2-s2048",
        "--batch 2 --seq 2048 --dtype bf16 --optimizer none --mode infer --quant nf4 --double-quant --cache",
        {"mode": "inference", "batch_size": 2, "seq_len": 2048, "precision": "bf16", "runtime": "hf",
         "quantization": NF4_DQ},
    ),
    (
        "infer-fp4-forward-b4-s512",
        "--batch 4 --seq 512 --dtype bf16 --optimizer none --mode infer --quant fp4",
        {"mode": "inference", "batch_size": 4, "seq_len": 512, "precision": "bf16",
         "quantization": {"method": "fp4", "double_quant": False}},
    ),
    (
        "infer-nf4-dq-forward-one-token-b1",
        "--batch 1 --seq 1 --dtype bf16 --optimizer none --mode infer --quant nf4 --double-quant",
        {"mode": "inference", "batch_size": 1, "seq_len": 1, "precision": "bf16", "quantization": NF4_DQ},
    ),
    # an fp16 model with bnb_4bit_compute_dtype=float32 (transformers' BitsAndBytesConfig default)
    (
        "infer-fp4-fp16-fp32compute-forward-b4-s512",
        "--batch 4 --seq 512 --dtype fp16 --optimizer none --mode infer --quant fp4 --compute-dtype fp32",
        {"mode": "inference", "batch_size": 4, "seq_len": 512, "precision": "fp16",
         "quantization": {"method": "fp4", "double_quant": False, "compute_dtype": "fp32"}},
    ),
    (
        "infer-nf4-dq-fp16-fp32compute-prefill-last-b2-s2048",
        "--batch 2 --seq 2048 --dtype fp16 --optimizer none --mode infer --quant nf4 --double-quant --cache "
        "--compute-dtype fp32",
        {"mode": "inference", "batch_size": 2, "seq_len": 2048, "precision": "fp16", "runtime": "hf",
         "quantization": {**NF4_DQ, "compute_dtype": "fp32"}},
    ),
    (
        "qlora-nf4-dq-fp16-fp32compute-all-prepare-b2-s1024",
        "--batch 2 --seq 1024 --dtype fp16 --optimizer adamw --mode train --quant nf4 --double-quant "
        "--lora 16:all-linear --compute-dtype fp32",
        {"mode": "train", "batch_size": 2, "seq_len": 1024, "precision": "fp16", "optimizer": "adamw",
         "quantization": {**NF4_DQ, "compute_dtype": "fp32"}, "adapter": {"rank": 16, "targets": "all-linear"}},
    ),
    (
        "infer-int8-prefill-last-b2-s2048",
        "--batch 2 --seq 2048 --dtype bf16 --optimizer none --mode infer --quant int8 --cache",
        {"mode": "inference", "batch_size": 2, "seq_len": 2048, "precision": "bf16", "runtime": "hf",
         "quantization": "int8"},
    ),
]  # fmt: skip

KEEP = ("params", "peak_bytes", "peak_phase", "peak_at_op", "peak_by_category", "gemm_4bit_kernel_calls")


def regenerate() -> None:
    """Run every case in its own process (fake CUDA must load before torch) and write DATA."""
    out, versions = [], None
    for case_id, flags, workload in CASES:
        command = f"python benchmarks/tracer_bnb.py {ARCH} {flags}"
        argv = [sys.executable, str(HERE / "tracer_bnb.py"), *shlex.split(f"{ARCH} {flags}")]
        res = json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)
        versions = res["versions"]
        entry: dict[str, Any] = {"id": case_id, "command": command, "model": MODEL}
        entry["workload"] = {**workload, "versions": {"bitsandbytes": versions["bitsandbytes"]}}
        entry.update({k: res[k] for k in KEEP if k in res})
        entry["phase_peaks"] = {name: p["peak_bytes"] for name, p in res["phases"].items()}
        out.append(entry)
        print(f"{case_id}: {res['peak_bytes']:,} B in {res['peak_phase']}", file=sys.stderr)
    about = (
        "CPU tracer (shared/calibration/tracer) run through benchmarks/tracer_bnb.py: exact "
        "max_memory_allocated() of a bitsandbytes k-bit Llama (2 layers, hidden 2048, 32 heads, 8 KV heads, "
        "ffn 8192, vocabulary 1000, untied), QLoRA / 8-bit LoRA training steps through PEFT and k-bit forwards"
    )
    doc = {"about": about, "versions": versions, "gpu": "h100", "cases": out}
    DATA.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
