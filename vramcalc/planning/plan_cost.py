"""The step-time cost `vramcalc plan` ranks layouts by: a simple, stated model, not a benchmark.

Pure (no I/O). ``relative_cost`` is the time one optimizer step takes, per sequence and per GPU,
relative to every GPU computing its share of the step's forward and backward pass once, at full
speed, with nothing else to wait for (1.00). Plans on the same GPU count with the same batch per
data-parallel rank are compared by it: lower is faster. It is the sum of

* **compute** x **micro-batch** x **pipeline bubble**:

  - compute: 1 without recomputation; full activation checkpointing recomputes the forward pass, about
    a third of a step's FLOPs (forward 2, backward 4 FLOPs per parameter and token): x (1 + 1/3);
    selective recomputation (attention scores only) ``x (1 + 1/30)``, a tenth of that (Korthikanti et
    al. 2022, "Reducing Activation Recomputation in Large Transformer Models", report that it removes
    over 90 % of full recomputation's overhead);
  - micro-batch: each micro-batch pays a fixed cost worth ``MICRO_BATCH_OVERHEAD_TOKENS`` (128) tokens
    of compute -- kernel launches and matrix multiplies too small to fill the GPU --, so a micro-batch
    of ``T`` tokens per GPU runs at ``T / (T + 128)`` of full speed: ``x (1 + 128 / T)``. Splitting the
    batch into more, smaller micro-batches (gradient accumulation) raises it;
  - pipeline bubble: with ``p`` stages and ``m`` micro-batches a stage idles ``(p - 1) / (m + p - 1)``
    of the step (1F1B and GPipe; Narayanan et al. 2021): ``x (m + p - 1) / m``;

* **communication**, not overlapped with compute (an upper bound), each term the time of the bytes one
  GPU sends over the time of its compute. A GPU computes about ``FLOPS_PER_BYTE`` (1,500) FLOPs in the
  time its link moves one byte (A100: 312 TFLOP/s bf16 at ~50 % use over ~100 GB/s of NVLink per
  direction; H100 is of the same order). Moving a 16-bit copy of a rank's ``P`` parameters (ring
  collectives: ``(s - 1) / s`` of it per GPU in a group of ``s``) against ``6 P`` FLOPs per token gives
  ``(s - 1) / s x 2 x 1500 / (6 T) = (s - 1) / s x 500 / T`` for ``T`` tokens:

  - gradient synchronisation over the data-parallel group (``s`` = data x context ranks): plain data
    parallelism, ZeRO-1 and Megatron all-reduce once per step (two copies: ``(s - 1) / s x 1000 / T``,
    ``T`` the tokens of the whole step); ZeRO-2/3 and FSDP shard_grad_op/full_shard reduce-scatter the
    gradients of every micro-batch (one copy each), and ZeRO-2 all-gathers the updated parameters once;
  - parameter all-gathers: ZeRO-3 and FSDP full_shard/hybrid gather the parameters for the forward and
    again for the backward of every micro-batch, FSDP shard_grad_op once: ``(s - 1) / s x 500 / T``
    each, ``T`` = one micro-batch's tokens (ZeRO paper, Rajbhandari et al. 2020: 1.5x the data-parallel
    volume with one micro-batch);
  - tensor parallelism: four all-reduces (or all-gather + reduce-scatter with sequence parallelism) of
    the ``b s h`` 16-bit activations per layer and micro-batch (Megatron-LM, Shoeybi et al. 2019)
    against ``72 b s h^2 / t`` FLOPs: ``(t - 1) x 2 x 1500 / (9 h) = (t - 1) x 333 / h``.

Context parallelism, offload and the optimizer step are the spec's and the same for every plan, so
they are left out. The constants are round figures; the ranking, not the absolute value, is the point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vramcalc.choices import Checkpointing

#: Fixed cost of one micro-batch, in tokens of compute per GPU (kernel launches, small matrix multiplies).
MICRO_BATCH_OVERHEAD_TOKENS = 128
#: FLOPs a GPU computes in the time its link moves one byte (A100: 312e12 x 0.5 / 100e9 ~ 1,560).
FLOPS_PER_BYTE = 1500
#: Extra compute of each checkpointing mode (a full forward pass is about a third of a step's FLOPs; the op-level
#: policy recomputes about a third of a Llama block's matmul FLOPs: k, o and up).
RECOMPUTE = {
    Checkpointing.none: 0.0,
    Checkpointing.selective: 1 / 30,
    Checkpointing.selective_op: 1 / 9,
    Checkpointing.full: 1 / 3,
}

CRITERION = (
    "relative step-time cost (1.00 = every GPU computing its share once at full speed): recomputation "
    "(full checkpointing +33 %, selective +3 %), a fixed cost per micro-batch, the pipeline bubble "
    "(p-1)/(m+p-1), gradient sync, ZeRO-3/FSDP parameter all-gathers and TP all-reduces; then the most "
    "headroom"
)


@dataclass(frozen=True)
class StepCost:
    """The terms of one plan's relative step time (see the module docstring); ``total`` is the sum."""

    compute: float
    micro_batch: float
    bubble: float
    gradient_sync: float
    parameter_gathers: float
    tensor_parallel: float

    @property
    def total(self) -> float:
        base = self.compute * self.micro_batch * self.bubble
        return base + self.gradient_sync + self.parameter_gathers + self.tensor_parallel

    def as_dict(self) -> dict[str, float]:
        keys = ("compute", "micro_batch", "bubble", "gradient_sync", "parameter_gathers", "tensor_parallel")
        return {k: round(getattr(self, k), 4) for k in keys}


def step_cost(
    parallel: dict[str, Any],
    checkpointing: Checkpointing,
    micro_batch_tokens: int,
    micro_batches: int,
    hidden: int,
) -> StepCost:
    """The cost terms of a plan: ``parallel`` is its parallel section (``data``, ``tensor``, ``pipeline``,
    ``context`` and the scheme key), ``micro_batch_tokens`` the tokens one GPU holds per micro-batch
    (after the context split), ``micro_batches`` the micro-batches per step, ``hidden`` the model width."""
    t, p = parallel["tensor"], parallel["pipeline"]
    group = parallel["data"] * parallel["context"]
    m, tokens = micro_batches, max(1, micro_batch_tokens)
    share = (group - 1) / group if group > 1 else 0.0
    copy = FLOPS_PER_BYTE * 2 / 6  # moving a 16-bit copy of the parameters, in tokens of compute
    # copies moved per step for the gradients: an all-reduce (2) once, or a reduce-scatter (1) per
    # micro-batch, plus ZeRO-2's all-gather of the updated parameters (1)
    sync = m + (parallel.get("zero") == 2) if _reduce_scatters_every_micro_batch(parallel) else 2
    return StepCost(
        compute=1 + RECOMPUTE[checkpointing],
        micro_batch=1 + MICRO_BATCH_OVERHEAD_TOKENS / tokens,
        bubble=(m + p - 1) / m,
        gradient_sync=share * copy * sync / (m * tokens),
        parameter_gathers=share * copy * _gathers_per_micro_batch(parallel) / tokens,
        tensor_parallel=(t - 1) * 2 * FLOPS_PER_BYTE / (9 * hidden),
    )


def _gathers_per_micro_batch(parallel: dict[str, Any]) -> int:
    if parallel.get("zero") == 3 or parallel.get("fsdp") in ("full_shard", "hybrid"):
        return 2
    return 1 if parallel.get("fsdp") == "shard_grad_op" else 0


def _reduce_scatters_every_micro_batch(parallel: dict[str, Any]) -> bool:
    return parallel.get("zero") in (2, 3) or parallel.get("fsdp") in ("shard_grad_op", "full_shard", "hybrid")
