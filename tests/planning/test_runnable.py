"""What a model can run on one card: every row agrees with the commands a user would run on the row's spec
(check's verdict, max-batch, max-seq's longest length, plan), and the row's spec reproduces the row.

The expected figures come from those other commands, never from the rows themselves; the row specs' keys
are checked against what the module's docstring states (rank, targets, checkpointing, halves of the
context)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import yaml

from vramcalc.hardware.lookup import get_gpu
from vramcalc.planning.budget import budget_for, fit_on
from vramcalc.planning.limits import max_batch, with_workload
from vramcalc.planning.plan_search import search_plans
from vramcalc.planning.runnable import SERVING_CONTEXT, TRAIN_SEQ_LEN, Option, Runnable, option_named, runnable
from vramcalc.spec.load import parse_spec
from vramcalc.spec.model_flag import spec_with_model
from vramcalc.spec.models import Spec

CASES = [
    ("gemma-2-9b", "rtx-4090"),
    ("llama-3.1-8b", "rtx-4090"),
    ("qwen2.5-7b", "l40s"),
    ("llama-3.1-70b", "h100-sxm"),
]


def _runnable(model: str, gpu: str) -> Runnable:
    base, _ = spec_with_model(None, model, {"mode": "inference"})
    return runnable(base, budget_for(get_gpu(gpu)), base.workload.precision.value, model=model)


@pytest.fixture(scope="module", params=CASES, ids=[f"{m}-{g}" for m, g in CASES])
def found(request: pytest.FixtureRequest) -> Runnable:
    return _runnable(*request.param)


def test_rows_in_order(found: Runnable) -> None:
    names = [option.name for option in found.options]
    assert names[1:] == ["serve-fp8", "serve-awq", "lora", "qlora", "full"] and names[0].startswith("serve-")


def test_every_row_is_check_s_verdict_at_batch_1(found: Runnable) -> None:
    for option in found.options:
        assert option.spec is not None, option.refused
        assert option.spec.workload.batch_size == 1
        assert option.verdict == fit_on(option.spec, found.budget)


def _longest_is_the_last_that_fits(option: Option, found: Runnable, at: Callable[[int], Spec]) -> None:
    assert option.spec is not None and option.longest is not None
    cap = found.context or 1 << 20
    if option.longest:
        assert fit_on(at(option.longest), found.budget).fits
    if option.longest < cap:  # one more does not fit (a generation has at least 2 tokens)
        assert not fit_on(at(max(2, option.longest + 1)), found.budget).fits


def test_serving_rows_are_max_batch_and_the_longest_context(found: Runnable) -> None:
    for option in found.options[:3]:
        spec = option.spec
        assert spec is not None and spec.workload.mode.value == "inference"
        context = min(SERVING_CONTEXT, found.context or SERVING_CONTEXT)
        wl = spec.workload
        assert (wl.prompt_len, wl.max_new_tokens, wl.runtime.value) == (context // 2, context - context // 2, "vllm")
        assert option.sequences == max_batch(spec, found.budget).value

        def at(n: int, spec: Spec = spec) -> Spec:
            return with_workload(spec, prompt_len=n // 2, max_new_tokens=n - n // 2)

        _longest_is_the_last_that_fits(option, found, at)


def test_training_rows_are_max_batch_and_the_longest_sequence(found: Runnable) -> None:
    for option in found.options[3:]:
        spec = option.spec
        assert spec is not None and spec.workload.mode.value == "train"
        assert spec.workload.seq_len == min(TRAIN_SEQ_LEN, found.context or TRAIN_SEQ_LEN)
        assert spec.workload.gradient_checkpointing.value == "full"
        assert option.batch is not None and option.batch.value == max_batch(spec, found.budget).value
        assert option.fits == (option.batch.value >= 1)

        def at(n: int, spec: Spec = spec) -> Spec:
            return with_workload(spec, seq_len=n)

        _longest_is_the_last_that_fits(option, found, at)


def test_adapter_rows_are_rank_16_on_every_linear(found: Runnable) -> None:
    lora, qlora = option_named(found, "lora"), option_named(found, "qlora")
    for option in (lora, qlora):
        assert option.spec is not None and option.spec.workload.adapter is not None
        adapter = option.spec.workload.adapter
        assert (adapter.type.value, adapter.rank, adapter.targets) == ("lora", 16, "all-linear")
    assert qlora.spec is not None and qlora.spec.workload.quantization is not None
    assert qlora.spec.workload.quantization.method.value == "nf4"


def test_full_fine_tuning_that_does_not_fit_names_plan_s_fewest_gpus(found: Runnable) -> None:
    full = option_named(found, "full")
    assert full.spec is not None
    if full.fits:
        assert full.plan is None
        return
    expected = search_plans(full.spec, found.budget, max_gpus=64, top=1)
    assert (full.plan is None) == (not expected.plans)
    if full.plan is not None:
        assert full.plan.parallel == expected.plans[0].parallel and full.plan.fits


def test_the_row_s_spec_file_reproduces_the_row(found: Runnable) -> None:
    for option in found.options:
        text = yaml.safe_dump(option.document, sort_keys=False)
        assert option.document["model"] == found.name  # the catalog name, as a user would write it
        spec = parse_spec(yaml.safe_load(text))
        assert fit_on(spec, found.budget) == option.verdict


def test_an_unknown_row_is_refused_with_the_row_names() -> None:
    found = _runnable("llama-3.1-8b", "rtx-4090")
    with pytest.raises(Exception, match=r"--emit-spec: 'serve' is not a row \(one of serve-bf16, serve-fp8"):
        option_named(found, "serve")


def test_qlora_of_llama_31_8b_fits_a_4090_and_lora_does_not() -> None:
    """By hand: Llama-3.1-8B's 8.03 B parameters in bf16 are 16.06 GB (14.96 GiB) of frozen weights before
    any adapter, activation or fp32 upcast, leaving 9 GiB of a 24 GiB card; in nf4 (0.5 B per parameter of
    the linears, 6.98 B of them) about 3.5 GB. So LoRA is the tighter of the two on a 4090."""
    found = _runnable("llama-3.1-8b", "rtx-4090")
    lora, qlora = option_named(found, "lora"), option_named(found, "qlora")
    assert qlora.verdict is not None and lora.verdict is not None
    assert qlora.verdict.needed_bytes < lora.verdict.needed_bytes
    assert qlora.longest is not None and lora.longest is not None and qlora.longest > lora.longest
