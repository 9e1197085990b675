"""Generation without a KV cache: ``use_cache: false`` with ``prompt_len`` / ``max_new_tokens`` (int bytes).

``generate(..., use_cache=False)`` runs the whole sequence again for every new token and keeps nothing
between steps but the token ids. The peak is the last step: a no-grad forward over the prompt and every
generated token but the last (``prompt_len + max_new_tokens - 1`` positions; a masked-LM head appends a
pad position to predict, one more), with

* the step's logits as ``generate`` asks for them: the last position's where the model's ``forward``
  takes ``logits_to_keep`` (today's releases; a pinned one follows :mod:`vramcalc.stacks.transformers`),
  else every position's, and the sampled position's fp32 copy;
* the previous step's logits as well where the pinned release's ``_sample`` kept a step's outputs until
  the next forward returned (up to 4.41);
* ``runtime: hf-legacy`` without a pinned release: every position's logits, upcast to fp32, and the
  previous step's kept (transformers before 4.36).

A masked-LM encoder (``BertForMaskedLM``, ``head: lm``) generates this way only under a pinned
transformers release before 4.50. Runtimes with a cache of their own (vLLM, llama.cpp) and
encoder-decoder models are refused. The phase is ``generate``.
"""

from __future__ import annotations

from vramcalc.choices import Architecture, Head, Runtime
from vramcalc.core import activations as act
from vramcalc.core.shape import ModelShape
from vramcalc.errors import SpecError
from vramcalc.llm import generation
from vramcalc.spec.models import Workload


def is_recompute(wl: Workload) -> bool:
    """Whether the spec generates without a KV cache."""
    return wl.use_cache is False


def check(shape: ModelShape, wl: Workload) -> None:
    """Refuse what generation without a cache does not cover, naming the key."""
    if wl.runtime not in (None, Runtime.hf, Runtime.hf_legacy):
        raise SpecError(f"workload.use_cache: false generates with transformers; runtime {wl.runtime.value} caches")
    if wl.kv_cache_dtype is not None or wl.kv_block_size is not None:
        key = "kv_cache_dtype" if wl.kv_cache_dtype is not None else "kv_block_size"
        raise SpecError(f"workload.{key}: there is no KV cache with use_cache: false")
    if shape.architecture is Architecture.encoder_decoder:
        raise SpecError("workload.use_cache: false generation of an encoder-decoder model is not modelled")
    if shape.architecture is Architecture.encoder:
        if shape.head is not Head.lm or not shape.code.masked_lm_generates:
            raise SpecError(
                "workload.prompt_len: an encoder-only model generates only as a masked LM (head: lm) under "
                "transformers before 4.50 (versions: {transformers: ...})"
            )


def positions(shape: ModelShape, wl: Workload) -> tuple[int, int, int]:
    """(prompt, tokens of the last step's forward, context) per sequence."""
    prompt, context = generation.prompt_and_context(wl)
    last = prompt + max(context - prompt, 1) - 1
    return prompt, last + (1 if shape.architecture is Architecture.encoder else 0), context


def phase(shape: ModelShape, wl: Workload, dt: act.Dtypes) -> tuple[dict[str, int], int, int, list[str]]:
    """Components of the last step beyond weights and workspace, its tokens per sequence, the context and the
    notes on how it runs."""
    check(shape, wl)
    batch = wl.batch_size
    prompt, tokens, context = positions(shape, wl)
    if prompt < 1:
        raise SpecError("workload.prompt_len: generation needs a prompt of at least one token")
    tk = act.Tokens(batch=batch, seq=tokens, target=tokens)
    out = batch * tokens
    code = shape.code
    legacy = not code.pinned and wl.runtime is Runtime.hf_legacy  # every position's logits, upcast to fp32
    if not code.pinned:
        head = generation.head_bytes(shape, out, out if legacy else batch, dt, fp32_copy=True)
        kept, every, returned = legacy, legacy, act.FP32
    else:
        head = generation.release_head_bytes(shape, out, batch, dt)
        kept, every = code.step_outputs_kept, code.all_prompt_logits
        returned = act.FP32 if code.logits_upcast else dt.compute
    held = 0
    notes: list[str] = []
    if kept and shape.head is Head.lm:
        held = (batch * (tokens - 1) if every else batch) * shape.vocab * returned
        notes.append("generate: the previous step's logits stay allocated through the next forward (up to 4.41)")
    notes.append(f"use_cache: false: every new token runs the whole sequence again; the last step {tokens} positions")
    comps = {
        "activations": generation.prefill_transient(shape, tk, dt, wl.attention, head, transformers=True) + held,
        "inputs": generation.ids_bytes(out),
    }
    return comps, tokens, context, notes
