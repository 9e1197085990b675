"""The entries of ``vramcalc models --json`` as a model: :class:`ModelResult`, one per catalog model (the
document is the list of them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from vramcalc.results.base import Result

if TYPE_CHECKING:
    from vramcalc.spec.presets import ModelEntry


class ModelResult(Result):
    """One model of the bundled catalog: its fields and the figures ``vramcalc models`` lists."""

    id: str = Field(description="The catalog name (what --model and a spec's model: take).")
    name: str = Field(description="Display name.")
    family: str = Field(description="Model family.")
    repo: str = Field(description="The Hugging Face Hub repository the config comes from.")
    aliases: list[str] = Field(description="Other names the entry answers to.")
    source: str = Field(description="Where the config was read: the file and its release.")
    published_params: str | None = Field(description="The parameter count the model card gives, as written there.")
    meta_params: int | None = Field(description="The parameter count of transformers' own model of the config.")
    context_length: int | None = Field(description="The config's max_position_embeddings (or n_positions).")
    layers: int | None = Field(description="Layers (blocks).")
    heads: int | None = Field(description="Attention heads.")
    kv_heads: int | None = Field(description="Key/value heads.")
    config: dict[str, Any] | None = Field(
        None, description="The fields of the model's config.json that set its shape (absent for a model mapping)."
    )
    model: dict[str, Any] | None = Field(
        None, description="A vramcalc model mapping, for an entry that has no transformers config."
    )

    @classmethod
    def of(cls, entry: ModelEntry) -> ModelResult:
        given: dict[str, Any] = {"config": entry.config} if entry.config is not None else {}
        if entry.model is not None:
            given["model"] = entry.model
        return cls(
            id=entry.id,
            name=entry.name,
            family=entry.family,
            repo=entry.repo,
            aliases=list(entry.aliases),
            source=entry.source,
            published_params=entry.published_params,
            meta_params=entry.meta_params,
            context_length=entry.context_length,
            layers=entry.layers,
            heads=entry.heads,
            kv_heads=entry.kv_heads,
            **given,
        )
