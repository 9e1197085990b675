"""Allocator-level references for ``gradient_checkpointing: selective-op``: torchtitan's op-level selective
activation checkpointing, traced.

Runs the shared tracer's training step (``shared/calibration/tracer/groundtruth.py``: real transformers models on
fake CUDA tensors, exact ``torch.cuda.max_memory_allocated()``) with ``--grad-checkpointing``, and gives the
checkpoint of every decoder layer torchtitan's policy (``_apply_ac_to_transformer_block`` in torchtitan's
``parallelize.py``): keep the outputs of every other ``aten.mm`` of the block (the 1st, 3rd, ...) and of the
flash / memory-efficient SDPA kernels, recompute the rest. SiLU gets the backward a GPU runs (one kernel; the
tracer's CPU-only torch would run its composite form). Every other argument goes to the tracer::

    /tmp/tracer-venv/bin/python benchmarks/tracer_sac.py --arch llama --layers 2 --hidden 256 --heads 4 \
        --kv-heads 4 --ffn 688 --vocab 1000 --batch 2 --seq 512 --dtype bf16 --optimizer adamw --json

``--full-ac`` runs plain full checkpointing instead. ``--cases`` traces the cases of
``benchmarks/data/tracer_sac.json`` again and prints that file.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import traced_cases

TRACER = Path(__file__).resolve().parent.parent.parent / "shared" / "calibration" / "tracer"

#: The traced cases: each a tracer command line (arguments after the script name).
CASES: dict[str, str] = {
    "sac-llama_l2_h256_b2_s512_bf16_adamw": "--arch llama --layers 2 --hidden 256 --heads 4 --kv-heads 4 "
    "--ffn 688 --vocab 1000 --batch 2 --seq 512 --dtype bf16 --optimizer adamw",
    "sac-llama_l4_h512_gqa_b1_s2048_amp-bf16_adamw": "--arch llama --layers 4 --hidden 512 --heads 8 --kv-heads 2 "
    "--ffn 1376 --vocab 2000 --batch 1 --seq 2048 --dtype bf16 --amp --optimizer adamw",
    "sac-llama_l3_h384_b4_s256_fp32_sgd": "--arch llama --layers 3 --hidden 384 --heads 6 --kv-heads 6 "
    "--ffn 1024 --vocab 3000 --batch 4 --seq 256 --dtype fp32 --optimizer sgd",
    # the same steps under full checkpointing (--full-ac: no policy), whose SiLU backward sets the peak too
    "full-llama_l2_h256_b2_s512_bf16_adamw": "--full-ac --arch llama --layers 2 --hidden 256 --heads 4 "
    "--kv-heads 4 --ffn 688 --vocab 1000 --batch 2 --seq 512 --dtype bf16 --optimizer adamw",
    "full-llama_l3_h384_b4_s256_fp32_sgd": "--full-ac --arch llama --layers 3 --hidden 384 --heads 6 --kv-heads 6 "
    "--ffn 1024 --vocab 3000 --batch 4 --seq 256 --dtype fp32 --optimizer sgd",
}
#: Whether checkpoints get the op-level policy (off for ``--full-ac``: plain full checkpointing).
POLICY = {"on": True}


def _op_policy_context() -> Any:
    """torchtitan's op-level policy for one checkpointed block (a fresh mm count per block)."""
    import torch
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    aten = torch.ops.aten
    keep = {
        aten.mm.default,
        aten._scaled_dot_product_efficient_attention.default,
        aten._scaled_dot_product_flash_attention.default,
    }
    counts: dict[str, int] = defaultdict(int)

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        key = "recompute_mm" if ctx.is_recompute else "forward_mm"
        if func == aten.mm.default:
            counts[key] += 1
        every_other = func == aten.mm.default and counts[key] % 2 == 0
        return CheckpointPolicy.MUST_SAVE if func in keep and not every_other else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def _with_op_policy() -> None:
    """Every ``activation_checkpointing_enable`` call (``gradient_checkpointing_enable`` before transformers 5)
    passes the policy to ``torch.utils.checkpoint``."""
    from transformers import PreTrainedModel

    name = "activation_checkpointing_enable"
    if not hasattr(PreTrainedModel, name):
        name = "gradient_checkpointing_enable"
    enable = getattr(PreTrainedModel, name)

    keyword = name.removesuffix("_enable") + "_kwargs"  # activation_checkpointing_kwargs / gradient_...

    def enable_with_policy(self: Any, kwargs: dict[str, Any] | None = None, **rest: Any) -> None:
        given = {**(kwargs or {}), **(rest.pop(keyword, None) or {})}
        policy = {"context_fn": _op_policy_context} if POLICY["on"] else {}
        enable(self, {**given, **policy}, **rest)

    setattr(PreTrainedModel, name, enable_with_policy)


def trace(argv: list[str]) -> dict[str, Any]:
    """The tracer's result for one command line under the op-level policy (plain full checkpointing with
    ``--full-ac``)."""
    POLICY["on"] = "--full-ac" not in argv
    argv = [a for a in argv if a != "--full-ac"]
    sys.path.insert(0, str(TRACER))
    import fakecuda  # type: ignore[import-not-found]

    fakecuda.enable()
    _with_op_policy()
    traced_cases.native_silu_everywhere()
    import groundtruth  # type: ignore[import-not-found]

    args = [*argv, "--grad-checkpointing", "--attn", "sdpa", "--no-allocator-sim"]
    result: dict[str, Any] = groundtruth.run(groundtruth.parse_args(args))
    return result


def main(argv: list[str]) -> None:
    traced_cases.main(argv, "tracer_sac.py", CASES, trace)


if __name__ == "__main__":
    main(sys.argv[1:])
