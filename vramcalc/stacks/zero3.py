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

import bisect
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from vramcalc.choices import Architecture
from vramcalc.core.params import has_vocab_head, layer_params, param_tensors
from vramcalc.core.shape import ModelShape
from vramcalc.errors import SpecError
from vramcalc.parallel.layout import Plan
from vramcalc.spec.models import Spec
from vramcalc.spec.parallel import Framework
from vramcalc.spec.versions import deepspeed_release
from vramcalc.units import ceil_div

#: The first DeepSpeed release that does not gather on one GPU (``_no_gather_coalesced``).
NO_GATHER_ON_ONE_GPU = (0, 9, 0)

#: The most steps one replay takes (the copies of a repeated segment moved over not counted): a coordinator
#: whose window holds millions of modules at once is refused rather than replayed for minutes
MAX_STEPS = 1_000_000


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
    #: copies run one after the other, each with parameters of its own: a model's identical blocks
    repeat: int = 1


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
    """The recorded module order, module by module, and its forward length: forward in order, then backward
    in reverse, a checkpointed block recomputing its forward just before its backward. Each copy of a
    repeated segment has parameters of its own (:func:`copy_key`)."""
    forward: list[Module] = []
    for s in segments:
        forward += [replace(mod, key=copy_key(s, mod.key, i)) for i in range(s.repeat) for mod in s.modules]
    backward: list[Module] = []
    for s in reversed(segments):
        if not s.in_backward:
            continue
        for i in reversed(range(s.repeat)):
            mods = [replace(mod, key=copy_key(s, mod.key, i)) for mod in s.modules]
            backward += (mods if s.recomputed else []) + mods[::-1]
    return tuple(forward + backward), len(forward)


def copy_key(segment: Segment, key: int, copy: int) -> int:
    """The parameter of ``key`` in copy ``copy`` of ``segment``: the key itself in a segment that runs once."""
    return key if segment.repeat == 1 else key + (copy + 1) * _STRIDE


#: Keys of the copies of a repeated segment: a module's key plus (copy + 1) strides
_STRIDE = 1 << 40


@dataclass(frozen=True)
class _Piece:
    """A stretch of the trace: ``copies`` runs of ``modules`` (one copy of a segment, forward, or its
    backward with the recomputed forward first), from trace position ``start``, ``before`` elements traversed
    before it. ``descending``: backward runs the copies last to first."""

    seg: int
    modules: tuple[Module, ...]
    copies: int
    descending: bool
    start: int
    before: int
    keyed: bool  # each copy has keys of its own (a repeated segment)

    @functools.cached_property
    def offsets(self) -> tuple[int, ...]:
        """Elements traversed before each module of one copy, and one copy's elements last."""
        out = [0]
        for mod in self.modules:
            out.append(out[-1] + mod.numel)
        return tuple(out)

    @property
    def end(self) -> int:
        return self.start + self.copies * len(self.modules)

    @functools.cached_property
    def free(self) -> bool:
        """No module of it is ever gathered (all persistent)."""
        return not any(mod.nbytes for mod in self.modules)

    def locate(self, pos: int) -> tuple[int, int]:
        """(copy, module index) at trace position ``pos``."""
        i, o = divmod(pos - self.start, len(self.modules))
        return (self.copies - 1 - i if self.descending else i), o

    def position(self, copy: int, o: int) -> int:
        """The trace position of module ``o`` of ``copy``."""
        i = self.copies - 1 - copy if self.descending else copy
        return self.start + i * len(self.modules) + o

    def elements_before(self, pos: int) -> int:
        """Elements traversed before trace position ``pos`` (inside this piece, or its end)."""
        i, o = divmod(pos - self.start, len(self.modules))
        return self.before + i * self.offsets[-1] + self.offsets[o]

    def key(self, copy: int, o: int) -> int:
        return self.modules[o].key + (copy + 1) * _STRIDE if self.keyed else self.modules[o].key


class _Trace:
    """The recorded trace of ``segments`` as pieces, each copy of a repeated segment computed from its
    position instead of stored, with the persistent parameters' bytes zeroed."""

    def __init__(self, segments: tuple[Segment, ...], persistence: int) -> None:
        small = {mod.key for s in segments for mod in s.modules if mod.numel <= persistence}
        self.persistent = [0, 0]
        last: dict[int, tuple[Module, int]] = {}
        for s in segments:
            for mod in s.modules:
                if mod.key in small:
                    last[mod.key] = (mod, s.repeat)
        for mod, repeat in last.values():
            self.persistent[0] += mod.nbytes * repeat
            self.persistent[1] += mod.numel * repeat

        def zeroed(mods: Iterable[Module]) -> tuple[Module, ...]:
            return tuple(replace(mod, nbytes=0) if mod.key in small else mod for mod in mods)

        layout: list[tuple[int, tuple[Module, ...], int, bool]] = []
        for i, s in enumerate(segments):
            layout.append((i, zeroed(s.modules), s.repeat, False))
        self.forward_pieces = len(layout)
        for i in reversed(range(len(segments))):
            s = segments[i]
            if s.in_backward:
                mods = (s.modules if s.recomputed else ()) + tuple(reversed(s.modules))
                layout.append((i, zeroed(mods), s.repeat, True))
        self.pieces: list[_Piece] = []
        start = before = 0
        for seg, mods, copies, descending in layout:
            if not mods or not copies:
                continue
            piece = _Piece(seg, mods, copies, descending, start, before, segments[seg].repeat > 1)
            self.pieces.append(piece)
            start, before = piece.end, before + copies * piece.offsets[-1]
        self.length, self.elements = start, before
        self.n_forward = sum(p.end - p.start for p in self.pieces if not p.descending)
        self.starts = [p.start for p in self.pieces]
        # the next use of each module of each piece, as (piece, module index): the same segment's
        # parameter, the same copy; tied parameters (one key in several segments run once) too
        uses: dict[int, list[tuple[int, int]]] = {}
        for pi, piece in enumerate(self.pieces):
            for o, mod in enumerate(piece.modules):
                uses.setdefault(mod.key, []).append((pi, o))
        self.next: dict[tuple[int, int], tuple[int, int]] = {}
        for places in uses.values():
            for here, there in zip(places, places[1:], strict=False):
                self.next[here] = there
        self.segment_of = {mod.key: s for s, seg in enumerate(segments) if seg.repeat > 1 for mod in seg.modules}

    def piece_at(self, pos: int) -> int:
        return bisect.bisect_right(self.starts, pos) - 1

    def next_use(self, pi: int, copy: int, o: int) -> int:
        """The trace position of the next use of module ``o`` of ``copy`` of piece ``pi``; the trace's length
        when there is none."""
        there = self.next.get((pi, o))
        if there is None:
            return self.length
        return self.pieces[there[0]].position(copy, there[1])

    def elements_before(self, pos: int) -> int:
        if pos >= self.length:
            return self.elements
        return self.pieces[self.piece_at(pos)].elements_before(pos)

    def reused(self, pi: int, pos: int, reuse: int) -> bool:
        """The rule of ``__params_to_release``: the module at ``pos`` is used again before ``reuse`` elements
        of the trace after it have been traversed."""
        piece = self.pieces[pi]
        copy, o = piece.locate(pos)
        nxt = self.next_use(pi, copy, o)
        return nxt < self.length and self.elements_before(nxt) - self.elements_before(pos + 1) < reuse


@functools.lru_cache(maxsize=256)
def gathered_peaks(segments: tuple[Segment, ...], c: Coordinator) -> Gathered:
    """Replay the coordinator's fetch, prefetch and release rules over the trace of ``segments``.

    A repeated segment (a model's blocks) is not replayed copy by copy to its end. The replay is a
    deterministic machine: what it does at a step depends only on its state (the gathered parameters, the
    prefetcher's place, the groups not yet waited for, the flat buffers) and on what it reads of the trace
    there (the modules the prefetcher takes, and for the release the distance to a parameter's next use).
    At the start of each copy of a repeated segment the state is written relative to that copy (a
    parameter of a copy ``d`` after it as ``d``, the prefetcher's place as its distance ahead). When it
    equals the state at the start of an earlier copy, ``p`` copies back, and the next ``j * p`` copies read
    the same trace as those ``p`` did, shifted -- the prefetcher stays inside the segment's copies, which
    are alike, and every release decision of those ``p`` copies is the same ``j * p`` copies later (a
    distance to a next use is affine in the copy, so equal decisions at both ends mean equal decisions in
    between) -- then, by induction over the ``j`` periods, each of them repeats those ``p`` copies step by
    step: the same gathered bytes at every step, so the same largest ones, and the same relative state
    after them. The replay moves its state ``j * p`` copies on and goes on from there; near the end of the
    segment, where the prefetcher reaches past it or a release decision changes, it replays copy by copy.
    The result is the one module-by-module replay of the whole trace gives
    (``tests/stacks/test_zero3_runs.py`` compares the two on small models).
    """
    tr = _Trace(segments, c.persistence)
    m, n_forward, pieces = tr.length, tr.n_forward, tr.pieces
    held: dict[int, Module] = {}
    taken_until: dict[int, int] = {}  # per parameter, the latest use the prefetcher took off the trace
    queue = 0  # the next trace position the prefetcher has not taken
    live = [0, 0]  # gathered bytes, elements
    flat = [0]  # flat buffers of groups copied out and not yet freed
    groups: dict[int, list[int]] = {}  # parameter key -> its group's [bytes, members not waited for, copied]
    staged = c.world if c.gathers and c.offloaded else 0
    steps = [0]

    def gather(key: int, mod: Module) -> int:
        if not mod.nbytes or key in held:
            return 0
        held[key] = mod
        live[0] += mod.nbytes
        live[1] += mod.numel
        return mod.numel

    peaks = [0, 0]
    peak_elements = 0

    def reach(phase: int, extra: int = 0) -> None:
        peaks[phase] = max(peaks[phase], live[0] + flat[0] + extra)

    def count(n: int = 1) -> None:
        steps[0] += n
        if steps[0] > MAX_STEPS:
            raise SpecError(
                f"DeepSpeed ZeRO-3's gathers: replaying the coordinator over this model takes over {MAX_STEPS:,} "
                "steps (its window, parallel.zero3.max_live_parameters or max_reuse_distance, spans too many of the "
                "model's modules); not estimated"
            )

    def relative(key: int, seg: int, cur: int) -> tuple[int, ...]:
        if key >= _STRIDE and tr.segment_of.get(key % _STRIDE) == seg:
            return (1, key % _STRIDE, key // _STRIDE - 1 - cur)
        return (0, key)

    def state(pi: int, t: int, cur: int) -> tuple[object, ...]:
        piece = pieces[pi]
        ahead = queue - t if queue < piece.end else -queue - 1
        records: dict[int, tuple[list[int], list[tuple[int, ...]]]] = {}
        for key, record in groups.items():
            records.setdefault(id(record), (record, []))[1].append(relative(key, piece.seg, cur))
        return (
            ahead,
            frozenset(relative(key, piece.seg, cur) for key in held),
            tuple(live),
            flat[0],
            frozenset((tuple(sorted(members)), *record) for record, members in records.values()),
        )

    def same_decisions(pi: int, t0: int, t: int, shift: int) -> bool:
        piece = pieces[pi]
        for s in range(t0, t):
            if piece.modules[(s - piece.start) % len(piece.modules)].nbytes:  # never gathered: no decision
                count()
                if tr.reused(pi, s, c.reuse) != tr.reused(pi, s + shift, c.reuse):
                    return False
        return True

    def periods(pi: int, t0: int, t: int) -> int:
        """How many more periods of the copies from ``t0`` to ``t`` repeat from ``t`` (0: none)."""
        piece, span = pieces[pi], t - t0
        room = (piece.end if queue >= piece.end else piece.end - (queue - t)) - t
        if queue >= piece.end and not piece.free:
            return 0
        lo, hi = 0, room // span
        while lo < hi:  # the largest j whose decisions, j periods on, are those of the period
            mid = (lo + hi + 1) // 2
            if same_decisions(pi, t0, t, mid * span):
                lo = mid
            else:
                hi = mid - 1
        return lo

    def move(pi: int, t: int, j_copies: int) -> None:
        """The state ``j_copies`` copies of piece ``pi`` on."""
        nonlocal held, groups, taken_until, queue
        piece = pieces[pi]
        shift = j_copies * len(piece.modules)
        step = (-j_copies if piece.descending else j_copies) * _STRIDE

        def moved(key: int) -> int:
            return key + step if relative(key, piece.seg, 0)[0] else key

        held = {moved(key): mod for key, mod in held.items()}
        groups = {moved(key): record for key, record in groups.items()}
        if queue < piece.end:
            taken_until = {moved(key): at + shift for key, at in taken_until.items() if at >= t}
            queue += shift
        else:  # a segment never gathered, passed over whole: its uses taken are never looked at
            taken_until = {key: at for key, at in taken_until.items() if at >= piece.end}

    def sample(piece: _Piece) -> int:
        """Every how many copies the state is written down: often enough to find a period, seldom enough
        that writing it costs no more than replaying the copies in between."""
        return 1 + (len(held) + len(groups)) // (4 * len(piece.modules) + 4)

    t = pi = qi = 0
    seen: dict[tuple[object, ...], int] = {}
    seen_piece = -1
    while t < m:
        while pieces[pi].end <= t:
            pi += 1
        piece = pieces[pi]
        copy, o = piece.locate(t)
        if o == 0 and piece.copies > 2 and not ((t - piece.start) // len(piece.modules)) % sample(piece):
            if seen_piece != pi:
                seen, seen_piece = {}, pi
            cur = state(pi, t, copy)
            t0 = seen.get(cur)
            if t0 is not None:
                j = periods(pi, t0, t)
                if j:
                    move(pi, t, j * (t - t0) // len(piece.modules))
                    t += j * (t - t0)
                    seen = {}
                    continue
            seen[cur] = t
        count()
        mod, key = piece.modules[o], piece.key(copy, o)
        phase = 0 if t < n_forward else 1
        if gather(key, mod) and staged:
            reach(phase, ceil_div(mod.nbytes, staged))
        group = groups.pop(key, None)
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
                count()
                while pieces[qi].end <= queue:
                    qi += 1
                ahead = pieces[qi]
                if ahead.free:  # nothing of it is ever gathered: passed over whole
                    queue = ahead.end
                    continue
                q_copy, q_o = ahead.locate(queue)
                q_key, q_mod = ahead.key(q_copy, q_o), ahead.modules[q_o]
                taken_until[q_key] = queue
                numel = gather(q_key, q_mod)
                if numel:
                    members.append((q_key, q_mod))
                taken += numel
                queue += 1
            size = sum(member.nbytes for _, member in members)
            if staged and size:
                reach(phase, ceil_div(size, staged))
            if c.gathers and len(members) > 1:
                record = [size, len(members), 0]
                groups.update((member_key, record) for member_key, _ in members)
        reach(phase)
        if phase == 0:
            peak_elements = max(peak_elements, live[1])
        if key in held and taken_until.get(key, -1) <= t and not tr.reused(pi, t, c.reuse):
            del held[key]
            live[0] -= mod.nbytes
            live[1] -= mod.numel
        t += 1
    return Gathered(peaks[0], peaks[1], peak_elements, *tr.persistent)


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
        """``n`` identical blocks: one segment repeated (each copy has parameters of its own)."""
        if n <= 0:
            return []
        mats = block_matrices(shape, cross)
        mods = [linear(next(keys), o, i) for o, i in mats] or [make(next(keys), layer_params(shape, cross))]
        block = _with_block_calls(mods, len(mats) - (3 if shape.gated else 2))
        return [Segment(block, recomputed=checkpointing, repeat=n)]

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


def check_keys(spec: Spec) -> None:
    """A pinned DeepSpeed release is for training, and contradicts a ``parallel:`` plan of another framework
    (``fsdp``, ``distributed_optimizer``); without ``parallel:`` it is kept for the DeepSpeed plans that
    ``plan`` and ``fit`` try. Refused with one line naming the key."""
    wl = spec.workload
    text = (wl.versions or {}).get("deepspeed")
    if text is None:
        return
    deepspeed_release(wl.versions)
    plan = spec.parallel.resolved_framework.value if spec.parallel is not None else "deepspeed"
    if wl.mode.value != "train" or plan != "deepspeed":
        why = f"parallel: runs {plan}" if plan != "deepspeed" else "the workload does not train"
        raise SpecError(f"workload.versions.deepspeed: {text} names a DeepSpeed release, but {why}")
