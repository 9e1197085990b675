"""Release numbers of the libraries a workload pins in ``versions:`` (bitsandbytes, vLLM, transformers, PEFT,
PyTorch, DeepSpeed, NCCL, FlashInfer), and what a pinned PyTorch release changes in the spec's defaults and rules."""

from __future__ import annotations

import re
from typing import Any

from vramcalc.errors import SpecError

#: ``0.41.1``, ``v0.6.4``, ``4.46.0.dev0``, ``0.45.0+cu121``, ``4.40.0rc1``: major, minor, optional patch,
#: then anything that starts with a separator or a letter (a pre-release is taken as the release it becomes).
_RELEASE = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:[.+-]?[A-Za-z].*|[.+-].*)?$")


def release_key(text: str, library: str, example: str) -> tuple[int, int, int]:
    """``"0.41.1"`` -> (0, 41, 1); raises SpecError naming ``workload.versions.<library>``."""
    match = _RELEASE.match(text.strip())
    if match is None:
        raise SpecError(f"workload.versions.{library}: {text!r} is not a release number (e.g. {example})")
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


#: Libraries whose release a workload may pin in ``versions:`` (where their allocations changed over time).
VERSIONED_LIBRARIES = ("vllm", "bitsandbytes", "transformers", "peft", "torch", "deepspeed", "nccl", "flashinfer")

#: PyTorch 2.0 made ``zero_grad()`` free the gradients (``set_to_none=True``), made the optimizers default to
#: their ``foreach`` implementation on CUDA and added ``scaled_dot_product_attention``.
TORCH_2 = (2, 0, 0)


def known_libraries(value: Any) -> Any:
    """``versions:`` names only libraries whose releases are modelled, each as a string (YAML reads an unquoted
    ``1.10`` as the number 1.1); raises ValueError. Other shapes are left for the field's type to report."""
    if not isinstance(value, dict):
        return value
    for name, release in value.items():
        if name not in VERSIONED_LIBRARIES:
            raise ValueError(f"{name!r} is not a library whose version is modelled ({', '.join(VERSIONED_LIBRARIES)})")
        if isinstance(release, (int, float)) and not isinstance(release, bool):
            raise ValueError(f'{name}: write the release in quotes ({name}: "{release}"); YAML reads 1.10 as 1.1')
    return value


#: A release of each library, for error messages.
RELEASE_EXAMPLES = {"torch": "1.13.1", "deepspeed": "0.8.3", "peft": "0.19.1", "nccl": "2.21.5", "flashinfer": "0.3.1"}


def pinned_release(versions: dict[str, str] | None, library: str) -> tuple[int, int, int] | None:
    """The release ``workload.versions.<library>`` pins, or None (today's behaviour; for NCCL, the one
    PyTorch brings)."""
    text = (versions or {}).get(library)
    return None if text is None else release_key(text, library, RELEASE_EXAMPLES[library])


def torch_release(versions: dict[str, str] | None) -> tuple[int, int, int] | None:
    return pinned_release(versions, "torch")


def deepspeed_release(versions: dict[str, str] | None) -> tuple[int, int, int] | None:
    return pinned_release(versions, "deepspeed")


def peft_release(versions: dict[str, str] | None) -> tuple[int, int, int] | None:
    return pinned_release(versions, "peft")


def nccl_release(versions: dict[str, str] | None) -> tuple[int, int, int] | None:
    return pinned_release(versions, "nccl")


def zeroes_gradients_in_place(versions: dict[str, str] | None) -> bool:
    """Before PyTorch 2.0 ``zero_grad()`` zeroed the gradients in place (``set_to_none=False``), so they stay
    allocated from one step to the next, through the forward pass."""
    release = torch_release(versions)
    return release is not None and release < TORCH_2


def torch_defaults(data: object) -> object:
    """A workload mapping with the defaults of a pinned PyTorch before 2.0: eager attention (there is no SDPA)
    and the optimizers' per-tensor loop (``foreach`` became the default in 2.0). An explicit ``attention:
    sdpa`` is refused; an unreadable release is left for :func:`torch_rules` to report."""
    if not isinstance(data, dict) or not isinstance(data.get("versions"), dict):
        return data
    text = data["versions"].get("torch")
    if not isinstance(text, str):
        return data
    try:
        old = release_key(text, "torch", RELEASE_EXAMPLES["torch"]) < TORCH_2
    except SpecError:
        return data
    if not old:
        return data
    if data.get("attention") == "sdpa":
        raise ValueError(f"attention: sdpa needs PyTorch 2.0 or later (versions.torch is {text}); use eager")
    return {"attention": "eager", "optimizer_impl": "forloop", **data}


def release_rules(versions: dict[str, str] | None, peft_adapter: bool) -> None:
    """The pinned PyTorch, NCCL and PEFT releases are release numbers, and a pinned PEFT release has a PEFT
    adapter to apply to (``peft_adapter``); raises ValueError("versions.LIBRARY: ...") naming the key. What a
    pinned release cannot run is refused by the library's module in vramcalc/stacks/."""
    try:
        for library in ("torch", "nccl", "peft", "flashinfer"):
            pinned_release(versions, library)
    except SpecError as exc:
        raise ValueError(str(exc).removeprefix("workload.")) from None
    peft = (versions or {}).get("peft")
    if peft is not None and not peft_adapter:
        raise ValueError(f"versions.peft: {peft} names a PEFT release, but the workload has no PEFT adapter")
