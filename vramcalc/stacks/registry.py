"""The built-in stacks, one row each: the library, the spec keys it owns, when it applies, and the module of
vramcalc/stacks/ that models it. A module's protocol, each part where the library has one:

* ``refine(stack, workload) -> Stack``: its facts and policies on the resolved stack (:func:`resolve_stack`);
* ``check_keys(spec)``: the rules of the keys it owns, refused with one line naming the key, before the spec
  is resolved (``keys_checked``: when they concern a workload);
* ``check_spec(spec, shape)``: what it does not model on the resolved shape, refused the same way;
* a quantization layout (:data:`vramcalc.stacks.layouts.QUANT_LAYOUTS`), the model's code facts
  (:func:`model_code`), and the phases or terms only it adds, which the families call.

Adding a runtime, a library release or a method is one module and one row here; the exhaustiveness tests fail
until every runtime, quantization method and adapter type has its row.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from vramcalc.choices import TORCHAO_INT8, AdapterType, Attention, Checkpointing, Mode, Optimizer, QuantMethod, Runtime
from vramcalc.core.shape import ModelShape
from vramcalc.core.stack import Stack
from vramcalc.spec.llamacpp import LLAMACPP_KEYS, OTHER_RUNTIME_KEYS
from vramcalc.spec.llm import BNB_4BIT, GGUF
from vramcalc.spec.models import ModelSpec, Spec, Workload, is_generation, runs_llamacpp
from vramcalc.spec.techniques import TECHNIQUE_KEYS, given_techniques

if TYPE_CHECKING:
    from vramcalc.llm.generation import StaticCache

#: vLLM's workload keys (its paging and scheduler; the KV dtype transformers reads too).
VLLM_KEYS = OTHER_RUNTIME_KEYS
#: bitsandbytes' quantization methods.
BNB_METHODS = (*BNB_4BIT, QuantMethod.int8)
#: The PEFT methods of vramcalc/stacks/peft_more.py.
PEFT_MORE = (AdapterType.vera, AdapterType.loha, AdapterType.adalora, AdapterType.tinylora, AdapterType.osf)


def serving_runtime(workload: Workload) -> Runtime | None:
    """The runtime that serves a generation: llama.cpp for a GGUF file (unless ``runtime`` says otherwise),
    else ``runtime``, vLLM by default; None when the workload generates nothing."""
    if workload.mode is not Mode.inference or not is_generation(workload):
        return None
    if runs_llamacpp(workload):
        return Runtime.llama_cpp
    return workload.runtime or Runtime.vllm


def loads_plain_weights(workload: Workload) -> bool:
    """The weights are 16/32-bit PyTorch tensors placed through the caching allocator one by one: not
    quantized, and not served by vLLM (its own weight loader and profile) or llama.cpp."""
    if workload.quantization is not None:
        return False
    runs = workload.runtime or Runtime.vllm
    return not (is_generation(workload) and runs in (Runtime.vllm, Runtime.llama_cpp))


@dataclass(frozen=True)
class Library:
    """One built-in stack: its name, the spec keys it owns (for the docs and the error lines that name them),
    when a workload uses it, its module, and which parts of the protocol the module has (``refines``: a
    ``refine``; ``checks``: a ``check_spec``; ``tests/stacks/test_registry.py`` holds the flags to the
    module), so resolving a spec asks only the libraries that can change its stack or refuse it."""

    name: str
    module: str
    keys: tuple[str, ...]
    applies: Callable[[Workload], bool]
    refines: bool = False
    checks: bool = False
    keys_checked: Callable[[Workload], bool] | None = None

    def refine(self, stack: Stack, workload: Workload) -> Stack:
        """``stack`` with this library's facts (its module's ``refine``; unchanged where it has none)."""
        refine: Callable[[Stack, Workload], Stack] | None = _function(self.module, "refine")
        return stack if refine is None else refine(stack, workload)

    def check(self, spec: Spec, shape: ModelShape) -> None:
        """Refuse what this library does not model (its module's ``check_spec``, where it has one)."""
        check: Callable[[Spec, ModelShape], None] | None = _function(self.module, "check_spec")
        if check is not None:
            check(spec, shape)

    def check_keys(self, spec: Spec) -> None:
        """Refuse what breaks the rules of this library's keys (its module's ``check_keys``)."""
        check: Callable[[Spec], None] = _function(self.module, "check_keys")
        check(spec)


@functools.cache
def _function(module: str, name: str) -> Any:
    """A function of a stack module, or None where it has none (the module imported once, when first asked)."""
    return getattr(importlib.import_module(module), name, None)


def _pins(library: str) -> Callable[[Workload], bool]:
    return lambda wl: library in (wl.versions or {})


def _serves(runtime: Runtime) -> Callable[[Workload], bool]:
    return lambda wl: serving_runtime(wl) is runtime


def _litgpt_model(wl: Workload) -> bool:
    """litgpt's own model code runs the model: ``runtime: litgpt`` or ``adapter.framework: litgpt``."""
    return wl.runtime is Runtime.litgpt or (wl.adapter is not None and wl.adapter.framework == "litgpt")


def _llamacpp_keys(wl: Workload) -> bool:
    """llama.cpp's rules concern a workload that runs in it, or gives one of its keys."""
    return runs_llamacpp(wl) or any(getattr(wl, key) is not None for key in LLAMACPP_KEYS)


def _quantizes(*methods: QuantMethod) -> Callable[[Workload], bool]:
    return lambda wl: wl.quantization is not None and wl.quantization.method in methods


def _pages_states(wl: Workload) -> bool:
    """A bitsandbytes paged optimizer (its states in CUDA managed memory)."""
    return wl.optimizer in (Optimizer.paged_adamw_8bit, Optimizer.paged_adamw_32bit)


def _bnb_optimizer(wl: Workload) -> bool:
    """A bitsandbytes optimizer: 8-bit (its states in blocks of the release's size) or paged."""
    return wl.optimizer is Optimizer.adamw_8bit or _pages_states(wl)


def _torchtune_lora(wl: Workload) -> bool:
    """torchtune's LoRA recipe: ``adapter.framework: torchtune``."""
    return wl.adapter is not None and wl.adapter.framework == "torchtune"


def _adapts(*types: AdapterType) -> Callable[[Workload], bool]:
    return lambda wl: wl.adapter is not None and wl.adapter.type in types


_LORA = (AdapterType.lora, AdapterType.dora, AdapterType.lora_fa)

#: The built-in stacks, in the order their facts are applied.
LIBRARIES: tuple[Library, ...] = (
    Library(
        "PyTorch releases",
        "vramcalc.stacks.torch",
        ("versions.torch",),
        _pins("torch"),
        refines=True,
        keys_checked=_pins("torch"),
    ),
    Library(
        "transformers releases",
        "vramcalc.stacks.transformers",
        ("versions.transformers", "cache", "max_cache_len"),
        lambda wl: True,
        keys_checked=lambda wl: wl.cache is not None or wl.max_cache_len is not None,
    ),
    Library(
        "flash-attn (transformers' flash_attention_2)",
        "vramcalc.stacks.flash_attn",
        ("attention",),
        lambda wl: wl.attention is Attention.flash,
        checks=True,
    ),
    Library(
        "torchtune, torchao and Liger training techniques",
        "vramcalc.stacks.techniques",
        TECHNIQUE_KEYS,
        lambda wl: bool(given_techniques(wl)),
        refines=True,
        keys_checked=lambda wl: bool(given_techniques(wl)),
    ),
    Library(
        "torch.compile (inductor)",
        "vramcalc.stacks.inductor",
        ("compile",),
        lambda wl: wl.compile,
        refines=True,
        checks=True,
        keys_checked=lambda wl: wl.compile,
    ),
    Library(
        "torchtitan's selective checkpointing",
        "vramcalc.stacks.sac",
        ("gradient_checkpointing",),
        lambda wl: wl.gradient_checkpointing is Checkpointing.selective_op,
        refines=True,
        checks=True,
    ),
    Library(
        "vLLM",
        "vramcalc.stacks.vllm",
        (*VLLM_KEYS, "versions.vllm", "versions.flashinfer"),
        _serves(Runtime.vllm),
        refines=True,
        keys_checked=lambda wl: any(getattr(wl, key) is not None for key in VLLM_KEYS) or _pins("flashinfer")(wl),
    ),
    Library(
        "llama.cpp",
        "vramcalc.stacks.llamacpp",
        LLAMACPP_KEYS,
        _serves(Runtime.llama_cpp),
        refines=True,
        keys_checked=_llamacpp_keys,
    ),
    Library("GGUF files", "vramcalc.stacks.gguf", ("quantization",), _quantizes(*GGUF)),
    Library(
        "gpt-fast",
        "vramcalc.stacks.gpt_fast",
        ("runtime", "max_cache_len"),
        _serves(Runtime.gpt_fast),
        keys_checked=lambda wl: wl.runtime is Runtime.gpt_fast,
    ),
    Library(
        "torchtune's generate and full fine-tuning",
        "vramcalc.stacks.torchtune",
        ("runtime", "max_cache_len"),
        lambda wl: wl.runtime is Runtime.torchtune,
        refines=True,
        keys_checked=lambda wl: wl.runtime is Runtime.torchtune,
    ),
    Library(
        "litgpt",
        "vramcalc.stacks.litgpt",
        ("runtime", "adapter.framework"),
        _litgpt_model,
        keys_checked=_litgpt_model,
    ),
    Library(
        "torchtune's LoRA and QLoRA (torchao NF4Tensor)",
        "vramcalc.stacks.torchtune_lora",
        ("adapter.framework", "quantization"),
        _torchtune_lora,
        keys_checked=_torchtune_lora,
    ),
    Library(
        "bitsandbytes",
        "vramcalc.stacks.bnb",
        ("quantization", "versions.bitsandbytes", "optimizer", "paged_states"),
        lambda wl: (
            (_quantizes(*BNB_METHODS)(wl) and not _torchtune_lora(wl))
            or "bitsandbytes" in (wl.versions or {})
            or _bnb_optimizer(wl)
        ),
        refines=True,
        keys_checked=lambda wl: wl.paged_states is not None,
    ),
    Library(
        "torchao quantization",
        "vramcalc.stacks.torchao",
        ("quantization",),
        _quantizes(QuantMethod.int4, *TORCHAO_INT8),
        keys_checked=_quantizes(QuantMethod.int4, *TORCHAO_INT8),
    ),
    Library(
        "GPTQ and AWQ checkpoints",
        "vramcalc.stacks.gptq",
        ("quantization",),
        _quantizes(QuantMethod.gptq, QuantMethod.awq),
    ),
    Library("FP8 checkpoints", "vramcalc.stacks.fp8", ("quantization",), _quantizes(QuantMethod.fp8)),
    Library(
        "PEFT LoRA",
        "vramcalc.stacks.peft_lora",
        ("adapter",),
        lambda wl: _adapts(*_LORA)(wl) and not _torchtune_lora(wl),
    ),
    Library(
        "PEFT methods",
        "vramcalc.stacks.peft_methods",
        ("adapter", "versions.peft"),
        _adapts(*(t for t in AdapterType if t not in _LORA)),
    ),
    Library(
        "PEFT's VeRA, LoHa, AdaLoRA, TinyLoRA, OSF", "vramcalc.stacks.peft_more", ("adapter",), _adapts(*PEFT_MORE)
    ),
    Library("PEFT's BOFT", "vramcalc.stacks.peft_boft", ("adapter",), _adapts(AdapterType.boft)),
    Library(
        "DeepSpeed ZeRO-3",
        "vramcalc.stacks.zero3",
        ("parallel.zero3", "versions.deepspeed"),
        _pins("deepspeed"),
        keys_checked=_pins("deepspeed"),
    ),
    Library("NCCL", "vramcalc.stacks.nccl", ("versions.nccl", "parallel.interconnect", "overhead.nccl"), _pins("nccl")),
)


_REFINING = tuple(library for library in LIBRARIES if library.refines)
_CHECKING = tuple(library for library in LIBRARIES if library.checks)
_KEYS_CHECKING = tuple(library for library in LIBRARIES if library.keys_checked is not None)

#: The stack module that models each runtime (its generation's allocations; ``hf`` and ``hf-legacy`` are
#: transformers' ``generate``).
RUNTIMES: dict[Runtime, str] = {
    Runtime.vllm: "vramcalc.stacks.vllm",
    Runtime.llama_cpp: "vramcalc.stacks.llamacpp",
    Runtime.litgpt: "vramcalc.stacks.litgpt",
    Runtime.hf: "vramcalc.stacks.transformers",
    Runtime.hf_legacy: "vramcalc.stacks.transformers",
    Runtime.gpt_fast: "vramcalc.stacks.gpt_fast",
    Runtime.torchtune: "vramcalc.stacks.torchtune",
}


def static_cache(spec: Spec, shape: ModelShape) -> StaticCache | None:
    """The static KV cache the spec's runtime sets up before the prefill (its module's ``static_cache``:
    transformers' ``cache: static``, gpt-fast's and torchtune's ``setup_caches``), or None where the runtime's
    cache is its own (dynamic, paged)."""
    runtime = serving_runtime(spec.workload)
    module = RUNTIMES.get(runtime) if runtime is not None else None
    size: Callable[[Spec, ModelShape], StaticCache | None] | None = (
        None if module is None else _function(module, "static_cache")
    )
    return None if size is None else size(spec, shape)


def resolve_stack(spec: ModelSpec, workload: Workload) -> Stack:
    """The stack a workload runs on: the runtime that serves it and how its weights load, then the facts of
    every library it uses (:data:`LIBRARIES`): the PyTorch release it pins, the training techniques it turns
    on, its checkpointing policy, the runtime's CUDA context and allocator reserve where it has its own."""
    stack = _base_stack(serving_runtime(workload), loads_plain_weights(workload))
    for library in _REFINING:
        if library.applies(workload):
            stack = library.refine(stack, workload)
    return stack


@functools.cache
def _base_stack(runtime: Runtime | None, plain_weights: bool) -> Stack:
    """The stack before any library's facts (one instance for each runtime and weight loading)."""
    return Stack(runtime=runtime, loads_plain_weights=plain_weights)


def technique_notes(workload: Workload) -> list[str]:
    """The assumptions of the training techniques a workload turns on (:func:`vramcalc.stacks.techniques.notes`),
    imported only for a workload that has one."""
    if not given_techniques(workload) and "deepspeed" not in (workload.versions or {}):
        return []
    from vramcalc.stacks import techniques

    return techniques.notes(workload)


def check_keys(spec: Spec) -> None:
    """The rules of each library's keys, for the libraries whose keys concern the spec (each module's
    ``check_keys``), refused with one line naming the key; the spec's own sections check their types and
    shape when it is read (vramcalc/spec/)."""
    for library in _KEYS_CHECKING:
        assert library.keys_checked is not None
        if library.keys_checked(spec.workload):
            library.check_keys(spec)


def check_stack(spec: Spec, shape: ModelShape) -> None:
    """What the libraries a spec uses do not model, refused with one line naming the key (each module's
    ``check_spec``)."""
    for library in _CHECKING:
        if library.applies(spec.workload):
            library.check(spec, shape)


def flash_runs(spec: Spec, shape: ModelShape) -> bool:
    """Whether ``attention: flash`` would run ``spec`` (:func:`vramcalc.stacks.flash_attn.runs`), for the notes
    that suggest it."""
    from vramcalc.stacks import flash_attn

    return flash_attn.runs(spec, shape)


def model_code(spec: ModelSpec, workload: Workload, shape: ModelShape) -> tuple[ModelShape, list[str]]:
    """The model's shape as the code that runs it allocates, and what that code changes, in words: litgpt's
    own model code (``runtime: litgpt``, ``adapter.framework: litgpt``), torchtune's, vLLM's (serving with
    vLLM), else transformers at the release
    ``versions.transformers`` pins (today's when none is)."""
    if _litgpt_model(workload):
        from vramcalc.stacks import litgpt

        shape, _, notes = litgpt.model_code(workload, shape)
        return shape, notes
    if workload.runtime is Runtime.torchtune and workload.mode is Mode.train and workload.adapter is None:
        from vramcalc.stacks import torchtune

        return torchtune.model_code(spec, workload, shape)
    if serving_runtime(workload) is Runtime.vllm:
        from vramcalc.core.workload import DTYPES
        from vramcalc.stacks import vllm

        return vllm.model_code(spec, shape, DTYPES[workload.precision].compute)
    from vramcalc.stacks import flash_attn, transformers

    code, notes = transformers.model_code(spec, workload, shape)
    code, said = flash_attn.model_code(code, workload.attention)
    notes += said
    if code == shape.code:  # today's code: the resolved shape itself, which the formulas' caches know
        return shape, notes
    return replace(shape, code=code), notes
