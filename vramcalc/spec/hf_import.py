"""Offline import of a Hugging Face ``config.json`` into a vramcalc spec (no network, no transformers).

The field names read here are those of the transformers configuration classes (``LlamaConfig``,
``MixtralConfig``, ``GPT2Config``, ``BertConfig``, ``T5Config``, ...). Details vramcalc's shape does
not express exactly are refused with the field named; what changes no count (partial rotary, a window
it cannot place per layer, the vision tower of a multimodal checkpoint) is listed as a note, written as a
comment by ``vramcalc import``. Parameter counts equal those of the transformers class named in
``architectures`` (benchmarks/hf_import_exact.py checks them on the meta device).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vramcalc.errors import SpecError
from vramcalc.spec import hf_encoders as enc
from vramcalc.spec import hf_families as fam
from vramcalc.spec import hf_fields
from vramcalc.spec import hf_gpt as gpt
from vramcalc.spec import hf_moe as moe
from vramcalc.spec.hf_heads import head_notes
from vramcalc.spec.hf_reader import Config, Imported, Model, Reader
from vramcalc.spec.hf_rope import rope_scaling
from vramcalc.spec.hf_vision import WRAPPERS, text_config, tied, vision_of
from vramcalc.units import quoted

if TYPE_CHECKING:
    from vramcalc.spec.models import Spec

MAX_CONFIG_BYTES = 1_000_000


#: model_type -> converter (vramcalc/spec/hf_families.py, hf_moe.py, hf_gpt.py, hf_encoders.py).
FAMILIES: dict[str, Callable[[Reader], Imported]] = {
    "llama": fam.llama,
    "mistral": fam.mistral,
    "mixtral": moe.mixtral,
    "qwen2": fam.qwen2,
    "qwen2_moe": moe.qwen2_moe,
    "qwen3": fam.qwen3,
    "qwen3_moe": moe.qwen3_moe,
    "gemma": fam.gemma,
    "gemma2": fam.gemma2,
    "gemma3_text": fam.gemma3_text,
    "olmo": fam.olmo,
    "olmo2": fam.olmo2,
    "phi3": fam.phi3,
    "starcoder2": fam.starcoder2,
    "deepseek_v2": moe.deepseek_v2,
    "deepseek_v3": moe.deepseek,
    "phimoe": moe.phimoe,
    "olmoe": moe.olmoe,
    "llama4_text": moe.llama4_text,
    "phi": gpt.phi,
    "gpt2": gpt.gpt2,
    "gpt_neox": gpt.gpt_neox,
    "falcon": gpt.falcon,
    "opt": gpt.opt,
    "bloom": gpt.bloom,
    "gptj": gpt.gptj,
    "gpt_bigcode": gpt.gpt_bigcode,
    "bert": enc.bert,
    "roberta": enc.bert,
    "xlm-roberta": enc.bert,
    "distilbert": enc.distilbert,
    "deberta-v2": enc.deberta_v2,
    "t5": enc.t5,
    "vit": enc.vit,
}
#: Multimodal wrappers and their language model's model_type: the text model's config under its own type,
#: and the vision tower counted from ``vision_config`` (vramcalc/spec/hf_vision.py).
TEXT_CONFIGS = {name: wrapper.text_type for name, wrapper in WRAPPERS.items()}


def read_config(path: str | Path) -> Config:
    """Read a config.json (bounded size, nesting and numbers; UTF-8; a JSON object); errors name the file."""
    from vramcalc.files import read_json

    path = Path(path)
    data = read_json(path, MAX_CONFIG_BYTES, "model config.json files")
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a JSON object (a transformers config.json), got {type(data).__name__}")
    return data


def model_from_config(config: Config, source: str) -> tuple[Model, list[str]]:
    """The ``model`` mapping of a spec for a transformers config, and notes on what it leaves out. It names the
    language model's ``model_type`` (a multimodal wrapper's text model's), which selects the code facts of the
    transformers classes that run it (:mod:`vramcalc.stacks.transformers`), so a config, its catalog entry and
    a checkpoint of it give one estimate."""
    model_type = config.get("model_type")
    notes: list[str] = []
    vision, wrapper = None, config
    if isinstance(model_type, str) and model_type in TEXT_CONFIGS:
        hf_fields.refuse(Reader(config, source), model_type)
        text = text_config(config, model_type, source)
        vision, said = vision_of(config, model_type, text, source)
        notes += said
        config, model_type = text, text["model_type"]
    converter = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if converter is None:
        known = ", ".join(sorted([*FAMILIES, *TEXT_CONFIGS]))
        raise SpecError(f"{source}: model_type: {quoted(model_type)} is not supported (supported: {known})")
    reader = Reader(config, source)
    hf_fields.refuse(reader, str(model_type))  # fields that change the count and are not modelled
    model, said = converter(reader)
    said = [*said, *head_notes(reader)]
    rope = rope_scaling(config, source)
    if rope is not None and model.get("position") in (None, "rotary"):
        model = {**model, "rope_scaling": rope}
    if vision is not None:
        wrapper_type = str(wrapper["model_type"])
        tie = tied(wrapper, wrapper_type, model["tie_embeddings"], source)
        model = {**model, "tie_embeddings": tie, "vision": vision}
    return {**model, "model_type": model_type}, notes + said


#: torch_dtype / dtype values and the precision they name.
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
#: Training a 16-bit checkpoint: HF Trainer's bf16=True / fp16=True (fp32 master weights, autocast).
TRAINING_PRECISION = {"bf16": "amp-bf16", "fp16": "amp-fp16", "fp32": "fp32"}


def config_precision(config: Config, source: str) -> str | None:
    """The precision the config's ``torch_dtype`` (transformers 5: ``dtype``) names; None when absent."""
    r = Reader(config, source)
    name = "dtype" if config.get("dtype") is not None else "torch_dtype"
    dtype = r.text(name, "")
    if not dtype or dtype == "auto":
        return None
    if dtype.removeprefix("torch.") not in DTYPES:
        raise r.fail(name, f"{quoted(dtype)} is not one of {', '.join(DTYPES)}")
    return DTYPES[dtype.removeprefix("torch.")]


def default_precision(config: Config, source: str, mode: str | None) -> tuple[str | None, str | None]:
    """The workload precision when none is given, and the note that says so: inference runs in the
    config's ``torch_dtype``; training a 16-bit checkpoint is mixed precision (``amp-bf16``/``amp-fp16``,
    as HF Trainer's ``bf16=True``/``fp16=True``), since pure 16-bit weights cannot take small updates."""
    dtype = config_precision(config, source)
    if dtype is None:
        return None, None
    name = "dtype" if config.get("dtype") is not None else "torch_dtype"
    given = f"config.json {name}: {config[name]}"
    if mode not in (None, "train", "training"):
        return dtype, f"precision not given: {dtype} ({given}, the weights' dtype)"
    if dtype == "fp32":
        return dtype, f"precision not given: fp32 ({given})"
    precision = TRAINING_PRECISION[dtype]
    return precision, (
        f"precision not given: {precision} ({given}; training a 16-bit checkpoint as HF Trainer's "
        f"{dtype}=True: fp32 master weights, {dtype} autocast)"
    )


def _spec_name(config: Config, source: str) -> str:
    """The spec's name: the last part of ``_name_or_path`` (else the config's folder), printable only."""
    given = Reader(config, source).text("_name_or_path", "") or Path(source).parent.name
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


def _image(config: Config, source: str, model: Model) -> dict[str, Any]:
    """A ViT's image size and channels as the config builds its position table (whole patches)."""
    r = Reader(config, source)
    patch = model["patch_size"]
    image = r.count("image_size", default=224) or 224
    if image % patch:
        raise r.fail("image_size", f"{image} is not a multiple of patch_size {patch}")
    channels = r.count("num_channels", default=3) or 3
    return {"image_size": image} | ({"channels": channels} if channels != 3 else {})


def example_workload(model: Model, config: Config | None = None, source: str = "config.json") -> dict[str, Any]:
    """A valid starting workload for ``vramcalc import`` output (the user is meant to edit it): inference
    at the config's ``torch_dtype`` (bf16 when it names none; fp16 for encoders)."""
    dtype = config_precision(config, source) if config is not None else None
    if model["architecture"] == "vit":
        if config is not None:
            image = _image(config, source, model)
        else:
            image = {"image_size": model["patch_size"] * max(1, round(224 / model["patch_size"]))}
        return {"mode": "inference", "batch_size": 1, **image, "precision": dtype or "bf16"}
    seq = min(model.get("max_position_embeddings") or 4096, 4096)
    if model["architecture"] == "encoder":
        return {"mode": "inference", "batch_size": 1, "seq_len": seq, "precision": dtype or "fp16"}
    return {"mode": "inference", "batch_size": 1, "seq_len": seq, "precision": dtype or "bf16"}


def count_workload(config: Config, model: Model, source: str = "config.json") -> dict[str, Any]:
    """The smallest workload that builds the model as transformers does (a ViT at its config's image size)."""
    wl: dict[str, Any] = {"mode": "inference", "batch_size": 1}
    if model["architecture"] == "vit":
        return wl | _image(config, source, model)
    return wl | {"seq_len": 8}


@dataclass(frozen=True)
class ImportedSpec:
    """The spec ``vramcalc import`` makes of one config: its document (``name``, ``model`` and an example
    ``workload``, validated), the config's ``model_type`` and the notes on what the spec leaves out."""

    source: str  # the config file, as errors and the header comment name it
    model_type: str
    notes: tuple[str, ...]
    document: dict[str, Any]


def import_spec(config: Config, source: str) -> ImportedSpec:
    """``vramcalc import`` and :func:`vramcalc.import_config`: the spec of a config read from ``source``.

    The spec is validated as ``vramcalc estimate`` validates a spec file: a config that gives no valid spec
    is an error naming ``source``, never a spec to be rejected later.
    """
    from vramcalc.spec.validate import validate_spec as parse_spec

    model, notes = model_from_config(config, source)
    workload = example_workload(model, config, source)
    if model["architecture"] == "vit":
        notes.append(f"vit: the position table is built for workload.image_size {workload['image_size']}")
    dtype = config_precision(config, source)
    if dtype is not None:
        training = f" (to train: amp-{dtype})" if dtype != "fp32" else ""
        notes.append(f"workload.precision {dtype}: the config's torch_dtype{training}")
    doc = _document(config, source, model, workload)
    parse_spec(doc, source)
    return ImportedSpec(source, str(config["model_type"]), tuple(notes), doc)


def spec_yaml(
    source: str, model_type: str, notes: Sequence[str], document: dict[str, Any], *, named: bool = False
) -> str:
    """The text ``vramcalc import`` writes: a header naming the config file (``named``: the model's name, a
    path or a Hub id, as given), the notes as comments, the spec's name and model, then its workload as
    an example to edit."""
    import yaml

    name = source if named else Path(source).name
    file_name = name if name.isprintable() else quoted(name)  # one comment line
    shown = model_type if model_type.isprintable() else quoted(model_type)  # a checkpoint's config may hold any
    head = [f"# Imported by vramcalc from {file_name} (model_type {shown})."]
    head += [f"# note: {note if note.isprintable() else quoted(note)}" for note in notes]
    body = yaml.safe_dump({"name": document["name"], "model": document["model"]}, sort_keys=False)
    workload_text = yaml.safe_dump({"workload": document["workload"]}, sort_keys=False)
    return "\n".join(head) + "\n" + body + "# workload: an example; edit it for your run\n" + workload_text


def import_yaml(path: str | Path) -> str:
    """``vramcalc import``: the YAML text of a spec for the config at ``path`` (notes as comments)."""
    imported = import_spec(read_config(path), str(path))
    return spec_yaml(imported.source, imported.model_type, imported.notes, imported.document)
