"""DeepSpeed ZeRO-3's parameter coordinator (vramcalc/stacks/zero3.py), derived by hand from its rules in
deepspeed/runtime/zero/partitioned_param_coordinator.py: a module's parameters are gathered when it runs;
after it ran they are kept when the recorded trace uses them again before ``max_reuse_distance`` elements
have been traversed (``__params_to_release``); each module call takes the next parameters off the trace,
gathering those not resident, while fewer than ``min(prefetch_bucket_size, max_live_parameters - gathered)``
elements are taken, and they stay gathered until used (``fetch_sub_module``; parameters whose later use
the prefetcher took while they were resident are not released either);
parameters of at most ``param_persistence_threshold`` elements are never partitioned."""

from __future__ import annotations

from typing import Any

import pytest
from spec_texts import ROUND_MODEL

from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.spec.load import parse_spec
from vramcalc.stacks.zero3 import Coordinator, Module, Segment, gathered_peaks, trace

BIG = 10**12

#: A toy model, 2 bytes per element: embedding E (100 elements), one block of A (300) and B (500), head H
#: (200). Forward E A B H, backward H B A E. The elements after each module in forward, S: E 1,000, A 700,
#: B 200, H 0; each is used again in backward after 2 S elements of trace.
E, A, B, H = Module(0, 100, 200), Module(1, 300, 600), Module(2, 500, 1000), Module(3, 200, 400)
TOY = (Segment((E,)), Segment((A, B)), Segment((H,)))


def peaks(segments: tuple[Segment, ...], *, prefetch: int = 0, live: int = BIG, reuse: int = 0) -> tuple[int, int]:
    g = gathered_peaks(segments, Coordinator(prefetch, live, reuse, 0))
    return g.forward, g.backward


def test_trace_is_forward_then_backward_in_reverse() -> None:
    order, n_forward = trace(TOY)
    assert [m.key for m in order] == [0, 1, 2, 3, 3, 2, 1, 0] and n_forward == 4


def test_reuse_distance_zero_releases_every_module_after_its_use() -> None:
    # one module at a time: the largest, B, 500 elements = 1,000 B, forward and backward
    assert peaks(TOY) == (1000, 1000)


def test_reuse_distance_keeps_the_end_of_forward() -> None:
    # reuse 401: H (0 < 401) and B (2 x 200 = 400 < 401) stay gathered into backward; A (1,400) does not.
    # At H: B + H = 700 elements = 1,400 B; backward starts with the same two
    assert peaks(TOY, reuse=401) == (1400, 1400)
    # reuse 400: B's reuse comes after exactly 400 elements, not within them: released; the peak is B alone
    assert peaks(TOY, reuse=400) == (1000, 1000)
    # a reuse distance above twice the model keeps everything: E + A + B + H = 1,100 elements = 2,200 B
    assert peaks(TOY, reuse=BIG) == (2200, 2200)


def test_prefetch_takes_the_next_modules_not_gathered() -> None:
    # prefetch 1 element, reuse 0: each module call takes modules off the trace while fewer than 1 element
    # is taken, so one module not resident (resident ones are passed over). Prefetched modules stay until
    # used. E: + A (800 B); A: + B (1,600 B, the forward peak), A released; B: + H, B released; H: H's
    # backward use is resident (taken, so H is kept), + B's backward use: H + B = 1,400 B. Backward, H: + A:
    # H + B + A = 1,000 elements = 2,000 B
    assert peaks(TOY, prefetch=1) == (1600, 2000)


def test_prefetch_grows_to_max_live_parameters() -> None:
    # six modules of 100 elements (200 B), forward only, three module calls each (a weight matrix and two
    # weightless modules), prefetch 100, max_live 350, reuse 0. At the first: gathered 100; call 1 takes
    # one module (budget min(100, 250)): 200; call 2 (min(100, 150)): 300; call 3 (min(100, 50) = 50, the
    # module overshoots): 400 elements = 800 B, then the first is released (300). At the second: call 1
    # (budget 50) takes the fifth: 400; calls 2 and 3 have none. The window stays at max_live plus one module
    mods = tuple(Module(k, 100, 200, calls=3) for k in range(6))
    g = gathered_peaks((Segment(mods, in_backward=False),), Coordinator(100, 350, 0, 0))
    assert (g.forward, g.backward, g.forward_elements) == (800, 0, 400)


def test_max_live_parameters_caps_only_the_prefetch() -> None:
    # prefetch 1e12, max_live 300: the look-ahead budget is 300 - gathered. At E (100): 200 -> A is fetched
    # (E + A = 400); at A (300) and B (500): none; at H (200): 100 -> the next module not resident, B's
    # backward use (H's own backward is resident): H + B = 700 elements = 1,400 B, the forward peak. In
    # backward: at H, the same 700; at B (500): none; at A (300): none; at E (100): nothing left
    assert peaks(TOY, prefetch=BIG, live=300) == (1400, 1400)


def test_gradient_checkpointing_recomputes_the_block_before_its_backward() -> None:
    # The block recomputed: trace E A B H | H A B B A E. Reuse 900: A's next use (its recomputation) comes
    # after B + H + H = 900 elements: released; B's after H + H + A = 700: kept; H's at once: kept. At H
    # (forward): B + H = 700 elements = 1,400 B. Backward: H is released after its backward; recomputing A
    # gathers it next to the kept B: 800 elements = 1,600 B (A's backward comes 1,000 elements later: released)
    ckpt = (Segment((E,)), Segment((A, B), recomputed=True), Segment((H,)))
    assert peaks(ckpt, reuse=900) == (1400, 1600)


def test_tied_weights_are_one_parameter() -> None:
    # an LM head tied to the embedding: both modules hold key 0, gathered once. Reuse 1e12: at the end of
    # forward E/H + A + B = 900 elements = 1,800 B (E's 100 elements counted once)
    tied = (Segment((E,)), Segment((A, B)), Segment((E,)))
    assert peaks(tied, reuse=BIG) == (1800, 1800)


#: A decoder whose every tensor is at most 65,536 elements (tests/families/test_per_rank.py ROUND): 230,144
#: parameters; weight matrices: token and position embeddings 128 x 128 (the head is tied), q, k, v, o
#: 128 x 128 each, MLP 128 x 512 and 512 x 128 -> 6 x 16,384 + 2 x 65,536 = 229,376 elements.
ROUND = ROUND_MODEL


def zero3(zero3_keys: dict[str, int] | None, **workload: Any) -> Any:
    parallel: dict[str, Any] = {"data": 2, "zero": 3, "buckets": {"prefetch": 0}}
    if zero3_keys is not None:
        parallel["zero3"] = zero3_keys
    wl = {"batch_size": 1, "seq_len": 16, "precision": "mixed-bf16", "optimizer": "adamw", **workload}
    return estimate(parse_spec({"name": "t", "model": ROUND, "workload": wl, "parallel": parallel}))


def test_parameters_under_the_persistence_threshold_are_never_partitioned() -> None:
    # default threshold 1e5: every tensor of the model is persistent, whole on both GPUs in bf16:
    # 2 x 230,144 = 460,288 B; in backward also the largest tensor's bf16 gradient, 2 x 65,536 = 131,072
    r = zero3(None)
    assert r.phase_components["forward"]["gathered_parameters"] == 460_288
    assert r.phase_components["backward"]["gathered_parameters"] == 460_288 + 131_072


def test_zero_thresholds_gather_one_module_at_a_time() -> None:
    # threshold 0, reuse 0, no prefetch: the largest module, an MLP matrix of 65,536 elements = 131,072 B
    # (+ its gradient in backward)
    r = zero3({"param_persistence_threshold": 0, "max_reuse_distance": 0})
    assert r.phase_components["forward"]["gathered_parameters"] == 131_072
    assert r.phase_components["backward"]["gathered_parameters"] == 2 * 131_072


def test_default_reuse_distance_keeps_a_small_model_gathered_whole() -> None:
    # threshold 0, reuse 1e9: the model (229,376 matrix elements) is far under 5e8, so every module is used
    # again within the distance and the whole model is gathered at the end of forward: 2 x 229,376 = 458,752 B
    r = zero3({"param_persistence_threshold": 0})
    assert r.phase_components["forward"]["gathered_parameters"] == 458_752
    assert r.phase_components["backward"]["gathered_parameters"] == 458_752 + 131_072


def test_lora_adapters_under_the_threshold_stay_whole() -> None:
    # LoRA r 8 on q and v of the bf16 base, fp32 adapters (PEFT), 2 GPUs. Default threshold: the base's
    # tensors and the LoRA matrices (lora_A 8 x 128, lora_B 128 x 8 = 1,024 elements each) all persist:
    # base 2 x 230,144 = 460,288 B, adapters 4 x 1,024 x 4 B = 16,384 B -> 476,672 B forward and backward
    adapter = {"rank": 8, "targets": ["q", "v"]}
    r = zero3(None, precision="bf16", adapter=adapter)
    assert r.phase_components["forward"]["gathered_parameters"] == 476_672
    assert r.phase_components["backward"]["gathered_parameters"] == 476_672


@pytest.mark.parametrize("parallel", [{"zero": 2}, {"fsdp": "full_shard"}])
def test_zero3_keys_need_zero_3(parallel: dict[str, Any]) -> None:
    data = {
        "name": "t",
        "model": ROUND,
        "workload": {"batch_size": 1, "seq_len": 16, "precision": "mixed-bf16"},
        "parallel": {"data": 2, **parallel, "zero3": {"max_reuse_distance": 0}},
    }
    with pytest.raises(SpecError, match=r"^parallel\.zero3: only valid with zero: 3"):
        estimate(parse_spec(data))


#: The toy forward only (E A B H), to follow one gather at a time.
FORWARD = (Segment((E,), in_backward=False), Segment((A, B), in_backward=False), Segment((H,), in_backward=False))


def forward_peak(**how: Any) -> int:
    return gathered_peaks(FORWARD, Coordinator(400, BIG, 0, 0, **how)).forward


def test_a_gather_of_several_parameters_holds_them_twice_until_the_last_is_used() -> None:
    # all_gather_coalesced on 2 GPUs, prefetch 400 elements, reuse 0. E: gathered (200 B); its round takes
    # A (300 < 400) and B (800): one group, 1,600 B in a flat buffer -> 1,800 B; E released -> 1,600. A:
    # its wait copies A and B out of the flat buffer (AllGatherCoalescedHandle.wait): 3,200 B; its round
    # takes H alone (200 elements, the end of the trace): 3,600 B, the peak; A released. B: the group's
    # last wait frees the flat buffer: 1,000 + 400 B
    assert forward_peak(world=2) == 3600


def test_offloaded_partitions_are_copied_to_the_gpu_before_the_gather() -> None:
    # The same on 2 GPUs with the parameters offloaded: each gather first copies the partitions to the GPU
    # (ds_tensor.to(device)), the group's bytes / 2, for a moment. At A's round: 2,000 B gathered + the
    # 1,600 B flat buffer + H's partition 400 / 2 = 3,800 B
    assert forward_peak(world=2, offloaded=True) == 3800


def test_one_gpu_gathers_only_before_deepspeed_0_9() -> None:
    # One GPU, offloaded. DeepSpeed 0.9.0 and later copy each parameter to the GPU, no gather
    # (_no_gather_coalesced): the largest moment is A's round, E gone, A + B + H = 2,000 B
    assert forward_peak(world=1, offloaded=True) == 2000
    # Before 0.9.0 the one-GPU path is the many-GPU one, the partition being the whole parameter: at A's
    # round 2,000 B + the 1,600 B flat buffer + H's staging copy 400 B = 4,000 B
    assert forward_peak(world=1, offloaded=True, gathers_alone=True) == 4000


def zero3_spec(versions: dict[str, str] | None, parallel: dict[str, Any], **workload: Any) -> dict[str, Any]:
    wl = {"batch_size": 1, "seq_len": 16, "precision": "mixed-bf16", "optimizer": "adamw", **workload}
    if versions is not None:
        wl["versions"] = versions
    return {"name": "t", "model": ROUND, "workload": wl, "parallel": parallel}


def one_gpu_today_and_0_8(offload: dict[str, str]) -> tuple[Any, Any]:
    """One GPU, thresholds 0, reuse 0, no prefetch (one module at a time): today's release and 0.8.3."""
    parallel: dict[str, Any] = {"gpus": 1, "zero": 3, "buckets": {"prefetch": 0}, "offload": offload}
    parallel["zero3"] = {"param_persistence_threshold": 0, "max_reuse_distance": 0}
    today = estimate(parse_spec(zero3_spec(None, parallel)))
    return today, estimate(parse_spec(zero3_spec({"deepspeed": "0.8.3"}, parallel)))


def test_a_deepspeed_release_before_0_9_gathers_on_one_gpu() -> None:
    # Parameters offloaded. DeepSpeed 0.9 and later copy the largest module to the GPU: 65,536 elements x 2 B
    # = 131,072 B in forward. DeepSpeed 0.8 gathers it, first copying its partition (here the whole
    # parameter) to the GPU: 262,144 B for that moment. The note names the release
    today, old = one_gpu_today_and_0_8({"params": "cpu", "optimizer": "cpu"})
    assert today.phase_components["forward"]["gathered_parameters"] == 131_072
    assert old.phase_components["forward"]["gathered_parameters"] == 262_144
    assert any("without a gather" in note for note in today.assumptions)
    assert any(note.startswith("DeepSpeed 0.8.3: a gather of several") for note in old.assumptions)


@pytest.mark.parametrize(
    ("parallel", "workload", "why"),
    [
        ({"data": 2, "fsdp": "full_shard"}, {}, "parallel: runs fsdp"),
        ({"data": 2, "distributed_optimizer": True}, {}, "parallel: runs megatron"),
        ({"tensor": 2}, {"mode": "inference"}, "the workload does not train"),
    ],
)
def test_a_deepspeed_release_contradicting_the_plan_is_refused(
    parallel: Any, workload: dict[str, Any], why: str
) -> None:
    data = zero3_spec({"deepspeed": "0.8.3"}, parallel, **workload)
    with pytest.raises(
        SpecError, match=rf"workload\.versions\.deepspeed: 0\.8\.3 names a DeepSpeed release, but {why}"
    ):
        estimate(parse_spec(data))


def test_a_deepspeed_release_without_a_plan_is_kept_and_said() -> None:
    # one GPU, no parallel: section: nothing DeepSpeed allocates here; plan and fit use the release
    data = zero3_spec({"deepspeed": "0.8.3"}, {})
    del data["parallel"]
    data["workload"]["precision"] = "bf16"
    result = estimate(parse_spec(data))
    assert any(n.startswith("versions.deepspeed 0.8.3: no DeepSpeed plan here") for n in result.assumptions)


def test_a_deepspeed_release_must_be_a_release_number() -> None:
    with pytest.raises(SpecError, match=r"workload\.versions\.deepspeed: 'eight' is not a release number"):
        estimate(parse_spec(zero3_spec({"deepspeed": "eight"}, {"data": 2, "zero": 3})))


def test_one_gpu_without_offload_uses_the_parameters_in_place_from_deepspeed_0_9() -> None:
    # Nothing offloaded. From 0.9.0 a module's parameter is its partition, on the GPU already (NoGatherHandle:
    # ds_tensor.data.to(device) is the tensor itself): nothing gathered. DeepSpeed 0.8 gathers it into a
    # buffer of its own: the largest module, 65,536 x 2 B
    today, old = one_gpu_today_and_0_8({})
    assert today.phase_components["forward"]["gathered_parameters"] == 0
    assert old.phase_components["forward"]["gathered_parameters"] == 131_072
    assert any("uses each parameter in place" in note for note in today.assumptions)
