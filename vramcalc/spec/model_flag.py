"""The spec of a command given ``--model NAME``: a catalog model (:mod:`vramcalc.spec.presets`) with a
spec file's workload, or with the flags' workload and the defaults it needs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vramcalc.spec.presets import expand_model, lookup

if TYPE_CHECKING:
    from vramcalc.spec.models import Spec


#: Sequence length of a ``--model`` run whose flags give none (or the model's context, when shorter).
DEFAULT_SEQ_LEN = 4096


def default_workload(
    model: dict[str, Any], workload: dict[str, Any], context: int | None, image_size: int | None = None
) -> tuple[dict[str, Any], list[str]]:
    """``workload`` with what a spec needs filled in when the flags give none, and a note for each:
    batch_size 1; seq_len 4,096 (or ``context``, the model's, when shorter) for a text model, the
    config's ``image_size`` (else 224) for a vision one. Used by ``--model`` and ``--hf-config``."""
    notes = []
    if "batch_size" not in workload:
        workload, notes = {**workload, "batch_size": 1}, ["workload.batch_size not given: 1"]
    if model.get("architecture") in ("vit", "resnet"):
        if "image_size" in workload:
            return workload, notes
        size = image_size or 224
        return {**workload, "image_size": size}, [*notes, f"workload.image_size not given: {size}"]
    if any(key in workload for key in ("seq_len", "prompt_len")):
        return workload, notes
    seq = min(context, DEFAULT_SEQ_LEN) if context else DEFAULT_SEQ_LEN
    return {**workload, "seq_len": seq}, [*notes, f"workload.seq_len not given: {seq:,}"]


def spec_with_model(
    spec: Spec | None, name: str, workload: dict[str, Any], flag: str = "--model"
) -> tuple[Spec, list[str]]:
    """The spec of a command given ``--model NAME``, and notes on the defaults it filled in: the catalog
    model with the workload, target and the rest of ``spec`` (a spec file's), else with the
    ``workload`` keys (the flags; see :func:`default_workload`), as ``--hf-config`` builds its spec."""
    from vramcalc.spec.load import override_workload, parse_spec

    source = f"{flag} {name}"
    entry = lookup(name, source)
    if spec is not None:
        data = spec.model_dump(exclude_none=True)
        data["model"], data["name"] = expand_model(entry.id, source), entry.id
        return override_workload(parse_spec(data, source), source, **workload), []
    model, _ = entry.model_mapping()
    given = {key: value for key, value in workload.items() if value is not None}
    filled, notes = default_workload(model, given, entry.context_length, entry.config_value("image_size"))
    if entry.config is None:
        return parse_spec({"name": entry.id, "model": model, "workload": filled}, source), notes
    from vramcalc.spec.hf_import import default_precision, validated_spec

    config = {**entry.config, "_name_or_path": entry.id}
    if "precision" not in filled:  # the config's torch_dtype, as --hf-config does, not fp32
        mode = filled.get("mode")
        precision, note = default_precision(config, source, None if mode is None else str(mode))
        if precision is not None:
            filled = {**filled, "precision": precision}
        notes = [*notes, note] if note else notes
    return validated_spec(config, source, filled), notes
