"""Rules of the training-technique keys of ``workload`` (``optimizer_in_backward``,
``optimizer_offload``, ``activation_offloading``, ``cross_entropy``, ``keep_outputs``; modelled in
vramcalc/stacks/techniques.py). Kept apart from :mod:`vramcalc.spec.models`, which calls them.
"""

from typing import Any

from vramcalc.choices import TORCHAO_INT8, Architecture, CrossEntropy, Head, Mode, Precision

#: The technique keys, in the order their errors are reported.
TECHNIQUE_KEYS = (
    "optimizer_in_backward",
    "optimizer_offload",
    "activation_offloading",
    "cross_entropy",
    "keep_outputs",
)


def given_techniques(wl: Any) -> list[str]:
    """The technique keys a workload turns on (``false``, ``none`` and ``standard`` are off)."""
    on = {
        "optimizer_in_backward": bool(wl.optimizer_in_backward),
        "optimizer_offload": wl.optimizer_offload == "cpu",
        "activation_offloading": bool(wl.activation_offloading),
        "cross_entropy": wl.cross_entropy not in (None, CrossEntropy.standard),
        "keep_outputs": bool(wl.keep_outputs),
    }
    return [key for key in TECHNIQUE_KEYS if on[key]]


def workload_rules(wl: Any) -> None:
    """Rules within ``workload``; raises ValueError("KEY: ...")."""
    given = given_techniques(wl)
    if given and wl.mode is not Mode.train:
        raise ValueError(f"{given[0]}: only valid with mode: train")
    if wl.optimizer_in_backward and wl.optimizer_offload == "cpu":
        raise ValueError("optimizer_offload: not modelled together with optimizer_in_backward")
    if wl.adapter is not None:
        for key in TECHNIQUE_KEYS[:-1]:  # keep_outputs: LoRA and DoRA (vramcalc/families/llm.py)
            if key in given:
                raise ValueError(f"{key}: only modelled for full fine-tuning (not with adapter)")


def one_gpu_only(wl: Any) -> str | None:
    """Why the workload is modelled on one GPU only, or None: the reason a ``parallel:`` section is refused
    when the spec is read (:func:`spec_rules`, :func:`vramcalc.spec.llm.litgpt_runtime_rules`,
    :func:`vramcalc.spec.llm.torchao_rules`), for the parallel sections ``plan`` and ``fit`` add later."""
    for key in given_techniques(wl):
        if key == "optimizer_offload":
            return "workload.optimizer_offload: one GPU only; with parallel: use parallel.offload.optimizer"
        return f"workload.{key}: not modelled with parallel: (one GPU, without mixed-* precision)"
    if getattr(wl, "paged_states", None) is not None:
        return "workload.paged_states: one GPU only (not modelled with parallel:)"
    if wl.runtime is not None and wl.runtime.value == "litgpt":
        return "workload.runtime: litgpt across several GPUs (parallel:) is not modelled"
    q = wl.quantization
    if q is not None and q.method in TORCHAO_INT8:
        return f"workload.quantization: torchao {q.method.value} across several GPUs (parallel:) is not modelled"
    return None


def spec_rules(spec: Any) -> None:
    """Rules between the technique keys and the rest of the spec; raises ValueError("workload.KEY: ...")."""
    wl, model, parallel = spec.workload, spec.model, spec.parallel
    given = given_techniques(wl)
    if not given:
        return
    micro = parallel.micro_batches if parallel is not None else None
    if wl.optimizer_in_backward and micro is not None and micro > 1:
        raise ValueError(
            f"workload.optimizer_in_backward: steps each parameter as soon as its gradient exists, so it cannot "
            f"accumulate gradients over parallel.micro_batches {micro} (torchtune refuses it too)"
        )
    if parallel is not None:
        raise ValueError(one_gpu_only(wl))
    mixed = wl.precision in (Precision.mixed_fp16, Precision.mixed_bf16)
    for key in given:
        if key != "optimizer_offload" and mixed:
            precision = wl.precision.value
            raise ValueError(
                f"workload.{key}: not modelled with precision: {precision} (one GPU, without mixed-* precision)"
            )
    if model.architecture is Architecture.resnet:
        raise ValueError(f"workload.{given[0]}: not modelled for architecture: resnet (transformers only)")
    decoder = model.architecture in (None, Architecture.decoder)
    no_loss = wl.cross_entropy is CrossEntropy.none  # backward from the logits: any model with an LM head
    for key in ("activation_offloading", "cross_entropy"):
        if key in given and not decoder and not (key == "cross_entropy" and no_loss):
            raise ValueError(f"workload.{key}: modelled for decoder language models only (as torchtune trains them)")
    if "activation_offloading" in given and model.experts is not None:
        raise ValueError("workload.activation_offloading: not modelled for mixture-of-experts models")
    if "cross_entropy" in given and model.head not in (None, Head.lm):
        raise ValueError("workload.cross_entropy: needs head: lm (the loss over the vocabulary)")
    if "keep_outputs" in given and model.head not in (None, Head.lm):
        raise ValueError("workload.keep_outputs: needs head: lm (the outputs it keeps are the logits and KV cache)")
