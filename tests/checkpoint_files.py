"""Real checkpoint folders for the model-source tests, written by the ``safetensors`` library itself.

A Llama checkpoint here holds the tensors transformers' ``LlamaForCausalLM`` saves, by its own names
(``model.embed_tokens.weight``, ``model.layers.N.self_attn.q_proj.weight``, ...; the shapes are
``nn.Linear(in, out)``'s ``(out, in)``), small enough to write in milliseconds. The expected bytes of a
checkpoint are the numpy arrays' own ``nbytes``, summed: an independent count of what the files hold.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

#: A small Llama: 2 layers, width 64, 4 query heads and 2 key/value heads of 16, MLP 128, vocabulary 256.
LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 256,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "hidden_act": "silu",
}


def llama_tensors(config: dict[str, Any], dtype: Any = np.float16) -> dict[str, np.ndarray]:
    """The tensors of ``LlamaForCausalLM`` for ``config`` (zeros of ``dtype``)."""
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    kv, ffn, vocab = config["num_key_value_heads"], config["intermediate_size"], config["vocab_size"]
    head_dim = hidden // heads
    tensors = {"model.embed_tokens.weight": np.zeros((vocab, hidden), dtype)}
    for layer in range(config["num_hidden_layers"]):
        prefix = f"model.layers.{layer}."
        tensors |= {
            prefix + "self_attn.q_proj.weight": np.zeros((heads * head_dim, hidden), dtype),
            prefix + "self_attn.k_proj.weight": np.zeros((kv * head_dim, hidden), dtype),
            prefix + "self_attn.v_proj.weight": np.zeros((kv * head_dim, hidden), dtype),
            prefix + "self_attn.o_proj.weight": np.zeros((hidden, heads * head_dim), dtype),
            prefix + "mlp.gate_proj.weight": np.zeros((ffn, hidden), dtype),
            prefix + "mlp.up_proj.weight": np.zeros((ffn, hidden), dtype),
            prefix + "mlp.down_proj.weight": np.zeros((hidden, ffn), dtype),
            prefix + "input_layernorm.weight": np.zeros((hidden,), dtype),
            prefix + "post_attention_layernorm.weight": np.zeros((hidden,), dtype),
        }
    tensors["model.norm.weight"] = np.zeros((hidden,), dtype)
    if not config.get("tie_word_embeddings"):
        tensors["lm_head.weight"] = np.zeros((vocab, hidden), dtype)
    return tensors


def write_checkpoint(
    folder: Path,
    config: dict[str, Any] | None,
    tensors: dict[str, np.ndarray],
    shards: int = 1,
) -> int:
    """Write ``tensors`` as a transformers checkpoint (``model.safetensors``, or ``shards`` files with
    ``model.safetensors.index.json``) and ``config`` as its config.json; return the tensors' bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    names = sorted(tensors)
    if shards == 1:
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    else:
        weight_map = {}
        for shard in range(shards):
            file = f"model-{shard + 1:05d}-of-{shards:05d}.safetensors"
            part = {name: tensors[name] for name in names[shard::shards]}
            save_file(part, str(folder / file), metadata={"format": "pt"})
            weight_map |= dict.fromkeys(part, file)
        index = {"metadata": {"total_size": sum(array.nbytes for array in tensors.values())}, "weight_map": weight_map}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    return sum(array.nbytes for array in tensors.values())


def write_llama_gguf(path: Path) -> None:
    """A small Llama as llama.cpp's converter names its tensors, in Q8_0 (file type 7) with f32 norms."""
    import gguf
    from gguf.quants import quantize

    q8 = gguf.GGMLQuantizationType.Q8_0
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_embedding_length(64)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_context_length(2048)
    writer.add_feed_forward_length(128)
    writer.add_file_type(7)
    writer.add_token_list([f"t{i}" for i in range(256)])
    linears = {"attn_q": (64, 64), "attn_k": (32, 64), "attn_v": (32, 64), "attn_output": (64, 64)}
    linears |= {"ffn_gate": (128, 64), "ffn_up": (128, 64), "ffn_down": (64, 128)}
    for layer in range(2):
        for name, shape in linears.items():
            writer.add_tensor(f"blk.{layer}.{name}.weight", quantize(np.zeros(shape, np.float32), q8), raw_dtype=q8)
        for norm in ("attn_norm", "ffn_norm"):
            writer.add_tensor(f"blk.{layer}.{norm}.weight", np.zeros(64, np.float32))
    for name in ("token_embd", "output"):
        writer.add_tensor(f"{name}.weight", quantize(np.zeros((256, 64), np.float32), q8), raw_dtype=q8)
    writer.add_tensor("output_norm.weight", np.zeros(64, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
