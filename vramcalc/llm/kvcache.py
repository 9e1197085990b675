"""KV cache: bytes per token, paged allocation in blocks, and serving capacity on a card (int bytes).

Bytes per token (K and V, every attention layer that caches):
``2 x layers x kv_heads x head_dim x dtype bytes`` -- grouped-query attention caches ``kv_heads``, not
``heads`` (Ainslie et al. 2023, "GQA"). Llama-3-8B in bf16: 2 x 32 x 8 x 128 x 2 = 131,072 B/token;
counting all 32 query heads would give 524,288 (4x too much; 8x with fp32).

* ``kv_cache_dtype: auto`` is the activation (compute) dtype, as vLLM's ``auto``; ``fp8`` stores one byte
  per element with per-tensor scales (vLLM ``k_scale``/``v_scale``, one per layer: nothing per token);
  ``int8`` is per-token, per-head asymmetric quantization with an fp16 scale and an fp16 zero point per
  head and token for K and for V (LMDeploy's online KV quantization): head_dim + 4 bytes per head.
* Paged KV (vLLM, Kwon et al. 2023 "PagedAttention"): a sequence holds ``ceil(tokens / block)`` blocks
  of ``kv_block_size`` tokens (16 by default, vLLM's ``--block-size``).
* Capacity (vLLM's ``determine_available_memory``; ``determine_num_available_blocks`` in V0): the KV
  budget is ``memory_utilization x`` the total vLLM sees (the driver total less ``KvPool.unseen_bytes``)
  minus the non-KV peak of the profile run (weights + activation peak + non-torch memory; see
  :mod:`vramcalc.stacks.vllm`); the CUDA context is in vLLM's baseline and is not subtracted.
  ``num_blocks = budget // (block x bytes per token)``; "GPU KV cache size" = num_blocks x block tokens;
  "maximum concurrency" = KV blocks / one request's blocks (V1; V0 printed KV tokens / context length).
* Encoder-decoder models also cache the cross-attention K/V of the encoder output, once per sequence; a
  decoder whose images enter by cross-attention layers caches, in those layers, the images' states (a fixed
  count per image, whatever the sequence's length) and the sequence in the others.
* Multi-head latent attention (DeepSeek V2/V3) caches one latent per token and layer, no separate K and V:
  ``layers x (kv_lora_rank + qk_rope_head_dim) x dtype bytes`` (vLLM ``MLAAttentionSpec``: "For MLA we
  only store a single latent vector"). DeepSeek-V2-Lite in bf16: 27 x (512 + 64) x 2 = 31,104 B/token.
* Sliding-window layers keep only the tokens their window can still see (:func:`sequence_bytes`); the
  bytes per token stay those of every layer (what a token costs while it is inside every window).
* A pool shared by groups of layers (:class:`PagedLayout`, vLLM V1's hybrid allocator: see
  :mod:`vramcalc.stacks.vllm_kv`): every layer slot of the pool holds ``blocks`` pages; a request takes
  ``cdiv(tokens, block)`` blocks in each full-attention group and ``cdiv(min(window - 1 + lookahead,
  tokens), block) + 1`` in each sliding-window group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vramcalc.choices import Architecture, KvCacheDtype
from vramcalc.core.shape import ModelShape

#: Bytes per cached element of each kv_cache_dtype (auto is resolved to the compute dtype).
KV_DTYPE_BYTES = {
    KvCacheDtype.fp32: 4,
    KvCacheDtype.fp16: 2,
    KvCacheDtype.bf16: 2,
    KvCacheDtype.fp8: 1,
    KvCacheDtype.int8: 1,
}
#: int8 KV: an fp16 scale and an fp16 zero point per token, head and K/V (LMDeploy kv quantization).
INT8_SCALE_ZERO_BYTES = 2 + 2
#: vLLM's default block size (tokens per KV block).
DEFAULT_BLOCK = 16
#: vLLM's default gpu_memory_utilization.
DEFAULT_MEMORY_UTILIZATION = 0.9


def image_cross_layers(shape: ModelShape) -> int:
    """A decoder's layers that attend to its images' states instead of the sequence (0: none)."""
    return shape.vision.cross_layers if shape.vision is not None else 0


def self_attention_layers(shape: ModelShape) -> int:
    """Layers with a self-attention KV cache: the decoder stack less the layers that attend to the images
    (an encoder-only model has none)."""
    if shape.architecture is Architecture.decoder:
        return shape.layers - image_cross_layers(shape)
    if shape.architecture is Architecture.encoder_decoder:
        return shape.decoder_layers
    return 0


def element_bytes(kv_dtype: KvCacheDtype, compute_bytes: int) -> int:
    """Bytes per cached element; ``auto`` is the activation dtype."""
    return compute_bytes if kv_dtype is KvCacheDtype.auto else KV_DTYPE_BYTES[kv_dtype]


def head_bytes(head_dim: int, kv_dtype: KvCacheDtype, compute_bytes: int) -> int:
    """One head's K (or V) for one token, with int8's per-token, per-head scale and zero point."""
    extra = INT8_SCALE_ZERO_BYTES if kv_dtype is KvCacheDtype.int8 else 0
    return head_dim * element_bytes(kv_dtype, compute_bytes) + extra


def bytes_per_token(
    layers: int, kv_heads: int, k_head_dim: int, kv_dtype: KvCacheDtype, compute_bytes: int, v_head_dim: int = 0
) -> int:
    """K and V of one token over all layers: layers x kv_heads x (K head + V head) bytes.

    ``v_head_dim`` defaults to ``k_head_dim``; models whose values are narrower or wider than their
    keys pass it separately.
    """
    v_dim = v_head_dim or k_head_dim
    k = head_bytes(k_head_dim, kv_dtype, compute_bytes)
    v = head_bytes(v_dim, kv_dtype, compute_bytes)
    return layers * kv_heads * (k + v)


def shape_bytes_per_token(shape: ModelShape, kv_dtype: KvCacheDtype, compute_bytes: int) -> int:
    """Self-attention KV bytes per token of ``shape`` over all its layers (0 for an encoder-only model)."""
    return layer_bytes(shape, kv_dtype, compute_bytes) * self_attention_layers(shape)


def sliding_bytes_per_token(shape: ModelShape, kv_dtype: KvCacheDtype, compute_bytes: int) -> int:
    """The part of :func:`shape_bytes_per_token` held by sliding-window layers."""
    return layer_bytes(shape, kv_dtype, compute_bytes) * shape.sliding_layers(self_attention_layers(shape))


def layer_bytes(shape: ModelShape, kv_dtype: KvCacheDtype, compute_bytes: int) -> int:
    """One layer's cache for one token: K and V of kv_heads heads, or MLA's single latent (no V)."""
    if shape.mla is not None:
        return head_bytes(shape.mla.latent, kv_dtype, compute_bytes)
    return bytes_per_token(1, shape.kv_heads, shape.head_dim, kv_dtype, compute_bytes)


def window_tokens(window: int, tokens: int, block: int) -> int:
    """Tokens a sliding-window layer holds for one sequence of ``tokens`` tokens, in whole blocks.

    vLLM (``SlidingWindowSpec.max_memory_usage_bytes`` in vllm/v1/kv_cache_interface.py, with one new token
    per decode step): ``cdiv(sliding_window - 1 + 1, block) + 1`` blocks, the extra block because the window
    may start inside one; blocks wholly outside the window are freed. HF (``DynamicSlidingWindowLayer.update``
    in transformers' cache_utils.py, block 1): the last ``sliding_window - 1`` tokens are kept, plus the new
    one while the step runs: ``sliding_window`` tokens.
    """
    held = paged_tokens(tokens, block)
    if not window:
        return held
    cap = window if block == 1 else paged_tokens(window, block) + block
    return min(held, cap)


def sequence_bytes(per_token: int, sliding_per_token: int, window: int, tokens: int, block: int) -> int:
    """KV bytes one sequence of ``tokens`` tokens holds: global layers for every token (whole blocks),
    sliding-window layers for at most :func:`window_tokens`."""
    global_part = (per_token - sliding_per_token) * paged_tokens(tokens, block)
    return global_part + sliding_per_token * window_tokens(window, tokens, block)


def cross_attention_layers(shape: ModelShape) -> int:
    """Layers whose cache holds a fixed count of states per sequence, not the sequence's tokens: an
    encoder-decoder's decoder layers (the encoder output) and a decoder's image layers (the images' states)."""
    if shape.architecture is Architecture.encoder_decoder:
        return shape.decoder_layers
    return image_cross_layers(shape)


def cross_attention_tokens(shape: ModelShape, prompt: int, image_states: int) -> int:
    """The states one sequence's cross-attention layers cache: an encoder-decoder's encoder output (the
    prompt), else the images' states."""
    return prompt if shape.architecture is Architecture.encoder_decoder else image_states


def cross_attention_bytes(shape: ModelShape, encoder_tokens: int, kv_dtype: KvCacheDtype, compute_bytes: int) -> int:
    """The cross-attention K/V of one sequence's ``encoder_tokens`` states (computed once, at the prefill):
    an encoder-decoder's encoder output, or a decoder's images (:func:`cross_attention_tokens`)."""
    layers = cross_attention_layers(shape)
    if not layers:
        return 0
    return bytes_per_token(layers, shape.kv_heads, shape.head_dim, kv_dtype, compute_bytes) * encoder_tokens


def paged_tokens(tokens: int, block: int) -> int:
    """Tokens one sequence holds when its cache is allocated in whole blocks."""
    return math.ceil(tokens / block) * block


@dataclass(frozen=True)
class PagedLayout:
    """A paged KV pool whose attention layers are split into groups of ``group_size`` layers (padding the
    last group of a kind), every group with its own block table over one shared pool of blocks; a block is
    one page of ``block`` tokens in each of the ``group_size`` layer slots.

    ``full_groups`` keep every token; ``sliding_groups`` keep the last ``window - 1`` tokens plus the
    ``lookahead`` tokens one step may schedule (a chunked prefill), in whole blocks plus one (the window may
    start inside a block)."""

    layer_bytes: int  # one token in one layer (K and V, or MLA's latent)
    block: int
    group_size: int
    full_groups: int
    sliding_groups: int = 0
    window: int = 0
    lookahead: int = 0

    @property
    def groups(self) -> int:
        return self.full_groups + self.sliding_groups

    @property
    def block_bytes(self) -> int:
        """One block across the pool: a page in each of the ``group_size`` layer slots."""
        return self.block * self.layer_bytes * self.group_size

    def blocks(self, budget: int) -> int:
        """Blocks a budget of ``budget`` bytes holds."""
        return budget // self.block_bytes if self.block_bytes else 0

    def tokens(self, blocks: int) -> int:
        """The tokens a pool of ``blocks`` blocks is said to hold: its blocks shared by the groups."""
        return blocks // self.groups * self.block if self.groups else 0

    def request_blocks(self, tokens: int) -> int:
        """Blocks one request of ``tokens`` tokens may hold at most, over every group."""
        full = math.ceil(tokens / self.block)
        if not self.sliding_groups:
            return self.full_groups * full
        held = min(self.window - 1 + self.lookahead, tokens)
        return self.full_groups * full + self.sliding_groups * (math.ceil(held / self.block) + 1)

    def request_bytes(self, tokens: int) -> int:
        return self.request_blocks(tokens) * self.block_bytes

    def longest_request(self, budget: int, upto: int) -> int:
        """The longest request (at most ``upto`` tokens) whose blocks fit ``budget`` bytes; 0 if none does."""
        if self.request_bytes(1) > budget:
            return 0
        lo, hi = 1, upto
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if self.request_bytes(mid) <= budget else (lo, mid - 1)
        return lo


@dataclass(frozen=True)
class EngineProfile:
    """vLLM's engine settings behind a KV pool and what its profile step measured (vramcalc/stacks/vllm.py)."""

    version: str
    engine: str
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    activation_peak_bytes: int
    non_torch_bytes: int


@dataclass(frozen=True)
class KvPool:
    """What vLLM's KV pool depends on, for one serving spec (int bytes): the memory share it may take,
    the non-KV peak of its profiling step (independent of the number of requests), the paging, and the
    batch's own KV cache."""

    memory_utilization: float
    non_kv_bytes: int
    bytes_per_token: int
    block: int
    context: int
    bytes_per_sequence: int  # one sequence of ``context`` tokens in whole blocks (+ cross-attention K/V)
    kv_bytes: int  # the spec's batch_size sequences
    unseen_bytes: int = 0  # the card's driver total minus the total vLLM sees (torch.cuda.mem_get_info)
    engine: EngineProfile | None = None
    ranks: tuple[KvPool, ...] = ()  # several GPUs: the other pipeline stages' pools (blocks: the minimum)
    layout: PagedLayout | None = None  # the pool's groups of layers (vLLM V1); None: one block covers every layer
    max_model_len: int = 0  # with ``layout``: the request vLLM checks at start-up (0: ``context``)


@dataclass(frozen=True)
class Capacity:
    """How much KV cache fits on a card next to the rest of the inference peak (vLLM's start-up report)."""

    memory_utilization: float
    budget_bytes: int
    blocks: int
    tokens: int
    context_tokens: int
    max_concurrency: float
    max_sequences: int
    startup_bytes: int = 0  # the KV cache vLLM requires for one request of max_model_len tokens at start-up
    max_model_len: int = 0  # that request's length (0: no start-up check modelled)
    longest_request: int | None = None  # when vLLM would refuse to start: the max_model_len that fits (0: none)

    @property
    def refused(self) -> bool:
        """vLLM would refuse to start: one request of max_model_len does not fit the KV budget."""
        return self.longest_request is not None


def capacity(
    usable_bytes: int,
    memory_utilization: float,
    non_kv_bytes: int,
    per_token: int,
    block: int,
    context: int,
    per_sequence: int = 0,
) -> Capacity:
    """KV budget, tokens that fit and concurrency at ``context`` tokens per sequence.

    ``budget = floor(memory_utilization x usable) - non_kv_bytes`` (0 when negative);
    ``blocks = budget // (block x per_token)``; ``tokens = blocks x block``;
    ``max_concurrency``: vLLM's "maximum concurrency", the blocks over one request's blocks
    (``blocks / ceil(context / block)``, V1's ``get_max_concurrency_for_kv_cache_config``; V0 printed
    ``tokens / context``, the same figure when the context is whole blocks), cut, not rounded, to two
    decimals, so that its whole part is the sequences that fit (an encoder-decoder's cross-attention K/V
    and sliding windows count too: :func:`_concurrency`);
    ``max_sequences = budget // per_sequence``: whole sequences that fit, ``per_sequence`` bytes each
    (default: ``context`` tokens rounded up to whole blocks; an encoder-decoder adds its cross-attention
    K/V). For a decoder this equals ``blocks // ceil(context / block)``.
    """
    budget = max(0, math.floor(memory_utilization * usable_bytes) - non_kv_bytes)
    blocks = budget // (block * per_token) if per_token else 0
    tokens = blocks * block
    per_sequence = per_sequence or paged_tokens(context, block) * per_token
    return Capacity(
        memory_utilization=memory_utilization,
        budget_bytes=budget,
        blocks=blocks,
        tokens=tokens,
        context_tokens=context,
        max_concurrency=_concurrency(blocks, context, block, budget, per_sequence, per_token),
        max_sequences=budget // per_sequence if per_sequence else 0,
    )


def _concurrency(blocks: int, context: int, block: int, budget: int, per_sequence: int, per_token: int) -> float:
    """vLLM's "maximum concurrency" cut to two decimals: the pool's blocks over the blocks one request of
    ``context`` tokens takes. With cross-attention K/V per sequence, at most the whole sequences' share of
    the budget. With sliding-window layers a sequence holds fewer than ``context`` tokens in those layers,
    and vLLM's figure counts the memory a request uses (the pool over one request's share): the budget
    over one sequence's bytes. Either way its whole part is ``max_sequences``."""
    if not context:
        return 0.0
    self_attention = paged_tokens(context, block) * per_token
    hundredths = blocks * 100 // math.ceil(context / block)
    if per_sequence > self_attention:
        hundredths = min(hundredths, budget * 100 // per_sequence)
    elif 0 < per_sequence < self_attention:
        hundredths = budget * 100 // per_sequence
    return hundredths / 100


def grouped_capacity(
    usable_bytes: int,
    memory_utilization: float,
    non_kv_bytes: int,
    layout: PagedLayout,
    context: int,
    max_model_len: int,
) -> Capacity:
    """:func:`capacity` of a pool of groups (:class:`PagedLayout`).

    ``blocks = budget // block_bytes``; ``tokens = blocks // groups x block``; one request of ``context``
    tokens takes ``layout.request_blocks(context)`` blocks, so ``max_concurrency`` is the blocks over those
    (cut to two decimals) and ``max_sequences`` its whole part. At start-up one request of
    ``max_model_len`` tokens must fit the budget; where it does not, no sequence fits and
    ``longest_request`` is the max_model_len that would.
    """
    budget = max(0, math.floor(memory_utilization * usable_bytes) - non_kv_bytes)
    blocks = layout.blocks(budget)
    startup = layout.request_bytes(max_model_len)
    refused = startup > budget
    per_request = layout.request_blocks(context)
    return Capacity(
        memory_utilization=memory_utilization,
        budget_bytes=budget,
        blocks=blocks,
        tokens=layout.tokens(blocks),
        context_tokens=context,
        max_concurrency=0.0 if refused or not per_request else blocks * 100 // per_request / 100,
        max_sequences=0 if refused or not per_request else blocks // per_request,
        startup_bytes=startup,
        max_model_len=max_model_len,
        longest_request=layout.longest_request(budget, max_model_len) if refused else None,
    )
