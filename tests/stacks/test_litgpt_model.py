"""litgpt's own model code under ``adapter.framework: litgpt`` (vramcalc/stacks/transformers.py ``litgpt_model``,
vramcalc/stacks/litgpt.py ``loss_bytes``, vramcalc/stacks/bnb.py ``lightning_load_copy``), by hand from
litgpt's source at commit 8641822 (lit_gpt/model.py, lit_gpt/lora.py, lit_gpt/utils.py, finetune/lora.py) and
Lightning's ``BitsandbytesPrecision`` (lightning/fabric/plugins/precision/bitsandbytes.py). The whole steps
are held to the tracer in tests/stacks/test_tracer_litgpt.py."""

from __future__ import annotations

from typing import Any

from vramcalc.core import activations as act
from vramcalc.families import estimate
from vramcalc.families.resolve import resolve_model
from vramcalc.spec.load import parse_spec
from vramcalc.stacks.litgpt import loss_bytes as litgpt_loss_bytes

ADAPTER = {"rank": 8, "alpha": 16, "targets": ["q", "v"], "framework": "litgpt"}


def spec(model: dict[str, Any], **workload: Any) -> Any:
    wl = {"mode": "train", "batch_size": 1, "seq_len": 256, "precision": "bf16", "attention": "sdpa"}
    return parse_spec({"name": "t", "model": model, "workload": {**wl, "adapter": ADAPTER, **workload}})


def test_the_loss_keeps_every_chunk_and_its_log_softmax_in_fp32() -> None:
    # 2 sequences of 300 tokens, vocabulary 1,000, bf16 model. Lightning Fabric's module wrapper casts the
    # model's output to torch.get_default_dtype(), float32 (_FabricModule.forward -> convert_output,
    # lightning 2.1 fabric/plugins/precision/half.py), so the loss sees 4-byte logits: all 600 positions
    # (the list of 128-token chunks) and the log-softmax of 2 x 299 (the last position dropped):
    # (600 + 598) x 1,000 x 4 = 4,792,000 B. Backward takes one chunk: 2 x 128 rows of logits' and
    # log-softmax gradients, 2 x (2 x 128 x 1,000 x 4) = 2,048,000 B. The model's bf16 chunks (600 x 1,000
    # x 2 = 1,200,000 B) are freed when the cast list is returned: no forward transient beyond the saved
    s = spec({"preset": "llama-2-7b", "layers": 1, "vocab_size": 1000}, batch_size=2, seq_len=300)
    shape, _ = resolve_model(s.model, s.workload)
    loss = litgpt_loss_bytes(shape, act.Tokens(2, 300, 300), act.Dtypes(2, 2, 2, False))
    assert (loss.saved, loss.forward_transient, loss.backward_temporaries) == (4_792_000, 0, 2_048_000)


def test_torch_before_2_2_keeps_the_square_in_each_rmsnorm() -> None:
    # litgpt's RMSNorm is torch.mean(x * x, dim=-1, keepdim=True); PyTorch 2.1's mean saved its input for
    # backward (fixed for 2.2: github.com/pytorch/pytorch/pull/109935). Llama 2 7B, 2 layers, 1 x 512
    # tokens, bf16: each block's two RMSNorms and the final one keep a 512 x 4,096 x 2 B square, except the
    # first block's first norm, whose input (the frozen embedding's output) needs no gradient, so no graph:
    # (2 x 2 + 1 - 1) x 512 x 4,096 x 2 = 16,777,216 B more on torch 2.1.0, none on 2.2.0 or unpinned
    model = {"preset": "llama-2-7b", "layers": 2}
    peaks = {}
    for torch in ("2.1.0", "2.2.0", None):
        versions = {"versions": {"torch": torch}} if torch else {}
        result = estimate(spec(model, seq_len=512, **versions))
        peaks[torch] = result.peak_allocated_bytes
    assert peaks["2.1.0"] - peaks["2.2.0"] == 16_777_216
    assert peaks["2.2.0"] == peaks[None]
    s = spec(model, seq_len=512, versions={"torch": "2.1.0"})
    shape, notes = resolve_model(s.model, s.workload)
    assert shape.code.rmsnorm_square_saved
    assert any("each RMSNorm also keeps its squared input" in n for n in notes)


def test_a_layernorm_model_keeps_no_square_on_torch_2_1() -> None:
    # phi-1.5's LayerNorm is one kernel (F.layer_norm): no mean in Python, nothing more on PyTorch 2.1
    model = {"preset": "phi-1.5", "layers": 2}
    old = estimate(spec(model, versions={"torch": "2.1.0"})).peak_allocated_bytes
    assert old == estimate(spec(model)).peak_allocated_bytes


def test_gelu_is_one_kernel_and_the_model_is_litgpts() -> None:
    # phi-1.5 in transformers uses the Python gelu_new; litgpt's GptNeoxMLP calls F.gelu(approximate="tanh")
    s = spec({"preset": "phi-1.5"})
    shape, notes = resolve_model(s.model, s.workload)
    assert (shape.code.attention_output_copied, shape.mlp.value, shape.fused_qkv) == (True, "gelu", True)
    assert any(n.startswith("adapter.framework litgpt: litgpt's own model code") for n in notes)


def test_lightning_quantizes_the_lm_head_unless_told_not_to() -> None:
    # BitsandbytesPrecision swaps every nn.Linear while the model is built, the LM head included
    assert spec({"preset": "llama-2-7b"}, quantization="nf4").workload.quantization.lm_head is True
    assert spec({"preset": "llama-2-7b"}, quantization="int8").workload.quantization.lm_head is True  # int8-training
    kept = spec({"preset": "llama-2-7b"}, quantization={"method": "nf4", "lm_head": False})
    assert kept.workload.quantization.lm_head is False
    peft = parse_spec(
        {
            "name": "t",
            "model": {"preset": "llama-2-7b"},
            "workload": {"mode": "train", "batch_size": 1, "seq_len": 256, "quantization": "nf4",
                         "adapter": {"rank": 8, "targets": ["q", "v"]}},
        }
    )  # fmt: skip
    assert peft.workload.quantization.lm_head is None
    note = estimate(spec({"preset": "llama-2-7b", "layers": 1}, quantization="nf4")).assumptions
    assert any("quantizes every linear, the LM head included" in n for n in note)


def test_a_weight_quantized_from_fp16_is_dequantized_twice_before_bitsandbytes_0_50() -> None:
    # Lightning quantizes an fp16 copy of each weight, so dequantize_4bit returns fp16 and .to(bf16) copies
    # it: up to 0.49 both are alive in the largest linear's call, here the quantized LM head, 32,000 x 4,096:
    # the fp16 one is 2 x 131,072,000 = 262,144,000 B more than with 0.50 (which dequantizes into the compute
    # dtype), in forward and backward alike. With fp16 compute there is no second copy; PEFT's bf16 base has none
    model = {"preset": "llama-2-7b", "layers": 2}

    def peak(release: str, precision: str = "bf16", adapter: dict[str, Any] = ADAPTER) -> int:
        s = spec(model, quantization="nf4", precision=precision, versions={"bitsandbytes": release}, adapter=adapter)
        return estimate(s, hopper_or_newer=False).peak_allocated_bytes

    assert peak("0.49.0") - peak("0.50.0") == 262_144_000
    assert peak("0.49.0", "fp16") == peak("0.50.0", "fp16")
    peft = {k: v for k, v in ADAPTER.items() if k != "framework"}
    assert peak("0.49.0", adapter=peft) == peak("0.50.0", adapter=peft)


def test_a_quantized_lm_head_dequantizes_beside_the_loss_gradients() -> None:
    # LLM.int8 (Lightning's int8-training, fp16) with the LM head quantized: at the start of backward the loss
    # gradients of one 128-token chunk, fp32 after Fabric's output cast (2 x 128 x 32,000 x 4 B = 32,768,000),
    # and the head's weight as the backward dequantizes it (CB.to(fp16): 32,000 x 4,096 x 2 B = 262,144,000)
    # are the temporaries
    s = spec({"preset": "llama-2-7b", "layers": 2}, precision="fp16", quantization="int8")
    result = estimate(s)
    assert result.peak_phase == "backward"
    assert result.phase_components["backward"]["temporaries"] == 32_768_000 + 262_144_000
