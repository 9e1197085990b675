"""VeRA, LoHa, AdaLoRA, TinyLoRA and OSF: PEFT methods that adapt linears otherwise than LoRA's two trained matrices.

Each is a frozen base (:mod:`vramcalc.llm.adapters`: a frozen linear saves nothing of its input) plus what
the method trains and what autograd keeps for it, read from PEFT 0.21 (``peft/tuners/vera/layer.py``,
``peft/tuners/loha/layer.py``, ``peft/tuners/adalora/``) and checked against the CPU tracer
(benchmarks/data/tracer_llm.json, ``llm-peft-vera-*``, ``llm-peft-loha-*``, ``llm-peft-adalora-*``).
``a`` is the adapter dtype (fp32 with PEFT's default
``autocast_adapter_dtype`` on a 16-bit base), ``n`` the tokens of a step:

:class:`Method` (what any of the methods beyond LoRA trains and keeps) lives here for
:mod:`vramcalc.stacks.peft_methods` too.

* **VeRA** (``VeraConfig``): one pair of frozen random projections shared by every adapted linear,
  ``vera_A`` (``r x max in``) and ``vera_B`` (``max out x r``), fp32 buffers; per adapted linear two trained
  vectors, ``lambda_b`` (``out``) and ``lambda_d`` (``r``), fp32. The forward
  ``base + lambda_b * B(lambda_d * A(x))`` keeps, per token and adapted linear, ``A(x)`` (``r``, for
  ``lambda_d``'s gradient) and ``B(...)`` (``out``, for ``lambda_b``'s), in the adapter dtype; the frozen
  projections need no gradient, so the input (cast to the adapter dtype, a copy on a 16-bit base) is not kept.
* **LoHa** (``LoHaConfig``): per adapted linear ``w1a``, ``w2a`` (``out x r``) and ``w1b``, ``w2b``
  (``r x in``), fp32. Every forward materialises the delta weight ``(w1a w1b) * (w2a w2b) * scale``, a full
  ``out x in`` matrix in the adapter dtype (three alive while it is built), and applies it with ``F.linear``
  to the input cast to the adapter dtype: autograd keeps that input (``in`` per token, a copy per module on a
  16-bit base) and, wherever the input needs a gradient (all but the q/k/v inputs of layer 0), the delta
  weight. Its backward rebuilds both products beside the weight's gradient.
* **AdaLoRA** (``AdaLoraConfig``): per adapted linear ``lora_A`` (``init_r x in``), ``lora_E``
  (``init_r x 1``) and ``lora_B`` (``out x init_r``), fp32, and a frozen ``ranknum`` parameter (one
  element, cast to the base layer's dtype; PEFT counts it among the model's parameters). The forward
  ``base += (x @ (A * E)^T @ B^T) * scaling / ranknum`` is LoRA's at ``init_r`` (pruning masks ``lora_E``
  and never shrinks a tensor): it keeps the cast input, ``x (A E)^T`` and, wherever the input needs a
  gradient, the ``init_r x in`` product. ``AdaLoraModel.forward`` adds the orthogonality penalty
  ``|A A^T - I| + |B^T B - I|``, whose norms keep each ``init_r x init_r`` difference. After each optimizer
  step ``update_and_allocate`` (``RankAllocator.update_ipt``) keeps ``ipt``, ``exp_avg_ipt`` and
  ``exp_avg_unc``, a copy of every adapter tensor each: optimizer-like state.
* **TinyLoRA** (``TinyLoraConfig``, ``peft/tuners/tinylora/layer.py``): per adapted linear a trained vector
  ``v`` (``u``) and frozen buffers, the truncated SVD factors ``A = sqrt(S) V^T`` (``r x in``) and
  ``B = U sqrt(S)`` (``out x r``) in the adapter dtype and the random projections ``P`` (``u x r x r``, fp32).
  The forward ``base + B(R A(x))`` with ``R = sum v_i P_i`` keeps only ``A(x)`` (``r``, for ``R``'s and so
  ``v``'s gradient); ``A`` and ``B`` need no gradient, so the input cast to the adapter dtype is a forward
  temporary, beside ``B(...)`` and its sum with the base output (traced: ``llm-peft-tinylora-*``).
* **OSF** (``OSFConfig``, PEFT 0.21 ``peft/tuners/osf/layer.py``): each target's SVD splits into a preserved high
  subspace and a trained low one of ``rank`` singular directions, ``U_low`` (``out x r``), ``S_low`` (``r``) and
  ``V_low`` (``r x in``); frozen beside them their initial copies and ``U_high`` (``out > in``) or ``V_high``
  (``out < in``), all in the adapter dtype. The factored forward builds ``A = [U_low S_low, -U_low_init
  S_low_init]`` and ``B = [V_low; V_low_init]`` every time and keeps them, the input cast to the adapter dtype and
  ``x B^T`` (``2 r``); gradient hooks project ``U_low``'s and ``V_low``'s gradients (traced: ``llm-peft-osf-*``).
  Before 0.21 (``versions: {peft: ...}``, :func:`osf_rebuilt`) every forward rebuilt each weight from its SVD,
  with ``U_high``, ``S_high``, ``V_high`` as the frozen buffers (traced: ``llm-peft-osf-rebuilt-*``).
"""

from __future__ import annotations

from dataclasses import dataclass

from vramcalc.choices import AdapterType
from vramcalc.core import activations as act
from vramcalc.core.shape import ModelShape
from vramcalc.errors import SpecError
from vramcalc.llm import adapters, lora_targets
from vramcalc.llm.adapters import MLP_TARGETS, LoraMatrix, lora_matrices, lora_saved_per_token
from vramcalc.spec.llm import ADALORA_INIT_R, AdapterSpec
from vramcalc.units import FP32, allocation_bytes

#: Targets whose input is layer 0's first norm output: their input needs no gradient in block 0.
FIRST_INPUTS = ("q", "k", "v", "qkv", "q_a", "kv_a")
#: The order a block runs its linears in (forward; backward runs them in reverse).
FORWARD_ORDER = ("q_a", "q_b", "q", "kv_a", "kv_b", "k", "v", "qkv", "o", "gate", "up", "gate_up", "down")


def kept_after(kept: dict[str, int], name: str) -> int:
    """What the adapted linears after ``name`` in a block keep (``kept``: bytes per block, by target): not
    there yet while ``name`` runs forward, freed again when backward reaches it."""
    order = {target: i for i, target in enumerate(FORWARD_ORDER)}
    rank = order.get(name, len(order))
    return sum(b for other, b in kept.items() if order.get(other, len(order)) > rank)


@dataclass(frozen=True)
class Method:
    """A PEFT method's trainable parameters (tensors as (how many, rows, columns)), their bytes each,
    the token count the model runs on, and what the method saves beyond the frozen base (whole forward;
    one recomputed block)."""

    params: int
    tensors: list[tuple[int, int, int]]
    bytes_per_param: int
    tokens: act.Tokens
    saved: int
    saved_per_layer: int
    note: str
    mlp_per_layer: int = 0
    backward_transient: int = 0
    #: The shape attention runs at (prefix tuning: K/V repeated to every head beside an attention mask).
    attention_shape: ModelShape | None = None
    #: Frozen tensors the method adds (VeRA's shared projections).
    buffers: int = 0
    #: The method's largest forward transient inside a block, beyond what is saved.
    forward_transient: int = 0
    #: Frozen parameters the method adds, counted among the model's parameters (AdaLoRA's ``ranknum``);
    #: their bytes are in ``buffers``.
    frozen_params: int = 0
    #: State kept beside the optimizer's, bytes (AdaLoRA's importance scores), and the largest transient
    #: of updating it after the optimizer step.
    extra_states: int = 0
    step_transient: int = 0


#: PEFT's default VeRA rank (``VeraConfig.r``) and LoHa rank (``LoHaConfig.r``).
VERA_RANK = 256
LOHA_RANK = 8
#: The first PEFT release whose OSF forward is factored (``base(x) + B(A(x))``); before, every forward
#: rebuilt each target's weight (:func:`osf_rebuilt`).
OSF_FACTORED = (0, 21, 0)
#: PEFT's TinyLoRA defaults (``TinyLoraConfig.r``, ``TinyLoraConfig.u``).
TINYLORA_RANK = 2
TINYLORA_U = 64


def adapted_linears(shape: ModelShape, adapter: AdapterSpec) -> tuple[list[LoraMatrix], list[str]]:
    """The linears ``adapter.targets`` names (PEFT's reading), and the notes on what they adapt."""
    targets, notes = lora_targets.resolve_targets(shape, adapter.targets, False)
    return lora_matrices(shape, targets), notes


def inputs_needing_grad(m: LoraMatrix, layers: int) -> int:
    """How many of the ``m.count`` linears have an input that needs a gradient (not layer 0's q/k/v)."""
    return m.count - (m.count // max(1, layers) if m.name in FIRST_INPUTS else 0)


def kept_input_bytes(matrices: list[LoraMatrix], a: int, dt: act.Dtypes) -> int:
    """Bytes per token of the inputs the adapters keep: a cast copy per module when the adapter dtype is
    not the compute dtype, else the activation the modules of one input share."""
    total, shared = 0, dict[object, int]()
    for m in matrices:
        if a != dt.compute or dt.amp:
            total += m.passes * m.inp * a
        else:
            key = (lora_targets.INPUT_SOURCE[m.name], m.inp)
            shared[key] = max(shared.get(key, 0), m.passes * m.inp * a)
    return total + sum(shared.values())


def vera(shape: ModelShape, adapter: AdapterSpec, tk: act.Tokens, dt: act.Dtypes, a: int) -> tuple[Method, list[str]]:
    """VeRA's trained vectors, shared projections (``buffers``) and kept tensors; and the notes on the
    defaults taken and the targets."""
    r = adapter.rank or VERA_RANK
    defaults = [] if adapter.rank is not None else [f"adapter.rank not given: {VERA_RANK} (PEFT's VeRA default)"]
    matrices, target_notes = adapted_linears(shape, adapter)
    n, c = tk.encoder, dt.compute
    tensors = []
    for m in matrices:
        tensors += [(m.count, m.out, 1), (m.count, r, 1)]
    params = sum(k * rows for k, rows, _ in tensors)
    buffers = r * (max(m.inp for m in matrices) + max(m.out for m in matrices)) * FP32
    per_token = mlp = 0
    for m in matrices:
        kept = m.passes * (r + m.out) * a + (m.passes * m.inp * act.MASK if adapter.dropout > 0 else 0)
        per_token += kept
        mlp += kept if m.name in MLP_TARGETS else 0
    cast = a != c
    # the cast input, lambda_b * B(...), the sum with the base output and its cast back
    forward = max(n * ((m.inp * a if cast else 0) + 2 * m.out * a + m.out * c) for m in matrices)
    note = f"VeRA r={r} on {', '.join(sorted({m.name for m in matrices}))} (shared projections: {buffers:,} bytes)"
    layers = shape.layers
    saved = n * per_token
    per_layer, mlp_layer = saved // layers, n * mlp // layers
    return Method(
        params, tensors, a, tk, saved, per_layer, note, mlp_layer, buffers=buffers, forward_transient=forward
    ), defaults + target_notes


def tinylora(
    shape: ModelShape, adapter: AdapterSpec, tk: act.Tokens, dt: act.Dtypes, a: int
) -> tuple[Method, list[str]]:
    """TinyLoRA's trained vectors, its frozen SVD factors and projections (``buffers``) and kept tensors; and
    the notes on the defaults taken and the targets."""
    r, u = adapter.rank or TINYLORA_RANK, adapter.u or TINYLORA_U
    defaults: list[str] = []
    if adapter.rank is None:
        defaults.append(f"adapter.rank not given: {TINYLORA_RANK} (PEFT's TinyLoRA default)")
    if adapter.u is None:
        defaults.append(f"adapter.u not given: {TINYLORA_U} (PEFT's TinyLoRA default)")
    matrices, target_notes = adapted_linears(shape, adapter)
    n, c = tk.encoder, dt.compute
    modules = sum(m.count for m in matrices)
    tensors = [(modules, u, 1)]  # one v per adapted linear (weight_tying 0.0, PEFT's default)
    # per adapted linear: A (r x in) and B (out x r) in the adapter dtype, the projections P (u x r x r) fp32
    buffers = sum(
        m.count
        * (allocation_bytes(r * m.inp * a) + allocation_bytes(m.out * r * a) + allocation_bytes(u * r * r * FP32))
        for m in matrices
    )
    per_token = mlp = 0
    for m in matrices:  # A(x), for v's gradient; with dropout its mask
        kept = m.passes * (r * a + (m.inp * act.MASK if adapter.dropout > 0 else 0))
        per_token += kept
        mlp += kept if m.name in MLP_TARGETS else 0
    # the input cast to the adapter dtype, B(R A(x)), its sum with the base output and that cast back
    forward = max(n * ((m.inp * a if a != c else 0) + 2 * m.out * a + m.out * c) for m in matrices)
    note = f"TinyLoRA r={r}, u={u} on {', '.join(sorted({m.name for m in matrices}))} ({modules * u:,} trained)"
    saved, layers = n * per_token, shape.layers
    return Method(
        modules * u,
        tensors,
        a,
        tk,
        saved,
        saved // layers,
        note,
        n * mlp // layers,
        buffers=buffers,
        forward_transient=forward,
    ), defaults + target_notes


def _osf_targets(shape: ModelShape, adapter: AdapterSpec) -> tuple[list[LoraMatrix], list[str]]:
    """OSF's adapted linears, and the notes on them and on the rank's default."""
    matrices, notes = adapted_linears(shape, adapter)
    smallest = min(min(m.out, m.inp) for m in matrices)
    if adapter.rank is not None and adapter.rank >= smallest:
        raise SpecError(f"workload.adapter.rank: OSF trains fewer than the {smallest} singular directions a target has")
    if adapter.rank is None:
        notes.append("adapter.rank not given: half of each target's smaller dimension (PEFT's OSF default)")
    return matrices, notes


def osf(shape: ModelShape, adapter: AdapterSpec, tk: act.Tokens, dt: act.Dtypes, a: int) -> tuple[Method, list[str]]:
    """OSF's trained low singular subspace, its frozen copies and high subspace (``buffers``), kept tensors;
    and the notes on the targets and the rank's default."""
    matrices, notes = _osf_targets(shape, adapter)
    n, c = tk.encoder, dt.compute
    tensors: list[tuple[int, int, int]] = []
    buffers = per_forward = mlp_forward = 0
    for m in matrices:
        low = min(m.out, m.inp)
        r = adapter.rank or low - low // 2
        tensors += [(m.count, m.out, r), (m.count, r, 1), (m.count, r, m.inp)]
        # the initial U_low, S_low, V_low; U_high (out > in) or V_high (out < in) of the preserved rank
        high = (m.out if m.out > m.inp else m.inp if m.out < m.inp else 0) * (low - r)
        buffers += m.count * sum(allocation_bytes(e * a) for e in (m.out * r, r, r * m.inp, high) if e)
        # A = [U_low S_low, -U_low_init S_low_init] and B = [V_low; V_low_init], built and kept every forward
        concat = m.count * (allocation_bytes(m.out * 2 * r * a) + allocation_bytes(2 * r * m.inp * a))
        per_forward += concat
        mlp_forward += concat if m.name in MLP_TARGETS else 0
    ranks = {m.name: (adapter.rank or min(m.out, m.inp) - min(m.out, m.inp) // 2) for m in matrices}
    per_token = sum(m.passes * 2 * ranks[m.name] * a for m in matrices)  # h = x B^T, for A's gradient
    mlp_tokens = sum(m.passes * 2 * ranks[m.name] * a for m in matrices if m.name in MLP_TARGETS)
    per_token += kept_input_bytes(matrices, a, dt)  # x cast to the adapter dtype, for B's gradient
    mlp_tokens += kept_input_bytes([m for m in matrices if m.name in MLP_TARGETS], a, dt)
    # delta_out, its cast back and the sum with the base output, each tokens x out
    forward = max(n * m.out * (a + 2 * c) for m in matrices)
    # the gradient hooks project U_low's and V_low's gradients: a product and the projected gradient
    backward = max(2 * max(m.out, m.inp) * ranks[m.name] * a for m in matrices)
    params = sum(k * rows * cols for k, rows, cols in tensors)
    note = f"OSF on {', '.join(sorted(ranks))} ({params:,} trained: the low singular subspace of each target)"
    saved, layers = n * per_token + per_forward, shape.layers
    mlp = (n * mlp_tokens + mlp_forward) // layers
    return Method(
        params, tensors, a, tk, saved, saved // layers, note, mlp, backward, buffers=buffers, forward_transient=forward
    ), notes


def osf_rebuilt(
    shape: ModelShape, adapter: AdapterSpec, tk: act.Tokens, dt: act.Dtypes, a: int
) -> tuple[Method, list[str]]:
    """OSF as PEFT ran it before 0.21: every forward rebuilds the weight, ``U_high S_high V_high + U_low S_low
    V_low``, and applies it with ``F.linear`` to the input cast to the adapter dtype. With the notes on the
    targets and the rank's default."""
    matrices, notes = _osf_targets(shape, adapter)
    n, c, layers = tk.encoder, dt.compute, shape.layers
    tensors: list[tuple[int, int, int]] = []
    buffers = per_forward = mlp_forward = 0
    block: dict[str, int] = {}  # what each target keeps in one block
    for m in matrices:
        i, o, low = m.inp, m.out, min(m.out, m.inp)
        r = adapter.rank or low - low // 2
        tensors += [(m.count, o, r), (m.count, r, 1), (m.count, r, i)]
        # U_high, S_high, V_high of the preserved rank, buffers PEFT casts to the adapter dtype too
        buffers += m.count * sum(allocation_bytes(e * a) for e in (o * (low - r), low - r, (low - r) * i))
        # U_low S_low (kept by the product with V_low) and, where the input needs a gradient, the rebuilt weight
        kept = m.count * allocation_bytes(o * r * a) + inputs_needing_grad(m, layers) * allocation_bytes(o * i * a)
        per_forward += kept
        mlp_forward += kept if m.name in MLP_TARGETS else 0
        block[m.name] = kept // layers + (n * i * a if a != c else 0)
    per_token = kept_input_bytes(matrices, a, dt)  # x cast to the adapter dtype, for the weight's gradient
    mlp_tokens = kept_input_bytes([m for m in matrices if m.name in MLP_TARGETS], a, dt)
    mlp_half = adapters.frozen_mlp_bytes(shape, n, dt) + (n * mlp_tokens + mlp_forward) // layers
    forward = backward = 0
    for m in matrices:
        i, o = m.inp, m.out
        earlier = kept_after(block, m.name) + (0 if m.name in MLP_TARGETS else mlp_half)
        # the high part and the low part beside their sum; F.linear's output and its cast
        forward = max(forward, max(2 * o * i * a, n * o * (a + c)) - earlier)
        # the output's gradient in the adapter dtype, the input's and the weight's gradients
        backward = max(backward, n * (o + i) * a + o * i * a - earlier)
    params = sum(k * rows * cols for k, rows, cols in tensors)
    note = (
        f"OSF on {', '.join(sorted({m.name for m in matrices}))} ({params:,} trained), as PEFT before 0.21 ran it: "
        "each target's weight rebuilt from its SVD in every forward"
    )
    saved = n * per_token + per_forward
    mlp = (n * mlp_tokens + mlp_forward) // layers
    return Method(
        params, tensors, a, tk, saved, saved // layers, note, mlp, backward, buffers=buffers, forward_transient=forward
    ), notes


def loha(shape: ModelShape, adapter: AdapterSpec, tk: act.Tokens, dt: act.Dtypes, a: int) -> tuple[Method, list[str]]:
    """LoHa's four factors per linear, the kept inputs and delta weights, the delta weight's transients; and
    the notes on the defaults taken and the targets."""
    r = adapter.rank or LOHA_RANK
    defaults = [] if adapter.rank is not None else [f"adapter.rank not given: {LOHA_RANK} (PEFT's LoHa default)"]
    matrices, target_notes = adapted_linears(shape, adapter)
    n, layers = tk.encoder, shape.layers
    tensors = []
    for m in matrices:
        tensors += [(m.count, m.out, r), (m.count, r, m.inp), (m.count, m.out, r), (m.count, r, m.inp)]
    params = sum(k * rows * cols for k, rows, cols in tensors)
    weights = sum(inputs_needing_grad(m, layers) * m.out * m.inp * a for m in matrices)
    mlp_weights = sum(m.count * m.out * m.inp * a for m in matrices if m.name in MLP_TARGETS)
    per_token = kept_input_bytes(matrices, a, dt)
    mlp_tokens = kept_input_bytes([m for m in matrices if m.name in MLP_TARGETS], a, dt)
    saved = n * per_token + weights
    biggest = max(m.out * m.inp for m in matrices)
    # forward: w1a w1b, w2a w2b and their product; backward: the weight's gradient, its scaled copy,
    # one rebuilt product and the gradient through it
    forward = 3 * biggest * a
    backward = 4 * biggest * a
    note = f"LoHa r={r} on {', '.join(sorted({m.name for m in matrices}))} (a full delta weight per linear)"
    per_layer = saved // layers
    mlp = (n * mlp_tokens + mlp_weights) // layers
    notes = defaults + target_notes
    return Method(params, tensors, a, tk, saved, per_layer, note, mlp, backward, forward_transient=forward), notes


def adalora(
    shape: ModelShape, adapter: AdapterSpec, tk: act.Tokens, dt: act.Dtypes, a: int
) -> tuple[Method, list[str]]:
    """AdaLoRA's three factors and ``ranknum`` per linear, LoRA's kept tensors at ``init_r``, the
    orthogonality penalty's ``r x r`` differences and the importance scores of the rank allocator; and the
    notes on the defaults taken and the targets."""
    r = adapter.init_r or ADALORA_INIT_R
    defaults: list[str] = []
    if adapter.init_r is None:
        defaults.append(f"adapter.init_r not given: {ADALORA_INIT_R} (PEFT's AdaLoRA default)")
    matrices, target_notes = adapted_linears(shape, adapter)
    n, layers = tk.encoder, shape.layers
    tensors = []
    for m in matrices:
        tensors += [(m.count, r, m.inp), (m.count, r, 1), (m.count, m.out, r)]
    params = sum(k * rows * cols for k, rows, cols in tensors)
    ranknum = sum(m.count for m in matrices)
    # lora_A * lora_E (r x in), kept by the matmul wherever the input needs a gradient
    products = {m.name: inputs_needing_grad(m, layers) * r * m.inp * a for m in matrices}
    mlp = [m for m in matrices if m.name in MLP_TARGETS]
    in_blocks = n * lora_saved_per_token(matrices, r, a, dt, adapter.dropout) + sum(products.values())
    mlp_saved = n * lora_saved_per_token(mlp, r, a, dt, adapter.dropout) + sum(products[m.name] for m in mlp)
    # the penalty |A A^T - I| + |B^T B - I| of every linear keeps each r x r difference for its norm
    penalty = ranknum * 2 * allocation_bytes(r * r * a)
    cast = a != dt.compute
    # the input cast to the adapter dtype, B(...) and its scaled copy before the in-place add to the output
    forward = max(n * ((m.inp * a if cast else 0) + 2 * m.out * a) for m in matrices)
    biggest = max(rows * cols for _, rows, cols in tensors)
    note = (
        f"AdaLoRA init_r={r} on {', '.join(sorted({m.name for m in matrices}))}; importance scores "
        "(3 copies of the adapters, update_and_allocate) counted with the optimizer states"
    )
    return (
        Method(
            params,
            tensors,
            a,
            tk,
            in_blocks + penalty,
            in_blocks // layers,
            note,
            mlp_saved // layers,
            buffers=ranknum * allocation_bytes(dt.param),
            forward_transient=forward,
            frozen_params=ranknum,
            extra_states=3 * sum(k * allocation_bytes(rows * cols * a) for k, rows, cols in tensors),
            step_transient=3 * biggest * a,
        ),
        defaults + target_notes,
    )


def method(shape: ModelShape, adapter: AdapterSpec, tk: act.Tokens, dt: act.Dtypes, a: int) -> tuple[Method, list[str]]:
    """:func:`vera`, :func:`loha`, :func:`adalora`, :func:`tinylora` or :func:`osf` for the adapter's type, with
    its notes."""
    if adapter.type is AdapterType.vera:
        return vera(shape, adapter, tk, dt, a)
    if adapter.type is AdapterType.adalora:
        return adalora(shape, adapter, tk, dt, a)
    if adapter.type is AdapterType.tinylora:
        return tinylora(shape, adapter, tk, dt, a)
    if adapter.type is AdapterType.osf:
        return osf(shape, adapter, tk, dt, a)
    return loha(shape, adapter, tk, dt, a)
