"""The Python API under awkward arguments (fuzz_api.py): only VramcalcError, or a TypeError naming the
argument, with messages of at most 2,000 characters; ``python benchmarks/fuzz.py --targets python-api``
runs it long."""

from __future__ import annotations

import pytest
from fuzz_api import MAX_MESSAGE, ApiCall, api_calls, check_api_call, functions
from fuzz_registry import TARGETS_BY_NAME
from fuzz_support import FuzzFailure, ci_settings
from hypothesis import given

from vramcalc.api import MAX_MESSAGE as API_MAX_MESSAGE

EXAMPLES = TARGETS_BY_NAME["python-api"].ci_examples


def test_every_public_function_is_enumerated() -> None:
    assert {"estimate", "check", "plan", "fit", "sweep", "bandwidth", "models", "import_config", "gpu"} <= set(
        functions()
    )
    assert MAX_MESSAGE == API_MAX_MESSAGE


def test_the_check_catches_what_the_rules_forbid(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check is not vacuous: an AttributeError from inside, and a TypeError naming no argument, fail."""
    import vramcalc

    def broken(**kwargs: object) -> None:
        raise AttributeError("'float' object has no attribute 'lower'")

    monkeypatch.setattr(vramcalc, "gpu", broken)
    with pytest.raises(FuzzFailure, match="uncaught AttributeError"):
        check_api_call(ApiCall("gpu", {"name": 3.5}))

    def unnamed(**kwargs: object) -> None:
        raise TypeError("unsupported operand type(s) for +: 'int' and 'str'")

    monkeypatch.setattr(vramcalc, "gpu", unnamed)
    with pytest.raises(FuzzFailure, match="TypeError not naming an argument"):
        check_api_call(ApiCall("gpu", {"name": 3.5}))


@pytest.mark.parametrize(
    "call",
    [
        ApiCall("bandwidth", {"gpu": 3.5}),
        ApiCall("bandwidth", {"gpu": "24GB", "bus_width": 1000, "memory_type": [6141]}),
    ],
)
def test_what_this_target_found(call: ApiCall) -> None:
    """bandwidth's card and text options raised AttributeError from inside before they were type-checked."""
    check_api_call(call)


@ci_settings(EXAMPLES)
@given(api_calls())
def test_awkward_arguments_to_every_function(call: ApiCall) -> None:
    check_api_call(call)
