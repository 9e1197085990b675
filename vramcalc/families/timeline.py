"""Step timeline: how allocated memory rises and falls through one step (pure: no I/O, no printing).

Every point is a state of :mod:`vramcalc.core.dense`'s phase model or lies between two of them. The
*anchors* are exact: ``F``, ``K`` and ``O`` are ``Estimate.phase_components`` of the forward,
backward and optimizer phases, and the other anchors are the estimator's own formulas (``K`` must be
one of the backward anchors, or the model falls back to one point per phase). Forward points only
add to ``P`` on the way to ``F``; backward points between two anchors move each component linearly
with the blocks done, so none exceeds the larger anchor: the timeline's peak is the estimate's peak.

Notation (int bytes):

* ``P`` persistent: ``F`` without activations and autocast copies (parameters, optimizer states,
  inputs, cuBLAS workspace);
* ``W`` autocast weight copies (``F``'s); ``hc`` the LM head's 16-bit copy (vocab x hidden);
* ``A`` ``F``'s activations = ``E + S + H + Ls + Lf``: ``E`` the embedding stage
  (:func:`activations.embedding_saved_bytes`), ``H`` the final norm and head
  (:func:`activations.head_saved_bytes`), ``Ls``, ``Lf``, ``Lb`` the loss tensors saved, transient at
  the forward's end and alive at the start of backward (:func:`activations.loss_bytes`), ``S`` the
  blocks' saved activations (their inputs under full checkpointing), ``S / n`` per block;
* ``G`` every parameter's gradient (``O``'s gradients); ``n`` blocks (encoder + decoder layers).

Training points:

==========================  ==============================================================
step start                  P (gradients were set to None by ``zero_grad``)
embeddings                  P + activations E
blocks 1..k                 P + activations (E + S k/n) + copies W k/n
final norm + head           P + activations (A - Ls - Lf) + W
loss                        F (logits, fp32 upcast and log-softmax alive together)
start of backward           F - activations Lf + temporaries Lb (checkpointing: copies hc)
recompute (checkpointing)   P + copies (hc + (W - hc)/n) + activations (A - Ls - Lf + one
                            block) + gradients vocab x hidden (the estimator's recompute state)
block backward (top, 1)     checkpointed decoders: the top and the bottom block's MLP backward
                            (:func:`vramcalc.core.checkpointing.block_backward_moments`)
last block backward         no checkpointing: P + W + activations (E + S) + gradients (head + one
                            block) + temporaries (its MLP input and residual gradients)
blocks n..1 backward        previous anchor + (end of backward - previous anchor) k/(n + 1)
block 1 recompute           gated T5 under full checkpointing (``t5_first_block_recompute``)
tied gradient sum           tied LM head: P + G + its two gradient contributions and their sum
end of backward             P + G
optimizer step              O (plus the implementation's temporaries)
after the step              P + G (gradients stay until the next ``zero_grad``)
==========================  ==============================================================

Inference: ``P``, ``F`` (the largest no-grad transient), ``P``. Other estimates (unknown phases, or a
detailed timeline that disagrees with the estimate's anchors) get one point per phase, with a note.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from vramcalc.choices import Architecture, Head, OptimizerImpl
from vramcalc.core import activations as act
from vramcalc.core.checkpointing import block_backward_steps, has_block_moments, kept_per_block_bytes, recomputes_blocks
from vramcalc.core.dense import (
    head_gradient_params,
    recomputed_input_bytes,
    t5_first_block_recompute,
    tied_gradient_sum_bytes,
)
from vramcalc.core.params import layer_params
from vramcalc.families.estimate import Estimate
from vramcalc.families.resolve import resolve_workload
from vramcalc.spec.models import Spec
from vramcalc.spec.techniques import given_techniques

#: At most this many points per pass through the blocks; neighbouring blocks are grouped beyond it.
MAX_BLOCK_POINTS = 8
TRAINING_PHASES = ("forward", "backward", "optimizer")
#: Transformers the block-by-block model covers (ResNet has no blocks of one kind: one point per phase).
TRANSFORMERS = (Architecture.encoder, Architecture.decoder, Architecture.encoder_decoder, Architecture.vit)

Components = dict[str, int]
#: Stacking order of the series, bottom up: what lives through the whole step first, then what
#: comes and goes (components the estimator adds later follow, alphabetically).
STACK_ORDER = (
    "parameters",
    "allocator_rounding",
    "workspace",
    "inputs",
    "optimizer_states",
    "gradients",
    "autocast_weight_copies",
    "activations",
    "temporaries",
)


@dataclass(frozen=True)
class Point:
    """One moment of the step: the bytes of each component live then."""

    label: str
    phase: str
    components: Components
    note: str = ""

    @property
    def total_bytes(self) -> int:
        return sum(self.components.values())


@dataclass(frozen=True)
class Timeline:
    """The points of one step in order; ``series`` are the components that are ever non-zero."""

    name: str
    points: tuple[Point, ...]
    series: tuple[str, ...]
    detailed: bool
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def peak_index(self) -> int:
        """Index of the first point with the largest total."""
        totals = [p.total_bytes for p in self.points]
        return totals.index(max(totals))

    @property
    def peak(self) -> Point:
        return self.points[self.peak_index]

    @property
    def peak_bytes(self) -> int:
        return self.peak.total_bytes

    @property
    def peak_reason(self) -> str:
        """The phase and what is alive at the peak, e.g. "backward: start of backward: ..."."""
        point = self.peak
        parts = [point.phase, point.label if point.label != point.phase else "", point.note]
        return ": ".join(part for part in parts if part)


@dataclass(frozen=True)
class StepParts:
    """The estimator's pieces the timeline needs beyond ``phase_components`` (int bytes)."""

    n_blocks: int
    embedding: int
    head: int
    loss_saved: int
    loss_transient: int
    loss_grads: int
    head_copy: int
    head_grad: int
    recompute_layer: int
    last_block_grads: int
    block_temps: int
    checkpointing: bool
    optimizer_impl: OptimizerImpl
    lm_head: bool
    #: gated T5 under full checkpointing: copies, activations and gradients while the first block is recomputed
    first_block: Components | None = None
    #: tied LM head: the two contributions to the shared weight's gradient alive at their sum
    tied_grad_sum: int = 0
    #: decoder under checkpointing: the block backward moments (:func:`vramcalc.stacks.sac.block_backward_steps`)
    block_moments: tuple[int, int, int, int, int] | None = None


def build_timeline(spec: Spec, estimate: Estimate, *, max_block_points: int = MAX_BLOCK_POINTS) -> Timeline:
    """The step timeline of ``estimate`` (computed from ``spec``); see the module docstring."""
    phases = tuple(estimate.phase_components)
    if estimate.mode == "inference" and phases == ("forward",):
        return _finish(estimate, _inference_points(estimate.phase_components["forward"]), detailed=True)
    if estimate.mode != "train" or phases != TRAINING_PHASES or spec.model.architecture not in (*TRANSFORMERS, None):
        return phase_timeline(estimate, "one point per phase (no step model for this kind of estimate)")
    if given_techniques(spec.workload):
        return phase_timeline(estimate, "one point per phase (no step model with the workload's training techniques)")
    if getattr(spec.workload, "adapter", None) is not None or getattr(spec.workload, "quantization", None) is not None:
        return phase_timeline(estimate, "one point per phase (adapter and quantized-base steps have their own phases)")
    parts = step_parts(spec)
    points = _training_points(estimate, parts, max_block_points)
    if points is None:
        return phase_timeline(estimate, "one point per phase (the step model disagrees with this estimate)")
    return _finish(estimate, points, detailed=True)


def phase_timeline(estimate: Estimate, note: str) -> Timeline:
    """One point per phase, each exactly ``phase_components[phase]``."""
    points = [
        Point(label=name, phase=name, components=dict(comps), note="the phase's largest state")
        for name, comps in estimate.phase_components.items()
    ]
    return _finish(estimate, points, detailed=False, notes=(note,))


def _finish(estimate: Estimate, points: list[Point], *, detailed: bool, notes: tuple[str, ...] = ()) -> Timeline:
    keys = [k for k in STACK_ORDER if any(p.components.get(k, 0) for p in points)]
    keys += sorted({k for p in points for k, v in p.components.items() if v and k not in STACK_ORDER})
    full = tuple(Point(p.label, p.phase, {k: p.components.get(k, 0) for k in keys}, p.note) for p in points)
    return Timeline(name=estimate.name, points=full, series=tuple(keys), detailed=detailed, notes=notes)


def step_parts(spec: Spec) -> StepParts:
    """Loss, embedding and head tensors, block count and checkpointing pieces of a text transformer."""
    work = resolve_workload(spec)
    spec = work.spec  # the attention transformers runs
    wl, shape, dt, tk = spec.workload, work.shape, work.dtypes, work.tokens
    loss = act.loss_bytes(shape, tk, dt)
    enc_dec = shape.architecture is Architecture.encoder_decoder
    checkpointing = recomputes_blocks(wl.gradient_checkpointing)
    op_kept = kept_per_block_bytes(work.stack.kept_ops, shape, tk.encoder, dt, wl.attention)
    return StepParts(
        n_blocks=shape.layers + (shape.decoder_layers if enc_dec else 0),
        embedding=act.embedding_saved_bytes(shape, tk, dt),
        head=act.head_saved_bytes(shape, tk, dt),
        loss_saved=loss.saved,
        loss_transient=loss.forward_transient,
        loss_grads=loss.backward_temporaries,
        head_copy=shape.vocab * shape.hidden * dt.compute if dt.amp else 0,
        head_grad=head_gradient_params(shape) * dt.param,
        recompute_layer=(
            act.largest_layer_saved_bytes(shape, tk, dt, wl.attention)
            - recomputed_input_bytes(shape, tk, dt, wl.attention)
            - op_kept
            if checkpointing
            else 0
        ),
        last_block_grads=(head_gradient_params(shape) + layer_params(shape)) * dt.param,
        block_temps=act.block_backward_temp_bytes(shape, tk, dt),
        checkpointing=checkpointing,
        optimizer_impl=wl.optimizer_impl,
        lm_head=shape.head is Head.lm,
        first_block=t5_first_block_recompute(work) if checkpointing else None,
        tied_grad_sum=tied_gradient_sum_bytes(shape, dt.param),
        block_moments=block_backward_steps(shape, tk, dt, op_kept)
        if checkpointing and has_block_moments(shape)
        else None,
    )


def _with(base: Components, **changes: int) -> Components:
    return {**base, **changes}


def _between(a: Components, b: Components, num: int, den: int) -> Components:
    """Component-wise ``a + (b - a) * num / den`` (floored to whole bytes; 0 <= num <= den)."""
    keys = list(dict.fromkeys([*a, *b]))
    return {k: a.get(k, 0) + (b.get(k, 0) - a.get(k, 0)) * num // den for k in keys}


def block_groups(n_blocks: int, max_points: int) -> list[int]:
    """Block counts after which a point is drawn: every ``ceil(n / max_points)`` blocks, and the last."""
    size = max(1, math.ceil(n_blocks / max(1, max_points)))
    return [*range(size, n_blocks, size), n_blocks]


def _span(first: int, last: int) -> str:
    return f"block {first}" if first == last else f"blocks {first}-{last}"


def persistent(forward: Components) -> Components:
    """``P``: the forward phase without activations and autocast copies."""
    return _with(forward, activations=0, autocast_weight_copies=0, temporaries=0, gradients=0)


def _inference_points(forward: Components) -> list[Point]:
    start = persistent(forward)
    return [
        Point("weights + inputs", "forward", start, "parameters, token ids and the cuBLAS workspace"),
        Point("forward", "forward", dict(forward), "largest no-grad transient: a block's intermediates or the logits"),
        Point("after forward", "forward", start, "intermediates freed (returned outputs not counted)"),
    ]


def _training_points(estimate: Estimate, parts: StepParts, max_block_points: int) -> list[Point] | None:
    """The training step's points, or None when the backward anchors do not reproduce the estimate's."""
    pc = estimate.phase_components
    forward, optimizer = pc["forward"], pc["optimizer"]
    stack = forward["activations"] - parts.loss_saved - parts.loss_transient - parts.embedding - parts.head
    if stack < 0:
        return None
    groups = block_groups(parts.n_blocks, max_block_points)
    points = _forward_points(forward, parts, stack, groups)
    end = _with(persistent(forward), gradients=optimizer["gradients"])
    backward = _backward_points(forward, end, parts, stack, groups)
    if not any(p.components == pc["backward"] for p in backward):
        return None
    return (
        points
        + backward
        + [
            Point("optimizer step", "optimizer", dict(optimizer), _optimizer_note(optimizer, parts.optimizer_impl)),
            Point("after the step", "optimizer", end, "temporaries freed; gradients stay until the next zero_grad"),
        ]
    )


def _forward_points(forward: Components, parts: StepParts, stack: int, groups: list[int]) -> list[Point]:
    start = persistent(forward)
    copies, n = forward["autocast_weight_copies"], parts.n_blocks
    points = [
        Point("step start", "forward", start, "parameters, optimizer states, inputs, workspace; no gradients"),
        Point("embeddings", "forward", _with(start, activations=parts.embedding), "embedding outputs saved"),
    ]
    done = 0
    for k in groups:
        comps = _with(start, activations=parts.embedding + stack * k // n, autocast_weight_copies=copies * k // n)
        points.append(Point(_span(done + 1, k), "forward", comps, "each block saves its activations for backward"))
        done = k
    head = _with(start, activations=forward["activations"] - parts.loss_saved - parts.loss_transient)
    points.append(Point("final norm + head", "forward", _with(head, autocast_weight_copies=copies), "head input saved"))
    note = "logits, their fp32 upcast and the log-softmax output alive together"
    if not parts.lm_head:
        note = "every activation saved for backward"
    points.append(Point("loss", "forward", dict(forward), note))
    return points


def _backward_points(
    forward: Components, end: Components, parts: StepParts, stack: int, groups: list[int]
) -> list[Point]:
    """Start of backward, then (checkpointing) the recompute anchor or the loss/head backward, then the
    blocks from the top, interpolated towards the end of backward."""
    start = _with(
        forward,
        activations=forward["activations"] - parts.loss_transient,
        temporaries=parts.loss_grads,
    )
    if parts.checkpointing:
        start["autocast_weight_copies"] = parts.head_copy
    points = [Point("start of backward", "backward", start, _start_note(parts))]
    anchor = _second_anchor(forward, start, parts)
    points.append(anchor)
    blocks = _block_points(anchor.components, parts)  # the top block's, then (after the others) block 1's
    points += blocks[:1]
    n, done = parts.n_blocks, 0
    for k in groups:
        comps = _between(anchor.components, end, k, n + 1)
        points.append(Point(_span(n - k + 1, n - done) + " backward", "backward", comps, _block_note(parts)))
        done = k
    points += blocks[1:]
    if parts.first_block is not None:
        comps = _with(persistent(forward), **parts.first_block)
        note = "the first block recomputed last: its input, the position bias and every other gradient"
        points.append(Point("block 1 recompute", "backward", comps, note))
    if parts.tied_grad_sum:
        note = "the tied head's and the embedding's gradients, and their sum"
        points.append(Point("tied gradient sum", "backward", _with(end, temporaries=parts.tied_grad_sum), note))
    points.append(Point("end of backward", "backward", end, "every gradient allocated, activations freed"))
    return points


def _block_points(anchor: Components, parts: StepParts) -> list[Point]:
    """A decoder under checkpointing: the backward of the top and of the bottom block recomputed."""
    if parts.block_moments is None:
        return []
    freed, temporaries, grads, below, below_grads = parts.block_moments
    top = _with(anchor, activations=anchor["activations"] - freed, temporaries=temporaries)
    top["gradients"] = top.get("gradients", 0) + grads
    bottom = _with(top, activations=top["activations"] - below, gradients=top["gradients"] + below_grads)
    note = "a recomputed block's MLP backward: its input and residual gradients, the block's gradients"
    return [Point("top block's backward", "backward", top, note), Point("block 1's backward", "backward", bottom, note)]


def _second_anchor(forward: Components, start: Components, parts: StepParts) -> Point:
    """Checkpointing: the estimator's recompute state; otherwise its state in the last block's backward."""
    kept = forward["activations"] - parts.loss_saved - parts.loss_transient
    if parts.checkpointing:
        copies = parts.head_copy + (forward["autocast_weight_copies"] - parts.head_copy) // max(1, parts.n_blocks)
        comps = _with(
            persistent(forward),
            autocast_weight_copies=copies,
            activations=kept + parts.recompute_layer,
            gradients=parts.head_grad,
        )
        note = "the kept block inputs + one block recomputed + the head's gradient"
        return Point("recompute", "backward", comps, note)
    comps = _with(start, activations=kept - parts.head, gradients=parts.last_block_grads, temporaries=parts.block_temps)
    return Point("last block backward", "backward", comps, "loss and head freed; head and block gradients exist")


def _start_note(parts: StepParts) -> str:
    if not parts.lm_head:
        return "every saved activation"
    return "every saved activation + the log-softmax output and its gradients over the vocabulary"


def _block_note(parts: StepParts) -> str:
    if parts.checkpointing:
        return "each block recomputed, then its activations freed as its gradients appear"
    return "activations freed as gradients appear"


def _optimizer_note(optimizer: Components, impl: OptimizerImpl) -> str:
    if not optimizer.get("temporaries"):
        return "parameters + gradients + states (no temporaries)"
    if impl is OptimizerImpl.forloop:
        return "forloop temporary of the largest parameter"
    return "foreach temporaries (one parameter-sized list)"


def allocation_budget_bytes(usable_bytes: int, estimate: Estimate) -> int:
    """What tensors may allocate on a card: usable bytes - CUDA context - allocator reserve.

    The step fits (``total_bytes <= usable_bytes``) exactly when the timeline's peak is at most this.
    """
    return usable_bytes - sum(estimate.overhead.values())
