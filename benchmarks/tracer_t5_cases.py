"""The cases of ``benchmarks/data/tracer_t5.json``: full fine-tuning and no-grad forwards of a small gated-GELU
T5 (T5 v1.1 / Flan-T5 / mT5 / T0 style), each a tracer command and the vramcalc workload of the same step.

The model is ``T5ForConditionalGeneration`` built from the ``config.json`` in :data:`CONFIGS` (2 encoder and 2
decoder blocks, d_model 512, 8 heads of 64, d_ff 1024, ``feed_forward_proj: gated-gelu``, a 1,000-token
vocabulary so that the blocks, not the loss, decide the peak). transformers 5 ties the LM head to the shared
embedding whatever ``tie_word_embeddings`` says, and skips the ``d_model ** -0.5`` rescale of the decoder
output when it says false (``T5Config.__post_init__``), so the vramcalc model is the ``flan-t5-small`` preset
at these sizes with ``tie_embeddings: true``.

Regenerate (a few seconds per case, CPU only)::

    /tmp/tracer-venv/bin/python benchmarks/tracer_t5_cases.py --regenerate
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "tracer_t5.json"
TRACER = HERE.parent.parent / "shared" / "calibration" / "tracer" / "groundtruth.py"
#: The config.json files the tracer builds the model from (as T5 v1.1 / Flan-T5 ship them, smaller).
GATED = {
    "model_type": "t5", "d_model": 512, "d_ff": 1024, "d_kv": 64, "num_heads": 8, "num_layers": 2,
    "num_decoder_layers": 2, "vocab_size": 1000, "feed_forward_proj": "gated-gelu", "dropout_rate": 0.1,
    "tie_word_embeddings": False, "relative_attention_num_buckets": 32,
}  # fmt: skip
CONFIGS = {"gated.json": GATED, "gated_nodrop.json": {**GATED, "dropout_rate": 0.0}}
#: The vramcalc model: the Flan-T5 preset at the traced sizes, tied as transformers 5 builds it.
MODEL = {
    "preset": "flan-t5-small", "layers": 2, "decoder_layers": 2, "hidden_size": 512, "heads": 8, "head_dim": 64,
    "ffn_size": 1024, "vocab_size": 1000, "tie_embeddings": True,
}  # fmt: skip
PRECISION_FLAGS = {"fp32": "--dtype fp32", "bf16": "--dtype bf16", "amp-bf16": "--dtype bf16 --amp"}

# (config file, mode, precision, attention, batch, seq_len, target_len, gradient checkpointing)
GRID: list[tuple[str, str, str, str, int, int, int, bool]] = [
    ("gated.json", "train", "fp32", "eager", 4, 256, 64, False),
    ("gated.json", "train", "fp32", "sdpa", 4, 256, 64, False),
    ("gated.json", "train", "bf16", "eager", 4, 256, 64, False),
    ("gated.json", "train", "bf16", "sdpa", 4, 256, 64, False),
    ("gated.json", "train", "amp-bf16", "eager", 4, 256, 64, False),
    ("gated.json", "train", "amp-bf16", "sdpa", 4, 256, 64, False),
    ("gated.json", "train", "fp32", "eager", 2, 128, 256, False),
    ("gated.json", "train", "bf16", "sdpa", 2, 512, 512, False),
    ("gated.json", "train", "fp32", "sdpa", 4, 512, 128, True),
    ("gated.json", "train", "bf16", "eager", 4, 512, 128, True),
    ("gated.json", "train", "amp-bf16", "sdpa", 4, 512, 128, True),
    ("gated_nodrop.json", "train", "fp32", "eager", 2, 512, 128, False),
    ("gated_nodrop.json", "train", "bf16", "sdpa", 2, 512, 128, False),
    ("gated_nodrop.json", "train", "amp-bf16", "eager", 2, 512, 128, False),
    ("gated.json", "infer", "fp32", "eager", 4, 256, 64, False),
    ("gated.json", "infer", "bf16", "sdpa", 8, 512, 128, False),
    ("gated.json", "infer", "bf16", "eager", 8, 512, 128, False),
]


def case_id(config: str, mode: str, precision: str, attention: str, b: int, s: int, t: int, gc: bool) -> str:
    drop = "-nodrop" if "nodrop" in config else ""
    return f"t5v11{drop}-{mode}-{precision}-{attention}{'-gc' if gc else ''}-b{b}-s{s}-t{t}"


def cases() -> list[dict[str, Any]]:
    """Each case's id, config file, tracer flags and vramcalc spec."""
    out = []
    for config, mode, precision, attention, b, s, t, gc in GRID:
        flags = f"--arch t5 --config-json {config} --batch {b} --seq {s} --tgt-seq {t} {PRECISION_FLAGS[precision]}"
        flags += f" --optimizer {'adamw' if mode == 'train' else 'none'} --mode {mode} --attn {attention}"
        flags += " --grad-checkpointing" if gc else ""
        workload: dict[str, Any] = {
            "mode": "train" if mode == "train" else "inference", "batch_size": b, "seq_len": s, "target_len": t,
            "precision": precision, "attention": attention,
        }  # fmt: skip
        if mode == "train":
            workload.update(optimizer="adamw", gradient_checkpointing="full" if gc else "none")
        model = {**MODEL, "dropout": CONFIGS[config]["dropout_rate"]}
        spec = {"name": case_id(config, mode, precision, attention, b, s, t, gc), "model": model, "workload": workload}
        out.append({"id": spec["name"], "config": config, "flags": flags, "spec": spec})
    return out


KEEP = ("params", "peak_bytes", "peak_phase", "peak_at_op", "peak_by_category")


def regenerate() -> None:
    """Run every case in its own process (fake CUDA must load before torch) and write DATA."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, content in CONFIGS.items():
            (Path(tmp) / name).write_text(json.dumps(content), encoding="utf-8")
        for case in cases():
            argv = [sys.executable, str(TRACER), *shlex.split(case["flags"]), "--json"]
            res = json.loads(subprocess.run(argv, check=True, capture_output=True, text=True, cwd=tmp).stdout)
            entry: dict[str, Any] = {
                "id": case["id"],
                "config_json": {"file": case["config"], "content": CONFIGS[case["config"]]},
                "command": f"python ../shared/calibration/tracer/groundtruth.py {case['flags']} --json",
                "spec": case["spec"],
            }
            entry.update({k: res[k] for k in KEEP if k in res})
            entry["phase_peaks"] = {name: p["peak_bytes"] for name, p in res["phases"].items()}
            out.append(entry)
            print(f"{case['id']}: {res['peak_bytes']:,} B in {res['peak_phase']}", file=sys.stderr)
    import torch
    import transformers

    about = (
        "CPU tracer (shared/calibration/tracer): exact max_memory_allocated() of T5ForConditionalGeneration built "
        "from a T5 v1.1 / Flan-T5-style config.json (gated-gelu, 2 + 2 blocks, d_model 512, 8 heads, d_ff 1024, "
        "vocabulary 1000, dropout_rate 0.1 or 0.0, tie_word_embeddings false: tied, no decoder-output rescale "
        "in transformers 5): full fine-tuning steps with AdamW (foreach) and no-grad forwards, H100 cuBLAS "
        "workspaces"
    )
    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    doc = {"about": about, "versions": versions, "gpu": "h100", "cases": out}
    DATA.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        raise SystemExit("usage: python benchmarks/tracer_t5_cases.py --regenerate (in the tracer's venv)")
    regenerate()
