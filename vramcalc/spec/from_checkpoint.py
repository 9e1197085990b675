"""The ``model`` section of a spec for a checkpoint read from its files (:mod:`vramcalc.sources`).

Where the config's ``model_type`` is one vramcalc models, the section is the importer's
(:func:`vramcalc.spec.hf_import.model_from_config`): training, adapters, serving and several GPUs all
work. Any other architecture with the standard fields of a transformers decoder config (layers,
hidden size, heads; key/value heads, head size, sliding window where stated) gets a decoder shape of
those fields only, marked ``layers_modelled: false``: its weights are the files', its KV cache the
fields', its activations first-order, and training is refused. Beside either, ``checkpoint`` records
what the files hold, which the estimate checks the layer shape against
(:mod:`vramcalc.families.checkpoint`).
"""

from __future__ import annotations

from typing import Any

from vramcalc.errors import ModelSourceError, PipelineModel, SpecError
from vramcalc.sources.checkpoint import Checkpoint
from vramcalc.spec.hf_reader import MAX_FIELD, MAX_POSITIONS
from vramcalc.units import quoted

#: safetensors dtypes of floating-point weights and the precision they load in.
FLOAT_DTYPES = {"BF16": "bf16", "F16": "fp16", "F32": "fp32"}
#: GGUF files: the precision their float tensors load in.
GGUF_FLOATS = {"F16": "fp16", "BF16": "bf16", "F32": "fp32"}


def stored_precision(checkpoint: Checkpoint) -> str | None:
    """The float dtype most of the weights' bytes are stored in, as a precision (None: none is float)."""
    table = FLOAT_DTYPES if checkpoint.format == "safetensors" else GGUF_FLOATS
    by_dtype = {dtype: size for dtype, size in checkpoint.bytes_by_dtype().items() if dtype in table}
    if not by_dtype:
        return None
    return table[max(by_dtype, key=lambda dtype: by_dtype[dtype])]


def positive_int(section: dict[str, Any] | None, *names: str) -> int | None:
    """The first of ``names`` that ``section`` holds as a positive integer (None when none does)."""
    for name in names:
        value = (section or {}).get(name)
        if type(value) is int and value > 0:
            return value
    return None


def quantization_of(config: dict[str, Any], where: str) -> dict[str, Any] | None:
    """The spec's ``quantization`` for a config's ``quantization_config`` (transformers' field names for
    AWQ, GPTQ, FP8, compressed-tensors and bitsandbytes); None when the weights are not quantized. The
    bytes of the weights come from the files whatever the layout; the method says how they compute."""
    section = config.get("quantization_config")
    if section is None:
        return None
    if not isinstance(section, dict):
        raise SpecError(f"{where}: quantization_config: expected a mapping")
    method = section.get("quant_method")
    bits = positive_int(section, "bits", "w_bit")
    group = section.get("group_size", section.get("q_group_size"))
    group_size = group if type(group) is int and group >= -1 else None
    if method in ("awq", "gptq") and bits in (2, 3, 4, 8):
        found: dict[str, Any] = {"method": method, "bits": bits}
        return {**found, "group_size": group_size} if group_size is not None else found
    if method == "fp8":
        return {"method": "fp8"}
    if method == "bitsandbytes":
        if section.get("load_in_4bit"):
            kind = section.get("bnb_4bit_quant_type", "fp4")
            return {
                "method": "nf4" if kind == "nf4" else "fp4",
                "double_quant": bool(section.get("bnb_4bit_use_double_quant")),
            }
        if section.get("load_in_8bit"):
            return {"method": "int8"}
    if method == "compressed-tensors":
        return _compressed_tensors(section)
    return None


#: llama.cpp's ``general.file_type`` (``LlamaFileType`` in gguf-py's constants.py) and the GGUF file types
#: vramcalc models (llama-quantize's presets, vramcalc/stacks/gguf.py).
GGUF_FILE_TYPES = {
    2: "q4_0", 3: "q4_1", 7: "q8_0", 8: "q5_0", 9: "q5_1", 10: "q2_k", 11: "q3_k_s", 12: "q3_k_m",
    13: "q3_k_l", 14: "q4_k_s", 15: "q4_k_m", 16: "q5_k_s", 17: "q5_k_m", 18: "q6_k",
}  # fmt: skip
#: File types whose weights are floats: no quantization.
GGUF_FLOAT_FILE_TYPES = {0: "fp32", 1: "fp16", 32: "bf16"}


def gguf_quantization(config: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """A GGUF file's quantization for the spec (None: floats, or a type vramcalc has no layout for) and the
    name its ``general.file_type`` has (None: floats)."""
    file_type = config.get("gguf_file_type")
    if type(file_type) is not int or file_type in GGUF_FLOAT_FILE_TYPES:
        return None, None
    method = GGUF_FILE_TYPES.get(file_type)
    return ({"method": method}, method) if method else (None, f"gguf file type {file_type}")


def stored_method(config: dict[str, Any]) -> str | None:
    """The ``quant_method`` a config's ``quantization_config`` names (any, modelled or not)."""
    section = config.get("quantization_config")
    method = section.get("quant_method") if isinstance(section, dict) else None
    return method[:40] if isinstance(method, str) and method else None


def _compressed_tensors(section: dict[str, Any]) -> dict[str, Any] | None:
    """compressed-tensors' config groups: 8-bit float weights are FP8; 4-bit integers a GPTQ-like layout."""
    groups = section.get("config_groups")
    for group in groups.values() if isinstance(groups, dict) else ():
        weights = group.get("weights") if isinstance(group, dict) else None
        if not isinstance(weights, dict):
            continue
        if weights.get("type") == "float" and weights.get("num_bits") == 8:
            return {"method": "fp8"}
        if weights.get("type") == "int" and weights.get("num_bits") in (4, 8):
            size = weights.get("group_size")
            found: dict[str, Any] = {"method": "gptq", "bits": weights["num_bits"]}
            return {**found, "group_size": size} if type(size) is int and size > 0 else found
    return None


#: The standard fields of a transformers decoder config, and the spec keys they give.
STANDARD_FIELDS = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "heads": ("num_attention_heads", "n_head", "num_heads"),
    "kv_heads": ("num_key_value_heads", "num_kv_heads"),
    "head_dim": ("head_dim",),
    "ffn_size": ("intermediate_size", "ffn_dim", "n_inner"),
    "vocab_size": ("vocab_size", "padded_vocab_size"),
    "max_position_embeddings": ("max_position_embeddings", "n_positions", "seq_length"),
    "sliding_window": ("sliding_window",),
}


def standard_model(config: dict[str, Any], where: str) -> dict[str, Any]:
    """A decoder shape from a config's standard fields only (its text model's, for a multimodal config),
    marked as not modelling every layer; a :class:`SpecError` naming the missing field when it has none."""
    text = config.get("text_config") or config.get("llm_config")
    fields = {**config, **text} if isinstance(text, dict) else config
    model: dict[str, Any] = {"architecture": "decoder", "mlp": "swiglu", "norm": "rmsnorm", "position": "rotary"}
    for key, names in STANDARD_FIELDS.items():
        value = positive_int(fields, *names)
        if value is not None:
            most = MAX_POSITIONS if key == "max_position_embeddings" else MAX_FIELD
            if value > most:
                name = next(name for name in names if fields.get(name) == value)
                raise SpecError(f"{where}: {name}: {value:,} is out of range (1 to {most:,})")
            model[key] = value
    for key in ("layers", "hidden_size", "heads"):
        if key not in model:
            wanted = " or ".join(STANDARD_FIELDS[key][:2])
            raise SpecError(
                f"{where}: model_type {quoted(config.get('model_type'))} is not one vramcalc models, and its "
                f"config has no {wanted} for a first-order estimate"
            )
    heads, kv = model["heads"], model.get("kv_heads")
    if kv is not None and (kv > heads or heads % kv):
        model.pop("kv_heads")
    if "head_dim" not in model and model["hidden_size"] % heads:
        model["head_dim"] = model["hidden_size"] // heads
    model_type = config.get("model_type")
    if isinstance(model_type, str) and 0 < len(model_type) <= 40:
        model["model_type"] = model_type
    return model


def source_of(checkpoint: Checkpoint) -> str:
    """Where the files came from, to record: ``org/name@commit`` for the Hub and the cache, else the path."""
    origin = checkpoint.origin
    if origin.repo is not None and origin.commit is not None:
        return f"{origin.repo}@{origin.commit}"
    return origin.label


def facts(checkpoint: Checkpoint, quantization: str | None, modelled: bool) -> dict[str, Any]:
    """The ``checkpoint`` section: what the files hold, where they came from, their hashes where known."""
    components = checkpoint.bytes_by_component()
    found: dict[str, Any] = {
        "source": source_of(checkpoint)[:500],
        "weight_bytes": checkpoint.weight_bytes,
        "params": checkpoint.elements,
        "files": len(checkpoint.files),
        "tensors": sum(len(file.tensors) for file in checkpoint.files),
    }
    if quantization is not None:
        found["quantization"] = quantization
    if not modelled:
        found["layers_modelled"] = False
    if len(components) > 1:
        found["components"] = components
    hashes = {file.path: file.sha256 for file in checkpoint.files if file.sha256}
    if hashes:
        found["sha256"] = hashes
    return found


def pipeline_weights(checkpoint: Checkpoint) -> str:
    """What a Diffusers pipeline's weights take, in one line: each component's, all of them resident
    together (``pipe.to("cuda")``), and the largest alone (``enable_model_cpu_offload()`` moves one
    component at a time to the GPU)."""
    components = sorted(checkpoint.bytes_by_component().items(), key=lambda item: -item[1])
    listed = ", ".join(f"{name} {size / 2**30:,.2f} GiB" for name, size in components)
    largest = components[0]
    return (
        f"a Diffusers pipeline, weights {listed}; all resident (pipe.to('cuda')) "
        f"{checkpoint.weight_bytes / 2**30:,.2f} GiB, one at a time (enable_model_cpu_offload) "
        f"{largest[1] / 2**30:,.2f} GiB ({largest[0]}); vramcalc estimates the steps of transformers models, "
        "not of diffusion pipelines"
    )


def checkpoint_model(checkpoint: Checkpoint, where: str) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """The ``model`` section for ``checkpoint``, the workload keys its files imply (``precision`` when the
    config states none; ``quantization`` from ``quantization_config``) and notes on what was read."""
    from vramcalc.spec.hf_import import FAMILIES, TEXT_CONFIGS, config_precision, model_from_config

    if checkpoint.weight_bytes == 0:
        tensors = sum(len(file.tensors) for file in checkpoint.files)
        raise ModelSourceError(
            f"{where}: the weights files hold no weights ({tensors:,} tensors of 0 bytes in "
            f"{len(checkpoint.files):,} files)",
            "header",
        )
    if checkpoint.pipeline is not None:
        raise PipelineModel(f"{where}: {pipeline_weights(checkpoint)}", checkpoint)
    config = checkpoint.config
    if config is None:
        raise SpecError(
            f"{where}: no config.json beside the weights ({checkpoint.weight_bytes:,} bytes); vramcalc needs "
            "the model's config for its layers"
        )
    workload: dict[str, Any] = {}
    notes: list[str] = []
    if checkpoint.format == "gguf":
        quantization, method = gguf_quantization(config)
    else:
        quantization = quantization_of(config, where)
        method = quantization["method"] if quantization is not None else stored_method(config)
    model_type = config.get("model_type")
    try:
        model, notes = model_from_config(config, where)
        modelled = True
    except SpecError:
        if isinstance(model_type, str) and (model_type in FAMILIES or model_type in TEXT_CONFIGS):
            raise  # a family vramcalc models, whose config has a field it cannot take: that field's error
        model, modelled = standard_model(config, where), False
        named = model_type[:60] if isinstance(model_type, str) and model_type.isprintable() else quoted(model_type)
        notes = [
            f"{named}: not an architecture vramcalc models; weights from the files, KV cache from the config's "
            "standard fields, activations first-order (a decoder of those fields)"
        ]
    if modelled and isinstance(config.get("model_type"), str):
        model = {**model, "model_type": config["model_type"]}
    if quantization is not None:
        workload["quantization"] = quantization
    try:
        stated = config_precision(config, where)
    except SpecError:
        stated = None
    if stated is None:
        precision = stored_precision(checkpoint)
        if precision is not None:
            workload["precision"] = precision
            notes.append(f"precision not given: {precision} (the dtype most of the files' weights are stored in)")
    if quantization is None and method is not None:
        notes.append(f"quantization_config: {method} is not a layout vramcalc models; the weights are the files' bytes")
    model["checkpoint"] = facts(checkpoint, method, modelled)
    return model, workload, notes
