"""DeepSpeed ZeRO-3's parameter coordinator: what one rank holds gathered, moment by moment. Pure.

DeepSpeed (``deepspeed/runtime/zero/partitioned_param_coordinator.py``) records, on the second step,
the order in which modules fetch their parameters, forward and backward (with gradient checkpointing
the recomputed forward of each block too), and replays it on every later step:

* **fetch**: a module's parameters are all-gathered when it runs (forward, and again in backward);
* **prefetch**: after each fetch it gathers the next parameters of the trace that are not resident,
  until ``stage3_prefetch_bucket_size`` elements (default 5e7) are on their way -- fewer when
  ``stage3_max_live_parameters`` (default 1e9) minus the elements already gathered is smaller.
  ``max_live_parameters`` bounds only this look-ahead; it never forces a release;
* **release** (``__params_to_release``): when a module finishes, its parameters are kept if the trace
  uses them again before ``stage3_max_reuse_distance`` elements (default 1e9) of parameters have been
  traversed -- the modules after it, each counted by its parameters' elements, forward and backward.
  At the end of forward the last modules are used again within twice the elements that follow them
  (the rest of forward, then the start of backward), so with the defaults the last ~5e8 elements of
  forward stay gathered into backward; a model under 5e8 parameters stays gathered whole;
* **persistence**: a parameter of at most ``stage3_param_persistence_threshold`` elements (default
  1e5: norms, biases, small adapters) is never partitioned (``ds_persist``): whole on every rank, on
  the GPU even when parameters are offloaded (``partition_parameters.py``: its partition is allocated
  on the local device).

:func:`gathered_peaks` replays that rule on a module trace built from the model shape (one module per
weight matrix; tied weights -- an LM head tied to the embedding, T5's shared embedding -- are one
parameter) and returns the largest gathered bytes of forward and of backward. The first, recording
step releases everything at once and prefetches nothing, so it never holds more.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from vramcalc.choices import Architecture
from vramcalc.core.params import has_vocab_head, layer_params, param_tensors
from vramcalc.core.shape import ModelShape
from vramcalc.units import ceil_div

#: DeepSpeed's ZeRO-3 defaults, in elements (deepspeed/runtime/zero/config.py, DeepSpeedZeroConfig):
#: ``stage3_max_live_parameters``, ``stage3_max_reuse_distance``, ``stage3_param_persistence_threshold``.
DEEPSPEED_MAX_LIVE = 1_000_000_000
DEEPSPEED_REUSE_DISTANCE = 1_000_000_000
DEEPSPEED_PERSISTENCE = 100_000


@dataclass(frozen=True)
class Coordinator:
    """The four settings of DeepSpeed's parameter coordinator, in elements."""

    prefetch: int
    max_live: int
    reuse: int
    persistence: int


@dataclass(frozen=True)
class Module:
    """One module's parameters: ``key`` is the parameter's identity (tied weights share it), ``numel`` its
    elements as DeepSpeed counts them (in the storage dtype), ``nbytes`` its bytes gathered."""

    key: int
    numel: int
    nbytes: int


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
    order = tuple(Module(mod.key, mod.numel, 0) if mod.key in small else mod for mod in order)
    held: dict[int, Module] = {}
    live_bytes = live_numel = 0
    peaks = [0, 0]
    peak_elements = 0
    for t, mod in enumerate(order):
        if mod.nbytes and mod.key not in held:
            held[mod.key] = mod
            live_bytes += mod.nbytes
            live_numel += mod.numel
        extra_bytes, extra_numel = _prefetch(order, t, held, min(c.prefetch, c.max_live - live_numel))
        phase = 0 if t < n_forward else 1
        peaks[phase] = max(peaks[phase], live_bytes + extra_bytes)
        if phase == 0:
            peak_elements = max(peak_elements, live_numel + extra_numel)
        reused = next_use[t] < m and prefix[next_use[t]] - prefix[t + 1] < c.reuse
        if not reused and mod.key in held:
            del held[mod.key]
            live_bytes -= mod.nbytes
            live_numel -= mod.numel
    persistent = sum(mod.nbytes for mod in small.values()), sum(mod.numel for mod in small.values())
    return Gathered(peaks[0], peaks[1], peak_elements, *persistent)


def _prefetch(order: tuple[Module, ...], t: int, held: dict[int, Module], budget: int) -> tuple[int, int]:
    """Bytes and elements the prefetcher has in flight after the fetch at ``t``: the next modules not yet
    gathered, taken while fewer than ``budget`` elements are on their way (the last one may overshoot)."""
    numel = nbytes = 0
    seen: set[int] = set()
    for mod in order[t + 1 :]:
        if numel >= budget:
            break
        if mod.nbytes and mod.key not in held and mod.key not in seen:
            seen.add(mod.key)
            numel += mod.numel
            nbytes += mod.nbytes
    return nbytes, numel


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
    emb = [make(0, shape.vocab * shape.embed_width)]
    if shape.positions:
        emb.append(make(2, (shape.positions + shape.position_offset) * shape.hidden))
    embed = Segment(tuple(emb), in_backward=embeddings_in_backward)

    def blocks(n: int, cross: bool) -> list[Segment]:
        out = []
        for _ in range(n):
            mats = block_matrices(shape, cross)
            mods = [linear(next(keys), o, i) for o, i in mats] or [make(next(keys), layer_params(shape, cross))]
            out.append(Segment(tuple(mods), recomputed=checkpointing))
        return out

    segments = [embed, *blocks(shape.layers, False)]
    if shape.architecture is Architecture.encoder_decoder:
        segments += [Segment((emb[0],), in_backward=embeddings_in_backward), *blocks(shape.decoder_layers, True)]
    if has_vocab_head(shape):
        tied = shape.tie_embeddings
        segments.append(Segment((emb[0] if tied else make(1, shape.vocab * shape.embed_width),)))
    return tuple(segments)


def packed_numel(out: int, inp: int, storage: int) -> int:
    """Elements of a bitsandbytes 4-bit weight flattened into a ``storage``-byte float dtype."""
    return ceil_div(ceil_div(out * inp, 2), storage)
