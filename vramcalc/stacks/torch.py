"""PyTorch releases (``workload.versions.torch``): what a pinned release changes in a step.

* **Gradients zeroed in place before 2.0.** ``zero_grad()`` zeroed the gradients in place
  (``set_to_none=False`` was the default of both ``Optimizer.zero_grad`` and ``Module.zero_grad``; 2.0
  changed it), so a loop on such a release holds every gradient from the start of a step. The same pin makes
  eager attention and the per-tensor optimizer loop the defaults (SDPA and the ``foreach`` default arrived
  in 2.0).
* **``mean`` kept its input for backward before 2.2.** ``mean.dim``'s derivative saved ``self`` although the
  gradient needs only its size (fixed for 2.2: github.com/pytorch/pytorch/pull/109935): a norm written as
  ``torch.mean(x * x, ...)`` keeps the squared input. Which model code does so is its stack module's fact
  (litgpt's ``RMSNorm``: :func:`vramcalc.stacks.litgpt.model_code`).
* **Every kernel module loaded at start-up before 1.13**, which sets ``CUDA_MODULE_LOADING=LAZY`` unless the
  user chose otherwise: the CUDA context is 1,343 MiB, measured on a V100 with 2022 PyTorch (measured.yaml
  case hf-perf-bert-large-load-context-only); DeepSpeed's 2020 out-of-memory message on a 32 GB V100 leaves
  1.26 GiB of the card outside PyTorch's reserve (case deepspeed-zero-tutorial-gpt2-1.5b-dp8-noZeRO-OOM).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from vramcalc.core.reserve import DEFAULT_CONTEXT_NOTE, DEFAULT_CUDA_CONTEXT
from vramcalc.core.stack import Stack
from vramcalc.errors import SpecError
from vramcalc.spec.models import Spec, Workload
from vramcalc.spec.versions import TORCH_2, torch_release, zeroes_gradients_in_place
from vramcalc.units import MiB

#: PyTorch 2.1 added ``Tensor.register_post_accumulate_grad_hook``, which an optimizer step in backward needs.
TORCH_POST_ACCUMULATE_HOOK = (2, 1, 0)
#: Technique keys whose libraries need PyTorch 2 (torchao, torchtune, Liger), as (key, value when on).
_TORCH_2_TECHNIQUES = (
    ("optimizer_offload", "cpu"),
    ("activation_offloading", True),
    ("cross_entropy", "chunked"),
    ("cross_entropy", "fused_linear"),
)


#: The first release whose ``mean`` no longer saves its input for backward (module docstring).
MEAN_FREES_INPUT_TORCH = (2, 2, 0)


def mean_saves_input(workload: Workload) -> bool:
    """Whether ``torch.mean`` keeps its input for backward on the release ``workload.versions.torch`` pins
    (before 2.2; today's release, when none is pinned, does not)."""
    release = torch_release(workload.versions)
    return release is not None and release < MEAN_FREES_INPUT_TORCH


EAGER_LOADING_CUDA_CONTEXT = 1343 * MiB
LAZY_LOADING_TORCH = (1, 13, 0)
EAGER_CONTEXT_NOTE = (
    "CUDA context 1,343 MiB: PyTorch before 1.13 loads every kernel at start-up (measured on a V100 "
    "with 2022 PyTorch; set overhead.cuda_context)"
)


@dataclass(frozen=True)
class TorchFacts:
    """What the PyTorch release a workload runs on changes (defaults: today's)."""

    zero_grad_in_place: bool = False
    cuda_context_bytes: int = DEFAULT_CUDA_CONTEXT
    cuda_context_note: str = DEFAULT_CONTEXT_NOTE
    workload_notes: tuple[str, ...] = ()


def torch_note(wl: Workload) -> str:
    """What a pinned PyTorch before 2.0 changes, in words (for the estimate's assumptions)."""
    kept = "zero_grad() zeroes the gradients in place, so they stay allocated through the forward pass; " * (
        wl.mode.value == "train"
    )
    defaults = "attention and optimizer_impl default to eager and forloop"
    return f"torch {(wl.versions or {})['torch']} (workload.versions.torch): {kept}{defaults}"


def facts(workload: Workload) -> TorchFacts:
    """The facts of the release ``workload.versions.torch`` pins (today's when none is)."""
    release = torch_release(workload.versions)
    if release is None:
        return TorchFacts()
    in_place = zeroes_gradients_in_place(workload.versions)
    eager = release < LAZY_LOADING_TORCH
    return TorchFacts(
        zero_grad_in_place=in_place,
        cuda_context_bytes=EAGER_LOADING_CUDA_CONTEXT if eager else DEFAULT_CUDA_CONTEXT,
        cuda_context_note=EAGER_CONTEXT_NOTE if eager else DEFAULT_CONTEXT_NOTE,
        workload_notes=(torch_note(workload),) if in_place else (),
    )


def refine(stack: Stack, workload: Workload) -> Stack:
    """``stack`` with what the pinned release changes (:func:`facts`)."""
    pinned = facts(workload)
    return replace(
        stack,
        zero_grad_in_place=pinned.zero_grad_in_place,
        cuda_context_bytes=pinned.cuda_context_bytes,
        cuda_context_note=pinned.cuda_context_note,
        workload_notes=pinned.workload_notes,
    )


def check_keys(spec: Spec) -> None:
    """What the pinned PyTorch release cannot run, refused with one line naming the key: an optimizer step in
    backward before 2.1, torchao's, torchtune's and Liger's techniques before 2.0, and mixture-of-experts
    training with the gradients zeroed in place (several GPUs and mixed-* precision:
    vramcalc/parallel/rules.py)."""
    wl = spec.workload
    release = torch_release(wl.versions)
    if release is None:
        return
    text = (wl.versions or {})["torch"]
    if wl.optimizer_in_backward and release < TORCH_POST_ACCUMULATE_HOOK:
        raise SpecError(
            f"workload.optimizer_in_backward: needs PyTorch 2.1 or later (register_post_accumulate_grad_hook); "
            f"versions.torch is {text}"
        )
    for key, on in _TORCH_2_TECHNIQUES:
        if release < TORCH_2 and getattr(wl, key) == on:
            raise SpecError(f"workload.{key}: {on} needs PyTorch 2 (versions.torch is {text})")
    if wl.mode.value == "train" and zeroes_gradients_in_place(wl.versions) and spec.model.experts is not None:
        raise SpecError(f"workload.versions.torch: {text} is not modelled for mixture-of-experts training")
