"""Telling vramcalc specs from the other YAML files of a repository, for `vramcalc check`.

A repository's ``configs/`` folder often holds more than specs: accelerate and DeepSpeed configs,
Hugging Face model configs, Kubernetes manifests. When ``check`` searches a directory or a pattern
(or with ``--skip-non-specs``, for every file), a file that is plainly not a spec is skipped with one
note instead of failing the run:

* YAML that is not one mapping: an empty file, a list, a single value, or several documents
  (``---`` between them, as a Kubernetes manifest has): a spec is one mapping;
* a mapping recognised as another tool's config (:data:`KINDS`), unless it has ``model`` or
  ``workload`` (a spec's own keys: such a file is always checked, and an error in it is reported);
* a mapping with none of the keys ``model``, ``workload`` or ``name``.

Everything else is checked as a spec, so a spec with a mistake is reported, never skipped: a file
that cannot be read, is not UTF-8, is not valid YAML or breaks a bound of the YAML reader is an
error wherever it was found. Pure: reads one file, writes nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vramcalc.errors import SpecError
from vramcalc.files import read_yaml

#: Top-level keys of a spec that mark a mapping as meant to be one.
SPEC_KEYS = ("model", "workload", "name")
#: Keys that only a spec uses at its top level: a mapping with one of them is always checked.
OWN_KEYS = ("model", "workload")

#: Other tools' configs, each recognised by any one of its own top-level keys.
KINDS: tuple[tuple[str, frozenset[str]], ...] = (
    (
        "an accelerate config",  # `accelerate config` writes these (default_config.yaml)
        frozenset(
            {"compute_environment", "distributed_type", "num_processes", "num_machines", "main_training_function"}
            | {"rdzv_backend", "same_network", "machine_rank", "main_process_ip", "main_process_port"}
        ),
    ),
    (
        "a DeepSpeed config",
        frozenset(
            {"zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size", "steps_per_print"}
            | {"zero_allow_untested_optimizer", "wall_clock_breakdown", "gradient_clipping"}
        ),
    ),
    (
        "a Hugging Face model config",  # a config.json's keys
        frozenset({"model_type", "architectures", "transformers_version", "_name_or_path"}),
    ),
)

#: What PyYAML says when a file holds a second document (vramcalc reads one document per file).
_SECOND_DOCUMENT = "but found another document"


def kind_of(data: Any) -> str | None:
    """Why a parsed YAML document is not a spec ("an accelerate config"), or None when it is meant to be
    one (it is then validated, and its mistakes reported)."""
    if data is None:
        return "an empty YAML file"
    if isinstance(data, list):
        return "a YAML list"
    if not isinstance(data, dict):
        return "a single YAML value"
    keys = {key for key in data if isinstance(key, str)}
    if keys & set(OWN_KEYS):
        return None
    if "apiVersion" in keys and "kind" in keys:
        return "a Kubernetes manifest"
    for kind, marks in KINDS:
        if keys & marks:
            return kind
    if "name" in keys:
        return None
    return "a mapping without the keys model, workload or name"


def read_document(path: str) -> tuple[Any, str | None]:
    """The file's YAML document and why it is not a spec (None when it is meant to be one).

    Raises :class:`SpecError` (one line naming the file) for a file that cannot be read or is not
    valid YAML; several documents in one file are valid YAML, but not a spec."""
    try:
        data = read_yaml(Path(path))
    except SpecError as exc:
        if str(exc).endswith(_SECOND_DOCUMENT):
            return None, "several YAML documents in one file"
        raise
    return data, kind_of(data)


def not_a_spec(path: str, reason: str) -> str:
    """The note for a skipped file (without the ``note:`` prefix)."""
    return f"skipped {path}: {reason}, not a vramcalc spec"


def refused(path: str, reason: str) -> SpecError:
    """The error for a non-spec named on the command line (skipped only with ``--skip-non-specs``)."""
    return SpecError(
        f"{path}: {reason}, not a vramcalc spec (a spec is a mapping with model and workload; "
        "--skip-non-specs skips such files)"
    )
