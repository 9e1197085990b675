"""bitsandbytes k-bit training as the libraries allocate it, per release (int bytes).

Read from bitsandbytes' source (bitsandbytes/autograd/_functions.py, bitsandbytes/nn/modules.py,
bitsandbytes/optim/optimizer.py) and PEFT's (peft/utils/other.py):

* **MatMul4Bit** (``Linear4bit``, nf4/fp4). ``Linear4bit.forward`` casts its input to
  ``bnb_4bit_compute_dtype`` (``x.to(self.compute_dtype)``: the same tensor when the dtypes match, a new
  16-bit copy otherwise) and casts the output back to the input's dtype. Up to 0.43.1,
  ``MatMul4Bit.forward`` kept ``ctx.tensors = (A, B)`` whenever an input needed a gradient: the 16-bit
  input of every 4-bit linear stayed alive until backward although only the weight is needed to compute
  the input's gradient. 0.43.2 ("fix QLoRA mem bug: delete useless buffered activation", #1270) keeps
  ``(None, B)``: only the packed weight. ``ctx.tensors`` is an attribute of the autograd context, not
  ``save_for_backward``: PyTorch keeps one reference per call, so linears reading the same tensor
  (q, k and v on one norm output) hold it once.
* **MatMul8bitLt** (``Linear8bitLt``, LLM.int8). ``Linear8bitLt.forward`` passes its input unchanged;
  the function keeps ``ctx.tensors = (CAt, subA, A)``: the input ``A`` in every release, and up to 0.44.x
  (``F.double_quant`` on every call) the column-wise int8 copy ``CAt`` (one byte per input element) with
  its fp32 column scales ``SCAt``. From 0.45.0 ``CAt`` is computed only when the weight needs a gradient
  (``int8_double_quant`` vs ``int8_vectorwise_quant``), never for a frozen base. ``subA``, the outlier
  columns above ``threshold`` (6.0), depends on the data and is not counted.
* **Compute dtype** (``bnb_4bit_compute_dtype``, spec ``quantization.compute_dtype``; transformers'
  ``BitsAndBytesConfig`` passes float32 when it is not set). ``Linear4bit.set_compute_type``, from 0.41.0
  to 0.46.x, replaces it by the input's dtype when that is bf16 or fp32 and keeps it for fp16 inputs;
  from 0.47.0 (``compute_type_is_set = compute_dtype is not None``) a given dtype is kept as it is. A
  compute dtype other than the input's makes a copy of the input and an output at the compute dtype, cast
  back; up to 0.49.x ``MatMul4Bit.forward`` runs ``F.dequantize_4bit(B, quant_state).to(A.dtype)``: the
  weight at its load dtype and then at the compute dtype, both alive; from 0.50.0 ``gemm_4bit``'s
  fallback dequantizes straight into the compute dtype.
* **prepare_model_for_kbit_training** (PEFT, ``peft.utils.other``): casts every fp16/bf16 parameter that
  is not 4-bit packed (``Params4bit``) or int8 to fp32 (embeddings, norms, LM head, biases) and, with its
  default ``use_gradient_checkpointing=True``, enables gradient checkpointing with ``use_reentrant=True``
  (the no-grad forward keeps nothing; the block recomputed in backward holds its saved inputs).
  With fp32 norm weights, HF's RMSNorm output (``weight * hidden.to(input_dtype)``) is fp32, so every
  4-bit linear makes its own 16-bit copy of it.
* **Paged optimizers** (``PagedAdamW8bit``, ``PagedAdamW32bit``): ``Optimizer2State.init_state`` asks
  ``get_state_buffer`` for ``state1`` and ``state2`` (bitsandbytes/optim/optimizer.py, ``get_state_buffer``:
  ``if not self.is_paged or p.numel() < 1e5: return torch.zeros_like(...)``, else ``F.get_paged``), and
  ``F.get_paged`` (bitsandbytes/functional.py) wraps ``lib.cget_managed_ptr(num_bytes)``, a
  ``cudaMallocManaged`` buffer, as a tensor. So the states of every parameter tensor of 100,000 elements or
  more are CUDA managed memory, outside PyTorch's caching allocator: ``torch.cuda.max_memory_allocated()``
  never counts them, they are resident on the GPU while there is room, and the driver evicts them to host
  memory page by page under pressure instead of failing. The 8-bit states' per-block ``absmax1``/``absmax2``
  (``torch.zeros``) and the states of smaller tensors (norm weights, biases) are ordinary device tensors.
  Read at bitsandbytes commit 95f9af3. They are shown apart from the allocated peak
  (:func:`refine`, :func:`vramcalc.core.optimizer.paged_state_bytes_for`); the fit verdict counts them only
  with ``workload.paged_states: device``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from vramcalc.choices import Architecture, Attention, Mlp, Mode, Optimizer, PagedStates, QuantMethod
from vramcalc.core import activations as act
from vramcalc.core.shape import ModelShape, moe_layers
from vramcalc.core.stack import Stack
from vramcalc.errors import SpecError
from vramcalc.llm import quantization
from vramcalc.llm.quantization import INT32, Matrix, QuantLayout
from vramcalc.spec.llm import BNB_4BIT, QuantizationSpec
from vramcalc.spec.models import Spec, Workload
from vramcalc.spec.versions import release_key
from vramcalc.units import FP32, ceil_div

#: The bitsandbytes release assumed when ``versions: {bitsandbytes: ...}`` is not given.
DEFAULT_VERSION = "0.50.1"
#: First release whose MatMul4Bit keeps only the packed weight (#1270).
FOUR_BIT_DROPS_INPUT = (0, 43, 2)
#: First release whose MatMul8bitLt skips the column-wise int8 copy of the input for a frozen weight.
INT8_DROPS_CAT = (0, 45, 0)
#: ``Linear4bit.set_compute_type`` follows a bf16/fp32 input (commit 412fd0e, "better default compute_dtype").
SETS_COMPUTE_FROM_INPUT = (0, 41, 0)
#: A compute dtype given to ``Linear4bit`` is kept (``compute_type_is_set = compute_dtype is not None``).
KEEPS_GIVEN_COMPUTE = (0, 47, 0)
#: ``MatMul4Bit`` runs ``torch.ops.bitsandbytes.gemm_4bit``, whose fallback dequantizes into the compute dtype.
DEQUANTS_TO_COMPUTE = (0, 50, 0)
#: The 8-bit optimizers' absmax blocks: 2,048 elements up to 0.43.x, 256 from 0.44.0 (``init_state``:
#: ``blocks = n // 2048`` at tag 0.43.3, ``n // 256`` at 0.44.0; "Change 8bit optimizer blocksize
#: 2048->256", github.com/bitsandbytes-foundation/bitsandbytes/pull/1365).
SMALL_STATE_BLOCKS = (0, 44, 0)
OLD_STATE_BLOCK, STATE_BLOCK = 2048, 256
#: The optimizers whose states are 8-bit blocks.
EIGHT_BIT_OPTIMIZERS = (Optimizer.adamw_8bit, Optimizer.paged_adamw_8bit)
DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}
#: ``get_state_buffer``: smaller tensors get ordinary (non-paged) state buffers (``p.numel() < 1e5``).
PAGED_MIN_ELEMENTS = 100_000
#: The optimizers whose states ``get_state_buffer`` pages (``is_paged=True``).
PAGED_OPTIMIZERS = (Optimizer.paged_adamw_8bit, Optimizer.paged_adamw_32bit)
BNB_METHODS = (*BNB_4BIT, QuantMethod.int8)


def parse_version(text: str) -> tuple[int, int, int]:
    """``"0.41.1"`` -> (0, 41, 1); raises SpecError naming ``workload.versions.bitsandbytes``."""
    return release_key(text, "bitsandbytes", "0.41.1")


@dataclass(frozen=True)
class Release:
    """What a bitsandbytes release keeps for backward."""

    version: str
    four_bit_keeps_input: bool
    int8_keeps_int8_copy: bool

    @property
    def key(self) -> tuple[int, int, int]:
        return parse_version(self.version)


def four_bit_compute(given: str, release: Release, input_dtype: str) -> str:
    """The dtype ``Linear4bit`` computes in for a given ``bnb_4bit_compute_dtype`` and input dtype."""
    if SETS_COMPUTE_FROM_INPUT <= release.key < KEEPS_GIVEN_COMPUTE and input_dtype in ("bf16", "fp32"):
        return input_dtype
    return given


def four_bit_matmul_bytes(
    out: int, inp: int, n_tokens: int, weight_dtype: str, input_dtype: str, compute: str, release: Release
) -> int:
    """Transient bytes of one 4-bit linear over ``n_tokens`` tokens on the dequantizing path: the weight at
    the compute dtype (and, before 0.50.0, first at its load dtype when that differs), and when the compute
    dtype is not the input's, the input's copy and the output at the compute dtype, less one tensor of the
    wider side at the input's dtype: the output exists at the compute dtype before its cast back, so the
    block holds one MLP-wide 16-bit tensor fewer than at its activation peak (traced with
    benchmarks/tracer_bnb.py: an fp16 model with fp32 compute, up and down projections alike)."""
    weight = out * inp * DTYPE_BYTES[compute]
    if compute != weight_dtype and release.key < DEQUANTS_TO_COMPUTE:
        weight += out * inp * DTYPE_BYTES[weight_dtype]
    if compute == input_dtype:
        return weight
    return weight + n_tokens * ((inp + out) * DTYPE_BYTES[compute] - max(inp, out) * DTYPE_BYTES[input_dtype])


def compute_note(given: str, release: Release, input_dtype: str, pinned: bool) -> str:
    used = four_bit_compute(given, release, input_dtype)
    how = "keeps it" if used == given else f"replaces it by the {input_dtype} input's dtype"
    version = release.version + ("" if pinned else " (assumed; set versions.bitsandbytes)")
    return f"quantization.compute_dtype {given}: bitsandbytes {version} {how}; 4-bit linears compute in {used}"


def forward_buffer(
    wl: Workload, shape: ModelShape, n_tokens: int, dt: act.Dtypes, input_bytes: int, layout: QuantLayout
) -> int:
    """The forward's transient quantization buffer of the largest linear: with a 4-bit compute dtype
    given, :func:`four_bit_matmul_bytes` for inputs of ``input_bytes``; else what the quantization's
    ``layout`` holds in a matmul (:func:`vramcalc.llm.quantization.dequant_buffer_bytes`)."""
    q = wl.quantization
    assert q is not None
    if q.compute_dtype is None or n_tokens <= 1:
        return quantization.dequant_buffer_bytes(shape, q, n_tokens, dt.compute, layout)
    release = release_of(wl.versions)
    inp = dtype_name(wl.precision.value, input_bytes)
    largest = max(quantization.quantized_matrices(shape, q), key=lambda m: m.out * m.inp)
    weight = dtype_name(wl.precision.value, dt.param)
    compute = four_bit_compute(q.compute_dtype, release, inp)
    return four_bit_matmul_bytes(largest.out, largest.inp, n_tokens, weight, inp, compute, release)


def compute_bytes(wl: Workload, release: Release | None, input_bytes: int, default: int | None = None) -> int:
    """Bytes of the dtype 4-bit linears compute in for inputs of ``input_bytes``: ``quantization.compute_dtype``
    as the release applies it, else ``default`` (the model's compute dtype)."""
    q = wl.quantization
    if q is None or q.compute_dtype is None or release is None:
        return input_bytes if default is None else default
    return DTYPE_BYTES[four_bit_compute(q.compute_dtype, release, dtype_name(wl.precision.value, input_bytes))]


def dtype_name(precision: str, n_bytes: int) -> str:
    """``fp32`` for 4-byte tensors, else the 16-bit dtype of a precision (``bf16``, ``amp-bf16`` -> bf16)."""
    if n_bytes == FP32:
        return "fp32"
    return "bf16" if "bf16" in precision else "fp16"


def release_of(versions: dict[str, str] | None) -> Release:
    """The release a spec pins, else the default."""
    version = (versions or {}).get("bitsandbytes") or DEFAULT_VERSION
    key = parse_version(version)
    return Release(version, key < FOUR_BIT_DROPS_INPUT, key < INT8_DROPS_CAT)


def resolve(versions: dict[str, str] | None) -> tuple[Release, list[str]]:
    """The release a spec pins, else the default with the note that says so."""
    release = release_of(versions)
    if (versions or {}).get("bitsandbytes") is None:
        return release, [f"bitsandbytes version not given (versions: {{bitsandbytes: ...}}): {release.version} assumed"]
    return release, []


def uses_bnb(method: QuantMethod | None) -> bool:
    return method in BNB_METHODS


@dataclass(frozen=True)
class LinearInputs:
    """How the quantized linears of one block read their inputs: ``width`` features, ``calls`` linears
    reading it, ``dtype`` bytes of the tensor as it arrives, ``kept``: whether the frozen base saves that
    tensor anyway (then a reference to it costs nothing)."""

    width: int
    calls: int
    dtype: int
    kept: bool


def block_inputs(shape: ModelShape, dt: act.Dtypes, norm_out: int, attention: Attention) -> list[LinearInputs]:
    """The inputs of one decoder block's linears: the attention norm output (q, k, v or a fused qkv), the
    attention context (o), the MLP norm output (gate and up, or fc1) and the MLP product (down).

    ``norm_out``: bytes of a norm output (fp32 when the norm weight is fp32, as after
    prepare_model_for_kbit_training). The context reaches o at the compute dtype under autocast (and
    is the output the fused SDPA kernel saves), else at the norm output's dtype (the 4-bit linears cast
    their outputs back to their input's dtype). The MLP product follows the up projection's output."""
    kernel = act.attention_kernel(shape, dt, attention)
    ctx_dtype = dt.compute if dt.amp else norm_out
    if attention is Attention.flash:  # the output of a kernel that runs in 16 bits, whatever its inputs were
        ctx_dtype = act.kernel_bytes(shape, dt, attention)
    # litgpt's output projection reads a copy (``y.transpose(1, 2).reshape(B, T, C)`` of a head-major
    # output; traced: benchmarks/tracer_litgpt.py), not the tensor the kernel saved
    copied = shape.code.attention_output_copied or (shape.code.flash is not None and shape.code.flash.output_copied)
    ctx_kept = kernel in ("flash", "efficient") and ctx_dtype == dt.compute and not copied
    qkv_calls = 1 if shape.fused_qkv else 3
    up_calls = 2 if shape.gated else 1
    relu_kept = shape.mlp is Mlp.relu  # relu saves its output, which is fc2's input
    # a parallel block with one norm (phi, GPT-J): attention and MLP read the same norm output
    shared_norm = shape.parallel_block and shape.norms_per_layer == 1
    return [
        LinearInputs(shape.hidden, qkv_calls, norm_out, False),
        LinearInputs(shape.q_width, 1, ctx_dtype, ctx_kept),
        LinearInputs(shape.hidden, up_calls, norm_out, shared_norm),
        LinearInputs(shape.ffn, 1, norm_out, relu_kept),
    ]


#: The projections reading each of :func:`block_inputs`' tensors, in its order.
INPUT_READERS = (("q", "k", "v", "qkv"), ("o",), ("gate", "up", "gate_up"), ("down",))


def lora_reads(targets: set[str], shares: bool) -> tuple[bool, ...]:
    """For each of :func:`block_inputs`' tensors, whether a LoRA ``lora_A`` saves it as it is (``shares``:
    no cast, no dropout) because one of ``targets`` reads it (traced: an untargeted linear's input is not
    saved by any adapter)."""
    return tuple(shares and any(name in targets for name in readers) for readers in INPUT_READERS)


def kept_bytes_per_token(
    method: QuantMethod, release: Release, inputs: list[LinearInputs], compute: int, lora_shares: tuple[bool, ...]
) -> int:
    """Bytes per token per block that quantized linears keep for backward beyond the frozen base.

    4-bit (releases up to 0.43.1): the input cast to the compute dtype, once per tensor when no cast is
    needed (linears on one tensor share it), once per linear when each casts its own copy. int8: the
    input as it arrives (shared by the linears reading it), plus before 0.45 one int8 copy per linear
    and its fp32 column scales (negligible per token, not counted). ``lora_shares``: per input, whether
    LoRA's ``lora_A`` already saves it raw (:func:`lora_reads`), so a shared reference adds nothing."""
    total = 0
    for inp, shared in zip(inputs, lora_shares, strict=False):
        shared_free = inp.kept or shared
        if method in BNB_4BIT:
            if not release.four_bit_keeps_input:
                continue
            if inp.dtype == compute:
                total += 0 if shared_free else inp.width * compute
            else:
                total += inp.calls * inp.width * compute
            continue
        total += 0 if shared_free else inp.width * inp.dtype
        if release.int8_keeps_int8_copy:
            total += inp.calls * inp.width
    return total


def holds_own_input(method: QuantMethod, release: Release, input_bytes: int, compute: int) -> bool:
    """Whether a bitsandbytes linear's autograd context keeps the very tensor it was given (not a cast copy)
    at least until its own backward has run (``ctx.tensors``, :func:`kept_bytes_per_token`): ``MatMul8bitLt``
    its input ``A`` in every release; ``MatMul4Bit`` up to 0.43.1 when the input needs no cast to the compute
    dtype."""
    if method is QuantMethod.int8:
        return True
    return method in BNB_4BIT and release.four_bit_keeps_input and input_bytes == compute


def kept_layer_bytes(
    shape: ModelShape,
    method: QuantMethod,
    release: Release,
    n_tokens: int,
    dt: act.Dtypes,
    norm_out: int,
    attention: Attention,
    lora_shares: tuple[bool, ...],
) -> int:
    """:func:`kept_bytes_per_token` of one block for ``n_tokens`` tokens (decoder blocks; a MoE layer's
    experts are not counted)."""
    if shape.architecture is not Architecture.decoder:
        return 0
    inputs = block_inputs(shape, dt, norm_out, attention)
    if shape.moe is not None and moe_layers(shape) == shape.layers:
        inputs = inputs[:2]
    return n_tokens * kept_bytes_per_token(method, release, inputs, dt.compute, lora_shares)


def beyond_ffn(weight: int, shape: ModelShape, n_tokens: int, act_bytes: int) -> int:
    """What a weight dequantized inside one linear call adds to the block's activation peak.

    Inside a linear one ffn-wide tensor fewer is alive than at the MLP's own peak (measured with
    benchmarks/tracer_bnb.py): in a SwiGLU forward, silu and up outputs plus the weight in ``up_proj``
    against silu, up and their product at the product; in a frozen backward, the activation's and up's
    gradients plus the weight in ``up_proj``'s backward against the product's, the activation's and up's
    gradients at the product's backward. So the weight counts only beyond one ``n_tokens x ffn`` activation
    (``act_bytes`` each). MoE layers (narrower expert MLPs) keep the whole weight."""
    if shape.moe is not None:
        return weight
    return max(0, weight - n_tokens * shape.ffn * act_bytes)


def forward_dequant(method: QuantMethod | None, dequant: int, shape: ModelShape, n_tokens: int, act_bytes: int) -> int:
    """The forward's quantization buffer beyond the activation peak. 4-bit: bitsandbytes 0.50's
    ``gemm_4bit`` above the custom kernel's token range runs ``_dequant_linear_fallback``
    (``dequantize_4bit`` then ``F.linear``): the weight at the compute dtype inside the linear
    (:func:`beyond_ffn`). LLM.int8 (int8 input, int32 product, fp16 result) and other methods: ``dequant``."""
    if method in BNB_4BIT:
        return beyond_ffn(dequant, shape, n_tokens, act_bytes)
    return dequant


def backward_dequant(
    method: QuantMethod | None, dequant: int, weight_elements: int, shape: ModelShape, n_tokens: int, act_bytes: int
) -> int:
    """The weight a quantized linear's backward dequantizes, beyond the activation peak
    (:func:`beyond_ffn`): 4-bit ``MatMul4Bit.backward`` (``dequantize_4bit(B, state)``, the forward's
    buffer); LLM.int8 ``MatMul8bitLt.backward`` (``state.CB.to(A.dtype, copy=True).mul_(SCB / 127)``: the
    largest weight at its input's dtype, ``act_bytes``), not the forward's int8 input and int32 product.
    Other methods: ``dequant``."""
    if method in BNB_4BIT:
        return beyond_ffn(dequant, shape, n_tokens, act_bytes)
    if method is QuantMethod.int8:
        return beyond_ffn(weight_elements * act_bytes, shape, n_tokens, act_bytes)
    return dequant


def lightning_load_copy(wl: Workload, largest: int) -> int:
    """Lightning's ``BitsandbytesPrecision`` (litgpt's QLoRA) quantizes an fp16 copy of each weight
    (``_quantize_weight``), so the quantization state's dtype is fp16: before 0.50.0, ``MatMul4Bit``'s
    ``dequantize_4bit(B, state).to(A.dtype)`` holds the ``largest`` weight at fp16 beside its copy at a
    bf16 or fp32 compute dtype (traced: benchmarks/tracer_litgpt.py). Bytes of that fp16 weight, or 0."""
    q = wl.quantization
    if q is None or q.method not in BNB_4BIT or wl.precision.value in ("fp16", "amp-fp16", "mixed-fp16"):
        return 0
    return 2 * largest if release_of(wl.versions).key < DEQUANTS_TO_COMPUTE else 0


def refine(stack: Stack, workload: Workload) -> Stack:
    """A paged optimizer's states in managed memory (:data:`PAGED_MIN_ELEMENTS` and up); an 8-bit optimizer's
    absmax blocks of the release (:func:`state_block`); else ``stack``."""
    if workload.optimizer in EIGHT_BIT_OPTIMIZERS:
        stack = replace(stack, optimizer_state_block=state_block(release_of(workload.versions)))
    if workload.optimizer not in PAGED_OPTIMIZERS:
        return stack
    return replace(stack, paged_state_min_elements=PAGED_MIN_ELEMENTS)


def state_block(release: Release) -> int:
    """Elements per fp32 absmax block of the release's 8-bit optimizer states."""
    return OLD_STATE_BLOCK if release.key < SMALL_STATE_BLOCKS else STATE_BLOCK


def paged_state_note(optimizer_value: str, managed_bytes: int | None, paged_states: PagedStates | None) -> str:
    """The assumption line of a paged optimizer: where its states live and whether the verdict counts them
    (``managed_bytes`` None: a step whose states are counted on the GPU at full size)."""
    if managed_bytes is None:
        return (
            f"{optimizer_value}: bitsandbytes paged states (CUDA managed memory, for tensors of "
            f"{PAGED_MIN_ELEMENTS:,} elements or more) are counted on the GPU at full size for this adapter type"
        )
    if managed_bytes == 0:
        return (
            f"{optimizer_value}: no parameter tensor has {PAGED_MIN_ELEMENTS:,} elements or more, so bitsandbytes "
            "pages none of its states; all are ordinary GPU tensors"
        )
    where = (
        "counted in the fit verdict (paged_states: device)"
        if paged_states is PagedStates.device
        else "not counted in the fit verdict (paged_states not given: host-ok; device counts them)"
    )
    return (
        f"{optimizer_value}: bitsandbytes keeps the states of tensors of {PAGED_MIN_ELEMENTS:,} elements or more in "
        "CUDA managed memory (resident on the GPU while there is room, evicted to the host under pressure), "
        f"outside the allocated peak; {where}"
    )


#: bitsandbytes 4-bit blocks: one absmax per 64 weights; with double quantization one fp32 absmax per 256 absmax.
BNB_BLOCK = 64
BNB_NESTED_BLOCK = 256


class Int8Layout(QuantLayout):
    """LLM.int8 (``Int8Params``): int8 ``CB`` + fp32 ``SCB`` per output row, N + 4 out bytes for N = out x in
    weights. A matmul quantizes its input to int8 and accumulates in int32 (``n_tokens x (in + 4 out)``)."""

    def matrix_bytes(self, q: QuantizationSpec, out: int, inp: int) -> int:
        return out * inp + out * FP32

    def describe(self, q: QuantizationSpec) -> str:
        return "int8: bitsandbytes LLM.int8, an fp32 scale per output row"

    def largest_dequant_bytes(self, largest: Matrix, n_tokens: int, compute_bytes: int) -> int:
        return n_tokens * (largest.inp + INT32 * largest.out)


class FourBitLayout(QuantLayout):
    """nf4 / fp4 (``Params4bit``): 4-bit pairs packed in uint8 + one fp32 absmax per block of 64; with double
    quantization (QLoRA, Dettmers et al. 2023, section 3) the absmax values are 8-bit with one fp32 absmax per
    256 of them plus an fp32 offset per tensor: 4 + 32/64 = 4.5 bits per weight without, 4 + 8/64 + 32/(64 x
    256) = 4.127 with. A matmul over many tokens dequantizes the whole weight (``MatMul4Bit``:
    ``dequantize_4bit(...).t()``)."""

    def matrix_bytes(self, q: QuantizationSpec, out: int, inp: int) -> int:
        n = out * inp
        blocks = math.ceil(n / (q.block_size or BNB_BLOCK))
        if q.double_quant:
            stats = blocks + math.ceil(blocks / BNB_NESTED_BLOCK) * FP32 + FP32
        else:
            stats = blocks * FP32
        return math.ceil(n / 2) + stats

    def describe(self, q: QuantizationSpec) -> str:
        dq = "with" if q.double_quant else "without"
        return f"{q.method.value}: bitsandbytes 4-bit, blocks of {q.block_size or BNB_BLOCK}, {dq} double quantization"


INT8 = Int8Layout()
FOUR_BIT = FourBitLayout()


def requantize_bytes(q: QuantizationSpec, elements: int) -> int:
    """Transient bytes of quantizing one weight of ``elements`` from its fp16 copy on the GPU (Lightning's
    ``_quantize_weight``): LLM.int8's ``double_quant`` makes the row-major and the transposed int8 copies
    (``CB``, ``CBt``) beside the fp16 weight, 4 B per element; 4-bit's ``quantize_4bit`` the packed weight
    and one fp32 absmax per block beside it."""
    fp16 = 2 * elements
    if q.method is QuantMethod.int8:
        return fp16 + 2 * elements
    return fp16 + ceil_div(elements, 2) + FP32 * ceil_div(elements, q.block_size or BNB_BLOCK)


def check_keys(spec: Spec) -> None:
    """``paged_states`` says where a paged optimizer's states must be: a training step on one GPU with one
    of bitsandbytes' paged optimizers. Refused with one line naming the key."""
    wl = spec.workload
    if wl.paged_states is None:
        return
    if wl.mode is not Mode.train:
        raise SpecError("workload.paged_states: only valid with mode: train (where a paged optimizer keeps its states)")
    if wl.optimizer not in (Optimizer.paged_adamw_8bit, Optimizer.paged_adamw_32bit):
        got = wl.optimizer.value if wl.optimizer is not None else "not given, adamw"
        raise SpecError(
            f"workload.paged_states: only valid with optimizer paged-adamw-8bit or paged-adamw-32bit (optimizer {got})"
        )
    if spec.parallel is not None:
        raise SpecError("workload.paged_states: one GPU only (not modelled with parallel:)")
