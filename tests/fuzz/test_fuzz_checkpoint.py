"""Fuzzing model folders with mutated real checkpoints (fuzz_checkpoint.py has the rules), bounded and
derandomized; ``python benchmarks/fuzz.py --targets checkpoint-folder`` runs it long."""

from __future__ import annotations

import pytest
from fuzz_checkpoint import COMMANDS, SEEDS, CheckpointCase, check_checkpoint_case, checkpoint_cases, seeds
from fuzz_registry import TARGETS_BY_NAME
from fuzz_support import ci_settings
from hypothesis import given

CHECKPOINT_FOLDER = TARGETS_BY_NAME["checkpoint-folder"].ci_examples


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("seed", SEEDS)
def test_the_seeds_are_read(seed: str, command: str) -> None:
    """Unmutated, every seed gives an estimate or a spec (a Diffusers pipeline: its one refusal)."""
    check_checkpoint_case(CheckpointCase(seed, seeds()[seed], (), (), command, (), files_only=False))


@ci_settings(CHECKPOINT_FOLDER, shrink=False)
@given(checkpoint_cases())
def test_mutated_checkpoint_folders(case: CheckpointCase) -> None:
    check_checkpoint_case(case)
