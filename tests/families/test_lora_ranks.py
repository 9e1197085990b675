"""LoRA / QLoRA training across GPUs (vramcalc/families/lora_ranks.py): one rank's share of a tiny 4-bit model,
bytes derived by hand in the comments, and the combinations that are refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.spec.load import parse_spec

#: A Llama-shaped decoder: hidden 64, one head (head_dim 64), ffn 128, SwiGLU, vocabulary 32, 2 layers,
#: RMSNorm, no biases, untied head.
#: Per block the linears q, k, v, o (4 x 64 x 64 = 16,384), gate, up (2 x 64 x 128 = 16,384) and down
#: (128 x 64 = 8,192) hold 40,960 weights, the two RMSNorms 128. Embedding 32 x 64 = 2,048, final norm 64,
#: head 2,048: 2 x 41,088 + 4,160 = 86,336 parameters.
#: nf4 without double quantization, blocks of 64: per block 40,960 / 2 = 20,480 B of packed pairs and
#: 40,960 / 64 x 4 = 2,560 B of fp32 absmax; 2 blocks: 40,960 B packed, 5,120 B of statistics.
#: Kept at bf16: 86,336 - 81,920 = 4,416 parameters = 8,832 B (norms 256 B per block; root 8,320 B).
MODEL = {
    "architecture": "decoder",
    "layers": 2,
    "hidden_size": 64,
    "heads": 1,
    "ffn_size": 128,
    "mlp": "swiglu",
    "norm": "rmsnorm",
    "position": "rotary",
    "bias": False,
    "vocab_size": 32,
    "tie_embeddings": False,
    "dropout": 0.0,
}
PACKED, STATS, KEPT = 40_960, 5_120, 8_832
BLOCK = 20_480 + 256  # one block as FSDP gathers it: packed pairs + its two bf16 norms
ROOT = KEPT - 2 * 256  # embedding 4,096 + final norm 128 + head 4,096
#: LoRA rank 2 on all linears, fp32 (PEFT on a bf16 base): per block q, k, v, o 4 x 2 x (64 + 64) = 1,024,
#: gate, up, down 3 x 2 x (64 + 128) = 1,152 -> 2,176; 2 blocks 4,352 parameters = 17,408 B. AdamW: 2 x 17,408
#: (every adapter tensor is a multiple of 512 B, so no allocator rounding).
ADAPTER_BYTES = 4_352 * 4
STATES = 2 * ADAPTER_BYTES


def spec(parallel: dict[str, Any] | None, **workload: Any) -> Any:
    wl = {
        "mode": "train",
        "batch_size": 2,
        "seq_len": 8,
        "precision": "bf16",
        "attention": "sdpa",
        "optimizer": "adamw",
        "quantization": {"method": "nf4", "double_quant": False},
        "adapter": {"rank": 2, "targets": "all-linear"},
        **workload,
    }
    doc: dict[str, Any] = {"name": "t", "model": MODEL, "workload": wl}
    if parallel is not None:
        doc["parallel"] = parallel
    return parse_spec(doc)


def test_weights_of_the_tiny_model() -> None:
    result = estimate(spec(None, adapter={"rank": 2, "targets": "all-linear", "prepare_kbit": False}))
    assert result.llm.quantization["quantized_bytes"] == PACKED + STATS
    assert result.llm.quantization["kept_bytes"] == KEPT
    assert result.llm.trainable_params == 4_352


def test_fsdp_full_shard_divides_base_and_adapter_states() -> None:
    r = estimate(spec({"gpus": 2, "fsdp": "full_shard"}))
    fwd, bwd, opt = r.phase_components["forward"], r.phase_components["backward"], r.phase_components["optimizer"]
    # the 4-bit statistics stay whole; packed pairs + bf16 tensors and the adapters are halved:
    # 5,120 + (40,960 + 8,832) / 2 + 17,408 / 2 = 5,120 + 24,896 + 8,704 = 38,720
    assert fwd["parameters"] == STATS + (PACKED + KEPT) // 2 + ADAPTER_BYTES // 2 == 38_720
    # the root unit (embedding, final norm, head) stays gathered; one block in forward, two in backward
    assert fwd["gathered_parameters"] == ROOT + BLOCK == 29_056
    assert bwd["gathered_parameters"] == ROOT + 2 * BLOCK == 49_792
    assert fwd["optimizer_states"] == STATES // 2 == 17_408
    assert opt["gradients"] == ADAPTER_BYTES // 2 == 8_704
    assert r.parallel is not None and r.parallel.host_bytes == 0


def test_activations_per_rank_are_the_single_gpu_ones() -> None:
    # data parallelism: every rank runs its own batch_size sequences through the whole model
    adapter = {"rank": 2, "targets": "all-linear", "prepare_kbit": False}
    one = estimate(spec(None, adapter=adapter, gradient_checkpointing="full"))
    two = estimate(spec({"gpus": 2, "fsdp": "full_shard"}, adapter=adapter, gradient_checkpointing="full"))
    for phase in ("forward", "backward"):
        assert two.phase_components[phase]["activations"] == one.phase_components[phase]["activations"]
        assert two.phase_components[phase]["temporaries"] == one.phase_components[phase]["temporaries"]


def test_fsdp_cpu_offload_moves_shards_to_the_host() -> None:
    r = estimate(spec({"gpus": 2, "fsdp": "full_shard", "offload": {"params": "cpu", "optimizer": "cpu"}}))
    fwd, opt = r.phase_components["forward"], r.phase_components["optimizer"]
    assert fwd["parameters"] == STATS  # only the quantization statistics stay on the GPU
    assert fwd["optimizer_states"] == 0 and opt["gradients"] == 0
    assert fwd["gathered_parameters"] == ROOT + BLOCK  # units are still gathered on the GPU to run
    # host: the rank's shard of the base and adapters 24,896 + 8,704, AdamW states 17,408, fp32 grads 8,704
    assert r.parallel is not None and r.parallel.host_bytes == 24_896 + 8_704 + 17_408 + 8_704


def test_deepspeed_zero3_prefetch_fills_the_live_parameter_window() -> None:
    # DeepSpeed's coordinator with nothing persistent and nothing kept by the reuse distance (threshold 0,
    # reuse 0): modules in forward order, in elements of the bf16 storage: embedding E 2,048 (4,096 B), per
    # block q, k, v, o packed 64 x 64 / 2 = 2,048 B = 1,024 elements each, gate, up, down 64 x 128 / 2 =
    # 4,096 B = 2,048 elements each, then the head H 2,048 (4,096 B); backward runs H and the blocks in
    # reverse (the embedding's output needs no gradient). A prefetch of 1,000 elements takes one module per
    # module call (every module is larger), and the calls outnumber the matrices: E with the model and
    # layer-stack calls (3 rounds: q1 k1 v1), q with the block, its norm and the attention (4: o1 gate1 up1
    # down1), gate with the norm and the MLP (3), down with the activation (2), H with the final norm.
    # Prefetched modules stay until used, and a module whose later use the prefetcher has already taken off
    # the trace stays too, so the look-ahead only grows: by k2 (t = 9) the whole backward has been taken and
    # everything but the embedding (used once, released at t = 0) is gathered: 2 x 20,480 + 4,096 = 45,056 B,
    # forward and at the start of backward
    keys = {"max_reuse_distance": 0, "param_persistence_threshold": 0}
    buckets = {"reduce": 1000, "prefetch": 1000}
    r = estimate(spec({"gpus": 2, "zero": 3, "buckets": buckets, "zero3": keys}))
    fwd = r.phase_components["forward"]
    assert fwd["gathered_parameters"] == r.phase_components["backward"]["gathered_parameters"] == 45_056
    # max_live_parameters 1 leaves no room to prefetch: one module at a time, the largest 4,096 B
    capped = estimate(spec({"gpus": 2, "zero": 3, "buckets": buckets, "zero3": keys | {"max_live_parameters": 1}}))
    assert capped.phase_components["forward"]["gathered_parameters"] == 4_096
    assert capped.phase_components["backward"]["gathered_parameters"] == 4_096
    # the contiguous gradient bucket: 1,000 elements of the fp32 adapters
    assert fwd["communication_buffers"] == 4_000
    # ZeRO-3 allocates its gradient partitions up front
    assert fwd["gradients"] == ADAPTER_BYTES // 2
    assert fwd["parameters"] == 38_720


def test_deepspeed_zero3_keeps_small_parameters_whole() -> None:
    # DeepSpeed's default stage3_param_persistence_threshold (1e5 elements) covers every tensor of this
    # model: the base whole on both GPUs, packed 40,960 B + bf16 kept 8,832 B = 49,792 B, and every LoRA
    # matrix (at most 128 x 2 elements) whole: 17,408 B -> 67,200 B
    r = estimate(spec({"gpus": 2, "zero": 3, "buckets": {"reduce": 1000, "prefetch": 1000}}))
    assert r.phase_components["forward"]["gathered_parameters"] == PACKED + KEPT + ADAPTER_BYTES


def test_data_parallel_replicates_everything() -> None:
    adapter = {"rank": 2, "targets": "all-linear", "prepare_kbit": False}
    r = estimate(spec({"gpus": 2}, adapter=adapter))
    fwd = r.phase_components["forward"]
    assert fwd["parameters"] == PACKED + STATS + KEPT + ADAPTER_BYTES
    assert fwd["optimizer_states"] == STATES
    assert fwd["gathered_parameters"] == 0


def test_sharded_4bit_defaults_are_noted() -> None:
    r = estimate(spec({"gpus": 2, "fsdp": "full_shard"}))
    text = " ".join(r.assumptions)
    assert "quant_storage not given: bf16" in text
    assert "prepare_kbit not given: false" in text


def test_prepare_kbit_upcast_is_sharded_too() -> None:
    adapter = {"rank": 2, "targets": "all-linear", "prepare_kbit": True}
    r = estimate(spec({"gpus": 2, "fsdp": "full_shard"}, adapter=adapter))
    # the 4,416 kept parameters upcast to fp32: 17,664 B, halved with the packed pairs
    assert r.phase_components["forward"]["parameters"] == STATS + (PACKED + 4_416 * 4) // 2 + ADAPTER_BYTES // 2


@pytest.mark.parametrize(
    ("parallel", "workload", "field"),
    [
        ({"gpus": 2, "tensor": 2}, {}, "parallel.tensor"),
        ({"gpus": 2, "pipeline": 2}, {}, "parallel.pipeline"),
        ({"gpus": 2, "zero": 3}, {"quantization": "int8"}, "workload.quantization"),
        (
            {"gpus": 2, "fsdp": "full_shard"},
            {"quantization": {"method": "nf4", "quant_storage": "uint8"}},
            "workload.quantization.quant_storage",
        ),
        ({"gpus": 2, "zero": 3}, {"adapter": None}, "workload.quantization"),
        ({"gpus": 2, "zero": 3}, {"precision": "mixed-bf16"}, "workload.precision"),
    ],
)
def test_refused_combinations_name_the_field(parallel: dict[str, Any], workload: dict[str, Any], field: str) -> None:
    wl = {k: v for k, v in workload.items() if v is not None}
    doc = spec(parallel, **wl)
    if "adapter" in workload:
        doc = doc.model_copy(update={"workload": doc.workload.model_copy(update={"adapter": None})})
    with pytest.raises(SpecError, match=field.replace(".", r"\.")):
        estimate(doc)


def test_cli_refusal_is_one_line_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "tp.yaml"
    doc = {
        "name": "t",
        "model": MODEL,
        "workload": {"mode": "train", "batch_size": 1, "seq_len": 8, "quantization": "nf4", "adapter": {"rank": 2}},
        "parallel": {"gpus": 2, "tensor": 2},
    }
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    result = CliRunner().invoke(app, ["estimate", str(path)])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "parallel.tensor" in lines[0]


def test_quant_storage_only_for_4bit() -> None:
    with pytest.raises(SpecError, match="quant_storage"):
        spec(None, quantization={"method": "gptq", "quant_storage": "bf16"})
