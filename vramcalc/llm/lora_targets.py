"""LoRA targets: the module names of each model family and the short forms, resolved against a shape.

A target name is read as PEFT reads ``target_modules`` (``check_target_module_exists`` in
peft/tuners/tuners_utils.py): a module whose dotted name ends with ``.NAME``. So GPT-2's ``c_proj``
adapts both ``attn.c_proj`` (the attention output) and ``mlp.c_proj`` (the MLP's down projection).

Fused q/k/v projections (GPT-2 ``c_attn``, GPT-NeoX/Falcon/BLOOM ``query_key_value``, Phi-3
``qkv_proj``) are where the two frameworks differ:

* PEFT wraps whole modules: ``LoraLayer.__init__`` (peft/tuners/lora/layer.py) takes ``in_features``
  and ``out_features`` of the base layer (for GPT-2's ``Conv1D``, from ``weight.shape``) and
  ``LoraLayer.update_layer`` builds ``lora_A = nn.Linear(in_features, r)`` and
  ``lora_B = nn.Linear(r, out_features)``. An adapter on the fused projection therefore spans all of
  its outputs, ``q + 2 x kv`` wide, whichever of q, k and v the user meant: q/v-only LoRA does not
  exist there, and asking for q or v means the fused module.
* litgpt always fuses q, k and v (``CausalSelfAttention`` in litgpt/lora.py builds one
  ``LoRAQKVLinear``) and adapts only the enabled parts: ``LoRAQKVLinear.__init__`` with
  ``enable_lora = (lora_query, lora_key, lora_value)`` makes ``lora_A`` of
  ``(r x n_enabled, in_features)`` and ``lora_B`` of ``(sum of the enabled widths, r)``, the widths
  being ``head_size x n_head`` for q and ``head_size x n_query_groups`` for k and v. Its forward
  (``F.linear(lora_dropout(x), lora_A)``, then a grouped ``conv1d`` with ``lora_B``) keeps one input
  and one ``r x n_enabled`` wide intermediate. litgpt adapters have the model's dtype (no fp32 copy).
"""

from __future__ import annotations

from dataclasses import dataclass

from vramcalc.core.shape import ModelShape
from vramcalc.errors import SpecError

#: Projection keys used inside: q/k/v/o attention, qkv a fused attention input, gate/up/down the MLP,
#: gate_up a fused gate+up (Phi-3), q_a/q_b/kv_a/kv_b the latent-attention projections (DeepSeek).
ATTENTION = ("q", "k", "v", "o")
MLP = ("gate", "up", "down")
#: Short forms users write, expanded against the model: groups of projections.
GROUPS: dict[str, tuple[str, ...]] = {"attention": ATTENTION, "mlp": MLP, "all-linear": ATTENTION + MLP}

#: Module names as each family spells them (and the short forms) -> the projections they match.
TARGET_NAMES: dict[str, tuple[str, ...]] = {
    # Llama, Mistral, Qwen, Gemma, DeepSeek, Phi-2 (attention), OPT (attention):
    "q_proj": ("q",), "k_proj": ("k",), "v_proj": ("v",), "o_proj": ("o",),
    "gate_proj": ("gate",), "up_proj": ("up",), "down_proj": ("down",),
    # short forms; T5 attention (q, k, v, o):
    "q": ("q",), "k": ("k",), "v": ("v",), "o": ("o",), "gate": ("gate",), "up": ("up",), "down": ("down",),
    "qkv": ("qkv",),
    # BERT, ViT:
    "query": ("q",), "key": ("k",), "value": ("v",),
    # T5 MLP (v1.1 / Flan-T5 gated: wi_0, wi_1):
    "wi": ("up",), "wi_0": ("gate",), "wi_1": ("up",), "wo": ("down",),
    # fused attention input: GPT-NeoX, Falcon, BLOOM; GPT-2; Phi-3; MPT:
    "query_key_value": ("qkv",), "c_attn": ("qkv",), "qkv_proj": ("qkv",), "Wqkv": ("qkv",),
    # attention output: GPT-NeoX, Falcon, BLOOM, Phi-2 (``dense``); OPT; torchtune:
    "dense": ("o",), "out_proj": ("o",), "output_proj": ("o",),
    # GPT-2: ``attn.c_proj`` and ``mlp.c_proj`` both end with ``.c_proj``:
    "c_proj": ("o", "down"), "c_fc": ("up",),
    # plain MLPs: GPT-NeoX, Falcon, BLOOM; OPT, Phi-2; GPT-J:
    "dense_h_to_4h": ("up",), "dense_4h_to_h": ("down",), "fc1": ("up",), "fc2": ("down",),
    "fc_in": ("up",), "fc_out": ("down",),
    # DistilBERT attention and MLP:
    "q_lin": ("q",), "k_lin": ("k",), "v_lin": ("v",), "out_lin": ("o",), "lin1": ("up",), "lin2": ("down",),
    # Phi-3 fused gate and up:
    "gate_up_proj": ("gate_up",),
    # Mixtral experts, torchtune:
    "w1": ("gate",), "w3": ("up",), "w2": ("down",),
    # DeepSeek V2/V3 multi-head latent attention:
    "q_a_proj": ("q_a",), "q_b_proj": ("q_b",), "kv_a_proj_with_mqa": ("kv_a",), "kv_b_proj": ("kv_b",),
}  # fmt: skip
SHORT_FORMS = ("q", "k", "v", "o", "gate", "up", "down", "attention", "mlp", "all-linear")
#: Which saved input a target's lora_A shares when no cast copy is made (adapter dtype = activation dtype).
INPUT_SOURCE = {
    "q": "attn", "k": "attn", "v": "attn", "qkv": "attn", "q_a": "attn", "kv_a": "attn", "q_b": "q_b",
    "kv_b": "kv_b", "o": "o", "gate": "mlp", "up": "mlp", "gate_up": "mlp", "down": "down",
}  # fmt: skip
FUSED = ("c_attn", "query_key_value", "qkv_proj")


@dataclass(frozen=True)
class Mla:
    """Multi-head latent attention widths (DeepSeek V2/V3); ``q_rank`` 0 when q is not compressed."""

    kv_rank: int
    q_rank: int
    rope: int
    nope: int
    v_dim: int


def mla_of(shape: ModelShape) -> Mla | None:
    """The latent-attention widths of a shape: its ``mla`` part, or the ``kv_lora_rank``, ``q_lora_rank``,
    ``qk_rope_head_dim``, ``qk_nope_head_dim`` and ``v_head_dim`` fields; None for other attention."""
    src = getattr(shape, "mla", None) or shape
    kv_rank = getattr(src, "kv_lora_rank", None)
    if not kv_rank:
        return None
    return Mla(
        kv_rank=kv_rank,
        q_rank=getattr(src, "q_lora_rank", None) or 0,
        rope=getattr(src, "qk_rope_head_dim", None) or 0,
        nope=getattr(src, "qk_nope_head_dim", None) or 0,
        v_dim=getattr(src, "v_head_dim", None) or 0,
    )


def model_modules(shape: ModelShape) -> list[str]:
    """The module names this kind of model has, as its families spell them ("a/b": one module, two
    spellings)."""
    mla = mla_of(shape)
    if mla is not None:
        attn = ["q_a_proj", "q_b_proj"] if mla.q_rank else ["q_proj"]
        attn += ["kv_a_proj_with_mqa", "kv_b_proj", "o_proj"]
    elif shape.fused_qkv:
        attn = ["c_attn/query_key_value/qkv_proj", "c_proj/dense/o_proj"]
    else:
        attn = ["q_proj", "k_proj", "v_proj", "o_proj/dense/out_proj"]
    if shape.gated:
        mlp = ["gate_proj", "up_proj", "down_proj", "gate_up_proj"]
    elif shape.fused_qkv:
        mlp = ["c_fc/dense_h_to_4h", "dense_4h_to_h"]
    else:
        mlp = ["fc1/fc_in/lin1/up_proj", "fc2/fc_out/lin2/down_proj"]
    return attn + mlp


def _show(name: str) -> str:
    return repr(name if len(name) <= 40 else name[:37] + "...")


def _not_here(problem: str, shape: ModelShape) -> SpecError:
    modules = ", ".join(model_modules(shape))
    return SpecError(
        f"workload.adapter.targets: {problem}; this model's modules: {modules}; short forms: {', '.join(SHORT_FORMS)}"
    )


def _expand_group(keys: tuple[str, ...], shape: ModelShape) -> tuple[str, ...]:
    """A group (attention, mlp, all-linear) as this model has it: gate only in gated MLPs."""
    return tuple(k for k in keys if k != "gate" or shape.gated)


def _on_shape(name: str, key: str, shape: ModelShape, litgpt: bool) -> tuple[tuple[str, ...], list[str]]:
    """One projection key as this model (and framework) has it, and the note on what it adapts where the
    model has it otherwise (latent attention)."""
    mla = mla_of(shape)
    if key in ("q_a", "q_b", "kv_a", "kv_b"):
        if mla is None:
            raise _not_here(f"{_show(name)} is a latent-attention (MLA) module; this model has none", shape)
        if key in ("q_a", "q_b") and not mla.q_rank:
            raise _not_here(f"{_show(name)} exists only with model.q_lora_rank (q is not compressed here)", shape)
        return (key,), []
    if mla is not None and key in ("k", "v", "qkv"):
        return ("kv_a", "kv_b"), [f"adapter.targets: {name} on latent attention: kv_a_proj_with_mqa and kv_b_proj"]
    if mla is not None and key == "q":
        return (("q_a", "q_b") if mla.q_rank else ("q",)), []
    if key in ("gate", "gate_up") and not shape.gated:
        raise _not_here(f"{_show(name)} exists only in gated MLPs (mlp: swiglu or geglu)", shape)
    if key == "gate_up" and litgpt:
        return ("gate", "up"), []  # litgpt's LLaMAMLP keeps fc_1 and fc_2 apart
    if litgpt:
        return (("q", "k", "v") if key == "qkv" else (key,)), []  # LoRAQKVLinear: enable_lora per part
    if key == "qkv" and not shape.fused_qkv:
        raise _not_here(f"{_show(name)} is a fused projection; this model has separate q/k/v projections", shape)
    if key in ("q", "k", "v") and shape.fused_qkv:
        return ("qkv",), []  # the whole fused module (one note for them all: :func:`_named_targets`)
    return (key,), []


def resolve_targets(
    shape: ModelShape, targets: list[str] | str | None, litgpt: bool
) -> tuple[tuple[str, ...], list[str]]:
    """The projection keys an adapter's ``targets`` name on this model, in a stable order, each once; and the
    notes on what they adapt (the default's, when ``targets`` is not given)."""
    if targets is None:
        source = "litgpt's lora_query and lora_value" if litgpt else "PEFT's default for this kind of model"
        if mla_of(shape) is not None:
            source = "assumed: PEFT has no default for latent attention"
        whole = shape.fused_qkv and not litgpt and mla_of(shape) is None
        note = f"adapter.targets not given: {'query_key_value' if whole else 'q, v'} ({source})"
        keys, _ = _named_targets(shape, ["qkv"] if whole else ["q", "v"], litgpt)
        return keys, [note]  # the default's own note says it all
    return _named_targets(shape, targets, litgpt)


def _named_targets(shape: ModelShape, targets: list[str] | str, litgpt: bool) -> tuple[tuple[str, ...], list[str]]:
    """:func:`resolve_targets` of the names given."""
    notes: list[str] = []
    out: list[str] = []
    fused: list[str] = []  # names of q, k or v that PEFT reads as the whole fused module
    for name in [targets] if isinstance(targets, str) else targets:
        if name in GROUPS:
            expanded = _expand_group(GROUPS[name], shape)
            if shape.fused_qkv and not litgpt:
                expanded = tuple(dict.fromkeys("qkv" if k in ("q", "k", "v") else k for k in expanded))
            for key in expanded:
                keys, _ = _on_shape(name, key, shape, litgpt)
                out += keys
            continue
        if name not in TARGET_NAMES:
            raise _not_here(f"unknown module {_show(name)}", shape)
        for key in TARGET_NAMES[name]:
            keys, said = _on_shape(name, key, shape, litgpt)
            out += keys
            notes += said
            if key in ("q", "k", "v") and keys == ("qkv",):  # read as the whole fused module
                fused.append(name)
    if fused:
        width = shape.q_width + 2 * shape.kv_width
        notes.append(
            f"adapter.targets: {', '.join(dict.fromkeys(fused))} on a fused QKV projection: PEFT adapts the "
            f"whole module ({width:,} outputs: q, k and v); framework: litgpt adapts only the parts named"
        )
    return tuple(dict.fromkeys(out)), notes
