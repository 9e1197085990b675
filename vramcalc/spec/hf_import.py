"""Offline import of a Hugging Face ``config.json`` into a vramcalc spec (no network, no transformers).

The field names read here are those of the transformers configuration classes (``LlamaConfig``,
``MixtralConfig``, ``GPT2Config``, ``BertConfig``, ``T5Config``, ...). Details vramcalc's shape does
not express are listed as notes (and written as comments by ``vramcalc import``): they change the
parameter count by far less than 0.1 %, except where a note says otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vramcalc.errors import SpecError

Config = dict[str, Any]
Model = dict[str, Any]
MAX_CONFIG_BYTES = 1_000_000


class _Reader:
    """Field access that names the config file and field in its errors."""

    def __init__(self, config: Config, source: str) -> None:
        self.config, self.source = config, source

    def need(self, *names: str) -> Any:
        for name in names:
            if self.config.get(name) is not None:
                return self.config[name]
        raise SpecError(f"{self.source}: {names[0]}: missing (needed for model_type {self.config.get('model_type')!r})")

    def get(self, name: str, default: Any = None) -> Any:
        value = self.config.get(name)
        return default if value is None else value


def _llama_like(r: _Reader, notes: list[str]) -> Model:
    heads = r.need("num_attention_heads")
    hidden = r.need("hidden_size")
    model: Model = {
        "architecture": "decoder",
        "layers": r.need("num_hidden_layers"),
        "hidden_size": hidden,
        "heads": heads,
        "kv_heads": r.get("num_key_value_heads", heads),
        "ffn_size": r.need("intermediate_size"),
        "mlp": "swiglu",
        "norm": "rmsnorm",
        "position": "rotary",
        "vocab_size": r.need("vocab_size"),
        "tie_embeddings": bool(r.get("tie_word_embeddings", False)),
        "bias": False,
        "dropout": 0.0,
    }
    head_dim = r.get("head_dim")
    if head_dim and head_dim != hidden // heads:
        model["head_dim"] = head_dim
    if r.get("max_position_embeddings"):
        model["max_position_embeddings"] = r.get("max_position_embeddings")
    if r.get("attention_bias"):
        notes.append("attention_bias: q/k/v/o biases not counted (bias applies to every linear in vramcalc)")
    return model


def _qwen(r: _Reader, notes: list[str]) -> Model:
    model = _llama_like(r, notes)
    if r.config.get("model_type") == "qwen2":
        notes.append("q/k/v projection biases (hidden + 2 x kv width per layer) not counted")
    else:
        notes.append("q_norm/k_norm (2 x head_dim per layer) not counted")
    return model


def _mixtral(r: _Reader, notes: list[str]) -> Model:
    model = _llama_like(r, notes)
    model["experts"] = r.need("num_local_experts")
    model["experts_per_token"] = r.get("num_experts_per_tok", 2)
    return model


def _gemma(r: _Reader, notes: list[str]) -> Model:
    model = _llama_like(r, notes)
    model["tie_embeddings"] = bool(r.get("tie_word_embeddings", True))
    notes.append("GeGLU MLP (gelu_pytorch_tanh gate) counted as swiglu: same tensors and parameters")
    return model


def _phi3(r: _Reader, notes: list[str]) -> Model:
    return {**_llama_like(r, notes), "fused_qkv": True}


def _phi(r: _Reader, notes: list[str]) -> Model:
    notes.append("phi: one LayerNorm per layer (parallel attention and MLP): vramcalc counts two (+2 x hidden/layer)")
    notes.append("phi: partial rotary; lm_head bias (vocab) not counted")
    heads = r.need("num_attention_heads")
    return {
        "architecture": "decoder",
        "layers": r.need("num_hidden_layers"),
        "hidden_size": r.need("hidden_size"),
        "heads": heads,
        "kv_heads": r.get("num_key_value_heads", heads),
        "ffn_size": r.need("intermediate_size"),
        "mlp": "gelu_tanh",
        "norm": "layernorm",
        "position": "rotary",
        "vocab_size": r.need("vocab_size"),
        "tie_embeddings": bool(r.get("tie_word_embeddings", False)),
        "bias": True,
        "fused_qkv": False,
    }


def _gpt2(r: _Reader, notes: list[str]) -> Model:
    hidden = r.need("n_embd", "hidden_size")
    return {
        "architecture": "decoder",
        "layers": r.need("n_layer", "num_hidden_layers"),
        "hidden_size": hidden,
        "heads": r.need("n_head", "num_attention_heads"),
        "ffn_size": r.get("n_inner") or 4 * hidden,
        "mlp": "gelu_tanh",
        "norm": "layernorm",
        "position": "learned",
        "vocab_size": r.need("vocab_size"),
        "max_position_embeddings": r.get("n_positions", 1024),
        "tie_embeddings": bool(r.get("tie_word_embeddings", True)),
        "bias": True,
        "fused_qkv": True,
    }


def _gpt_neox(r: _Reader, notes: list[str]) -> Model:
    notes.append("gpt-neox: partial rotary (rotary_pct); parallel residual does not change memory")
    return {
        "architecture": "decoder",
        "layers": r.need("num_hidden_layers"),
        "hidden_size": r.need("hidden_size"),
        "heads": r.need("num_attention_heads"),
        "ffn_size": r.need("intermediate_size"),
        "mlp": "gelu",
        "norm": "layernorm",
        "position": "rotary",
        "vocab_size": r.need("vocab_size"),
        "tie_embeddings": bool(r.get("tie_word_embeddings", False)),
        "bias": True,
        "fused_qkv": True,
    }


def _falcon(r: _Reader, notes: list[str]) -> Model:
    heads = r.need("num_attention_heads", "n_head")
    if r.get("new_decoder_architecture"):
        kv = r.get("num_kv_heads", heads)
    else:
        kv = 1 if r.get("multi_query", True) else heads
        notes.append("falcon (7B layout): one LayerNorm per layer; vramcalc counts two (+2 x hidden/layer)")
    hidden = r.need("hidden_size")
    return {
        "architecture": "decoder",
        "layers": r.need("num_hidden_layers", "n_layer"),
        "hidden_size": hidden,
        "heads": heads,
        "kv_heads": kv,
        "ffn_size": r.get("ffn_hidden_size") or 4 * hidden,
        "mlp": "gelu",
        "norm": "layernorm",
        "position": "rotary",
        "vocab_size": r.need("vocab_size"),
        "tie_embeddings": bool(r.get("tie_word_embeddings", True)),
        "bias": bool(r.get("bias", False)),
        "fused_qkv": True,
    }


def _head_of(r: _Reader) -> dict[str, Any]:
    arch = " ".join(r.get("architectures", []))
    if "SequenceClassification" in arch:
        return {"head": "classification", "num_labels": len(r.get("id2label", {})) or 2, "pooler": True}
    if "MaskedLM" in arch or not arch:
        return {"head": "lm", "pooler": False}
    return {"head": "none", "pooler": True}


def _bert(r: _Reader, notes: list[str]) -> Model:
    return {
        "architecture": "encoder",
        "layers": r.need("num_hidden_layers"),
        "hidden_size": r.need("hidden_size"),
        "heads": r.need("num_attention_heads"),
        "ffn_size": r.need("intermediate_size"),
        "mlp": "gelu",
        "norm": "layernorm",
        "position": "learned",
        "vocab_size": r.need("vocab_size"),
        "max_position_embeddings": r.get("max_position_embeddings", 512),
        "type_vocab_size": r.get("type_vocab_size", 2),
        "tie_embeddings": True,
        **_head_of(r),
    }


def _t5(r: _Reader, notes: list[str]) -> Model:
    ff = str(r.get("feed_forward_proj", "relu"))
    if ff.startswith("gated"):
        notes.append(f"feed_forward_proj {ff!r} counted as swiglu (a gated MLP: same tensors and parameters)")
    return {
        "architecture": "encoder-decoder",
        "layers": r.need("num_layers"),
        "decoder_layers": r.get("num_decoder_layers") or r.need("num_layers"),
        "hidden_size": r.need("d_model"),
        "heads": r.need("num_heads"),
        "head_dim": r.need("d_kv"),
        "ffn_size": r.need("d_ff"),
        "mlp": "swiglu" if ff.startswith("gated") else "relu",
        "norm": "rmsnorm",
        "position": "relative",
        "vocab_size": r.need("vocab_size"),
        "tie_embeddings": bool(r.get("tie_word_embeddings", True)),
        "bias": False,
        "relative_attention_buckets": r.get("relative_attention_num_buckets", 32),
    }


def _vit(r: _Reader, notes: list[str]) -> Model:
    notes.append(f"vit: set workload.image_size ({r.get('image_size', 224)} in this config)")
    return {
        "architecture": "vit",
        "layers": r.need("num_hidden_layers"),
        "hidden_size": r.need("hidden_size"),
        "heads": r.need("num_attention_heads"),
        "ffn_size": r.need("intermediate_size"),
        "patch_size": r.get("patch_size", 16),
        "num_labels": len(r.get("id2label", {})) or 1000,
    }


#: model_type -> converter. "qwen3", "phi3" etc. use the closest family (see the notes each adds).
FAMILIES: dict[str, Callable[[_Reader, list[str]], Model]] = {
    "llama": _llama_like,
    "mistral": _llama_like,
    "mixtral": _mixtral,
    "qwen2": _qwen,
    "qwen3": _qwen,
    "gemma": _gemma,
    "phi": _phi,
    "phi3": _phi3,
    "gpt2": _gpt2,
    "gpt_neox": _gpt_neox,
    "bert": _bert,
    "roberta": _bert,
    "t5": _t5,
    "vit": _vit,
    "falcon": _falcon,
}


def read_config(path: str | Path) -> Config:
    """Read a config.json (bounded size, UTF-8, a JSON object); errors name the file."""
    from vramcalc.files import read_regular_file

    path = Path(path)
    raw = read_regular_file(path, MAX_CONFIG_BYTES, "model config.json files")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"{path}: invalid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a JSON object (a transformers config.json)")
    return data


def _vision_supported() -> bool:
    from vramcalc.spec.models import ModelSpec

    return "patch_size" in ModelSpec.model_fields


def model_from_config(config: Config, source: str) -> tuple[Model, list[str]]:
    """The ``model`` mapping of a spec for a transformers config, and notes on what it leaves out."""
    model_type = config.get("model_type")
    converter = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if converter is None or (model_type == "vit" and not _vision_supported()):
        known = ", ".join(sorted(FAMILIES))
        raise SpecError(f"{source}: model_type: {model_type!r} is not supported (supported: {known})")
    notes: list[str] = []
    try:
        model = converter(_Reader(config, source), notes)
    except (TypeError, ValueError, AttributeError) as exc:
        raise SpecError(f"{source}: a field has an unexpected type ({exc})") from None
    return model, notes


def spec_from_config(config: Config, source: str, workload: dict[str, Any]) -> dict[str, Any]:
    """A whole spec document: the imported model and the given workload."""
    model, _ = model_from_config(config, source)
    name = str(config.get("_name_or_path") or Path(source).parent.name or "imported").split("/")[-1] or "imported"
    return {"name": name[:200], "model": model, "workload": workload}


def example_workload(model: Model) -> dict[str, Any]:
    """A valid starting workload for ``vramcalc import`` output (the user is meant to edit it)."""
    if model["architecture"] == "vit":
        return {"mode": "inference", "batch_size": 1, "image_size": 224, "precision": "bf16"}
    seq = min(int(model.get("max_position_embeddings") or 4096), 4096)
    if model["architecture"] == "encoder":
        return {"mode": "inference", "batch_size": 1, "seq_len": seq, "precision": "fp16"}
    return {"mode": "inference", "batch_size": 1, "seq_len": seq, "precision": "bf16"}


def import_yaml(path: str | Path) -> str:
    """``vramcalc import``: the YAML text of a spec for the config at ``path`` (notes as comments)."""
    import yaml

    config = read_config(path)
    model, notes = model_from_config(config, str(path))
    doc = spec_from_config(config, str(path), example_workload(model))
    head = [f"# Imported by vramcalc from {Path(path).name} (model_type {config['model_type']})."]
    head += [f"# note: {note}" for note in notes]
    body = yaml.safe_dump({"name": doc["name"], "model": model}, sort_keys=False)
    workload = yaml.safe_dump({"workload": doc["workload"]}, sort_keys=False)
    return "\n".join(head) + "\n" + body + "# workload: an example; edit it for your run\n" + workload
