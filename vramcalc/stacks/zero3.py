"""DeepSpeed ZeRO-3's parameter coordinator: what one rank holds gathered, moment by moment. Pure.

DeepSpeed (``deepspeed/runtime/zero/partitioned_param_coordinator.py``) records, on the second step,
the order in which modules fetch their parameters, forward and backward (with gradient checkpointing
the recomputed forward of each block too), and replays it on every later step:

* **fetch**: a module's parameters are all-gathered when it runs (forward, and again in backward);
* **prefetch**: every module call -- each ``fetch_sub_module``, of weightless modules too (containers,
  norms, activations, dropouts) -- takes further parameters off the recorded trace and gathers those not
  resident, while fewer than ``min(stage3_prefetch_bucket_size, stage3_max_live_parameters - gathered)``
  elements (defaults 5e7 and 1e9) are taken; the last one may overshoot. Prefetched parameters stay
  gathered until used, so the look-ahead grows call by call until ``max_live_parameters`` elements are
  gathered: a window of about 1e9 elements of the trace ahead (the 5e7 bucket bounds one call only).
  ``max_live_parameters`` never forces a release;
* **release** (``__params_to_release``): when a module finishes, its parameters are kept if the trace
  uses them again before ``stage3_max_reuse_distance`` elements (default 1e9) of parameters have been
  traversed -- the modules after it, each counted by its parameters' elements, forward and backward --
  or when the prefetcher has already taken a later use of them off the trace (a use it skipped because
  they were resident). At the end of forward the last modules are used again within twice the elements that follow them
  (the rest of forward, then the start of backward), so with the defaults the last ~5e8 elements of
  forward stay gathered into backward; a model under 5e8 parameters stays gathered whole;
* **persistence**: a parameter of at most ``stage3_param_persistence_threshold`` elements (default
  1e5: norms, biases, small adapters) is never partitioned (``ds_persist``): whole on every rank, on
  the GPU even when parameters are offloaded (``partition_parameters.py``: its partition is allocated
  on the local device).

How a gather allocates (``partition_parameters.py``, ``all_gather_coalesced``): the parameters one
call gathers -- a module's own, or one prefetch round's -- form a group. A group of one parameter is
gathered into its own buffer. A larger group is gathered into one flat buffer, and when the first of its
parameters is waited for, ``AllGatherCoalescedHandle.wait`` copies every parameter of the group out of
it (``torch.cat``); the flat buffer is freed when the last one has been waited for, so the group is held
twice from its first use to its last. With the parameters offloaded, each gather first copies the
partitions to the GPU (``ds_tensor.to(device)``), the group's bytes over the partition count, for a
moment. On one GPU, DeepSpeed 0.9.0 and later do not gather at all (``_no_gather_coalesced``: each
parameter is copied to the GPU, or used in place); earlier releases take the same path as on many.

:func:`gathered_peaks` replays these rules on a module trace built from the model shape (one module per
weight matrix; tied weights -- an LM head tied to the embedding, T5's shared embedding -- are one
parameter) and returns the largest gathered bytes of forward and of backward. The first, recording
step releases everything at once and prefetches nothing, so it never holds more.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace

from vramcalc.choices import Architecture
from vramcalc.core.params import has_vocab_head, layer_params, param_tensors
from vramcalc.core.shape import ModelShape
from vramcalc.parallel.layout import Plan
from vramcalc.spec.models import Spec
from vramcalc.spec.parallel import Framework
from vramcalc.spec.versions import deepspeed_release
from vramcalc.units import ceil_div

#: The first DeepSpeed release that does not gather on one GPU (``_no_gather_coalesced``).
NO_GATHER_ON_ONE_GPU = (0, 9, 0)


@dataclass(frozen=True)
class Coordinator:
    """The four settings of DeepSpeed's parameter coordinator, in elements, and how a gather allocates:
    ``world`` partitions, ``offloaded`` partitions (on the host), ``gathers_alone`` (a release before
    0.9.0, which gathers on one GPU too)."""

    prefetch: int
    max_live: int
    reuse: int
    persistence: int
    world: int = 1
    offloaded: bool = False
    gathers_alone: bool = False

    @property
    def gathers(self) -> bool:
        """Parameters go through ``all_gather_coalesced``'s buffers (always on many GPUs)."""
        return self.world > 1 or self.gathers_alone

    @property
    def in_place(self) -> bool:
        """One GPU, 0.9.0 or later, parameters on the GPU: each module uses its partition, the whole
        parameter, as it is (``NoGatherHandle``: ``ds_tensor.data.to(device)`` is the tensor itself)."""
        return not self.gathers and not self.offloaded


@dataclass(frozen=True)
class Module:
    """One module's parameters: ``key`` is the parameter's identity (tied weights share it), ``numel`` its
    elements as DeepSpeed counts them (in the storage dtype), ``nbytes`` its bytes gathered, ``calls`` the
    module calls (prefetch rounds) at its place in the trace."""

    key: int
    numel: int
    nbytes: int
    #: module calls at this point of the trace (the module itself and the weightless modules run next to
    #: it: its block, norms, activation), each one prefetch round
    calls: int = 1


@dataclass(frozen=True)
class Segment:
    """Modules that run one after the other: an embedding, a block, the head. ``recomputed``: the block is
    run again in backward (gradient checkpointing); ``in_backward``: its outputs need a gradient, so
    DeepSpeed gathers its parameters again in backward."""

    modules: tuple[Module, ...]
    recomputed: bool = False
    in_backward: bool = True


@dataclass(frozen=True)
class Gathered:
    """Peak gathered bytes of forward and of backward, the peak elements of forward, and the bytes and
    elements of the persistent modules (at most ``persistence`` elements: whole, never released)."""

    forward: int
    backward: int
    forward_elements: int
    persistent: int = 0
    persistent_elements: int = 0


def trace(segments: tuple[Segment, ...]) -> tuple[tuple[Module, ...], int]:
    """The recorded module order and its forward length: forward in order, then backward in reverse, a
    checkpointed block recomputing its forward just before its backward."""
    forward = [m for s in segments for m in s.modules]
    backward: list[Module] = []
    for s in reversed(segments):
        if not s.in_backward:
            continue
        if s.recomputed:
            backward += s.modules
        backward += reversed(s.modules)
    return tuple(forward + backward), len(forward)


@functools.lru_cache(maxsize=256)
def gathered_peaks(segments: tuple[Segment, ...], c: Coordinator) -> Gathered:
    """Replay the coordinator's fetch, prefetch and release rules over the trace of ``segments``."""
    order, n_forward = trace(segments)
    m = len(order)
    prefix = [0]
    for mod in order:
        prefix.append(prefix[-1] + mod.numel)
    next_use = [m] * m
    last: dict[int, int] = {}
    for t in range(m - 1, -1, -1):
        next_use[t] = last.get(order[t].key, m)
        last[order[t].key] = t
    small = {mod.key: mod for mod in order if mod.numel <= c.persistence}
    order = tuple(replace(mod, nbytes=0) if mod.key in small else mod for mod in order)
    held: dict[int, Module] = {}
    taken_until: dict[int, int] = {}  # per parameter, the latest use the prefetcher took off the trace
    queue = 0  # the next trace position the prefetcher has not taken
    live = [0, 0]  # gathered bytes, elements
    flat = [0]  # flat buffers of groups copied out and not yet freed
    groups: dict[int, list[int]] = {}  # parameter key -> its group's [bytes, members not waited for, copied]
    staged = c.world if c.gathers and c.offloaded else 0

    def gather(mod: Module) -> int:
        if not mod.nbytes or mod.key in held:
            return 0
        held[mod.key] = mod
        live[0] += mod.nbytes
        live[1] += mod.numel
        return mod.numel

    peaks = [0, 0]
    peak_elements = 0

    def reach(phase: int, extra: int = 0) -> None:
        peaks[phase] = max(peaks[phase], live[0] + flat[0] + extra)

    for t, mod in enumerate(order):
        phase = 0 if t < n_forward else 1
        if gather(mod) and staged:
            reach(phase, ceil_div(mod.nbytes, staged))
        group = groups.pop(mod.key, None)
        if group is not None:  # waited for: the group's first wait copies every member out
            if not group[2]:
                group[2] = 1
                flat[0] += group[0]
                reach(phase)
            group[1] -= 1
            if not group[1]:
                flat[0] -= group[0]
        queue = max(queue, t + 1)
        for _ in range(mod.calls if c.prefetch > 0 else 0):
            budget, taken, members = min(c.prefetch, c.max_live - live[1]), 0, []
            while queue < m and taken < budget:
                taken_until[order[queue].key] = queue
                numel = gather(order[queue])
                if numel:
                    members.append(order[queue])
                taken += numel
                queue += 1
            size = sum(member.nbytes for member in members)
            if staged and size:
                reach(phase, ceil_div(size, staged))
            if c.gathers and len(members) > 1:
                record = [size, len(members), 0]
                groups.update((member.key, record) for member in members)
        reach(phase)
        if phase == 0:
            peak_elements = max(peak_elements, live[1])
        reused = next_use[t] < m and prefix[next_use[t]] - prefix[t + 1] < c.reuse
        if not reused and taken_until.get(mod.key, -1) <= t and mod.key in held:
            del held[mod.key]
            live[0] -= mod.nbytes
            live[1] -= mod.numel
    persistent = sum(mod.nbytes for mod in small.values()), sum(mod.numel for mod in small.values())
    return Gathered(peaks[0], peaks[1], peak_elements, *persistent)


def gather_note(c: Coordinator, release: str | None) -> str:
    """How ZeRO-3's gathers allocate under ``release`` (the spec's ``versions.deepspeed``), in words."""
    said = f"DeepSpeed {release}"
    if release is None:
        said = "DeepSpeed release not given (versions: {deepspeed: ...}): 0.9 or later"
    if c.in_place:
        return f"{said}: on one GPU ZeRO-3 uses each parameter in place, without a gather"
    if not c.gathers:
        return f"{said}: on one GPU ZeRO-3 copies each offloaded parameter to the GPU without a gather"
    staged = "; offloaded partitions are first copied to the GPU" if c.offloaded else ""
    return (
        f"{said}: a gather of several parameters holds them twice, in its flat buffer and as copies, from the "
        f"first one's use to the last one's{staged}"
    )


def persistent_vectors(shape: ModelShape, threshold: int) -> int:
    """Elements of the vectors (norms, biases; outside the module trace) of at most ``threshold`` elements."""
    return sum(n * r for n, r, c in param_tensors(shape) if c == 1 and r <= threshold)


def block_matrices(shape: ModelShape, cross_attention: bool = False) -> list[tuple[int, int]]:
    """(out, in) of each weight matrix of one block, in the order forward runs them; ``[]`` where the
    shape has no plain layout (latent attention, experts): the block is then one module."""
    if shape.mla is not None or shape.moe is not None:
        return []
    h, q, kv, f = shape.hidden, shape.q_width, shape.kv_width, shape.ffn
    attn = [(q + 2 * kv, h)] if shape.fused_qkv else [(q, h), (kv, h), (kv, h)]
    attn.append((h, q))
    mlp = [(f, h)] * (2 if shape.gated else 1) + [(h, f)]
    return attn + (attn if cross_attention else []) + mlp


def dense_segments(shape: ModelShape, width: int, *, checkpointing: bool) -> tuple[Segment, ...]:
    """The module trace of a dense model stored at ``width`` bytes per element."""

    def matrix(key: int, n: int) -> Module:
        return Module(key, n, n * width)

    return model_segments(shape, matrix, checkpointing=checkpointing, embeddings_in_backward=True)


def dense_unsharded(
    shape: ModelShape, width: int, param_width: int, shard: int, offload: bool, checkpointing: bool, c: Coordinator
) -> tuple[int, int, int]:
    """(forward bytes, backward bytes, forward elements) unsharded on one rank of dense training: the
    coordinator's gathered modules at ``width`` bytes, plus the persistent parameters whole on every rank
    (offloaded, their ``param_width`` partition stays on the GPU too)."""
    if c.in_place:
        return 0, 0, 0
    peaks = gathered_peaks(dense_segments(shape, width, checkpointing=checkpointing), c)
    persistent = persistent_vectors(shape, c.persistence) + peaks.persistent_elements
    kept = persistent * width + (ceil_div(persistent * param_width, shard) if offload else 0)
    return kept + peaks.forward, kept + peaks.backward, persistent + peaks.forward_elements


def model_segments(
    shape: ModelShape,
    module_of: Callable[[int, int], Module],
    *,
    checkpointing: bool,
    embeddings_in_backward: bool,
    linear_of: Callable[[int, int, int], Module] | None = None,
) -> tuple[Segment, ...]:
    """Segments of ``shape``: embeddings, blocks (an encoder-decoder's encoder, then the decoder after the
    shared embedding), final norm and head. ``module_of(key, elements)`` makes an embedding or head module,
    ``linear_of(key, out, in)`` a block's linear (default: ``module_of(key, out * in)``)."""
    make = module_of
    linear = linear_of or (lambda key, out, inp: make(key, out * inp))
    keys = iter(range(3, 1 << 62))
    word = make(0, shape.vocab * shape.embed_width)
    emb = [replace(word, calls=1 + MODEL_CALLS)]
    if shape.positions:
        emb.append(make(2, (shape.positions + shape.position_offset) * shape.hidden))
    embed = Segment(tuple(emb), in_backward=embeddings_in_backward)

    def blocks(n: int, cross: bool) -> list[Segment]:
        out = []
        for _ in range(n):
            mats = block_matrices(shape, cross)
            mods = [linear(next(keys), o, i) for o, i in mats] or [make(next(keys), layer_params(shape, cross))]
            out.append(Segment(_with_block_calls(mods, len(mats) - (3 if shape.gated else 2))))
        return [replace(seg, recomputed=checkpointing) for seg in out]

    segments = [embed, *blocks(shape.layers, False)]
    if shape.architecture is Architecture.encoder_decoder:
        segments += [Segment((emb[0],), in_backward=embeddings_in_backward), *blocks(shape.decoder_layers, True)]
    if has_vocab_head(shape):
        head = word if shape.tie_embeddings else make(1, shape.vocab * shape.embed_width)
        segments.append(Segment((replace(head, calls=1 + HEAD_CALLS),)))
    return tuple(segments)


#: Weightless module calls DeepSpeed's hooks see besides the weight matrices (each a prefetch round), as
#: the transformers models are built: the model and its layer stack before the embedding; per block the
#: block, its attention and MLP modules, two norms and the activation; the final norm before the head.
#: Dropout modules (BERT, GPT-2, BLOOM) and adapter modules add more; they are not counted.
MODEL_CALLS = 2
BLOCK_ATTENTION_CALLS = 3  # the block, its first norm, the attention module: before the first projection
BLOCK_MLP_CALLS = 2  # the second norm and the MLP module: before the MLP's first matrix
ACTIVATION_CALLS = 1  # the activation: before the MLP's last matrix
HEAD_CALLS = 1


def _with_block_calls(mods: list[Module], mlp_first: int) -> tuple[Module, ...]:
    """A block's modules with the weightless calls placed where they run (``mlp_first``: the index of the
    MLP's first matrix; a block without a plain layout is one module with all of them)."""
    if len(mods) == 1:
        return (replace(mods[0], calls=1 + BLOCK_ATTENTION_CALLS + BLOCK_MLP_CALLS + ACTIVATION_CALLS),)
    extra = {0: BLOCK_ATTENTION_CALLS, mlp_first: BLOCK_MLP_CALLS, len(mods) - 1: ACTIVATION_CALLS}
    return tuple(replace(mod, calls=1 + extra.get(i, 0)) for i, mod in enumerate(mods))


def packed_numel(out: int, inp: int, storage: int) -> int:
    """Elements of a bitsandbytes 4-bit weight flattened into a ``storage``-byte float dtype."""
    return ceil_div(ceil_div(out * inp, 2), storage)


def coordinator_of(plan: Plan) -> Coordinator:
    """The plan's ZeRO-3 prefetch, live-parameter, reuse-distance and persistence settings, and how its gathers
    allocate."""
    c = Coordinator(plan.prefetch_bucket, plan.max_live, plan.reuse_distance, plan.persistence)
    return replace(c, world=plan.shard, offloaded=plan.offload_params, gathers_alone=plan.gathers_alone)


def release_refinement(spec: Spec) -> Callable[[Plan], tuple[Plan, list[str]]]:
    """What the DeepSpeed release ``versions.deepspeed`` pins changes in a plan (one GPU gathers before 0.9.0),
    with a note on how a ZeRO-3 plan's gathers allocate; for :func:`vramcalc.parallel.layout.resolve_plan`."""
    given = (spec.workload.versions or {}).get("deepspeed")
    release = deepspeed_release(spec.workload.versions)

    def refine(plan: Plan) -> tuple[Plan, list[str]]:
        if release is not None:  # a DeepSpeed plan (vramcalc.spec.versions.deepspeed_spec_rules)
            plan = replace(plan, gathers_alone=release < NO_GATHER_ON_ONE_GPU)
        if plan.framework is Framework.deepspeed and plan.stage == 3:
            return plan, [gather_note(coordinator_of(plan), given)]
        return plan, []

    return refine
