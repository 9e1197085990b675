"""A Hub id whose repository is mutated or whose server misbehaves (fuzz_hub.py): one error line naming
the repository, or an estimate; ``python benchmarks/fuzz.py --targets hub`` runs it long."""

from __future__ import annotations

import pytest
from fuzz_hub import HubCase, check_hub_case, hub_cases
from fuzz_registry import TARGETS_BY_NAME
from fuzz_support import ci_settings
from hypothesis import given

EXAMPLES = TARGETS_BY_NAME["hub"].ci_examples
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")


@ci_settings(EXAMPLES, shrink=False)
@given(hub_cases())
def test_mutated_repositories_and_a_misbehaving_server(case: HubCase) -> None:
    check_hub_case(case)
