"""A GGUF file's weights counted per kind of block (vramcalc/stacks/gguf.py, ``layer_kinds``) equal the
count over every tensor of every block (``tensor_types``, the file listed tensor by tensor), and take work
that does not grow with the layers."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from vramcalc.core.params import count_params
from vramcalc.errors import SpecError
from vramcalc.families.resolve import resolve_model
from vramcalc.spec.load import parse_spec
from vramcalc.stacks import gguf

FTYPES = ["q2_k", "q3_k_m", "q3_k_l", "q4_k_s", "q4_k_m", "q5_k_m", "q4_0", "q8_0", "f16"]
#: Catalog models of every kind of block: GQA Llama, Mistral, a fused q/k/v (Phi-3), mixtures of experts
#: with dense first layers and shared experts (DeepSeek-V2-Lite, Qwen1.5-MoE), 8 experts (Mixtral), MLA
MODELS = ["llama-3-8b", "mistral-7b", "phi-3-mini", "mixtral-8x7b", "deepseek-v2-lite", "qwen1.5-moe-a2.7b"]


def shape_of(model: Any) -> tuple[Any, int]:
    wl = {"mode": "inference", "batch_size": 1, "seq_len": 1, "precision": "fp16"}
    spec = parse_spec({"name": "t", "model": model, "workload": wl})
    shape, _ = resolve_model(spec.model, spec.workload)
    return shape, count_params(shape)


def per_tensor(shape: Any, ftype: str, n: int, opts: gguf.Overrides) -> dict[str, tuple[int, int, int]]:
    """The reference: every tensor of the file with its type, summed per type (tensors, params, bytes)."""
    count: Counter[str] = Counter()
    params: Counter[str] = Counter()
    nbytes: Counter[str] = Counter()
    for t, ty in gguf.tensor_types(shape, ftype, n, opts):
        count[ty] += 1 if t.cols > 1 else 0
        params[ty] += t.params
        nbytes[ty] += t.rows * gguf.row_bytes(ty, t.cols)
    return {ty: (count[ty], params[ty], nbytes[ty]) for ty in nbytes}


def grouped(shape: Any, ftype: str, n: int, opts: gguf.Overrides) -> dict[str, tuple[int, int, int]]:
    return {ty: (s.tensors, s.params, s.bytes) for ty, s in gguf.file_weights(shape, ftype, n, opts).by_type.items()}


@pytest.mark.parametrize("model", MODELS)
def test_grouped_weights_equal_the_per_tensor_count(model: str) -> None:
    # layer counts around every threshold of llama.cpp's rules: 2, 4, n/16, n/8, 7n/8, the thirds between
    for layers in [1, 3, 5, 8, 17, 33, 80]:
        try:
            shape, n = shape_of({"preset": model, "layers": layers})
        except SpecError:  # fewer layers than the model's dense first ones
            continue
        for ftype in FTYPES:
            for opts in (gguf.Overrides(), gguf.Overrides(imatrix=True, output_type="q8_0")):
                assert grouped(shape, ftype, n, opts) == per_tensor(shape, ftype, n, opts), (layers, ftype)


@pytest.mark.parametrize(("frequency", "first_dense"), [(1, 0), (2, 0), (2, 3), (3, 1), (4, 5), (5, 2), (7, 40)])
def test_grouped_weights_with_experts_every_few_layers(frequency: int, first_dense: int) -> None:
    # the layers with experts are i >= first_dense with (i + 1) % frequency == 0: residue classes that cross
    # use_more_bits' thirds
    for layers in [6, 25, 61, 97]:
        model = {"preset": "mixtral-8x7b", "layers": layers, "moe_layer_frequency": frequency}
        try:
            shape, n = shape_of({**model, "first_dense_layers": first_dense})
        except SpecError:  # no layer with experts left
            continue
        for ftype in ("q3_k_m", "q4_k_m", "q4_k_s"):
            opts = gguf.Overrides()
            assert grouped(shape, ftype, n, opts) == per_tensor(shape, ftype, n, opts), (layers, ftype)


def test_layer_kinds_cover_every_block_once() -> None:
    # by hand for 32 layers (use_more_bits: 0-3, 6, 9, ..., 27, 28-31): groups [0,2) [2,4) [4,32/16=2)...
    kinds = gguf.layer_kinds(shape_of({"preset": "llama-3-8b", "layers": 32})[0])
    assert sum(count for _, count in kinds) == 32
    assert sorted(first for first, _ in kinds) == [0, 2, 4, 5, 6, 28]  # 4, 7, 10..; 5, 8, ..; 6, 9, ..
    assert dict(kinds)[6] == 8  # 6, 9, ..., 27: the thirds that take more bits


def test_a_million_layers_are_counted_by_kind() -> None:
    shape, n = shape_of({"preset": "llama-3-8b", "layers": 10**6})
    kinds = gguf.layer_kinds(shape)
    assert len(kinds) <= 12 and sum(count for _, count in kinds) == 10**6
    # by hand: q4_k_m gives ffn_down q6_K in use_more_bits' blocks: the first and last eighth (125,000 each)
    # and every third of the 750,000 between (250,000): 500,000 blocks; the rest keep q4_K
    by_type = gguf.file_weights(shape, "q4_k_m", n).by_type
    down_rows, down_cols = shape.hidden, shape.ffn
    q6_down = 500_000 * down_rows * gguf.row_bytes("q6_K", down_cols)
    attn_v = 500_000 * shape.kv_width * gguf.row_bytes("q6_K", shape.hidden)  # the same blocks' attn_v
    output = shape.vocab * gguf.row_bytes("q6_K", shape.hidden)
    assert by_type["q6_K"].bytes == q6_down + attn_v + output
