"""PEFT's LoRA with ``workload.compile: true``: a ``get_peft_model`` model whose blocks torch.compile compiles with
inductor's partitioner, as the HF Trainer's ``torch_compile=True`` runs it.

References: ``benchmarks/data/tracer_compile_peft.json``, the shared tracer's training step of a transformers model
wrapped by ``peft.get_peft_model(LoraConfig(...))`` (peft 0.21.2) with every block compiled through AOTAutograd,
inductor's decompositions and ``partition_fn`` (``min_cut_rematerialization_partition``), fusion emulated
(``benchmarks/tracer_compile.py --peft-cases``; each case keeps its command line and the saved tensors of the first
block and of the others, read from the partitioned forward graphs). Hand counts from those lists.
"""

from __future__ import annotations

import statistics
from typing import Any

import pytest
from compile_traces import cases, small_llama, traced_spec

from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.families.resolve import resolve_workload
from vramcalc.llm import adapters
from vramcalc.spec.models import Spec
from vramcalc.stacks import peft_lora

CASES = cases("tracer_compile_peft.json")
#: The flash kernel's two RNG-state scalars, which the partitioned graph saves and vramcalc does not count.
RNG_STATE = 24


def _spec(case: dict[str, Any]) -> Spec:
    return traced_spec(case["command"])


def _error(case: dict[str, Any]) -> float:
    return float(estimate(_spec(case)).peak_allocated_bytes / case["peak_bytes"] - 1)


def test_cases_cover_the_recipe() -> None:
    """Llama with grouped K/V and GPT-2; q/v (c_attn) and all-linear; dropout 0 and 0.05; bf16 and autocast; with and
    without checkpointing."""
    commands = [c["command"] for c in CASES]
    assert len(commands) >= 8
    for word in ("--kv-heads 2", "--arch gpt2", "all-linear", "q_proj,v_proj", "--amp", "--grad-checkpointing"):
        assert any(word in c for c in commands) and (word.startswith("--arch") or not all(word in c for c in commands))
    assert any("--lora-dropout 0.05" in c for c in commands) and any("--lora-dropout" not in c for c in commands)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_against_the_traced_compiled_step(case: dict[str, Any]) -> None:
    """Each traced step's peak within 5 %, the model's parameters and the adapters' as the tracer counts them."""
    result = estimate(_spec(case))
    assert result.llm is not None and result.llm.trainable_params is not None
    assert result.params + result.llm.trainable_params == case["params"]
    assert abs(result.peak_allocated_bytes / case["peak_bytes"] - 1) <= 0.05, case["id"]


def test_quality_bar() -> None:
    """Median |error| at most 2 %, the largest at most 5 %."""
    absolute = [abs(_error(c)) for c in CASES]
    assert statistics.median(absolute) <= 0.02
    assert max(absolute) <= 0.05


def _counted(case: dict[str, Any]) -> tuple[int, int, int]:
    """vramcalc's first and other compiled block of a case, and the adapters' 16-bit weight casts of one block
    (under autocast the graph keeps them; vramcalc counts them with autocast's weight copies)."""
    spec = _spec(case)
    work = resolve_workload(spec)
    adapter = spec.workload.adapter
    assert adapter is not None and adapter.rank is not None
    targets, _ = adapters.resolve_targets(work.shape, adapter)
    matrices = adapters.lora_matrices(work.shape, targets)
    a = adapters.adapter_bytes_per_param(adapter, work.dtypes)
    first, other = peft_lora.compiled_block_bytes(
        work.shape, work.tokens, work.dtypes, matrices, adapter.rank, a, adapter.dropout
    )
    casts = sum(adapter.rank * (m.inp + m.out) for m in matrices) * work.dtypes.compute  # one of each a block
    return first, other, casts if work.dtypes.amp else 0


def _traced(case: dict[str, Any], key: str) -> int:
    """A traced block's saved bytes with its input, less the rotary tables (model-wide, counted outside)."""
    measured = case["compiled"][key]
    spec = _spec(case)
    work = resolve_workload(spec)
    rotary = 2 * work.tokens.seq * work.shape.head_dim * work.dtypes.residual if "llama" in case["id"] else 0
    return int(measured["saved_bytes"] + measured["input_bytes"] - rotary)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_block_saved_set_matches_the_partitioned_graph(case: dict[str, Any]) -> None:
    """Every block but the first, as its partitioned forward graph returns it, to the flash kernel's RNG state (under
    autocast less the adapters' weight casts). The first block without checkpointing likewise, except under autocast,
    where it keeps an fp32 hidden-wide tensor counted as its input (the traced graphs keep that input or the fp32
    residual sum in place of the 16-bit output projection's output: 0 to 2 x hidden bytes a token above), and keeps
    no weight cast of the lora_A matrices that read its first norm."""
    first, other, casts = _counted(case)
    assert _traced(case, "block") - casts - other == RNG_STATE, case["id"]
    if "-gc-" in case["id"]:
        return  # a checkpointed first block runs again in backward, its input a leaf that requires grad
    gap = _traced(case, "first_block") - casts - first
    if "-amp-" not in case["id"]:
        assert gap == RNG_STATE, case["id"]
    else:
        work = resolve_workload(_spec(case))
        # the first block's lora_A reading its first norm keep no weight cast (no input gradient there): less casts
        assert -2 * work.tokens.encoder * work.shape.hidden - casts <= gap <= RNG_STATE, case["id"]


def test_llama_blocks_by_hand() -> None:
    """The first case (Llama, bf16, 2 x 512 = 1024 tokens, h = q = kv = 256, f = 688, LoRA rank 8 on q_proj and
    v_proj, fp32 adapters), from the saved lists in the data file. A block keeps per token its bf16 input (256 x 2),
    two fp32 rstd (2 x 4), the first norm's output cast to fp32 once for both adapters (256 x 4), the two lora_A
    outputs (2 x 8 x 4), Q, K (rotated), V and the attention output (4 x 256 x 2), the output projection's output
    (256 x 2), gate and up (2 x 688 x 2): 6,920 bytes; and the logsumexp, 2 x 4 heads x 512 x 4 bytes. The first
    block keeps neither its input nor its first rstd (516 bytes a token less)."""
    case = CASES[0]
    assert case["id"] == "compile-peft-llama_l2_h256_b2_s512_bf16_qv_r8"
    per_token = 256 * 2 + 2 * 4 + 256 * 4 + 2 * 8 * 4 + 4 * 256 * 2 + 256 * 2 + 2 * 688 * 2
    assert per_token == 6920
    logsumexp = 2 * 4 * 512 * 4
    first, other, _ = _counted(case)
    assert other == 1024 * per_token + logsumexp == 7_102_464
    assert first == 1024 * (per_token - 516) + logsumexp == 6_574_080


def test_dropout_keeps_each_modules_mask_and_dropped_input() -> None:
    """With lora_dropout 0.05 every adapter of a block keeps its own bool mask and its fp32 dropped input (traced:
    all-linear on the grouped Llama, 1024 tokens): 7 modules reading h = 512 wide inputs (q, k, v, o, gate, up) or
    the f = 1376 wide product (down), against one fp32 copy of each of the four input sources without dropout:
    1024 x ((6 x 512 + 1376) x (4 + 1) - (3 x 512 + 1376) x 4) = 10,846,208 bytes more."""
    by_id = {c["id"]: c for c in CASES}
    plain = by_id["compile-peft-llama_l3_h512_gqa_b1_s1024_bf16_all_r16"]["compiled"]["block"]["saved_bytes"]
    dropped = by_id["compile-peft-llama_l3_h512_gqa_b1_s1024_bf16_all_r16_do05"]["compiled"]["block"]["saved_bytes"]
    assert dropped - plain == 1024 * ((6 * 512 + 1376) * 5 - (3 * 512 + 1376) * 4) == 10_846_208


def test_autocast_block_keeps_the_frozen_weight_casts() -> None:
    """Under autocast the partitioned graph keeps each frozen weight's bf16 cast (q and o 512 x 512, k and v
    128 x 512, gate, up and down 1376 x 512 on the grouped Llama) beside the adapters'."""
    case = next(c for c in CASES if c["id"] == "compile-peft-amp-llama_l3_h512_gqa_b1_s1024_bf16_qv_r16")
    rows = [r for r in case["compiled"]["block"]["saved"] if r.startswith("convert_element_type") and "16]" not in r]
    frozen = sorted(r.split(" ", 1)[1] for r in rows if "[16," not in r and r.count(",") == 1)
    assert frozen == sorted(
        ["[512, 512] bfloat16"] * 2
        + ["[128, 512] bfloat16"] * 2
        + ["[512, 1376] bfloat16", "[1376, 512] bfloat16"] * 1
        + ["[1376, 512] bfloat16"]
    )
    work = resolve_workload(_spec(case))
    assert peft_lora.block_linears(work.shape) == 2 * 512 * 512 + 2 * 128 * 512 + 3 * 1376 * 512


def test_note_describes_the_adapter_block() -> None:
    notes = " ".join(estimate(_spec(CASES[0])).assumptions)
    assert "with PEFT's LoRA: no frozen linear keeps its input" in notes


LORA = {"type": "lora", "rank": 8, "alpha": 16, "targets": ["q_proj", "v_proj"]}


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ({"adapter": {**LORA, "type": "dora"}}, "workload.adapter.type: dora is not modelled with workload.compile"),
        ({"adapter": {**LORA, "type": "lora_fa"}}, "workload.adapter.type: lora_fa is not modelled"),
        ({"adapter": {"type": "ia3", "targets": ["k_proj", "v_proj", "down_proj"]}}, "adapter.type: ia3"),
        ({"adapter": {"type": "prompt_tuning", "num_virtual_tokens": 20}}, "adapter.type: prompt_tuning"),
        ({"adapter": LORA, "quantization": {"method": "nf4"}}, "workload.quantization"),
        ({"adapter": {**LORA, "framework": "litgpt"}}, "adapter.framework: litgpt"),
        ({"adapter": {**LORA, "prepare_kbit": True}}, "adapter.prepare_kbit"),
    ],
)
def test_refused(workload: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match="workload.compile") as err:
        estimate(small_llama(**workload))
    assert message in str(err.value)


def test_plain_lora_accepted() -> None:
    assert estimate(small_llama(adapter=LORA)).peak_allocated_bytes > 0
