"""llama.cpp serving a GGUF file: its KV cache at ``--cache-type-k`` / ``--cache-type-v`` and its CUDA
compute buffer (int bytes). Everything is allocated once, at start-up, whatever the prompts.

* **Context** (``llama_context`` in src/llama-context.cpp): ``batch_size`` sequences (``n_seq_max``,
  llama-server's ``--parallel``) of ``seq_len`` tokens ask for ``n_ctx = batch_size x seq_len``, padded
  to 256 (``GGML_PAD(n_ctx, 256)``). Without a unified cache (``kv_unified``, off unless ``--kv-unified``)
  every sequence gets a stream of ``n_ctx_seq = GGML_PAD(n_ctx / n_seq_max, 256)`` cells and
  ``n_ctx = n_ctx_seq x n_seq_max``.
* **KV cache** (``llama_kv_cache`` in src/llama-kv-cache.cpp): every layer holds K, a row of
  ``ggml_row_size(type_k, n_embd_k_gqa)`` bytes per cell, and V, ``ggml_row_size(type_v, n_embd_v_gqa)``,
  for all ``n_ctx`` cells. Row sizes follow ggml's ``type_traits`` (ggml/src/ggml.c): f32 4 bytes, f16 and
  bf16 2 bytes per element; per block of 32 elements q8_0 34 bytes, q4_0 18, q4_1 20, iq4_nl 18, q5_0 22,
  q5_1 24. Models with interleaved sliding-window layers (Gemma 2/3, gpt-oss: ``llama_kv_cache_iswa``)
  keep ``GGML_PAD(min(n_ctx_seq, n_swa + n_ubatch), 256)`` cells per stream in their sliding layers
  (not with ``--swa-full``); other models cache the whole context in every layer.
* **Compute buffer** (``sched_reserve``: ``graph_reserve`` of ``min(n_ctx, n_ubatch)`` tokens, every one
  an output): ggml-alloc lays the worst-case graph's intermediate tensors (f32) into one buffer, reusing
  the memory of tensors no longer needed, so the buffer is the largest set alive at once, the largest of:

  - attention without flash attention: one layer's scores, ``n_kv x n_ubatch x heads`` (the softmax runs
    in place) and the mask ``n_kv x n_ubatch``, f32, plus four hidden-wide f32 activations of the ubatch
    (six with a fused QKV projection);
  - attention with flash attention: the f32 mask and its f16 copy (6 bytes per ``n_kv x n_ubatch``) and
    the same activations;
  - the output: logits ``vocab x n_ubatch`` f32 and the final normed hidden state;
  - the MLP: gate and up projections ``n_ubatch x ffn`` f32 and two hidden-wide activations.

  ``n_kv`` is the context one stream sees (``n_ctx_seq``). Against published start-up logs
  (tests/stacks/test_llamacpp.py): Llama 3 8B at n_ctx 512 and 8,192, Mistral 7B at 2,048 and 32,768 and
  Phi-3-mini at 4,096 (n_ubatch 256), exact to the MiB. The CUDA backend's own memory pool (temporary
  dequantized weights, flash-attention conversions) is outside this buffer and is not modelled.
* **Weights**: the GGUF tensors (:mod:`vramcalc.stacks.gguf`) less the token embedding, which llama.cpp
  keeps in host memory (the input layer stays on the CPU; a tied output layer is loaded again on the GPU).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from vramcalc.choices import Architecture, Head, KvCacheDtype, Runtime
from vramcalc.core.reserve import ReserveRule
from vramcalc.core.stack import Stack
from vramcalc.errors import SpecError
from vramcalc.llm import kvcache
from vramcalc.spec.llamacpp import LLAMACPP_KEYS, OTHER_RUNTIME_KEYS, UNQUANTIZED
from vramcalc.spec.models import is_gguf, runs_llamacpp
from vramcalc.stacks import gguf

if TYPE_CHECKING:
    from vramcalc.core.shape import ModelShape
    from vramcalc.spec.llm import QuantizationSpec
    from vramcalc.spec.models import Spec, Workload

F32, F16 = 4, 2
#: n_ctx and every stream are padded to whole 256-cell chunks (GGML_PAD(..., 256) in llama_context).
PAD = 256
#: GGML_KQ_MASK_PAD: the mask's token rows are padded to this.
MASK_PAD = 64
#: llama.cpp's --ubatch-size default.
DEFAULT_N_UBATCH = 512
#: llama.cpp's --cache-type-k / --cache-type-v default.
DEFAULT_CACHE_TYPE = "f16"
#: (elements per block, bytes per block) of each cache type: ggml's type_traits (ggml/src/ggml.c).
CACHE_TYPES = {
    "f32": (1, 4),
    "f16": (1, 2),
    "bf16": (1, 2),
    "q8_0": (32, 34),
    "q4_0": (32, 18),
    "q4_1": (32, 20),
    "iq4_nl": (32, 18),
    "q5_0": (32, 22),
    "q5_1": (32, 24),
}


@dataclass(frozen=True)
class Setup:
    """llama.cpp's context settings for one spec."""

    n_seq: int
    n_ctx: int
    n_ctx_seq: int
    n_ubatch: int
    type_k: str
    type_v: str
    flash_attn: bool
    swa_cells: int = 0  # cells per stream of the sliding-window layers (0: none)


def pad(n: int, to: int = PAD) -> int:
    """``GGML_PAD(n, to)``: ``n`` rounded up to a multiple of ``to``."""
    return -(-n // to) * to


def row_bytes(cache_type: str, width: int, key: str) -> int:
    """``ggml_row_size``: one cell of ``width`` elements of a layer's K (or V)."""
    block, nbytes = CACHE_TYPES[cache_type]
    if width % block:
        raise SpecError(f"workload.{key}: {cache_type} stores blocks of {block}; a row of {width} is not whole blocks")
    return width // block * nbytes


def cell_bytes(shape: ModelShape, type_k: str, type_v: str) -> int:
    """K and V of one cell (token) in one layer."""
    width = shape.kv_heads * shape.head_dim
    return row_bytes(type_k, width, "cache_type_k") + row_bytes(type_v, width, "cache_type_v")


def bytes_per_token(shape: ModelShape, wl: Workload, compute_bytes: int) -> int:
    """KV bytes per token over all layers as the spec's runtime stores them (llama.cpp's cache types for a
    llama.cpp spec, else ``kv_cache_dtype``)."""
    if runs_llamacpp(wl) and shape.mla is None and shape.architecture is Architecture.decoder:
        type_k, type_v = wl.cache_type_k or DEFAULT_CACHE_TYPE, wl.cache_type_v or DEFAULT_CACHE_TYPE
        return cell_bytes(shape, type_k, type_v) * shape.layers
    return kvcache.shape_bytes_per_token(shape, wl.kv_cache_dtype or KvCacheDtype.auto, compute_bytes)


def resolve(shape: ModelShape, wl: Workload) -> tuple[Setup, list[str]]:
    """llama.cpp's context for the spec, and the notes on it (the defaults taken, the cache it keeps)."""
    notes: list[str] = []
    if shape.architecture is not Architecture.decoder:
        raise SpecError("workload.runtime: llama.cpp is modelled for decoder-only models")
    if shape.mla is not None:
        raise SpecError("workload.runtime: llama.cpp's latent-attention cache (DeepSeek V2/V3) is not modelled")
    if wl.runtime is None:
        notes.append("runtime not given: llama.cpp (a GGUF file type)")
    n_seq, context = wl.batch_size, wl.seq_len or 0
    n_ctx_seq = pad(pad(n_seq * context) // n_seq)
    n_ctx = n_ctx_seq * n_seq
    n_ubatch = min(wl.n_ubatch or DEFAULT_N_UBATCH, n_ctx)
    type_k, type_v = wl.cache_type_k or DEFAULT_CACHE_TYPE, wl.cache_type_v or DEFAULT_CACHE_TYPE
    flash = wl.flash_attn if wl.flash_attn is not None else True
    if wl.flash_attn is None:
        notes.append("flash_attn not given: on (llama.cpp's default --flash-attn auto turns it on for CUDA GPUs)")
    interleaved = shape.sliding_window and shape.sliding_window_pattern
    swa = pad(min(n_ctx_seq, shape.sliding_window + n_ubatch)) if interleaved else 0
    given = "" if wl.cache_type_k and wl.cache_type_v else "; cache types not given: f16, llama.cpp's default"
    streams = f"; {n_seq} sequences of {n_ctx_seq:,} cells (kv_unified off)" if n_seq > 1 else ""
    notes.append(
        f"llama.cpp: KV at {type_k}/{type_v} for {n_ctx:,} tokens{streams}, compute buffer at n_ubatch {n_ubatch}"
        f"{given}"
    )
    if swa:
        notes.append(f"llama.cpp: sliding-window layers keep {swa:,} cells per sequence (n_swa + n_ubatch)")
    elif shape.sliding_window:
        notes.append("llama.cpp: every layer caches the whole context (no interleaved sliding-window layers)")
    return Setup(n_seq, n_ctx, n_ctx_seq, n_ubatch, type_k, type_v, flash, swa), notes


def kv_bytes(shape: ModelShape, s: Setup) -> int:
    """The KV cache llama.cpp allocates: every layer's K and V for all its cells."""
    sliding = shape.sliding_layers(shape.layers) if s.swa_cells else 0
    cells = (shape.layers - sliding) * s.n_ctx + sliding * s.swa_cells * s.n_seq
    return cell_bytes(shape, s.type_k, s.type_v) * cells


def compute_buffer_bytes(shape: ModelShape, s: Setup) -> int:
    """The CUDA compute buffer of the worst-case graph (the module docstring's four stages)."""
    ub = s.n_ubatch
    hidden = shape.hidden * ub * F32
    per_stream = ub // s.n_seq or 1
    n_kv = s.n_ctx_seq if shape.sliding_layers(shape.layers) < shape.layers or not s.swa_cells else s.swa_cells
    mask = n_kv * pad(per_stream, MASK_PAD) * s.n_seq
    activations = (6 if shape.fused_qkv else 4) * hidden
    if s.flash_attn:
        attention = mask * (F32 + F16) + activations
    else:
        attention = (n_kv * per_stream * s.n_seq * shape.heads + mask) * F32 + activations
    output = shape.vocab * ub * F32 + hidden if shape.head is Head.lm else 0
    width = shape.ffn * (2 if shape.gated else 1)
    if shape.moe is not None:
        width = max(width, shape.moe.top_k * shape.moe.expert_ffn * (2 if shape.gated else 1))
    mlp = width * ub * F32 + 2 * hidden
    return max(attention, output, mlp)


def host_embedding_bytes(shape: ModelShape, q: QuantizationSpec, n_params: int) -> int:
    """The token embedding llama.cpp keeps in host memory (0 when tied: the GPU holds it as the output)."""
    opts = gguf.Overrides(
        output_type=gguf.ggml_name(q.output_tensor_type),
        embedding_type=gguf.ggml_name(q.token_embedding_type),
        imatrix=bool(q.imatrix),
    )
    types = gguf.kind_types(shape, q.method.value, n_params, opts)
    if not any(t.category == "output" for t, _, _ in types):
        return 0
    return sum(t.rows * gguf.row_bytes(ty, t.cols) * n for t, ty, n in types if t.category == "token_embd")


def phase(shape: ModelShape, wl: Workload, weights: int, n_params: int) -> tuple[dict[str, int], Setup, list[str]]:
    """The one phase of llama.cpp serving (its buffers are allocated once): the weights on the GPU, the KV
    cache and the compute buffer (the ``temporaries`` component: the graph's intermediate tensors); its
    setup and the notes on both."""
    s, notes = resolve(shape, wl)
    q = wl.quantization
    host = host_embedding_bytes(shape, q, n_params) if q is not None else 0
    if host:
        notes.append(f"llama.cpp keeps the token embedding ({host / 2**20:,.2f} MiB) in host memory, not on the GPU")
    buffers = {"kv_cache": kv_bytes(shape, s), "temporaries": compute_buffer_bytes(shape, s)}
    return {"parameters": weights - host, **buffers}, s, notes


#: llama.cpp's buffers are allocated once, at their exact sizes: no caching allocator, no reserve.
RESERVE = ReserveRule(0.0)
RESERVE_NOTE = "allocator reserve 0: llama.cpp allocates its buffers once, at their exact sizes"


def refine(stack: Stack, workload: Workload) -> Stack:
    """``stack`` with llama.cpp's allocator reserve and its own attention kernels (they never materialise
    the scores)."""
    return replace(stack, reserve=RESERVE, reserve_note=RESERVE_NOTE, fused_attention=True)


def check_keys(spec: Spec) -> None:
    """llama.cpp's keys: given only where llama.cpp runs the spec, and none of another runtime's there;
    refused with one line naming the key."""
    wl = spec.workload
    if wl.runtime is Runtime.llama_cpp and not is_gguf(wl):
        raise SpecError(
            "workload.runtime: llama.cpp runs GGUF files: give quantization a GGUF file type (q4_0 ... q8_0, "
            "q2_k ... q6_k)"
        )
    llamacpp = runs_llamacpp(wl)
    given = [key for key in LLAMACPP_KEYS if getattr(wl, key) is not None]
    if given and not llamacpp:
        raise SpecError(f"workload.{given[0]}: only valid with runtime: llama.cpp (a GGUF quantization)")
    if not llamacpp:
        return
    why = "" if wl.runtime is not None else " (a GGUF file type runs in llama.cpp unless runtime says otherwise)"
    for key in OTHER_RUNTIME_KEYS:
        if getattr(wl, key) is not None:
            raise SpecError(f"workload.{key}: not a llama.cpp setting{why}; llama.cpp takes cache_type_k, cache_type_v")
    if "vllm" in (wl.versions or {}):
        raise SpecError(f"workload.versions: names a vLLM release, but the spec runs in llama.cpp{why}")
    if wl.flash_attn is False and wl.cache_type_v not in (None, *UNQUANTIZED):
        raise SpecError(
            f"workload.cache_type_v: {wl.cache_type_v} is quantized, which llama.cpp allows only with flash "
            "attention (flash_attn: true)"
        )
