"""A Diffusers pipeline's weights: what each component takes on the GPU, all of them resident together, and
one at a time. Pure.

A pipeline (``model_index.json``) is loaded with ``DiffusionPipeline.from_pretrained(..., torch_dtype=...)``:
every floating-point weight is cast to ``torch_dtype`` (kept as stored when none is given), other tensors
keep their type. ``pipe.to("cuda")`` puts every component on the GPU together;
``enable_model_cpu_offload()`` moves one component at a time to the GPU (the largest sets the peak), and
``enable_sequential_cpu_offload()`` one layer at a time (not sized here). vramcalc models the steps of
transformer models, not a diffusion pipeline's denoising loop: the denoiser's and the VAE decoder's
activations are not estimated, so a card's verdict here is on the weights alone, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from vramcalc.sources.checkpoint import Checkpoint

#: safetensors' floating-point dtypes a ``torch_dtype`` casts (8-bit floats are quantized weights: kept).
FLOATING = ("F64", "F32", "F16", "BF16")
#: Bytes per element of the precisions a pipeline can be loaded at.
PRECISION_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


@dataclass(frozen=True)
class Component:
    """One component's weights: its folder, stored elements and bytes, and its bytes on the GPU."""

    name: str
    params: int
    stored_bytes: int
    loaded_bytes: int


@dataclass(frozen=True)
class PipelineWeights:
    """Every component with weights, largest first, at ``precision`` (None: as stored)."""

    components: tuple[Component, ...]
    precision: str | None

    @property
    def resident_bytes(self) -> int:
        """``pipe.to("cuda")``: every component at once."""
        return sum(component.loaded_bytes for component in self.components)

    @property
    def largest(self) -> Component:
        """The component ``enable_model_cpu_offload()`` peaks with."""
        return self.components[0]


def pipeline_weights(checkpoint: Checkpoint, precision: str | None = None) -> PipelineWeights:
    """The weights of ``checkpoint``'s components, cast to ``precision`` (``fp32``, ``fp16``, ``bf16``) or as
    stored; a file at the pipeline's top level counts as its own component (``model``)."""
    per_byte = PRECISION_BYTES.get(precision or "")
    found: dict[str, list[int]] = {}
    for file in checkpoint.files:
        name = file.path.rsplit("/", 1)[0] if "/" in file.path else "model"
        totals = found.setdefault(name, [0, 0, 0])
        for tensor in file.tensors:
            totals[0] += tensor.elements
            totals[1] += tensor.nbytes
            cast = per_byte is not None and tensor.dtype in FLOATING
            totals[2] += tensor.elements * per_byte if cast and per_byte is not None else tensor.nbytes
    components = [Component(name, params, stored, loaded) for name, (params, stored, loaded) in found.items()]
    components.sort(key=lambda component: (-component.loaded_bytes, component.name))
    return PipelineWeights(tuple(components), precision)
