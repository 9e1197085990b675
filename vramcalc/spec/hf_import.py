"""Offline import of a Hugging Face ``config.json`` into a vramcalc spec (no network, no transformers).

The field names read here are those of the transformers configuration classes (``LlamaConfig``,
``MixtralConfig``, ``GPT2Config``, ``BertConfig``, ``T5Config``, ...). Details vramcalc's shape does
not express are listed as notes (and written as comments by ``vramcalc import``): they change the
parameter count by far less than 0.1 %, except where a note says otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vramcalc.errors import SpecError
from vramcalc.units import quoted

if TYPE_CHECKING:
    from vramcalc.spec.models import Spec

Config = dict[str, Any]
Model = dict[str, Any]
MAX_CONFIG_BYTES = 1_000_000
#: The largest size or count a spec accepts (``PositiveInt`` in vramcalc/spec/models.py): a larger
#: config value is refused where the error can still name the config's own field.
MAX_FIELD = 10**7


class _Reader:
    """Typed field access: every value a converter uses is checked here first, so no arithmetic sees an
    unchecked value, and every error names the config file and field. JSON null counts as absent."""

    def __init__(self, config: Config, source: str) -> None:
        self.config, self.source = config, source

    def _first(self, names: tuple[str, ...]) -> tuple[str, Any]:
        """The first of ``names`` that has a value, and the value; else the first name and None."""
        for name in names:
            if self.config.get(name) is not None:
                return name, self.config[name]
        return names[0], None

    def _whole(self, name: str, value: Any, minimum: int) -> int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # 4096.0 is 4096; 4096.5 is refused below
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{self.source}: {name}: expected a whole number, got {quoted(value)}")
        if not minimum <= value <= MAX_FIELD:
            raise SpecError(f"{self.source}: {name}: {quoted(value)} is out of range ({minimum} to {MAX_FIELD:,})")
        return value

    def need(self, *names: str, minimum: int = 1) -> int:
        """A whole number the model needs: the first of ``names`` given, at least ``minimum``."""
        name, value = self._first(names)
        if value is None:
            model_type = quoted(self.config.get("model_type"))
            raise SpecError(f"{self.source}: {name}: missing (needed for model_type {model_type})")
        return self._whole(name, value, minimum)

    def count(self, *names: str, default: int | None, minimum: int = 1) -> int | None:
        """An optional whole number: the first of ``names`` given, at least ``minimum``; else ``default``."""
        name, value = self._first(names)
        return default if value is None else self._whole(name, value, minimum)

    def _typed(self, name: str, default: Any, kind: type, expected: str) -> Any:
        value = self.config.get(name)
        if value is None:
            return default
        if not isinstance(value, kind):
            raise SpecError(f"{self.source}: {name}: expected {expected}, got {quoted(value)}")
        return value

    def flag(self, name: str, default: bool) -> bool:
        """A true/false field (a JSON boolean: the string "false" is not false)."""
        return bool(self._typed(name, default, bool, "true or false"))

    def text(self, name: str, default: str) -> str:
        return str(self._typed(name, default, str, "a string"))

    def architectures(self) -> str:
        """The ``architectures`` class names, space-separated ("" when absent)."""
        names = self._typed("architectures", [], list, "a list of class names")
        if not all(isinstance(item, str) for item in names):
            raise SpecError(f"{self.source}: architectures: expected a list of class names, got {quoted(names)}")
        return " ".join(names)

    def label_count(self) -> int:
        """How many labels ``id2label`` names (0 when absent)."""
        return len(self._typed("id2label", {}, dict, "a mapping of label ids to names"))


def _llama_like(r: _Reader, notes: list[str]) -> Model:
    heads = r.need("num_attention_heads")
    hidden = r.need("hidden_size")
    model: Model = {
        "architecture": "decoder",
        "layers": r.need("num_hidden_layers"),
        "hidden_size": hidden,
        "heads": heads,
        "kv_heads": r.count("num_key_value_heads", default=heads),
        "ffn_size": r.need("intermediate_size"),
        "mlp": "swiglu",
        "norm": "rmsnorm",
        "position": "rotary",
        "vocab_size": r.need("vocab_size"),
        "tie_embeddings": r.flag("tie_word_embeddings", False),
        "bias": False,
        "dropout": 0.0,
    }
    head_dim = r.count("head_dim", default=None)
    if head_dim is not None and head_dim != hidden // heads:
        model["head_dim"] = head_dim
    max_positions = r.count("max_position_embeddings", default=None)
    if max_positions is not None:
        model["max_position_embeddings"] = max_positions
    if r.flag("attention_bias", False):
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
    model["experts_per_token"] = r.count("num_experts_per_tok", default=2)
    return model


def _gemma(r: _Reader, notes: list[str]) -> Model:
    model = _llama_like(r, notes)
    model["tie_embeddings"] = r.flag("tie_word_embeddings", True)
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
        "kv_heads": r.count("num_key_value_heads", default=heads),
        "ffn_size": r.need("intermediate_size"),
        "mlp": "gelu_tanh",
        "norm": "layernorm",
        "position": "rotary",
        "vocab_size": r.need("vocab_size"),
        "tie_embeddings": r.flag("tie_word_embeddings", False),
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
        "ffn_size": r.count("n_inner", default=4 * hidden),
        "mlp": "gelu_tanh",
        "norm": "layernorm",
        "position": "learned",
        "vocab_size": r.need("vocab_size"),
        "max_position_embeddings": r.count("n_positions", default=1024),
        "tie_embeddings": r.flag("tie_word_embeddings", True),
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
        "tie_embeddings": r.flag("tie_word_embeddings", False),
        "bias": True,
        "fused_qkv": True,
    }


def _falcon(r: _Reader, notes: list[str]) -> Model:
    heads = r.need("num_attention_heads", "n_head")
    if r.flag("new_decoder_architecture", False):
        kv = r.count("num_kv_heads", default=heads)
    else:
        kv = 1 if r.flag("multi_query", True) else heads
        notes.append("falcon (7B layout): one LayerNorm per layer; vramcalc counts two (+2 x hidden/layer)")
    hidden = r.need("hidden_size")
    return {
        "architecture": "decoder",
        "layers": r.need("num_hidden_layers", "n_layer"),
        "hidden_size": hidden,
        "heads": heads,
        "kv_heads": kv,
        "ffn_size": r.count("ffn_hidden_size", default=4 * hidden),
        "mlp": "gelu",
        "norm": "layernorm",
        "position": "rotary",
        "vocab_size": r.need("vocab_size"),
        "tie_embeddings": r.flag("tie_word_embeddings", True),
        "bias": r.flag("bias", False),
        "fused_qkv": True,
    }


def _head_of(r: _Reader) -> dict[str, Any]:
    arch = r.architectures()
    if "SequenceClassification" in arch:
        return {"head": "classification", "num_labels": r.label_count() or 2, "pooler": True}
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
        "max_position_embeddings": r.count("max_position_embeddings", default=512),
        "type_vocab_size": r.count("type_vocab_size", default=2, minimum=0),
        "tie_embeddings": True,
        **_head_of(r),
    }


def _t5(r: _Reader, notes: list[str]) -> Model:
    ff = r.text("feed_forward_proj", "relu")
    if ff.startswith("gated"):
        notes.append(f"feed_forward_proj {quoted(ff)} counted as swiglu (a gated MLP: same tensors and parameters)")
    layers = r.need("num_layers")
    return {
        "architecture": "encoder-decoder",
        "layers": layers,
        "decoder_layers": r.count("num_decoder_layers", default=layers),
        "hidden_size": r.need("d_model"),
        "heads": r.need("num_heads"),
        "head_dim": r.need("d_kv"),
        "ffn_size": r.need("d_ff"),
        "mlp": "swiglu" if ff.startswith("gated") else "relu",
        "norm": "rmsnorm",
        "position": "relative",
        "vocab_size": r.need("vocab_size"),
        "tie_embeddings": r.flag("tie_word_embeddings", True),
        "bias": False,
        "relative_attention_buckets": r.count("relative_attention_num_buckets", default=32),
    }


def _vit(r: _Reader, notes: list[str]) -> Model:
    notes.append(f"vit: set workload.image_size ({r.count('image_size', default=224)} in this config)")
    return {
        "architecture": "vit",
        "layers": r.need("num_hidden_layers"),
        "hidden_size": r.need("hidden_size"),
        "heads": r.need("num_attention_heads"),
        "ffn_size": r.need("intermediate_size"),
        "patch_size": r.count("patch_size", default=16),
        "num_labels": r.label_count() or 1000,
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
    """Read a config.json (bounded size, nesting and numbers; UTF-8; a JSON object); errors name the file."""
    from vramcalc.files import read_json

    path = Path(path)
    data = read_json(path, MAX_CONFIG_BYTES, "model config.json files")
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a JSON object (a transformers config.json), got {type(data).__name__}")
    return data


def model_from_config(config: Config, source: str) -> tuple[Model, list[str]]:
    """The ``model`` mapping of a spec for a transformers config, and notes on what it leaves out."""
    model_type = config.get("model_type")
    converter = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if converter is None:
        known = ", ".join(sorted(FAMILIES))
        raise SpecError(f"{source}: model_type: {quoted(model_type)} is not supported (supported: {known})")
    notes: list[str] = []
    return converter(_Reader(config, source), notes), notes


def _spec_name(config: Config, source: str) -> str:
    """The spec's name: the last part of ``_name_or_path`` (else the config's folder), printable only."""
    given = _Reader(config, source).text("_name_or_path", "") or Path(source).parent.name
    name = "".join(char for char in given.split("/")[-1] if char.isprintable()).strip()
    return name[:200] or "imported"


def _document(config: Config, source: str, model: Model, workload: dict[str, Any]) -> dict[str, Any]:
    return {"name": _spec_name(config, source), "model": model, "workload": workload}


def spec_from_config(config: Config, source: str, workload: dict[str, Any]) -> dict[str, Any]:
    """A whole spec document: the imported model and the given workload (not yet validated)."""
    model, _ = model_from_config(config, source)
    return _document(config, source, model, workload)


def validated_spec(config: Config, source: str, workload: dict[str, Any]) -> Spec:
    """The spec for a config and a workload, validated as a spec file is; errors name the config file."""
    from vramcalc.spec.validate import validate_spec as parse_spec

    return parse_spec(spec_from_config(config, source, workload), source)


def example_workload(model: Model) -> dict[str, Any]:
    """A valid starting workload for ``vramcalc import`` output (the user is meant to edit it)."""
    if model["architecture"] == "vit":
        image = model["patch_size"] * max(1, round(224 / model["patch_size"]))  # whole patches, near 224
        return {"mode": "inference", "batch_size": 1, "image_size": image, "precision": "bf16"}
    seq = min(model.get("max_position_embeddings") or 4096, 4096)
    if model["architecture"] == "encoder":
        return {"mode": "inference", "batch_size": 1, "seq_len": seq, "precision": "fp16"}
    return {"mode": "inference", "batch_size": 1, "seq_len": seq, "precision": "bf16"}


def import_yaml(path: str | Path) -> str:
    """``vramcalc import``: the YAML text of a spec for the config at ``path`` (notes as comments).

    The spec is validated as ``vramcalc estimate`` validates a spec file before any text is made: a
    config that gives no valid spec is an error naming the config file, never a spec to be rejected later.
    """
    import yaml

    from vramcalc.spec.validate import validate_spec as parse_spec

    source = str(path)
    config = read_config(path)
    model, notes = model_from_config(config, source)
    doc = _document(config, source, model, example_workload(model))
    parse_spec(doc, source)
    file_name = Path(path).name if Path(path).name.isprintable() else quoted(Path(path).name)  # one comment line
    head = [f"# Imported by vramcalc from {file_name} (model_type {config['model_type']})."]
    head += [f"# note: {note}" for note in notes]
    body = yaml.safe_dump({"name": doc["name"], "model": model}, sort_keys=False)
    workload = yaml.safe_dump({"workload": doc["workload"]}, sort_keys=False)
    return "\n".join(head) + "\n" + body + "# workload: an example; edit it for your run\n" + workload
