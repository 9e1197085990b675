"""Per-rank model of multi-GPU plans: hand-derived cases, published figures (DeepSpeed's
estimators, Megatron-LM's theoretical memory, Korthikanti et al. 2022 Table 2), measured runs and
monotonicity properties. Expected numbers are derived in the comments, never pasted from the code."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from measured_records import measured_records
from spec_texts import ROUND_MODEL, TINY_MODEL

from vramcalc.choices import Attention, Precision
from vramcalc.core import activations as act
from vramcalc.core.workload import DTYPES
from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.families.resolve import resolve_model
from vramcalc.parallel.activations import stage_activations
from vramcalc.parallel.layout import deepspeed_model_states_estimate, resolve_plan, tp_local
from vramcalc.spec.load import parse_spec

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import parallel_accuracy  # noqa: E402

GiB = 2**30
MiB = 2**20
SHARED = ROOT.parent / "shared" / "calibration" / "measured.yaml"

#: A decoder whose every tensor is a multiple of 128 elements (512 B in fp32), so the allocator's
#: 512-byte rounding of optimizer states adds nothing and states are exactly 8 bytes per parameter.
#: Parameters: embeddings (128 tokens + 128 positions) x 128 = 32,768; block: attention 4 x 128^2 =
#: 65,536, MLP 2 x 128 x 512 = 131,072, two LayerNorms 2 x 2 x 128 = 512 -> 197,120; final LayerNorm 256;
#: tied head -> 230,144.
ROUND = ROUND_MODEL
ROUND_PARAMS = 230_144
#: The estimator tests' tiny decoder with two blocks: 32,928 saved bytes per block at batch 2, sequence 4,
#: fp32, dropout 0 (tests/core/test_dense.py derives it), final LayerNorm 8 tokens x 520 B = 4,160.
TINY = {**TINY_MODEL, "layers": 2}


def spec(model: dict[str, Any], parallel: dict[str, Any] | None, **workload: Any) -> Any:
    wl = {"batch_size": 2, "seq_len": 4, "precision": "fp32", "optimizer": "adamw", **workload}
    data: dict[str, Any] = {"name": "t", "model": model, "workload": wl}
    if parallel is not None:
        data["parallel"] = parallel
    return parse_spec(data)


# -- a one-GPU plan is today's estimate ----------------------------------------------------------------------

CONFIGS = [p for p in sorted((ROOT / "configs").glob("*.yaml")) if "parallel" not in p.read_text()]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
@pytest.mark.parametrize("checkpointing", ["none", "full", "selective"])
def test_empty_parallel_section_reproduces_the_single_gpu_estimate(path: Path, checkpointing: str) -> None:
    data = yaml.safe_load(path.read_text())
    wl = data["workload"]
    model = data["model"] if isinstance(data["model"], dict) else {}  # a catalog name: no ResNet, no experts
    if model.get("architecture") == "resnet" or {"quantization", "adapter", "prompt_len"} & set(wl):
        pytest.skip("parallel is not modelled for ResNet or with the LLM keys")
    if "experts" in model or wl.get("mode") == "inference" and checkpointing != "none":
        pytest.skip("mixture of experts / inference")
    if wl.get("mode", "train") == "train":
        wl["gradient_checkpointing"] = checkpointing
    single = estimate(parse_spec(data))
    ranked = estimate(parse_spec({**data, "parallel": {}}))
    assert ranked.phase_components == single.phase_components
    assert ranked.total_bytes == single.total_bytes
    assert ranked.parallel is not None and single.parallel is None


# -- tensor parallelism: Korthikanti et al. 2022, Table 2 ----------------------------------------------------


def test_layer_split_follows_korthikanti_table_2() -> None:
    # GPT block, pure fp16, eager attention, dropout 0.1: s = 4, b = 2 (8 tokens), h = 64, a = 4, t = 2.
    # Table 2 without sequence parallelism: sbh (10 + 24/t + 5as/(ht)) per layer.
    #   split (divided by t): 24 sbh / t = 24 x 512 / 2 = 6,144; 5 a s^2 b / t = 5 x 4 x 16 x 2 / 2 = 320 -> 6,464
    #   replicated: 10 sbh = 5,120, plus the LayerNorm statistics vramcalc also counts (2 x 8 B x 8) = 128 -> 5,248
    model = {**TINY, "layers": 2, "heads": 4, "norm": "layernorm", "position": "learned", "bias": True, "dropout": 0.1}
    s = spec(model, None, precision="fp16", attention="eager")
    shape, _ = resolve_model(s.model, s.workload)
    tokens = act.Tokens(batch=2, seq=4, target=4)
    dt = DTYPES[Precision.fp16]
    assert act.layer_saved_split(tp_local(shape, 2), tokens, dt, Attention.eager) == (6_464, 5_248)
    # t = 1: the split part is 24 sbh + 5 a s^2 b = 12,288 + 640; the sum is the whole block
    assert act.layer_saved_split(shape, tokens, dt, Attention.eager) == (12_928, 5_248)
    assert sum(act.layer_saved_split(shape, tokens, dt, Attention.eager)) == act.layer_saved_bytes(
        shape, tokens, dt, Attention.eager
    )


GPT3 = {
    # GPT-3 175B as in Korthikanti et al. 2022, Table 3 (configs/gpt-megatron-tp.yaml)
    "architecture": "decoder",
    "layers": 96,
    "hidden_size": 12288,
    "heads": 96,
    "ffn_size": 49152,
    "mlp": "gelu",
    "norm": "layernorm",
    "position": "learned",
    "max_position_embeddings": 2048,
    "vocab_size": 51200,
    "tie_embeddings": True,
    "bias": True,
    "dropout": 0.1,
}
GPT3_PARALLEL = {"data": 4, "tensor": 8, "pipeline": 8, "sequence_parallel": True, "distributed_optimizer": True}


def gpt3(**parallel: Any) -> Any:
    return estimate(
        spec(
            GPT3,
            {**GPT3_PARALLEL, "micro_batches": 16, **parallel},
            batch_size=1,
            seq_len=2048,
            precision="mixed-bf16",
            optimizer="adam",
            attention="eager",
            gradient_checkpointing="selective",
        )
    )


def test_megatron_activations_with_sequence_parallel_and_selective_recompute() -> None:
    # Megatron-LM compute_activation_memory (Table 2, TP + SP + selective: sbh 34 / t per layer), first
    # stage holding p micro-batches of L/p layers, i.e. L layers of one:
    #   (34 sbh L + 8 s b p + s b h p) / t = (34 x 2048 x 12288 x 96 + 8 x 2048 x 8 + 2048 x 12288 x 8) / 8
    #   = (82,141,249,536 + 131,072 + 201,326,592) / 8 = 10,292,838,400 B
    # vramcalc reports the int64 token ids (8 s b p / t = 16,384 of Megatron's figure) under `inputs`, and
    # adds the LayerNorm statistics (2 x 8 B per token, / t under SP): 2048 x 16 / 8 x 96 = 393,216.
    result = gpt3()
    assert result.parallel.stage == "first"
    megatron = 10_292_838_400 - 16_384
    assert result.components["activations"] == megatron + 393_216
    assert math.isclose(result.components["activations"], megatron, rel_tol=1e-4)


def test_megatron_weights_and_distributed_optimizer() -> None:
    # Megatron-LM compute_weight_and_optimizer_memory for GPT-3 175B, t = 8, p = 8, d = 4:
    #   layer = 2h (4h + 2) + 4h^2 = 12h^2 + 4h = 1,811,988,480; block = 96 layers + final LN 2h
    #   = 173,950,918,656; embedding h x 51200 = 629,145,600
    #   most loaded shard = (block / p + embedding) / t = 2,796,626,304 parameters
    #   x (6 + 12 / d) = 9 bytes -> 25,169,636,736 B
    # vramcalc's first stage also holds the replicated learned positions (2048 x 12288 = 25,165,824) and the
    # biases Megatron's formula leaves out (per layer 3h/t + h + 4h/t + h - the LN share h/2 it counts as
    # 4h/t: 6.375 h x 12 layers = 940,032), and not the final LayerNorm's share (2h / 64 = 384):
    #   2,796,626,304 + 25,165,824 + 940,032 - 384 = 2,822,731,776 parameters
    result = gpt3()
    assert result.parallel.params_per_rank == 2_822_731_776
    step = result.phase_components["optimizer"]
    states = step["parameters"] + step["gradients"] + step["optimizer_states"]
    n = 2_822_731_776
    assert step["parameters"] == 2 * n and step["gradients"] == 4 * n  # bf16 params, fp32 main grads
    assert math.isclose(states, 9 * n, rel_tol=1e-4)  # fp32 master + Adam over d = 4: 12 / 4
    assert math.isclose(states, 25_169_636_736, rel_tol=0.01)


# -- DeepSpeed: its own estimators and vramcalc's component model -------------------------------------------

T5_3B = {
    # t5-3b: 2,851,598,336 parameters, largest module the shared embedding 32,128 x 1,024 = 32,899,072
    "architecture": "encoder-decoder",
    "layers": 24,
    "hidden_size": 1024,
    "heads": 32,
    "head_dim": 128,
    "ffn_size": 16384,
    "mlp": "relu",
    "vocab_size": 32128,
    "tie_embeddings": True,
}
P_T5, L_T5 = 2_851_598_336, 32_899_072


def gib2(n_bytes: int) -> float:
    return round(n_bytes / GiB, 2)


@pytest.mark.parametrize(
    ("params", "largest", "expected"),
    [
        # DeepSpeed docs/code-docs/source/memory.rst, "live" t5-3b model, 1 node x 8 GPUs (GB there = GiB):
        # ZeRO-2 per CPU 127.48, per GPU 5.31 (optimizer offload) and 15.93; ZeRO-3 (zero_init=1) per CPU
        # 71.71 / 63.74 / 1.47 and per GPU 0.12 / 0.79 / 6.10 for offload params+optimizer / optimizer / none
        (P_T5, L_T5, [127.48, 5.31, 127.48, 15.93, 71.71, 0.12, 63.74, 0.79, 1.47, 6.10]),
        # and "cold", total_params=2851e6, largest_layer_params=32e6
        (2_851_000_000, 32_000_000, [127.45, 5.31, 127.45, 15.93, 71.69, 0.12, 63.72, 0.78, 1.43, 6.09]),
    ],
)
def test_deepspeed_estimator_reproduces_its_published_table(params: int, largest: int, expected: list[float]) -> None:
    got = []
    for stage, offload in [
        (2, {"offload_optimizer": True}),
        (2, {}),
        (3, {"offload_optimizer": True, "offload_params": True}),
        (3, {"offload_optimizer": True}),
        (3, {}),
    ]:
        cpu, gpu = deepspeed_model_states_estimate(params, largest, stage, 8, 1, **offload)
        got += [gib2(cpu), gib2(gpu)]
    assert got == expected


def test_deepspeed_estimator_t5_large_example() -> None:
    # memory.rst: t5-large, 737.67M params, 32.90M largest layer, 4 GPUs: case1 3291 MB, case2 125 MB,
    # case3 477 MB (bytes >> 20)
    p, largest = 737_668_096, 32_899_072
    assert deepspeed_model_states_estimate(p, largest, 3, 4, 1)[1] >> 20 == 3291
    assert (
        deepspeed_model_states_estimate(p, largest, 3, 4, 1, offload_optimizer=True, offload_params=True)[1] >> 20
        == 125
    )
    assert deepspeed_model_states_estimate(p, largest, 3, 4, 1, offload_optimizer=True)[1] >> 20 == 477


def t5_zero(stage: int, zero3: dict[str, int] | None = None, **offload: str) -> Any:
    parallel = {"data": 8, "zero": stage, "buckets": {"reduce": 0, "prefetch": 0}, "offload": offload}
    if zero3 is not None:
        parallel["zero3"] = zero3
    return estimate(spec(T5_3B, parallel, batch_size=1, seq_len=128, precision="mixed-fp16", optimizer="adam"))


#: T5-3B's persistent parameters (at most 1e5 elements each, never partitioned): 122 RMS norms of 1,024
#: (24 encoder layers x 2 + 24 decoder layers x 3 + 2 final norms) and two 32 x 32 relative-position tables
T5_PERSISTENT = 122 * 1024 + 2 * 32 * 32


def test_component_model_equals_deepspeed_where_both_count_the_same_tensors() -> None:
    # DeepSpeed's estimator counts 4 x largest_layer_params: the largest module gathered in 16 bits and its
    # 16-bit gradient, nothing kept past its use -- the coordinator with max_reuse_distance 0 (and no
    # prefetch). ZeRO-3, parameters and optimizer offloaded: 4 x 32,899,072 = 131,596,288 B (DeepSpeed
    # case 2), plus the persistent parameters, whole (2 B x 126,976) and their partition kept on the GPU
    # (2 B x 126,976 / 8): 253,952 + 31,744 B. DeepSpeed's estimator leaves out one more tensor, which the
    # gather allocates: the offloaded partition of the module being gathered, copied to the GPU first
    # (partition_parameters.py, ``param.ds_tensor.to(device)`` in the all-gather), 2 B x 32,899,072 / 8
    both = t5_zero(3, {"max_reuse_distance": 0}, optimizer="cpu", params="cpu")
    peaks = both.component_peaks
    assert peaks["parameters"] == peaks["gradients"] == peaks["optimizer_states"] == 0
    staging = 2 * L_T5 // 8
    assert peaks["gathered_parameters"] == 4 * L_T5 + 2 * T5_PERSISTENT + 2 * T5_PERSISTENT // 8 + staging
    # ZeRO-3, optimizer offloaded (case 3): + the 16-bit parameter partition 2 x P / 8 = 712,899,584
    opt = t5_zero(3, {"max_reuse_distance": 0}, optimizer="cpu")
    assert opt.component_peaks["parameters"] == 712_899_584
    gathered = opt.component_peaks["gathered_parameters"]
    assert opt.component_peaks["parameters"] + gathered == 844_495_872 + 2 * T5_PERSISTENT
    # ZeRO-2, optimizer offloaded: the 16-bit parameters 2 x P = 5,703,196,672; gradient partitions go to the host
    two = t5_zero(2, optimizer="cpu")
    assert two.component_peaks["parameters"] == 5_703_196_672 and two.component_peaks["gradients"] == 0
    # host per node of 8 GPUs (DeepSpeed's figure without its 1.5 buffer factor): 18 P and 16 P
    assert math.isclose(both.parallel.host_bytes_per_node, 18 * P_T5, rel_tol=1e-4)
    assert math.isclose(opt.parallel.host_bytes_per_node, 16 * P_T5, rel_tol=1e-4)


def test_zero3_default_reuse_distance_keeps_the_end_of_forward_gathered() -> None:
    # The same run with DeepSpeed's default stage3_max_reuse_distance of 1e9 elements: a module finishing
    # forward is kept when its next use (its backward) comes within 1e9 elements of trace, i.e. when the
    # S elements after it in forward satisfy 2 S < 1e9. From the end of T5-3B's forward: the LM head (tied:
    # the 32,899,072-element embedding), then decoder layers of 2 x 16,777,216 (MLP) + 8 x 4,194,304
    # (self- and cross-attention) = 67,108,864 elements. 5e8 - 32,899,072 = 467,100,928 covers the first
    # module of the 7th layer from the end (6 x 67,108,864 + 62,914,560 = 465,567,744 after it) but not the
    # last module of the 8th (7 x 67,108,864 = 469,762,048 after it): 32,899,072 + 7 x 67,108,864 =
    # 502,661,120 elements, 1,005,322,240 B in fp16, held as backward starts, with the head's 16-bit
    # gradient (2 x 32,899,072) and the persistent parameters (253,952 + 31,744 B). In forward, the head is
    # gathered last, next to the kept layers, and its offloaded partition is first copied to the GPU:
    # 2 x 32,899,072 / 8 B more for that moment (no prefetch: every gather is one module's own)
    both = t5_zero(3, optimizer="cpu", params="cpu")
    expected = 2 * 502_661_120 + 2 * L_T5 + 2 * T5_PERSISTENT + 2 * T5_PERSISTENT // 8
    assert both.phase_components["backward"]["gathered_parameters"] == expected
    assert both.phase_components["forward"]["gathered_parameters"] == expected - 2 * L_T5 + 2 * L_T5 // 8


def model_states_peak(result: Any) -> int:
    """Largest of the model-state bytes over the step (the optimizer step's fp32 gradient copy included)."""
    keys = ("parameters", "gradients", "optimizer_states", "gathered_parameters")
    phases = result.phase_components
    return max(
        sum(phases["backward"][k] for k in keys),
        sum(phases["optimizer"][k] for k in keys) + phases["optimizer"]["temporaries"],
    )


def test_component_model_differs_from_deepspeed_where_accountings_differ() -> None:
    # ZeRO-3 without offload. DeepSpeed: 4 L + 18 P / 8 = 6,547,692,544. vramcalc (ZeRO paper): 16-bit params,
    # 16-bit grads, fp32 master + Adam: 16 P / 8; at the step also the fp32 copy of the gradient partition
    # 4 P / 8 -> 20 P / 8 = 7,128,995,840 (the gathered 4 L is freed by then): 8.9 % above DeepSpeed's
    zero3 = model_states_peak(t5_zero(3))
    assert math.isclose(zero3, 20 * P_T5 // 8, rel_tol=1e-4)
    assert 1.0 < zero3 / deepspeed_model_states_estimate(P_T5, L_T5, 3, 8, 1)[1] < 1.10
    # ZeRO-2. DeepSpeed counts full 16-bit gradients: 4 P + 16 P / 8 = 17,109,590,016. vramcalc keeps the
    # gradient partition: 2 P + (2 + 12 + 4) P / 8 = 12,119,292,928, 29 % less
    zero2 = model_states_peak(t5_zero(2))
    assert math.isclose(zero2, 2 * P_T5 + 18 * P_T5 // 8, rel_tol=1e-4)
    assert 0.70 < zero2 / deepspeed_model_states_estimate(P_T5, L_T5, 2, 8, 1)[1] < 0.72


# -- hand-derived sharding, buckets, offload, pipeline ---------------------------------------------------------


def test_zero2_offload_on_two_gpus_by_hand() -> None:
    # n = 230,144 (ROUND), mixed-bf16 Adam, ZeRO-2 over 2 GPUs, optimizer offloaded.
    # GPU: bf16 parameters 2 n = 460,288; gradients go to the host; DeepSpeed's reduce bucket
    #   500M elements x 2 B = 1,000,000,000 B is allocated whatever the model size.
    # host per rank: (fp32 master 4 n + Adam 8 n) / 2 + fp32 gradient partition 4 n / 2 = 8 n = 1,841,152
    n = ROUND_PARAMS
    result = estimate(
        spec(ROUND, {"data": 2, "zero": 2, "offload": {"optimizer": "cpu"}}, precision="mixed-bf16", seq_len=128)
    )
    assert result.component_peaks["parameters"] == 2 * n
    assert result.component_peaks["gradients"] == result.component_peaks["optimizer_states"] == 0
    assert result.component_peaks["communication_buffers"] == 1_000_000_000
    assert result.parallel.host_bytes == 8 * n
    assert result.parallel.host_bytes_per_node == 16 * n  # two ranks on the node


@pytest.mark.parametrize(
    ("parallel", "per_param"),
    [
        # bytes per parameter of params + grads + (master + Adam) at the optimizer step, d = 4, mixed precision
        ({"zero": 1}, 2 + 2 + 12 / 4),  # ZeRO paper, P_os
        ({"zero": 2}, 2 + (2 + 12) / 4),  # P_os+g
        ({"zero": 3}, (2 + 2 + 12) / 4),  # P_os+g+p
        ({"distributed_optimizer": True}, 6 + 12 / 4),  # Megatron-LM
        ({"fsdp": "full_shard"}, (4 + 4 + 8) / 4),  # FSDP: sharded fp32 params, grads, Adam
        ({"fsdp": "no_shard"}, 4 + 4 + 8),
    ],
)
def test_bytes_per_parameter_by_scheme(parallel: dict[str, Any], per_param: float) -> None:
    result = estimate(spec(ROUND, {"data": 4, **parallel}, precision="mixed-bf16", seq_len=128))
    step = result.phase_components["optimizer"]
    held = step["parameters"] + step["gradients"] + step["optimizer_states"]
    assert held == per_param * ROUND_PARAMS


def test_pipeline_in_flight_micro_batches_by_hand() -> None:
    # TINY: 2 blocks of 32,928 saved bytes (batch 2, sequence 4, fp32), no embedding activations (dropout 0,
    # learned positions), final LayerNorm 4,160 on the last stage. Two stages of one block each.
    def acts(stage: str, **par: Any) -> int:
        s = spec(TINY, {"pipeline": 2, **par})
        shape, _ = resolve_model(s.model, s.workload)
        plan, _ = resolve_plan(s, shape)
        return stage_activations(s, shape, plan, stage).total

    assert acts("first", micro_batches=4) == 2 * 32_928  # 1F1B: min(4, 2) micro-batches in flight
    assert acts("first", micro_batches=1) == 32_928
    assert acts("last", micro_batches=4) == 32_928 + 4_160  # one micro-batch, plus the final norm
    assert acts("first", micro_batches=4, schedule="gpipe") == 4 * 32_928
    # interleaved, 4 blocks, 2 stages x 2 virtual: 2 blocks per rank x (p v + p - 1) / v = 2.5 micro-batches
    four = {**TINY, "layers": 4}
    s = spec(four, {"pipeline": 2, "micro_batches": 4, "schedule": "interleaved", "virtual_stages": 2})
    shape, _ = resolve_model(s.model, s.workload)
    plan, _ = resolve_plan(s, shape)
    assert stage_activations(s, shape, plan, "first").total == 2 * 32_928 * 5 // 2


def test_tensor_parallel_inference_weights_by_hand() -> None:
    # ROUND at t = 2: attention 4 x 128 x 64 = 32,768; MLP 2 x 128 x 256 = 65,536; norms 512 + 256;
    # embeddings: 64 of the 128 tokens x 128 = 8,192 + positions (replicated) 16,384 -> 123,648 x 2 B (bf16)
    result = estimate(spec(ROUND, {"tensor": 2}, mode="inference", precision="bf16", optimizer=None, seq_len=128))
    assert result.components["parameters"] == 247_296


# -- measured runs (benchmarks/data/measured_multi_gpu.yaml, copied from shared/calibration) ------------------


def test_megatron_pipeline_run_static_memory() -> None:
    # megatron-llama2-7b-pp4-static (Megatron-LM core_r0.10.0, Llama-2-7B, tp 1, pp 4, dp 2, distributed
    # optimizer): rank 0 memory_allocated after iteration 1 = 20,034.75 MiB = 21,007,958,016 B.
    # First stage: 8 blocks x 202,383,360 + embedding 32,000 x 4,096 = 1,750,138,880 parameters x (2 bf16 +
    # 4 fp32 grad + 12 / 2) = 21,001,666,560 B: -0.03 %. Tolerance 0.1 %.
    rows = {r["case"]: r for r in parallel_accuracy.evaluate(parallel_accuracy.load_cases())}
    row = rows["megatron-llama2-7b-pp4-static"]
    assert row["measured_bytes"] == 21_007_958_016
    assert math.isclose(row["estimate_bytes"], 21_001_666_560, rel_tol=1e-5)
    assert abs(row["error_pct"]) < 0.1


def test_torchtitan_runs_stay_under_the_reserved_peak() -> None:
    # torchtitan benchmarks/llama3_h100_202412_torchtitan.md Tables 1-6: reserved peak (max over ranks), so
    # one-sided (shared/calibration/README.md): the allocated-level estimate P <= v. Tolerance on the other
    # side: v / P <= 1.5 -- the allocator reserve (0-30 % for fixed shapes) plus Float8 linears and
    # torch.compile, which the full-checkpointing runs used and vramcalc does not model, make v exceed P.
    # The 12 full-checkpointing runs and the 2 op-level selective ones without torch.compile (t1, t3 FSDP).
    rows = [r for r in parallel_accuracy.evaluate(parallel_accuracy.load_cases()) if r["case"].startswith("torchtitan")]
    full = [r for r in rows if not r["not_comparable"]]
    assert len(full) == 14 and len(rows) == 20
    assert {r["case"] for r in full} >= {"torchtitan-t1-8b-8gpu-FSDP", "torchtitan-t3-8b-128gpu-FSDP"}
    for row in full:
        assert row["ok"] and 1.0 <= row["ratio"] <= 1.5, row


def test_deepspeed_tutorial_fit_labels() -> None:
    # deepspeed-zero-tutorial-gpt2-1.5b-dp8-ZeRO1-fits and deepspeed-zero-offload-gpt2-10b-1gpu-fits (V100
    # 32 GB, usable 34,057,748,480 B, CUDA context 1343 MiB): predicted to fit. The no-ZeRO OOM case is a
    # reported miss (README: vramcalc's 29.08 GiB does not exceed the 29.09 GiB allocated at the OOM).
    rows = {r["case"]: r for r in parallel_accuracy.evaluate(parallel_accuracy.load_cases())}
    assert rows["deepspeed-zero-tutorial-gpt2-1.5b-dp8-ZeRO1-fits"]["ok"]
    assert rows["deepspeed-zero-offload-gpt2-10b-1gpu-fits"]["ok"]


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/calibration not present")
def test_copied_cases_match_shared_calibration() -> None:
    shared = {c["id"]: c for c in measured_records()}
    for case in parallel_accuracy.load_cases():
        assert case == {k: v for k, v in shared[case["id"]].items() if k != "original"}, case["id"]


# -- validation ------------------------------------------------------------------------------------------------

LLAMA = {
    "architecture": "decoder",
    "layers": 32,
    "hidden_size": 4096,
    "heads": 32,
    "kv_heads": 8,
    "ffn_size": 11008,
    "mlp": "swiglu",
    "vocab_size": 32000,
}


@pytest.mark.parametrize(
    ("parallel", "workload", "message"),
    [
        ({"tensor": 3}, {}, r"^parallel\.tensor: 3 does not divide heads \(32\)$"),
        ({"tensor": 16}, {}, r"^parallel\.tensor: 16 does not divide kv_heads \(8\)$"),
        ({"pipeline": 3}, {}, r"^parallel\.pipeline: 3 does not divide layers \(32\)"),
        ({"gpus": 16, "data": 4, "tensor": 2}, {}, r"^parallel\.gpus: 16 is not data x tensor x pipeline"),
        ({"gpus": 6, "tensor": 4}, {}, r"^parallel\.gpus: 6 is not a multiple of tensor x pipeline x context"),
        ({"sequence_parallel": True}, {}, r"^parallel\.sequence_parallel: needs tensor > 1"),
        ({"zero": 3, "fsdp": "full_shard"}, {}, r"^parallel\.fsdp: give one of zero, fsdp"),
        ({"zero": 2, "pipeline": 2}, {}, r"^parallel\.zero: ZeRO-2 is incompatible with pipeline"),
        ({"zero": 2, "offload": {"params": "cpu"}}, {}, r"^parallel\.offload\.params: needs sharded parameters"),
        ({"zero": 0, "offload": {"optimizer": "cpu"}}, {}, r"^parallel\.offload\.optimizer: needs zero 1, 2 or 3"),
        ({"zero": 3}, {"mode": "inference", "optimizer": None}, r"^parallel\.zero: only valid with mode: train$"),
        ({"context": 2}, {"attention": "eager"}, r"^parallel\.context: context parallelism needs"),
        ({"fsdp": "hybrid", "data": 8, "shard_size": 3}, {}, r"^parallel\.shard_size: 3 does not divide"),
    ],
)
def test_plan_rules_name_the_key(parallel: dict[str, Any], workload: dict[str, Any], message: str) -> None:
    s = spec(LLAMA, parallel, **{"seq_len": 4096, **workload})
    with pytest.raises(SpecError, match=message):
        estimate(s)


def test_resnet_and_llm_keys_are_refused() -> None:
    resnet = parse_spec(
        {
            "model": {"architecture": "resnet", "depth": 50},
            "workload": {"batch_size": 8, "image_size": 224},
            "parallel": {"data": 2},
        }
    )
    with pytest.raises(SpecError, match=r"^parallel: not modelled for architecture: resnet"):
        estimate(resnet)
    mixed_resnet = parse_spec(
        {
            "model": {"architecture": "resnet", "depth": 50},
            "workload": {"batch_size": 8, "image_size": 224, "precision": "mixed-bf16"},
        }
    )
    with pytest.raises(SpecError, match=r"^workload\.precision: mixed-bf16: not modelled for architecture: resnet"):
        estimate(mixed_resnet)


# -- properties (hypothesis) ------------------------------------------------------------------------------------

SHARDED = [
    {"zero": 1},
    {"zero": 2},
    {"zero": 3},
    {"fsdp": "full_shard"},
    {"fsdp": "shard_grad_op"},
    {"distributed_optimizer": True},
]


@settings(max_examples=60, deadline=None)
@given(
    scheme=st.sampled_from(SHARDED),
    d1=st.integers(1, 64),
    d2=st.integers(1, 64),
    tensor=st.sampled_from([1, 2, 4]),
    precision=st.sampled_from(["mixed-bf16", "bf16", "fp32", "amp-bf16"]),
    checkpointing=st.sampled_from(["none", "full"]),
    micro_batches=st.sampled_from([1, 4]),
)
def test_more_data_parallel_shards_never_increase_per_gpu_bytes(
    scheme: dict[str, Any], d1: int, d2: int, tensor: int, precision: str, checkpointing: str, micro_batches: int
) -> None:
    lo, hi = sorted((d1, d2))

    def peak(data: int) -> int:
        par = {
            **scheme,
            "data": data,
            "tensor": tensor,
            "sequence_parallel": tensor > 1,
            "micro_batches": micro_batches,
        }
        result = estimate(
            spec({**LLAMA, "layers": 4}, par, seq_len=256, precision=precision, gradient_checkpointing=checkpointing)
        )
        return result.peak_allocated_bytes

    # What sharding divides is the allocated peak. The total is not monotone: the allocator reserve is a
    # quarter of the peak moment's transient bytes, and a peak that moves to another moment as the shards
    # shrink can carry more of them (FSDP full_shard, fp32, full checkpointing, data 35 -> 64: the peak falls
    # by 178 MB while the reserve grows by 186 MB).
    assert peak(hi) <= peak(lo)


@settings(max_examples=40, deadline=None)
@given(
    t1=st.sampled_from([1, 2, 4, 8]),
    t2=st.sampled_from([1, 2, 4, 8]),
    scheme=st.sampled_from([{}, {"zero": 3}, {"fsdp": "full_shard"}, {"zero": 1}]),
    pipeline=st.sampled_from([1, 2]),
    mode=st.sampled_from(["train", "inference"]),
)
def test_more_tensor_parallelism_never_increases_per_gpu_parameter_bytes(
    t1: int, t2: int, scheme: dict[str, Any], pipeline: int, mode: str
) -> None:
    lo, hi = sorted((t1, t2))
    if mode == "inference":
        scheme = {}
    assume(not (pipeline > 1 and scheme.get("zero", 0) >= 2))  # DeepSpeed refuses ZeRO-2/3 with pipelines

    def params(tensor: int) -> tuple[int, int]:
        par = {**scheme, "data": 2, "tensor": tensor, "pipeline": pipeline}
        wl = {"mode": mode, "optimizer": None} if mode == "inference" else {}
        result = estimate(spec({**LLAMA, "layers": 4}, par, seq_len=256, precision="bf16", **wl))
        peaks = result.component_peaks
        return peaks["parameters"], peaks["parameters"] + peaks["gathered_parameters"]

    assert params(hi)[0] <= params(lo)[0]
    assert params(hi)[1] <= params(lo)[1]
