"""The Python API: the CLI's commands as functions that return typed results.

:func:`estimate`, :func:`check`, :func:`max_batch`, :func:`max_seq`, :func:`fit`, :func:`sweep`,
:func:`plan`, :func:`bandwidth`, :func:`models` and :func:`import_config` (``vramcalc import``), with
:func:`load_spec` and :func:`gpu`. Each gives the same numbers and the same verdict as the command of the
same name with ``--json``; its result is the model of that document (:mod:`vramcalc.results`), so
``result.to_dict()`` is what the command prints (``models``: a list, one model per entry;
``import_config``: ``result.to_yaml()`` is the spec file the command writes). The commands and these
functions call the same planning functions. Sizes are int bytes, rates bytes per second, times seconds.

A spec is a :class:`~vramcalc.spec.models.Spec`, a path to a YAML spec file, or a mapping with the same
keys as the file. A card is a catalog name (``"a100"``, ``"h100-sxm"``, ``"local"`` for the installed card),
a size such as ``"48GiB"`` (a card known only by its usable memory: :mod:`vramcalc.hardware.custom`)
or a :class:`~vramcalc.hardware.catalog.GPU`. The reserve kept free on the card is the spec's
``target.reserve`` unless ``reserve`` (``"10%"`` or ``"2GiB"``) is given. Bad input raises a
:class:`~vramcalc.errors.VramcalcError` (:class:`~vramcalc.errors.SpecError` for a spec, naming the key;
:class:`~vramcalc.errors.UnknownGPUError` for a card name, listing the closest names); every message is
one line per problem. A value of the wrong Python type (a count that is not an int, a reserve that is not
text) raises :class:`TypeError` naming the argument. Options are keyword-only. Everything is imported on
first use: neither typer nor rich is ever imported.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, cast

from vramcalc.errors import SpecError, VramcalcError

if TYPE_CHECKING:
    from vramcalc.hardware.catalog import GPU
    from vramcalc.hardware.custom import CustomCard
    from vramcalc.hardware.lookup import Card
    from vramcalc.planning.budget import Budget
    from vramcalc.results.bandwidth import BandwidthResult
    from vramcalc.results.catalog import ModelResult
    from vramcalc.results.check import CheckResult
    from vramcalc.results.estimate import EstimateResult
    from vramcalc.results.imported import ImportResult
    from vramcalc.results.limits import LimitResult
    from vramcalc.results.planning import FitResult, PlanResult, SweepResult
    from vramcalc.spec.models import Spec
    from vramcalc.spec.target import Reserve

    #: A spec: a loaded one, a path to a YAML file, or a mapping with the file's keys.
    SpecInput: TypeAlias = Spec | str | os.PathLike[str] | Mapping[str, Any]
    #: A card: a catalog name, ``"local"``, a size such as ``"48GiB"`` (a capacity-only card), or a card.
    CardInput: TypeAlias = str | GPU | CustomCard
    #: Values of a sweep: counts, or the flag's text such as ``"1,2,4k"``.
    ValuesInput: TypeAlias = str | Sequence[int]

#: What results and errors call a spec that was not read from a file.
NOT_A_FILE = "<spec>"
#: What results and errors call a transformers config given as a mapping.
NOT_A_CONFIG = "<config>"


#: The most characters an error message of the API keeps (as a line of the CLI does): a longer one, which
#: quotes a huge input back, keeps its beginning and its end around "…".
MAX_MESSAGE = 2000

_F = TypeVar("_F", bound=Callable[..., Any])


def _bounded_errors(function: _F) -> _F:
    """``function`` whose :class:`~vramcalc.errors.VramcalcError` messages are at most :data:`MAX_MESSAGE`
    characters (the same exception, its message cut)."""

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except VramcalcError as exc:
            text = str(exc)
            if len(text) > MAX_MESSAGE:
                head = (MAX_MESSAGE - 1) // 2
                exc.args = (text[:head] + "…" + text[len(text) - (MAX_MESSAGE - 1 - head) :],)
            raise

    return cast(_F, run)


@_bounded_errors
def load_spec(spec: str | os.PathLike[str] | Mapping[str, Any]) -> Spec:
    """A validated :class:`~vramcalc.spec.models.Spec` from a YAML spec file (a path) or a mapping with
    the file's keys. Raises :class:`~vramcalc.errors.SpecError`, one line per problem naming the key
    (``<spec>: workload.batch_size: ...`` for a mapping, the file's path for a file)."""
    return _load(spec)[0]


def _load(spec: SpecInput) -> tuple[Spec, str, str]:
    """(the spec, the source results name it by, its name): a file's path and stem, or ``<spec>``."""
    from vramcalc.spec.models import Spec, with_image_tokens

    if isinstance(spec, Spec):  # built by the caller: its images' tokens join the lengths as a file's do
        return with_image_tokens(spec), NOT_A_FILE, spec.name or "unnamed"
    if isinstance(spec, str | os.PathLike):
        from vramcalc.spec.load import load_spec as load_file

        path = Path(spec)
        loaded = load_file(path)
        return loaded, str(path), loaded.name or path.stem
    if isinstance(spec, Mapping):
        from vramcalc.spec.load import parse_spec

        loaded = parse_spec(dict(spec), NOT_A_FILE)
        return loaded, NOT_A_FILE, loaded.name or "unnamed"
    raise TypeError(f"spec: expected a Spec, a path or a mapping, got {type(spec).__name__}")


@_bounded_errors
def gpu(name: str) -> GPU:
    """The catalog entry a card name picks (an id, an alias or a short name such as ``"a100"``, which picks
    its documented default variant; ``"local"`` reads the installed card through NVML). Capacities are in
    :attr:`~vramcalc.hardware.catalog.GPU.capacity_bytes` / ``usable_bytes`` (int bytes). Raises
    :class:`~vramcalc.errors.UnknownGPUError` listing the closest names."""
    from vramcalc.hardware.lookup import get_gpu

    if not isinstance(name, str):
        raise TypeError(f"name: expected a card name, got {type(name).__name__}")
    return get_gpu(name)


def _card(card: CardInput) -> Card:
    """A card input as the planning functions take it: a name may also be a size (``"48GiB"``, a
    capacity-only card) or ``"local"``."""
    from vramcalc.hardware.catalog import GPU
    from vramcalc.hardware.custom import CustomCard
    from vramcalc.hardware.lookup import find_card

    if isinstance(card, GPU | CustomCard):
        return card
    if not isinstance(card, str):
        raise TypeError(f"gpu: expected a card name, got {type(card).__name__}")
    return find_card(card, "gpu")[0]


def _reserve(reserve: str | None) -> Reserve | None:
    """``reserve`` (``"10%"`` or ``"2GiB"``) parsed; None when not given."""
    from vramcalc.spec.target import parse_reserve

    if reserve is None:
        return None
    if not isinstance(reserve, str):
        raise TypeError(f"reserve: expected text such as '10%' or '2GiB', got {type(reserve).__name__}")
    return parse_reserve(reserve, "reserve")


def _budget(spec: Spec, source: str, card: CardInput | None, reserve: Reserve | None) -> Budget:
    """The card ``card`` names (else the spec's ``target.gpu``) with the reserve, as the CLI resolves them."""
    from vramcalc.planning.check import TargetFlags, budgets_for

    if card is None and (spec.target is None or spec.target.gpu is None):
        raise SpecError(f"{source}: target.gpu: no GPU given (add 'target: {{gpu: NAME}}' to the spec or pass gpu=)")
    budgets, _ = budgets_for(spec, source, TargetFlags(reserve=reserve), [_card(card)] if card is not None else [])
    return budgets[0]


def _target(spec: Spec, source: str, card: CardInput | None, reserve: Reserve | None) -> Budget | None:
    """:func:`_budget`, or None when neither ``card`` nor the spec's ``target.gpu`` names a card."""
    if card is None and (spec.target is None or spec.target.gpu is None):
        return None
    return _budget(spec, source, card, reserve)


def _count(name: str, value: int | None, *, optional: bool = True) -> None:
    """A :class:`TypeError` naming ``name`` when ``value`` is not an int (None passes when ``optional``)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")


def _option(name: str, value: object, *types: type) -> None:
    """A :class:`TypeError` naming ``name`` unless ``value`` is None, text or one of ``types`` (bool aside)."""
    if value is None or isinstance(value, str):
        return
    if isinstance(value, bool) or not isinstance(value, types):
        kinds = " or ".join(["text", *(t.__name__ for t in types)])
        raise TypeError(f"{name}: expected {kinds}, got {type(value).__name__}")


def _values(name: str, values: ValuesInput) -> None:
    """A :class:`TypeError` naming ``name`` unless ``values`` is text or a sequence of ints."""
    if isinstance(values, str):
        return
    if isinstance(values, bytes | bytearray) or not isinstance(values, Sequence):
        raise TypeError(f"{name}: expected a list of ints or text such as '1,2,4k', got {type(values).__name__}")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name}: expected ints, got a {type(value).__name__} ({value!r})")


@_bounded_errors
def estimate(
    spec: SpecInput, gpu: CardInput | None = None, *, reserve: str | None = None, timeline: bool = False
) -> EstimateResult:
    """The peak memory of one step of ``spec``, by component and phase (``vramcalc estimate --json``).

    ``result.total_bytes`` is what the card must hold (allocated peak + CUDA context + allocator reserve, and
    NCCL buffers across GPUs; int bytes); ``result.components`` and ``result.phases`` break it down. With a
    card (``gpu``, else the spec's ``target.gpu``), ``result.gpu`` is the verdict on that card: ``fits``,
    ``needed_bytes``, ``available_bytes`` (usable memory minus the reserve), ``headroom_bytes``. Without
    one there is no verdict and ``reserve`` is an error. ``timeline`` adds the step timeline."""
    from vramcalc.planning.outcome import estimate_outcome
    from vramcalc.results.estimate import EstimateResult

    loaded, source, _ = _load(spec)
    budget = None
    if gpu is None and (loaded.target is None or loaded.target.gpu is None):
        if reserve is not None:
            raise SpecError("reserve: needs a gpu (the reserve is kept free on that card)")
    else:
        budget = _budget(loaded, source, gpu, _reserve(reserve))
    outcome = estimate_outcome(loaded, budget)
    steps = None
    if timeline:
        from vramcalc.families.timeline import build_timeline

        steps = build_timeline(loaded, outcome.estimate)
    return EstimateResult.of(outcome.estimate, outcome.budget, outcome.fit, steps)


def _limit(spec: SpecInput, gpu: CardInput | None, reserve: str | None, key: str) -> LimitResult:
    from vramcalc.planning import limits
    from vramcalc.results.limits import LimitResult

    loaded, source, name = _load(spec)
    budget = _budget(loaded, source, gpu, _reserve(reserve))
    limit = limits.max_batch(loaded, budget) if key == "batch_size" else limits.max_seq(loaded, budget)
    other = "seq_len" if key == "batch_size" else "batch_size"
    return LimitResult.of(source, name, limit, {other: getattr(loaded.workload, other)})


@_bounded_errors
def max_batch(spec: SpecInput, gpu: CardInput | None = None, *, reserve: str | None = None) -> LimitResult:
    """The largest batch size of ``spec`` that fits the card (``vramcalc max-batch --json``):
    ``result.max_batch_size`` (0 when even batch 1 does not fit), with the bytes needed there
    (``total_bytes_at_max``) and at one more (``total_bytes_at_next``). ``gpu`` defaults to the spec's
    ``target.gpu``; with neither, :class:`~vramcalc.errors.SpecError`."""
    return _limit(spec, gpu, reserve, "batch_size")


@_bounded_errors
def max_seq(spec: SpecInput, gpu: CardInput | None = None, *, reserve: str | None = None) -> LimitResult:
    """The largest sequence length of ``spec`` that fits the card (``vramcalc max-seq --json``):
    ``result.max_seq_len`` (0 when even length 1 does not fit), with the bytes needed there and at one
    more. ``gpu`` defaults to the spec's ``target.gpu``."""
    return _limit(spec, gpu, reserve, "seq_len")


@_bounded_errors
def check(
    spec: SpecInput, gpu: CardInput | None = None, *, reserve: str | None = None, max_gpus: int | None = None
) -> CheckResult:
    """Does ``spec`` fit the card, and if not, with what (one row of ``vramcalc check --format json``).

    ``result.fits``, ``needed_bytes``, ``available_bytes`` and ``headroom_bytes`` (int bytes) are the
    verdict every command uses; when it does not fit, ``result.suggestions`` lists the single changes that
    would make it fit (most headroom first, "shard over N GPUs" included, searched up to ``max_gpus``,
    default 64) and ``min_cards`` the fewest cards of this kind that hold it. ``gpu`` defaults to the
    spec's ``target.gpu``."""
    from vramcalc.planning.budget import DEFAULT_MAX_GPUS
    from vramcalc.planning.check import CheckRow
    from vramcalc.planning.fit import ShardSearch, check_on
    from vramcalc.results.check import CheckResult

    _count("max_gpus", max_gpus)
    loaded, source, name = _load(spec)
    budget = _budget(loaded, source, gpu, _reserve(reserve))
    search = ShardSearch(loaded, DEFAULT_MAX_GPUS if max_gpus is None else max_gpus)
    return CheckResult.of(CheckRow(source, name, check_on(loaded, budget, search)))


@_bounded_errors
def fit(
    spec: SpecInput, gpu: CardInput | None = None, *, reserve: str | None = None, max_gpus: int | None = None
) -> FitResult:
    """Every catalog card ``spec`` fits on, and what would make it fit its target card (``vramcalc fit --json``).

    ``result.cards`` holds one verdict per card (``fits``, ``needed_bytes``, ``available_bytes``,
    ``headroom_bytes``; those it fits first, smallest first) with ``min_cards``, the fewest cards of that
    kind under a sharded plan searched up to ``max_gpus`` (default 64). ``result.target`` is the verdict on
    ``gpu`` (default: the spec's ``target.gpu``; None with neither) with its ``suggestions``. ``reserve`` is
    kept free on every card (default ``target.reserve``)."""
    from vramcalc.planning.budget import DEFAULT_MAX_GPUS
    from vramcalc.planning.check import reserve_for
    from vramcalc.planning.fit import fit_report
    from vramcalc.results.planning import FitResult

    _count("max_gpus", max_gpus)
    loaded, source, name = _load(spec)
    kept = _reserve(reserve)
    budget = _target(loaded, source, gpu, kept)
    report = fit_report(loaded, budget, reserve_for(loaded, kept), DEFAULT_MAX_GPUS if max_gpus is None else max_gpus)
    return FitResult.of(source, name, report)


@_bounded_errors
def sweep(
    spec: SpecInput,
    gpu: CardInput | None = None,
    *,
    batch_sizes: ValuesInput,
    seq_lens: ValuesInput | None = None,
    reserve: str | None = None,
) -> SweepResult:
    """Totals over batch sizes x sequence lengths (``vramcalc sweep --json``), each point as
    :func:`estimate` gives it.

    ``batch_sizes`` and ``seq_lens`` are lists of ints or the flags' text (``"1,2,4,8k"``); they are sorted
    and duplicates dropped; ``seq_lens`` None keeps the spec's length. ``result.points`` holds
    ``batch_size``, ``seq_len`` and ``total_bytes`` for every pair, batch size outer; with a card (``gpu``,
    else the spec's ``target.gpu``) each point's ``fits``, ``needed_bytes`` and ``available_bytes``."""
    from vramcalc.planning.sweep import sweep as run_sweep
    from vramcalc.results.planning import SweepResult

    _values("batch_sizes", batch_sizes)
    if seq_lens is not None:
        _values("seq_lens", seq_lens)
    loaded, source, _ = _load(spec)
    budget = _target(loaded, source, gpu, _reserve(reserve))
    return SweepResult.of(source, run_sweep(loaded, batch_sizes, seq_lens, budget))


@_bounded_errors
def plan(
    spec: SpecInput,
    gpu: CardInput | None = None,
    *,
    reserve: str | None = None,
    gpus: int | None = None,
    max_gpus: int | None = None,
    top: int = 10,
    global_batch: int | None = None,
) -> PlanResult:
    """Multi-GPU plans whose per-GPU total fits the card (``vramcalc plan --json``).

    On exactly ``gpus`` GPUs, or the fewest GPUs up to ``max_gpus`` (default 64; give one of the two), the
    ``top`` cheapest layouts that fit: ZeRO/FSDP, tensor and pipeline parallelism, data-parallel degree, and
    for training checkpointing and micro-batch. ``global_batch`` holds that many sequences per optimizer
    step over all GPUs instead of the spec's batch per GPU. ``result.plans`` lists them (``gpus``,
    ``parallel``: the spec's section, ``needed_bytes`` per GPU, ``relative_cost``), ``result.min_gpus`` is the
    fewest GPUs and ``result.closest`` the nearest miss when none fits. ``gpu`` defaults to the spec's
    ``target.gpu``."""
    from vramcalc.planning.plan_layouts import plans_for
    from vramcalc.results.planning import PlanResult

    for name, value in (("gpus", gpus), ("max_gpus", max_gpus), ("global_batch", global_batch)):
        _count(name, value)
    _count("top", top, optional=False)
    loaded, source, _ = _load(spec)
    budget = _budget(loaded, source, gpu, _reserve(reserve))
    search = plans_for(loaded, budget, gpus=gpus, max_gpus=max_gpus, top=top, global_batch=global_batch)
    return PlanResult.of(search)


@_bounded_errors
def models(query: str | None = None) -> list[ModelResult]:
    """The bundled model catalog (``vramcalc models [QUERY] --json``): every entry, or those whose id, alias,
    name, family or repository holds ``query`` or each of its words (``"qwen 7b"``). Each
    :class:`~vramcalc.results.catalog.ModelResult` holds the entry's ``id`` (what a spec's ``model:``
    takes), ``published_params``, ``context_length``, ``layers``, ``heads``, ``kv_heads``... Nothing matching
    is a :class:`~vramcalc.errors.SpecError` listing the closest names."""
    from vramcalc.results.catalog import ModelResult
    from vramcalc.spec.presets import matching

    if query is not None and not isinstance(query, str):
        raise TypeError(f"query: expected text, got {type(query).__name__}")
    return [ModelResult.of(entry) for entry in matching(query or "")]


@_bounded_errors
def import_config(config: str | os.PathLike[str] | Mapping[str, Any]) -> ImportResult:
    """A spec from a Hugging Face transformers ``config.json`` (``vramcalc import``), offline; or from a
    model by name: a checkpoint folder or file, a catalog name or a Hub id (docs/models.md).

    ``config`` is the file's path, a model's name, or a config's contents as a mapping. ``result.spec`` is
    the spec (name, model and an example workload to edit) as a mapping every function here takes,
    ``result.notes`` what it leaves out, and ``result.to_yaml()`` the spec file the command writes. A
    config vramcalc cannot import raises :class:`~vramcalc.errors.SpecError` naming the field."""
    from vramcalc.results.imported import ImportResult
    from vramcalc.spec.hf_import import import_spec, read_config

    if isinstance(config, str | os.PathLike):
        path = Path(config)
        from vramcalc.spec.model_name import import_named, is_config_file

        if is_config_file(str(config)):
            return ImportResult.of(import_spec(read_config(path), str(path)))

        return ImportResult.of(import_named(str(config), str(config)))
    if isinstance(config, Mapping):
        return ImportResult.of(import_spec(dict(config), NOT_A_CONFIG))
    raise TypeError(f"config: expected a path or a mapping, got {type(config).__name__}")


@_bounded_errors
def bandwidth(
    gpu: CardInput | None = None,
    *,
    spec: SpecInput | None = None,
    params: str | int | None = None,
    dtype: str | None = None,
    weights: str | int | None = None,
    batch: int | None = None,
    efficiency: str | float | None = None,
    host_efficiency: str | float | None = None,
    bus_width: str | int | None = None,
    memory_type: str | None = None,
    memory_clock: str | None = None,
    data_rate: str | None = None,
    clock_source: str | None = None,
) -> BandwidthResult:
    """Memory bandwidth of a card and, given weights, the time to stream them (``vramcalc bandwidth --json``).

    The card: ``gpu`` (a name or a :class:`GPU`), or a custom one from ``bus_width`` (bits) with
    ``data_rate`` (``"21Gbps"``) or with ``memory_type`` and ``memory_clock`` (``"1750MHz"``, read by
    ``clock_source`` ``"gpuz"`` or ``"nvidia-smi"``), else the spec's ``target.gpu``. The weights, at most
    one way: ``spec`` (with ``dtype``: fp32, bf16 or fp16 as its precision, fp8, int8 or int4 as its
    quantization), ``params`` (``"70B"`` or an int) with ``dtype`` (default fp16), or ``weights``
    (``"140GB"`` or int bytes).
    ``efficiency`` and ``host_efficiency`` are shares of the peak rates (``"85%"`` or 0.85). Returns
    ``result.bandwidth_bytes_per_s`` and, with weights, ``weight_stream_s`` (seconds per decode step),
    ``decode_tokens_per_s_upper_bound``, ``host_transfer_s`` and ``roofline``."""
    from vramcalc.hardware import bandwidth as bw
    from vramcalc.hardware.catalog import GPU
    from vramcalc.hardware.custom import CustomCard
    from vramcalc.planning.stream import select_weights
    from vramcalc.results.bandwidth import BandwidthResult

    _count("batch", batch)
    if gpu is not None and not isinstance(gpu, str | GPU | CustomCard):
        raise TypeError(f"gpu: expected a card name, got {type(gpu).__name__}")
    options: list[tuple[str, object, tuple[type, ...]]] = [
        ("dtype", dtype, ()),
        ("memory_type", memory_type, ()),
        ("memory_clock", memory_clock, ()),
        ("data_rate", data_rate, ()),
        ("clock_source", clock_source, ()),
        ("params", params, (int,)),
        ("weights", weights, (int,)),
        ("bus_width", bus_width, (int,)),
        ("efficiency", efficiency, (int, float)),
        ("host_efficiency", host_efficiency, (int, float)),
    ]
    for option, value, types in options:
        _option(option, value, *types)
    custom = {
        "bus_width": None if bus_width is None else str(bus_width),
        "mem_type": memory_type,
        "memory_clock": memory_clock,
        "data_rate": data_rate,
        "clock_source": clock_source,
    }
    if gpu is None and spec is not None and all(value is None for value in custom.values()):
        target = _load(spec)[0].target  # no card named: the spec's target.gpu, as on the command line
        gpu = target.gpu if target is not None else None
    card: GPU | CustomCard | None
    if isinstance(gpu, GPU):
        given = [key for key, value in custom.items() if value is not None]
        if given:
            raise SpecError(f"gpu describes the card already; drop {', '.join(given)}")
        bus, card = gpu.memory_bus, gpu
    else:
        name = gpu.label if isinstance(gpu, CustomCard) else gpu  # a capacity-only card: its bus from the flags
        bus, card, _ = bw.select_card(name, **custom)
    source: str | Path | Spec | None
    if spec is None or isinstance(spec, str):
        source = spec
    elif isinstance(spec, os.PathLike):
        source = Path(spec)
    else:
        source = _load(spec)[0]  # a mapping is validated here; a Spec is used as it is
    load = select_weights(
        source,
        params=None if params is None else str(params),
        dtype=dtype,
        weights=f"{weights}B" if isinstance(weights, int) else weights,
    )
    report = bw.analyse(
        bus,
        load,
        gpu=card,
        batch=batch,
        efficiency=bw.parse_efficiency(_text(efficiency), bw.DEFAULT_MEMORY_EFFICIENCY, "efficiency"),
        host_efficiency=bw.parse_efficiency(_text(host_efficiency), bw.DEFAULT_HOST_EFFICIENCY, "host efficiency"),
    )
    return BandwidthResult.of(report)


def _text(value: str | float | None) -> str | None:
    return None if value is None else str(value)
