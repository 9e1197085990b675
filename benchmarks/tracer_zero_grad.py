"""Allocator-level references for ``workload.versions.torch`` before 2.0: a loop whose ``zero_grad()`` zeroes
the gradients in place (``set_to_none=False``, the default of every PyTorch release before 2.0).

Runs the shared tracer's own training step (``shared/calibration/tracer/groundtruth.py``: real transformers
models on fake CUDA tensors, exact ``torch.cuda.max_memory_allocated()``) with ``Optimizer.zero_grad`` and
``Module.zero_grad`` made to keep the gradients, so the reported step (the second) starts with every gradient
allocated, as under PyTorch 1.x. Every argument is passed on to the tracer::

    /tmp/tracer-venv/bin/python benchmarks/tracer_zero_grad.py --arch bert --layers 2 --hidden 256 \
        --heads 4 --ffn 1024 --vocab 1000 --batch 4 --seq 128 --optim-impl forloop --attn eager --json

Pass ``--optim-impl forloop`` and ``--attn eager`` to run as PyTorch 1.x did (no ``foreach`` default, no SDPA).
SiLU gets the single-kernel backward a GPU runs (the tracer's CPU-only torch would run its composite form).
``--cases`` traces the cases of ``benchmarks/data/tracer_zero_grad.json`` again and prints that file.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import traced_cases

TRACER = Path(__file__).resolve().parent.parent.parent / "shared" / "calibration" / "tracer"
DATA = Path(__file__).resolve().parent / "data" / "tracer_zero_grad.json"

#: The traced cases: each a tracer command line (arguments after the script name).
CASES: dict[str, str] = {
    "zg-bert_l2_h256_b4_s128_fp32_adamw_eager": "--arch bert --layers 2 --hidden 256 --heads 4 --ffn 1024 "
    "--vocab 1000 --batch 4 --seq 128 --dtype fp32 --optimizer adamw --optim-impl forloop --attn eager",
    "zg-bert_l2_h256_b1_s16_fp32_sgd_eager": "--arch bert --layers 2 --hidden 256 --heads 4 --ffn 1024 "
    "--vocab 30522 --batch 1 --seq 16 --dtype fp32 --optimizer sgd --optim-impl forloop --attn eager",
    "zg-gpt2_l2_h256_b2_s128_amp_fp16_adamw_eager": "--arch gpt2 --layers 2 --hidden 256 --heads 4 --ffn 1024 "
    "--vocab 5000 --batch 2 --seq 128 --dtype fp16 --amp --optimizer adamw --optim-impl forloop --attn eager",
    "zg-llama_l2_h256_b2_s256_fp32_adamw_gc_eager": "--arch llama --layers 2 --hidden 256 --heads 4 --kv-heads 4 "
    "--ffn 688 --vocab 4000 --batch 2 --seq 256 --dtype fp32 --optimizer adamw --optim-impl forloop --attn eager "
    "--grad-checkpointing",
    "zg-resnet50_b8_i224_fp32_sgd-momentum": "--arch resnet50 --batch 8 --image-size 224 --dtype fp32 "
    "--optimizer sgd-momentum --optim-impl forloop",
}


def _keep_gradients() -> None:
    """``zero_grad()`` as before PyTorch 2.0: the gradients are zeroed in place, whatever the caller asks."""
    import torch

    optimizer_zero_grad = torch.optim.Optimizer.zero_grad
    module_zero_grad = torch.nn.Module.zero_grad

    def optimizer_keep(self: Any, set_to_none: bool = True) -> None:
        optimizer_zero_grad(self, set_to_none=False)

    def module_keep(self: Any, set_to_none: bool = True) -> None:
        module_zero_grad(self, set_to_none=False)

    torch.optim.Optimizer.zero_grad = optimizer_keep  # type: ignore[method-assign]
    torch.nn.Module.zero_grad = module_keep  # type: ignore[method-assign]


def trace(argv: list[str]) -> dict[str, Any]:
    """The tracer's result for one command line, gradients kept between steps."""
    sys.path.insert(0, str(TRACER))
    import fakecuda  # type: ignore[import-not-found]

    fakecuda.enable()
    _keep_gradients()
    traced_cases.native_silu_everywhere()
    import groundtruth  # type: ignore[import-not-found]

    result: dict[str, Any] = groundtruth.run(groundtruth.parse_args([*argv, "--no-allocator-sim"]))
    return result


def main(argv: list[str]) -> None:
    traced_cases.main(argv, "tracer_zero_grad.py", CASES, trace)


if __name__ == "__main__":
    main(sys.argv[1:])
