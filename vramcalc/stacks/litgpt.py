"""litgpt (``runtime: litgpt``, ``adapter.framework: litgpt``): its own model code (:func:`model_code`), what
Lightning's ``BitsandbytesPrecision`` allocates under it beyond that code, and a quantized LM head's backward
under any framework. Pure."""

from __future__ import annotations

from dataclasses import replace

from vramcalc.choices import Head, Mlp, Norm, Position, QuantMethod, Runtime
from vramcalc.core import activations as act
from vramcalc.core import allocator
from vramcalc.core.code import ModelCode
from vramcalc.core.shape import ModelShape
from vramcalc.core.workload import DTYPES
from vramcalc.errors import SpecError
from vramcalc.llm import quantization
from vramcalc.llm.generation import prompt_and_context
from vramcalc.llm.quantization import QuantLayout
from vramcalc.spec.llm import BNB_4BIT, LITGPT_GENERATE_QUANTIZATIONS, LITGPT_QUANTIZATIONS, QuantizationSpec
from vramcalc.spec.models import Spec, Workload
from vramcalc.stacks import bnb
from vramcalc.stacks import torch as torch_stack
from vramcalc.stacks.techniques import one_gpu_only
from vramcalc.units import ceil_div

Phases = dict[str, dict[str, int]]


#: litgpt's ``lm_head_chunk_size`` in its fine-tuning scripts (``model(input_ids, lm_head_chunk_size=128)``).
LITGPT_HEAD_CHUNK = 128


#: Lightning Fabric's module wrapper, which litgpt's fine-tuning scripts run the model through, casts every
#: floating output to ``torch.get_default_dtype()``, float32 (``_FabricModule.forward`` calls the precision
#: plugin's ``convert_output``: ``HalfPrecision`` and ``BitsandbytesPrecision`` of lightning 2.1,
#: ``fabric/plugins/precision/half.py`` and ``bitsandbytes.py``).
FABRIC_OUTPUT_BYTES = act.FP32


def loss_bytes(shape: ModelShape, tk: act.Tokens, dt: act.Dtypes) -> act.LossBytes:
    """litgpt's fine-tuning loss (``finetune/lora.py``; traced: benchmarks/tracer_litgpt.py ``--as-published``).
    The model returns its logits as a list of 128-token chunks at the compute dtype; Fabric casts each to
    float32 (:data:`FABRIC_OUTPUT_BYTES`), and the model's own chunks are freed once the cast list is returned
    (both lists together, 6 bytes a logit under bf16, stay below what the loss saves next, 8). Then
    ``chunked_cross_entropy`` runs ``F.cross_entropy`` per float32 chunk: every chunk's logits (the list holds
    them) and its log-softmax output (saved for backward; the last position dropped) stay until backward,
    which then takes one chunk at a time: the log-softmax's and the logits' gradients of one chunk, float32."""
    if shape.head is not Head.lm:
        return act.LossBytes(0, 0, 0)
    saved = tk.batch * (2 * tk.seq - 1) * shape.vocab * FABRIC_OUTPUT_BYTES
    chunk = tk.batch * min(LITGPT_HEAD_CHUNK, tk.seq) * shape.vocab * FABRIC_OUTPUT_BYTES
    return act.LossBytes(saved, 0, 2 * chunk)


def model_code(workload: Workload, shape: ModelShape) -> tuple[ModelShape, ModelCode, list[str]]:
    """The shape as litgpt's model code runs it (``litgpt/model.py``, ``CausalSelfAttention`` and the MLP
    classes; traced with benchmarks/tracer_litgpt.py), its code facts and a note: one fused q/k/v projection
    whose output V stays a view of, so the whole output is kept; RoPE's concatenated Q and K, saved whenever
    the model has rotary positions; an output projection that reads a copy of the attention output
    (``y.transpose(1, 2).reshape(B, T, C)`` of a head-major output); GELU as one kernel (``F.gelu(x,
    approximate=...)``), which saves only its input; an LM head of its own, never tied to the embedding
    (litgpt's checkpoint conversion copies a tied table into ``lm_head``). The transformers release does not
    apply. The note says what quantizes the LM head too (its default), Lightning's bitsandbytes plugin or
    litgpt's ``gptq.int4``. Its ``RMSNorm`` is ``torch.mean(x * x, ...)``: on a PyTorch that pins a release
    whose ``mean`` keeps its input (:func:`vramcalc.stacks.torch.mean_saves_input`, before 2.2) each norm also
    keeps the squared input, and the note says so."""
    by_adapter = workload.adapter is not None and workload.adapter.framework == "litgpt"
    why = "adapter.framework litgpt" if by_adapter else "runtime litgpt"
    q = workload.quantization
    quantized_head = ""
    if q is not None and q.lm_head:
        quantized_head = "litgpt's gptq.int4" if q.method is QuantMethod.gptq else "Lightning's bitsandbytes plugin"
    mlp = Mlp.gelu if shape.mlp is Mlp.gelu_tanh else shape.mlp
    note = (
        f"{why}: litgpt's own model code (its fused q/k/v output kept whole, RoPE's "
        "concatenated Q and K, GELU as one kernel, an LM head not tied to the embedding)"
    )
    if quantized_head:
        note += f"; {quantized_head} quantizes every linear, the LM head included"
    square_saved = shape.norm is Norm.rmsnorm and torch_stack.mean_saves_input(workload)
    if square_saved:
        note += (
            f"; torch {(workload.versions or {})['torch']}'s mean keeps its input for backward (fixed in 2.2), "
            "so each RMSNorm also keeps its squared input"
        )
    rotary = shape.position is Position.rotary
    code = ModelCode(
        rotary_cat_sdpa=rotary,
        rotary_cat_eager=rotary,
        attention_output_copied=True,
        rmsnorm_square_saved=square_saved,
    )
    litgpt = replace(shape, code=code, fused_qkv=True, mlp=mlp, tie_embeddings=False)
    return litgpt, code, [note]


#: Triton's autotuner times every configuration of a matmul shape it has not seen with
#: ``triton.testing.do_bench``, which first allocates a 256e6-byte buffer to flush the L2 cache
#: (``torch.empty(int(256e6 // 4), dtype=torch.int)``, triton 2.1 testing.py), while the layer's input and
#: output are alive.
AUTOTUNE_FLUSH_BYTES = 256_000_000
#: litgpt's ``qlinear_4bit_weight`` pads its input's rows to a multiple of this (``PAD_TO``).
GPTQ_PAD_ROWS = 256


def generate_phases(spec: Spec, shape: ModelShape, base: dict[str, int], phases: Phases) -> tuple[Phases, list[str]]:
    """litgpt's ``generate``: with its own ``gptq.int4``, :func:`gptq_phases`; through Lightning's
    ``BitsandbytesPrecision``, the prefill's 4-bit dequantization also holds the fp16 weight before
    bitsandbytes 0.50 (:func:`vramcalc.stacks.bnb.lightning_load_copy`), and a ``load`` phase: the model is built
    on the GPU, each linear quantized as it is made, and loading the checkpoint quantizes every weight again
    from its fp16 copy, the whole model allocated (``_quantize_on_load_hook``): the largest weight's fp16 copy
    and its new quantized form beside it (:func:`vramcalc.stacks.bnb.requantize_bytes`). With the notes on
    how litgpt runs them."""
    q = spec.workload.quantization
    if q is not None and q.method is QuantMethod.gptq:
        return gptq_phases(spec, shape, phases)
    if q is None or q.method not in (*BNB_4BIT, QuantMethod.int8):
        return phases, []
    largest = max(m.out * m.inp for m in quantization.quantized_matrices(shape, q))
    prefill = {**phases["prefill"]}
    if phases["prefill"]["temporaries"]:
        prefill["temporaries"] += bnb.lightning_load_copy(spec.workload, largest)
    load = dict.fromkeys(prefill, 0) | {  # before any matmul: no cuBLAS workspace, no cache yet
        "parameters": base["parameters"],
        "allocator_rounding": base.get("allocator_rounding", 0),
        "temporaries": bnb.requantize_bytes(q, largest),
    }
    return {"load": load, "prefill": prefill, "decode": phases["decode"]}, []


def gptq_phases(spec: Spec, shape: ModelShape, phases: Phases) -> tuple[Phases, list[str]]:
    """litgpt's ``gptq.int4`` (quantize/gptq.py, litgpt 2023): the checkpoint is already quantized and is
    copied into the GPU buffers as it loads (no load phase, no whole weight dequantized: the Triton kernel
    dequantizes tile by tile). Each linear call pads its rows to a multiple of 256 and returns a view of a
    padded output buffer (:func:`gptq_call_bytes`); the first call of each padded shape runs Triton's
    autotuner beside it (:data:`AUTOTUNE_FLUSH_BYTES`): in the prefill, and again in the decode steps when
    the prompt padded to more than 256 rows. Nothing calls cuBLAS, so no cuBLAS workspace is allocated: the
    linears are Triton kernels and the attention with litgpt's mask runs PyTorch's memory-efficient kernel
    (PyTorch 2.1 and later). With the note that says so (the phases hold no cuBLAS workspace, so the caller
    drops the assumption on its size)."""
    wl = spec.workload
    q = wl.quantization
    assert q is not None
    compute = DTYPES[wl.precision].compute
    prompt, _ = prompt_and_context(wl)
    prompt_rows, step_rows = wl.batch_size * prompt, wl.batch_size
    untouched = {"allocator_rounding": gptq_load_rounding(shape, q, DTYPES[wl.precision].param), "workspace": 0}
    prefill = {**phases["prefill"], "temporaries": AUTOTUNE_FLUSH_BYTES, **untouched}
    prefill["activations"] = max(prefill["activations"], gptq_call_bytes(shape, q, prompt_rows, compute))
    new_shape = _padded(prompt_rows) != _padded(step_rows)
    decode = {**phases["decode"], "temporaries": AUTOTUNE_FLUSH_BYTES if new_shape else 0, **untouched}
    decode["activations"] = max(decode["activations"], gptq_call_bytes(shape, q, step_rows, compute))
    note = (
        "litgpt's gptq.int4: no cuBLAS call (Triton linears, memory-efficient attention); each linear pads its "
        f"rows to a multiple of {GPTQ_PAD_ROWS} and keeps the padded output; Triton's autotuner allocates "
        f"{AUTOTUNE_FLUSH_BYTES // 1_000_000} MB beside the first call of each shape"
    )
    return {"prefill": prefill, "decode": decode}, [note]


def gptq_load_rounding(shape: ModelShape, q: QuantizationSpec, param_bytes: int) -> int:
    """:func:`vramcalc.core.allocator.load_rounding_bytes` of litgpt's ``gptq.int4`` model as ``GPT.__init__``
    builds it on the GPU: the LM head first, the token embedding, then each block's linears (``quant_weight``,
    ``scales``, ``zeros``); norms and biases are small-pool tensors. Each ``quant_weight`` is made through a
    transposed copy (``torch.empty(...).t().contiguous().t()``) whose first tensor is freed at once; that
    free is not replayed (on litgpt's published models it moves the result by less than 0.2 %)."""
    tensors = litgpt_gptq_tensors
    table = shape.vocab * shape.embed_width * param_bytes
    head = quantization.head_matrix(shape, q)
    first: tuple[int, ...] = tensors(head.out, head.inp, param_bytes) if head is not None else (table,)
    first += (table,)
    block: tuple[int, ...] = ()
    for _, m in quantization.block_linears(shape):
        block += tensors(m.out, m.inp, param_bytes)
    return allocator.load_rounding_bytes([(first, 1), (block, shape.layers)])


def _padded(rows: int) -> int:
    return ceil_div(max(rows, 1), GPTQ_PAD_ROWS) * GPTQ_PAD_ROWS


def gptq_call_bytes(shape: ModelShape, q: QuantizationSpec, rows: int, compute: int) -> int:
    """The largest moment of a ``ColBlockQuantizedLinear`` call over ``rows`` tokens (``qlinear_4bit_weight``):
    its input, a padded copy when ``rows`` is not a multiple of 256, and the output buffer of the padded rows
    (the view it returns keeps all of it); in a gated MLP the first projection's padded output is alive
    during the second's call."""
    padded = _padded(rows)
    copy = padded if rows % GPTQ_PAD_ROWS else 0
    gated_up = shape.ffn if shape.gated else 0
    calls = [(m.inp, m.out) for m in quantization.quantized_matrices(shape, q)]
    largest = 0
    for inp, out in calls:
        alive = padded * gated_up if out == shape.ffn and inp == shape.hidden else 0  # fc_1's output at fc_2
        largest = max(largest, (rows + copy) * inp + padded * out + alive)
    return largest * compute


def head_dequant(wl: Workload, shape: ModelShape, compute: int, litgpt: bool) -> int:
    """A bitsandbytes LM head (``quantization.lm_head``) in its backward, next to the loss gradients: the
    weight dequantized at the compute dtype (``MatMul4Bit.backward``; LLM.int8's ``CB.to(A.dtype)``) and,
    from Lightning's fp16 quantization copy before bitsandbytes 0.50, a 4-bit one at fp16 too
    (:func:`vramcalc.stacks.bnb.lightning_load_copy`)."""
    q = wl.quantization
    bnb_methods = (*BNB_4BIT, QuantMethod.int8)
    head = quantization.head_matrix(shape, q) if q is not None and q.method in bnb_methods else None
    if head is None:
        return 0
    weight = head.out * head.inp
    return weight * compute + (bnb.lightning_load_copy(wl, weight) if litgpt else 0)


def litgpt_gptq_tensors(out: int, inp: int, param_bytes: int) -> tuple[int, int, int]:
    """The tensors of one weight in litgpt's ``gptq.int4`` (``ColBlockQuantizedLinear`` with 4 bits and one
    tile per row, quantize/gptq.py of litgpt 2023), in the order it makes them: ``quant_weight`` uint8
    [out, in/2], then float ``scales`` and ``zeros`` [out, 1] at the model's dtype; no ``g_idx`` (the
    act-order permutation is undone before saving)."""
    return out * ceil_div(inp, 2), out * param_bytes, out * param_bytes


def litgpt_gptq_bytes(out: int, inp: int, param_bytes: int) -> int:
    """Bytes of one weight in litgpt's ``gptq.int4`` (:func:`litgpt_gptq_tensors`)."""
    return sum(litgpt_gptq_tensors(out, inp, param_bytes))


class GptqInt4Layout(QuantLayout):
    """litgpt's own ``gptq.int4`` (:func:`litgpt_gptq_tensors`): the scale and zero at the model's dtype."""

    def matrix_bytes(self, q: QuantizationSpec, out: int, inp: int) -> int:
        raise NotImplementedError("litgpt's gptq.int4 stores scales at the model's dtype: see stored_bytes")

    def describe(self, q: QuantizationSpec) -> str:
        return "gptq: litgpt's gptq.int4, 4-bit, a scale and a zero per output row at the model's dtype"

    def stored_bytes(self, q: QuantizationSpec, out: int, inp: int, param_bytes: int) -> int:
        return litgpt_gptq_bytes(out, inp, param_bytes)


GPTQ_INT4 = GptqInt4Layout()


def check_keys(spec: Spec) -> None:
    """litgpt's rules, refused with one line naming the key. ``runtime: litgpt`` (its ``generate/base.py``):
    one GPU, its cache at the model's dtype, no vLLM pool settings, and bitsandbytes' quantizations or
    litgpt's own ``gptq.int4`` (4-bit, one group per row, every linear) only. ``adapter.framework: litgpt``
    fine-tunes a quantized base through bitsandbytes only (its ``bnb.*`` modes)."""
    wl = spec.workload
    q = wl.quantization
    if wl.runtime is Runtime.litgpt:
        reason = one_gpu_only(wl)
        if spec.parallel is not None and reason is not None:
            raise SpecError(reason)
        for key in ("kv_block_size", "memory_utilization"):
            if getattr(wl, key) is not None:
                raise SpecError(f"workload.{key}: not a setting of litgpt's generate (runtime: litgpt)")
        if wl.kv_cache_dtype is not None and wl.kv_cache_dtype.value != "auto":
            raise SpecError("workload.kv_cache_dtype: litgpt's KV cache has the model's dtype (runtime: litgpt)")
        if q is not None:
            _generate_quantization(q)
    adapter = wl.adapter
    if adapter is None or adapter.framework != "litgpt" or q is None:
        return
    if q.method.value not in LITGPT_QUANTIZATIONS:
        raise SpecError(
            f"workload.quantization: {q.method.value} is not one of litgpt's fine-tuning quantizations "
            f"({', '.join(LITGPT_QUANTIZATIONS)}) with adapter.framework: litgpt"
        )


def _generate_quantization(q: QuantizationSpec) -> None:
    """What ``runtime: litgpt`` quantizes: bitsandbytes' modes, or its own ``gptq.int4``."""
    if q.method.value not in LITGPT_GENERATE_QUANTIZATIONS:
        raise SpecError(
            f"workload.quantization: {q.method.value} is not one of litgpt's "
            f"({', '.join(LITGPT_GENERATE_QUANTIZATIONS)}) with runtime: litgpt"
        )
    if q.method is not QuantMethod.gptq:
        return
    if q.skip_modules:
        raise SpecError("workload.quantization.skip_modules: litgpt's gptq.int4 replaces every nn.Linear")
    if q.bits not in (None, 4):
        raise SpecError(f"workload.quantization.bits: litgpt's gptq.int4 is 4-bit (got {q.bits})")
    if q.group_size not in (None, -1):
        raise SpecError(
            "workload.quantization.group_size: litgpt's gptq.int4 keeps one scale and zero per output row "
            f"(group_size -1; got {q.group_size})"
        )
