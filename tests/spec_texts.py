"""Small spec files shared by several test modules (one copy of each)."""

#: The estimator tests' hand-derived one-block decoder (tests/core/test_dense.py derives its bytes).
TINY_MODEL = {
    "architecture": "decoder",
    "layers": 1,
    "hidden_size": 64,
    "heads": 1,
    "ffn_size": 256,
    "mlp": "gelu",
    "vocab_size": 10,
    "max_position_embeddings": 8,
    "dropout": 0.0,
}

#: A two-layer decoder (every key the CLI tests mutate is present).
TINY_SPEC = """\
name: tiny
model:
  architecture: decoder
  layers: 2
  hidden_size: 64
  heads: 4
  vocab_size: 100
workload:
  batch_size: 2
  seq_len: 16
"""

#: A two-layer GQA SwiGLU decoder in inference mode (KV cache, weights and bandwidth tests).
TINY_DECODER = """\
name: tiny-decoder
model:
  architecture: decoder
  layers: 2
  hidden_size: 64
  heads: 4
  kv_heads: 2
  ffn_size: 128
  mlp: swiglu
  vocab_size: 100
workload:
  mode: inference
  batch_size: 4
  seq_len: 32
  precision: bf16
"""


#: A tiny Llama for the PEFT method tests: 2 layers, hidden 64, 4 heads of 16 (q width 64), 2 KV heads
#: (K/V width 32), ffn 128.
TINY_LLAMA = {
    "architecture": "decoder", "layers": 2, "hidden_size": 64, "heads": 4, "kv_heads": 2, "ffn_size": 128,
    "mlp": "swiglu", "norm": "rmsnorm", "position": "rotary", "vocab_size": 100, "tie_embeddings": False,
}  # fmt: skip

#: Llama-3.2-3B (meta-llama/Llama-3.2-3B config.json), the model of PEFT's method_comparison runs.
LLAMA32_3B = {
    "architecture": "decoder", "layers": 28, "hidden_size": 3072, "heads": 24, "kv_heads": 8, "ffn_size": 8192,
    "mlp": "swiglu", "vocab_size": 128256, "tie_embeddings": True,
}  # fmt: skip

#: A one-layer decoder whose parameter count the ZeRO tests derive by hand (hidden 128, 2 heads, ffn 512,
#: vocabulary and positions 128, no biases, tied head).
ROUND_MODEL = {
    "architecture": "decoder", "layers": 1, "hidden_size": 128, "heads": 2, "ffn_size": 512, "mlp": "gelu",
    "norm": "layernorm", "position": "learned", "vocab_size": 128, "max_position_embeddings": 128,
    "bias": False, "dropout": 0.0,
}  # fmt: skip
