"""The cases of ``benchmarks/data/tracer_flash.json``: each a ``benchmarks/tracer_flash.py`` command and the
vramcalc workload that describes the same step. ``--flash`` runs transformers' flash_attention_2 path; the
cases without it are the same steps under SDPA, for comparison. At 512 tokens the QLoRA step peaks in the MLP's
backward under SDPA too (its math kernel's scores are still small there).

Regenerate (a few seconds per case, CPU only; needs bitsandbytes 0.50.2 and peft 0.21.2 beside the tracer's
venv)::

    /tmp/tracer-venv/bin/python benchmarks/tracer_flash.py --regenerate
"""

from __future__ import annotations

from typing import Any

from tracer_bnb_cases import NF4_DQ  # the model: ARCH and MODEL of tracer_bnb_cases (Llama-3.2-1B widths)

TRAIN = "--batch 1 --dtype bf16 --optimizer adamw --mode train"
QLORA = "--quant nf4 --double-quant --lora 16:all-linear"
ALL = {"rank": 16, "targets": "all-linear"}
BNB = {"bitsandbytes": "0.50.2"}


def _train(seq: int, attention: str, **keys: Any) -> dict[str, Any]:
    return {"mode": "train", "batch_size": 1, "seq_len": seq, "precision": "bf16", "optimizer": "adamw",
            "attention": attention, **keys}  # fmt: skip


# (id, tracer flags after ARCH, vramcalc workload)
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("lora-bf16-qv-flash-s2048", f"--flash {TRAIN} --seq 2048 --lora 16:q_proj,v_proj --no-prepare",
     _train(2048, "flash", adapter={"rank": 16, "targets": ["q_proj", "v_proj"]})),
    ("qlora-nf4-prepare-flash-s2048", f"--flash {TRAIN} --seq 2048 {QLORA}",
     _train(2048, "flash", quantization=NF4_DQ, adapter=ALL, versions=BNB)),
    ("qlora-nf4-prepare-sdpa-s2048", f"{TRAIN} --seq 2048 {QLORA}",
     _train(2048, "sdpa", quantization=NF4_DQ, adapter=ALL, versions=BNB)),
    ("qlora-nf4-prepare-flash-s8192", f"--flash {TRAIN} --seq 8192 {QLORA}",
     _train(8192, "flash", quantization=NF4_DQ, adapter=ALL, versions=BNB)),
    ("qlora-nf4-prepare-sdpa-s8192", f"{TRAIN} --seq 8192 {QLORA}",
     _train(8192, "sdpa", quantization=NF4_DQ, adapter=ALL, versions=BNB)),
    ("qlora-nf4-prepare-flash-s512", f"--flash {TRAIN} --seq 512 {QLORA}",
     _train(512, "flash", quantization=NF4_DQ, adapter=ALL, versions=BNB)),
    ("qlora-nf4-prepare-sdpa-s512", f"{TRAIN} --seq 512 {QLORA}",
     _train(512, "sdpa", quantization=NF4_DQ, adapter=ALL, versions=BNB)),
    ("full-bf16-flash-s2048", f"--flash {TRAIN} --seq 2048", _train(2048, "flash")),
    ("full-amp-bf16-flash-s2048", f"--flash {TRAIN} --amp --seq 2048",
     {**_train(2048, "flash"), "precision": "amp-bf16"}),
    ("prefill-bf16-flash-s2048", "--flash --batch 1 --seq 2048 --dtype bf16 --optimizer none --mode infer --cache",
     {"mode": "inference", "batch_size": 1, "seq_len": 2048, "precision": "bf16", "runtime": "hf",
      "attention": "flash"}),
]  # fmt: skip
