"""A model read from its files: the layer shape checked against what the files hold, and the files'
figure taken where they differ.

The files are the truth about the weights. Where the modelled layers count within
:data:`TOLERANCE` of the files' parameters, the estimate is the modelled one (every path of vramcalc
works on it). Past it, the weights are the files' count (a multimodal checkpoint's vision tower,
an architecture vramcalc does not model) and training, which needs every layer's activations and
gradients, is refused. Pre-quantized weights are the files' bytes whenever the workload loads them
as stored.
"""

from __future__ import annotations

from dataclasses import replace

from vramcalc.choices import Mode
from vramcalc.core.params import count_params
from vramcalc.core.shape import ModelShape
from vramcalc.errors import SpecError
from vramcalc.spec.models import ModelSpec, Spec, Workload
from vramcalc.units import format_bytes

#: Largest difference, as a share of the files' parameters, between the modelled layers and the files
#: that keeps the modelled count.
TOLERANCE = 0.005


def stored_weight_bytes(spec: Spec) -> int | None:
    """The files' bytes as the weights' memory, where the workload loads pre-quantized files as they are
    stored (the same method, or a method vramcalc has no layout for); None otherwise."""
    return _stored(spec.model, spec.workload)


def _stored(model: ModelSpec, workload: Workload) -> int | None:
    facts = model.checkpoint
    if facts is None or facts.quantization is None:
        return None
    q = workload.quantization
    if q is None or q.method.value == facts.quantization:
        return facts.weight_bytes
    return None


def _size(n_bytes: int) -> str:
    """GiB for a model's weights, MiB below one GiB (a small model, a projector)."""
    return format_bytes(n_bytes) if n_bytes >= 2**30 else format_bytes(n_bytes, "MiB")


def _others(components: dict[str, int] | None) -> str:
    """The components besides the language model, for a note: ``vision_tower 0.83 GiB``."""
    if not components:
        return ""
    shown = [
        f"{name} {_size(size)}"
        for name, size in sorted(components.items())
        if name not in ("model", "language_model", "text_model")
    ]
    return f" ({', '.join(shown)})" if shown else ""


def checkpoint_shape(model: ModelSpec, workload: Workload, shape: ModelShape) -> tuple[ModelShape, list[str]]:
    """``shape`` with the files' parameter count where the modelled layers differ from it, and the notes
    saying what was read and what was taken; training a model whose layers miss weights is refused."""
    facts = model.checkpoint
    if facts is None:
        return shape, []
    read = f"weights read from the files of {facts.source}: {_size(facts.weight_bytes)} in {facts.files} file"
    notes = [read + ("s" if facts.files > 1 else "")]
    if facts.quantization is not None:
        if _stored(model, workload) is not None:
            notes.append(f"{facts.quantization} weights as stored: the files' bytes, scales and zeros included")
        return shape, notes
    modelled = count_params(replace(shape, stated_params=None))
    difference = (modelled - facts.params) / facts.params
    if facts.layers_modelled and abs(difference) <= TOLERANCE:
        held = "the files'" if modelled == facts.params else f"{modelled:,} of the files'"
        notes.append(f"the modelled layers hold {held} {facts.params:,} parameters")
        return shape, notes
    if facts.layers_modelled and workload.mode is Mode.train:
        raise SpecError(
            f"model.checkpoint: the files of {facts.source} hold {facts.params:,} parameters where the modelled "
            f"layers hold {modelled:,}{_others(facts.components)}; training needs every layer modelled "
            "(serving and inference are estimated from the files)"
        )
    notes.append(
        f"the modelled layers hold {modelled / facts.params:.1%} of the files' {facts.params:,} parameters"
        f"{_others(facts.components)}: the weights are the files'"
    )
    return replace(shape, stated_params=facts.params), notes
