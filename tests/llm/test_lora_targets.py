"""LoRA targets: each family's module names, the short forms, and fused q/k/v as PEFT and litgpt adapt it.

Reference counts are derived by hand from the adapter shapes in the frameworks' sources:
- PEFT ``LoraLayer.update_layer`` (peft/tuners/lora/layer.py): ``lora_A = Linear(in, r)``,
  ``lora_B = Linear(r, out)`` on the whole targeted module, so r x (in + out) per module;
  a target name matches every module whose dotted name ends with it (``check_target_module_exists``).
- litgpt ``LoRAQKVLinear.__init__`` (litgpt/lora.py): ``lora_A`` of (r x n_enabled, in) and ``lora_B``
  of (sum of the enabled q/k/v widths, r).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from vramcalc.choices import Architecture, Mlp
from vramcalc.cli import app
from vramcalc.core import activations as act
from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.llm import adapters, lora_targets
from vramcalc.spec.load import parse_spec

# openai-community/gpt2 config.json: n_layer 12, n_embd 768, n_head 12, vocab 50257, n_positions 1024
GPT2 = {
    "architecture": "decoder", "layers": 12, "hidden_size": 768, "heads": 12, "mlp": "gelu_tanh",
    "norm": "layernorm", "position": "learned", "vocab_size": 50257, "max_position_embeddings": 1024,
    "tie_embeddings": True,
}  # fmt: skip
# A fused-QKV model with grouped queries (hidden 4096, 32 heads of 128, 8 KV heads): q 4096, k = v = 1024.
FUSED_GQA = {
    "architecture": "decoder", "layers": 2, "hidden_size": 4096, "heads": 32, "kv_heads": 8, "ffn_size": 16384,
    "mlp": "gelu", "position": "rotary", "fused_qkv": True, "vocab_size": 65024,
}  # fmt: skip
# meta-llama/Llama-3.2-3B config.json
LLAMA32_3B = {
    "architecture": "decoder", "layers": 28, "hidden_size": 3072, "heads": 24, "kv_heads": 8, "ffn_size": 8192,
    "mlp": "swiglu", "vocab_size": 128256, "tie_embeddings": True,
}  # fmt: skip
# microsoft/Phi-3-mini-4k-instruct config.json: 32 layers, hidden 3072, 32 heads (= KV heads), ffn 8192;
# its modules are the fused qkv_proj (3072 -> 9216) and gate_up_proj (3072 -> 16384)
PHI3_MINI = {
    "architecture": "decoder", "layers": 32, "hidden_size": 3072, "heads": 32, "ffn_size": 8192,
    "mlp": "swiglu", "fused_qkv": True, "vocab_size": 32064, "tie_embeddings": False,
}  # fmt: skip

# EleutherAI/gpt-j-6b config.json: 28 layers, n_embd 4096, 16 heads, n_inner 4 x 4096
GPTJ = {
    "architecture": "decoder", "layers": 28, "hidden_size": 4096, "heads": 16, "ffn_size": 16384,
    "mlp": "gelu_tanh", "vocab_size": 50400, "bias": True, "attention_bias": False, "parallel_block": True,
    "norms_per_layer": 1,
}  # fmt: skip


def spec(model: dict[str, Any], adapter: dict[str, Any], **workload: Any) -> Any:
    wl = {"mode": "train", "batch_size": 1, "seq_len": 256, "precision": "bf16", "adapter": adapter, **workload}
    return parse_spec({"name": "t", "model": model, "workload": wl})


def trainable(model: dict[str, Any], **adapter: Any) -> int:
    result = estimate(spec(model, {"rank": 8, **adapter}))
    assert result.llm.trainable_params is not None
    return int(result.llm.trainable_params)


@pytest.mark.parametrize(
    ("model", "adapter", "expected"),
    [
        # PEFT on GPT-2, q and v: the fused c_attn (768 -> 2304) whole: 12 x 8 x (768 + 2304) = 294,912
        (GPT2, {"targets": ["q", "v"]}, 294_912),
        (GPT2, {"targets": ["c_attn"]}, 294_912),
        # litgpt q+v: lora_A (16, 768) + lora_B (768 + 768, 8) = 24,576 a layer; x 12 = 294,912 (the same
        # as PEFT's only because q, k and v are equally wide here)
        (GPT2, {"targets": ["q", "v"], "framework": "litgpt"}, 294_912),
        # litgpt q only: 12 x 8 x (768 + 768) = 147,456; PEFT still adapts all of c_attn: 294,912
        (GPT2, {"targets": ["q"], "framework": "litgpt"}, 147_456),
        (GPT2, {"targets": ["q"]}, 294_912),
        # litgpt q, k and v: lora_A (24, 768) + lora_B (2304, 8): 12 x 8 x (3 x 768 + 2304) = 442,368
        (GPT2, {"targets": ["c_attn"], "framework": "litgpt"}, 442_368),
        # c_proj matches attn.c_proj (768 -> 768) and mlp.c_proj (3072 -> 768): 12 x 8 x (1536 + 3840) = 516,096
        (GPT2, {"targets": ["c_proj"]}, 516_096),
        # all-linear: c_attn, attn.c_proj, c_fc, mlp.c_proj: 12 x 8 x (3072 + 1536 + 3840 + 3840) = 1,179,648
        (GPT2, {"targets": "all-linear"}, 1_179_648),
        (GPT2, {"targets": ["attention", "mlp"]}, 1_179_648),
        (GPT2, {"targets": ["c_attn", "c_proj", "c_fc"]}, 1_179_648),
        # GPT-NeoX/Falcon/BLOOM spellings of the same modules
        (GPT2, {"targets": ["query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"]}, 1_179_648),
        # grouped queries, q+v, rank 8: PEFT on the fused module (4096 -> 4096 + 2 x 1024 = 6144):
        #   2 x 8 x (4096 + 6144) = 163,840; litgpt: 2 x 8 x (2 x 4096 + 4096 + 1024) = 212,992
        (FUSED_GQA, {"targets": ["q", "v"]}, 163_840),
        (FUSED_GQA, {"targets": ["q", "v"], "framework": "litgpt"}, 212_992),
        # litgpt on a model with separate projections counts as separate linears do (its fused lora_A is
        # r per part): Llama-3.2-3B q+v = 28 x 8 x ((3072 + 3072) + (3072 + 1024)) = 2,293,760
        (LLAMA32_3B, {"targets": ["q_proj", "v_proj"], "framework": "litgpt"}, 2_293_760),
        (LLAMA32_3B, {"targets": ["q", "v"]}, 2_293_760),
        # attention = q, k, v, o: 28 x 8 x ((3072 + 3072) + 2 x (3072 + 1024) + (3072 + 3072)) = 4,587,520
        (LLAMA32_3B, {"targets": ["attention"]}, 4_587_520),
        (LLAMA32_3B, {"targets": ["query", "key", "value", "o"]}, 4_587_520),
        # mlp = gate, up, down: 28 x 8 x 3 x (3072 + 8192) = 7,569,408; T5 v1.1 spellings name the same
        (LLAMA32_3B, {"targets": ["mlp"]}, 7_569_408),
        (LLAMA32_3B, {"targets": ["wi_0", "wi_1", "wo"]}, 7_569_408),
        # Phi-3-mini qkv_proj + gate_up_proj: 32 x 8 x ((3072 + 9216) + (3072 + 16384)) = 8,126,464
        (PHI3_MINI, {"targets": ["qkv_proj", "gate_up_proj"]}, 8_126_464),
        # litgpt keeps gate and up apart (fc_1, fc_2) and fuses q/k/v with r per part:
        #   32 x 8 x ((3 x 3072 + 9216) + 2 x (3072 + 8192)) = 10,485,760
        (PHI3_MINI, {"targets": ["qkv_proj", "gate_up_proj"], "framework": "litgpt"}, 10_485_760),
        # GPT-J fc_in (4096 -> 16384) + fc_out (16384 -> 4096): 28 x 8 x 2 x (4096 + 16384) = 9,175,040
        (GPTJ, {"targets": ["fc_in", "fc_out"]}, 9_175_040),
    ],
)
def test_trainable_counts(model: dict[str, Any], adapter: dict[str, Any], expected: int) -> None:
    assert trainable(model, **adapter) == expected


def test_fused_note_and_framework_assumption() -> None:
    result = estimate(spec(GPT2, {"rank": 8, "targets": ["q_proj", "v_proj"]}))
    text = " ".join(result.assumptions)
    assert "adapter.framework not given: peft" in text
    assert "q_proj, v_proj on a fused QKV projection: PEFT adapts the whole module (2,304 outputs" in text
    explicit = estimate(spec(GPT2, {"rank": 8, "targets": ["c_attn"], "framework": "peft"}))
    assert "fused QKV" not in " ".join(explicit.assumptions)
    assert "framework not given" not in " ".join(explicit.assumptions)


def test_litgpt_adapters_keep_the_model_dtype() -> None:
    # bf16 model: PEFT's adapters are fp32 (4 B), litgpt's bf16 (2 B); 294,912 parameters either way.
    # litgpt's GPT also has an LM head of its own (never tied to the embedding): 50,257 x 768 x 2 B more
    head = 50_257 * 768 * 2
    peft = estimate(spec(GPT2, {"rank": 8, "targets": ["q", "v"]}))
    lit = estimate(spec(GPT2, {"rank": 8, "targets": ["q", "v"], "framework": "litgpt"}))
    assert peft.components["parameters"] - lit.components["parameters"] == 294_912 * (4 - 2) - head
    forced_fp32 = {"rank": 8, "targets": ["q", "v"], "framework": "litgpt", "autocast_adapter_dtype": True}
    forced = estimate(spec(GPT2, forced_fp32))
    assert forced.components["parameters"] == peft.components["parameters"] + head


def test_saved_activations_per_token() -> None:
    """GPT-2, q+v, rank 8, dropout 0.1, bf16 (no autocast).

    PEFT: one c_attn adapter per layer, fp32 (a = 4): the dropped input 768 x (4 + 1 mask) + lora_A's
    output 8 x 4 = 3,872 B; x 12 = 46,464 B a token. litgpt: bf16 (a = 2), one dropout of the input
    768 x (2 + 1) + after_A of 2 x 8 x 2 = 2,336 B; x 12 = 28,032 B a token."""
    from vramcalc.families.resolve import resolve_model

    parsed = parse_spec({"model": GPT2, "workload": {"batch_size": 1, "seq_len": 8}})
    shape, _ = resolve_model(parsed.model, parsed.workload)
    bf16 = act.Dtypes(param=2, compute=2, residual=2, amp=False)
    peft = adapters.lora_matrices(shape, ("qkv",))
    assert adapters.lora_saved_per_token(peft, 8, 4, bf16, 0.1) == 46_464
    lit = adapters.lora_matrices(shape, ("q", "v"), litgpt=True)
    assert adapters.lora_saved_per_token(lit, 8, 2, bf16, 0.1) == 28_032
    # litgpt's tensors: lora_A (16, 768) and lora_B (1536, 8) in each of the 12 layers
    assert adapters.adapter_tensors(lit, 8) == [(12, 16, 768), (12, 1536, 8)]


def _mla_shape(q_rank: int) -> Any:
    """DeepSeek-V2-Lite's attention (config.json: hidden 2048, 16 heads, kv_lora_rank 512, q_lora_rank
    null, qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128), 27 layers, no experts."""
    mla = SimpleNamespace(kv_lora_rank=512, q_lora_rank=q_rank or None, qk_rope_head_dim=64,
                          qk_nope_head_dim=128, v_head_dim=128)  # fmt: skip
    return SimpleNamespace(
        architecture=Architecture.decoder, layers=27, decoder_layers=27, hidden=2048, heads=16, kv_heads=16,
        head_dim=128, q_width=2048, kv_width=2048, ffn=10944, mlp=Mlp.swiglu, gated=True, fused_qkv=False,
        moe=None, mla=mla,
    )  # fmt: skip


def test_latent_attention_targets() -> None:
    """modeling_deepseek.py: q_proj 2048 -> 16 x (128 + 64) = 3072; kv_a_proj_with_mqa 2048 -> 512 + 64;
    kv_b_proj 512 -> 16 x (128 + 128) = 4096; o_proj 16 x 128 = 2048 -> 2048.
    Rank 8 on all four: 27 x 8 x ((2048 + 3072) + (2048 + 576) + (512 + 4096) + (2048 + 2048)) = 3,552,768."""
    shape = _mla_shape(0)
    keys, _ = lora_targets.resolve_targets(shape, ["q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"], False)
    assert adapters.trainable_params(adapters.lora_matrices(shape, keys), 8) == 3_552_768
    assert lora_targets.resolve_targets(shape, ["attention"], False)[0] == keys
    # a compressed q (q_lora_rank 1536, DeepSeek-V3): q_a 2048 -> 1536, q_b 1536 -> 3072:
    #   27 x 8 x ((2048 + 1536) + (1536 + 3072)) = 1,769,472
    shape = _mla_shape(1536)
    keys, _ = lora_targets.resolve_targets(shape, ["q_a_proj", "q_b_proj"], False)
    assert adapters.trainable_params(adapters.lora_matrices(shape, keys), 8) == 1_769_472
    assert lora_targets.resolve_targets(shape, ["q"], False)[0] == ("q_a", "q_b")
    with pytest.raises(SpecError, match="'q_a_proj' exists only with model.q_lora_rank"):
        lora_targets.resolve_targets(_mla_shape(0), ["q_a_proj"], False)


@pytest.mark.parametrize(
    ("model", "adapter", "message"),
    [
        (LLAMA32_3B, {"targets": ["nope_proj"]}, "unknown module 'nope_proj'; this model's modules: q_proj, k_proj"),
        (GPT2, {"targets": ["nope_proj"]}, "this model's modules: c_attn/query_key_value/qkv_proj, c_proj"),
        (GPT2, {"targets": ["gate_proj"]}, "'gate_proj' exists only in gated MLPs"),
        (GPT2, {"targets": ["up", "gate"]}, "'gate' exists only in gated MLPs"),
        (LLAMA32_3B, {"targets": ["c_attn"]}, "'c_attn' is a fused projection; this model has separate q/k/v"),
        (LLAMA32_3B, {"targets": ["kv_b_proj"]}, "'kv_b_proj' is a latent-attention \\(MLA\\) module"),
    ],
)
def test_bad_targets(model: dict[str, Any], adapter: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message) as info:
        estimate(spec(model, {"rank": 8, **adapter}))
    assert "short forms: q, k, v, o, gate, up, down, attention, mlp, all-linear" in str(info.value)
    assert "\n" not in str(info.value)


def test_fused_target_on_separate_projections_is_fine_under_litgpt() -> None:
    # litgpt always fuses q, k and v: query_key_value enables all three (= q, k, v as separate linears):
    #   28 x 8 x ((3072 + 3072) + 2 x (3072 + 1024)) = 3,211,264
    assert trainable(LLAMA32_3B, targets=["query_key_value"], framework="litgpt") == 3_211_264


def test_unknown_target_on_the_command_line(tmp_path: Any) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "model: {architecture: decoder, layers: 2, hidden_size: 64, vocab_size: 100, mlp: swiglu}\n"
        "workload: {batch_size: 1, seq_len: 8, precision: bf16, adapter: {rank: 4, targets: [qproj]}}\n",
        encoding="utf-8",
    )
    run = CliRunner().invoke(app, ["estimate", str(path)])
    assert run.exit_code == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "unknown module 'qproj'; this model's modules: q_proj" in lines[0]


def test_distilbert_module_names() -> None:
    # DistilBERT (modeling_distilbert.py): q_lin, k_lin, v_lin, out_lin in attention; lin1, lin2 in the FFN
    shape = SimpleNamespace(fused_qkv=False, gated=False, kv_lora_rank=None)
    names = ["q_lin", "k_lin", "v_lin", "out_lin", "lin1", "lin2"]
    assert lora_targets.resolve_targets(shape, names, False)[0] == ("q", "k", "v", "o", "up", "down")
