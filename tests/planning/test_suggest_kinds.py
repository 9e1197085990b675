"""What `check` and `fit` suggest depends on the workload: serving specs get serving fixes (4-bit weights,
an fp8 KV cache, a shorter context), LoRA specs QLoRA, full training the training list; a sharding keeps
the GPU count the user planned for."""

from __future__ import annotations

from pathlib import Path

from vramcalc.hardware.lookup import get_gpu
from vramcalc.planning.budget import budget_for, fit_on
from vramcalc.planning.check import CheckRow
from vramcalc.planning.fit import check_on
from vramcalc.planning.limits import with_workload
from vramcalc.planning.suggest import TRIED_SERVING
from vramcalc.render.check import fixes
from vramcalc.spec.load import load_spec, parse_spec
from vramcalc.spec.models import Spec

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
TRAINING_FIXES = ("gradient_checkpointing", "optimizer:", "accumulation")


def serving_spec(batch: int = 6) -> Spec:
    """Llama-3-8B served with vLLM (configs/llama-3-8b-inference.yaml): bf16, 4,096 + 4,096 tokens, blocks of 16;
    six sequences by default, which do not fit an L4 while an fp8 KV cache would."""
    return with_workload(load_spec(CONFIGS / "llama-3-8b-inference.yaml"), batch_size=batch)


def test_serving_spec_gets_serving_fixes_and_no_training_fix() -> None:
    l4 = budget_for(get_gpu("l4"))
    spec = serving_spec()
    fit = check_on(spec, l4)
    assert not fit.fits
    changes = [s.change for s in fit.suggestions]
    assert not [c for c in changes if c.startswith(TRAINING_FIXES) or "accumulation" in c], changes
    assert "kv_cache_dtype: fp8" in changes
    assert any(c.startswith("quantization: {method: awq, bits: 4") for c in changes)
    assert any(c.startswith("prompt_len: ") for c in changes)
    for s in fit.suggestions:  # each computed: its total is what the card holds
        assert 0 <= s.headroom_bytes and s.total_bytes + s.headroom_bytes == fit.available_bytes
    assert "gradients" not in fit.sharding and "tensor_parallel_size" in fit.sharding


def test_fp8_kv_cache_halves_the_kv_bytes() -> None:
    # KV cache by hand from the spec's shape (Llama-3-8B: 32 layers, 8 KV heads of 128): keys and values,
    # 2 x 32 x 8 x 128 = 65,536 values per token; bf16 = 2 bytes -> 131,072 B, fp8 = 1 byte -> 65,536 B.
    # 6 sequences x 8,192 tokens (4,096 prompt + 4,096 new, whole 16-token blocks): 49,152 tokens.
    # vLLM's verdict is the profile's non-KV peak plus the batch's KV cache; the fp8 cache changes only the latter.
    tokens = 6 * (4096 + 4096)
    kv_bf16, kv_fp8 = tokens * 2 * 32 * 8 * 128 * 2, tokens * 2 * 32 * 8 * 128 * 1
    assert kv_bf16 == 6_442_450_944 and kv_fp8 == kv_bf16 // 2
    l4 = budget_for(get_gpu("l4"))
    fit = check_on(serving_spec(), l4)
    fp8 = next(s for s in fit.suggestions if s.change == "kv_cache_dtype: fp8")
    assert fp8.total_bytes == fit.needed_bytes - (kv_bf16 - kv_fp8)


def test_shorter_context_is_the_longest_prompt_that_fits() -> None:
    l4 = budget_for(get_gpu("l4"))
    spec = serving_spec()
    fit = check_on(spec, l4)
    shorter = next(s for s in fit.suggestions if s.change.startswith("prompt_len: "))
    prompt = int(shorter.change.split()[1])
    assert 0 < prompt < 4096 and f"(context {prompt + 4096} with 4096 new tokens)" in shorter.change
    assert fit_on(with_workload(spec, prompt_len=prompt), l4).fits
    assert not fit_on(with_workload(spec, prompt_len=prompt + 1), l4).fits


def test_serving_spec_that_nothing_fixes_says_what_was_tried() -> None:
    # Llama-3-8B bf16 weights alone (about 16 GB) exceed a T4's 15 GiB: 4-bit weights fit, or the same
    # weights split over two T4s (about 8 GB each, tensor parallelism)
    t4 = budget_for(get_gpu("t4"))
    fit = check_on(serving_spec(batch=1), t4)
    assert [s.change.split(":")[0] for s in fit.suggestions] == ["quantization", "tensor parallelism over 2 GPUs"]
    # Llama-3-70B from a 4-bit AWQ checkpoint (configs/llama-3-70b.yaml): about 37 GB of weights, 4.6 GB
    # per GPU even over tensor parallelism 8 (one node): nothing fixes it on a 4 GiB card
    from vramcalc.hardware.lookup import find_card

    no_fix = check_on(load_spec(CONFIGS / "llama-3-70b.yaml"), budget_for(find_card("4GiB")[0]))
    assert not no_fix.fits and not no_fix.suggestions
    (line,) = fixes(CheckRow("llama-3-70b.yaml", "llama-3-70b", no_fix))
    assert f"tried: {TRIED_SERVING})" in line and "checkpointing" not in line and "Adafactor" not in line


def test_lora_spec_gets_qlora() -> None:
    # Qwen2.5-7B LoRA (configs/qwen2.5-7b-lora.yaml) at batch 1 x 512 tokens: the bf16 base (about 15 GB)
    # does not fit a T4; with the base in 4-bit NF4 (QLoRA) it does
    spec = with_workload(load_spec(CONFIGS / "qwen2.5-7b-lora.yaml"), batch_size=1, seq_len=512)
    t4 = budget_for(get_gpu("t4"))
    fit = check_on(spec, t4)
    qlora = [s for s in fit.suggestions if "QLoRA" in s.change]
    assert len(qlora) == 1 and qlora[0].change.startswith("quantization: {method: nf4, double_quant: true}")
    changed = with_workload(spec, quantization={"method": "nf4", "double_quant": True})
    assert qlora[0].total_bytes == fit_on(changed, t4).needed_bytes
    assert "kv_cache_dtype: fp8" not in [s.change for s in fit.suggestions]


def test_full_training_keeps_the_training_list() -> None:
    spec = load_spec(ROOT / "examples" / "check" / "bert-large-v100.yaml")
    v100 = budget_for(get_gpu("v100-16gb-sxm2"))
    changes = [s.change for s in check_on(spec, v100).suggestions]
    assert "gradient_checkpointing: full" in changes
    assert not [c for c in changes if c.startswith(("kv_cache_dtype", "quantization", "prompt_len"))]


def test_sharding_keeps_the_gpu_count_the_user_planned_for() -> None:
    # Llama-2-7B full fine-tuning on A100 40GB: alone, the fewest GPUs of ZeRO-3/FSDP is 2; planned for 4
    # GPUs (target.count or --gpus 4), the suggestion shards over those 4
    spec = load_spec(CONFIGS / "llama-2-7b.yaml")
    a100 = get_gpu("a100-40gb-sxm")
    one = [s.change for s in check_on(spec, budget_for(a100)).suggestions if s.change.startswith("shard")]
    four = [s.change for s in check_on(spec, budget_for(a100, count=4)).suggestions if s.change.startswith("shard")]
    assert one and one[0].startswith("shard over 2 GPUs")
    assert four and all(c.startswith("shard over 4 GPUs") for c in four)


def plain_inference() -> Spec:
    """Llama-3-8B, one no-grad forward of 4 x 2,048 tokens in bf16: no KV-cache key, so no LLM workload key."""
    data = load_spec(CONFIGS / "llama-3-8b-inference.yaml").model_dump(exclude_none=True, mode="json")
    data["workload"] = {"mode": "inference", "batch_size": 4, "seq_len": 2048, "precision": "bf16"}
    return parse_spec(data)


def test_plain_inference_gets_tensor_parallelism_that_vramcalc_computes() -> None:
    spec, t4 = plain_inference(), get_gpu("t4")
    found = [s for s in check_on(spec, budget_for(t4)).suggestions if s.change.startswith("tensor parallelism")]
    assert [s.change for s in found] == ["tensor parallelism over 2 GPUs"] and found[0].parallel == {"tensor": 2}
    tp2 = parse_spec({**spec.model_dump(exclude_none=True, mode="json"), "parallel": {"tensor": 2}})
    assert found[0].total_bytes == fit_on(tp2, budget_for(t4)).needed_bytes
    four = [s for s in check_on(spec, budget_for(t4, count=4)).suggestions if s.change.startswith("tensor")]
    assert [s.change for s in four] == ["tensor parallelism over 4 GPUs"]


def test_serving_spec_too_big_for_one_card_gets_tensor_parallelism() -> None:
    """Llama-3-70B in bf16 under vLLM, 8 requests of 8,192 tokens, on one H100 (71.3 GiB managed): the
    weights alone are 70.6e9 x 2 B = 131 GiB, so one card cannot hold them; over TP 2 a GPU holds 65.7 GiB of
    weights plus its half of the KV cache (80 layers x 2 x 4 KV heads x 128 x 2 B = 163,840 B/token x 65,536
    tokens = 10 GiB), more than 71.3 GiB; over TP 4 about 33 + 5 GiB. So the fewest GPUs is 4."""
    spec = parse_spec(
        {
            "model": "llama-3-70b",
            "workload": {
                "mode": "inference",
                "batch_size": 8,
                "prompt_len": 4096,
                "max_new_tokens": 4096,
                "precision": "bf16",
                "runtime": "vllm",
            },
        }
    )
    fit = check_on(spec, budget_for(get_gpu("h100-sxm")))
    assert not fit.fits
    tp = [s for s in fit.suggestions if s.change.startswith("tensor parallelism")]
    assert [s.change for s in tp] == ["tensor parallelism over 4 GPUs"]
    assert tp[0].parallel == {"tensor": 4} and tp[0].headroom_bytes > 0
