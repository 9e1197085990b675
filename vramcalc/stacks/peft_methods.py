"""PEFT methods other than plain LoRA: DoRA, IA3, prompt tuning, prefix tuning and LN tuning (VeRA, LoHa,
AdaLoRA, TinyLoRA and OSF: :mod:`vramcalc.stacks.peft_more`; BOFT: :mod:`vramcalc.stacks.peft_boft`).

Each is a frozen base (:mod:`vramcalc.llm.adapters`: a frozen linear saves nothing of its input) plus what
the method trains and what autograd keeps for it, read from PEFT 0.21 and checked against the CPU tracer
(benchmarks/data/tracer_llm.json, ``llm-peft-*``):

* **DoRA** (``LoraConfig(use_dora=True)``, ``DoraLinearLayer``): LoRA plus a magnitude vector of ``out``
  entries per adapted linear (fp32 like the adapters). Every forward recomputes the weight norm
  ``||W + s B A||`` row by row: ``B(A(eye(in)))`` (an ``in x in`` identity, ``in x r`` and ``out x in`` in the
  adapter dtype), ``W`` cast to the adapter dtype (a copy when they differ), ``s B A`` and the sum: a transient of
  ``in^2 + in r + 4 out in`` elements (3 when ``W`` needs no cast), gone when the module returns (the
  norm is detached; PEFT's ``ENABLE_DORA_CACHING`` applies to eval mode only). The output
  ``(m - 1) base + m B(A(x)) s`` holds three ``tokens x out`` tensors in the adapter dtype. Autograd keeps, per token,
  the base output (``out``, for the magnitude's gradient) and ``B(A(x))`` (``out`` in the adapter dtype).
  With dropout the base output is recomputed as ``F.linear(dropout(x), W)`` in the adapter dtype, which
  also keeps the cast ``W`` (``out x in``) wherever ``x`` needs a gradient (not the q/k/v inputs of layer 0).
* **IA3** (``IA3Config``): one vector per target, fp32. An output-scaled target (k, v) keeps its base
  output (``out`` per token at the compute dtype); an input-scaled one (``feedforward_modules``, the MLP's
  down projection) keeps its input cast to the vector's dtype (``in`` per token).
* **Prompt tuning** (``PromptTuningConfig``): ``num_virtual_tokens x hidden`` fp32 parameters; the prompt is
  concatenated to the input embeddings, so the whole model (loss included, labels padded with -100) runs on
  ``seq + num_virtual_tokens`` positions and layer 0's input norm saves its input.
* **Prefix tuning** (``PrefixTuningConfig``): per layer a key and a value prefix of ``num_virtual_tokens``
  positions at the K/V width (GQA: ``kv_heads x head_dim``), ``N x 2 layers x kv_width`` fp32 parameters, or
  with ``prefix_projection`` an embedding ``N x kv_width`` and an MLP ``kv_width -> E -> 2 layers x kv_width``.
  Attention saves K and V of ``seq + N`` positions. PEFT refuses gradient checkpointing with it.
* **LN tuning** (``LNTuningConfig``): a trained copy of every norm (``2 layers + 1`` weights of ``hidden``)
  at the model's dtype (PEFT does not upcast the copy); each norm saves its normalized output for the
  weight's gradient (``hidden`` per token at the compute dtype).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from vramcalc.choices import AdapterType, Attention, Checkpointing, Norm, Optimizer, OptimizerImpl
from vramcalc.core import activations as act
from vramcalc.core.optimizer import DEFAULT_OPTIMIZER_NOTE
from vramcalc.core.shape import ModelShape
from vramcalc.core.stack import Stack
from vramcalc.errors import SpecError
from vramcalc.llm import lora_targets
from vramcalc.llm.adapters import MLP_TARGETS, LoraMatrix
from vramcalc.spec.llm import AdapterSpec
from vramcalc.spec.models import Spec
from vramcalc.spec.versions import peft_release
from vramcalc.stacks import peft_boft, peft_more
from vramcalc.stacks.peft_more import FIRST_INPUTS, Method
from vramcalc.units import FP32

#: Rounding of the CUDA caching allocator (small vectors are whole blocks).
BLOCK = 512
#: What a pinned PEFT release changes (the note of every adapter estimate that pins one).
PEFT_PINNED = (
    "peft {} (workload.versions.peft): OSF's and BOFT's forward follow that release (OSF rebuilt each weight "
    "before 0.21, BOFT rotated the weight before 0.19.2); the other methods are the same in every release modelled"
)
#: PEFT's IA3 targets for decoders with separate projections (its Llama/Mistral mapping).
IA3_DEFAULT = ("k", "v", "down")


def _round(n: int) -> int:
    return -(-n // BLOCK) * BLOCK


# ------------------------------------------------------------------ DoRA (on top of LoRA's phases)


@dataclass(frozen=True)
class Dora:
    """What DoRA adds to LoRA: magnitude parameters and tensors, saved bytes, the weight-norm transient."""

    params: int
    tensors: list[tuple[int, int, int]]
    saved: int
    saved_per_layer: int
    transient: int


def dora_extra(
    matrices: list[LoraMatrix],
    rank: int,
    a: int,
    dt: act.Dtypes,
    n_tokens: int,
    layers: int,
    dropout: float,
    copy_w: bool,
) -> Dora:
    """DoRA's additions for the adapted linears ``matrices`` (:class:`vramcalc.llm.adapters.LoraMatrix`);
    ``copy_w``: the frozen weight is cast (or dequantized) to the adapter dtype, a new tensor."""
    params = sum(m.count * m.out for m in matrices)
    tensors = [(m.count, m.out, 1) for m in matrices]
    saved = 0
    for m in matrices:
        base_out = a if dropout > 0 else dt.compute  # F.linear(dropout(x), W cast) vs the base layer's output
        saved += m.passes * n_tokens * m.out * (base_out + a)
        saved += m.count * 3 * _round(m.out * FP32)  # weight norm, its ratio, ratio - 1 (saved by the products)
        if dropout > 0 and copy_w:
            needs_grad = m.count - (m.count // max(1, layers) if m.name in FIRST_INPUTS else 0)
            saved += max(0, needs_grad) * m.out * m.inp * a
    norm = max((m.inp * m.inp + m.inp * rank + (4 if copy_w else 3) * m.out * m.inp for m in matrices), default=0)
    # (m - 1) * base, m * B(A(x)) * s and their sum, each tokens x out in the adapter dtype
    combine = max((3 * n_tokens * m.out for m in matrices), default=0)
    transient = max(norm, combine) * a
    return Dora(params, tensors, saved, saved // max(1, layers), transient)


def dora_for(
    adapter: AdapterSpec,
    matrices: list[LoraMatrix],
    a: int,
    dt: act.Dtypes,
    n_tokens: int,
    layers: int,
    quantized: bool,
) -> Dora:
    """:func:`dora_extra` for a ``dora`` adapter, nothing for plain LoRA."""
    if adapter.type is not AdapterType.dora:
        return Dora(0, [], 0, 0, 0)
    copy_w = quantized or a != dt.param
    return dora_extra(matrices, adapter.rank or 0, a, dt, n_tokens, layers, adapter.dropout, copy_w)


# ------------------------------------------------------------------ the methods without LoRA matrices


def _autocast(adapter: AdapterSpec) -> bool:
    return adapter.autocast_adapter_dtype is not False


def _adapter_bytes(adapter: AdapterSpec, dt: act.Dtypes) -> int:
    return FP32 if _autocast(adapter) else dt.param


def ia3_targets(shape: ModelShape, adapter: AdapterSpec) -> tuple[tuple[str, ...], set[str], list[str]]:
    """IA3's target keys, the input-scaled (feed-forward) ones among them, and the notes on both."""
    targets: tuple[str, ...] = IA3_DEFAULT
    if adapter.targets is None:
        notes = ["adapter.targets not given: k_proj, v_proj, down_proj (PEFT's IA3 default for Llama-like models)"]
    else:
        targets, notes = lora_targets.resolve_targets(shape, adapter.targets, False)
    if adapter.feedforward_modules is None:
        return targets, {t for t in targets if t == "down"}, notes
    feedforward, said = lora_targets.resolve_targets(shape, adapter.feedforward_modules, False)
    if not set(feedforward) <= set(targets):
        raise SpecError("workload.adapter.feedforward_modules: every feed-forward module must be in targets")
    return targets, set(feedforward), notes + said


def _ia3(shape: ModelShape, adapter: AdapterSpec, tk: act.Tokens, dt: act.Dtypes) -> tuple[Method, list[str]]:
    from vramcalc.llm.adapters import lora_matrices

    targets, ff, notes = ia3_targets(shape, adapter)
    a = _adapter_bytes(adapter, dt)
    params, tensors, per_token, mlp, back = 0, [], 0, 0, 0
    for m in lora_matrices(shape, targets):
        if m.name in ff and m.name in MLP_TARGETS:
            # the gradient reaching the scaled input (cast to the vector's dtype), its product with the kept
            # input (reduced to the vector's gradient) and the input's gradient, beside the block output's
            back = max(back, tk.encoder * (shape.hidden * dt.compute + 3 * m.inp * a))
        width = m.inp if m.name in ff else m.out
        params += m.count * width
        tensors.append((m.count, width, 1))
        kept = m.passes * width * (a if m.name in ff else dt.compute)
        per_token += kept
        mlp += kept if m.name in MLP_TARGETS else 0
    saved, layers = tk.encoder * per_token, shape.layers
    note = f"IA3 on {', '.join(targets)} (input-scaled: {', '.join(sorted(ff)) or 'none'})"
    return Method(params, tensors, a, tk, saved, saved // layers, note, tk.encoder * mlp // layers, back), notes


def _prompt(shape: ModelShape, adapter: AdapterSpec, tk: act.Tokens, dt: act.Dtypes) -> Method:
    n = adapter.num_virtual_tokens or 0
    a = FP32  # PEFT creates the prompt encoder at torch's default dtype and does not cast it
    longer = act.Tokens(tk.batch, tk.seq + n, tk.target + n)
    from vramcalc.llm.adapters import frozen_norm_bytes

    layer0 = frozen_norm_bytes(shape, longer.encoder, dt)  # its input (the prompt) now needs a gradient
    note = f"prompt tuning: {n} virtual tokens, the model runs on {tk.seq + n} positions per sequence"
    return Method(n * shape.hidden, [(1, n, shape.hidden)], a, longer, layer0, 0, note)


def _prefix(shape: ModelShape, adapter: AdapterSpec, tk: act.Tokens, dt: act.Dtypes, attention: Attention) -> Method:
    n = adapter.num_virtual_tokens or 0
    a = FP32  # as the prompt encoder
    kv, layers = shape.kv_width, shape.layers
    wide = 2 * layers * kv
    if adapter.prefix_projection:
        e = adapter.encoder_hidden_size or kv
        tensors = [(1, n, kv), (1, e, kv), (1, e, 1), (1, wide, e), (1, wide, 1)]
        # the MLP saves the embedding output and tanh's output (Linear 2's input) for the backward
        mlp = tk.batch * n * (kv + e) * a
    else:
        tensors = [(1, n, wide)]
        mlp = 0
    params = sum(c * r * k for c, r, k in tensors)
    note = f"prefix tuning: {n} virtual key/value positions per layer"
    if attention is not Attention.sdpa:
        per_layer = tk.batch * n * 2 * shape.q_width * dt.compute  # eager: K and V repeated, seq + N long
        return Method(params, tensors, a, tk, layers * per_layer + mlp, per_layer, note)
    # The cache of N positions makes transformers build a mask (queries seq, keys seq + N): SDPA gets K and V
    # repeated to every head (no GQA kernel with a mask), runs the memory-efficient kernel (no flash with a
    # mask) and keeps the mask converted to an additive bias at the compute dtype, padded to 16 keys.
    heads = replace(shape, kv_heads=shape.heads)
    bias = tk.batch * tk.seq * (-(-(tk.seq + n) // 16) * 16) * dt.compute
    per_layer = tk.batch * n * 2 * shape.q_width * dt.compute + bias
    note += "; SDPA: memory-efficient kernel, K/V repeated to every head, the mask kept as a bias"
    return Method(params, tensors, a, tk, layers * per_layer + mlp, per_layer, note, attention_shape=heads)


def _ln(shape: ModelShape, tk: act.Tokens, dt: act.Dtypes) -> Method:
    norms = 2 * shape.layers + 1
    per_norm = tk.encoder * shape.hidden * dt.compute  # the normalized output, for the weight's gradient
    if shape.norm is Norm.layernorm:
        tensors = [(norms, shape.hidden, 1), (norms, shape.hidden, 1)]  # weight and bias
    else:
        tensors = [(norms, shape.hidden, 1)]
    params = sum(c * r for c, r, _ in tensors)
    note = f"LN tuning: {norms} norms train (copies at the model's dtype)"
    return Method(params, tensors, dt.param, tk, norms * per_norm, 2 * per_norm, note, per_norm)


def method(
    shape: ModelShape,
    adapter: AdapterSpec,
    tk: act.Tokens,
    dt: act.Dtypes,
    attention: Attention,
    peft: tuple[int, int, int] | None = None,
) -> tuple[Method, list[str]]:
    """The trainable parameters and saved bytes of ``adapter`` (any type but lora and dora) under the PEFT
    release ``peft`` (None: today's), and the notes on the defaults taken and the targets."""
    a = _adapter_bytes(adapter, dt)
    if adapter.type is AdapterType.osf and peft is not None and peft < peft_more.OSF_FACTORED:
        return peft_more.osf_rebuilt(shape, adapter, tk, dt, a)
    if adapter.type in (AdapterType.vera, AdapterType.loha, AdapterType.adalora, AdapterType.tinylora, AdapterType.osf):
        return peft_more.method(shape, adapter, tk, dt, a)
    if adapter.type is AdapterType.boft:
        rotates_weight = peft is not None and peft < peft_boft.BOFT_INPUT_ROTATION
        return peft_boft.boft(shape, adapter, tk, dt, a, rotates_weight)
    if adapter.type is AdapterType.ia3:
        return _ia3(shape, adapter, tk, dt)
    if adapter.type is AdapterType.prompt_tuning:
        return _prompt(shape, adapter, tk, dt), []
    if adapter.type is AdapterType.prefix_tuning:
        return _prefix(shape, adapter, tk, dt, attention), []
    return _ln(shape, tk, dt), []


def check(spec: Spec, shape: ModelShape) -> None:
    """What these methods are not modelled with: one clear error naming the key."""
    wl = spec.workload
    assert wl.adapter is not None  # an adapter method's step
    kind = wl.adapter.type.value
    if wl.quantization is not None:
        raise SpecError(f"workload.quantization: a quantized base is modelled under lora or dora, not {kind}")
    if wl.adapter.type is AdapterType.prefix_tuning and wl.gradient_checkpointing is not Checkpointing.none:
        raise SpecError("workload.gradient_checkpointing: PEFT's prefix tuning refuses gradient checkpointing")
    separate_kv = not shape.fused_qkv and lora_targets.mla_of(shape) is None
    if wl.adapter.type is AdapterType.ia3 and not separate_kv and wl.adapter.targets is None:
        raise SpecError("workload.adapter.targets: required for IA3 without separate k/v projections")


def method_phases(
    spec: Spec,
    shape: ModelShape,
    tk: act.Tokens,
    dt: act.Dtypes,
    base: dict[str, int],
    stack: Stack,
) -> tuple[dict[str, dict[str, int]], int, int, list[str]]:
    """Training step of a frozen base with the method's trainable parameters (forward, backward, optimizer),
    as :func:`vramcalc.families.llm.adapter_phases` assembles LoRA's; with the trainable and the frozen
    parameters the method adds, and the notes on the method."""
    from vramcalc.core import optimizer as optimizer_mod
    from vramcalc.core.workload import default_optimizer
    from vramcalc.llm import adapters

    wl = spec.workload
    adapter = wl.adapter
    assert adapter is not None  # an adapter method's step
    check(spec, shape)
    peft = peft_release(wl.versions)
    m, said = method(shape, adapter, tk, dt, wl.attention, peft)
    if m.attention_shape is not None:
        shape = m.attention_shape
    notes = [*said, m.note, *([DEFAULT_OPTIMIZER_NOTE] if wl.optimizer is None else [])]
    optimizer = default_optimizer(spec)
    a, trainable = m.bytes_per_param, m.params
    live = {
        **base,
        "parameters": base["parameters"] + trainable * a + m.buffers,
        "optimizer_states": adapters.state_bytes(optimizer, m.tensors, a, stack.optimizer_state_block) + m.extra_states,
        "autocast_weight_copies": trainable * dt.compute if dt.amp else 0,
    }
    if stack.zero_grad_in_place:  # allocated from the start of the step
        live["gradients"] = trainable * a
    t = m.tokens
    ckpt = wl.gradient_checkpointing is Checkpointing.full
    if ckpt:
        saved = act.checkpoint_saved_bytes(shape, t, dt) + act.embedding_saved_bytes(shape, t, dt)
        saved += adapters.frozen_norm_bytes(shape, t.encoder, dt) + m.saved - shape.layers * m.saved_per_layer
        one = adapters.per_layer_shape(shape)
        recompute = adapters.frozen_layer_bytes(one, t, dt, wl.attention) + m.saved_per_layer
    else:
        saved, recompute = adapters.frozen_saved_bytes(shape, t, dt, wl.attention) + m.saved, 0
    loss = act.loss_bytes(shape, t, dt)
    through = adapters.backward_block_bytes(shape, t, dt, wl.attention, 0, m.mlp_per_layer)
    through = max(through, m.backward_transient)
    head = loss.saved + loss.forward_transient
    inside = adapters.forward_block_bytes(shape, t, dt, wl.attention, 0, ckpt)
    forward = {**live, "activations": saved + head, "temporaries": max(0, max(inside, m.forward_transient) - head)}
    start = {**live, "activations": saved + loss.saved, "temporaries": loss.backward_temporaries}
    block = {**live, "activations": saved + recompute, "temporaries": through}
    end = {**live, "gradients": trainable * a}
    backward = max(start, block, end, key=lambda p: sum(p.values()))
    foreach = optimizer is not Optimizer.none and wl.optimizer_impl is OptimizerImpl.foreach
    temp = trainable * a if foreach and not optimizer_mod.LAYOUTS[optimizer].fused_kernel else 0
    # the method's own update after the optimizer step, before the gradients are zeroed
    step = {**live, "gradients": trainable * a, "temporaries": max(temp, m.step_transient)}
    return {"forward": forward, "backward": backward, "optimizer": step}, trainable, m.frozen_params, notes
