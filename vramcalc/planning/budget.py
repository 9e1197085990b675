"""The budget of a card and the one fit verdict every command uses (pure: no I/O, no typer or rich).

* ``available_bytes`` (:class:`Budget`) = the card's usable memory (:attr:`GPU.usable_bytes`: the
  driver total where the catalog has it, the free memory NVML read for ``--gpu local``, else the
  nominal capacity) minus the reserve (``target.reserve`` or ``--reserve``): headroom the user wants
  kept free, a share of the usable memory or a size.
* :func:`fit_of` is the verdict. For a training or plain inference step it compares the estimate's
  ``total_bytes`` (allocated peak + CUDA context + allocator reserve, and NCCL buffers across GPUs) with
  ``available_bytes``. A paged optimizer's states (CUDA managed memory, evicted to the host when the card
  runs short: vramcalc/stacks/bnb.py) are not part of it unless ``workload.paged_states: device`` says the
  step must run without paging; then they are added to the needed bytes.
* A vLLM serving spec (a generation whose runtime is vLLM) is judged the way vLLM decides it: vLLM
  takes ``memory_utilization`` x the memory it may use, keeps what its profiling step needed outside
  the KV cache (weights and the activation peak of one forward over ``context`` tokens, which does not
  depend on the number of requests), and pages the rest into KV blocks. The spec fits when its
  ``batch_size`` sequences of ``context`` tokens fit in those blocks, so ``max-batch`` is exactly the
  maximum number of concurrent sequences and any concurrency of 1x or more fits ``batch_size: 1``.
  With vLLM V1's groups of layers (:mod:`vramcalc.stacks.vllm_kv`) a sequence takes the blocks vLLM
  reserves for one request, and one request of ``max_model_len`` tokens must fit, as vLLM checks at
  start-up: where it does not, vLLM refuses to start and nothing fits.

Every command (``estimate --gpu``, ``check``, ``fit``, ``max-batch``, ``max-seq``, ``sweep``, ``plan``
and ``report``) calls :func:`fit_of` (or :func:`fit_on`), so they cannot disagree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vramcalc.core.stack import Device
from vramcalc.families import estimate
from vramcalc.families.estimate import Estimate
from vramcalc.hardware.catalog import GPU
from vramcalc.llm import kvcache
from vramcalc.spec.models import Spec
from vramcalc.spec.target import NO_RESERVE, Reserve

#: Largest GPU count the sharded-plan search tries unless --max-gpus says otherwise (as `vramcalc plan`).
DEFAULT_MAX_GPUS = 64


@dataclass(frozen=True)
class Budget:
    """One card as the planning commands see it (int bytes)."""

    gpu_id: str
    gpu_name: str
    usable_bytes: int
    capacity_basis: str
    hopper_or_newer: bool = False
    reserve: Reserve = NO_RESERVE
    count: int = 1
    bf16: bool = True  # the card has bf16 tensor cores (bf16 precisions are suggested)
    sharded: bool = False  # ``count`` is the GPU count of the spec's parallel section (figures per GPU)
    interconnect: str = "nvswitch"  # how several of these cards talk (NCCL's buffers, vramcalc/stacks/nccl.py)

    @property
    def card(self) -> Device:
        """The card as the stacks read it: its name and the total its driver reports."""
        return Device(self.gpu_name, self.usable_bytes)

    @property
    def reserve_bytes(self) -> int:
        return self.reserve.bytes_of(self.usable_bytes)

    @property
    def available_bytes(self) -> int:
        """Usable memory minus the reserve (never below zero: a reserve larger than the card leaves
        nothing): what the estimate's total is compared with."""
        return max(0, self.usable_bytes - self.reserve_bytes)


def budget_for(gpu: GPU, reserve: Reserve = NO_RESERVE, count: int = 1, sharded: bool = False) -> Budget:
    """The budget of a card."""
    return Budget(
        gpu.id,
        gpu.name,
        gpu.usable_bytes,
        gpu.usable_basis,
        gpu.hopper_or_newer,
        reserve,
        count,
        gpu.has_bf16,
        sharded,
        gpu.interconnect,
    )


def estimate_on(spec: Spec, budget: Budget) -> Estimate:
    """The estimate for the card's generation (its cuBLAS workspace size) and interconnect (NCCL's buffers)."""
    return estimate(spec, hopper_or_newer=budget.hopper_or_newer, card=budget.card, interconnect=budget.interconnect)


@dataclass(frozen=True)
class Fit:
    """The verdict of one estimate on one card: what is needed against what is available (int bytes).

    ``kv_pool`` is set for a vLLM serving spec: the KV blocks the card holds after vLLM's profiling
    step, and the concurrent sequences they take; ``needed_bytes`` and ``available_bytes`` are then
    the memory vLLM manages (the non-KV profile peak plus the batch's KV cache, against
    ``memory_utilization`` x the budget's available bytes)."""

    needed_bytes: int
    available_bytes: int
    kv_pool: kvcache.Capacity | None = None
    #: A paged optimizer's states counted in ``needed_bytes`` (``paged_states: device``; else 0).
    paged_bytes: int = 0

    @property
    def fits(self) -> bool:
        return self.needed_bytes <= self.available_bytes

    @property
    def headroom_bytes(self) -> int:
        return self.available_bytes - self.needed_bytes


def fit_of(result: Estimate, budget: Budget) -> Fit:
    """The one fit verdict (see the module docstring)."""
    pool = result.llm.kv_pool if result.llm is not None else None
    if pool is None:
        paged = (result.paged_bytes or 0) if result.paged_in_fit else 0
        return Fit(result.total_bytes + paged, budget.available_bytes, paged_bytes=paged)
    return fit_of_pool(pool, budget)


def fit_of_pool(pool: kvcache.KvPool, budget: Budget) -> Fit:
    """The verdict of a vLLM serving spec, from its KV pool alone: the profile's non-KV peak plus the
    batch's KV cache against the share of the card vLLM manages. Across pipeline stages (``pool.ranks``)
    vLLM keeps the fewest KV blocks of any rank: the verdict of that rank."""
    if pool.ranks:
        fits = [_fit_of_one(p, budget) for p in (pool, *pool.ranks)]
        return min(fits, key=lambda f: (f.kv_pool.blocks if f.kv_pool is not None else 0, f.headroom_bytes))
    return _fit_of_one(pool, budget)


def _fit_of_one(pool: kvcache.KvPool, budget: Budget) -> Fit:
    seen = max(0, budget.available_bytes - pool.unseen_bytes)  # the total torch.cuda.mem_get_info() reports
    managed = math.floor(pool.memory_utilization * seen)
    if pool.layout is not None:  # vLLM V1's groups: the batch's blocks, and one request of max_model_len at start-up
        max_len = pool.max_model_len or pool.context
        grouped = kvcache.grouped_capacity(
            seen, pool.memory_utilization, pool.non_kv_bytes, pool.layout, pool.context, max_len
        )
        return Fit(pool.non_kv_bytes + max(pool.kv_bytes, grouped.startup_bytes), managed, grouped)
    capacity = kvcache.capacity(
        seen,
        pool.memory_utilization,
        pool.non_kv_bytes,
        pool.bytes_per_token,
        pool.block,
        pool.context,
        pool.bytes_per_sequence,
    )
    return Fit(pool.non_kv_bytes + pool.kv_bytes, managed, capacity)


def fit_on(spec: Spec, budget: Budget) -> Fit:
    """The verdict of ``spec`` on the budget's card (estimated for the card's generation)."""
    return fit_of(estimate_on(spec, budget), budget)
