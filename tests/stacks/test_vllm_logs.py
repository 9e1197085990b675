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
