"""The stacks wing is exhaustive: every runtime, quantization method, adapter type and optimizer a spec can
name has its row, and every module of vramcalc/stacks/ is a row of the registry. A choice added to
vramcalc/choices.py without its implementation fails here, not silently in an estimate."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

from vramcalc.choices import AdapterType, Optimizer, QuantMethod, Runtime
from vramcalc.core.optimizer import LAYOUTS as OPTIMIZER_LAYOUTS
from vramcalc.families import FAMILIES
from vramcalc.llm.quantization import QuantLayout
from vramcalc.spec.llm import AdapterSpec, QuantizationSpec
from vramcalc.spec.models import Workload
from vramcalc.stacks.layouts import QUANT_LAYOUTS, quant_layout
from vramcalc.stacks.registry import LIBRARIES, RUNTIMES

STACKS = Path(__file__).resolve().parents[2] / "vramcalc" / "stacks"
#: The wing's own machinery, not a library.
MACHINERY = {"__init__", "registry", "layouts"}


def test_every_module_of_the_wing_is_a_registered_library() -> None:
    modules = {f"vramcalc.stacks.{p.stem}" for p in STACKS.glob("*.py") if p.stem not in MACHINERY}
    assert modules == {library.module for library in LIBRARIES}
    for library in LIBRARIES:
        importlib.import_module(library.module)  # the row names a module that imports


def test_each_row_says_which_parts_of_the_protocol_its_module_has() -> None:
    # resolving a spec asks only the rows that say they refine the stack or refuse what they do not model
    for library in LIBRARIES:
        module = importlib.import_module(library.module)
        assert library.refines == hasattr(module, "refine"), library.name
        assert library.checks == hasattr(module, "check_spec"), library.name
        assert (library.keys_checked is not None) == hasattr(module, "check_keys"), library.name


def test_the_spec_package_holds_no_library_rules() -> None:
    # a library's rules live in its module of vramcalc/stacks/ (check_keys, check_spec); vramcalc/spec/ checks
    # the keys' types and the sections' shape only
    spec_package = STACKS.parent / "spec"
    for path in spec_package.glob("*.py"):
        source = path.read_text(encoding="utf-8")
        for name in ("llamacpp_rules", "workload_rules", "spec_rules", "torch_rules", "llm_rules", "one_gpu_only"):
            assert f"def {name}" not in source and f"def {name.replace('_rules', '_spec_rules')}" not in source, path


def test_every_runtime_has_its_stack_module() -> None:
    assert set(RUNTIMES) == set(Runtime)
    registered = {library.module for library in LIBRARIES}
    assert set(RUNTIMES.values()) <= registered


@pytest.mark.parametrize("method", list(QuantMethod))
def test_every_quantization_method_has_a_layout_that_names_it(method: QuantMethod) -> None:
    # describe() used to fall through to the fp8 text for a method it did not know
    assert method in QUANT_LAYOUTS
    layout = quant_layout(method)
    assert isinstance(layout, QuantLayout)
    q = QuantizationSpec(method=method)
    assert layout.describe(q).startswith(f"{method.value}:")


@pytest.mark.parametrize("method", list(QuantMethod))
def test_every_quantization_method_is_a_library_row(method: QuantMethod) -> None:
    workload = _workload(quantization={"method": method.value})
    owners = [lib.name for lib in LIBRARIES if "quantization" in lib.keys and lib.applies(workload)]
    assert owners, f"no library applies to quantization {method.value}"


@pytest.mark.parametrize("kind", list(AdapterType))
def test_every_adapter_type_is_a_library_row(kind: AdapterType) -> None:
    adapter: dict[str, Any] = {"type": kind.value}
    workload = Workload.model_construct(mode="train", batch_size=1, adapter=AdapterSpec.model_construct(**adapter))
    owners = [lib.name for lib in LIBRARIES if "adapter" in lib.keys and lib.applies(workload)]
    assert owners, f"no library applies to adapter.type {kind.value}"


def test_every_optimizer_has_a_state_layout() -> None:
    assert set(OPTIMIZER_LAYOUTS) == set(Optimizer)


def test_the_last_family_takes_what_no_other_does() -> None:
    # the dispatch is first-match: a spec no narrower family applies to is the dense transformer's
    assert FAMILIES[-1].name == "dense transformer"
    assert all(callable(family.applies) for family in FAMILIES)
    for family in FAMILIES:
        assert callable(getattr(importlib.import_module(family.module), family.function))


def _workload(**keys: Any) -> Workload:
    q = keys.pop("quantization", None)
    return Workload.model_construct(
        mode="inference", batch_size=1, quantization=QuantizationSpec(**q) if q else None, **keys
    )
