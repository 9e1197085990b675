"""Domain errors. Every message is one line naming the file, field and value."""

from __future__ import annotations

#: The exit codes of every command (a public contract): ok; does not fit (check commands); bad input.
EXIT_OK, EXIT_DOES_NOT_FIT, EXIT_BAD_INPUT = 0, 1, 2


class VramcalcError(Exception):
    """Base of every error vramcalc reports to a user (exit code 2 at the CLI)."""


class SpecError(VramcalcError):
    """A spec file (or flag overriding it) is missing, unreadable or invalid."""


class ModelSourceError(SpecError):
    """A model named by a path, the local Hugging Face cache or a Hub id could not be read: a missing or
    hostile file, a gated or missing repository, no network. ``stage`` names the step that failed
    (``path``, ``hub``, ``config``, ``header``), for the ``--json`` error."""

    def __init__(self, message: str, stage: str) -> None:
        super().__init__(message)
        self.stage = stage


class PipelineModel(SpecError):
    """A Diffusers pipeline named as a model: no transformer step to estimate (the one line says what its
    weights take), but ``vramcalc estimate`` answers with its weights. ``checkpoint``: its files
    (a :class:`vramcalc.sources.checkpoint.Checkpoint`)."""

    def __init__(self, message: str, checkpoint: object) -> None:
        super().__init__(message)
        self.checkpoint = checkpoint


class UnitError(VramcalcError):
    """A size, count, rate or percentage could not be parsed."""


class CatalogError(VramcalcError):
    """The bundled or user-supplied GPU catalog is invalid."""


class UnknownGPUError(VramcalcError):
    """A GPU name matches no catalog entry; the message lists the closest names."""


class LocalGPUError(VramcalcError):
    """``--gpu local``: NVML is missing, finds no GPU, or the card is not in the catalog."""


class MeasuredStatsError(VramcalcError):
    """A ``torch.cuda.memory_stats()`` JSON file (or a measured figure) is unreadable or invalid."""
