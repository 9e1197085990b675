"""vLLM's KV capacity against its published start-up logs, on the catalog's cards.

Every figure compared comes from a log: the ``inference_kv_capacity`` case of shared/calibration/measured.yaml
(cited by id) and the ``total_gpu_memory`` lines of public vLLM issues (cited by URL). The other vLLM entry of
measured.yaml, ``vllm-llama31-405b-fp8-tp8-weights``, is a weights-only load at tensor parallel 8 with a
mixed FP8 checkpoint: it has no KV figure, so it is not scored here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from measured_records import measured_case
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.families import estimate
from vramcalc.hardware.lookup import get_gpu
from vramcalc.planning.budget import budget_for, fit_on
from vramcalc.spec.load import parse_spec
from vramcalc.stacks import vllm
from vramcalc.units import GiB, MiB

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT.parent / "shared" / "calibration" / "measured.yaml"
runner = CliRunner()
#: The goal for KV tokens against a log.
LIMIT = 0.03

# measured.yaml vllm-qwen2.5-1.5b-t4-util0.5: model fields as the case records them (public config)
QWEN25_15B = {
    "architecture": "decoder", "layers": 28, "hidden_size": 1536, "heads": 12, "kv_heads": 2, "ffn_size": 8960,
    "mlp": "swiglu", "vocab_size": 151936, "tie_embeddings": True,
}  # fmt: skip


def _case(case_id: str) -> dict[str, Any]:
    return measured_case(case_id)


def _spec(model: dict[str, Any], **workload: Any) -> Any:
    return parse_spec({"model": model, "workload": {"mode": "inference", "batch_size": 1, **workload}}, "test")


@pytest.mark.skipif(not MEASURED.exists(), reason="../shared/calibration not present")
def test_qwen25_on_t4_v0_log() -> None:
    """measured.yaml vllm-qwen2.5-1.5b-t4-util0.5: V0 engine, max_model_len 32,768, no chunked prefill,
    gpu_memory_utilization 0.5, block 16, fp16 on a T4: "# GPU blocks 5519" (88,304 tokens)."""
    case = _case("vllm-qwen2.5-1.5b-t4-util0.5")
    measured = case["measured"]
    also = {a["quantity"]: a["value_bytes"] for a in measured["also"]}
    spec = _spec(
        QWEN25_15B,
        seq_len=32768,
        precision="fp16",
        memory_utilization=0.5,
        kv_block_size=16,
        versions={"vllm": "0.7.3"},
    )
    fit = fit_on(spec, budget_for(get_gpu("t4")))
    pool = fit.kv_pool
    assert pool is not None
    assert abs(pool.blocks / measured["value_blocks"] - 1) <= LIMIT, pool.blocks
    assert abs(pool.tokens / measured["value"] - 1) <= LIMIT, pool.tokens
    # the log's "maximum concurrency" 2.69x = tokens / max_model_len
    assert abs(pool.max_concurrency - measured["max_concurrency_at_max_model_len"]) <= 0.03 * 2.69
    # the terms, each against the log's breakdown (printed to 0.01 GiB)
    info = estimate(spec, hopper_or_newer=False).llm
    assert info is not None and info.kv_pool is not None and info.kv_pool.engine is not None
    engine = info.kv_pool.engine
    assert engine.max_num_batched_tokens == 32768  # V0: max(max_model_len 32,768, 2048), the log's profile run
    assert abs(engine.activation_peak_bytes / also["activation_peak"] - 1) <= LIMIT  # 2.02 GiB
    # vLLM's total: 0.5 x total = 7.28 GiB ("budget"); ours is the catalog's T4 driver total less UNSEEN_BYTES
    seen = get_gpu("t4").usable_bytes - vllm.UNSEEN_BYTES
    assert abs(0.5 * seen - also["budget"]) <= 0.01 * GiB


# (catalog card, total_gpu_memory printed by vLLM in GiB, where)
PRINTED_TOTALS = [
    ("t4", 14.56, "measured.yaml vllm-qwen2.5-1.5b-t4-util0.5"),
    ("rtx-4090", 23.55, "https://github.com/vllm-project/vllm/issues/11550"),
    ("rtx-3090", 23.58, "https://github.com/vllm-project/vllm/pull/14447"),
    ("h100-sxm", 79.22, "https://github.com/vllm-project/vllm/pull/10511"),
]


@pytest.mark.parametrize(("card", "printed_gib", "where"), PRINTED_TOTALS)
def test_total_vllm_sees(card: str, printed_gib: float, where: str) -> None:
    """The total vLLM reads from torch.cuda.mem_get_info() is the driver total less one constant: within
    15 MiB of each log (printed to 0.01 GiB, +-5 MiB)."""
    seen = get_gpu(card).usable_bytes - vllm.UNSEEN_BYTES
    assert abs(seen - printed_gib * GiB) <= 15 * MiB, where


def _json(tmp_path: Path, workload: dict[str, Any], gpu: str = "t4") -> dict[str, Any]:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({"model": QWEN25_15B, "workload": {"mode": "inference", **workload}}))
    result = runner.invoke(app, ["estimate", str(path), "--gpu", gpu, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_v1_default_profile_and_keys(tmp_path: Path) -> None:
    # V1 (default): 2048 batched tokens over min(256, 2048) = 256 requests (EngineArgs.get_batch_defaults)
    doc = _json(tmp_path, {"batch_size": 1, "seq_len": 4096, "precision": "fp16", "runtime": "vllm"})
    engine = doc["vllm"]
    assert (engine["version"], engine["engine"]) == (vllm.DEFAULT_VERSION, "V1")
    assert (engine["max_num_batched_tokens"], engine["max_num_seqs"], engine["max_model_len"]) == (2048, 256, 4096)
    assert engine["cuda_graph_bytes"] == 0
    # T4: 15,360 MiB - 440 MiB = 14,920 MiB seen
    assert engine["total_seen_bytes"] == 14920 * MiB
    # blocks x 16 = tokens; concurrency = tokens / the request's context
    assert doc["kv_cache_blocks"] * 16 == doc["kv_cache_tokens"]
    assert doc["max_concurrency"] == doc["kv_cache_tokens"] * 100 // 4096 / 100
    assert any("max_num_batched_tokens not given: 2,048" in a for a in doc["assumptions"])


def test_v0_default_batched_tokens_floor(tmp_path: Path) -> None:
    # V0 SchedulerConfig: max(max_model_len, 2048): 1,024 -> 2,048; 8,192 -> 8,192
    short = _json(tmp_path, {"batch_size": 1, "seq_len": 1024, "precision": "fp16", "versions": {"vllm": "0.6.4"}})
    assert (short["vllm"]["engine"], short["vllm"]["max_num_batched_tokens"]) == ("V0", 2048)
    long = _json(
        tmp_path,
        {"batch_size": 1, "seq_len": 1024, "max_model_len": 8192, "precision": "fp16", "versions": {"vllm": "0.6.4"}},
    )
    assert long["vllm"]["max_num_batched_tokens"] == 8192


def test_larger_profile_leaves_fewer_blocks(tmp_path: Path) -> None:
    # 8 requests: their sampling step (8 x 151,936 logits) stays below either forward's peak
    common = {"batch_size": 1, "seq_len": 4096, "precision": "fp16", "max_num_seqs": 8}
    small = _json(tmp_path, {**common, "max_num_batched_tokens": 2048})
    large = _json(tmp_path, {**common, "max_num_batched_tokens": 16384})
    assert large["vllm"]["activation_peak_bytes"] > small["vllm"]["activation_peak_bytes"]
    assert large["kv_cache_blocks"] < small["kv_cache_blocks"]


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ({"seq_len": 8192, "max_model_len": 4096}, "workload.seq_len"),
        ({"seq_len": 512, "runtime": "hf", "max_num_seqs": 8}, "workload.max_num_seqs"),
        ({"seq_len": 512, "versions": {"vllm": "latest"}}, "workload.versions.vllm"),
        ({"seq_len": 512, "versions": {"tensorrt": "1.0"}}, "versions"),
        ({"seq_len": 512, "versions": {"vllm": "0.6.4"}, "max_num_batched_tokens": 256}, "max_num_batched_tokens"),
        ({"seq_len": 512, "runtime": "hf", "versions": {"flashinfer": "0.3.1"}}, "workload.versions.flashinfer"),
        ({"seq_len": 512, "versions": {"flashinfer": "newest"}}, "versions.flashinfer"),
    ],
)
def test_bad_vllm_keys_exit_2(tmp_path: Path, workload: dict[str, Any], message: str) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(
        yaml.safe_dump({"model": QWEN25_15B, "workload": {"mode": "inference", "batch_size": 1, **workload}})
    )
    result = runner.invoke(app, ["estimate", str(path)])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


LOGS = ROOT / "benchmarks" / "data" / "vllm_logs.yaml"
H100_CUBLAS_WORKSPACE = 32 * MiB  # PyTorch's cuBLAS workspace on Hopper, allocated during the profile's forward


def _log(row_id: str) -> dict[str, Any]:
    rows: list[dict[str, Any]] = yaml.safe_load(LOGS.read_text(encoding="utf-8"))
    return next(row for row in rows if row["id"] == row_id)


def _log_json(tmp_path: Path, row: dict[str, Any]) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": row["id"],
        "model": row["model"],
        "workload": {"mode": "inference", "batch_size": 1, "runtime": "vllm", **row["workload"]},
    }
    if row["tensor"] > 1:
        doc["parallel"] = {"tensor": row["tensor"]}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = runner.invoke(app, ["estimate", str(path), "--gpu", row["gpu"], "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("row_id", ["llama3-8b-h100-tp1-v065", "llama3-8b-h100-tp2-v065"])
def test_v0_profile_peak_is_its_sampling_sort(tmp_path: Path, row_id: str) -> None:
    """vllm-project/vllm#10511's logs (Llama-3-8B, vllm serve defaults on an H100, V0): "PyTorch activation
    peak memory 1.26GiB" at tensor parallel 1 and 2 alike, because the peak is the sampling step, which runs
    on the full vocabulary (V0 gathers the logits to the driver) for max_num_seqs = 256 rows:
    256 x 128,256 logits x (2 bf16 + 4 fp32 copy + 4 sorted + 8 int64 indices + 20 sort scratch from 128 rows:
    SortStable.cu ``segmented_sort_pairs``) = 1,247,674,368 B, with the forward's 8,192 bf16 hidden states
    and the 256 rows sampled held (8,448 x 4,096 x 2 = 69,206,016 B) and the 32 MiB cuBLAS workspace:
    1,350,434,816 B = 1.258 GiB. The weights match too (14.96 / 7.48 GiB)."""
    row = _log(row_id)
    doc = _log_json(tmp_path, row)
    sort = 256 * 128256 * (2 + 4 + 4 + 8 + 20)
    held = (8192 + 256) * 4096 * 2
    assert sort == 1_247_674_368 and held == 69_206_016
    assert doc["vllm"]["activation_peak_bytes"] == sort + held
    peak = (sort + held + H100_CUBLAS_WORKSPACE) / GiB
    assert abs(peak - row["logged"]["activation_peak_gib"]) <= 0.005
    assert abs(doc["components"]["parameters"] / GiB - row["logged"]["weights_gib"]) <= 0.005


@pytest.mark.parametrize("row_id", ["llama3-8b-h100-tp1-v065", "llama3-8b-h100-tp2-v065"])
def test_v065_gap_is_the_non_torch_memory_not_modelled(tmp_path: Path, row_id: str) -> None:
    """Before 0.7.0 vLLM's non_torch_memory also counts the caching allocator's reserved but unallocated
    segments and the CUDA context's growth (``memory_profiling`` at 0.6.5 subtracts the growth of
    ``allocated_bytes.all.current``, not of ``memory_reserved()``: vllm-project/vllm#11809). That is not
    derivable and not modelled: the estimate's budget exceeds the log's by what the log prints for it, less
    the NCCL buffers modelled at tensor parallel 2 (0.25 GiB), to within the logs' rounding."""
    row = _log(row_id)
    doc = _log_json(tmp_path, row)
    logged = row["logged"]
    gap = doc["kv_cache_budget_bytes"] / GiB - logged["kv_budget_gib"]
    modelled = doc["vllm"]["non_torch_bytes"] / GiB
    assert abs(gap - (logged["non_torch_gib"] - modelled)) <= 0.03
    assert any("vllm-project/vllm#10511" in note for note in doc["assumptions"])


#: PyTorch's cuBLAS workspace before Hopper (an RTX 3090, a T4): 4096 KiB x 2 + 16 KiB x 8 (CUBLAS_WORKSPACE_CONFIG)
AMPERE_CUBLAS_WORKSPACE = 8 * MiB + 128 * 1024


@pytest.mark.parametrize(
    ("row_id", "tokens", "peak_torch_gib"),
    [("llama3.1-8b-3090-v064-20k", 20_000, 17.06), ("llama3.1-8b-3090-v064-29k", 29_000, 17.98)],
)
def test_v0_forward_of_llama_py(tmp_path: Path, row_id: str, tokens: int, peak_torch_gib: float) -> None:
    """vllm-project/vllm#10517 (Llama-3.1-8B on an RTX 3090, vLLM 0.6.4, V0 without chunked prefill, so the
    profile's forward runs max_model_len tokens). vLLM's llama.py keeps three hidden-wide tensors through a layer
    (the loop's layer input, normalised in place; the residual, updated in place; the output projection,
    normalised in place) and its MLP frees the merged gate/up output before the down projection
    (``x, _ = self.gate_up_proj(x)``): per token 3 x 4,096 + 3 x 14,336 = 55,296 bf16 values, 110,592 B. The
    sampling step (256 x 128,256 x 38 B + the hidden states) is smaller. The log prints peak_torch_memory and
    "Loading model weights took 14.9888 GB": their difference less the pre-Hopper cuBLAS workspace, to within the
    two printed decimals. The weights: 8,030,261,248 x 2 B plus vLLM's RoPE cache, 131,072 x 128 x 2 B =
    16,094,076,928 B = 14.98878 GiB, the log's 14.9888."""
    doc = _log_json(tmp_path, _log(row_id))
    forward = tokens * (3 * 4096 + 3 * 14336) * 2
    assert doc["vllm"]["activation_peak_bytes"] == forward
    logged = peak_torch_gib - 14.9888
    assert abs((forward + AMPERE_CUBLAS_WORKSPACE) / GiB - logged) <= 0.01
    assert doc["components"]["parameters"] == 8_030_261_248 * 2 + 131_072 * 128 * 2
    assert round(doc["components"]["parameters"] / GiB, 4) == 14.9888


@pytest.mark.skipif(not MEASURED.exists(), reason="../shared/calibration not present")
def test_v0_forward_of_qwen2_py(tmp_path: Path) -> None:
    """vLLM's qwen2.py keeps its MLP's gate/up output (``gate_up, _ = self.gate_up_proj(x)``) through the down
    projection: one hidden-wide tensor more than llama.py, per token 4 x 1,536 + 3 x 8,960 = 33,024 values.
    Qwen2.5-1.5B from the catalog (model_type qwen2) under the T4 row's settings (measured.yaml
    vllm-qwen2.5-1.5b-t4-util0.5: 32,768 tokens, fp16, "activation peak 2.02 GiB"): 32,768 x 33,024 x 2 B =
    2,164,260,864 B, with the cuBLAS workspace 2.024 GiB."""
    row = _log("qwen2.5-1.5b-t4-v073")
    assert row["model"] == "qwen2.5-1.5b"
    doc = _log_json(tmp_path, row)
    forward = 32_768 * (4 * 1536 + 3 * 8960) * 2
    assert forward == 2_164_260_864
    assert doc["vllm"]["activation_peak_bytes"] == forward
    also = {a["quantity"]: a["value_bytes"] for a in _case("vllm-qwen2.5-1.5b-t4-util0.5")["measured"]["also"]}
    assert abs(forward + AMPERE_CUBLAS_WORKSPACE - also["activation_peak"]) <= 0.01 * GiB


def test_sort_scratch_by_rows() -> None:
    """PyTorch's ``launch_stable_sort_kernel`` (SortStable.cu): one row, ``segmented_sort_large_segments``
    (int64 start indices 8 + cub's alternate fp32 keys 4 and int64 values 8 = 20 B per element); 2 to 127
    rows, ``segmented_sort_pairs_by_full_sort`` (two int2 buffers 8 + 8, the unused sorted keys 4, cub's
    alternates 4 + 8 = 32 B); from 128 rows, ``segmented_sort_pairs`` (20 B as for one row)."""
    assert [vllm.sort_scratch_per_logit(rows) for rows in (1, 2, 127, 128, 1024)] == [20, 32, 32, 20, 20]


def test_v1_sampler_holds_only_the_sampled_rows() -> None:
    """V1's ``_dummy_sampler_run`` gets ``hidden_states[logit_indices]`` (one row per request), not the
    forward's output: Qwen2.5-32B (hidden 5,120, vocabulary 152,064) at 256 requests:
    256 x 5,120 x 2 + 256 x 152,064 x 38 = 2,621,440 + 1,479,278,592 B."""
    profile = vllm.Profile("0.8.2", "V1", 32768, 2048, 256)
    assert vllm.sampler_bytes(profile, 152064, 5120, 2) == 2_621_440 + 1_479_278_592


@pytest.mark.parametrize(
    ("engine", "release", "flashinfer", "sampler"),
    [
        ("V1", (0, 11), None, "torch"),  # FlashInfer is an optional extra of the pip wheel
        ("V1", (0, 11), "0.3.1", "flashinfer"),  # 0.9 on: FlashInfer 0.2.3 or later
        ("V1", (0, 9), "0.2.2", "torch"),  # "FlashInfer version >= 0.2.3 required"
        ("V1", (0, 8), "0.2.2", "flashinfer"),  # 0.8: only below 0.2.3 ...
        ("V1", (0, 8), "0.3.1", "torch"),  # ... "not backward compatible. Falling back"
        ("V0", (0, 7), "0.3.1", "torch"),  # V0's sampler sorts
    ],
)
def test_sampler_by_release(engine: str, release: tuple[int, int], flashinfer: str | None, sampler: str) -> None:
    """``TopKTopPSampler.__init__`` in vllm/v1/sample/ops/topk_topp_sampler.py: 0.8.2 and 0.8.5 fall back to
    PyTorch when ``flashinfer.__version__ >= "0.2.3"``, 0.9.0 to 0.11.0 when it is below."""
    assert vllm.sampler_of(engine, release, flashinfer)[0] == sampler


def test_flashinfer_sampler_holds_no_sort() -> None:
    """FlashInfer's sampler instead of the sort, Qwen2.5-32B at 256 requests (hidden 5,120, vocabulary 152,064;
    256 x 152,064 = 38,928,384 logits). From 0.9 (``flashinfer_sample`` -> flashinfer/sampling.py 0.3.1
    ``top_k_top_p_sampling_from_logits``, ``top_k_first``: ``top_k_mask_logits`` then ``torch.softmax``) per
    logit: the bf16 logits 2, the sampler's fp32 copy 4, the masked logits 4, the probabilities 4 = 14 B;
    in 0.8 (``forward_cuda`` computes ``probs`` and passes them) 2 + 4 + 4 = 10 B. The sampled hidden rows:
    256 x 5,120 x 2 = 2,621,440 B."""
    new = vllm.Profile("0.11.0", "V1", 32768, 2048, 256, "flashinfer")
    assert vllm.sampler_bytes(new, 152064, 5120, 2) == 2_621_440 + 38_928_384 * 14
    old = vllm.Profile("0.8.2", "V1", 32768, 2048, 256, "flashinfer")
    assert vllm.sampler_bytes(old, 152064, 5120, 2) == 2_621_440 + 38_928_384 * 10


def test_flashinfer_leaves_more_kv(tmp_path: Path) -> None:
    """The same spec with FlashInfer pinned holds more KV blocks: the profile's peak drops by the sort's
    38 - 14 = 24 B per logit (Qwen2.5-1.5B: 256 x 151,936 logits on a T4 = 933,543,936 B), which the pool
    gains, less what the forward alone needs where it is then the larger."""
    base = {"batch_size": 1, "seq_len": 4096, "precision": "fp16", "runtime": "vllm"}
    torch_sort = _json(tmp_path, base)
    flashinfer = _json(tmp_path, base | {"versions": {"flashinfer": "0.3.1"}})
    drop = torch_sort["vllm"]["activation_peak_bytes"] - flashinfer["vllm"]["activation_peak_bytes"]
    assert 0 < drop <= 256 * 151_936 * 24
    assert flashinfer["max_concurrent_sequences"] >= torch_sort["max_concurrent_sequences"]


@pytest.mark.parametrize(
    ("version", "expected", "note"),
    [
        ("0.8.2", 512 * MiB, "CUDA context"),
        ("0.9.0", 512 * MiB, "CUDA context"),
        ("0.9.1", 0, ""),
        ("0.7.3", 0, ""),
        ("0.6.4", 512 * MiB, "CUDA context"),  # V0 before memory_profiling: the same rule as V1 0.8
        ("0.6.5", 0, "reserved but unallocated"),
    ],
)
def test_non_torch_by_release(version: str, expected: int, note: str) -> None:
    """V1 until 0.9.0 (``determine_available_memory``: used memory after ``empty_cache`` less torch's
    allocated bytes, no baseline) charges the whole CUDA context, as V0 did up to 0.6.4
    (``determine_num_available_blocks`` in vllm/worker/worker.py: the same lines; the RTX 3090 logs of
    vllm-project/vllm#10517 print it, non_torch_memory 0.35 GiB = initial_memory_usage 15.34 - weights 14.99);
    0.9.1 (vllm-project/vllm#19312) and V0 from 0.7.0 measure from the worker's start, the context already
    made: nothing on one GPU; 0.6.5 and 0.6.6 count what vramcalc cannot derive, said in a note."""
    engine = "V1" if vllm.parse_version(version) >= vllm.V1_FROM else "V0"
    charged, said = vllm.non_torch_bytes(vllm.Profile(version, engine, 4096, 2048, 256), 512 * MiB)
    assert charged == expected and note in said


def test_v1_0_8_non_torch_follows_the_spec_s_cuda_context(tmp_path: Path) -> None:
    doc = _json(tmp_path, {"batch_size": 1, "seq_len": 4096, "precision": "fp16", "versions": {"vllm": "0.8.2"}})
    assert doc["vllm"]["non_torch_bytes"] == 512 * MiB
    path = tmp_path / "spec.yaml"
    spec = yaml.safe_load(path.read_text())
    spec["overhead"] = {"cuda_context": "300 MiB"}
    path.write_text(yaml.safe_dump(spec))
    result = runner.invoke(app, ["estimate", str(path), "--gpu", "t4", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["vllm"]["non_torch_bytes"] == 300 * MiB


def test_t4_log_row_within_the_goal(tmp_path: Path) -> None:
    """The stored T4 row (measured.yaml vllm-qwen2.5-1.5b-t4-util0.5, "# GPU blocks 5519") through the same
    spec the score script builds."""
    row = _log("qwen2.5-1.5b-t4-v073")
    doc = _log_json(tmp_path, row)
    assert abs(doc["kv_cache_blocks"] / row["logged"]["blocks"] - 1) <= LIMIT


def test_accuracy_page_quotes_the_score_script() -> None:
    """docs/accuracy.md's table of vLLM's start-up logs quotes benchmarks/vllm_log_score.py: its errors are the
    script's, one per log (blocks where the log prints them, else tokens, else the KV budget)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("vllm_log_score", ROOT / "benchmarks" / "vllm_log_score.py")
    assert spec is not None and spec.loader is not None
    score = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(score)
    text = (ROOT / "docs" / "accuracy.md").read_text(encoding="utf-8")
    table = text.split("### vLLM's start-up logs", 1)[1].split("\n\n")[2]
    quoted = sorted(line.rsplit("|", 2)[1].strip() for line in table.splitlines()[2:])
    errors = []
    for row in score.rows():
        error = score.score(row)["error"]
        last = error.get("blocks", error.get("kv_tokens", error.get("kv_budget_gib")))
        errors.append(f"{last * 100:+.1f} %".replace("+-", "-"))
    assert quoted == sorted(errors)
