"""torchtune's LoRA recipe and torchao's NF4Tensor, by hand (vramcalc/stacks/torchtune_lora.py)."""

from __future__ import annotations

import pytest

from vramcalc.core import activations as act
from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.llm import adapters
from vramcalc.spec.load import parse_spec
from vramcalc.stacks import torchtune_lora

MODEL = {
    "architecture": "decoder", "layers": 2, "hidden_size": 2048, "heads": 32, "kv_heads": 8, "ffn_size": 8192,
    "mlp": "swiglu", "vocab_size": 128256, "tie_embeddings": True, "max_position_embeddings": 131072,
}  # fmt: skip
ADAPTER = {"framework": "torchtune", "rank": 64, "alpha": 128, "targets": ["q_proj", "v_proj", "w1", "w2", "w3"]}


def _spec(**workload: object) -> object:
    wl = {"mode": "train", "batch_size": 1, "seq_len": 512, "precision": "bf16", "adapter": ADAPTER} | workload
    return parse_spec({"name": "t", "model": MODEL, "workload": wl})


def test_nf4_storage_of_one_weight() -> None:
    """torchao 0.14.1 nf4tensor.py, ``NF4Tensor.from_tensor`` / ``double_quantize_scalers`` for a 2048 x 8192
    bf16 weight (16,777,216 values): ``quantized_data`` uint8, two codes a byte -> 8,388,608 B;
    ``quantized_scalers`` int8, one per block_size 64 -> 262,144 B; ``quantization_factor``, one per
    scaler_block_size 256 scalers at bf16 -> 1,024 x 2 = 2,048 B; ``scaler_mean`` one bf16 (2 B) and the
    16-value ``nf4`` code book at bf16 (32 B), each a 512-byte allocator block."""
    assert torchtune_lora.nf4_tensors(8192, 2048, 2) == (8_388_608, 262_144, 2_048, 2, 32)
    assert torchtune_lora.nf4_bytes(8192, 2048, 2) == 8_388_608 + 262_144 + 2_048 + 512 + 512


def test_nf4_dequantization_peak() -> None:
    """``get_original_weight`` on a 2048 x 8192 weight (N = 16,777,216) at bf16: the high and low codes as int64
    (N/2 x 8 B each: 67,108,864 B each), ``nf4[codes]`` for each half (N/2 x 2 B: 16,777,216 B each), the two
    scaled halves (the same), the ``stack`` (N x 2 B = 33,554,432 B) and the dequantized scalers (N/64 x 2 B =
    524,288 B): 2 x 67,108,864 + 4 x 16,777,216 + 33,554,432 + 524,288 = 235,405,312 B, 14 bytes a weight."""
    assert torchtune_lora.nf4_dequant_bytes(16_777_216, 2) == 235_405_312


def test_lora_linear_saved_tensors() -> None:
    """``LoRALinear.forward`` with no dropout (``nn.Identity``) and bf16 adapters: lora_a saves the activation
    x itself, once for the adapters reading the same input (q_proj and v_proj read the attention norm's
    output, w1 and w3 the MLP norm's), lora_b saves lora_a's output (rank 64); w2 reads the MLP product
    (8192 wide). Per token per layer at 2 bytes: inputs 2048 (q, v) + 2048 (w1, w3) + 8192 (w2), and 5 x 64
    lora_a outputs: (2048 + 2048 + 8192 + 5 x 64) x 2 = 25,216 B; two layers: 50,432 B a token."""
    spec = _spec()
    from vramcalc.families.resolve import resolve_workload
    from vramcalc.stacks.registry import resolve_stack

    work = resolve_workload(spec, resolve_stack(spec.model, spec.workload))
    targets, _ = adapters.resolve_targets(work.shape, spec.workload.adapter)
    matrices = adapters.lora_matrices(work.shape, targets)
    dt = act.Dtypes(param=2, compute=2, residual=2, amp=False)
    assert adapters.lora_saved_per_token(matrices, 64, 2, dt, 0.0) == 50_432


def test_rope_cache_of_the_builder_positions() -> None:
    """``Llama3ScaledRoPE.build_rope_cache``: cos and sin stacked, float32, over the builder's ``max_seq_len``
    positions (head_dim 64): 131,072 x 64 x 4 = 33,554,432 B; doubling the positions adds as much again."""
    one = estimate(_spec()).components["parameters"]
    model = MODEL | {"max_position_embeddings": 2 * 131_072}
    wl = {"mode": "train", "batch_size": 1, "seq_len": 512, "precision": "bf16", "adapter": ADAPTER}
    two = estimate(parse_spec({"name": "t", "model": model, "workload": wl})).components["parameters"]
    assert two - one == 131_072 * 64 * 4 == 33_554_432


@pytest.mark.parametrize(
    ("workload", "key"),
    [
        ({"optimizer_in_backward": True}, "workload.optimizer_in_backward"),
        ({"activation_offloading": True}, "workload.activation_offloading"),
        ({"quantization": "int8"}, "workload.quantization"),
        ({"quantization": {"method": "nf4", "double_quant": True}}, "workload.quantization.double_quant"),
        ({"cross_entropy": "fused_linear"}, "workload.cross_entropy"),
        ({"precision": "fp16"}, "workload.precision"),
    ],
)
def test_refused_in_one_line(workload: dict[str, object], key: str) -> None:
    with pytest.raises(SpecError) as err:
        estimate(_spec(**workload))
    assert str(err.value).startswith(key), str(err.value)
    assert "\n" not in str(err.value)


def test_targets_are_required() -> None:
    wl = {"mode": "train", "batch_size": 1, "seq_len": 512, "precision": "bf16",
          "adapter": {"framework": "torchtune", "rank": 8}}  # fmt: skip
    with pytest.raises(SpecError, match=r"^workload\.adapter\.targets"):
        estimate(parse_spec({"name": "t", "model": MODEL, "workload": wl}))


def test_notes_name_what_torchtune_does() -> None:
    notes = " ".join(estimate(_spec(quantization="nf4")).assumptions)
    assert "LoRALinear" in notes and "NF4Tensor" in notes
