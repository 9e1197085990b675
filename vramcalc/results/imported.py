"""What ``vramcalc import`` makes of a transformers ``config.json``, as a model: :class:`ImportResult`.

The command writes the spec as YAML with the notes as comments (:meth:`ImportResult.to_yaml` is that text);
the model holds the same spec as a mapping (``spec``, which :func:`vramcalc.load_spec` takes) and the notes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from vramcalc.results.base import Result

if TYPE_CHECKING:
    from vramcalc.spec.hf_import import ImportedSpec


class ImportResult(Result):
    """A spec imported from a transformers config: its model, an example workload, and what it leaves out."""

    config: str = Field(description="The config file (<config> for a mapping).")
    model_type: str = Field(description="The config's model_type.")
    notes: list[str] = Field(description="What the spec leaves out or assumes, one line each.")
    spec: dict[str, Any] = Field(
        description="The spec: name, model and an example workload (inference at the config's dtype) to edit."
    )

    @classmethod
    def of(cls, imported: ImportedSpec) -> ImportResult:
        return cls(
            config=imported.source,
            model_type=imported.model_type,
            notes=list(imported.notes),
            spec=imported.document,
        )

    def to_yaml(self) -> str:
        """The spec file ``vramcalc import`` writes: the notes as comments, then the spec."""
        from vramcalc.spec.hf_import import spec_yaml

        return spec_yaml(self.config, self.model_type, self.notes, self.spec)
