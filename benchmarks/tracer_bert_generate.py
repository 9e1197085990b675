"""What the BERT inference table of the transformers SDPA docs ran: ``generate`` on ``BertForMaskedLM``.

The table (``docs/source/en/model_doc/bert.md``, "Using Scaled Dot Product Attention (SDPA)", PyTorch 2.2.0,
A100 80GB, fp16) prints a *per token latency* of 5-6 ms for bert-base-uncased at every batch and length.
One fp16 forward of 128-1,024 tokens on an A100 takes a few milliseconds, so the figure is one whole
forward per generated token: the benchmark called ``generate``, which transformers releases before 4.50
allowed on ``BertForMaskedLM`` (it overrides ``prepare_inputs_for_generation`` and appends a pad token as
the position to predict). Without a KV cache every step runs the whole sequence again, and the 4.41
``_sample`` loop keeps the previous step's outputs (all positions' logits) until the next forward has
returned (``del outputs`` arrived in 4.42).

This script replays that loop on the shared tracer (``shared/calibration/tracer``: real transformers
modules on fake CUDA tensors, exact ``torch.cuda.max_memory_allocated()``) with transformers 4.41.0, the
release that shipped the table's pull request, for each batch and prompt length of the table, and also a
plain forward loop (``_ = model(input_ids, mask)``, keeping the previous output) for comparison::

    /tmp/tracer-venv/bin/pip install --target /tmp/tf4.41.0 transformers==4.41.0 "tokenizers<0.20" \\
        "huggingface-hub<0.24" "numpy<2" requests urllib3 idna certifi charset_normalizer filelock pyyaml \\
        packaging tqdm fsspec safetensors regex --no-deps
    PYTHONPATH=/tmp/tf4.41.0 /tmp/tracer-venv/bin/python benchmarks/tracer_bert_generate.py --json

The tracer sees ``aten.linear`` undecomposed under ``torch.inference_mode`` and so allocates no cuBLAS
workspace; a GPU does (8.125 MiB on an A100), so ``peak_bytes`` adds it. ``generate_N_blocks`` is the
same trace replayed through the tracer's model of the caching allocator, which counts whole blocks where
the allocator hands a block out unsplit (BERT's 1.125 MiB weights; vramcalc/core/allocator.py); the
workspace is added to it at its size (after the weights it splits an 11 MiB free block). The run quoted in
docs/accuracy.md is ``benchmarks/data/tracer_bert_generate.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import traced_cases

TRACER = Path(__file__).resolve().parent.parent.parent / "shared" / "calibration" / "tracer"
#: The cuBLAS workspace of one handle before Hopper (ATen CublasHandlePool.cpp: ":4096:2:16:8").
CUBLAS_WORKSPACE = 4096 * 1024 * 2 + 16 * 1024 * 8
#: (batch, prompt tokens) of the table's rows, and its measured peaks in MB (eager attention).
TABLE = {
    (1, 128): 282.661,
    (1, 256): 298.686,
    (2, 128): 314.523,
    (2, 256): 347.546,
    (4, 128): 378.895,
    (4, 256): 443.209,
}


def trace(batch: int, prompt: int, new_tokens: int, loop: str) -> tuple[int, int]:
    """The tracer's peak of the third run of ``loop`` ("generate" or "forward"), in bytes, and the peak of
    the whole trace replayed through the tracer's model of the caching allocator (``allocsim``), which
    also counts the blocks handed out whole."""
    sys.path.insert(0, str(TRACER))
    import allocsim  # type: ignore[import-not-found]
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
    # the padding warning reads token values the fake tensors do not have
    T.PreTrainedModel.warn_if_padding_and_no_attention_mask = lambda *a, **k: None
    with FakeTensorMode(allow_non_fake_inputs=False):
        torch.set_default_dtype(torch.float16)  # from_pretrained(torch_dtype=torch.float16)
        with torch.device("cuda"):
            cfg = T.BertConfig()  # bert-base-uncased
            cfg._attn_implementation = "eager"
            model = T.BertForMaskedLM(cfg)
        torch.set_default_dtype(torch.float32)
        with torch.device("cuda"):
            ids = torch.randint(0, 5, (batch, prompt))
            mask = torch.ones(batch, prompt)
        tracker = traced_cases.a100_tracker(model, ids, mask)
        model.eval()

        def generate() -> Any:
            input_ids, attention_mask = ids, ids.ne(0).long()  # generate's mask when the pad id occurs
            for _ in range(new_tokens):
                inputs = model.prepare_inputs_for_generation(input_ids, attention_mask=attention_mask)
                outputs = model(**inputs, return_dict=True)  # kept until the next forward returns (4.41)
                next_tokens = torch.argmax(outputs.logits[:, -1, :], dim=-1)
                input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
                attention_mask = torch.cat([attention_mask, attention_mask.new_ones((batch, 1))], dim=-1)
            return input_ids

        def forward() -> Any:
            out = None
            for _ in range(new_tokens):
                out = model(ids, None if batch == 1 else mask)  # ``_ = model(...)`` keeps the last one
            return out

        with tracker, torch.inference_mode():
            for run in range(1, 4):
                tracker.set_phase("forward", run)
                generate() if loop == "generate" else forward()  # what it returns is dropped
    last = max(tracker.iter_peaks)
    return int(tracker.iter_peaks[last].total), int(allocsim.replay(tracker.events)["peak_allocated_bytes"])


def traced(batch: int, prompt: int, new_tokens: int, loop: str) -> tuple[int, int]:
    """:func:`trace` in a fresh interpreter (the tracer must be enabled before torch is imported)."""
    argv = [sys.executable, __file__, "--one", str(batch), str(prompt), str(new_tokens), loop]
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout.split()
    return int(out[-2]), int(out[-1])


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--new-tokens", type=int, nargs="+", default=[100, 128])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--one", nargs=4, metavar=("BATCH", "PROMPT", "NEW", "LOOP"), help=argparse.SUPPRESS)
    a = parser.parse_args(argv)
    if a.one:
        batch, prompt, new_tokens, loop = a.one
        print(*trace(int(batch), int(prompt), int(new_tokens), loop))
        return
    rows = []
    for (batch, prompt), measured_mb in TABLE.items():
        row: dict[str, Any] = {"batch": batch, "prompt": prompt, "measured_bytes": round(measured_mb * 1e6)}
        row["forward_loop"] = traced(batch, prompt, 4, "forward")[0] + CUBLAS_WORKSPACE
        for n in a.new_tokens:
            peak, blocks = traced(batch, prompt, n, "generate")
            row[f"generate_{n}"] = peak + CUBLAS_WORKSPACE
            row[f"generate_{n}_blocks"] = blocks + CUBLAS_WORKSPACE
        rows.append(row)
    version = subprocess.run(
        [sys.executable, "-c", "import transformers; print(transformers.__version__)"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    result = {"transformers": version, "cublas_workspace_bytes": CUBLAS_WORKSPACE, "rows": rows}
    if a.json:
        print(json.dumps(result, indent=1))
        return
    for r in rows:
        cells = "  ".join(
            f"{k} {v / 1e6:8.2f} MB ({(v - r['measured_bytes']) / r['measured_bytes']:+.1%})"
            for k, v in r.items()
            if k.startswith(("generate", "forward")) and not k.endswith("_blocks")
        )
        print(f"b{r['batch']} s{r['prompt']}: measured {r['measured_bytes'] / 1e6:8.2f} MB  {cells}")


if __name__ == "__main__":
    main(sys.argv[1:])
