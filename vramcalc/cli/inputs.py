"""CLI inputs beside a spec file: ``vramcalc import`` and the spec-or-config loading of ``estimate``.

``estimate --hf-config config.json`` builds the spec from a transformers config and the workload
flags (without ``--precision``, the config's ``torch_dtype``: itself for inference, ``amp-bf16``/``amp-fp16``
mixed precision for training a 16-bit checkpoint); ``--quantization`` and ``--adapter`` take a method name or
a YAML flow mapping
(``--adapter '{rank: 16, targets: all-linear}'``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vramcalc.errors import SpecError

if TYPE_CHECKING:
    from vramcalc.spec.flags import WorkloadFlags
    from vramcalc.spec.models import Spec

#: Longest --quantization / --adapter text accepted (a mapping of a few keys).
MAX_FLAG_CHARS = 2000


def parse_mapping_flag(text: str | None, flag: str, name_key: str) -> Any:
    """A flag holding a name (``nf4``) or a YAML flow mapping (``{method: gptq, bits: 4}``)."""
    if text is None:
        return None
    from vramcalc.files import parse_yaml
    from vramcalc.units import quoted

    if len(text) > MAX_FLAG_CHARS:
        raise SpecError(f"{flag}: longer than {MAX_FLAG_CHARS} characters")
    try:
        value = parse_yaml(text, flag)  # the spec files' bounded safe loader (aliases, depth, duplicates)
    except SpecError:
        raise SpecError(f"{flag}: not a name or a YAML mapping such as '{{{name_key}: ...}}': {quoted(text)}") from None
    if isinstance(value, str):
        return {name_key: value}
    if not isinstance(value, dict):
        raise SpecError(f"{flag}: expected a name or a mapping, got {type(value).__name__}")
    return value


def load_for_estimate(
    spec: Path | None, hf_config: Path | None, flags: WorkloadFlags, model: str | None = None
) -> tuple[Spec, str]:
    """The spec of ``estimate``: a spec file with flag overrides, a config.json with flag workload, or a
    catalog model (``--model``) with the spec file's workload or the flags'."""
    from vramcalc.cli._common import input_name, load_spec_file, load_spec_or_model
    from vramcalc.spec.flags import given as given_flags
    from vramcalc.spec.load import override_workload

    given = given_flags(flags)
    if model is not None:
        if hf_config is not None:
            raise SpecError("--model and --hf-config: give one of the two")
        if spec is not None:
            return load_spec_or_model(spec, model, given), str(spec)
        return load_spec_or_model(None, model, given), input_name(None, model)
    if (spec is None) == (hf_config is None):
        raise SpecError("give a SPEC file or --hf-config config.json or --model NAME (one of them)")
    if spec is not None:
        return override_workload(load_spec_file(spec), str(spec), **given), str(spec)
    from vramcalc.cli._common import notes_to_stderr
    from vramcalc.spec.hf_import import default_precision, model_from_config, read_config, validated_spec
    from vramcalc.spec.model_flag import default_workload

    assert hf_config is not None  # exactly one of the two, checked above
    source = str(hf_config)
    config = read_config(hf_config)
    workload = dict(given)
    note = None
    if "precision" not in workload:  # the config's torch_dtype, not fp32 (stated on stderr)
        mode = workload.get("mode")
        precision, note = default_precision(config, source, None if mode is None else str(mode))
        if precision is not None:
            workload["precision"] = precision
    shape, _ = model_from_config(config, source)
    context, image = shape.get("max_position_embeddings"), config.get("image_size")
    workload, filled = default_workload(shape, workload, context, image if isinstance(image, int) else None)
    imported = validated_spec(config, source, workload)
    # after validation: a bad config gets its one error line and nothing else
    notes_to_stderr([*filled, note] if note is not None else filled)
    return imported, source


def import_command(
    config: Annotated[Path, typer.Argument(help="A transformers config.json.", show_default=False)],
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
    """Convert a Hugging Face config.json into a vramcalc spec (offline); the workload is an example to edit."""
    from vramcalc.cli._common import echo_err, user_errors
    from vramcalc.cli.output import output_file, write_text
    from vramcalc.spec.hf_import import import_yaml

    sink = output_file(output, [config])
    with user_errors(str(config)):
        text = import_yaml(config)
    write_text(sink, text)
    if sink is not None:
        echo_err(f"wrote {sink.given}")


def add_commands(app: typer.Typer) -> None:
    """Register ``vramcalc import``."""
    app.command(name="import")(import_command)
