"""The one entry point of the estimators: :func:`estimate` resolves the spec's stack once, finds the family
whose ``applies`` holds first in :data:`FAMILIES` (several GPUs serving, adapters across GPUs, any other
plan across GPUs, ResNet, LLM keys, a dense transformer) and returns its
:class:`~vramcalc.families.estimate.Estimate`.

A family is a module of this package with a function ``(spec, stack, target) -> Estimate``; a new one is a
new module and one row of :data:`FAMILIES`, before the rows it narrows.

Internal: no stability promise between releases; the public surface is ``vramcalc`` (its ``__all__``, with
:mod:`vramcalc.api`), the models of :mod:`vramcalc.results` and the command line.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from vramcalc.choices import Architecture, Mode, Precision
from vramcalc.core.stack import Device, Stack
from vramcalc.families.estimate import Estimate
from vramcalc.families.resolve import stack_of
from vramcalc.families.target import Target
from vramcalc.spec.models import Spec, uses_llm_keys


@dataclass(frozen=True)
class Family:
    """One estimator: where it applies, and the function of a module of this package that estimates it
    (imported when a spec needs it)."""

    name: str
    applies: Callable[[Spec], bool]
    module: str
    function: str

    def estimate(self, spec: Spec, stack: Stack, target: Target) -> Estimate:
        run: Callable[[Spec, Stack, Target], Estimate] = getattr(importlib.import_module(self.module), self.function)
        return run(spec, stack, target)


def _serving_across_gpus(spec: Spec) -> bool:
    return spec.parallel is not None and spec.workload.mode is Mode.inference and uses_llm_keys(spec)


def _adapters_across_gpus(spec: Spec) -> bool:
    wl = spec.workload
    return spec.parallel is not None and wl.mode is Mode.train and (wl.adapter or wl.quantization) is not None


def _per_rank(spec: Spec) -> bool:
    return spec.parallel is not None or spec.workload.precision in (Precision.mixed_fp16, Precision.mixed_bf16)


def _resnet(spec: Spec) -> bool:
    return spec.model.architecture is Architecture.resnet


def _anything(spec: Spec) -> bool:
    return True


#: The families, first match wins: each row narrows what the rows below it see.
FAMILIES: tuple[Family, ...] = (
    Family("serving across GPUs", _serving_across_gpus, "vramcalc.families.serving", "estimate"),
    Family("adapters across GPUs", _adapters_across_gpus, "vramcalc.families.lora_ranks", "estimate"),
    Family("per GPU of a plan", _per_rank, "vramcalc.families.per_rank", "estimate"),
    Family("ResNet", _resnet, "vramcalc.families.dense", "estimate_resnet"),
    Family("LLM workload", uses_llm_keys, "vramcalc.families.llm", "estimate"),
    Family("dense transformer", _anything, "vramcalc.families.dense", "estimate_dense"),
)


def family_of(spec: Spec) -> Family:
    """The family that estimates ``spec``."""
    return next(family for family in FAMILIES if family.applies(spec))


def estimate(
    spec: Spec, *, hopper_or_newer: bool = True, card: Device | None = None, interconnect: str = "nvswitch"
) -> Estimate:
    """Estimate the peak allocated memory of one step of ``spec``; ``card``: the GPU it is checked on, where
    one is named (vLLM's default batch sizes depend on it, vramcalc/stacks/vllm.py); ``interconnect``: how that
    card's GPUs talk, unless the spec's ``parallel.interconnect`` says (NCCL's buffers across GPUs)."""
    from vramcalc.stacks.transformers import attention_run

    spec = attention_run(spec)
    target = Target(hopper_or_newer, card, interconnect)
    return family_of(spec).estimate(spec, stack_of(spec), target)
