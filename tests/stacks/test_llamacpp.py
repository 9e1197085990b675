"""llama.cpp serving a GGUF file (vramcalc/stacks/llamacpp.py): KV cache, compute buffer and weights on the GPU,
checked against published llama.cpp start-up logs and against ggml's block sizes.

The logs (all CUDA, one GPU, every layer offloaded, flash attention off):

* Llama 3 8B Q4_K_M, n_ctx 8192, n_ubatch 512, Ollama on a Tesla T4 (2024-08-30): "KV self size = 1024.00 MiB,
  K (f16): 512.00 MiB, V (f16): 512.00 MiB", "CUDA0 compute buffer size = 560.00 MiB"; the same model in
  llama-cpp-python at n_ctx 512: "KV self size = 64.00 MiB", "CUDA0 compute buffer size = 258.50 MiB",
  "CUDA0 buffer size = 4403.49 MiB", "CPU buffer size = 281.81 MiB" (the token embedding).
* Mistral 7B (32 layers of 8 KV heads x 128, freq_base 1e6), llama-server in fedora-copr/logdetective
  pull request #106: n_ctx 2048 "KV self size = 256.00 MiB", "CUDA0 compute buffer size = 164.00 MiB";
  n_ctx 32768 "KV self size = 4096.00 MiB", "CUDA0 compute buffer size = 2144.00 MiB" (n_ubatch 512).
* Phi-3-mini-4k-instruct-q4 in text-generation-webui (llama.cpp 2025): n_ctx 4096, n_ubatch 256,
  "llama_kv_cache_unified: size = 1536.00 MiB (4096 cells, 32 layers, 1 seqs)", "CUDA0 compute buffer
  size = 150.00 MiB".
* Qwen3-235B-A22B (94 layers, 4 KV heads x 128) in ik_llama.cpp, a llama.cpp fork with the same cache
  layout: n_ctx 16384, "KV self size = 1598.00 MiB, K (q8_0): 799.00 MiB, V (q8_0): 799.00 MiB".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.families import estimate
from vramcalc.spec.load import parse_spec
from vramcalc.stacks import llamacpp
from vramcalc.units import MiB

runner = CliRunner()


def _estimate(model: Any, seq_len: int, **workload: Any) -> Any:
    wl = {"mode": "inference", "batch_size": 1, "seq_len": seq_len, "precision": "fp16", "quantization": "q4_k_m"}
    return estimate(parse_spec({"name": "t", "model": model, "workload": {**wl, **workload}}))


def _serving(model: Any, seq_len: int, **workload: Any) -> dict[str, int]:
    result = _estimate(model, seq_len, runtime="llama.cpp", **workload)
    assert result.peak_phase == "serving"
    return result.phase_components["serving"]


def test_cache_rows_follow_ggml_block_sizes() -> None:
    # ggml type_traits: q8_0 34 B per 32, q4_0 18, q4_1 20, iq4_nl 18, q5_0 22, q5_1 24; f16 2 B per element.
    # A 1,024-wide row (8 KV heads x 128) is 32 blocks.
    expected = {"q8_0": 1088, "q4_0": 576, "q4_1": 640, "iq4_nl": 576, "q5_0": 704, "q5_1": 768, "f16": 2048}
    assert {t: llamacpp.row_bytes(t, 1024, "cache_type_k") for t in expected} == expected
    assert llamacpp.row_bytes("f32", 1024, "cache_type_k") == 4096


@pytest.mark.parametrize(
    ("model", "seq_len", "extra", "kv_mib"),
    [
        ("llama-3-8b", 8192, {}, 1024),  # Ollama, T4: KV self size = 1024.00 MiB
        ("llama-3-8b", 512, {}, 64),  # llama-cpp-python: KV self size = 64.00 MiB
        ("mistral-7b", 2048, {}, 256),  # logdetective #106: 256.00 MiB
        ("mistral-7b", 32768, {}, 4096),  # logdetective #106: 4096.00 MiB
        ("phi-3-mini", 4096, {"n_ubatch": 256}, 1536),  # text-generation-webui: size = 1536.00 MiB
        # ik_llama.cpp: 1598.00 MiB = K 799.00 + V 799.00 (94 layers x 16384 cells x 4 x 128 / 32 x 34 B, twice)
        ("qwen3-235b-a22b", 16384, {"cache_type_k": "q8_0", "cache_type_v": "q8_0"}, 1598),
    ],
)
def test_kv_cache_matches_published_logs(model: str, seq_len: int, extra: dict[str, Any], kv_mib: int) -> None:
    assert _serving(model, seq_len, **extra)["kv_cache"] == kv_mib * MiB


@pytest.mark.parametrize(
    ("model", "seq_len", "extra", "compute_mib"),
    [
        # scores 8192 x 512 x 32 heads + mask 8192 x 512, f32: 528 MiB; 4 x 4096 x 512 x 4 B = 32 MiB -> 560.00
        ("llama-3-8b", 8192, {}, 560),
        # logits 128256 x 512 x 4 B = 250.5 MiB + normed hidden 8 MiB -> 258.50 (attention: 33 + 32 MiB)
        ("llama-3-8b", 512, {}, 258.5),
        # 2048 x 512 x 33 x 4 B = 132 MiB + 32 MiB -> 164.00
        ("mistral-7b", 2048, {}, 164),
        # 32768 x 512 x 33 x 4 B = 2112 MiB + 32 MiB -> 2144.00
        ("mistral-7b", 32768, {}, 2144),
        # 4096 x 256 x 33 x 4 B = 132 MiB + 6 x 3072 x 256 x 4 B (fused QKV) = 18 MiB -> 150.00
        ("phi-3-mini", 4096, {"n_ubatch": 256}, 150),
    ],
)
def test_compute_buffer_matches_published_logs(
    model: str, seq_len: int, extra: dict[str, Any], compute_mib: float
) -> None:
    phase = _serving(model, seq_len, flash_attn=False, **extra)
    assert phase["temporaries"] == int(compute_mib * MiB)


def test_flash_attention_buffer_from_the_source() -> None:
    # Derived from llama-graph.cpp (no published log): with flash attention the scores never exist; the f32
    # mask and its f16 copy are 131072 x 512 x 6 B = 384 MiB, plus 32 MiB of activations = 416 MiB, above
    # the 258.5 MiB of logits. At 8192 tokens the logits stage (258.5 MiB) is the largest.
    assert _serving("llama-3-8b", 131072)["temporaries"] == 416 * MiB
    assert _serving("llama-3-8b", 8192)["temporaries"] == int(258.5 * MiB)


def test_weights_on_the_gpu_leave_the_token_embedding_on_the_host() -> None:
    # llama-cpp-python log: CPU buffer 281.81 MiB = token_embd 128256 x 4096 at q4_K (144 B / 256)
    # = 295,501,824 B exactly; CUDA0 buffer 4403.49 MiB (the rest of the file).
    result = _estimate("llama-3-8b", 512, runtime="llama.cpp")
    gpu = result.phase_components["serving"]["parameters"]
    assert abs(gpu - 4403.49 * MiB) / (4403.49 * MiB) < 0.002
    assert any("281.81 MiB" in note for note in result.assumptions)


def test_parallel_sequences_get_their_own_padded_streams() -> None:
    # 4 x 2000 tokens: n_ctx = GGML_PAD(8000, 256) = 8192, n_ctx_seq = GGML_PAD(8192 / 4, 256) = 2048:
    # 8192 cells x 32 layers x 2 x 1024 x 2 B = 1 GiB.
    assert _serving("llama-3-8b", 2000, batch_size=4)["kv_cache"] == 1024 * MiB
    # 3 x 1000: GGML_PAD(3000, 256) = 3072, n_ctx_seq = 1024, n_ctx 3072 -> 384 MiB
    assert _serving("llama-3-8b", 1000, batch_size=3)["kv_cache"] == 384 * MiB


def test_interleaved_sliding_window_layers_keep_window_plus_ubatch() -> None:
    # Gemma 2 9B: 42 layers, every second one slides over 4096 tokens; K and V 8 x 256 f16 = 8 KiB per cell.
    # llama_kv_cache_iswa: global layers 8192 cells, sliding GGML_PAD(min(8192, 4096 + 512), 256) = 4608:
    # 8 KiB x 21 x (8192 + 4608) = 2100 MiB.
    assert _serving("gemma-2-9b", 8192)["kv_cache"] == 2100 * MiB


def test_defaults_and_assumptions() -> None:
    result = _estimate("llama-3-8b", 8192, prompt_len=8000, cache_type_k="q8_0", cache_type_v="q8_0")
    notes = "; ".join(result.assumptions)
    assert "runtime not given: llama.cpp" in notes
    assert "llama.cpp: KV at q8_0/q8_0 for 8,192 tokens, compute buffer at n_ubatch 512" in notes
    assert "flash_attn not given: on" in notes
    assert result.overhead["allocator_reserve"] == 0
    # q8_0: 8192 x 32 x 2 x 1088 B = 544 MiB
    assert result.components["kv_cache"] == 544 * MiB
    assert result.llm.kv_cache_bytes_per_token == 32 * 2 * 1088


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ({"runtime": "llama.cpp", "quantization": "nf4"}, "workload.runtime"),
        ({"runtime": "llama.cpp"}, "workload.runtime"),
        ({"runtime": "llama.cpp", "cache_type_v": "q8_0", "flash_attn": False}, "workload.cache_type_v"),
        ({"runtime": "vllm", "cache_type_k": "q8_0"}, "workload.cache_type_k"),
        ({"kv_block_size": 16}, "workload.kv_block_size"),
        ({"runtime": "llama.cpp", "kv_cache_dtype": "fp8"}, "workload.kv_cache_dtype"),
        ({"runtime": "llama.cpp", "cache_type_k": "q3_k"}, "workload.cache_type_k"),
        ({"mode": "train", "cache_type_k": "q8_0"}, "workload.cache_type_k"),
    ],
)
def test_bad_llamacpp_keys_exit_2(tmp_path: Path, workload: dict[str, Any], message: str) -> None:
    wl = {"mode": "inference", "batch_size": 1, "seq_len": 512, "precision": "fp16", "quantization": "q4_k_m"}
    wl.update(workload)
    if workload.get("runtime") == "llama.cpp" and "quantization" not in workload and len(workload) == 1:
        del wl["quantization"]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({"model": "llama-3-8b", "workload": wl}))
    result = runner.invoke(app, ["estimate", str(path)])
    assert result.exit_code == 2, result.output
    key = message.split(".", 1)[1]
    out = result.output
    assert out.startswith("error: ") and out.count("\n") == 1 and "Traceback" not in out
    assert "spec.yaml" in out and (message in out or f"workload: {key}:" in out), out


def test_quantized_v_cache_with_flash_attention_is_fine() -> None:
    phase = _serving("llama-3-8b", 8192, cache_type_k="q4_0", cache_type_v="q4_0", flash_attn=True)
    # q4_0: 8192 x 32 x 2 x 576 B = 288 MiB
    assert phase["kv_cache"] == 288 * MiB


def test_bandwidth_reads_the_kv_at_llamacpp_cache_types() -> None:
    from vramcalc.planning.stream import weights_from_spec

    wl = {"mode": "inference", "batch_size": 1, "seq_len": 8192, "precision": "fp16", "quantization": "q4_k_m"}
    quantized = {**wl, "cache_type_k": "q8_0", "cache_type_v": "q4_0"}
    # 32 layers x (1088 B of q8_0 K + 576 B of q4_0 V) per token; f16 by default: 32 x 2 x 2048
    spec = parse_spec({"model": "llama-3-8b", "workload": quantized})
    assert weights_from_spec(spec).kv_bytes_per_token == 32 * (1088 + 576)
    assert weights_from_spec(parse_spec({"model": "llama-3-8b", "workload": wl})).kv_bytes_per_token == 131_072
