"""NCCL's own GPU memory in a multi-GPU training step: communicator buffers outside PyTorch's allocator.

Pure. NCCL allocates its buffers with ``cudaMalloc``/cuMem, not through PyTorch's caching allocator, so
they count in ``nvidia-smi`` (and against the card) but not in ``torch.cuda.max_memory_reserved()``. Per
GPU and communicator, read from NCCL's source (github.com/NVIDIA/nccl, tags v2.18.3-1 to v2.27.7-1):

* **ring connections**: every channel connects to its ring neighbours, one send and one receive
  connection, each with buffers for all three protocols (LL 512 KiB, LL128 4.6875 MiB, SIMPLE 4 MiB =
  ``NCCL_BUFFSIZE``; src/init.cc ``ncclCommInitRank`` buffer sizes, src/transport/p2p.cc), each side
  rounded up to 2 MiB (``CUDA_IPC_MIN``): 12 MiB per channel. GPUs on an NVSwitch board (HGX/DGX A100,
  H100) run 24 collective channels (NCCL_DEBUG logs, NVIDIA/nccl-tests#100); PCIe systems 2 to 4, taken as 4;
* **channel structures**: with cuMem (NCCL 2.19 and later, on by default) each of the ``pow2Up(channels)``
  point-to-point channels makes three small device allocations (src/channel.cc ``initChannel``), each
  rounded up to cuMem's 2 MiB granularity: 192 MiB on an NVSwitch board. Derived from the code, not measured;
* **eager connection**: before NCCL 2.22 (and with ``NCCL_CUMEM_ENABLE=0``) every communicator connects
  its rings and trees at creation (src/init.cc) and allocates a shared point-to-point pool of ``p2p
  channels x 16 x chunk`` (src/transport/net.cc ``ncclProxyMsgSharedInit``): 32 x 16 x 512 KiB = 256 MiB
  on NVLink, 4 x 16 x 128 KiB on PCIe. In a group of more than two GPUs the tree, a chain within a node,
  gives its middle ranks two connections per channel beyond the ring's (its ends one: NVIDIA/nccl#964's
  688 MB on rank 0 of a 4-GPU group is 544 + 24 x 6 MiB). NCCL 2.22 connects lazily, at the first
  collective of each algorithm (``NCCL_RUNTIME_CONNECT``);
* **NVLS** (NVLink SHARP, NCCL 2.17 and later, Hopper and later on an NVSwitch board, a communicator of three
  or more GPUs of a node): ``channels x 2 x 6 MiB`` per local rank up to NCCL 2.20 (vLLM's log in
  vllm-project/vllm#9699 prints 2,304 MiB for 8 GPUs), half that in 2.21, 32 MiB per local rank from 2.22
  (src/transport/nvls.cc).

So one communicator holds 480 MiB per GPU on an NVSwitch board with today's NCCL, 736 MiB with NCCL
2.19-2.21 and 544 MiB with 2.18 (NVIDIA/nccl#964 measured 544 MB for a two-GPU group on A100s with 2023's
PyTorch), plus the tree's connections in larger groups before 2.22 and NVLS on Hopper. Not counted: the
tree's connections with lazy connection (up to 288 MiB on middle ranks, if NCCL ever picks a tree),
point-to-point sends beyond the pipeline's and all-to-all (12 MiB per channel and peer), and NCCL's
kernels in the CUDA context.

Communicators per GPU: PyTorch's default group over all GPUs (DDP's and FSDP's data group; trainers'
barriers and loss reductions run on it); DeepSpeed's data-parallel group, a clone of it
(``deepspeed/utils/groups.py`` ``_clone_world_group``); Megatron-LM's own tensor, pipeline, data and
context groups and, with pipeline stages, its embedding group; FSDP's device mesh reuses the default group
on one dimension and makes a group per dimension on several (hybrid sharding: a shard and a replicate group).
"""

from __future__ import annotations

from vramcalc.parallel.layout import Plan
from vramcalc.spec.models import Spec
from vramcalc.spec.parallel import Framework, FsdpStrategy
from vramcalc.spec.versions import nccl_release, torch_release
from vramcalc.units import MiB

#: Collective channels and the point-to-point channels (``pow2Up``) NCCL runs, by interconnect.
CHANNELS = {"nvswitch": 24, "pcie": 4}
P2P_CHANNELS = {"nvswitch": 32, "pcie": 4}
#: One ring channel: a send and a receive connection, 12 MiB of protocol buffers between them.
RING_CHANNEL_BYTES = 12 * MiB
#: cuMem's granularity on A100/H100: each of ``initChannel``'s three device allocations takes one.
CUMEM_GRANULE = 2 * MiB
#: The eager proxy pool's chunk (``p2pChunkSize``) by interconnect: 512 KiB over NVLink, 128 KiB on PCIe.
P2P_CHUNK = {"nvswitch": 512 * 1024, "pcie": 128 * 1024}
#: NCCL releases where the allocation changed: cuMem on by default, lazy connection, smaller NVLS buffers.
CUMEM_DEFAULT = (2, 19)
LAZY_CONNECT = (2, 22)
NVLS_FIRST = (2, 17)
NVLS_HALVED = (2, 21)
#: NVLS buffers per local rank from NCCL 2.22 on (nvls channels 16 x 2 x 1 MiB).
NVLS_PER_RANK_LAZY = 32 * MiB

#: The NCCL each PyTorch release's default Linux wheel pins (``nvidia-nccl-cu1x``, PyPI metadata), as
#: (first PyTorch release, NCCL release); the last row is today's default.
TORCH_NCCL = (
    ((1, 13), (2, 14)),
    ((2, 1), (2, 18)),
    ((2, 2), (2, 19)),
    ((2, 3), (2, 20)),
    ((2, 5), (2, 21)),
    ((2, 7), (2, 26)),
    ((2, 8), (2, 27)),
    ((2, 11), (2, 28)),
    ((2, 12), (2, 29)),
    ((2, 14), (2, 30)),
)


def nccl_of_torch(torch: tuple[int, int, int] | None) -> tuple[int, int]:
    """The NCCL release a PyTorch release's wheel brings (today's when none is pinned)."""
    if torch is None:
        return TORCH_NCCL[-1][1]
    found = TORCH_NCCL[0][1]
    for first, nccl in TORCH_NCCL:
        if torch[:2] >= first:
            found = nccl
    return found


def groups(plan: Plan) -> list[int]:
    """The size of every NCCL communicator one GPU of ``plan`` belongs to (none on one GPU)."""
    if plan.gpus == 1:
        return []
    dims = [d for d in (plan.data, plan.tensor, plan.pipeline, plan.context) if d > 1]
    sizes = [plan.gpus]  # PyTorch's default group
    if plan.framework is Framework.megatron:
        sizes += dims + ([plan.pipeline] if plan.pipeline > 1 else [])  # its own groups; the embedding group
    elif plan.framework is Framework.deepspeed:
        if plan.data * plan.context > 1:
            sizes.append(plan.data * plan.context)  # the cloned data-parallel group
        sizes += [d for d in (plan.tensor, plan.pipeline) if d > 1]
    elif len(dims) > 1:  # FSDP on a device mesh of several dimensions: one group per dimension
        sizes += dims
    if plan.framework is Framework.fsdp and plan.fsdp is FsdpStrategy.hybrid:
        sizes += [plan.shard, plan.data * plan.context // plan.shard]
    return [s for s in sizes if s > 1]


def communicator_bytes(size: int, nccl: tuple[int, int], interconnect: str, gpus_per_node: int, nvls: bool) -> int:
    """One communicator of ``size`` GPUs, on one of them."""
    channels, p2p = CHANNELS[interconnect], P2P_CHANNELS[interconnect]
    total = channels * RING_CHANNEL_BYTES
    if nccl >= CUMEM_DEFAULT:
        total += 3 * CUMEM_GRANULE * p2p
    if nccl < LAZY_CONNECT:  # connected at creation: the proxy pool, and the tree beside the ring
        total += p2p * 16 * P2P_CHUNK[interconnect]
        if size > 2:  # a middle rank of the tree's chain: its own two connections per channel
            total += channels * RING_CHANNEL_BYTES
    local = min(size, gpus_per_node)
    if nvls and interconnect == "nvswitch" and local >= 3 and nccl >= NVLS_FIRST:
        if nccl >= LAZY_CONNECT:
            total += local * NVLS_PER_RANK_LAZY
        else:
            total += channels * 2 * 6 * MiB * local // (2 if nccl >= NVLS_HALVED else 1)
    return total


def nccl_bytes(plan: Plan, nccl: tuple[int, int], interconnect: str, hopper_or_newer: bool) -> tuple[int, str]:
    """NCCL's bytes on one GPU of ``plan`` and the assumption behind them ("" on one GPU)."""
    sizes = groups(plan)
    if not sizes:
        return 0, ""
    total = sum(communicator_bytes(s, nccl, interconnect, plan.gpus_per_node, hopper_or_newer) for s in sizes)
    nvls = hopper_or_newer and interconnect == "nvswitch" and nccl >= NVLS_FIRST
    nvls = nvls and any(min(s, plan.gpus_per_node) >= 3 for s in sizes)
    release = f"{nccl[0]}.{nccl[1]}"
    return total, (
        f"NCCL buffers {total // MiB:,} MiB per GPU (outside PyTorch's allocator): {len(sizes)} communicator(s) "
        f"of {', '.join(map(str, sizes))} GPUs, NCCL {release}, {interconnect}"
        + (", NVLS (Hopper or newer)" if nvls else "")
        + "; set overhead.nccl or parallel.interconnect"
    )


def nccl_overhead(spec: Spec, plan: Plan, hopper_or_newer: bool, card_interconnect: str) -> tuple[int, str]:
    """NCCL's bytes per GPU of ``spec`` run as ``plan`` on cards that talk over ``card_interconnect`` (the
    spec's ``parallel.interconnect`` when given; ``overhead.nccl`` instead of the model) and the note."""
    given, versions = spec.overhead.nccl, spec.workload.versions
    if plan.gpus == 1:
        return 0, "overhead.nccl not used: one GPU" if given is not None else ""
    if given is not None:
        return given, f"NCCL buffers {given:,} bytes per GPU (overhead.nccl)"
    pinned = nccl_release(versions)
    nccl = pinned[:2] if pinned is not None else nccl_of_torch(torch_release(versions))
    given_link = spec.parallel.interconnect if spec.parallel is not None else None
    interconnect = given_link or card_interconnect
    return nccl_bytes(plan, nccl, interconnect, hopper_or_newer)
