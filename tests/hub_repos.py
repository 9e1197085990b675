"""Real checkpoint folders for the model-source tests and benchmarks, written by the libraries that define
the formats (``safetensors.numpy.save_file``, ``gguf.GGUFWriter``). Each builder returns the bytes of the
tensors it wrote, summed from the numpy arrays themselves (``arr.nbytes``), to check readers against."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 16, "num_hidden_layers": 2}


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")


def save_tensors(path: Path, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> int:
    from safetensors.numpy import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata=metadata)
    return sum(array.nbytes for array in tensors.values())


def layer_tensors(layer: int, width: int = 16) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(layer)
    return {
        f"model.layers.{layer}.self_attn.q_proj.weight": rng.standard_normal((width, width)).astype(np.float16),
        f"model.layers.{layer}.mlp.up_proj.weight": rng.standard_normal((2 * width, width)).astype(np.float32),
        f"model.layers.{layer}.input_layernorm.weight": np.ones(width, dtype=np.float32),
        f"model.layers.{layer}.scale": np.arange(3, dtype=np.int8),
    }


def single_file_repo(folder: Path) -> int:
    """config.json + model.safetensors."""
    write_json(folder / "config.json", CONFIG)
    (folder / "README.md").write_text("# a test model\n", encoding="utf-8")
    tensors = {**layer_tensors(0), **layer_tensors(1)}
    return save_tensors(folder / "model.safetensors", tensors, {"format": "pt"})


def sharded_repo(folder: Path, shards: int = 3, width: int = 16) -> int:
    """config.json + ``shards`` model-0000i-of-0000n.safetensors files + model.safetensors.index.json."""
    write_json(folder / "config.json", {**CONFIG, "num_hidden_layers": shards})
    total = 0
    weight_map: dict[str, str] = {}
    for shard in range(shards):
        name = f"model-{shard + 1:05d}-of-{shards:05d}.safetensors"
        tensors = layer_tensors(shard, width)
        total += save_tensors(folder / name, tensors)
        weight_map.update(dict.fromkeys(tensors, name))
    write_json(folder / "model.safetensors.index.json", {"metadata": {"total_size": total}, "weight_map": weight_map})
    return total


def wide_header_repo(folder: Path, tensors: int = 1500) -> int:
    """One safetensors file whose header is longer than the first range read (many long names)."""
    write_json(folder / "config.json", CONFIG)
    name = "model.layers.{}.a_rather_long_module_name.with_a_long_parameter_name.weight"
    arrays = {name.format(i): np.zeros(4, np.float16) for i in range(tensors)}
    return save_tensors(folder / "model.safetensors", arrays)


def diffusers_repo(folder: Path) -> dict[str, int]:
    """model_index.json + transformer/ and vae/ (configs and weights; the vae also has an fp16 variant that
    Diffusers does not load by default) + scheduler/ (a config only). Returns bytes per component."""
    write_json(
        folder / "model_index.json",
        {
            "_class_name": "FluxPipeline",
            "_diffusers_version": "0.30.0",
            "transformer": ["diffusers", "FluxTransformer2DModel"],
            "vae": ["diffusers", "AutoencoderKL"],
            "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        },
    )
    write_json(folder / "transformer" / "config.json", {"_class_name": "FluxTransformer2DModel", "num_layers": 2})
    write_json(folder / "vae" / "config.json", {"_class_name": "AutoencoderKL", "latent_channels": 16})
    write_json(folder / "scheduler" / "scheduler_config.json", {"_class_name": "FlowMatchEulerDiscreteScheduler"})
    rng = np.random.default_rng(7)
    transformer = {
        "blocks.0.attn.weight": rng.standard_normal((32, 32)).astype(np.float32),
        "blocks.1.attn.weight": rng.standard_normal((32, 32)).astype(np.float32),
    }
    vae = {"decoder.conv_in.weight": rng.standard_normal((8, 4, 3, 3)).astype(np.float32)}
    sizes = {
        "transformer": save_tensors(folder / "transformer" / "diffusion_pytorch_model.safetensors", transformer),
        "vae": save_tensors(folder / "vae" / "diffusion_pytorch_model.safetensors", vae),
    }
    save_tensors(
        folder / "vae" / "diffusion_pytorch_model.fp16.safetensors", {k: v.astype(np.float16) for k, v in vae.items()}
    )
    return sizes


def sentence_transformers_repo(folder: Path) -> int:
    """A Sentence Transformers model: the transformer at the top, a Dense layer's weights in 2_Dense/."""
    write_json(folder / "config.json", {**CONFIG, "model_type": "bert", "architectures": ["BertModel"]})
    write_json(
        folder / "modules.json",
        [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
        ],
    )
    write_json(folder / "1_Pooling" / "config.json", {"word_embedding_dimension": 16})
    write_json(folder / "2_Dense" / "config.json", {"in_features": 16, "out_features": 8})
    top = save_tensors(folder / "model.safetensors", layer_tensors(0))
    dense = save_tensors(folder / "2_Dense" / "model.safetensors", {"linear.weight": np.ones((8, 16), np.float32)})
    return top + dense


def gguf_repo(folder: Path, names: tuple[str, ...] = ("model-Q8_0.gguf", "model-F16.gguf")) -> dict[str, int]:
    """GGUF files (llama architecture, F32 and F16 tensors, no config.json). Returns bytes per file."""
    import gguf

    folder.mkdir(parents=True, exist_ok=True)
    sizes = {}
    for index, name in enumerate(names):
        writer = gguf.GGUFWriter(str(folder / name), "llama")
        writer.add_block_count(2)
        writer.add_context_length(128)
        writer.add_embedding_length(16)
        writer.add_head_count(2)
        tensors = {
            "token_embd.weight": np.ones((32, 16), dtype=np.float16 if index else np.float32),
            "blk.0.attn_q.weight": np.ones((16, 16), dtype=np.float32),
        }
        for tensor_name, array in tensors.items():
            writer.add_tensor(tensor_name, array)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        sizes[name] = sum(array.nbytes for array in tensors.values())
    return sizes
