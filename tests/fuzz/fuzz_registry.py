"""Every fuzz target: a name, a hypothesis strategy, a check, and how many examples CI runs.

tests/fuzz runs each target bounded and derandomized (``ci_examples``; targets that start a process
per input get fewer); ``benchmarks/fuzz.py`` runs the same targets for the long campaign. Commands,
spec keys and numeric flags are enumerated at run time (from the typer app and the spec's JSON
Schema), so what is added later is fuzzed without touching these files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fuzz_api import api_calls, check_api_call
from fuzz_argv import argv, check_argv
from fuzz_checkpoint import check_checkpoint_case, checkpoint_cases
from fuzz_files import check_tree_case, tree_cases
from fuzz_gguf import check_gguf_header, gguf_headers
from fuzz_hub import check_hub_case, hub_cases
from fuzz_json import check_json_input, json_inputs
from fuzz_numbers import check_number_case, number_cases
from fuzz_outputs import check_output_case, output_cases
from fuzz_process import check_sink_case, sink_cases
from fuzz_targets import (
    check_extreme_spec,
    check_mutated_spec,
    check_yaml_cli,
    check_yaml_library,
    extreme_specs,
    mutated_specs,
    yaml_documents,
)
from hypothesis import strategies as st


@dataclass(frozen=True)
class Target:
    name: str
    strategy: Callable[[], st.SearchStrategy[Any]]
    check: Callable[[Any], None]
    ci_examples: int  # examples per CI run (bounded so tests/fuzz stays under about a minute)


TARGETS = [
    Target("yaml-library", yaml_documents, check_yaml_library, 400),
    Target("yaml-cli", yaml_documents, check_yaml_cli, 150),
    Target("mutated-spec", mutated_specs, check_mutated_spec, 220),
    Target("argv", argv, check_argv, 300),
    Target("extreme-spec", extreme_specs, check_extreme_spec, 60),
    Target("numbers", number_cases, check_number_case, 80),
    Target("json-inputs", json_inputs, check_json_input, 24),
    Target("output-formats", output_cases, check_output_case, 21),
    Target("filesystem", tree_cases, check_tree_case, 20),
    Target("stdout-failures", sink_cases, check_sink_case, 4),
    Target("gguf-header", gguf_headers, check_gguf_header, 200),
    Target("checkpoint-folder", checkpoint_cases, check_checkpoint_case, 60),
    Target("python-api", api_calls, check_api_call, 150),
    Target("hub", hub_cases, check_hub_case, 30),
]
TARGETS_BY_NAME = {target.name: target for target in TARGETS}
