"""llama.cpp's workload keys (``cache_type_k``, ``cache_type_v``, ``n_ubatch``, ``flash_attn``) and their
types. When a workload runs in llama.cpp: :func:`vramcalc.spec.models.runs_llamacpp`; what the keys cost, and
their rules: vramcalc/stacks/llamacpp.py.

The key names follow llama.cpp's flags: ``--cache-type-k`` / ``--cache-type-v`` (``-ctk`` / ``-ctv``),
``--ubatch-size`` (``-ub``) and ``--flash-attn`` (``-fa``).
"""

from typing import Literal

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
