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
