"""The ``vramcalc estimate --json`` document as a model: :class:`EstimateResult`.

Int bytes throughout. Keys that apply to every estimate come first; the card's verdict (``gpu``), the LLM
keys and ``timeline`` are present only when they apply; ``per_rank``, ``host_bytes`` and ``parallel`` are
on every estimate (``parallel`` null for a one-GPU spec).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from vramcalc.results.base import Result
from vramcalc.results.timeline import TimelineResult

if TYPE_CHECKING:
    from vramcalc.families.estimate import Estimate
    from vramcalc.families.timeline import Timeline
    from vramcalc.parallel.layout import ParallelDetails
    from vramcalc.planning.budget import Budget, Fit


class GpuVerdict(Result):
    """The card an estimate was compared with and the verdict (:func:`vramcalc.planning.budget.fit_of`, the
    one every command uses). For a vLLM serving spec, needed and available are the memory vLLM manages."""

    id: str = Field(description="Catalog id of the card (e.g. 'a100-80gb-sxm').")
    name: str = Field(description="Full name of the card.")
    usable_bytes: int = Field(
        description="Usable memory of the card, bytes: the driver total where the catalog has it, the free memory "
        "NVML read for 'local', else the nominal capacity."
    )
    usable_basis: str = Field(description="Where usable_bytes comes from (one line).")
    reserve_bytes: int = Field(description="Memory kept free on the card (target.reserve or the reserve given), bytes.")
    needed_bytes: int = Field(
        description="Bytes the estimate needs: total_bytes (plus paged_optimizer_bytes with workload.paged_states: "
        "device); for a vLLM serving spec the profile peak outside the KV cache plus the KV cache of the batch."
    )
    available_bytes: int = Field(
        description="Bytes available to it: usable_bytes - reserve_bytes; for a vLLM serving spec "
        "memory_utilization x that."
    )
    headroom_bytes: int = Field(description="available_bytes - needed_bytes (negative when it does not fit), bytes.")
    fits: bool = Field(description="needed_bytes <= available_bytes.")

    @classmethod
    def of(cls, budget: Budget, fit: Fit) -> GpuVerdict:
        return cls(
            id=budget.gpu_id,
            name=budget.gpu_name,
            usable_bytes=budget.usable_bytes,
            usable_basis=budget.capacity_basis,
            reserve_bytes=budget.reserve_bytes,
            needed_bytes=fit.needed_bytes,
            available_bytes=fit.available_bytes,
            headroom_bytes=fit.headroom_bytes,
            fits=fit.fits,
        )


class GgufTypeShare(Result):
    """The tensors of one ggml type in a GGUF file."""

    tensors: int = Field(description="2-D tensors of this type (1-D norms and biases are not counted).")
    params: int = Field(description="Parameters stored in this type.")
    bytes: int = Field(description="Bytes of those parameters (whole ggml blocks).")


class Quantization(Result):
    """How the weights are quantized (weight-only quantization of the linear layers)."""

    method: str = Field(description="Quantization method (e.g. 'nf4', 'gptq', 'q4_k_m').")
    bits_per_weight: float = Field(description="Bits per quantized weight, scales and zero points included.")
    quantized_params: int = Field(description="Parameters stored quantized.")
    quantized_bytes: int = Field(description="Bytes of the quantized parameters.")
    kept_params: int = Field(description="Parameters kept at the model dtype (embeddings, LM head, norms, biases).")
    kept_bytes: int = Field(description="Bytes of the parameters kept at the model dtype.")
    gguf_types: dict[str, GgufTypeShare] | None = Field(
        default=None,
        description="GGUF only: per ggml type (q4_K, q6_K, f32, ...) the tensors, parameters and bytes "
        "llama.cpp stores in it.",
    )


class ParallelPlan(Result):
    """The multi-GPU plan behind a per-rank estimate, every default filled in (int bytes, per GPU)."""

    gpus: int = Field(description="GPUs of the plan: data x tensor x pipeline x context.")
    data: int = Field(description="Data-parallel degree.")
    tensor: int = Field(description="Tensor-parallel degree.")
    pipeline: int = Field(description="Pipeline-parallel stages.")
    context: int = Field(description="Context-parallel degree.")
    sequence_parallel: bool = Field(description="Megatron sequence parallelism on.")
    framework: str = Field(description="deepspeed, fsdp or megatron.")
    scheme: str = Field(description="Short name of the sharding scheme (e.g. 'ZeRO-3', 'FSDP full_shard').")
    zero_stage: int = Field(description="ZeRO stage the scheme amounts to (0-3).")
    shard_group: int = Field(description="Ranks the sharded states are split over.")
    micro_batches: int = Field(description="Pipeline micro-batches per step.")
    schedule: str = Field(description="Pipeline schedule.")
    offload_optimizer: bool = Field(description="Optimizer states offloaded to host memory.")
    offload_params: bool = Field(description="Parameters offloaded to host memory.")
    reduce_bucket_elements: int = Field(description="Gradient reduce bucket, elements.")
    prefetch_bucket_elements: int = Field(description="Parameter prefetch bucket, elements.")
    stage: str = Field(description="The pipeline stage the figures are for (the one with the largest peak).")
    stage_peaks: dict[str, int] = Field(description="Allocated peak of each pipeline stage, bytes.")
    params_per_rank: int = Field(
        description="Parameters of one rank's share of the model (after tensor/pipeline splits, before sharding)."
    )
    host_bytes: int = Field(description="Host memory one GPU's process holds for offloaded states, bytes.")
    gpus_per_node: int = Field(description="GPUs per node.")
    host_bytes_per_node: int = Field(description="Host memory of one node (every rank on it), bytes.")

    @classmethod
    def of(cls, details: ParallelDetails) -> ParallelPlan:
        p = details.plan
        return cls(
            gpus=p.gpus,
            data=p.data,
            tensor=p.tensor,
            pipeline=p.pipeline,
            context=p.context,
            sequence_parallel=p.sequence_parallel,
            framework=p.framework.value,
            scheme=p.label,
            zero_stage=p.stage,
            shard_group=p.shard,
            micro_batches=p.micro_batches,
            schedule=p.schedule.value,
            offload_optimizer=p.offload_optimizer,
            offload_params=p.offload_params,
            reduce_bucket_elements=p.reduce_bucket,
            prefetch_bucket_elements=p.prefetch_bucket,
            stage=details.stage,
            stage_peaks=dict(details.stage_peaks),
            params_per_rank=details.params_per_rank,
            host_bytes=details.host_bytes,
            gpus_per_node=p.gpus_per_node,
            host_bytes_per_node=details.host_bytes_per_node,
        )


class VllmEngine(Result):
    """What vLLM subtracts before sizing its KV cache at start-up (vramcalc/stacks/vllm.py), int bytes."""

    version: str = Field(description="The vLLM release modelled (workload.versions.vllm, else the default).")
    engine: str = Field(description="V0 or V1 (the default engine from 0.8.0).")
    max_model_len: int = Field(description="Longest request vLLM admits, tokens.")
    max_num_batched_tokens: int = Field(description="Tokens of the profiling forward (one scheduler step).")
    max_num_seqs: int = Field(description="Most requests per step.")
    activation_peak_bytes: int = Field(description="The profile step's activation peak (torch_peak_increase).")
    non_torch_bytes: int = Field(description="Memory outside PyTorch measured during profiling.")
    cuda_graph_bytes: int = Field(description="CUDA-graph memory subtracted from the KV budget (0: captured after).")
    total_seen_bytes: int | None = Field(None, description="The card's total as torch.cuda.mem_get_info reports it.")


class EstimateResult(Result):
    """One step's peak memory by component and phase (``vramcalc estimate --json``), int bytes.

    With a card, :attr:`gpu` holds the verdict (``result.gpu.fits``, ``result.gpu.headroom_bytes``)."""

    name: str = Field(description="The spec's name ('unnamed' when it has none).")
    params: int = Field(description="Parameters of the model (every expert counted).")
    mode: str = Field(description="train or inference.")
    peak_phase: str = Field(description="The phase whose allocated total is largest (e.g. 'backward').")
    components: dict[str, int] = Field(description="Bytes of each component at the peak phase.")
    component_peaks: dict[str, int] = Field(description="Each component's own largest bytes over all phases.")
    peak_allocated_bytes: int = Field(
        description="Allocated peak, bytes: the sum of components (what torch.cuda.max_memory_allocated() reports)."
    )
    overhead: dict[str, int] = Field(
        description="Bytes outside PyTorch's allocated peak: cuda_context and allocator_reserve; with several GPUs in "
        "training also nccl (NCCL's buffers per GPU)."
    )
    total_bytes: int = Field(description="peak_allocated_bytes + the overhead, bytes: what the card must hold.")
    phases: dict[str, int] = Field(description="Allocated bytes at each phase's own peak.")
    assumptions: list[str] = Field(description="Defaults and modelling choices behind the figures, one line each.")
    gpu: GpuVerdict | None = Field(None, description="The card and the verdict (only when a card is named).")
    kv_cache_bytes: int | None = Field(None, description="KV cache of the batch, bytes (LLM inference).")
    kv_cache_bytes_per_token: int | None = Field(None, description="KV cache per token, bytes (LLM inference).")
    kv_block_size: int | None = Field(None, description="Tokens per KV-cache block (paged runtimes; LLM inference).")
    context_tokens: int | None = Field(None, description="Tokens of context per sequence (LLM inference).")
    memory_utilization: float | None = Field(
        None, description="vLLM's share of the available memory (vLLM serving spec on a card)."
    )
    kv_cache_budget_bytes: int | None = Field(
        None, description="Bytes vLLM pages into KV blocks on the card (vLLM serving spec on a card)."
    )
    kv_cache_tokens: int | None = Field(
        None, description="Tokens the KV blocks hold: vLLM's 'GPU KV cache size' (vLLM serving spec on a card)."
    )
    max_concurrency: float | None = Field(
        None,
        description="vLLM's 'maximum concurrency': the KV blocks over one request's blocks (kv_cache_tokens / "
        "context_tokens without sliding windows), cut to two decimals (vLLM serving spec on a card).",
    )
    max_concurrent_sequences: int | None = Field(
        None, description="Whole sequences the KV blocks hold: the largest batch_size that fits (vLLM serving spec)."
    )
    kv_cache_blocks: int | None = Field(
        None, description="KV blocks on the card: vLLM's '# GPU blocks' (vLLM serving spec on a card)."
    )
    kv_cache_startup_bytes: int | None = Field(
        None,
        description="KV cache vLLM requires at start-up for one request of max_model_len tokens (vLLM V1 with "
        "groups of layers, on a card).",
    )
    max_model_len_that_fits: int | None = Field(
        None,
        description="Where vLLM would refuse to start (kv_cache_startup_bytes over kv_cache_budget_bytes): the "
        "largest max_model_len that fits, 0 if none; null when it starts (vLLM serving spec on a card).",
    )
    vllm: VllmEngine | None = Field(None, description="vLLM's engine settings and start-up profile (vLLM serving).")
    trainable_params: int | None = Field(
        None, description="Trainable parameters of the adapter (LoRA, QLoRA or another PEFT method: adapter.type)."
    )
    active_params: int | None = Field(None, description="Parameters active per token (mixture of experts).")
    quantization: Quantization | None = Field(None, description="The weight quantization (quantized models).")
    paged_optimizer_bytes: int | None = Field(
        None,
        description="A bitsandbytes paged optimizer's states in CUDA managed memory, bytes: resident on the GPU while "
        "there is room, evicted to the host under pressure; outside peak_allocated_bytes and total_bytes (only "
        "with a paged optimizer).",
    )
    paged_states_in_fit: bool | None = Field(
        None,
        description="Whether the verdict counts paged_optimizer_bytes (workload.paged_states: device) or lets them "
        "page to the host (host-ok, the default; only with a paged optimizer).",
    )
    per_rank: bool = Field(description="Every byte figure is one GPU's (a multi-GPU plan).")
    host_bytes: int = Field(description="Host memory per GPU's process for offloaded states, bytes (0 without).")
    parallel: ParallelPlan | None = Field(description="The multi-GPU plan (null for a one-GPU spec).")
    timeline: TimelineResult | None = Field(None, description="The step timeline (only when asked for).")

    @classmethod
    def of(
        cls, result: Estimate, budget: Budget | None = None, fit: Fit | None = None, timeline: Timeline | None = None
    ) -> EstimateResult:
        """The document of ``result``; with ``budget`` and ``fit`` (:func:`~vramcalc.planning.budget.fit_of`)
        the card's verdict, with ``timeline`` the step timeline."""
        doc: dict[str, Any] = {
            "name": result.name,
            "params": result.params,
            "mode": result.mode,
            "peak_phase": result.peak_phase,
            "components": dict(result.components),
            "component_peaks": dict(result.component_peaks),
            "peak_allocated_bytes": result.peak_allocated_bytes,
            "overhead": dict(result.overhead),
            "total_bytes": result.total_bytes,
            "phases": dict(result.phases),
            "assumptions": list(result.assumptions),
        }
        if budget is not None and fit is not None:
            doc["gpu"] = GpuVerdict.of(budget, fit)
        doc.update(_llm_keys(result, fit, budget))
        if result.paged_bytes is not None:
            doc["paged_optimizer_bytes"] = result.paged_bytes
            doc["paged_states_in_fit"] = result.paged_in_fit
        details = result.parallel
        doc["per_rank"] = details is not None
        doc["host_bytes"] = details.host_bytes if details is not None else result.host_bytes
        doc["parallel"] = ParallelPlan.of(details) if details is not None else None
        if timeline is not None:
            doc["timeline"] = TimelineResult.of(timeline)
        return cls(**doc)


def _llm_keys(result: Estimate, fit: Fit | None, budget: Budget | None = None) -> dict[str, Any]:
    """The LLM keys that apply: KV cache (inference), vLLM's KV pool on the card, adapter, experts, quantization."""
    info = result.llm
    if info is None:
        return {}
    doc: dict[str, Any] = {}
    if info.kv_cache_bytes_per_token is not None:
        doc["kv_cache_bytes"] = info.kv_cache_bytes or 0
        doc["kv_cache_bytes_per_token"] = info.kv_cache_bytes_per_token
        doc["kv_block_size"] = info.kv_block_size
        doc["context_tokens"] = info.context_tokens
        pool = fit.kv_pool if fit is not None else None
        if pool is not None:
            doc["memory_utilization"] = pool.memory_utilization
            doc["kv_cache_budget_bytes"] = pool.budget_bytes
            doc["kv_cache_tokens"] = pool.tokens
            doc["max_concurrency"] = pool.max_concurrency
            doc["max_concurrent_sequences"] = pool.max_sequences
            doc["kv_cache_blocks"] = pool.blocks
            if pool.max_model_len:
                doc["kv_cache_startup_bytes"] = pool.startup_bytes
                doc["max_model_len_that_fits"] = pool.longest_request
        kv_pool = info.kv_pool
        engine = kv_pool.engine if kv_pool is not None else None
        if kv_pool is not None and engine is not None:
            seen = max(0, budget.available_bytes - kv_pool.unseen_bytes) if budget is not None else None
            doc["vllm"] = VllmEngine(
                version=engine.version,
                engine=engine.engine,
                max_model_len=engine.max_model_len,
                max_num_batched_tokens=engine.max_num_batched_tokens,
                max_num_seqs=engine.max_num_seqs,
                activation_peak_bytes=engine.activation_peak_bytes,
                non_torch_bytes=engine.non_torch_bytes,
                cuda_graph_bytes=0,
                total_seen_bytes=seen,
            )
    if info.trainable_params is not None:
        doc["trainable_params"] = info.trainable_params
    if info.active_params is not None:
        doc["active_params"] = info.active_params
    if info.quantization is not None:
        doc["quantization"] = Quantization(**info.quantization)
    return doc
