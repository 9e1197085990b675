"""CLI inputs: ``vramcalc import``, and the spec of every command that estimates, from a SPEC file, a catalog
model (``--model``) or a transformers config (``estimate --hf-config``) with the workload flags
(:mod:`vramcalc.cli.workload`).

``estimate --hf-config config.json`` builds the spec from a transformers config and the workload
flags (without ``--precision``, the config's ``torch_dtype``: itself for inference, ``amp-bf16``/``amp-fp16``
mixed precision for training a 16-bit checkpoint).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vramcalc.errors import SpecError

if TYPE_CHECKING:
    from vramcalc.cli.workload import WorkloadArgs
    from vramcalc.planning.budget import Budget
    from vramcalc.spec.models import Spec
    from vramcalc.spec.target import Reserve


def load_workload_spec(
    spec: Path | str | None, model: str | None, workload: WorkloadArgs, hf_config: Path | None = None
) -> tuple[Spec, str]:
    """The spec of a command that estimates, and how messages name it: a SPEC file with the workload flags
    overriding its keys; a catalog model (``--model``) with SPEC's workload (flags over it) or, without
    SPEC, the flags' workload (:func:`vramcalc.spec.model_flag.spec_with_model`, in the command's
    mode for a model alone); or a transformers config (``--hf-config``, estimate only) with the flags'
    workload. Notes on what was filled in go to stderr. Raises :class:`SpecError` for bad input."""
    from vramcalc.cli._common import input_name, load_spec_file, notes_to_stderr
    from vramcalc.spec.load import override_workload

    given = workload.given()
    if model is not None:
        if hf_config is not None:
            raise SpecError("--model and --hf-config: give one of the two")
        from vramcalc.spec.model_flag import spec_with_model

        base = load_spec_file(spec) if spec is not None else None
        loaded, notes = spec_with_model(base, model, given, mode=workload.model_mode)
        notes_to_stderr(notes)
        return loaded, input_name(spec, model)
    if spec is not None and hf_config is not None:
        raise SpecError("give a SPEC file or --hf-config config.json or --model NAME (one of them)")
    if spec is not None:
        return override_workload(load_spec_file(spec), str(spec), **given), str(spec)
    if hf_config is not None:
        return _from_config(hf_config, given), str(hf_config)
    raise no_input(workload)


def no_input(workload: WorkloadArgs) -> SpecError:
    """The error of a command given neither SPEC nor ``--model``: it names the first workload flag given."""
    if workload.named:
        return SpecError(f"{workload.named[0]}: sets a workload key: give a SPEC file or --model NAME too")
    return SpecError("give a SPEC file or --model NAME")


def load_with_budget(
    spec: Path | str | None,
    model: str | None,
    workload: WorkloadArgs,
    gpu: str | None,
    reserve: str | None,
    *,
    required: bool,
) -> tuple[Spec, str, Budget | None, Reserve]:
    """A command's spec (:func:`load_workload_spec`), how messages name it, the card it is planned for
    (``--gpu``, else the spec's ``target.gpu``; None when neither names one and not ``required``) and the
    reserve kept free on it (``--reserve``, else ``target.reserve``). Bad input exits 2."""
    from vramcalc.cli._common import card_budget, input_name, reserve_flag, user_errors
    from vramcalc.planning.check import reserve_for

    source = input_name(spec, model)
    with user_errors(source):
        loaded, _ = load_workload_spec(spec, model, workload)
        budget = card_budget(loaded, source, gpu, reserve, required=required)
        kept = reserve_for(loaded, reserve_flag(reserve))
    return loaded, source, budget, kept


def _from_config(hf_config: Path, given: dict[str, Any]) -> Spec:
    """``--hf-config``: the spec of a transformers config with the flags' workload (without
    ``--precision``, the config's ``torch_dtype``; stated on stderr)."""
    from vramcalc.cli._common import notes_to_stderr
    from vramcalc.spec.hf_import import default_precision, model_from_config, read_config, validated_spec
    from vramcalc.spec.model_flag import default_workload, implied_mode

    source = str(hf_config)
    config = read_config(hf_config)
    workload, notes = implied_mode(dict(given), None)
    note = None
    if "precision" not in workload:  # the config's torch_dtype, not fp32 (stated on stderr)
        mode = workload.get("mode")
        precision, note = default_precision(config, source, None if mode is None else str(mode))
        if precision is not None:
            workload["precision"] = precision
    shape, left_out = model_from_config(config, source)  # a multimodal config's text model: said
    notes = [*left_out, *notes]
    context, image = shape.get("max_position_embeddings"), config.get("image_size")
    workload, filled = default_workload(shape, workload, context, image if isinstance(image, int) else None)
    imported = validated_spec(config, source, workload)
    # after validation: a bad config gets its one error line and nothing else
    notes_to_stderr([*notes, *filled, note] if note is not None else [*notes, *filled])
    return imported


def import_command(
    config: Annotated[
        str,
        typer.Argument(
            help="A transformers config.json, a checkpoint folder or file, a catalog name or a Hub id (org/name).",
            show_default=False,
        ),
    ],
    *,
    output: Annotated[
        str | None,
        typer.Option(
            "-o",
            "--output",
            help="Write the spec here (default or '-': stdout), atomically; never over the config, a FIFO or a device.",
        ),
    ] = None,
) -> None:
    """Write a vramcalc spec for a model: from a Hugging Face config.json (offline), a checkpoint folder or
    file, a catalog name or a Hub id (what its files hold recorded); the workload is an example to edit."""
    from vramcalc.cli._common import echo_err, user_errors
    from vramcalc.cli.output import output_file, write_text

    path = Path(config)
    sink = output_file(output, [path])
    with user_errors(config):
        # os.path.isfile: False, not OSError, for a name too long for the file system
        if path.suffix == ".json" or os.path.isfile(path) and path.suffix not in (".safetensors", ".gguf"):
            from vramcalc.spec.hf_import import import_yaml

            text = import_yaml(path)
        else:
            from vramcalc.spec.hf_import import spec_yaml
            from vramcalc.spec.model_name import import_named

            imported = import_named(config, config)
            text = spec_yaml(imported.source, imported.model_type, imported.notes, imported.document, named=True)
    write_text(sink, text)
    if sink is not None:
        echo_err(f"wrote {sink.given}")


def add_commands(app: typer.Typer) -> None:
    """Register ``vramcalc import``."""
    app.command(name="import")(import_command)
