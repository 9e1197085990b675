"""BOFT (``adapter.type: boft``, PEFT ``BOFTConfig``): each adapted linear's input rotated by a trained
block-diagonal orthogonal matrix.

The expected values are worked out by hand from PEFT's ``Linear.forward`` and ``update_layer``
(``peft/tuners/boft/layer.py``, PEFT 0.19.2 to 0.21) or cited. The tracer runs the same method on a 2-layer
Llama (``llm-peft-boft-*`` in benchmarks/data/tracer_llm.json), which tests/llm/test_adapters.py checks to
within 3.5 %.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cli_errors import estimate_error_line

from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.families.resolve import resolve_workload
from vramcalc.spec.load import parse_spec
from vramcalc.spec.versions import peft_release
from vramcalc.stacks import peft_boft

TINY = {
    "architecture": "decoder", "layers": 2, "hidden_size": 512, "heads": 8, "kv_heads": 2, "ffn_size": 1408,
    "mlp": "swiglu", "norm": "rmsnorm", "position": "rotary", "vocab_size": 1000, "tie_embeddings": False,
}  # fmt: skip
LLAMA_3B = {"preset": "llama-3.2-3b"}
QV = ["q_proj", "v_proj"]


def spec(
    model: Any, adapter: dict[str, Any], precision: str = "bf16", batch: int = 4, seq: int = 768, peft: str = ""
) -> Any:
    wl = {"mode": "train", "batch_size": batch, "seq_len": seq, "precision": precision, "optimizer": "adamw"}
    wl |= {"versions": {"peft": peft}} if peft else {}
    return parse_spec({"name": "t", "model": model, "workload": {**wl, "adapter": {"type": "boft", **adapter}}})


def method(
    model: Any, adapter: dict[str, Any], precision: str = "bf16", batch: int = 4, seq: int = 768, peft: str = ""
) -> Any:
    s = spec(model, adapter, precision, batch, seq, peft)
    work = resolve_workload(s)
    release = peft_release(s.workload.versions)
    old = release is not None and release < peft_boft.BOFT_INPUT_ROTATION
    m, _ = peft_boft.boft(work.shape, s.workload.adapter, work.tokens, work.dtypes, 4, old)
    return m


def test_trainable_count_of_the_peft_method_comparison() -> None:
    # PEFT's MetaMathQA method comparison (boft--llama-3.2-3B-default.json): 802,816 trainable parameters,
    # 3,213,552,640 in all; per layer q_proj 768 blocks of 4 x 4 (12,288) + boft_s 3,072 and v_proj 12,288 +
    # 1,024, 28 layers. The permutations are buffers, not parameters.
    r = estimate(spec(LLAMA_3B, {"block_size": 4, "targets": QV}))
    assert r.llm.trainable_params == 802_816
    assert r.params + r.llm.trainable_params == 3_213_552_640


def test_kept_bytes_on_llama_3_2_3b_by_hand() -> None:
    # batch 4 x 768 = 3,072 tokens, bf16 input, fp32 adapters (PEFT's default on a 16-bit base)
    n, square = 3072, 3072 * 3072 * 2
    per_token = 3072 * 2 + 1024 * 2 + 3072 * 2  # q's and v's base outputs; x, read by both
    # per adapted linear: the permutation's bf16 copy and the identity; linalg.solve's LU, solution and the
    # Cayley numerator (3 x 768 blocks of 4 x 4 fp32) and its int32 pivots; boft_scale (bf16) and the scale
    # product (fp32), each a 512-byte block multiple
    cayley = 3 * (768 * 16 * 4) + 768 * 4 * 4
    scales = 3072 * 2 + 3072 * 4 + 1024 * 2 + 4096
    per_layer = 2 * (2 * square + cayley) + scales
    rotations = (28 * 2 - 2) * square  # R wherever the input needs a gradient: all but layer 0's q and v
    expected = 28 * n * per_token + 28 * per_layer + rotations
    assert method(LLAMA_3B, {"targets": QV}).saved == expected == 4_375_904_256


def test_permutation_placement() -> None:
    # boft_P: a dense in x in fp32 buffer per adapted linear, 56 of 3072 x 3072 x 4 B on the GPU
    on_gpu = estimate(spec(LLAMA_3B, {"targets": QV}))
    on_host = estimate(spec(LLAMA_3B, {"targets": QV, "permutation": "host"}))
    assert on_gpu.components["parameters"] - on_host.components["parameters"] == 56 * 3072 * 3072 * 4
    # bf16 input: every forward copies the permutation to the input's dtype wherever it lives
    assert method(LLAMA_3B, {"targets": QV}).saved == method(LLAMA_3B, {"targets": QV, "permutation": "host"}).saved


def test_fp32_input_reads_the_permutation_on_the_gpu_in_place() -> None:
    # .to(x) of an fp32 buffer already on the GPU returns it: no copy; from the host it is a copy (512^2 x 4 B)
    on_gpu = method(TINY, {"targets": QV}, precision="fp32", batch=2, seq=256)
    on_host = method(TINY, {"targets": QV, "permutation": "host"}, precision="fp32", batch=2, seq=256)
    assert on_host.saved - on_gpu.saved == 2 * 2 * 512 * 512 * 4


def test_block_count_and_size_give_the_same_blocks() -> None:
    # 512 inputs in 128 blocks of 4: boft_R holds 128 x 4 x 4 = 2,048 per linear, as block_size 4 does
    by_count = method(TINY, {"block_num": 128, "targets": QV}, batch=2, seq=256)
    by_size = method(TINY, {"block_size": 4, "targets": QV}, batch=2, seq=256)
    assert by_count.params == by_size.params == 2 * (2048 + 512) + 2 * (2048 + 128)
    # larger blocks: 16 x 16 blocks of 512 inputs hold 512 x 16 each
    assert method(TINY, {"block_size": 16, "targets": QV}, batch=2, seq=256).params == 2 * (8192 + 512) + 2 * (
        8192 + 128
    )


@pytest.mark.parametrize(
    ("model", "adapter", "message"),
    [
        (TINY, {"block_size": 3, "targets": QV}, "block_size: 3 does not divide the q projection's 512 inputs"),
        (TINY, {"block_num": 3, "targets": QV}, "block_num: 3 does not divide the q projection's 512 inputs"),
        (TINY, {"block_size": 4, "block_num": 128}, "give block_size or block_num, not both"),
        (TINY, {"rank": 8}, "rank: not a key of adapter type boft"),
        (TINY, {"permutation": "disk"}, "permutation"),
        ({"preset": "mixtral-8x7b"}, {"targets": "all-linear"}, "decoder-only dense models"),
        ({"preset": "t5-small"}, {}, "boft is modelled for decoder models"),
    ],
)
def test_refused(model: Any, adapter: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        estimate(spec(model, adapter, batch=1, seq=64))


def test_cli_block_size_not_dividing_is_one_error_line_exit_2(tmp_path: Path) -> None:
    line = estimate_error_line(
        tmp_path / "boft.yaml",
        "model: {preset: llama-3.2-3b}\n"
        "workload: {mode: train, batch_size: 1, seq_len: 128, precision: bf16,\n"
        "  adapter: {type: boft, block_size: 5, targets: [q_proj]}}\n",
    )
    assert "workload.adapter.block_size: 5 does not divide" in line


def test_before_peft_0_19_2_the_weight_is_rotated() -> None:
    # PEFT 0.19.1's forward: R W^T (in x out, kept by the scale's product) and the scaled weight (kept by
    # F.linear where the input needs a gradient); no base output kept. Llama-3.2-3B q/v, bf16, 3,072 tokens.
    old = method(LLAMA_3B, {"targets": QV}, peft="0.19.1")
    new = method(LLAMA_3B, {"targets": QV})
    square, q_weight, v_weight = 3072 * 3072 * 2, 3072 * 3072 * 2, 3072 * 1024 * 2
    rotated = 28 * (q_weight + v_weight) + (28 - 1) * (q_weight + v_weight)  # R W^T; the scaled weight from layer 1
    rotations = (28 * 2 - 2) * square  # the new forward keeps R where the input needs a gradient
    base_outputs = 28 * 3072 * (3072 + 1024) * 2  # the new forward keeps the base output of q and v
    assert old.saved - new.saved == rotated - rotations - base_outputs
    assert (
        estimate(spec(LLAMA_3B, {"targets": QV}, peft="0.19.2.dev0")).peak_allocated_bytes
        == estimate(spec(LLAMA_3B, {"targets": QV})).peak_allocated_bytes
    )  # the release of PEFT's method comparison already rotates the input


def test_a_peft_release_needs_a_peft_adapter() -> None:
    wl = {"mode": "train", "batch_size": 1, "seq_len": 64, "precision": "bf16", "versions": {"peft": "0.19.1"}}
    with pytest.raises(SpecError, match="versions.peft: 0.19.1 names a PEFT release, but the workload has no PEFT"):
        parse_spec({"name": "t", "model": TINY, "workload": wl})
    with pytest.raises(SpecError, match="versions.peft: 'x' is not a release number"):
        spec(TINY, {"targets": QV}, peft="x")
