"""Saved activations of one rank of one pipeline stage, for :mod:`vramcalc.families.per_rank`.

Pure. Per rank: one micro-batch of ``batch_size`` sequences of ``seq_len / context`` tokens; one TP
rank's share of each block (:func:`vramcalc.core.activations.layer_saved_split`: the split part divided by
``tensor``; the replicated part also, along the sequence, under sequence parallelism -- Korthikanti et
al. 2022, "Reducing Activation Recomputation in Large Transformer Models", Table 2); embeddings on the
first stage, final norm, head and the vocabulary-parallel loss on the last; as many micro-batches as
the pipeline schedule keeps in flight.
"""

from __future__ import annotations

from dataclasses import dataclass

from vramcalc.choices import Architecture, Attention, Checkpointing
from vramcalc.core import activations as act
from vramcalc.core.checkpointing import (
    KeptOps,
    block_backward_steps,
    has_block_moments,
    kept_per_block_bytes,
    recomputes_blocks,
)
from vramcalc.core.params import layer_params
from vramcalc.core.shape import ModelShape
from vramcalc.core.workload import DTYPES, tokens_for
from vramcalc.parallel.layout import Plan, tp_local
from vramcalc.spec.models import Spec
from vramcalc.spec.parallel import Schedule
from vramcalc.units import ceil_div


def rank_tokens(spec: Spec, shape: ModelShape, plan: Plan) -> act.Tokens:
    """One micro-batch on one rank: ``batch_size`` sequences of ``seq_len / context`` tokens
    (:func:`vramcalc.core.workload.tokens_for`, the one token rule)."""
    return tokens_for(spec, shape, spec.workload.batch_size, plan.context)


def in_flight(plan: Plan, stage: str) -> int:
    """Micro-batches whose activations one stage holds at once (the first stage, in 1F1B: the pipeline
    depth; Narayanan et al. 2021 / Megatron-LM). Interleaved: see :func:`interleaved_factor`."""
    if plan.pipeline == 1:
        return 1
    if plan.schedule is Schedule.gpipe:
        return plan.micro_batches
    if stage == "last":
        return 1
    return min(plan.micro_batches, plan.pipeline)


def interleaved_factor(plan: Plan) -> tuple[int, int]:
    """(numerator, denominator) of Megatron's interleaved-schedule memory penalty on the first stage,
    ``1 + (p - 1) / (p v)``, times ``p`` micro-batches in flight: ``(p v + p - 1) / v``."""
    p, v = plan.pipeline, plan.virtual_stages
    return p * v + p - 1, v


@dataclass(frozen=True)
class StageActivations:
    """Saved activations of one stage, all in-flight micro-batches, without the loss (int bytes)."""

    total: int
    head: int
    layer: int
    n_blocks: int
    loss: act.LossBytes
    block_temps: int
    host: int = 0  # checkpoints offloaded to the host (DeepSpeed cpu_checkpointing)
    #: a decoder's block backward moments (vramcalc.core.checkpointing; not with TP): activations freed, temporaries
    #: and gradients at the top block's; activations freed and parameters whose gradients appear further down
    block_moments: tuple[int, int, int, int, int] | None = None


def stage_activations(
    spec: Spec, shape: ModelShape, plan: Plan, stage: str, kept: KeptOps | None = None
) -> StageActivations:
    """What one rank of ``stage`` ("only", "first" or "last") keeps saved: its blocks, the embeddings
    (first) or final norm and head (last), times the micro-batches in flight; the loss tensors of the
    last stage apart (saved once per micro-batch in flight). ``kept``: what a selective checkpointing policy
    keeps of each block besides its input (the stack's)."""
    wl = spec.workload
    dt = DTYPES[wl.precision]
    tk = rank_tokens(spec, shape, plan)
    local = tp_local(shape, plan.tensor)
    first, last = stage in ("only", "first"), stage in ("only", "last")
    blocks = _block_bytes(spec, shape, plan, tk, kept)
    n_enc = plan.stage_layers
    n_dec = shape.decoder_layers if shape.architecture is Architecture.encoder_decoder else 0
    body = n_enc * blocks[0] + n_dec * blocks[1]
    kept_as = None if recomputes_blocks(wl.gradient_checkpointing) else wl.attention  # as the one-GPU path
    emb = _sp(plan, act.embedding_saved_bytes(local, tk, dt, kept_as)) if first else 0
    head = _sp(plan, act.head_saved_bytes(local, tk, dt)) if last else 0
    loss = act.loss_bytes(local, tk, dt) if last else act.LossBytes(0, 0, 0)
    offloaded = body if plan.offload_activations else 0  # the checkpoints go to the host as they are made
    one = body - offloaded + emb + head
    if stage == "first" and plan.schedule is Schedule.interleaved:
        num, den = interleaved_factor(plan)
        total, host = (body - offloaded + emb) * num // den, offloaded * num // den
    else:
        total, host = one * in_flight(plan, stage), offloaded * in_flight(plan, stage)
    k = in_flight(plan, stage) if last else 1
    loss = act.LossBytes(loss.saved * k, loss.forward_transient, loss.backward_temporaries)
    layer = 0
    if recomputes_blocks(wl.gradient_checkpointing):  # the recomputed block; its input and kept outputs once
        from vramcalc.core.dense import recomputed_input_bytes

        layer = max(blocks[2], blocks[3]) - kept_per_block_bytes(kept, local, tk.encoder, dt, wl.attention)
        if not plan.offload_activations:  # else the recomputed block's input is a copy brought back from the host
            layer -= _sp(plan, recomputed_input_bytes(local, tk, dt, wl.attention))
    temps = act.block_backward_temp_bytes(local, tk, dt)
    block_moments = None
    if layer and has_block_moments(local) and plan.tensor == 1:
        freed, temporaries, grads, _, _ = block_backward_steps(local, tk, dt, 0)
        below = (n_enc - 1) * blocks[0]  # each block's kept bytes, freed going down
        freed -= 0 if last else act.head_saved_bytes(local, tk, dt)
        block_moments = (freed, temporaries, grads, below, (n_enc - 1) * layer_params(local))
    return StageActivations(total, head, layer, n_enc + n_dec, loss, temps, host, block_moments)


def _sp(plan: Plan, n_bytes: int) -> int:
    """Sequence parallelism splits the replicated, hidden-wide tensors along the sequence."""
    return ceil_div(n_bytes, plan.tensor) if plan.sequence_parallel else n_bytes


def _block_bytes(
    spec: Spec, shape: ModelShape, plan: Plan, tk: act.Tokens, kept_ops: KeptOps | None
) -> tuple[int, int, int, int]:
    """(kept per encoder block, kept per decoder block, full encoder block, full decoder block) on one
    rank. Kept = what stays saved until backward: all of it, minus eager scores under selective
    recomputation, or only the block's input under full checkpointing."""
    wl = spec.workload
    dt = DTYPES[wl.precision]
    local = tp_local(shape, plan.tensor)
    out = []
    for decoder in (False, True):
        if decoder and shape.architecture is not Architecture.encoder_decoder:
            out.append((0, 0))
            continue
        split, replicated = act.layer_saved_split(local, tk, dt, wl.attention, decoder)
        full = split + _sp(plan, replicated)
        n_tokens = tk.decoder if decoder else tk.encoder
        if recomputes_blocks(wl.gradient_checkpointing):  # the input, and what the op-level policy keeps
            kept = _sp(plan, n_tokens * shape.hidden * dt.residual)
            kept += kept_per_block_bytes(kept_ops, local, n_tokens, dt, wl.attention)
        elif wl.gradient_checkpointing is Checkpointing.selective and wl.attention is Attention.eager:
            kept = full - _eager_scores(local, tk, dt, decoder)
        else:
            kept = full
        out.append((kept, full))
    return out[0][0], out[1][0], out[0][1], out[1][1]


def _eager_scores(local: ModelShape, tk: act.Tokens, dt: act.Dtypes, decoder: bool) -> int:
    """Score-sized tensors of one block's eager attention (what selective recomputation drops)."""
    per = act.score_bytes_per_element(local, dt, training=True)
    if decoder:
        return tk.batch * local.heads * tk.target * (tk.target + tk.seq) * per
    return tk.batch * local.heads * tk.seq * tk.seq * per
