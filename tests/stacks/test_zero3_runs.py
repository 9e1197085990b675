"""DeepSpeed ZeRO-3's coordinator replayed over a model's identical blocks (vramcalc/stacks/zero3.py):
the replay that moves over repeating copies of a block gives, byte for byte, what the replay of the whole
trace module by module gives (the reference below: the coordinator's rules stepped over every module of
every layer, as vramcalc replayed them before blocks were grouped), and its work does not grow with the
number of layers."""

from __future__ import annotations

import random
from dataclasses import astuple, replace

import pytest

from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.spec.load import parse_spec
from vramcalc.stacks import zero3
from vramcalc.stacks.zero3 import Coordinator, Gathered, Module, Segment, gathered_peaks, trace
from vramcalc.units import ceil_div


def per_layer_peaks(segments: tuple[Segment, ...], c: Coordinator) -> Gathered:
    """The reference: the coordinator's fetch, prefetch and release rules over the whole trace, every
    module of every copy a step, with the trace, its prefix sums and next uses held as lists."""
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
    taken_until: dict[int, int] = {}
    queue = 0
    live = [0, 0]
    flat = [0]
    groups: dict[int, list[int]] = {}
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
        if group is not None:
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


def random_model(rng: random.Random, layers: int) -> tuple[Segment, ...]:
    """An embedding, ``layers`` copies of a block of one to six matrices (one to four module calls each,
    1 or 2 bytes per element), sometimes a second repeated stack after the embedding again (an
    encoder-decoder), and a head, tied or not."""

    def block(first_key: int) -> tuple[Module, ...]:
        out = []
        for k in range(rng.choice([1, 2, 3, 4, 6])):
            n = rng.choice([50, 100, 300, 1000, 2500])
            out.append(Module(first_key + k, n, n * rng.choice([1, 2]), rng.choice([1, 1, 2, 4])))
        return tuple(out)

    recomputed = rng.random() < 0.5
    n = rng.choice([100, 2000, 5000])
    embedding = Module(0, n, 2 * n, 3)
    segments = [Segment((embedding,), in_backward=rng.random() < 0.5)]
    segments.append(Segment(block(10), recomputed=recomputed, repeat=layers))
    if rng.random() < 0.3:
        segments.append(Segment((embedding,)))
        segments.append(Segment(block(20), recomputed=recomputed, repeat=rng.choice([1, 3, layers])))
    head = embedding if rng.random() < 0.5 else Module(1, 1500, 3000)
    segments.append(Segment((replace(head, calls=2),)))
    return tuple(segments)


def random_coordinator(rng: random.Random) -> Coordinator:
    return Coordinator(
        rng.choice([0, 1, 100, 400, 2000, 10**9]),
        rng.choice([300, 1000, 3000, 8000, 10**9]),
        rng.choice([0, 500, 2000, 6000, 20000, 10**12]),
        rng.choice([0, 0, 60, 120, 400]),
        world=rng.choice([1, 1, 4]),
        offloaded=rng.random() < 0.3,
        gathers_alone=rng.random() < 0.3,
    )


@pytest.mark.parametrize("seed", range(8))
def test_grouped_replay_equals_the_per_layer_replay_on_random_small_models(seed: int) -> None:
    # few layers (the copies replayed one by one) to a few hundred (periods found and moved over), every
    # coordinator rule in play: prefetch windows, reuse distances, persistence, flat buffers, staging
    rng = random.Random(seed)
    for _ in range(40):
        segments = random_model(rng, rng.choice([1, 2, 3, 4, 7, 16, 40, 150, 400]))
        c = random_coordinator(rng)
        assert astuple(gathered_peaks(segments, c)) == astuple(per_layer_peaks(segments, c)), (segments, c)


def test_trace_gives_every_copy_parameters_of_its_own() -> None:
    a, b = Module(5, 10, 20), Module(6, 30, 60)
    order, n_forward = trace((Segment((a, b), recomputed=True, repeat=2),))
    keys = [mod.key for mod in order]
    assert n_forward == 4 and len(set(keys)) == 4
    # forward: copy 0 (a, b), copy 1 (a, b); backward: copy 1 recomputed then reversed, then copy 0
    assert keys[4:] == [keys[2], keys[3], keys[3], keys[2], keys[0], keys[1], keys[1], keys[0]]


WORKLOAD = {"mode": "train", "batch_size": 1, "seq_len": 16}
DECODER = {
    "architecture": "decoder",
    "hidden_size": 64,
    "heads": 4,
    "ffn_size": 256,
    "mlp": "swiglu",
    "vocab_size": 1000,
}
SHAPES = {
    "decoder": DECODER,
    "encoder-decoder": {**DECODER, "architecture": "encoder-decoder", "mlp": "gelu", "position": "relative"},
}


@pytest.mark.parametrize("kind", SHAPES)
@pytest.mark.parametrize("layers", [1, 5, 60])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_model_segments_replay_as_per_layer(kind: str, layers: int, checkpointing: bool) -> None:
    from vramcalc.families.resolve import resolve_model

    spec = parse_spec({"model": {**SHAPES[kind], "layers": layers}, "workload": WORKLOAD})
    shape, _ = resolve_model(spec.model, spec.workload)
    segments = zero3.dense_segments(shape, 2, checkpointing=checkpointing)
    assert sum(s.repeat for s in segments) < 2 * layers + 6  # a stack of blocks is one repeated segment
    for c in (
        Coordinator(4096, 65536, 65536, 1000, world=4),
        Coordinator(20000, 10**5, 3 * 10**5, 4096, world=8, offloaded=True),
        Coordinator(1, 10**9, 0, 0, world=2),
    ):
        assert astuple(gathered_peaks(segments, c)) == astuple(per_layer_peaks(segments, c))


def test_a_million_layers_take_a_bounded_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    # the block of a 4096-wide Llama, a million times, DeepSpeed's defaults over 8 GPUs: the replay moves
    # over the repeating copies, so it takes the steps of a few dozen blocks, not of a million
    monkeypatch.setattr(zero3, "MAX_STEPS", 20_000)
    h, f = 4096, 11008
    block = (Module(10, 3 * h * h, 6 * h * h, 4), Module(11, h * h, 2 * h * h, 1))
    block += (Module(12, 2 * h * f, 4 * h * f, 3), Module(13, h * f, 2 * h * f, 2))
    embedding, head = Module(0, 32000 * h, 64000 * h, 3), Module(1, 32000 * h, 64000 * h, 2)
    c = Coordinator(5 * 10**7, 10**9, 10**9, 10**5, world=8)

    def model(layers: int) -> tuple[Segment, ...]:
        return (Segment((embedding,)), Segment(block, recomputed=True, repeat=layers), Segment((head,)))

    # the reference on 60 layers; more layers only lengthen the middle of forward and of backward, where the
    # same blocks repeat: the same peaks
    expected = per_layer_peaks(model(60), c)
    assert gathered_peaks(model(10**6), c) == expected
    assert gathered_peaks(model(10**7), c) == expected


def test_a_window_over_millions_of_modules_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    # a reuse distance that keeps every block gathered: the state grows with every copy and never repeats
    monkeypatch.setattr(zero3, "MAX_STEPS", 5_000)
    segments = (Segment((Module(0, 10**6, 2 * 10**6),)), Segment((Module(10, 10**6, 2 * 10**6),), repeat=10**6))
    with pytest.raises(SpecError, match=r"^DeepSpeed ZeRO-3's gathers: .*max_reuse_distance.*; not estimated$"):
        gathered_peaks(segments, Coordinator(0, 10**12, 10**12, 0, world=2))


def test_a_zero3_plan_of_a_hundred_thousand_layers_is_estimated_in_bounded_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a whole estimate, every replay it makes held to 200,000 steps (the module-by-module replay of forward
    # and backward would take 1,400,000): the layers' count does not enter
    monkeypatch.setattr(zero3, "MAX_STEPS", 200_000)
    model = {**DECODER, "layers": 100_000, "hidden_size": 512, "ffn_size": 2048}
    spec = parse_spec({"model": model, "workload": WORKLOAD, "parallel": {"gpus": 8, "zero": 3}})
    assert estimate(spec).total_bytes > 0
