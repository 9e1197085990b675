"""A Diffusers pipeline's weights as ``vramcalc estimate --model PIPELINE --json`` writes them:
:class:`PipelineResult` (vramcalc/planning/pipeline.py computes them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from vramcalc.results.base import Result

if TYPE_CHECKING:
    from vramcalc.planning.budget import Budget
    from vramcalc.planning.pipeline import PipelineWeights


class PipelineComponentResult(Result):
    name: str = Field(description="The component's folder (transformer, unet, vae, text_encoder, ...).")
    params: int = Field(description="Stored elements of its weights.")
    stored_bytes: int = Field(description="Bytes its files store.")
    bytes: int = Field(description="Bytes on the GPU at the precision loaded (as stored when none is given).")


class PipelineResult(Result):
    """The weights of a pipeline; its activations are not estimated (``activations_estimated``: false)."""

    name: str = Field(description="The pipeline, as named.")
    source: str = Field(description="Where its files came from: org/name@commit or the path.")
    kind: str = Field(description="diffusers-pipeline.")
    precision: str | None = Field(description="torch_dtype the weights are cast to; null: as stored.")
    components: list[PipelineComponentResult] = Field(description="Components with weights, largest first.")
    resident_bytes: int = Field(description="Every component on the GPU together (pipe.to('cuda')).")
    offload_bytes: int = Field(description="The largest component alone (enable_model_cpu_offload()).")
    offload_component: str = Field(description="That component.")
    activations_estimated: bool = Field(description="false: the denoiser's and VAE's activations are not counted.")
    gpu: str | None = Field(default=None, description="The card, when one is given.")
    available_bytes: int | None = Field(default=None, description="What the card offers, when one is given.")
    resident_weights_fit: bool | None = Field(default=None, description="resident_bytes <= available_bytes.")
    offload_weights_fit: bool | None = Field(default=None, description="offload_bytes <= available_bytes.")

    @classmethod
    def of(cls, name: str, source: str, weights: PipelineWeights, budget: Budget | None) -> PipelineResult:
        components = [
            PipelineComponentResult(name=c.name, params=c.params, stored_bytes=c.stored_bytes, bytes=c.loaded_bytes)
            for c in weights.components
        ]
        found = cls(
            name=name,
            source=source,
            kind="diffusers-pipeline",
            precision=weights.precision,
            components=components,
            resident_bytes=weights.resident_bytes,
            offload_bytes=weights.largest.loaded_bytes,
            offload_component=weights.largest.name,
            activations_estimated=False,
        )
        if budget is None:
            return found
        available = budget.available_bytes
        return found.model_copy(
            update={
                "gpu": budget.gpu_name,
                "available_bytes": available,
                "resident_weights_fit": weights.resident_bytes <= available,
                "offload_weights_fit": weights.largest.loaded_bytes <= available,
            }
        )
