"""LoRA / QLoRA: trainable parameters, optimizer state of the adapters, and a frozen base's activations.

Trainable parameters, as ``peft``'s ``print_trainable_parameters`` counts them (Hu et al. 2021, "LoRA"):
every targeted ``in -> out`` linear of every layer gets ``lora_A`` (rank x in) and ``lora_B`` (out x rank),
``rank x (in + out)`` parameters. Llama-3.2-3B, rank 32 on q_proj and v_proj: 28 x 32 x ((3072 + 3072)
+ (3072 + 1024)) = 9,175,040 (PEFT method_comparison, case peft-mc-lora--llama-3.2-3B-rank32).

Memory (PEFT 0.1x ``LoraLayer``):

* adapter weights are fp32 when the base is 16-bit (``autocast_adapter_dtype=True``, PEFT's default),
  so are their gradients and optimizer states; the frozen base has neither;
* ``lora_A`` saves its input cast to the adapter dtype (``_cast_input_dtype``), one copy per targeted
  module, plus the dropout mask (1 B/element) when ``dropout > 0``; ``lora_B`` saves ``lora_A``'s output;
* a frozen linear saves nothing of its input (autograd keeps an input only to compute a weight
  gradient), so the norm outputs, the MLP product before ``down_proj`` and the autocast input copies
  that full fine-tuning saves are not kept; the layer-0 input norm, whose input (the frozen embedding)
  needs no gradient, saves nothing;
* QLoRA (``quantization: nf4``): bitsandbytes' ``MatMul4Bit`` saves the packed weight, not a dequantized
  copy, and dequantizes one layer at a time (a transient of the largest layer, forward and backward).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from vramcalc.choices import AdapterType, Architecture, Attention, Mlp, Optimizer, QkNorm
from vramcalc.core import activations as act
from vramcalc.core.shape import ModelShape, moe_layers, routed_rows
from vramcalc.errors import SpecError
from vramcalc.llm import lora_targets
from vramcalc.spec.llm import AdapterSpec
from vramcalc.units import FP32

if TYPE_CHECKING:
    from vramcalc.core.optimizer import PagedStates

#: Projection keys of the MLP half of a block.
MLP_TARGETS = ("gate", "up", "down", "gate_up")
#: LoRA-FA's step projects lora_B's gradient under ``autocast(bfloat16)`` (on a GPU with bf16 support).
BF16 = 2


@dataclass(frozen=True)
class LoraMatrix:
    """``count`` adapted linears of one kind (name), ``inp`` -> ``out`` features; ``passes``: how many of
    them each token goes through (``count`` for attention and dense MLPs; top-k + shared per MoE layer);
    ``blocks``: rank-``r`` blocks of ``lora_A`` (1, or litgpt's fused q/k/v: one per enabled part);
    ``stack``: "" in a decoder-only model, else "encoder", "decoder" or "cross" (the decoder's
    cross-attention), which sets the tokens it reads (:mod:`vramcalc.llm.lora_encdec`)."""

    name: str
    count: int
    inp: int
    out: int
    passes: int
    blocks: int = 1
    stack: str = ""


def is_litgpt(adapter: AdapterSpec) -> bool:
    return adapter.framework == "litgpt"


def resolve_targets(shape: ModelShape, adapter: AdapterSpec) -> tuple[tuple[str, ...], list[str]]:
    """Projection keys (q, k, v, o, qkv, gate, up, down, gate_up, q_a, q_b, kv_a, kv_b) the adapter targets
    (vramcalc/llm/lora_targets.py: the family names, the short forms, PEFT's and litgpt's semantics), and
    the notes on the defaults taken and what the targets adapt."""
    notes = [] if "framework" in adapter.model_fields_set else ["adapter.framework not given: peft"]
    targets, said = lora_targets.resolve_targets(shape, adapter.targets, is_litgpt(adapter))
    return targets, notes + said


def _dims(shape: ModelShape, name: str, ffn: int) -> tuple[int, int]:
    h, q, kv = shape.hidden, shape.q_width, shape.kv_width
    mla = lora_targets.mla_of(shape)
    if mla is not None:
        q_out = shape.heads * (mla.nope + mla.rope)
        return {
            "q": (h, q_out), "q_a": (h, mla.q_rank), "q_b": (mla.q_rank, q_out),
            "kv_a": (h, mla.kv_rank + mla.rope), "kv_b": (mla.kv_rank, shape.heads * (mla.nope + mla.v_dim)),
            "o": (shape.heads * mla.v_dim, h), "gate": (h, ffn), "up": (h, ffn), "down": (ffn, h),
            "gate_up": (h, 2 * ffn),
        }[name]  # fmt: skip
    return {
        "q": (h, q), "k": (h, kv), "v": (h, kv), "o": (q, h), "qkv": (h, q + 2 * kv),
        "gate": (h, ffn), "up": (h, ffn), "down": (ffn, h), "gate_up": (h, 2 * ffn),
    }[name]  # fmt: skip


def _litgpt_qkv(shape: ModelShape, targets: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[int, int, int] | None]:
    """litgpt's one LoRAQKVLinear for the enabled q/k/v parts: (other targets, (in, out, blocks) or None)."""
    parts = [t for t in ("q", "k", "v") if t in targets]
    if not parts:
        return targets, None
    widths = {"q": shape.q_width, "k": shape.kv_width, "v": shape.kv_width}
    rest = tuple(t for t in targets if t not in parts)
    return rest, (shape.hidden, sum(widths[p] for p in parts), len(parts))


def lora_matrices(shape: ModelShape, targets: tuple[str, ...], litgpt: bool = False) -> list[LoraMatrix]:
    """Every adapted linear: attention targets in each block (decoder self- and cross-attention of an
    encoder-decoder, each stack apart), MLP targets in each dense layer and in every expert (and shared
    expert) of MoE layers. With ``litgpt`` the q/k/v targets are the parts of one fused LoRAQKVLinear per
    block."""
    if shape.architecture is Architecture.encoder_decoder and not litgpt:
        return encdec_matrices(shape, targets)
    n_moe = moe_layers(shape)
    attn_blocks = shape.layers
    mlp_blocks = shape.layers - n_moe
    if shape.architecture is Architecture.encoder_decoder:
        attn_blocks += 2 * shape.decoder_layers
        mlp_blocks += shape.decoder_layers
    out = []
    if litgpt:
        targets, fused = _litgpt_qkv(shape, targets)
        if fused is not None:
            out.append(LoraMatrix("qkv", attn_blocks, fused[0], fused[1], attn_blocks, fused[2]))
    for name in targets:
        if name not in ("gate", "up", "down", "gate_up"):
            out.append(LoraMatrix(name, attn_blocks, *_dims(shape, name, shape.ffn), attn_blocks))
            continue
        out.append(LoraMatrix(name, mlp_blocks, *_dims(shape, name, shape.ffn), mlp_blocks))
        if shape.moe is not None and n_moe:
            m = shape.moe
            dims = _dims(shape, name, m.expert_ffn)
            out.append(LoraMatrix(name, (m.experts + m.shared) * n_moe, *dims, (m.top_k + m.shared) * n_moe))
    return [m for m in out if m.count]


def encdec_matrices(shape: ModelShape, targets: tuple[str, ...]) -> list[LoraMatrix]:
    """An encoder-decoder's adapted linears, each stack (and the cross-attention) apart, so that each reads
    its own number of tokens (``LoraMatrix.stack``)."""
    out = []
    for name in targets:
        dims = _dims(shape, name, shape.ffn)
        stacks = [("encoder", shape.layers), ("decoder", shape.decoder_layers)]
        if name not in MLP_TARGETS:
            stacks.append(("cross", shape.decoder_layers))
        out += [LoraMatrix(name, n, *dims, n, stack=stack) for stack, n in stacks]
    return [m for m in out if m.count]


def trainable_params(matrices: list[LoraMatrix], rank: int, frozen_a: bool = False) -> int:
    """rank x (in + out) per adapted linear (lora_A: rank x in, lora_B: out x rank); litgpt's fused q/k/v:
    lora_A of (rank x blocks) x in. ``frozen_a`` (LoRA-FA): lora_B only."""
    return sum(m.count * rank * m.out for m in matrices) + (0 if frozen_a else lora_a_params(matrices, rank))


def lora_a_params(matrices: list[LoraMatrix], rank: int) -> int:
    """The lora_A matrices' parameters ((rank x blocks) x in per adapted linear)."""
    return sum(m.count * rank * m.blocks * m.inp for m in matrices)


def adapter_tensors(matrices: list[LoraMatrix], rank: int, frozen_a: bool = False) -> list[tuple[int, int, int]]:
    """The adapter's trained parameter tensors as (how many, rows, columns), as optimizer states are
    allocated (``frozen_a``: lora_B only)."""
    tensors = []
    for m in matrices:
        tensors += ([] if frozen_a else [(m.count, rank * m.blocks, m.inp)]) + [(m.count, m.out, rank)]
    return tensors


def freezes_a(adapter: AdapterSpec) -> bool:
    """LoRA-FA: lora_A stays frozen at its initialisation (PEFT ``create_lorafa_optimizer``)."""
    return adapter.type is AdapterType.lora_fa


def lora_fa_step_bytes(matrices: list[LoraMatrix], rank: int, a: int) -> int:
    """Temporaries of PEFT's ``LoraFAOptimizer.step``, one adapter pair at a time: the previous pair's
    projected gradient and Adam denominator (lora_B-sized, at the adapter dtype) are still referenced while
    the next pair's ``A A^T``, its pseudo-inverse and the bf16 product ``grad_B @ (A A^T)^+`` (autocast) are
    built; bounded here with the largest lora_B for both pairs (traced: benchmarks/data/tracer_llm.json)."""
    largest = max((m.out * rank for m in matrices), default=0)
    return largest * (2 * a + 2 * BF16) + rank * rank * (2 * FP32 + BF16)


def adapter_bytes_per_param(adapter: AdapterSpec, dt: act.Dtypes) -> int:
    """fp32 when PEFT autocasts the adapter of a 16-bit base (its default), else the parameter dtype
    (litgpt's and torchtune's adapters are created with the model, in its dtype)."""
    if adapter.type is AdapterType.ln_tuning:
        return dt.param  # PEFT trains copies of the norms at the model's dtype (vramcalc/stacks/peft_methods.py)
    autocast = adapter.autocast_adapter_dtype
    if autocast is None:
        autocast = adapter.framework == "peft"
    return FP32 if autocast else dt.param


def state_bytes(
    optimizer: Optimizer, tensors: list[tuple[int, int, int]], state_bytes: int, block: int | None = None
) -> int:
    """Optimizer state of the adapter tensors: the estimator's rules for any tensor list (``block``: the
    stack's absmax block of quantized states)."""
    from vramcalc.core.optimizer import optimizer_state_bytes_for

    return optimizer_state_bytes_for(optimizer, tensors, state_bytes, block)


def adapter_states(
    optimizer: Optimizer,
    tensors: list[tuple[int, int, int]],
    width: int,
    paged_min_elements: int | None,
    block: int | None = None,
) -> PagedStates:
    """:func:`state_bytes` split by where they live: with ``paged_min_elements`` (a paged optimizer) the states
    of the tensors that large are managed memory (:func:`vramcalc.core.optimizer.paged_state_bytes_for`)."""
    from vramcalc.core.optimizer import PagedStates, paged_state_bytes_for

    if paged_min_elements is None:
        return PagedStates(state_bytes(optimizer, tensors, width, block), 0)
    return paged_state_bytes_for(optimizer, tensors, width, paged_min_elements, block)


def lora_saved_per_token(
    matrices: list[LoraMatrix], rank: int, a: int, dt: act.Dtypes, dropout: float, frozen_a: bool = False
) -> int:
    """Bytes per token all adapters save: lora_A's input (a cast copy per module, or the activation the
    modules of one input share when no cast is needed), the dropout mask, and lora_A's output. A frozen
    lora_A (LoRA-FA) saves no input: its backward needs only its weight."""
    total = 0
    shared_inputs: dict[object, int] = {}
    for m in matrices:
        total += m.passes * rank * m.blocks * a
        if frozen_a:
            total += m.passes * m.inp * act.MASK if dropout > 0 else 0
        elif dropout > 0:
            total += m.passes * m.inp * (a + act.MASK)
        elif a != dt.compute or dt.amp:
            total += m.passes * m.inp * (dt.compute if dt.amp else a)
        else:
            key = (lora_targets.INPUT_SOURCE[m.name], m.inp)
            shared_inputs[key] = max(shared_inputs.get(key, 0), m.passes * m.inp * a)
    return total + sum(shared_inputs.values())


def lora_a_output_per_token(matrices: list[LoraMatrix], rank: int, width: int) -> int:
    """Bytes per token of every lora_A's output (``rank x blocks`` wide at ``width`` bytes), which lora_B's weight
    gradient reads: saved by an eager step and by a compiled block's partitioner alike."""
    return sum(m.passes * rank * m.blocks for m in matrices) * width


def compiled_lora_saved_per_token(matrices: list[LoraMatrix], rank: int, width: int, dropout: float) -> int:
    """Bytes per token the adapters of a compiled block save, every lora_A's matmul at ``width`` bytes: its output
    (:func:`lora_a_output_per_token`) and its input. Without dropout the graph reads one copy of each input source
    (the casts of one tensor are one node after common-subexpression elimination: one copy for q, k and v); with
    dropout each module's dropped input and its mask (1 B/element)."""
    total = lora_a_output_per_token(matrices, rank, width)
    if dropout > 0:
        return total + sum(m.passes * m.inp * (width + act.MASK) for m in matrices)
    sources: dict[object, int] = {}
    for m in matrices:
        key = (lora_targets.INPUT_SOURCE[m.name], m.inp)
        sources[key] = max(sources.get(key, 0), m.passes * m.inp * width)
    return total + sum(sources.values())


def frozen_norm_bytes(shape: ModelShape, n_tokens: int, dt: act.Dtypes) -> int:
    """A norm with a frozen weight saves its input and statistics only (LayerNorm: mean and rstd;
    HF RMSNorm: its fp32 input copy and rstd; and the squared input its ``mean`` keeps where the model's code
    says so, ``ModelCode.rmsnorm_square_saved``)."""
    if shape.norm.value == "layernorm":
        saved_input = act.FP32 if shape.code.layernorm_fp32 else dt.residual  # OLMo's norm runs on an fp32 copy
        return n_tokens * (shape.hidden * saved_input + act.LAYERNORM_STATS)
    return n_tokens * (shape.hidden * act.FP32 + act.RMSNORM_STATS + act.rmsnorm_square_bytes(shape, dt))


def frozen_mlp_bytes(shape: ModelShape, t: int, dt: act.Dtypes) -> int:
    """The MLP half of a frozen block: the post-attention norm, the nonlinearity's inputs and outputs; no
    input of a frozen linear (what backward frees before it reaches the attention)."""
    n_up = 2 if shape.gated else 1
    mlp = act.mlp_saved_bytes(shape, t, dt) - act.input_copy_bytes(t, shape.hidden, n_up, dt)
    if shape.mlp is not Mlp.relu:
        mlp -= t * shape.ffn * dt.compute  # down_proj's input
    return frozen_norm_bytes(shape, t, dt) + mlp


def frozen_layer_bytes(shape: ModelShape, tk: act.Tokens, dt: act.Dtypes, attention: Attention) -> int:
    """One block of a frozen base: norms, the attention core (Q, K, V, output, logsumexp or scores),
    the MLP's nonlinearity inputs and outputs, dropout masks; no input of a frozen linear."""
    t = tk.encoder
    attn = act.attention_saved_bytes(shape, tk, t, t, dt, attention, cross=False)
    attn -= act.input_copy_bytes(t, shape.hidden, 1 if shape.fused_qkv else 3, dt)
    flash = shape.code.flash if attention is Attention.flash else None
    head_major = flash is None and shape.code.head_major_query and act.attention_kernel(shape, dt, attention) == "flash"
    if attention is Attention.eager or (flash is not None and flash.output_copied) or head_major:
        attn -= t * shape.q_width * act.kernel_bytes(shape, dt, attention)  # the context copy is o_proj's input
    if shape.qk_norm in (QkNorm.head, QkNorm.projection) and shape.mla is None:
        # a frozen q/k norm weight: the product with it keeps no normalised tensor, only the fp32 input copy
        normed = act.FP32 if shape.code.rmsnorm_normed_fp32 else dt.compute
        attn -= t * (shape.q_width + shape.kv_width) * normed
    mlp = frozen_mlp_bytes(shape, t, dt)
    # the norms after the sublayers of a sandwich block (Gemma 2 and 3) keep their inputs too
    sandwich = (shape.norms_per_layer - 2) * frozen_norm_bytes(shape, t, dt) if shape.norms_per_layer > 2 else 0
    return frozen_norm_bytes(shape, t, dt) + sandwich + attn + mlp + act.dropout_mask_bytes(shape, t, 2)


def frozen_saved_bytes(shape: ModelShape, tk: act.Tokens, dt: act.Dtypes, attention: Attention) -> int:
    """Everything a frozen decoder saves for backward, without the loss tensors and the adapters."""
    from vramcalc.llm import moe

    layer = frozen_layer_bytes(shape, tk, dt, attention)
    # + the final norm, - layer 0's input norm (its input, the frozen embedding, needs no gradient): equal
    total = act.embedding_saved_bytes(shape, tk, dt) + shape.layers * layer
    if shape.moe is not None:
        rows = routed_rows(shape.moe, tk.encoder)
        frozen_delta = rows * (shape.moe.expert_ffn + shape.hidden) * dt.compute - tk.encoder * shape.ffn * dt.compute
        total += moe.saved_delta(shape, tk.encoder, dt) - moe_layers(shape) * frozen_delta
    return total


def backward_transients(
    shape: ModelShape, tk: act.Tokens, dt: act.Dtypes, attention: Attention, dequant: int
) -> tuple[int, int]:
    """Gradients alive while autograd runs back through one block (beyond what the block saved), at the
    MLP and at the attention core: ``(mlp, attention)``.

    MLP: the output gradient (T x h) and the ffn-wide gradients of the product, the activation and up (3
    for SwiGLU: the product's backward makes the activation's and up's gradients while its own is alive;
    up's gradient is consumed before the activation's backward makes gate's), 2 otherwise; plus
    ``dequant``, a quantized weight dequantized in a linear's backward, beyond the MLP's peak
    (:func:`vramcalc.stacks.bnb.backward_dequant`). Attention: eager scores or
    SDPA's math fallback hold the gradients of the softmax input and output (2 x heads x seq^2); fused
    kernels dQ, dK, dV, dO and the fp32 dQ accumulator of the flash backward. Measured against the tracer
    (benchmarks/data/tracer_llm.json, benchmarks/data/tracer_bnb.json).
    """
    t, c = tk.encoder, dt.compute
    mlp = t * shape.ffn * c * (3 if shape.gated else 2) + t * shape.hidden * c + dequant
    kernel = act.attention_kernel(shape, dt, attention)
    if kernel in ("flash", "efficient"):
        k = act.kernel_bytes(shape, dt, attention)
        attn = t * (2 * shape.q_width + 2 * shape.kv_width) * k + t * shape.q_width * act.FP32
        flash = shape.code.flash if attention is Attention.flash else None
        if flash is not None and flash.grouped_grads_expanded and shape.kv_heads < shape.heads:
            attn += 2 * t * shape.q_width * k  # dK and dV for every query head, before the sum over each group
    else:
        attn = 2 * tk.batch * shape.heads * tk.seq * tk.seq * c
    return mlp, attn


def mlp_lora_bytes(
    matrices: list[LoraMatrix],
    rank: int,
    a: int,
    dt: act.Dtypes,
    dropout: float,
    n_tokens: int,
    layers: int,
    frozen_a: bool = False,
) -> int:
    """What the adapters of one block's MLP save (:func:`lora_saved_per_token` of the MLP targets)."""
    mlp = [m for m in matrices if m.name in MLP_TARGETS]
    return n_tokens * lora_saved_per_token(mlp, rank, a, dt, dropout, frozen_a) // max(1, layers)


def backward_block_bytes(
    shape: ModelShape,
    tk: act.Tokens,
    dt: act.Dtypes,
    attention: Attention,
    dequant: int,
    mlp_lora: int = 0,
    mlp_freed: int = 0,
) -> int:
    """The block's backward peak beyond everything saved: the MLP's transients with the whole block saved
    but ``mlp_freed`` (what the down projection's adapter saved and its own backward frees before the MLP's
    peak: :func:`vramcalc.stacks.peft_lora.down_adapter_freed_bytes`), or the attention's once the MLP
    half's saved tensors (the frozen MLP's and its adapters', ``mlp_lora``) are freed: backward runs the MLP
    first (measured with benchmarks/tracer_bnb.py)."""
    mlp, attn = backward_transients(shape, tk, dt, attention, dequant)
    return max(mlp - mlp_freed, attn - frozen_mlp_bytes(shape, tk.encoder, dt) - mlp_lora)


def forward_block_bytes(
    shape: ModelShape,
    tk: act.Tokens,
    dt: act.Dtypes,
    attention: Attention,
    dequant: int,
    ckpt: bool,
    no_grad_dequant: int = 0,
) -> int:
    """The forward's peak inside the last block beyond what is saved. With gradient checkpointing the
    blocks run without grad (a no-grad block's transients, :func:`vramcalc.llm.generation.block_transient`,
    and ``no_grad_dequant``, what a quantized linear's forward holds beyond the block's peak); otherwise the
    last ``down_proj`` reads the MLP product that no frozen linear saves (relu's output is saved) and writes
    its output, with the dequantized 4-bit weight alongside (``dequant``)."""
    from vramcalc.llm import generation

    t, c = tk.encoder, dt.compute
    if ckpt:
        return generation.block_transient(shape, tk, dt, attention) + no_grad_dequant
    product = 0 if shape.mlp is Mlp.relu else t * shape.ffn * c
    return product + dequant + t * shape.hidden * c


def check_supported(shape: ModelShape, adapter: AdapterSpec | None = None) -> None:
    """Adapters are modelled on decoder-only LLMs (the frozen-activation rules above) and, with PEFT, on
    encoder-decoder models (:mod:`vramcalc.llm.lora_encdec`)."""
    arch = shape.architecture
    if arch is Architecture.encoder_decoder and adapter is not None and is_litgpt(adapter):
        raise SpecError("workload.adapter.framework: litgpt has no encoder-decoder models; use framework: peft")
    if arch not in (Architecture.decoder, Architecture.encoder_decoder):
        raise SpecError(
            "workload.adapter: LoRA memory is modelled for decoder and encoder-decoder models; "
            f"architecture is {arch.value}"
        )


def per_layer_shape(shape: ModelShape) -> ModelShape:
    """The shape of one block (for the block recomputed under gradient checkpointing)."""
    return replace(shape, layers=1)
