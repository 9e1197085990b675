"""``workload.compile: true``: each transformer block compiled by torch.compile with inductor's partitioner.

References: ``benchmarks/data/tracer_compile.json``, the shared tracer's training step with every block compiled
through AOTAutograd, inductor's decompositions and inductor's ``partition_fn``
(``min_cut_rematerialization_partition``), its graphs run with inductor's fusion emulated
(``benchmarks/tracer_compile.py``; each case keeps its command line and the saved tensors of one block, read from the
partitioned forward graph). Hand counts from that list.
"""

from __future__ import annotations

import statistics
from typing import Any

import pytest
from compile_traces import cases, small_llama, traced_spec

from vramcalc.core import activations as act
from vramcalc.core import compiled
from vramcalc.core.compiled import compiled_layer_saved_bytes
from vramcalc.core.params import linear_weight_params
from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.families.resolve import resolve_workload
from vramcalc.stacks import inductor

TRACED = cases("tracer_compile.json")
TRAINING = [c for c in TRACED if "--mode infer" not in c["command"]]
INFERENCE = cases("tracer_compile_infer.json")


def errors() -> list[float]:
    return [estimate(traced_spec(c["command"])).peak_allocated_bytes / c["peak_bytes"] - 1 for c in TRAINING]


#: Autocast steps whose peak is a checkpointed block's compiled backward, a moment counted as the eager one (the block's
#: gradients all written beside its backward's temporaries): GPT-2 +2.6 %, BERT -2.5 %, as their 16-bit steps.
CHECKPOINTED_AMP = {"compile-amp-gc-gpt2_l2_h256_b2_s512_bf16_adamw", "compile-amp-gc-bert_l2_h256_b2_s512_fp16_adamw"}


@pytest.mark.parametrize("case", TRAINING, ids=[c["id"] for c in TRAINING])
def test_against_the_traced_compiled_step(case: dict[str, Any]) -> None:
    """Each traced compiled step within 2.5 % (llama, GPT-2, BERT; with and without checkpointing; chunked loss;
    16-bit, fp32 and autocast), the two checkpointed autocast steps of :data:`CHECKPOINTED_AMP` within 3 %."""
    result = estimate(traced_spec(case["command"]))
    assert result.params == case["params"]
    bound = 0.03 if case["id"] in CHECKPOINTED_AMP else 0.025
    assert abs(result.peak_allocated_bytes / case["peak_bytes"] - 1) <= bound, case["id"]


def test_quality_bar() -> None:
    """Median |error| at most 2 %, the largest at most 5 %."""
    absolute = [abs(e) for e in errors()]
    assert statistics.median(absolute) <= 0.02
    assert max(absolute) <= 0.05


#: A post-LN block under autocast (BERT) keeps each LayerNorm's fp32 normalized output with its rstd, and the block
#: input as its bf16 cast: 9736 bytes a token in the traced list, against the 9232 counted (-0.8 % of that step).
POST_LN_AMP = "compile-amp-bert_l2_h256_b2_s512_bf16_adamw"


@pytest.mark.parametrize(
    "case", [c for c in TRAINING if "-gc-" not in c["id"] and "-ce-" not in c["id"] and c["id"] != POST_LN_AMP]
)
def test_block_saved_set_matches_the_partitioned_graph(case: dict[str, Any]) -> None:
    """One block's saved tensors, as the partitioned forward graph returns them (its input among them), to within
    the two RNG-state scalars of the flash kernel (24 bytes); under autocast less the block's weight casts, which
    vramcalc counts with the autocast weight copies."""
    spec = traced_spec(case["command"])
    work = resolve_workload(spec, inductor.refine(resolve_workload(spec).stack, spec.workload))
    block = work.stack.compiled_block
    assert block is not None
    counted = compiled_layer_saved_bytes(work.shape, work.tokens, work.dtypes, spec.workload.attention, block)
    measured = case["compiled"]["block"]
    rotary_tables = 2 * work.tokens.seq * work.shape.head_dim * work.dtypes.residual if "llama" in case["id"] else 0
    traced = measured["saved_bytes"] + measured["input_bytes"] - rotary_tables
    sh = work.shape  # autocast: each linear weight of the block (Q, K, V, O; the MLP's two or three) as a 16-bit cast
    block_weights = (2 * sh.q_width + 2 * sh.kv_width) * sh.hidden + (3 if sh.gated else 2) * sh.hidden * sh.ffn
    weight_casts = block_weights * work.dtypes.compute if work.dtypes.amp else 0
    assert 0 <= traced - weight_casts - counted <= 24, case["id"]


def test_amp_block_keeps_its_weight_casts() -> None:
    """Under autocast the partitioned forward graph keeps every weight's bf16 cast of the block (seven for a Llama
    block: q, k, v, o 256 x 256, gate, up, down 256 x 688), an fp32 block input and the bf16 casts of the norm
    outputs, from the saved list of the first autocast Llama case."""
    case = next(c for c in TRAINING if c["id"] == "compile-amp-llama_l2_h256_b2_s512_bf16_adamw")
    saved = case["compiled"]["block"]["saved"]
    casts = [row for row in saved if row.startswith("convert_element_type") and row.endswith("bfloat16")]
    weights = sorted(row.split(" ", 1)[1] for row in casts if "[2," not in row)
    assert weights == ["[256, 256] bfloat16"] * 4 + ["[256, 688] bfloat16"] + ["[688, 256] bfloat16"] * 2
    assert saved[0] == "placeholder [2, 512, 256] float32"
    spec = traced_spec(case["command"])
    work = resolve_workload(spec)
    assert work.dtypes.amp and work.dtypes.residual == act.FP32
    assert linear_weight_params(work.shape) == 2 * (4 * 256 * 256 + 3 * 256 * 688) + 1000 * 256


def test_checkpointed_amp_forward_keeps_no_block_weight_casts() -> None:
    """A checkpointed compiled block drops its saved weight casts with its other saved tensors: the forward holds
    the head's cast (1000 x 256 x 2), not autocast's cache of every weight as an eager step does."""
    case = next(c for c in TRAINING if c["id"] == "compile-amp-gc-llama_l3_h512_gqa_b4_s2048_bf16_adamw")
    spec = traced_spec(case["command"])
    eager = estimate(traced_spec(case["command"], compile_=False)).phase_components["forward"]
    compiled_forward = estimate(spec).phase_components["forward"]
    assert compiled_forward["autocast_weight_copies"] == 2000 * 512 * 2
    assert eager["autocast_weight_copies"] > compiled_forward["autocast_weight_copies"]


def test_llama_block_by_hand() -> None:
    """The first Llama case (bf16, T = 2 x 512 = 1024 tokens, h = 256, q = kv = 256, f = 688, 4 heads), from the saved
    list in the data file: block input, two norm outputs and the o_proj output (4 x h x 2), two rstd (2 x 4),
    Q, K (rotated), V and the attention output (4 x 256 x 2), gate, up and silu(gate) x up (3 x f x 2) per token,
    and the logsumexp (2 x 4 x 512 x 4)."""
    per_token = 4 * 256 * 2 + 2 * 4 + 4 * 256 * 2 + 3 * 688 * 2
    expected = 1024 * per_token + 2 * 4 * 512 * 4
    spec = traced_spec(TRAINING[0]["command"])
    work = resolve_workload(spec)
    assert work.stack.compiled_block is not None
    assert (
        compiled_layer_saved_bytes(
            work.shape, work.tokens, work.dtypes, spec.workload.attention, work.stack.compiled_block
        )
        == expected
    )


def test_compile_lowers_the_eager_peak() -> None:
    """The traced compiled llama step is below vramcalc's eager estimate of the same step, as compile keeps less."""
    case = TRAINING[1]
    eager = estimate(traced_spec(case["command"], compile_=False)).peak_allocated_bytes
    assert case["peak_bytes"] < eager
    assert estimate(traced_spec(case["command"])).peak_allocated_bytes < eager


def test_compiled_chunked_loss_by_hand() -> None:
    """Chunked loss compiled: the 16-bit logits kept plus 8 bytes per token; backward one chunk's bf16 gradient."""
    spec = traced_spec(TRAINING[0]["command"])
    work = resolve_workload(spec)
    loss = inductor.compiled_chunked_loss(work.shape, work.tokens, act.Dtypes(2, 2, 2, False))
    assert loss.saved == 1024 * 1000 * 2 + 1024 * 8
    assert loss.backward_temporaries == 2 * 64 * 1000 * 2


@pytest.mark.parametrize(
    ("workload", "model", "message"),
    [
        ({"mode": "inference", "use_cache": True}, {}, "use_cache"),
        ({"mode": "inference", "prompt_len": 64, "runtime": "hf"}, {}, "give cache: static"),
        ({"mode": "inference", "prompt_len": 64, "runtime": "vllm"}, {}, "vLLM compiles"),
        ({"mode": "inference", "prompt_len": 64, "runtime": "gpt-fast"}, {}, "gpt-fast compiles"),
        ({"precision": "mixed-bf16"}, {}, "precision: mixed-bf16"),
        ({"attention": "eager"}, {}, "attention: sdpa"),
        ({"gradient_checkpointing": "selective"}, {}, "selective"),
        ({"adapter": {"type": "dora", "rank": 8}}, {}, "adapter.type: dora"),
        ({"cross_entropy": "fused_linear"}, {}, "fused_linear"),
        ({"versions": {"transformers": "4.40.0"}}, {}, "versions.transformers"),
        ({}, {"experts": 4, "experts_per_token": 2}, "mixture-of-experts"),
    ],
)
def test_refused(workload: dict[str, Any], model: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match="workload.compile") as err:
        estimate(small_llama(model, **workload))
    assert message in str(err.value)


@pytest.mark.parametrize("case", INFERENCE, ids=[c["id"] for c in INFERENCE])
def test_against_the_traced_compiled_forward(case: dict[str, Any]) -> None:
    """Each traced compiled no-grad forward (llama, GPT-2, BERT; bf16, fp32 and autocast; two lengths each) within
    2.5 %."""
    result = estimate(traced_spec(case["command"]))
    assert result.params == case["params"]
    assert abs(result.peak_allocated_bytes / case["peak_bytes"] - 1) <= 0.025, case["id"]


def test_inference_quality_bar() -> None:
    """Compiled forwards: median |error| at most 2 %, the largest at most 5 %."""
    absolute = [abs(estimate(traced_spec(c["command"])).peak_allocated_bytes / c["peak_bytes"] - 1) for c in INFERENCE]
    assert statistics.median(absolute) <= 0.02
    assert max(absolute) <= 0.05


def test_compiled_llama_forward_by_hand() -> None:
    """The first Llama forward (bf16, 2 x 512 = 1024 tokens, h = 256, f = 688), from the traced peak's live
    tensors: the embedding output and the block input, the o_proj output, gate, up and silu(gate) x up, all bf16
    ((3 x 256 + 3 x 688) x 2 bytes per token), and the rotary cos and sin tables (2 x 512 x 64 x 2)."""
    expected = 1024 * (3 * 256 + 3 * 688) * 2 + 2 * 512 * 64 * 2
    spec = traced_spec(INFERENCE[0]["command"])
    work = resolve_workload(spec)
    assert compiled.compiled_inference_bytes(work.shape, work.tokens, work.dtypes) == expected


def test_compiled_amp_llama_forward_by_hand() -> None:
    """The first autocast Llama forward (bf16 compute, fp32 residual stream; 1024 tokens, h = 256, f = 688), from the
    traced peak's live tensors: the fp32 embedding output and block input (2 x 256 x 4 per token), the bf16 o_proj
    output, gate, up and their product ((256 + 3 x 688) x 2 per token), the down projection's bf16 weight cast
    (688 x 256 x 2) and the fp32 rotary cos and sin tables (2 x 512 x 64 x 4)."""
    expected = 1024 * (2 * 256 * 4 + (256 + 3 * 688) * 2) + 688 * 256 * 2 + 2 * 512 * 64 * 4
    case = next(c for c in INFERENCE if c["id"] == "compile-infer-amp-llama_l2_h256_b2_s512_bf16")
    work = resolve_workload(traced_spec(case["command"]))
    assert compiled.compiled_inference_bytes(work.shape, work.tokens, work.dtypes) == expected


def test_compile_lowers_the_eager_forward() -> None:
    """Fused intermediates: the compiled forward's working set is below the eager one vramcalc counts."""
    spec = traced_spec(INFERENCE[0]["command"])
    assert (
        estimate(spec).peak_allocated_bytes < estimate(traced_spec(INFERENCE[0]["command"], False)).peak_allocated_bytes
    )
