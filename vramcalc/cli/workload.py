"""The workload flags of every command that estimates, declared once.

:func:`workload_options` adds them to a command's own options; the command receives what they say as one
:class:`WorkloadArgs` and hands it to :func:`vramcalc.cli.inputs.load_workload_spec`, the one function that
turns them into the spec. A flag whose name the command already gives an option of its own (``sweep
--batch-size 1,2,4``) keeps the command's meaning; a flag that contradicts the command (``max-batch
--batch-size``) is accepted, hidden from its help, and refused with one error line naming it.

Imported when the CLI starts (``estimate`` lives in :mod:`vramcalc.cli.main`): the top level imports only
typer, the standard library, the closed choices and the shared helpers of :mod:`vramcalc.cli._common`.
"""

# Annotations are evaluated when defined (no `from __future__ import annotations`): typer would otherwise
# parse each option's annotation string on every start.

import inspect
from collections.abc import Callable, Mapping
from copy import copy
from enum import Enum
from functools import wraps
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from vramcalc import choices
from vramcalc.choices import Mode, Precision
from vramcalc.errors import SpecError

if TYPE_CHECKING:  # a TypedDict: built at start-up it would cost its class, and a dict is all it is at run time
    from vramcalc.spec.flags import WorkloadFlags

#: Help panels and metavars: short, so the help table fits an 80-column terminal.
WORKLOAD, LLM = "Workload (overrides SPEC's)", "LLM workload (overrides SPEC's)"
N, NAME, RANK = "N", "NAME", "RANK"
#: Longest --quantization / --adapter text accepted (a mapping of a few keys).
MAX_FLAG_CHARS = 2000


def _one_of(choices: type[Enum]) -> str:
    """'fp32, fp16 or bf16': the values of a choice, for help text (the metavar is kept short)."""
    values = [str(choice.value) for choice in choices]
    return ", ".join(values[:-1]) + " or " + values[-1]


def _precision(value: str) -> Precision | str:
    """``--precision``: a precision, or the dtype names users also write (``bfloat16`` is ``bf16``); the
    spellings that say pure 16-bit is meant (``pure-fp16``) stay text, for the workload to read."""
    from vramcalc.spec.models import PRECISION_ALIASES, PURE_PRECISIONS

    text = value.strip().lower()
    if text in PURE_PRECISIONS:
        return text
    try:
        return Precision(PRECISION_ALIASES.get(text, text))
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not one of {_one_of(Precision)}") from None


def _key(key: str) -> str:
    """How help names a workload key: ``workload.seq_len``; a long key without the dotted prefix, which
    a narrow help column would cut instead of wrapping."""
    return f"workload.{key}" if len(key) < 12 else f"The workload's {key}"


def _resolution(value: str) -> str:
    """``--image-resolution HEIGHTxWIDTH``: the images' height and width in pixels (checked here)."""
    parts = value.strip().lower().split("x")
    if len(parts) != 2 or not all(part.strip().isdigit() and 0 < int(part) <= 10**6 for part in parts):
        raise typer.BadParameter(f"{value!r} is not HEIGHTxWIDTH in pixels (768x1024)")
    return value.strip().lower()


def _pixels(value: str | None) -> list[int] | None:
    """The height and width of a checked ``--image-resolution``."""
    return None if value is None else [int(part) for part in value.split("x")]


def _choice(kind: type[Enum], key: str, panel: str = WORKLOAD) -> Any:
    return Annotated[
        kind | None, typer.Option(metavar=NAME, help=f"{_key(key)}: {_one_of(kind)}.", rich_help_panel=panel)
    ]


def _count(key: str, panel: str = WORKLOAD, low: int = 1) -> Any:
    return Annotated[int | None, typer.Option(min=low, metavar=N, help=f"{_key(key)}.", rich_help_panel=panel)]


#: Every workload option, in the order help lists them: the parameter's name and its annotation. The
#: names are WorkloadFlags' keys, except ``lora`` and ``qlora``, which give its adapter and quantization.
OPTIONS: dict[str, Any] = {
    "mode": _choice(Mode, "mode"),
    "batch_size": _count("batch_size"),
    "seq_len": _count("seq_len"),
    "precision": Annotated[
        str | None,
        typer.Option(
            metavar=NAME,
            parser=_precision,
            help=f"workload.precision: {_one_of(Precision)} (bfloat16, float16, float32, pure-fp16, pure-bf16 too).",
            rich_help_panel=WORKLOAD,
        ),
    ],
    "optimizer": _choice(choices.Optimizer, "optimizer"),
    "optimizer_impl": _choice(choices.OptimizerImpl, "optimizer_impl"),
    "gradient_checkpointing": _choice(choices.Checkpointing, "gradient_checkpointing"),
    "attention": _choice(choices.Attention, "attention"),
    "target_len": _count("target_len"),
    "image_size": _count("image_size"),
    "channels": _count("channels"),
    "images": Annotated[
        int | None,
        typer.Option(
            min=1,
            metavar=N,
            help="workload.images: images per sequence of a multimodal model; their tokens join the prompt.",
            rich_help_panel=LLM,
        ),
    ],
    "image_resolution": Annotated[
        str | None,
        typer.Option(
            parser=_resolution,
            metavar="HxW",
            help="Images' height x width.",
            rich_help_panel=LLM,
        ),
    ],
    "prompt_len": _count("prompt_len", LLM),
    "max_new_tokens": _count("max_new_tokens", LLM, low=0),
    "use_cache": Annotated[bool | None, typer.Option(help="workload.use_cache.", rich_help_panel=LLM)],
    "runtime": _choice(choices.Runtime, "runtime", LLM),
    "kv_cache_dtype": _choice(choices.KvCacheDtype, "kv_cache_dtype", LLM),
    "kv_block_size": _count("kv_block_size", LLM),
    "memory_utilization": Annotated[
        float | None, typer.Option(help="The workload's memory_utilization, in (0, 1].", rich_help_panel=LLM)
    ],
    "quantization": Annotated[
        str | None,
        typer.Option(help="The workload's quantization: nf4 or '{method: gptq, bits: 4}'.", rich_help_panel=LLM),
    ],
    "adapter": Annotated[
        str | None, typer.Option(help="workload.adapter: '{rank: 16, targets: all-linear}'.", rich_help_panel=LLM)
    ],
    "lora": Annotated[
        int | None,
        typer.Option(min=1, metavar=RANK, help="LoRA of rank RANK on every linear layer (train).", rich_help_panel=LLM),
    ],
    "qlora": Annotated[
        int | None,
        typer.Option(min=1, metavar=RANK, help="QLoRA: --lora RANK on an nf4 base.", rich_help_panel=LLM),
    ],
}


def flag_name(key: str) -> str:
    """The option that gives a workload key: ``batch_size`` -> ``--batch-size``."""
    return "--" + key.replace("_", "-")


class WorkloadArgs:
    """What a command's workload flags say: the workload keys given (each None where not), the options
    given (``--lora``, ...), and the mode a ``--model`` run takes when neither a spec nor ``--mode`` gives
    one and the flags imply none (None: the spec's default, train)."""

    __slots__ = ("flags", "named", "model_mode")

    def __init__(self, flags: "WorkloadFlags", named: tuple[str, ...] = (), model_mode: Mode | None = None) -> None:
        self.flags = flags
        self.named = named
        self.model_mode = model_mode

    def given(self) -> dict[str, Any]:
        """The workload keys given, in the order of the flags."""
        return {key: value for key, value in self.flags.items() if value is not None}


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


def _adapter_keys(values: dict[str, Any]) -> tuple[Any, Any]:
    """The adapter and quantization sections that ``--adapter``/``--lora``/``--qlora`` and ``--quantization``
    give (one way to name the adapter; ``--qlora`` names the quantization too)."""
    lora, qlora = values["lora"], values["qlora"]
    adapter = parse_mapping_flag(values["adapter"], "--adapter", "type")
    quantization = parse_mapping_flag(values["quantization"], "--quantization", "method")
    named = [flag for flag in ("--adapter", "--lora", "--qlora") if values[flag[2:]] is not None]
    if len(named) > 1:
        raise SpecError(f"{named[0]} and {named[1]}: give one (--qlora is --lora on an nf4 base)")
    if qlora is not None and quantization is not None:
        raise SpecError("--qlora and --quantization: give one (--qlora quantizes to nf4)")
    from vramcalc.spec.llm import MAX_RANK

    rank = lora if lora is not None else qlora
    if rank is not None and rank > MAX_RANK:
        raise SpecError(f"{'--lora' if lora is not None else '--qlora'}: rank {rank} is more than {MAX_RANK:,}")
    if rank is not None:
        adapter = {"type": "lora", "rank": rank, "targets": "all-linear"}
    if qlora is not None:
        quantization = {"method": "nf4"}
    return adapter, quantization


def workload_flags(values: dict[str, Any], refused: Mapping[str, str]) -> "WorkloadFlags":
    """The WorkloadFlags of the options' values; a refused flag that is given is an error naming it."""
    for key, why in refused.items():
        if values.get(key) is not None:
            raise SpecError(f"{flag_name(key)}: {why}")
    adapter, quantization = _adapter_keys(values)
    flags: WorkloadFlags = {
        "batch_size": values["batch_size"],
        "seq_len": values["seq_len"],
        "precision": values["precision"],
        "optimizer": values["optimizer"],
        "mode": values["mode"],
        "target_len": values["target_len"],
        "optimizer_impl": values["optimizer_impl"],
        "gradient_checkpointing": values["gradient_checkpointing"],
        "attention": values["attention"],
        "image_size": values["image_size"],
        "channels": values["channels"],
        "images": values["images"],
        "image_resolution": _pixels(values["image_resolution"]),
        "prompt_len": values["prompt_len"],
        "max_new_tokens": values["max_new_tokens"],
        "use_cache": values["use_cache"],
        "runtime": values["runtime"],
        "kv_cache_dtype": values["kv_cache_dtype"],
        "kv_block_size": values["kv_block_size"],
        "memory_utilization": values["memory_utilization"],
        "quantization": quantization,
        "adapter": adapter,
    }
    return flags


def _hidden(annotation: Any) -> Any:
    """The option of ``annotation``, accepted but left out of help (a flag the command refuses)."""
    kind, option = annotation.__origin__, copy(annotation.__metadata__[0])
    option.hidden = True
    return Annotated[kind, option]


def _mode_help(annotation: Any, mode: Mode) -> Any:
    """``--mode``'s option saying what a ``--model`` run without SPEC defaults to in this command."""
    kind, option = annotation.__origin__, copy(annotation.__metadata__[0])
    option.help = f"{option.help} With --model alone: {mode.value}, unless the flags imply the other."
    return Annotated[kind, option]


Command = TypeVar("Command", bound=Callable[..., Any])


def workload_options(
    model_mode: Mode | None = None, refused: Mapping[str, str] | None = None
) -> Callable[[Command], Command]:
    """Give a command the workload options after its own. The command takes a keyword ``workload``
    (:class:`WorkloadArgs`), which typer does not see; an option of the command's own with a workload
    key's name keeps the command's meaning. ``model_mode``: the mode of a ``--model`` run without SPEC,
    ``--mode`` or a flag that implies one (None: train, the spec's default). ``refused``: keys whose
    flag contradicts the command, with why (the flag is hidden from help and refused when given)."""
    refusals = dict(refused or {})

    def decorate(command: Command) -> Command:
        signature = inspect.signature(command, eval_str=True, locals={"WorkloadArgs": WorkloadArgs})
        own = [param for name, param in signature.parameters.items() if name != "workload"]
        taken = {param.name for param in own}
        added = []
        for name, annotation in OPTIONS.items():
            if name in taken:
                continue
            if name in refusals:
                annotation = _hidden(annotation)
            elif name == "mode" and model_mode is not None:
                annotation = _mode_help(annotation, model_mode)
            added.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation))
        names = [param.name for param in added]

        @wraps(command)
        def run(**kwargs: Any) -> Any:
            from vramcalc.cli._common import user_errors

            values = dict.fromkeys(OPTIONS) | {name: kwargs.pop(name) for name in names}
            with user_errors():
                flags = workload_flags(values, refusals)
            named = tuple(flag_name(name) for name in names if values[name] is not None)
            return command(**kwargs, workload=WorkloadArgs(flags, named, model_mode))

        parameters = [*own, *added]
        run.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        run.__annotations__ = {param.name: param.annotation for param in parameters}
        return run  # type: ignore[return-value]

    return decorate
