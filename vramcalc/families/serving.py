"""Serving across GPUs: one rank of a tensor- and pipeline-parallel inference job with LLM keys (generation,
quantization, a KV cache), for the vLLM and HF runtimes. Pure (no I/O).

What one GPU holds (vLLM's layers, vllm/model_executor/layers/linear.py and vocab_parallel_embedding.py):

* **weights**: Q/K/V and the MLP's up/gate projections are column-parallel, the attention output and
  MLP down projections row-parallel, so each tensor-parallel rank holds ``1 / tensor`` of them; norms
  and the row-parallel layers' biases are replicated. ``heads`` and ``ffn_size`` must divide by
  ``tensor`` (vLLM's ``divide`` asserts it). Quantized weights are split the same way: each rank holds
  its share of the quantized bytes (fp8, AWQ/GPTQ int4, bitsandbytes), the embeddings and LM head stay
  at the parameter dtype, and so does each rank's share of the ``skip_modules``.
* **vocabulary**: ``VocabParallelEmbedding`` and ``ParallelLMHead`` pad the vocabulary to a multiple
  of 64 (``pad_vocab_size(vocab_size, pad_to=DEFAULT_VOCAB_PADDING_SIZE)``, 64) and give each rank
  ``padded / tensor`` rows (``divide(num_embeddings_padded, tp_size)``); Llama-3's 128,256 is already a
  multiple of 64, so each of 8 ranks holds 16,032 rows.
* **KV heads**: ``QKVParallelLinear`` gives each rank ``kv_heads / tensor`` KV heads when ``tensor``
  divides ``kv_heads``; with fewer KV heads than ranks each KV head is replicated on ``tensor / kv_heads``
  ranks, one per rank (``num_kv_heads = max(1, total_num_kv_heads // tp_size)``,
  ``num_kv_head_replicas``). Anything else is refused. The KV cache per token and rank follows:
  ``stage layers x 2 x kv_heads_per_rank x head_dim x bytes``.
* **pipeline stages**: ``get_pp_indices`` (vllm/distributed/utils.py) gives each of the ``pipeline``
  stages ``layers // pipeline`` blocks, the remainder one each to the stages just before the last; the
  first stage also holds the embedding, the last the final norm and LM head (a tied head keeps its own
  copy there).
* **capacity per replica**: every rank runs vLLM's profile (:mod:`vramcalc.stacks.vllm`) on its own share
  and the engine keeps the smallest number of KV blocks over the ranks (V1 ``get_kv_cache_configs``
  unifies ``num_blocks`` to the minimum; V0 ``determine_num_available_blocks`` takes ``min`` over the
  workers). Each rank's budget is ``utilization x total - its weights - its profile peak - memory
  outside PyTorch``; with several GPUs that last term holds NCCL's and the custom all-reduce's buffers:
  :data:`MULTI_GPU_NON_TORCH_BYTES`. Data-parallel replicas (``data``) each serve their own requests.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import vramcalc.families.llm as llm
from vramcalc.choices import Architecture, Head, Mode
from vramcalc.core.params import embedding_params, head_params, layer_params
from vramcalc.core.shape import ModelShape
from vramcalc.core.stack import Device, Stack
from vramcalc.core.workload import ResolvedWorkload, input_bytes, workspace_bytes
from vramcalc.errors import SpecError
from vramcalc.families.estimate import Estimate, assemble
from vramcalc.families.resolve import resolve_workload
from vramcalc.families.target import Target
from vramcalc.parallel.layout import ParallelDetails, Plan, resolve_plan
from vramcalc.spec.llm import GGUF
from vramcalc.spec.models import Spec
from vramcalc.stacks import zero3
from vramcalc.units import MiB, ceil_div

Phases = dict[str, dict[str, int]]

#: vLLM's vocabulary padding (``DEFAULT_VOCAB_PADDING_SIZE``, vocab_parallel_embedding.py).
VOCAB_PADDING = 64
#: Memory outside PyTorch per rank with several GPUs (NCCL communicators, the custom all-reduce's IPC
#: buffers): published vLLM profiles with tensor parallelism print ``non_torch_memory`` 0.25 GiB (2 x RTX
#: 4090, TP 2, vllm-project/vllm#13061) and 0.20 GiB (RTX 3090 workers, vllm-project/vllm#14447), after
#: vLLM 0.7 stopped counting the CUDA context there; the larger is assumed. One GPU: 0 (T4 log, 0.01 GiB).
MULTI_GPU_NON_TORCH_BYTES = 256 * MiB


@dataclass(frozen=True)
class Stage:
    """One pipeline stage as its ranks hold it."""

    name: str  # "only", "first", "middle" or "last"
    layers: int
    first: bool
    last: bool


def pp_layers(layers: int, pipeline: int) -> list[int]:
    """Blocks per stage as vLLM splits them (``get_pp_indices``): ``layers // pipeline`` each, the
    remainder one each to the stages just before the last."""
    parts = [layers // pipeline] * pipeline
    for i in range(2, layers % pipeline + 2):
        parts[-i] += 1
    return parts


def padded_vocab(vocab: int, tensor: int) -> int:
    """Rows of the embedding (and LM head) one tensor-parallel rank holds."""
    padded = ceil_div(vocab, VOCAB_PADDING) * VOCAB_PADDING
    return ceil_div(padded, tensor)


def kv_heads_per_rank(kv_heads: int, tensor: int) -> int:
    """``max(1, kv_heads // tensor)``: split, or replicated when there are fewer KV heads than ranks."""
    return max(1, kv_heads // tensor)


def rank_shape(shape: ModelShape, tensor: int) -> ModelShape:
    """The transformer blocks as one tensor-parallel rank holds them (the vocabulary is not split here:
    the rank's logits are gathered to the full vocabulary before sampling)."""
    if tensor == 1:
        return shape
    return replace(
        shape,
        heads=shape.heads // tensor,
        kv_heads=kv_heads_per_rank(shape.kv_heads, tensor),
        ffn=shape.ffn // tensor,
    )


def stage_weight_params(shape: ModelShape, tensor: int, stage: Stage) -> int:
    """Parameters one rank of ``stage`` holds: its blocks' shares, plus the vocabulary-sharded embedding
    on the first stage and final norm + LM head on the last."""
    local = replace(rank_shape(shape, tensor), vocab=padded_vocab(shape.vocab, tensor) if tensor > 1 else shape.vocab)
    n = stage.layers * layer_params(local)
    if stage.first:
        n += embedding_params(local)
    if stage.last:
        n += head_params(local)
        if shape.tie_embeddings and shape.head is Head.lm and not stage.first:
            n += local.vocab * local.embed_width  # the last stage's own copy of a tied head
    return n


def stages(shape: ModelShape, pipeline: int) -> list[Stage]:
    """The distinct stages (the first, the last, and middle stages of each size)."""
    parts = pp_layers(shape.layers, pipeline)
    if pipeline == 1:
        return [Stage("only", parts[0], True, True)]
    out = [Stage("first", parts[0], True, False)]
    out += [Stage("middle", n, False, False) for n in sorted(set(parts[1:-1]))]
    return [*out, Stage("last", parts[-1], False, True)]


def check_serving(spec: Spec, shape: ModelShape) -> None:
    """What the serving model does not cover is refused (one line naming the key)."""
    section, wl = spec.parallel, spec.workload
    assert section is not None
    if shape.architecture is not Architecture.decoder:
        raise SpecError("parallel: serving across GPUs is modelled for decoder-only models")
    if section.context > 1 or section.sequence_parallel:
        key = "context" if section.context > 1 else "sequence_parallel"
        raise SpecError(f"parallel.{key}: not modelled for serving (tensor, pipeline and data replicas are)")
    if wl.quantization is not None and wl.quantization.method in GGUF:
        raise SpecError("workload.quantization: GGUF files are not split across GPUs (llama.cpp splits by layer)")
    q = wl.quantization
    if q is not None and q.lm_head and section.tensor > 1:
        raise SpecError("workload.quantization.lm_head: a quantized LM head is not modelled with parallel.tensor > 1")
    if q is not None and section.pipeline > 1 and any(not isinstance(m, str) for m in q.skip_modules or []):
        raise SpecError("workload.quantization.skip_modules: layer ranges are not modelled with parallel.pipeline > 1")
    if shape.mla is not None and section.tensor > 1:
        raise SpecError("parallel.tensor: not modelled for multi-head latent attention (its KV cache is not split)")
    if shape.kv_heads % section.tensor and section.tensor % shape.kv_heads:
        raise SpecError(
            f"parallel.tensor: {section.tensor} neither divides kv_heads ({shape.kv_heads}) nor is a multiple of it"
        )


def estimate(spec: Spec, stack: Stack, target: Target) -> Estimate:
    """One rank of an LLM serving job across GPUs."""
    phases, n_params, assumptions, ranked, details = serving_estimate(spec, stack, target.hopper_or_newer, target.card)
    result = assemble(spec, n_params, phases, assumptions, stack)
    return replace(result, parallel=ranked, llm=details)


def serving_estimate(
    spec: Spec, stack: Stack, hopper_or_newer: bool, card: Device | None = None
) -> tuple[Phases, int, list[str], ParallelDetails, Any]:
    """Phases of the most loaded rank, the model's parameter count, assumptions, plan details and the
    LLM details (its KV pool carries every stage's, so capacity is the minimum over the ranks); ``card``: the
    GPU every rank runs on, where one is named (vLLM's default batch sizes depend on it)."""
    work = resolve_workload(spec, stack)
    shape = work.shape
    check_serving(spec, shape)
    plan, plan_notes = resolve_plan(spec, shape, zero3.release_refinement(spec))
    built = {s.name: _stage(work, plan, s, hopper_or_newer, card) for s in stages(shape, plan.pipeline)}
    peaks = {name: max(sum(c.values()) for c in phases.values()) for name, (phases, _, _, _) in built.items()}
    worst = max(peaks, key=lambda s: peaks[s])
    phases, details, notes, n_rank = built[worst]
    pools = [d.kv_pool for name, (_, d, _, _) in built.items() if name != worst and d.kv_pool is not None]
    if details.kv_pool is not None and pools:
        details = replace(details, kv_pool=replace(details.kv_pool, ranks=tuple(pools)))
    head = _notes(shape, plan, worst if plan.pipeline > 1 else "", details)
    ranked = ParallelDetails(plan, worst if plan.pipeline > 1 else "only", peaks, n_rank, 0)
    return phases, work.n_params, [*head, *plan_notes, *notes], ranked, details


def _stage(
    work: ResolvedWorkload, plan: Plan, stage: Stage, hopper: bool, card: Device | None
) -> tuple[Phases, Any, list[str], int]:
    """One rank of ``stage``: the single-GPU LLM phases of its share of the model."""
    shape = work.shape
    full_weights = stage_weight_params(shape, 1, Stage("only", shape.layers, True, True))
    n = stage_weight_params(shape, plan.tensor, stage)
    if work.n_params != full_weights:  # a stated parameter count scales every rank's share alike
        n = (n * work.n_params + full_weights // 2) // full_weights
    local = replace(rank_shape(shape, plan.tensor), layers=stage.layers, head=shape.head if stage.last else Head.none)
    rank_work = replace(work, shape=local, n_params=n)
    base = {
        "parameters": n * work.dtypes.param,
        "inputs": input_bytes(local, work.tokens, Mode.inference, 0, work.dtypes.param),
        "workspace": workspace_bytes(Mode.inference, hopper),
    }
    phases, details, notes = llm.llm_phases(rank_work, base, card)
    if plan.tensor * plan.pipeline > 1:
        phases = {k: {**v, "communication_buffers": MULTI_GPU_NON_TORCH_BYTES} for k, v in phases.items()}
        details = _with_comm(details)
    return phases, details, [*work.notes, *notes], n


def _with_comm(details: Any) -> Any:
    """Add the multi-GPU memory outside PyTorch to a vLLM pool's non-KV peak (HF: only to the phases)."""
    pool = details.kv_pool
    if pool is None:
        return details
    engine = pool.engine
    if engine is not None:
        engine = replace(engine, non_torch_bytes=engine.non_torch_bytes + MULTI_GPU_NON_TORCH_BYTES)
    pool = replace(pool, non_kv_bytes=pool.non_kv_bytes + MULTI_GPU_NON_TORCH_BYTES, engine=engine)
    return replace(details, kv_pool=pool, non_kv_peak_bytes=pool.non_kv_bytes)


def _notes(shape: ModelShape, plan: Plan, stage: str, details: Any) -> list[str]:
    """The plan first: degrees, what each rank holds and the stage reported."""
    t = plan.tensor
    kv = kv_heads_per_rank(shape.kv_heads, t)
    how = "replicated" if t > shape.kv_heads else "split"
    line = f"per GPU: {plan.summary}"
    if plan.pipeline > 1:
        line += f"; stage layers {'/'.join(map(str, pp_layers(shape.layers, plan.pipeline)))}"
        line += f"; most loaded stage: {stage}"
    notes = [line]
    if t > 1:
        notes.append(
            f"tensor {t}: {shape.heads // t} of {shape.heads} heads and {kv} of {shape.kv_heads} KV heads per GPU "
            f"(KV heads {how}); vocabulary padded to a multiple of {VOCAB_PADDING} and split: "
            f"{padded_vocab(shape.vocab, t):,} rows per GPU"
        )
    if plan.tensor * plan.pipeline > 1:
        notes.append(
            f"memory outside PyTorch per GPU (NCCL, custom all-reduce): {MULTI_GPU_NON_TORCH_BYTES // MiB} MiB "
            "(published vLLM logs with tensor parallelism: 0.20-0.25 GiB)"
        )
    if details.kv_pool is not None:
        per_replica = "the smallest over the ranks" if plan.pipeline > 1 else "the same on every rank"
        notes.append(f"vLLM KV blocks per replica: {per_replica}; {plan.data} replica(s) of {t * plan.pipeline} GPUs")
    return notes
