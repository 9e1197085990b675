"""Rules of llama.cpp's workload keys (``runtime: llama.cpp``, ``cache_type_k``, ``cache_type_v``,
``n_ubatch``, ``flash_attn``; modelled in vramcalc/stacks/llamacpp.py). Kept apart from
:mod:`vramcalc.spec.models`, which calls them.

The key names follow llama.cpp's flags: ``--cache-type-k`` / ``--cache-type-v`` (``-ctk`` / ``-ctv``),
``--ubatch-size`` (``-ub``) and ``--flash-attn`` (``-fa``).
"""

from typing import Any, Literal

from vramcalc.choices import Runtime
from vramcalc.spec.llm import GGUF

#: The KV cache types llama.cpp accepts for --cache-type-k / --cache-type-v (common/arg.cpp kv_cache_types).
CacheType = Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]
#: The workload keys that only llama.cpp reads.
LLAMACPP_KEYS = ("cache_type_k", "cache_type_v", "n_ubatch", "flash_attn")
#: Workload keys of other runtimes (vLLM's paging and scheduler, the KV dtype of vLLM and transformers).
OTHER_RUNTIME_KEYS = (
    "kv_cache_dtype",
    "kv_block_size",
    "memory_utilization",
    "max_model_len",
    "max_num_batched_tokens",
    "max_num_seqs",
)
#: Cache types stored unquantized (a quantized V cache needs flash attention).
UNQUANTIZED = ("f32", "f16", "bf16")


def is_gguf(wl: Any) -> bool:
    """Whether the workload's weights are a GGUF file type."""
    return wl.quantization is not None and wl.quantization.method in GGUF


def runs_llamacpp(wl: Any) -> bool:
    """``runtime: llama.cpp``, or a GGUF file type without a runtime (llama.cpp is its default)."""
    return wl.runtime is Runtime.llama_cpp or (wl.runtime is None and is_gguf(wl))


def llamacpp_rules(wl: Any) -> None:
    """Rules within ``workload``; raises ValueError("KEY: ...")."""
    if wl.runtime is Runtime.llama_cpp and not is_gguf(wl):
        raise ValueError(
            "runtime: llama.cpp runs GGUF files: give quantization a GGUF file type (q4_0 ... q8_0, q2_k ... q6_k)"
        )
    llamacpp = runs_llamacpp(wl)
    given = [key for key in LLAMACPP_KEYS if getattr(wl, key) is not None]
    if given and not llamacpp:
        raise ValueError(f"{given[0]}: only valid with runtime: llama.cpp (a GGUF quantization)")
    if not llamacpp:
        return
    why = "" if wl.runtime is not None else " (a GGUF file type runs in llama.cpp unless runtime says otherwise)"
    for key in OTHER_RUNTIME_KEYS:
        if getattr(wl, key) is not None:
            raise ValueError(f"{key}: not a llama.cpp setting{why}; llama.cpp takes cache_type_k, cache_type_v")
    if "vllm" in (wl.versions or {}):
        raise ValueError(f"versions: names a vLLM release, but the spec runs in llama.cpp{why}")
    if wl.flash_attn is False and wl.cache_type_v not in (None, *UNQUANTIZED):
        raise ValueError(
            f"cache_type_v: {wl.cache_type_v} is quantized, which llama.cpp allows only with flash attention "
            "(flash_attn: true)"
        )
