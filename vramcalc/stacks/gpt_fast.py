"""gpt-fast's generation (``runtime: gpt-fast``; pytorch-labs/gpt-fast ``model.py`` and ``generate.py``,
which torchao's ``_models/llama`` benchmarks follow): its own Llama code with a static KV cache. Pure.

``generate`` calls ``model.setup_caches(max_batch_size=batch, max_seq_length=...)`` before the prefill with
the prompt and the new tokens (``min(T + max_new_tokens, block_size)``; torchao's ``--cache_size``, here
``workload.max_cache_len``, sets it instead), and ``setup_caches`` rounds it up to a multiple of 8
(``find_multiple``). It then allocates, at the output layer's dtype:

* every layer's ``KVCache``: ``k_cache`` and ``v_cache`` buffers of ``(batch, n_local_heads, max_seq_length,
  head_dim)`` (``torch.zeros``);
* ``causal_mask = torch.tril(torch.ones(max_seq_length, max_seq_length, dtype=torch.bool))``: one byte per
  pair of positions;
* ``freqs_cis = precompute_freqs_cis(block_size, head_dim, ...)``: ``block_size x head_dim/2 x 2`` values
  (the model's ``block_size``, its longest context: ``max_position_embeddings``).

Each forward indexes them by position (``self.causal_mask[None, None, input_pos]`` and
``self.freqs_cis[input_pos]``: copies, ``tokens x max_seq_length`` bytes and ``tokens x head_dim`` values),
each attention writes its new K and V into the cache in place and expands the whole cache to every query head
(``repeat_interleave``) for ``F.scaled_dot_product_attention`` with the mask, and the output layer returns the
logits of every position at the model's dtype (``prefill`` samples from the last: ``logits[:, -1]``).
"""

from __future__ import annotations

from vramcalc.choices import Architecture, Attention, KvCacheDtype
from vramcalc.core.shape import ModelShape
from vramcalc.core.workload import DTYPES
from vramcalc.errors import SpecError
from vramcalc.llm.generation import StaticCache, check_cache_len, prompt_and_context, refuse_paged_serving_keys
from vramcalc.spec.models import Spec
from vramcalc.stacks.techniques import one_gpu_only
from vramcalc.units import allocation_bytes, ceil_div

#: ``setup_caches`` rounds ``max_seq_length`` up to a multiple of this (``find_multiple(max_seq_length, 8)``).
SEQ_MULTIPLE = 8


def check_keys(spec: Spec) -> None:
    """gpt-fast's rules, refused with one line naming the key: one GPU, SDPA, the cache at the model's dtype,
    the model's own weights (its int8/int4 quantizations are not modelled), a cache that holds the context."""
    wl = spec.workload
    reason = one_gpu_only(wl)
    if spec.parallel is not None and reason is not None:
        raise SpecError(reason)
    refuse_paged_serving_keys(wl, "gpt-fast")
    if wl.kv_cache_dtype not in (None, KvCacheDtype.auto):
        raise SpecError("workload.kv_cache_dtype: gpt-fast's KV cache has the model's dtype (runtime: gpt-fast)")
    if wl.quantization is not None:
        raise SpecError("workload.quantization: gpt-fast's own int8/int4 weights are not modelled (runtime: gpt-fast)")
    if wl.attention is not Attention.sdpa:
        raise SpecError(f"workload.attention: gpt-fast calls F.scaled_dot_product_attention (got {wl.attention.value})")
    if wl.use_cache is False:
        raise SpecError("workload.use_cache: gpt-fast always sets up its KV cache (runtime: gpt-fast)")
    check_cache_len(wl)


def cache_tokens(spec: Spec) -> int:
    """``max_seq_length`` as ``setup_caches`` allocates it: the context (or ``max_cache_len``) rounded up to
    a multiple of 8."""
    _, context = prompt_and_context(spec.workload)
    tokens = spec.workload.max_cache_len or context
    return ceil_div(tokens, SEQ_MULTIPLE) * SEQ_MULTIPLE


def static_cache(spec: Spec, shape: ModelShape) -> StaticCache:
    """gpt-fast's cache and buffers (see the module's notes): the KV cache for :func:`cache_tokens` tokens,
    the boolean causal mask and the rotary table set up with it; the prefill's and a step's indexed mask rows
    and rotary rows; K and V expanded over the whole cache in every forward; the prompt's logits at the
    model's dtype."""
    if shape.architecture is not Architecture.decoder or shape.mla is not None or shape.moe is not None:
        raise SpecError("workload.runtime: gpt-fast's model code is a dense Llama-style decoder (no experts, no MLA)")
    if shape.sliding_window:
        raise SpecError("workload.runtime: gpt-fast's model code has no sliding-window attention")
    wl = spec.workload
    compute = DTYPES[wl.precision].compute
    tokens = cache_tokens(spec)
    prompt, _ = prompt_and_context(wl)
    positions = spec.model.max_position_embeddings or tokens
    rotary_row = shape.head_dim * compute  # head_dim/2 (cos, sin) pairs
    return StaticCache(
        tokens=tokens,
        buffers=allocation_bytes(tokens * tokens) + allocation_bytes(positions * rotary_row),
        prefill_extra=allocation_bytes(prompt * tokens) + allocation_bytes(prompt * rotary_row),
        decode_extra=allocation_bytes(tokens) + allocation_bytes(rotary_row),
        prefill_expands=True,
        prompt_logits=True,
    )
