"""vLLM's start-up profile: the memory it subtracts before sizing the KV cache (int bytes).

vLLM sizes its KV cache once, at start-up (``Worker.determine_available_memory`` in
vllm/v1/worker/gpu_worker.py, ``Worker.determine_num_available_blocks`` in vllm/worker/worker.py for the
V0 engine; both measure with ``memory_profiling`` in vllm/utils, whose ``MemoryProfilingResult`` has
``weights_memory``, ``torch_peak_increase`` and ``non_torch_increase``)::

    KV budget = gpu_memory_utilization x total   (total: torch.cuda.mem_get_info()[1])
                - weights                        (weights_memory)
                - the profile step's peak        (torch_peak_increase)
                - memory outside PyTorch         (non_torch_increase)

* **total**: what ``cudaMemGetInfo`` reports, which is less than nvidia-smi's ``memory.total`` (the
  catalog's driver total) by :data:`UNSEEN_BYTES`, measured from published start-up logs that print it
  (``total_gpu_memory``): T4 14.56 GiB of 15,360 MiB (measured.yaml ``vllm-qwen2.5-1.5b-t4-util0.5``),
  RTX 4090 23.55 GiB of 24,564 MiB (vllm-project/vllm#11550), RTX 3090 23.58 GiB of 24,576 MiB
  (vllm-project/vllm#14447), H100 80GB HBM3 79.22 GiB of 81,559 MiB (vllm-project/vllm#10511): 451, 449,
  430 and 438 MiB less (each +-5 MiB: the logs print two decimals of GiB).
* **profile step** (``GPUModelRunner.profile_run`` -> ``_dummy_run(max_num_tokens)`` and
  ``_dummy_sampler_run`` in vllm/v1/worker/gpu_model_runner.py; ``GPUModelRunnerBase.profile_run`` in
  vllm/worker/model_runner.py for V0): one forward of ``max_num_batched_tokens`` tokens split over
  ``min(max_num_seqs, max_num_batched_tokens)`` dummy requests, then logits (and their fp32 copy for
  sampling) for the last token of each request. Attention runs through a varlen kernel (FlashAttention,
  XFormers): no S x S scores, so the tokens act as one flat batch.
* **the forward's count**: the V0 engine runs vLLM's model code eagerly, counted from its files where they
  differ from transformers' (:func:`eager_block_bytes`: llama.py frees its MLP's gate/up output early); V1
  compiles it (``@support_torch_compile``), counted as the other files. The weights include vLLM's RoPE
  cache (:func:`rope_cache_bytes`, :func:`model_code`).
* **max_num_batched_tokens default**: V0 without chunked prefill, ``max(max_model_len, 2048)``
  (``SchedulerConfig.__post_init__``, vllm/config.py); V1 (the default engine since 0.8.0) always chunks
  prefills and takes ``EngineArgs.get_batch_defaults`` (vllm/engine/arg_utils.py), which depends on the
  card: for ``vllm serve`` (OPENAI_API_SERVER), 8192 tokens and 1024 sequences where
  ``current_platform.get_device_total_memory() >= 70 GiB`` and the device name does not contain "a100",
  else 2048 and 256 (since 0.9.0: vllm-project/vllm#17885 excluded A100s from the 70 GiB rule of #17073).
  The 0.8 releases gave 8192 tokens by name, to H100 and H200 only (#12369), with 1024 sequences there.
  Where the card is known (``estimate --gpu``, ``check``, ``fit``) its defaults apply: :class:`Card`,
  its memory being what PyTorch reports (the driver total less :data:`UNSEEN_BYTES`); else 2048 and 256.
  The offline ``LLM`` class (8192/256, 16384/1024 on large cards) is not modelled: give the keys for it.
* **sampling step** (:func:`sampler_bytes`): the profile also samples one token per dummy request, with
  top-k (``vocab - 1``) and top-p on, "to reflect the accurate memory usage": V0 ``GPUModelRunnerBase.profile_run``
  (vllm/worker/model_runner.py: ``SamplingParams(top_p=0.99, top_k=vocab_size - 1)``), V1
  ``GPUModelRunner._dummy_sampler_run`` (vllm/v1/worker/gpu_model_runner.py: ``top_p`` 0.9, ``top_k``
  ``vocab - 1``; read at 0.8.2, 0.8.5, 0.9.2, 0.10.1 and 0.11.0). Both sort the fp32 logits of the whole vocabulary
  (V0 ``_apply_top_k_top_p`` in vllm/model_executor/layers/sampler.py; V1 ``apply_top_k_top_p`` in
  vllm/v1/sample/ops/topk_topp_sampler.py, the PyTorch path ``forward_native``: FlashInfer's sampler is
  used instead only where FlashInfer is installed, from 0.9, or before 0.2.3 in 0.8.x; it is not a
  dependency of the pip wheel: ``versions: {flashinfer: ...}`` says it is installed, :func:`sampler_of`).
  At the sort, per logit: the logits at the compute dtype (held by the caller), their fp32 copy
  (``logits.to(torch.float)``), the sorted values (fp32) and indices (int64), and
  PyTorch's sort scratch (``launch_stable_sort_kernel`` in aten/src/ATen/native/cuda/SortStable.cu, with
  ``at::cuda::cub`` in ATen/cuda/cub.cuh): from 128 rows ``segmented_sort_pairs`` allocates int64 start
  indices and cub's ``DeviceSegmentedRadixSort::SortPairs`` its alternate keys (fp32) and values (int64):
  20 bytes; 2 to 127 rows ``segmented_sort_pairs_by_full_sort`` allocates two int2 index/segment buffers,
  the unused sorted keys (fp32) and cub's alternate keys and int2 values: 32 bytes; one row, int64 start
  indices and cub's alternates: 20 bytes. Llama-3-8B at 256 rows: 256 x 128,256 x (2 + 4 + 12 + 20) B =
  1,190 MiB, with V0's 8,192 hidden states held (64 MiB) and the 32 MiB cuBLAS workspace: 1.26 GiB, the
  "PyTorch activation peak memory" vLLM logs for it on an H100 (vllm-project/vllm#10511), above the
  forward's own. The profile's activation peak is the larger of the forward and this step.
* **non-torch memory** (:func:`non_torch_bytes`), by release:

  - **V0 from 0.7.0** (``memory_profiling`` in vllm/utils.py after vllm-project/vllm#11809 and #12126; V1
    from 0.9.1, vllm-project/vllm#19312): the growth of ``cudaMemGetInfo``'s used memory less
    ``torch.cuda.memory_reserved()`` since the worker started (its CUDA context already made). On one GPU
    the published breakdown prints 0.01 GiB (the T4 log above): :data:`NON_TORCH_BYTES` = 0. NCCL buffers
    and custom all-reduce appear with tensor parallelism.
  - **V1 0.8.0 to 0.9.0** (``Worker.determine_available_memory`` in vllm/v1/worker/gpu_worker.py, read at
    0.8.2, 0.8.5 and 0.9.0), and **V0 before 0.6.5** (``Worker.determine_num_available_blocks`` in
    vllm/worker/worker.py, read at 0.6.4, the same code): everything ``cudaMemGetInfo`` counts as used after
    ``empty_cache`` less ``torch.cuda.memory_stats()["allocated_bytes.all.current"]``, with no baseline: the whole
    CUDA context (the stack's, 512 MiB by default: ``overhead.cuda_context``), NCCL's buffers, other processes on the
    card, and the caching allocator's reserved-but-unallocated segments (not modelled: said in a note).
  - **V0 0.6.5 to 0.6.6** (``memory_profiling`` from vllm-project/vllm#10511): the growth of used memory
    since the worker started less the growth of ``allocated_bytes.all.current``, so the allocator's
    reserved-but-unallocated segments and the CUDA context's growth during profiling (lazily loaded
    kernels) count too. Neither is a vLLM fact that can be derived: not modelled, said in a note with the
    published figure (non_torch_memory 1.79 GiB for Llama-3-8B on one H100, 3.58 GiB at TP 2: #10511).
* **CUDA graphs**: captured after the KV cache is allocated (``compile_or_warm_up_model`` runs after
  ``initialize_from_config`` in V1, ``capture_model`` after ``initialize_cache`` in V0), so they come out
  of the ``1 - gpu_memory_utilization`` share, not the KV budget (the T4 log prints "CUDA graph capture"
  0.17 GiB after the KV cache); V1 subtracts an estimate only with ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1``
  (default 0, vllm/envs.py), which is not modelled.

**The KV cache's layout** (:func:`kv_layout`), from vLLM's source (vllm/v1/core/kv_cache_utils.py,
vllm/v1/kv_cache_interface.py), for the releases whose V1 engine has the hybrid allocator (:data:`GROUPS_FROM`
on):

* **Layer specs** (``GPUModelRunner.get_kv_cache_spec``): a layer with a sliding window is a
  ``SlidingWindowSpec``, any other a ``FullAttentionSpec`` (``MLAAttentionSpec`` for multi-head latent
  attention: one latent of ``kv_lora_rank + qk_rope_head_dim`` per token and layer). Each has
  ``page_size_bytes`` = block x kv_heads x (K head + V head) x dtype bytes (MLA: block x latent x dtype).
* **Groups** (``get_kv_cache_groups``): layers that all have the same spec form one group
  (``_get_kv_cache_groups_uniform_spec``). Mixed sliding and full layers are split into groups of equal
  size (``_get_kv_cache_groups_uniform_page_size``): the group size is the smaller layer count of the two
  kinds, or the larger when it is less than 1.5 times the smaller; each kind's last group is padded to that
  size. Gemma-3-27B: 52 sliding and 10 full layers, groups of 10: 6 sliding groups (8 padding layers)
  and 1 full group.
* **Pool** (``get_kv_cache_config_from_groups``, ``get_num_blocks``): ``group_size`` tensors, each shared
  by one layer of every group; ``num_blocks = available_memory // page_size // group_size``.
  ``_report_kv_cache_config`` logs "GPU KV cache size: N tokens" with
  ``N = num_blocks // len(groups) x block_size``.
* **One request** (``max_memory_usage_bytes``): ``FullAttentionSpec``: ``cdiv(max_model_len, block)``
  pages; ``SlidingWindowSpec``: ``cdiv(min(sliding_window - 1 + max_num_batched_tokens, max_model_len),
  block) + 1`` pages (a chunked prefill schedules up to max_num_batched_tokens new tokens next to the
  window; +1: the window may start inside a block). Per group, over the pool's ``group_size`` slots.
* **Maximum concurrency** (``get_max_concurrency_for_kv_cache_config``, logged as "Maximum concurrency
  for X tokens per request: Y.YYx"): ``num_blocks / cdiv(group_size x sum of the groups' request bytes,
  page_size x group_size)``, i.e. the pool's blocks over one request's blocks in every group.
* **Start-up check** (``_check_enough_kv_cache_memory``, through ``_max_memory_usage_bytes_from_groups``):
  ``group_size x page_size x`` one request's blocks of max_model_len must fit the KV memory, else vLLM
  raises "To serve at least one request with the models's max seq len (X), (A GiB KV cache is needed,
  which is larger than the available KV cache memory (B GiB). Based on the available memory, the estimated
  maximum model length is M." (``_estimate_max_model_len_from_groups``: a binary search).

Not modelled: ``--disable-hybrid-kv-cache-manager`` (every sliding layer then kept in full), KV
connectors, chunked local attention and Mamba layers. Earlier releases, the V0 engine and
encoder-decoder models are modelled with one block over every layer (:func:`vramcalc.llm.kvcache.capacity`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from vramcalc.choices import Architecture, Position, Runtime
from vramcalc.core.code import ModelCode
from vramcalc.core.reserve import LONG_LIVED, TRANSIENT_RESERVE, ReserveRule, transient_reserve_note
from vramcalc.core.shape import ModelShape
from vramcalc.core.stack import Device, Stack
from vramcalc.errors import SpecError
from vramcalc.llm.kvcache import PagedLayout
from vramcalc.spec.models import ModelSpec, Spec, Workload, runs_llamacpp
from vramcalc.spec.versions import release_key
from vramcalc.units import GiB, MiB

#: The vLLM release assumed when ``versions: {vllm: ...}`` is not given (V1 engine).
DEFAULT_VERSION = "0.11.0"
#: First release whose default engine is V1 (``VLLM_USE_V1`` defaults to 1 from 0.8.0).
V1_FROM = (0, 8)
#: nvidia-smi's memory.total minus what torch.cuda.mem_get_info() reports as total (see the module docstring).
UNSEEN_BYTES = 440 * MiB
#: Memory outside PyTorch's allocator that appears during profiling on one GPU (non_torch_increase).
NON_TORCH_BYTES = 0
#: V0 releases from this one measure non-torch memory against torch.cuda.memory_reserved() (#11809).
RESERVED_BASELINE_FROM = (0, 7)
#: V1 releases from this one profile with ``memory_profiling`` and a start-up baseline (#19312).
V1_BASELINE_FROM = (0, 9, 1)
#: ... and V0 releases from this one (``memory_profiling``, vllm-project/vllm#10511).
V0_BASELINE_FROM = (0, 6, 5)
#: Bytes per logit at the sampling step's sort, beside the logits at the compute dtype (see the docstring):
#: their fp32 copy, the sorted fp32 values and their int64 indices.
SORT_HELD_BYTES = 4 + 4 + 8
#: PyTorch's sort scratch per logit: from 128 rows int64 start indices + cub's fp32 keys and int64 values.
SEGMENTED_SORT_SCRATCH = 8 + 4 + 8
#: ... 2 to 127 rows: two int2 index/segment buffers, the sorted keys, cub's fp32 keys and int2 values.
FULL_SORT_SCRATCH = 8 + 8 + 4 + 4 + 8
#: The row count from which PyTorch sorts each row as one segment of a segmented sort.
SEGMENTED_SORT_ROWS = 128
#: FlashInfer's sampler, per logit beside the logits at the compute dtype, from vLLM 0.9: the fp32 copy, the
#: top-k masked logits and their probabilities (``top_k_top_p_sampling_from_logits``, ``top_k_first``).
FLASHINFER_HELD_BYTES = 4 + 4 + 4
#: ... in vLLM 0.8 (``forward_cuda`` passes probabilities): the fp32 copy and the probabilities.
FLASHINFER_PROBS_HELD_BYTES = 4 + 4
#: The FlashInfer release from which its sampler's API changed (vLLM 0.8 uses it only below, 0.9 only from).
FLASHINFER_NEW_API = (0, 2, 3)
#: The first vLLM release that uses FlashInfer's sampler from :data:`FLASHINFER_NEW_API` on.
FLASHINFER_NEW_API_FROM = (0, 9)
#: V0 ``SchedulerConfig``: max_num_batched_tokens floor without chunked prefill (_DEFAULT_MAX_NUM_BATCHED_TOKENS).
V0_MIN_BATCHED_TOKENS = 2048
#: V1 ``EngineArgs.get_batch_defaults``, OPENAI_API_SERVER on cards under 70 GiB (and A100s).
V1_SERVE_BATCHED_TOKENS = 2048
#: ... and on cards of 70 GiB and more (H100, H200, B200, MI300X), with max_num_seqs.
V1_LARGE_BATCHED_TOKENS, V1_LARGE_MAX_NUM_SEQS = 8192, 1024
#: The device memory from which vLLM uses the larger defaults (``device_memory >= 70 * GiB_bytes``).
LARGE_CARD_BYTES = 70 * GiB
#: First release whose large-card rule is by memory, without A100s (vllm-project/vllm#17885).
BY_MEMORY_FROM = (0, 9)
#: max_num_seqs default (V0 ``SchedulerConfig``; V1 ``get_batch_defaults`` on cards under 70 GiB).
DEFAULT_MAX_NUM_SEQS = 256
#: The HF model types vLLM runs with llama.py's ``LlamaForCausalLM`` (its registry maps LlamaForCausalLM,
#: MistralForCausalLM, AquilaForCausalLM, InternLMForCausalLM, InternLM3ForCausalLM and XverseForCausalLM to
#: it; phi3.py's Phi3ForCausalLM subclasses it), read at 0.6.4 and 0.11.0: :func:`eager_block_bytes`.
LLAMA_PY_TYPES = frozenset({"llama", "mistral", "aquila", "internlm", "internlm3", "xverse", "phi3"})
#: The workload keys of vLLM's scheduler and engine.
VLLM_KEYS = ("max_model_len", "max_num_batched_tokens", "max_num_seqs")


@dataclass(frozen=True)
class Card:
    """The GPU vLLM starts on, as ``get_batch_defaults`` sees it: its device name and the total memory
    PyTorch reports (``torch.cuda.get_device_properties().total_memory``)."""

    name: str
    total_bytes: int


def card_of(name: str, driver_total_bytes: int) -> Card:
    """A catalog card as vLLM sees it: the total PyTorch reports is the driver's less :data:`UNSEEN_BYTES`."""
    return Card(name, max(0, driver_total_bytes - UNSEEN_BYTES))


def batch_defaults(release: tuple[int, int], card: Card | None) -> tuple[int, int, str]:
    """V1 ``vllm serve`` defaults (max_num_batched_tokens, max_num_seqs) on ``card``, and why."""
    small = (V1_SERVE_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS)
    if card is None:
        return (*small, "V1 vllm serve's defaults; no card named (--gpu): those of cards under 70 GiB and A100s")
    name = card.name.lower()
    if release >= BY_MEMORY_FROM:
        large = card.total_bytes >= LARGE_CARD_BYTES and "a100" not in name
        size = f"{card.total_bytes / GiB:.1f} GiB"
        why = "70 GiB or more, not an A100" if large else "under 70 GiB or an A100"
        rule = f"V1 vllm serve's defaults on {card.name}: {size}, {why}"
    else:
        large = "h100" in name or "h200" in name
        why = "an H100 or H200" if large else "neither an H100 nor an H200"
        rule = f"V1 vllm serve's defaults in vLLM 0.8 on {card.name}: {why}"
    return (V1_LARGE_BATCHED_TOKENS, V1_LARGE_MAX_NUM_SEQS, rule) if large else (*small, rule)


@dataclass(frozen=True)
class Profile:
    """vLLM's engine settings that size its start-up profile."""

    version: str
    engine: str  # "V0" or "V1"
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    #: The profile's top-k/top-p sampler: "torch" (a sort) or "flashinfer" (see :func:`sampler_of`).
    sampler: str = "torch"

    @property
    def requests(self) -> int:
        """Dummy requests of the profile step: ``min(max_num_seqs, max_num_batched_tokens)``."""
        return min(self.max_num_seqs, self.max_num_batched_tokens)


def parse_version(text: str) -> tuple[int, int]:
    """``"0.6.4"`` -> (0, 6); raises SpecError naming ``workload.versions.vllm``."""
    return release_key(text, "vllm", "0.6.4")[:2]


def parse_release(text: str) -> tuple[int, ...]:
    """``"0.9.2"`` -> (0, 9, 2): the patch release too, where behaviour changed inside a minor release."""
    return release_key(text, "vllm", "0.6.4")


def sampler_of(engine: str, release: tuple[int, int], flashinfer: str | None) -> tuple[str, str]:
    """The sampler vLLM's profile runs, and a note: V1's ``TopKTopPSampler`` (vllm/v1/sample/ops/
    topk_topp_sampler.py) uses FlashInfer's where FlashInfer is installed (``workload.versions.flashinfer``) and
    ``VLLM_USE_FLASHINFER_SAMPLER`` is unset, from 0.9 for FlashInfer 0.2.3 and later, in 0.8 for earlier ones
    (the API changed); PyTorch's sort otherwise, and always in V0. FlashInfer is an optional extra of the pip
    wheel (``vllm[flashinfer]``) and part of vLLM's Docker image."""
    if flashinfer is None:
        why = "V0's sampler" if engine == "V0" else "FlashInfer not given (versions: {flashinfer: ...})"
        return "torch", f"vLLM's profile samples with PyTorch's sort ({why})"
    new_api = release_key(flashinfer, "flashinfer", "0.3.1") >= FLASHINFER_NEW_API
    if engine == "V1" and new_api == (release >= FLASHINFER_NEW_API_FROM):
        return "flashinfer", f"vLLM's profile samples with FlashInfer {flashinfer} (no sort)"
    release_text = ".".join(map(str, release))
    why = "V0's sampler" if engine == "V0" else f"vLLM {release_text} does not use FlashInfer {flashinfer}"
    return "torch", f"vLLM's profile samples with PyTorch's sort ({why})"


def check_keys(spec: Spec) -> None:
    """vLLM's scheduler keys apply to the vllm runtime only (a spec that runs in llama.cpp is refused by
    llama.cpp's rules, which name its own keys)."""
    wl = spec.workload
    if (wl.runtime or Runtime.vllm) is Runtime.vllm or runs_llamacpp(wl):
        return
    if (wl.versions or {}).get("flashinfer") is not None:
        raise SpecError("workload.versions.flashinfer: FlashInfer's sampler is modelled for runtime: vllm only")
    for key in VLLM_KEYS:
        if getattr(wl, key, None) is not None:
            raise SpecError(f"workload.{key}: only valid with runtime: vllm")


def resolve(wl: Workload, context: int, device: Device | None = None) -> tuple[Profile, list[str]]:
    """The engine settings of a vLLM serving spec, with a note on each default taken; ``context`` is the
    request's length, ``device`` the GPU where one is named (its batch defaults)."""
    notes: list[str] = []
    versions = wl.versions or {}
    version = versions.get("vllm") or DEFAULT_VERSION
    release = parse_version(version)
    engine = "V1" if release >= V1_FROM else "V0"
    sampler, said = sampler_of(engine, release, versions.get("flashinfer"))
    notes.append(said)
    if "vllm" not in versions:
        notes.append(f"vLLM version not given (versions: {{vllm: ...}}): {version} assumed ({engine} engine)")
    max_len = wl.max_model_len if wl.max_model_len is not None else context
    if wl.max_model_len is None:
        notes.append(f"max_model_len not given: {max_len:,} (the request's context)")
    elif context > max_len:
        raise SpecError(f"workload.seq_len: the request's context {context:,} is longer than max_model_len {max_len:,}")
    tokens, seqs = wl.max_num_batched_tokens, wl.max_num_seqs
    if engine == "V0":
        if tokens is not None and tokens < max_len:
            raise SpecError(
                f"workload.max_num_batched_tokens: {tokens:,} is less than max_model_len {max_len:,} "
                "(vLLM's V0 engine needs chunked prefill for that, which is not modelled)"
            )
        if tokens is None:
            tokens = max(max_len, V0_MIN_BATCHED_TOKENS)
            notes.append(
                f"max_num_batched_tokens not given: {tokens:,} (V0 without chunked prefill: max(max_model_len, 2048))"
            )
        seqs = seqs if seqs is not None else DEFAULT_MAX_NUM_SEQS
        return Profile(version, engine, max_len, tokens, seqs, sampler), notes
    card = None if device is None else card_of(device.name, device.total_bytes)
    default_tokens, default_seqs, rule = batch_defaults(release, card)
    missing = [
        f"{key} not given: {value:,}"
        for key, value, given in (
            ("max_num_batched_tokens", default_tokens, tokens),
            ("max_num_seqs", default_seqs, seqs),
        )
        if given is None
    ]
    if missing:
        notes.append(f"{', '.join(missing)} ({rule})")
    tokens = tokens if tokens is not None else default_tokens
    seqs = seqs if seqs is not None else default_seqs
    return Profile(version, engine, max_len, tokens, seqs, sampler), notes


#: vLLM allocates its whole KV pool once, at start-up, at a size that does not change: it adds no reserve.
RESERVE = ReserveRule(TRANSIENT_RESERVE, long_lived=(*LONG_LIVED, "kv_cache"))
RESERVE_NOTE = transient_reserve_note("vLLM's KV pool")


def refine(stack: Stack, workload: Workload) -> Stack:
    """``stack`` with vLLM's allocator reserve and its own attention kernels, which never materialise the scores."""
    return replace(stack, reserve=RESERVE, reserve_note=RESERVE_NOTE, fused_attention=True)


#: First release modelled with V1's groups of layers (the hybrid allocator, vllm-project/vllm#17996).
GROUPS_FROM = (0, 10)
#: ``_get_kv_cache_groups_uniform_page_size``: the larger count is the group size below this ratio.
NEAR_EQUAL = 1.5


def group_size(full: int, sliding: int) -> int:
    """Layers per group of a model with ``full`` full-attention and ``sliding`` sliding-window layers."""
    counts = [n for n in (full, sliding) if n]
    if len(counts) < 2:
        return sum(counts)
    small, large = min(counts), max(counts)
    return large if large < small * NEAR_EQUAL else small


def kv_layout(shape: ModelShape, profile: Profile, layer_bytes: int, block: int) -> PagedLayout | None:
    """The KV pool's groups of layers for ``profile``'s release (None where they are not modelled: V0, a
    release before :data:`GROUPS_FROM`, an encoder-decoder model)."""
    if profile.engine != "V1" or parse_version(profile.version) < GROUPS_FROM:
        return None
    if shape.architecture is not Architecture.decoder:
        return None
    return layout(shape, shape.layers, layer_bytes, block, profile.max_num_batched_tokens)


def layout(
    shape: ModelShape, layers: int, layer_bytes: int, block: int, max_num_batched_tokens: int
) -> PagedLayout | None:
    """The pool of ``layers`` attention layers of ``shape`` (None without any), ``layer_bytes`` each per token."""
    if not layers or not layer_bytes:
        return None
    sliding = shape.sliding_layers(layers)
    full = layers - sliding
    size = group_size(full, sliding)
    return PagedLayout(
        layer_bytes=layer_bytes,
        block=block,
        group_size=size,
        full_groups=math.ceil(full / size),
        sliding_groups=math.ceil(sliding / size),
        window=shape.sliding_window if sliding else 0,
        lookahead=max_num_batched_tokens,
    )


def padding_layers(pool: PagedLayout, layers: int) -> int:
    """The layer slots the groups hold beyond the model's ``layers`` (vLLM warns "Add N padding layers")."""
    return pool.groups * pool.group_size - layers


def sort_scratch_per_logit(rows: int) -> int:
    """PyTorch's scratch per element when ``torch.sort`` sorts ``rows`` rows of a CUDA tensor along the last
    dimension (``launch_stable_sort_kernel``: one row and 128 rows or more take 20 bytes, 2 to 127 rows 32)."""
    return FULL_SORT_SCRATCH if 1 < rows < SEGMENTED_SORT_ROWS else SEGMENTED_SORT_SCRATCH


def sampler_bytes(profile: Profile, vocab: int, hidden: int, compute_bytes: int) -> int:
    """The profile's sampling step at its peak, the sort of top-k/top-p: the logits of ``profile.requests``
    rows over ``vocab`` at the compute dtype with what :data:`SORT_HELD_BYTES` and the sort's scratch add
    (FlashInfer's sampler: :data:`FLASHINFER_HELD_BYTES`, in vLLM 0.8 :data:`FLASHINFER_PROBS_HELD_BYTES`),
    plus the hidden states held meanwhile (V0: the forward's output for every token; V1: the rows sampled)."""
    rows = profile.requests
    held_rows = profile.max_num_batched_tokens if profile.engine == "V0" else 0
    held = (held_rows + rows) * hidden * compute_bytes
    if profile.sampler == "flashinfer":
        new_api = parse_version(profile.version) >= FLASHINFER_NEW_API_FROM
        kept = FLASHINFER_HELD_BYTES if new_api else FLASHINFER_PROBS_HELD_BYTES
        return held + rows * vocab * (compute_bytes + kept)
    return held + rows * vocab * (compute_bytes + SORT_HELD_BYTES + sort_scratch_per_logit(rows))


#: RoPE classes whose cache spans ``original_max_position_embeddings x factor`` positions (``get_rope`` passes
#: the original length: ``YaRNScalingRotaryEmbedding``, ``DeepseekScalingRotaryEmbedding``).
ORIGINAL_TIMES_FACTOR = ("yarn", "deepseek_yarn")
#: ... ``max_position x factor`` (``LinearScalingRotaryEmbedding``, ``DynamicNTKScalingRotaryEmbedding``).
MAX_TIMES_FACTOR = ("linear", "dynamic")
#: ``MRotaryEmbedding`` (Qwen2-VL's multimodal RoPE) caches ``max_position x 4`` positions.
MROPE_POSITIONS = 4


def rope_cache_rows(model: ModelSpec, positions: int) -> int:
    """Positions of vLLM's RoPE caches for ``model`` (``get_rope`` in vllm/model_executor/layers/rotary_embedding,
    read at 0.11.0: one class per ``rope_type``), over its ``max_position_embeddings`` ``positions``: the
    default and ``llama3`` rotations cache ``positions``; linear and dynamic-NTK scaling ``positions x factor``;
    YaRN ``original_max_position_embeddings x factor``; Phi-3's ``longrope`` a short and a long cache
    (``original + positions``); the multimodal ``mrope`` ``4 x positions``. A model whose sliding-window
    layers rotate with a base of their own (Gemma 3's ``rope_local_base_freq``: gemma3.py builds a second,
    default ``get_rope``) has a second cache of ``positions``."""
    scaling = model.rope_scaling
    if scaling is None:
        return positions
    factor = scaling.factor or 1.0
    original = scaling.original_max_position_embeddings or positions
    if scaling.type in ORIGINAL_TIMES_FACTOR:
        rows = int(original * factor)
    elif scaling.type in MAX_TIMES_FACTOR:
        rows = int(positions * factor)
    elif scaling.type == "longrope":
        rows = original + positions
    elif scaling.type == "mrope":
        rows = positions * MROPE_POSITIONS
    else:
        rows = positions
    return rows + (positions if scaling.local_rope else 0)


def rope_cache_bytes(shape: ModelShape, model: ModelSpec, compute_bytes: int) -> int:
    """vLLM's rotary cos/sin caches, buffers of the model counted in "Loading model weights took":
    ``[positions, rotary_dim]`` each, cast to the model's dtype (``RotaryEmbedding.__init__``: ``cache.to(dtype)``,
    vllm/model_executor/layers/rotary_embedding.py, read at 0.6.4 and 0.11.0), one per rotary setting
    (``get_rope`` shares it through ``_ROPE_DICT``), over :func:`rope_cache_rows` positions. Llama-3.1-8B:
    131,072 x 128 x 2 B = 32 MiB, which is what its logged 14.9888 GiB holds beyond the 14.9574 GiB of its
    weights (vllm-project/vllm#10517). vLLM builds the cache for the model's whole configured length, whatever
    ``max_model_len`` is (vllm-project/vllm#44738 measured what clamping it would save). A partial rotary
    embedding's cache is narrower than the head: counted at the head's width."""
    positions = model.max_position_embeddings or 0
    if shape.position is not Position.rotary or positions <= 0:
        return 0
    rotary_dim = shape.mla.rope_dim if shape.mla is not None else shape.head_dim  # MLA rotates its rope part
    return rope_cache_rows(model, positions) * rotary_dim * compute_bytes


def model_code(model: ModelSpec, shape: ModelShape, compute_bytes: int) -> tuple[ModelShape, list[str]]:
    """The model as vLLM's own model code holds it: its weights and the RoPE caches (:func:`rope_cache_bytes`),
    none of transformers' release facts (vLLM does not run transformers' modules); with a note."""
    cache = rope_cache_bytes(shape, model, compute_bytes)
    code = ModelCode(buffer_bytes=cache)
    notes = []
    if cache:
        rows = rope_cache_rows(model, model.max_position_embeddings or 0)
        notes.append(
            f"vLLM's RoPE cos/sin cache ({rows:,} positions, {cache / MiB:,.0f} MiB) counted with the weights, "
            "as vLLM's weight figure counts it"
        )
    return (shape if code == shape.code else replace(shape, code=code)), notes


def eager_block_bytes(shape: ModelShape, model_type: str, tokens: int, compute_bytes: int) -> int | None:
    """The largest transient of one decoder layer of vLLM's llama.py run eagerly (the V0 engine's profile
    forward), over ``tokens`` flat tokens; None for other model files, whose count is transformers-like.

    ``LlamaModel.forward`` keeps the layer's input (``hidden_states, residual = layer(...)``), which
    ``input_layernorm`` normalises in place (``fused_add_rms_norm``) and attention reads; the residual is one
    tensor updated in place; ``post_attention_layernorm`` normalises the output projection in place. So three
    hidden-wide tensors are alive through the layer. ``LlamaMLP.forward`` rebinds its input name to the merged
    gate/up output (``x, _ = self.gate_up_proj(x)``, then ``x = self.act_fn(x)``), so that output is freed
    before the down projection: the MLP's peak is gate/up (2 ffn) with ``SiluAndMul``'s output (ffn). Qwen2,
    Gemma and most other files keep it (``gate_up, _ = ...``) through the down projection, one hidden-wide
    tensor more, as transformers' count has. Attention: Q/K/V (one fused output), the kernel's output (Q wide)
    and the output projection. Per token: max(3 h + 3 ffn, 3 h + 2 q + 2 kv). The layer and loop read at 0.6.4 and
    0.11.0, the MLP at every release from 0.6.4 to 0.11.0.
    Llama-3.1-8B at 20,000 tokens: 20,000 x (3 x 4,096 + 3 x 14,336) x 2 B = 2.06 GiB; vLLM 0.6.4 logged
    17.06 GiB peak less 14.99 GiB weights = 2.07 GiB on an RTX 3090 (vllm-project/vllm#10517)."""
    if model_type not in LLAMA_PY_TYPES or not shape.gated or shape.moe is not None or shape.mla is not None:
        return None
    held = 3 * shape.hidden
    mlp = held + 3 * shape.ffn
    attention = held + 2 * shape.q_width + 2 * shape.kv_width
    return tokens * max(mlp, attention) * compute_bytes


def non_torch_bytes(profile: Profile, cuda_context_bytes: int) -> tuple[int, str]:
    """Memory outside PyTorch that ``profile``'s release charges against the KV budget on one GPU, and a
    note on what it charges beyond the model (see the module docstring)."""
    release = parse_release(profile.version)
    no_baseline = V1_BASELINE_FROM if profile.engine == "V1" else V0_BASELINE_FROM
    if release < no_baseline:
        which = "V1 before 0.9.1" if profile.engine == "V1" else "V0 before 0.6.5"
        return NON_TORCH_BYTES + cuda_context_bytes, (
            f"vLLM {profile.version} ({which}) counts all memory outside PyTorch's allocator against "
            f"the KV cache: the CUDA context ({cuda_context_bytes // MiB} MiB) is subtracted; it also counts the "
            "allocator's reserved but unallocated segments and other processes on the card, which are not"
        )
    if profile.engine == "V0" and release[:2] < RESERVED_BASELINE_FROM:
        return NON_TORCH_BYTES, (
            f"vLLM {profile.version} (0.6.5 to 0.6.6) also subtracts the allocator's reserved but unallocated "
            "segments and the CUDA context's growth during profiling as non_torch_memory, not modelled "
            "(published: 1.79 GiB for Llama-3-8B on one H100, vllm-project/vllm#10511)"
        )
    return NON_TORCH_BYTES, ""
