"""What PyTorch's caching allocator counts as allocated beyond the tensors' sizes (rounded to its 512-byte
blocks) when a model's weights are loaded, one tensor after another, onto an empty GPU.

``torch.cuda.max_memory_allocated()`` sums the *blocks* the allocator handed out, not the bytes asked
for (``stats.allocated_bytes`` grows by ``block->size`` in ``alloc_found_block``,
c10/cuda/CUDACachingAllocator.cpp). The rules, default settings:

- every request is rounded up to 512 bytes (``kMinBlockSize``);
- requests up to 1 MiB (``kSmallSize``) come from the small pool's 2 MiB segments, where a block is
  split whenever at least 512 bytes would remain;
- larger requests take the smallest free block of the large pool that holds them (best fit), or a new
  segment: 20 MiB (``kLargeBuffer``) below 10 MiB (``kMinLargeAlloc``), else the request rounded up to
  2 MiB (``kRoundLarge``);
- a large-pool block is split only when more than 1 MiB would remain (``should_split``); otherwise the
  whole block is handed out and counted.

So a weight of 1-2 MiB, such as BERT-base's 768 x 768 fp16 projections (1.125 MiB), often takes a whole
2 MiB remainder of a segment. Loading allocates and frees nothing else, so the weights' own sizes in
load order decide the packing exactly; :func:`load_rounding_bytes` replays it. Transient tensors and
gradients, whose blocks depend on the order of frees, are not replayed.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterable

from vramcalc.core.params import load_order
from vramcalc.core.shape import ModelShape
from vramcalc.units import MiB, allocation_bytes, ceil_div

SMALL_SIZE = 1 * MiB  # kSmallSize: the small pool's largest request
MIN_LARGE_ALLOC = 10 * MiB  # kMinLargeAlloc
LARGE_BUFFER = 20 * MiB  # kLargeBuffer: the segment of a large request under MIN_LARGE_ALLOC
ROUND_LARGE = 2 * MiB  # kRoundLarge


def segment_bytes(request: int) -> int:
    """The segment ``cudaMalloc`` gets for a large-pool ``request`` no cached block holds."""
    if request < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ceil_div(request, ROUND_LARGE) * ROUND_LARGE


#: Repeats of a group of tensors replayed one by one before the packing is extrapolated when it has not
#: settled into a cycle (astronomical layer counts and odd widths stay fast: tens of milliseconds at most).
MAX_REPLAYED_REPEATS = 256


def load_rounding_bytes(groups: Iterable[tuple[tuple[int, ...], int]]) -> int:
    """Bytes counted as allocated beyond the 512-byte-rounded requests when tensors are allocated one
    after another on an empty allocator and none is freed: the unsplit remainders of the large-pool blocks
    handed out whole. ``groups``: (each tensor's bytes in allocation order, how many times the group
    repeats). A repeated group's packing settles into a cycle (the free blocks that can still serve a
    request repeat), so its repeats are replayed until the cycle shows and then multiplied out."""
    groups = [(tuple(allocation_bytes(n) for n in tensors if n > SMALL_SIZE), count) for tensors, count in groups]
    groups = [(tensors, count) for tensors, count in groups if tensors and count]
    # the smallest request from each group on: a free block below it can serve no later request
    smallest = [min(n for tensors, _ in groups[i:] for n in tensors) for i in range(len(groups))]
    free: list[int] = []  # the large pool's free blocks that can still serve a request, smallest first
    extra = 0
    for (tensors, count), least in zip(groups, smallest, strict=True):
        free = free[bisect.bisect_left(free, least) :]
        seen: dict[tuple[int, ...], tuple[int, int]] | None = {}
        done, before = 0, extra
        while done < count:
            state = tuple(free)
            if seen is not None and state in seen:  # the packing repeats every ``period`` repeats
                first, extra_then = seen[state]
                period = done - first
                skipped = (count - done) // period
                extra, done, seen = extra + skipped * (extra - extra_then), done + skipped * period, None
                continue  # fewer than ``period`` repeats are left: replayed
            if seen is not None and done < MAX_REPLAYED_REPEATS:
                seen[state] = (done, extra)
            elif seen is not None:  # no cycle yet: the replayed repeats' mean for the rest
                extra += (extra - before) * (count - done) // done
                break
            for request in tensors:
                extra += _place(free, request, least)
            done += 1
    return extra


def _place(free: list[int], request: int, smallest: int) -> int:
    """Allocate ``request`` (a large-pool request) from ``free`` (best fit, or a new segment); the bytes
    handed out beyond it. Remainders smaller than ``smallest`` (no later request fits) are dropped."""
    i = bisect.bisect_left(free, request)
    block = free.pop(i) if i < len(free) else segment_bytes(request)
    remainder = block - request
    if remainder <= SMALL_SIZE:
        return remainder  # handed out whole
    if remainder >= smallest:
        bisect.insort(free, remainder)
    return 0


@functools.lru_cache(maxsize=256)
def weights_rounding_bytes(shape: ModelShape, param_bytes: int) -> int:
    """:func:`load_rounding_bytes` of the model's weights, ``param_bytes`` per element, in load order."""
    return load_rounding_bytes((tuple(n * param_bytes for n in t), count) for t, count in load_order(shape))
