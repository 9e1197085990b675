"""Inference with a KV cache: the prefill and decode peaks of one batch, per runtime (int bytes).

A spec is a *generation* when it gives ``prompt_len`` or ``max_new_tokens`` (or any other KV key:
``runtime``, ``kv_cache_dtype``, ``kv_block_size``, ``memory_utilization``). The context is ``seq_len``
= ``prompt_len + max_new_tokens``; with ``seq_len`` alone the whole context is the prompt (the largest
prefill). Without those keys a ``mode: inference`` spec stays one no-grad forward over ``seq_len`` tokens
as ``model(**batch)`` runs it, with ``use_cache`` off (the allocator-level tracer's cases);
``use_cache: true`` adds that forward's cache (batch x seq_len tokens, exact).

Phases (``runtime``):

* prefill: weights, the prompt's KV cache, the prompt forward's transient activations (see
  :func:`prefill_transient`), logits of the last position of each sequence (HF ``generate`` since
  transformers 4.45 passes ``logits_to_keep=1``; vLLM samples only last positions) plus their fp32 copy
  for sampling, and a dequantization buffer for quantized weights;
* decode: weights, the cache at the full context, one token per sequence.

``vllm``: the KV pool holds every sequence's context rounded up to ``kv_block_size`` blocks from the start.
``hf``: ``DynamicCache`` grows by ``torch.cat`` per layer (one layer's old and new cache alive together);
GQA models expand K/V to all heads in the attention call (``repeat_kv``) during decode.
``hf-legacy`` (transformers < 4.36, tuple ``past_key_values``): the previous step's cache is freed only
after the forward returns, so decode holds two caches; prefill returns fp32 logits for all positions
(``logits.float()``). This is what the 2023 blog measurements in shared/calibration ran.
With ``versions: {transformers: ...}`` the ``hf``/``hf-legacy`` prefill logits follow that release and the
model's family instead (:func:`release_head_bytes`, :mod:`vramcalc.stacks.transformers`); so does the cache:
before 4.56 the prefill keeps the attention's own K/V tensors (all of a fused QKV output that V is a view of;
GPT-NeoX's fp32 rotary keys before 4.49), and decode's ``torch.cat`` makes compact copies (fp32 keys where
the rotary made them). Under ``hf-legacy`` the first decode step holds the prefill's cache until its forward
has built the compact one.
``litgpt`` (``generate/base.py``): ``set_kv_cache`` allocates every layer's K and V for the whole context
(``max_seq_length`` = prompt + new tokens) and a ``context x context`` boolean mask before the prefill, which
writes into them in place (``index_copy_``), as each decode step does; the prefill returns the logits of every
prompt position at the compute dtype, and each step feeds the new token only.

A static cache (:class:`StaticCache`: transformers' ``cache: static``, ``runtime: gpt-fast``, ``runtime:
torchtune``) is allocated for ``StaticCache.tokens`` tokens per sequence before the prefill and written in place;
the runtime's stacks module sizes it and says what it sets up beside it, what each forward builds from that and
what its decoding loop keeps; where the forward is compiled as one graph (``StaticCache.compiled``), each
forward's working set is the compiled one (:func:`vramcalc.core.compiled.compiled_static_step_bytes`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from vramcalc.choices import Architecture, Attention, Head, KvCacheDtype, Position, Runtime
from vramcalc.core import activations as act
from vramcalc.core import compiled
from vramcalc.core.shape import ModelShape
from vramcalc.errors import SpecError
from vramcalc.llm import kvcache, moe
from vramcalc.spec.llamacpp import OTHER_RUNTIME_KEYS
from vramcalc.spec.models import Workload
from vramcalc.units import FP32, allocation_bytes


@dataclass(frozen=True)
class StaticCache:
    """A KV cache set up for ``tokens`` tokens per sequence before the prefill, as its runtime's stacks module
    (vramcalc/stacks/) sizes it (int bytes)."""

    #: tokens per sequence every layer's K and V are allocated for (sliding-window layers: at most the window)
    tokens: int
    #: bytes set up with the cache and alive in every phase (gpt-fast's causal mask and rotary table)
    buffers: int = 0
    #: bytes the prefill forward and a decode step build from the buffers or for the attention (their masks)
    prefill_extra: int = 0
    decode_extra: int = 0
    #: the attention reads K and V expanded to every query head over the whole cache (GQA models), in the
    #: prefill too (the decode steps always do where the runtime's attention gets a mask)
    prefill_expands: bool = False
    #: a decode step's attention reads K and V expanded to every query head over the whole cache (GQA models;
    #: transformers packs the query's heads by KV head instead: ``pack_gqa``)
    decode_expands: bool = True
    #: the prefill returns every prompt position's logits at the compute dtype (no fp32 copy)
    prompt_logits: bool = False
    #: the model upcasts the logits it returns to fp32, the compute-dtype ones alive until the copy is made
    #: (with ``prompt_logits``: every prompt position's; in decode: each step's)
    logits_upcast: bool = False
    #: decode steps whose loop keeps outputs across the forward, each ``(kept, built)``: the bytes kept while
    #: the step's forward runs, and the bytes of the larger tensor the step's ``torch.cat`` then builds beside
    #: them and the step's own fp32 logits (torchtune's ``generated_logits``: the first and the last step)
    kept_steps: tuple[tuple[int, int], ...] = ()
    #: the forward is compiled as one graph (the prefill's and each decode step's working set:
    #: :func:`vramcalc.core.compiled.compiled_static_step_bytes`; its masks are made inside it)
    compiled: bool = False
    #: what the runtime's module assumed in sizing the cache, for the estimate's assumptions
    note: str = ""


@dataclass(frozen=True)
class Generation:
    """A resolved generation workload (tokens are per sequence)."""

    runtime: Runtime
    batch: int
    prompt: int
    new_tokens: int
    context: int
    block: int
    kv_dtype: KvCacheDtype
    per_token: int
    memory_utilization: float
    sliding_per_token: int = 0  # the sliding-window layers' part of per_token
    window: int = 0
    #: the prompt's cache as the prefill returns it, when it differs from ``per_token`` (0: the same)
    prefill_per_token: int = 0
    #: a cache set up in full before the prefill (None: the runtime's own, dynamic for ``hf``)
    static: StaticCache | None = None


#: vLLM's paging and scheduler keys: no setting of a generate loop that sets up a static cache.
PAGED_SERVING_KEYS = tuple(key for key in OTHER_RUNTIME_KEYS if key != "kv_cache_dtype")


def refuse_paged_serving_keys(wl: Workload, runtime: str) -> None:
    """:data:`PAGED_SERVING_KEYS` given to ``runtime``'s generate loop (gpt-fast, torchtune) are refused,
    naming the key."""
    for key in PAGED_SERVING_KEYS:
        if getattr(wl, key) is not None:
            raise SpecError(f"workload.{key}: not a setting of {runtime}'s generate (runtime: {runtime})")


def check_cache_len(wl: Workload) -> None:
    """A static cache holds the whole context: ``max_cache_len`` below ``seq_len`` is refused, naming the key."""
    context = wl.seq_len or 0
    if wl.max_cache_len is not None and wl.max_cache_len < context:
        raise SpecError(
            f"workload.max_cache_len: {wl.max_cache_len} is shorter than seq_len {context} (the whole context)"
        )


def prompt_and_context(wl: Workload) -> tuple[int, int]:
    """Tokens per sequence of the prompt and of the whole context (``seq_len``, which the spec fills with
    ``prompt_len + max_new_tokens``); without ``prompt_len`` the prompt is the context less the new tokens."""
    context = wl.seq_len or 0
    return (wl.prompt_len if wl.prompt_len is not None else context - (wl.max_new_tokens or 0)), context


def resolve(
    shape: ModelShape, wl: Workload, compute_bytes: int, static: StaticCache | None = None
) -> tuple[Generation, list[str]]:
    """Fill the generation defaults; with a note on each default taken. ``static``: the static cache the
    runtime sets up (its stacks module sizes it)."""
    if shape.architecture is Architecture.encoder:
        raise SpecError("workload.prompt_len: an encoder-only model has no KV cache (it does not generate)")
    prompt, context = prompt_and_context(wl)
    notes: list[str] = []
    if wl.prompt_len is None and wl.max_new_tokens is None:
        notes.append(f"prompt_len not given: {prompt} (the whole seq_len is the prompt; largest prefill)")
    runtime = wl.runtime or Runtime.vllm
    if wl.runtime is None:
        notes.append("runtime not given: vllm (paged KV cache, last-position logits)")
    if static is not None and static.note:
        notes.append(static.note)
    block = wl.kv_block_size or (kvcache.DEFAULT_BLOCK if runtime is Runtime.vllm else 1)
    kv_dtype = wl.kv_cache_dtype or KvCacheDtype.auto
    util = wl.memory_utilization if wl.memory_utilization is not None else kvcache.DEFAULT_MEMORY_UTILIZATION
    per_token = kvcache.shape_bytes_per_token(shape, kv_dtype, compute_bytes)
    prefill_per_token = 0
    code = shape.code
    plain = shape.mla is None and not shape.sliding_window and kv_dtype is KvCacheDtype.auto
    if runtime is not Runtime.vllm and not code.cache_copied and plain and static is None:
        # the release's own K/V tensors (ModelCode.cache_copied): the prefill keeps them as the attention
        # made them; each decode step's torch.cat makes compact copies, fp32 keys where the rotary made them
        layers = kvcache.self_attention_layers(shape)
        rotary = shape.position is Position.rotary
        kept, _ = act.returned_cache_bytes(code, shape.fused_qkv, rotary, shape.q_width, shape.kv_width, compute_bytes)
        key = FP32 if code.fp32_rotary_key else compute_bytes
        per_token = layers * shape.kv_width * (key + compute_bytes)
        prefill_per_token = layers * kept
    gen = Generation(
        runtime=runtime,
        batch=wl.batch_size,
        prompt=prompt,
        new_tokens=context - prompt,
        context=context,
        block=block,
        kv_dtype=kv_dtype,
        per_token=per_token,
        memory_utilization=util,
        sliding_per_token=kvcache.sliding_bytes_per_token(shape, kv_dtype, compute_bytes),
        window=shape.sliding_window,
        prefill_per_token=prefill_per_token,
        static=static,
    )
    return gen, notes


#: Runtimes that run the model in transformers' own classes.
HF_RUNTIMES = (Runtime.hf, Runtime.hf_legacy)


def block_transient(
    shape: ModelShape, tk: act.Tokens, dt: act.Dtypes, attention: Attention, transformers: bool = False
) -> int:
    """The largest transient inside a block of a no-grad forward: ``activations.inference_transient_bytes``
    without its head, plus what a MoE layer's routed MLP needs beyond the dense MLP (``transformers``: as
    transformers' own experts run, grouped GEMMs from 5.0, else as fused MoE kernels allocate)."""
    block = act.inference_transient_bytes(replace(shape, head=Head.none), tk, dt, attention)
    n_tok = max(tk.encoder, tk.decoder)
    dense_mlp = n_tok * shape.ffn * dt.compute * (3 if shape.gated else 2)
    grouped = transformers and not shape.code.experts_per_module
    return block + max(0, moe.transient_mlp_bytes(shape, n_tok, dt.compute, grouped) - dense_mlp)


def prefill_transient(
    shape: ModelShape, tk: act.Tokens, dt: act.Dtypes, attention: Attention, head: int, transformers: bool = False
) -> int:
    """No-grad forward over ``tk``: max(block, head), with ``head`` bytes at the output (logits and hidden);
    ``transformers``: the model runs in transformers' classes."""
    return max(block_transient(shape, tk, dt, attention, transformers), head)


def head_bytes(shape: ModelShape, out_tokens: int, logit_rows: int, dt: act.Dtypes, fp32_copy: bool) -> int:
    """Logits of ``logit_rows`` positions (plus an fp32 copy) and the final hidden states in and out of the
    last norm for ``out_tokens`` positions."""
    if shape.head is not Head.lm:
        return 0
    logits = logit_rows * shape.vocab * (dt.compute + (FP32 if fp32_copy else 0))
    return logits + 2 * out_tokens * shape.hidden * max(dt.compute, dt.residual)


def release_head_bytes(shape: ModelShape, out_tokens: int, batch: int, dt: act.Dtypes) -> int:
    """The prefill's output under a pinned transformers release (:mod:`vramcalc.stacks.transformers`): logits
    of every prompt position where ``generate`` did not pass ``num_logits_to_keep`` (else of the last),
    plus their fp32 upcast where ``forward`` made one and a whole copy where ``_sample`` cloned them
    (4.45, 4.46); the sampled last position's fp32 copy; the final hidden states in and out of the last
    norm."""
    code = shape.code
    if shape.head is not Head.lm or not code.pinned:
        return 0
    rows = out_tokens if code.all_prompt_logits else batch
    per_row = dt.compute + (FP32 if code.logits_upcast else 0) + (dt.compute if code.logits_clone else 0)
    logits = rows * shape.vocab * per_row + batch * shape.vocab * FP32
    return logits + 2 * out_tokens * shape.hidden * max(dt.compute, dt.residual)


def forward_activations(shape: ModelShape, tk: act.Tokens, dt: act.Dtypes, attention: Attention) -> int:
    """The plain ``model(**batch)`` forward: logits for every position at the compute dtype."""
    out_tokens = tk.decoder if shape.architecture is Architecture.encoder_decoder else tk.encoder
    return prefill_transient(shape, tk, dt, attention, head_bytes(shape, out_tokens, out_tokens, dt, False), True)


def kv_bytes(gen: Generation, tokens_per_sequence: int) -> int:
    """KV cache of the batch at ``tokens_per_sequence`` tokens (whole blocks)."""
    per_sequence = kvcache.sequence_bytes(
        gen.per_token, gen.sliding_per_token, gen.window, tokens_per_sequence, gen.block
    )
    return gen.batch * per_sequence


def prefill_phase(shape: ModelShape, gen: Generation, dt: act.Dtypes, attention: Attention) -> dict[str, int]:
    """Components of the prefill peak beyond weights, inputs and workspace."""
    tk = act.Tokens(batch=gen.batch, seq=gen.prompt, target=gen.prompt)
    legacy = gen.runtime is Runtime.hf_legacy
    rows = tk.encoder if legacy else gen.batch
    head = head_bytes(shape, tk.encoder, rows, dt, fp32_copy=True)
    if shape.code.pinned and gen.runtime is not Runtime.vllm:
        head = release_head_bytes(shape, tk.encoder, gen.batch, dt)
    if gen.runtime is Runtime.litgpt:  # every prompt position's logits, no fp32 copy; the cache set up front
        head = head_bytes(shape, tk.encoder, tk.encoder, dt, fp32_copy=False)
    if gen.static is not None:
        return static_prefill(shape, gen, gen.static, dt, attention, head)
    cached = gen.context if gen.runtime in (Runtime.vllm, Runtime.litgpt) else gen.prompt
    return {
        "activations": prefill_transient(shape, tk, dt, attention, head, gen.runtime in HF_RUNTIMES),
        "kv_cache": (prompt_cache_bytes(gen) if gen.prefill_per_token else kv_bytes(gen, cached)) + mask_bytes(gen),
        "inputs": _ids(gen.batch * gen.prompt),
    }


def static_prefill(
    shape: ModelShape, gen: Generation, static: StaticCache, dt: act.Dtypes, attention: Attention, head: int
) -> dict[str, int]:
    """The prefill with a static cache: every layer's K and V allocated for ``static.tokens`` tokens and the
    runtime's buffers, the forward's own mask, and K and V expanded over the whole cache where the
    attention reads them so."""
    tk = act.Tokens(batch=gen.batch, seq=gen.prompt, target=gen.prompt)
    if static.prompt_logits:
        head = head_bytes(shape, tk.encoder, tk.encoder, dt, fp32_copy=static.logits_upcast)
    block = block_transient(shape, tk, dt, attention)
    if static.prefill_expands:
        block += expanded_kv_bytes(shape, gen.batch, static.tokens, dt.compute)
    if static.compiled:
        block = compiled.compiled_static_step_bytes(shape, tk, dt, static.tokens)
    return {
        "activations": max(block, head),
        "kv_cache": kv_bytes(gen, static.tokens) + static.buffers + static.prefill_extra,
        "inputs": _ids(gen.batch * gen.prompt),
    }


def expanded_kv_bytes(shape: ModelShape, batch: int, tokens: int, compute_bytes: int) -> int:
    """One layer's K and V expanded to every query head over ``tokens`` tokens (``repeat_kv``,
    ``repeat_interleave``): nothing for a model without grouped KV heads."""
    if shape.kv_heads >= shape.heads:
        return 0
    return 2 * batch * tokens * shape.q_width * compute_bytes


def mask_bytes(gen: Generation) -> int:
    """litgpt's ``mask_cache``: a ``context x context`` boolean causal mask, set up with the KV cache."""
    return allocation_bytes(gen.context * gen.context) if gen.runtime is Runtime.litgpt else 0


def prompt_cache_bytes(gen: Generation) -> int:
    """The prompt's cache as the prefill returned it (a pinned release's own K/V tensors)."""
    return gen.batch * gen.prompt * gen.prefill_per_token


def decode_phase(shape: ModelShape, gen: Generation, dt: act.Dtypes, attention: Attention) -> dict[str, int]:
    """Components of the last decode step (context = seq_len): one token per sequence attending to all."""
    c, b = dt.compute, gen.batch
    static = gen.static
    if static is not None:
        return static_decode(shape, gen, static, dt)
    kv = kv_bytes(gen, gen.context)
    layers = max(1, kvcache.self_attention_layers(shape))
    temporaries = 0
    if gen.runtime is Runtime.hf:
        temporaries = kv // layers  # torch.cat: the layer's old cache until the new one replaces it
    elif gen.runtime is Runtime.hf_legacy:
        temporaries = kv_bytes(gen, gen.context - 1)  # the previous step's whole cache
    extra = 0
    if gen.runtime is not Runtime.vllm:
        if attention is Attention.eager:
            extra += b * shape.heads * gen.context * (c + FP32)  # one query's scores over the context
        if shape.kv_heads < shape.heads and attention is not Attention.flash:  # flash-attn reads grouped K/V
            extra += 2 * b * gen.context * shape.q_width * c  # repeat_kv expands one layer's K and V
    one = act.Tokens(batch=b, seq=1, target=1)
    block = block_transient(shape, one, dt, Attention.sdpa) + extra
    litgpt = gen.runtime is Runtime.litgpt
    head = head_bytes(shape, b, b, dt, fp32_copy=not litgpt)
    ids = gen.batch * (gen.context if gen.runtime not in (Runtime.vllm, Runtime.litgpt) else 1)
    kv += mask_bytes(gen)
    last = {"activations": max(block, head), "kv_cache": kv, "temporaries": temporaries, "inputs": _ids(ids)}
    if gen.runtime is Runtime.hf_legacy and gen.prefill_per_token and gen.new_tokens > 0:
        # the first step: the prefill's cache is freed only after the forward that builds the compact one
        first = {**last, "kv_cache": kv_bytes(gen, gen.prompt + 1), "temporaries": prompt_cache_bytes(gen)}
        first["inputs"] = _ids(gen.batch * (gen.prompt + 1))
        if sum(first.values()) > sum(last.values()):
            return first
    return last


def static_decode(shape: ModelShape, gen: Generation, static: StaticCache, dt: act.Dtypes) -> dict[str, int]:
    """The last decode step with a static cache: the cache written in place (no copy), the step's mask, K and
    V expanded over the whole cache where the runtime expands them (``static.decode_expands``), the logits
    of one position per sequence (with an fp32 copy unless the runtime samples at the compute dtype). Where
    the runtime's loop keeps outputs across the steps (``static.kept_steps``), the largest moment of those
    steps: a step's forward beside what is kept, or its ``torch.cat`` beside the kept and the step's logits."""
    b = gen.batch
    one = act.Tokens(batch=b, seq=1, target=1)
    block = block_transient(shape, one, dt, Attention.sdpa)
    if static.decode_expands:
        block += expanded_kv_bytes(shape, b, static.tokens, dt.compute)
    if static.compiled:
        block = compiled.compiled_static_step_bytes(shape, one, dt, static.tokens)
    head = head_bytes(shape, b, b, dt, fp32_copy=not static.prompt_logits or static.logits_upcast)
    ids = b * (gen.context if gen.runtime is Runtime.hf else 1)
    step = {
        "activations": max(block, head),
        "kv_cache": kv_bytes(gen, static.tokens) + static.buffers + static.decode_extra,
        "temporaries": 0,
        "inputs": _ids(ids),
    }
    row = b * shape.vocab * (FP32 if static.logits_upcast else dt.compute) if shape.head is Head.lm else 0
    moments = [step] if not static.kept_steps else []
    for kept, built in static.kept_steps:
        moments.append({**step, "temporaries": kept})
        moments.append({**step, "activations": row, "temporaries": kept + built})
    return max(moments, key=lambda moment: sum(moment.values()))


def ids_bytes(n_tokens: int) -> int:
    """The int64 token ids of ``n_tokens`` tokens (one allocation)."""
    return _ids(n_tokens)


def _ids(n_tokens: int) -> int:
    return allocation_bytes(n_tokens * act.TOKEN_ID)
