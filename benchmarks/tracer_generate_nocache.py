"""Allocator-level references for ``use_cache: false`` generation of a decoder, as today's transformers runs it.

``generate(..., use_cache=False)`` runs the whole sequence for every new token. Today's ``_sample`` asks
models whose ``forward`` takes it for the last position's logits only (``logits_to_keep=1``), copies that
row to fp32 (``outputs.logits[:, -1].to(copy=True, dtype=torch.float32)``) and deletes the step's outputs
before the next forward (``del outputs``). This script runs that loop for a ``LlamaForCausalLM`` built from
the sizes given, on the shared tracer (``shared/calibration/tracer``: real transformers modules on fake
CUDA tensors, exact ``torch.cuda.max_memory_allocated()``, A100 cuBLAS workspace), under ``torch.no_grad``
as ``generate`` does::

    /tmp/tracer-venv/bin/python benchmarks/tracer_generate_nocache.py --batch 2 --prompt 60 --new 8 \\
        --dtype bf16 --attn sdpa --json

``--cases`` runs the cases of ``benchmarks/data/tracer_generate_nocache.json`` again and prints that file.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import traced_cases

TRACER = Path(__file__).resolve().parent.parent.parent / "shared" / "calibration" / "tracer"
DATA = Path(__file__).resolve().parent / "data" / "tracer_generate_nocache.json"
#: The traced cases: each a command line (arguments after the script name).
CASES = {
    "llama-l2-h256-b2-p60-n8-bf16-sdpa": "--batch 2 --prompt 60 --new 8 --dtype bf16 --attn sdpa",
    "llama-l2-h256-b4-p200-n24-fp16-sdpa": "--batch 4 --prompt 200 --new 24 --dtype fp16 --attn sdpa",
    "llama-l2-h256-b4-p200-n24-fp16-eager": "--batch 4 --prompt 200 --new 24 --dtype fp16 --attn eager",
}
#: The model: Llama-shaped, GQA, tied embeddings off.
CONFIG = {
    "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 4096, "tie_word_embeddings": False,
}  # fmt: skip


def run(a: argparse.Namespace) -> dict[str, Any]:
    sys.path.insert(0, str(TRACER))
    import fakecuda  # type: ignore[import-not-found]

    fakecuda.enable()
    import models  # type: ignore[import-not-found]
    import sdpa_cuda  # type: ignore[import-not-found]
    import torch
    import transformers as T
    from torch._subclasses.fake_tensor import FakeTensorMode

    models._patch_trunc_normal()
    models.patch_transformers()
    sdpa_cuda.install("auto")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[a.dtype]
    with FakeTensorMode(allow_non_fake_inputs=False):
        torch.set_default_dtype(dtype)
        with torch.device("cuda"):
            cfg = T.LlamaConfig(**CONFIG)
            cfg._attn_implementation = a.attn
            model = T.LlamaForCausalLM(cfg)
        torch.set_default_dtype(torch.float32)
        with torch.device("cuda"):
            ids = torch.randint(1, CONFIG["vocab_size"] - 1, (a.batch, a.prompt))
        tracker = traced_cases.a100_tracker(model, ids)
        model.eval()

        def generate() -> Any:
            input_ids = ids
            for _ in range(a.new):
                outputs = model(input_ids=input_ids, use_cache=False, logits_to_keep=1)
                next_logits = outputs.logits[:, -1].to(copy=True, dtype=torch.float32)
                next_tokens = torch.argmax(next_logits, dim=-1)
                input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
                del outputs
            return input_ids

        with tracker, torch.no_grad():
            for run_ in range(1, 3):
                tracker.set_phase("forward", run_)
                generate()
    last = max(tracker.iter_peaks)
    return {"transformers": T.__version__, "peak_bytes": int(tracker.iter_peaks[last].total)}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=60)
    parser.add_argument("--new", type=int, default=8)
    parser.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    parser.add_argument("--attn", choices=("sdpa", "eager"), default="sdpa")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--cases", action="store_true")
    a = parser.parse_args(argv)
    if a.cases:
        out: dict[str, Any] = {"model": CONFIG, "cases": {}}
        for name, args in CASES.items():
            cmd = [sys.executable, __file__, *shlex.split(args), "--json"]
            result = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            out["transformers"] = result.pop("transformers")
            out["cases"][name] = {"args": args, **result}
        print(json.dumps(out, indent=1))
        return
    result = run(a)
    print(json.dumps(result) if a.json else f"{result['peak_bytes']:,} B")


if __name__ == "__main__":
    main(sys.argv[1:])
