"""The spec of a command given ``--model NAME``: a catalog model (:mod:`vramcalc.spec.presets`) with a
spec file's workload, or with the flags' workload and the defaults it needs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vramcalc.choices import Mode
from vramcalc.errors import SpecError

if TYPE_CHECKING:
    from vramcalc.spec.models import Spec


#: Sequence length of a ``--model`` run whose flags give none (or the model's context, when shorter).
DEFAULT_SEQ_LEN = 4096
#: Workload keys only a training step takes, and keys only inference takes (``Workload``'s rules): given
#: without a mode, they say which mode a ``--model`` run is.
TRAIN_KEYS = ("adapter", "optimizer", "optimizer_impl", "gradient_checkpointing")
INFERENCE_KEYS = (
    "prompt_len", "max_new_tokens", "use_cache", "runtime", "kv_cache_dtype", "kv_block_size", "memory_utilization",
)  # fmt: skip


def implied_mode(workload: dict[str, Any], default: Mode | None) -> tuple[dict[str, Any], list[str]]:
    """``workload`` with the mode of a ``--model`` run that gives none, and a note saying so: the mode its
    keys imply (an adapter or an optimizer: train; a prompt, new tokens, a runtime or a KV cache:
    inference), else ``default``, the command's. Train, the spec's own default, stays unset unless the
    command's default is inference: the estimate's assumptions say "mode not given: train"."""
    if "mode" in workload:
        return workload, []
    train = [key for key in TRAIN_KEYS if key in workload]
    serve = [key for key in INFERENCE_KEYS if key in workload]
    if train and serve:
        return workload, []  # the spec's rules name the key that does not fit the mode
    if train or serve:
        mode, why = (
            (Mode.train, f"{train[0]} is a training key")
            if train
            else (Mode.inference, f"{serve[0]} is an inference key")
        )
    elif default is not None:
        mode, why = default, "this command's default for a model without a spec"
    else:
        return workload, []
    if mode is Mode.train and default is not Mode.inference:
        return workload, []
    return {**workload, "mode": mode}, [f"workload.mode not given: {mode.value} ({why})"]


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
    spec: Spec | None, name: str, workload: dict[str, Any], flag: str = "--model", mode: Mode | None = None
) -> tuple[Spec, list[str]]:
    """The spec of a command given ``--model NAME``, and notes on the defaults it filled in: the model
    ``NAME`` names (:func:`vramcalc.spec.model_name.resolve_name`: a path, the catalog, the local cache,
    the Hub) with the workload, target and the rest of ``spec`` (a spec file's), else with the
    ``workload`` keys (the flags; see :func:`default_workload`, and :func:`implied_mode` with the
    command's ``mode``), as ``--hf-config`` builds its spec."""
    from vramcalc.spec.from_checkpoint import positive_int
    from vramcalc.spec.hf_import import TRAINING_PRECISION
    from vramcalc.spec.load import override_workload, parse_spec
    from vramcalc.spec.model_name import resolve_name

    source = f"{flag} {name}"
    named = resolve_name(name, source)
    said = list(named.notes)
    config: dict[str, Any] | None
    if named.checkpoint is not None:
        from vramcalc.spec.from_checkpoint import checkpoint_model

        model, implied, read = checkpoint_model(named.checkpoint, source)
        config = named.checkpoint.config
        said += read
    else:
        assert named.entry is not None
        model, left_out = named.entry.model_mapping()  # a multimodal entry's text model: said
        implied, config = {}, named.entry.config
        said += left_out
    if spec is not None:
        data = spec.model_dump(exclude_none=True)
        data["model"], data["name"] = model, named.spec_name
        given = spec.workload.model_dump(exclude_none=True, exclude_unset=True)
        data["workload"] = {**data["workload"], **{k: v for k, v in implied.items() if k not in given}}
        return override_workload(parse_spec(data, source), source, **workload), said
    given, mode_notes = implied_mode({key: value for key, value in workload.items() if value is not None}, mode)
    filled, notes = default_workload(
        model, given, positive_int(config, *CONTEXT_KEYS), positive_int(config, "image_size")
    )
    notes = [*said, *mode_notes, *notes]
    if "precision" not in filled and config:
        from vramcalc.spec.hf_import import default_precision

        mode_value = filled.get("mode")
        try:
            precision, note = default_precision(config, source, None if mode_value is None else str(mode_value))
        except SpecError:
            if named.checkpoint is None:
                raise
            precision, note = None, None  # a dtype the importer does not name: the files' own dtype below
        if precision is not None:
            filled, notes = {**filled, "precision": precision}, [*notes, note] if note else notes
    if "precision" not in filled and "precision" in implied and filled.get("mode") in (None, Mode.train, "train"):
        implied = {**implied, "precision": TRAINING_PRECISION[implied["precision"]]}
    filled = {**implied, **filled}
    if named.entry is not None and named.entry.config is not None:
        from vramcalc.spec.hf_import import validated_spec

        return validated_spec({**named.entry.config, "_name_or_path": named.entry.id}, source, filled), notes
    return parse_spec({"name": named.spec_name, "model": model, "workload": filled}, source), notes


def spec_without_workload(data: Any, source: str) -> tuple[Spec, str | None, list[str]] | None:
    """A spec file's document that names a model and no workload, as the rows of what the model can run
    start from (``vramcalc estimate SPEC`` with a card): the file's keys with an inference workload at
    :func:`default_workload`'s defaults; the model's name for the rows' specs (None for a model read from
    files or given by its keys); and notes. None for any other document (a workload given, no model)."""
    from vramcalc.spec.from_checkpoint import positive_int
    from vramcalc.spec.load import parse_spec

    if not isinstance(data, dict) or "workload" in data or not isinstance(data.get("model"), str | dict):
        return None
    model = data["model"]
    if isinstance(model, dict):
        filled, notes = default_workload(model, {"mode": "inference"}, positive_int(model, *CONTEXT_KEYS))
        return parse_spec({**data, "workload": filled}, source), None, notes
    base, notes = spec_with_model(None, model, {"mode": "inference"}, flag=f"{source}: model:")
    document = {**base.model_dump(mode="json", exclude_none=True), **{k: v for k, v in data.items() if k != "model"}}
    return parse_spec(document, source), model if base.model.checkpoint is None else None, notes


#: Config fields of a model's context length.
CONTEXT_KEYS = ("max_position_embeddings", "n_positions")
