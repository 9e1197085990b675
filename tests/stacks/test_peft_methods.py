"""PEFT methods beyond LoRA (DoRA, IA3, prompt, prefix and LN tuning): trainable counts, what each keeps,
the keys each type takes. Tracer references are in test_adapters.py::test_against_tracer (``llm-peft-*``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cli_errors import estimate_error_line
from spec_texts import LLAMA32_3B, TINY_LLAMA
from typer.testing import CliRunner

from vramcalc.choices import Attention
from vramcalc.cli import app
from vramcalc.core import activations as act
from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.families.resolve import resolve_model
from vramcalc.llm import adapters
from vramcalc.spec.llm import AdapterSpec
from vramcalc.spec.load import parse_spec
from vramcalc.stacks import peft_methods

TINY = TINY_LLAMA  # 2 layers, hidden 64, 4 heads of 16, 2 KV heads (K/V width 32), ffn 128
BF16 = act.Dtypes(param=2, compute=2, residual=2, amp=False)
TOKENS = act.Tokens(batch=1, seq=8, target=8)


def spec(model: dict[str, Any], adapter: dict[str, Any], **workload: Any) -> Any:
    wl = {"mode": "train", "batch_size": 1, "seq_len": 8, "precision": "bf16", "adapter": adapter, **workload}
    return parse_spec({"name": "t", "model": model, "workload": wl})


def tiny_shape() -> Any:
    parsed = spec(TINY, {"type": "ln_tuning"})
    return resolve_model(parsed.model, parsed.workload)[0]


@pytest.mark.parametrize(
    ("adapter", "trainable"),
    [
        # LoRA r=4 on q (64 -> 64) and v (64 -> 32): 2 layers x 4 x (128 + 96) = 1,792; magnitudes 2 x (64 + 32)
        ({"type": "dora", "rank": 4, "targets": ["q_proj", "v_proj"]}, 1_792 + 192),
        # IA3 on k (out 32), v (out 32), down (input 128): 2 x 192
        ({"type": "ia3"}, 384),
        # 10 virtual tokens x hidden 64
        ({"type": "prompt_tuning", "num_virtual_tokens": 10}, 640),
        # 10 x 2 layers x 2 (key, value) x K/V width 32
        ({"type": "prefix_tuning", "num_virtual_tokens": 10}, 1_280),
        # embedding 10 x 32, Linear(32 -> 32) 1,056, Linear(32 -> 128) 4,224 (E defaults to the K/V width)
        ({"type": "prefix_tuning", "num_virtual_tokens": 10, "prefix_projection": True}, 5_600),
        # embedding 320, Linear(32 -> 16) 528, Linear(16 -> 128) 2,176
        (
            {"type": "prefix_tuning", "num_virtual_tokens": 10, "prefix_projection": True, "encoder_hidden_size": 16},
            3_024,
        ),
        # 2 layers x 2 norms + the final norm, 64 each
        ({"type": "ln_tuning"}, 320),
    ],
)
def test_trainable_params_by_hand(adapter: dict[str, Any], trainable: int) -> None:
    assert estimate(spec(TINY, adapter)).llm.trainable_params == trainable


@pytest.mark.parametrize(
    ("adapter", "trainable"),
    [
        # measured.yaml peft-mc-lora--llama-3.2-3B-rank32-dora: num_trainable_params 9,289,728
        #   LoRA 9,175,040 + magnitudes 28 x (3,072 + 1,024) = 114,688
        ({"type": "dora", "rank": 32, "targets": ["q_proj", "v_proj"]}, 9_289_728),
        # peft-mc-ia3--llama-3.2-3B-default: 286,720 = 28 x (1,024 + 1,024 + 8,192)
        ({"type": "ia3", "targets": ["k_proj", "v_proj", "down_proj"], "feedforward_modules": ["down_proj"]}, 286_720),
        # peft-mc-prompt_tuning--llama-3.2-3B-default: 614,400 = 200 x 3,072
        ({"type": "prompt_tuning", "num_virtual_tokens": 200}, 614_400),
        # peft-mc-prefixtuning--llama-3.2-3B-lr_0.001: 11,468,800 = 200 x 28 x 2 x 1,024 (GQA: 8 KV heads x 128)
        ({"type": "prefix_tuning", "num_virtual_tokens": 200}, 11_468_800),
        # peft-mc-ln_tuning--llama-3.2-3B-default: 175,104 = (2 x 28 + 1) x 3,072
        ({"type": "ln_tuning"}, 175_104),
    ],
)
def test_trainable_params_match_peft_method_comparison(adapter: dict[str, Any], trainable: int) -> None:
    assert estimate(spec(LLAMA32_3B, adapter, batch_size=4, seq_len=768)).llm.trainable_params == trainable


def test_dora_states_and_parameters_beyond_lora() -> None:
    lora = estimate(spec(LLAMA32_3B, {"rank": 32, "targets": ["q_proj", "v_proj"]}, optimizer="adamw"))
    dora = estimate(spec(LLAMA32_3B, {"type": "dora", "rank": 32, "targets": ["q_proj", "v_proj"]}, optimizer="adamw"))
    # 114,688 fp32 magnitudes; AdamW keeps two fp32 states of each (3,072 x 4 and 1,024 x 4 B: whole 512 B blocks)
    assert dora.components["parameters"] - lora.components["parameters"] == 114_688 * 4
    assert dora.component_peaks["optimizer_states"] - lora.component_peaks["optimizer_states"] == 2 * 4 * 114_688


def _qv(shape: Any) -> list[Any]:
    return adapters.lora_matrices(shape, ("q", "v"))


def test_dora_saved_and_transient_by_hand() -> None:
    d = peft_methods.dora_extra(_qv(tiny_shape()), 4, 4, BF16, 8, 2, 0.0, True)
    # per token: base output (bf16) + B(A(x)) (fp32): q 2 layers x 8 x 64 x 6 = 6,144, v 2 x 8 x 32 x 6 = 3,072;
    # three out-wide fp32 vectors per module, one 512 B block each: 2 modules x 2 layers x 3 x 512 = 6,144
    assert d.saved == 6_144 + 3_072 + 6_144
    # weight norm of q: eye 64 x 64 + A(eye) 64 x 4 + B A, W's fp32 copy, s B A, their sum (4 x 64 x 64) = 20,736
    # elements of 4 B (v: 12,544; the output's three 8 x 64 tensors: 1,536)
    assert d.transient == 20_736 * 4
    assert d.params == 2 * (64 + 32)


def test_dora_with_dropout_keeps_the_cast_weight() -> None:
    d = peft_methods.dora_extra(_qv(tiny_shape()), 4, 4, BF16, 8, 2, 0.1, True)
    # base output now fp32: q 2 x 8 x 64 x 8 = 8,192, v 2 x 8 x 32 x 8 = 4,096; the vectors 6,144; and W in fp32
    # for layer 1 only (layer 0's q/v input needs no gradient): 64 x 64 x 4 + 32 x 64 x 4 = 24,576
    assert d.saved == 8_192 + 4_096 + 6_144 + 24_576
    # an fp32 base: F.linear keeps W itself, no copy
    assert peft_methods.dora_extra(_qv(tiny_shape()), 4, 4, BF16, 8, 2, 0.1, False).saved == 8_192 + 4_096 + 6_144


def _method(adapter: dict[str, Any], attention: Attention = Attention.sdpa) -> Any:
    m, _ = peft_methods.method(tiny_shape(), AdapterSpec(**adapter), TOKENS, BF16, attention)
    return m


def test_ia3_keeps_outputs_and_the_fp32_down_input() -> None:
    m = _method({"type": "ia3"})
    # per layer, 8 tokens: k and v outputs 2 x 8 x 32 x 2 B = 1,024; down_proj's input in fp32 8 x 128 x 4 = 4,096
    assert m.saved == 2 * (1_024 + 4_096)
    assert m.mlp_per_layer == 4_096
    # the MLP backward at the scaled input: 8 x (64 x 2 + 3 x 128 x 4) = 13,312
    assert m.backward_transient == 13_312


def test_prompt_tuning_runs_on_the_longer_sequence() -> None:
    m = _method({"type": "prompt_tuning", "num_virtual_tokens": 10})
    assert (m.tokens.seq, m.bytes_per_param) == (18, 4)
    # layer 0's input norm: 18 tokens x (fp32 input copy 64 x 4 + rstd 4)
    assert m.saved == 18 * (256 + 4)


def test_prefix_tuning_keeps_longer_kv_and_the_mask() -> None:
    m = _method({"type": "prefix_tuning", "num_virtual_tokens": 10})
    # per layer: 10 more keys and values at all 4 heads x 16 (64 wide), bf16: 10 x 2 x 64 x 2 = 2,560;
    # the mask as a bf16 bias, 8 queries x 18 keys padded to 32: 512
    assert m.saved == 2 * (2_560 + 512)
    assert m.attention_shape is not None and m.attention_shape.kv_width == 64
    proj = _method({"type": "prefix_tuning", "num_virtual_tokens": 10, "prefix_projection": True})
    # + the encoder MLP's saved embedding output and tanh output, fp32: 10 x (32 + 32) x 4 = 2,560
    assert proj.saved == m.saved + 2_560


def test_ln_tuning_keeps_each_normalized_output() -> None:
    m = _method({"type": "ln_tuning"})
    # 5 norms x 8 tokens x 64 x 2 B; the copies stay bf16
    assert (m.saved, m.saved_per_layer, m.bytes_per_param) == (5 * 1_024, 2 * 1_024, 2)


def test_methods_keep_less_than_lora_all_linear() -> None:
    lora = estimate(spec(LLAMA32_3B, {"rank": 16, "targets": "all-linear"}, batch_size=4, seq_len=512))
    for adapter in ({"type": "ia3"}, {"type": "ln_tuning"}, {"type": "prompt_tuning", "num_virtual_tokens": 20}):
        other = estimate(spec(LLAMA32_3B, adapter, batch_size=4, seq_len=512))
        assert other.peak_allocated_bytes < lora.peak_allocated_bytes, adapter


@pytest.mark.parametrize(
    ("adapter", "message"),
    [
        ({"type": "ia3", "rank": 8}, "rank: not a key of adapter type ia3"),
        ({"type": "prompt_tuning"}, "num_virtual_tokens: required for adapter type prompt_tuning"),
        ({"type": "ln_tuning", "targets": ["q_proj"]}, "targets: not a key of adapter type ln_tuning"),
        ({"type": "lora", "rank": 8, "num_virtual_tokens": 4}, "num_virtual_tokens: not a key of adapter type lora"),
        ({"type": "dora"}, "rank: required for adapter type dora"),
        ({"type": "dora", "rank": 8, "framework": "litgpt"}, "framework: not a key of adapter type dora"),
        ({"type": "prefix_tuning", "num_virtual_tokens": 4, "encoder_hidden_size": 8}, "only valid with prefix_"),
        ({"type": "prompt_tuning", "num_virtual_tokens": 0}, "num_virtual_tokens"),
    ],
)
def test_keys_that_do_not_fit_the_type(adapter: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        spec(TINY, adapter)


@pytest.mark.parametrize(
    ("adapter", "workload", "message"),
    [
        ({"type": "prefix_tuning", "num_virtual_tokens": 4}, {"gradient_checkpointing": "full"}, "refuses gradient"),
        ({"type": "ia3"}, {"quantization": "nf4"}, "under lora or dora"),
        ({"type": "ia3", "targets": ["q_proj"], "feedforward_modules": ["down_proj"]}, {}, "must be in targets"),
    ],
)
def test_combinations_not_modelled(adapter: dict[str, Any], workload: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        estimate(spec(TINY, adapter, **workload))


def test_cli_bad_key_is_one_error_line_exit_2(tmp_path: Path) -> None:
    line = estimate_error_line(
        tmp_path / "ia3.yaml",
        "model: {preset: llama-3.2-3b}\n"
        "workload: {mode: train, batch_size: 1, seq_len: 128, precision: bf16, adapter: {type: ia3, rank: 8}}\n",
    )
    assert "workload.adapter" in line and "rank" in line


@pytest.mark.parametrize(
    "adapter",
    [
        "{type: dora, rank: 8, targets: all-linear}",
        "{type: ia3}",
        "{type: prompt_tuning, num_virtual_tokens: 16}",
        "{type: prefix_tuning, num_virtual_tokens: 16}",
        "{type: ln_tuning}",
    ],
)
@pytest.mark.parametrize(
    "command",
    [
        ["estimate"],
        ["max-batch", "--gpu", "rtx-4090"],
        ["max-seq", "--gpu", "rtx-4090"],
        ["plan", "--gpu", "a100-40gb-sxm", "--gpus", "8"],
    ],
    ids=lambda c: c[0],
)
def test_commands_run_with_each_method(adapter: str, command: list[str], tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(
        "model: {preset: llama-3.2-3b}\n"
        f"workload: {{mode: train, batch_size: 2, seq_len: 512, precision: bf16, adapter: {adapter}}}\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(app, [command[0], str(path), *command[1:]])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (0, 1), result.output
