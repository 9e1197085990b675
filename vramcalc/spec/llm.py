"""Spec models of the LLM workload keys: ``quantization`` and ``adapter``.

Kept apart from :mod:`vramcalc.spec.models` (which imports them) so that the formula modules
(:mod:`vramcalc.llm.quantization`, :mod:`vramcalc.llm.adapters`) can import these models without a cycle.
The key names are a public contract, like every spec key.
"""

# Annotations are evaluated when defined (no `from __future__ import annotations`): pydantic would
# otherwise parse each field's annotation string while it builds the models, on every start.

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from vramcalc.choices import AdapterType, QuantMethod
from vramcalc.spec.section import SpecSection

if TYPE_CHECKING:
    pass

#: Methods that store groups of ``bits``-wide integers with per-group scales (GPTQ, AWQ, torchao int4).
GROUPED = (QuantMethod.int4, QuantMethod.gptq, QuantMethod.awq)
#: bitsandbytes 4-bit data types (blockwise absmax, optional double quantization).
BNB_4BIT = (QuantMethod.nf4, QuantMethod.fp4)
#: GGUF file types (llama.cpp ``llama-quantize`` presets; per-tensor types in vramcalc/stacks/gguf.py).
GGUF = tuple(m for m in QuantMethod if m.value.startswith("q") and m.value[1].isdigit())
#: ggml tensor types accepted by ``output_tensor_type`` / ``token_embedding_type``.
GgmlTypeName = Literal[
    "f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"
]

#: The largest adapter rank a spec (or ``--lora``/``--qlora``) may give.
MAX_RANK = 65536
ALL_LINEAR = "all-linear"
#: PEFT's ``AdaLoraConfig`` defaults: ``init_r`` and ``target_r``.
ADALORA_INIT_R, ADALORA_TARGET_R = 12, 8


def _check_names(value: list[str], key: str) -> list[str]:
    if not value:
        raise ValueError(f"{key}: empty list (name modules such as q_proj, mlp, attention)")
    for name in value:
        if not isinstance(name, str) or not name or len(name) > 100 or not name.isprintable():
            raise ValueError(f"{key}: a module name is empty, too long or not printable")
    return value


class SkipRange(SpecSection):
    """``{layers: [0, 125], modules: [mlp]}``: modules kept unquantized in the blocks ``first`` .. ``last``
    (inclusive, counted from 0)."""

    model_config = ConfigDict(defer_build=True)  # built when a spec first gives the section

    layers: tuple[Annotated[int, Field(strict=True, ge=0)], Annotated[int, Field(strict=True, ge=0)]]
    modules: list[str]

    @field_validator("modules")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        return _check_names(value, "skip_modules.modules")

    @model_validator(mode="after")
    def _ordered(self) -> "SkipRange":
        if self.layers[0] > self.layers[1]:
            raise ValueError("skip_modules.layers: [first, last] with first <= last")
        return self


class QuantizationSpec(SpecSection):
    """``quantization: nf4`` or ``{method: gptq, bits: 4, group_size: 128}`` (layouts: vramcalc/llm/quantization.py)."""

    model_config = ConfigDict(defer_build=True)  # built when a spec first gives the section

    method: QuantMethod
    bits: Literal[2, 3, 4, 8] | None = None
    group_size: Annotated[int, Field(strict=True, ge=-1, le=1 << 20)] | None = None
    double_quant: bool | None = None
    block_size: Annotated[int, Field(strict=True, gt=0, le=4096)] | None = None
    #: bitsandbytes 4-bit only: ``bnb_4bit_compute_dtype`` (vramcalc/stacks/bnb.py); None: the model's dtype.
    compute_dtype: Literal["fp16", "bf16", "fp32"] | None = None
    #: GGUF only: llama-quantize's --output-tensor-type, --token-embedding-type and --imatrix.
    output_tensor_type: GgmlTypeName | None = None
    token_embedding_type: GgmlTypeName | None = None
    imatrix: bool | None = None
    #: Quantize the output layer too (torchao ``quantize_`` on every nn.Linear, GPTQ ``lm_head: true``);
    #: None/false: the LM head stays at the parameter dtype.
    lm_head: bool | None = None
    #: Modules kept at the parameter dtype (bitsandbytes ``llm_int8_skip_modules``, transformers
    #: ``modules_to_not_convert``, vLLM / compressed-tensors ``ignore``): names, or ranges of layers.
    skip_modules: list[str | SkipRange] | None = None
    #: bitsandbytes 4-bit only: the dtype the packed 4-bit pairs are stored in (``bnb_4bit_quant_storage``).
    #: FSDP and ZeRO-3 shard float tensors only, so sharding a 4-bit base needs a float storage (bf16 as in
    #: FSDP-QLoRA). None: uint8, bitsandbytes' default, or bf16 where the parameters are sharded.
    quant_storage: Literal["uint8", "bf16", "fp16", "fp32"] | None = None

    @field_validator("skip_modules")
    @classmethod
    def _skip_names(cls, value: Any) -> Any:
        if value is not None:
            _check_names([v for v in value if isinstance(v, str)] or ["-"], "skip_modules")
            if not value:
                raise ValueError("skip_modules: empty list (name modules such as q_proj, mlp, attention)")
        return value

    @model_validator(mode="after")
    def _keys_fit_method(self) -> "QuantizationSpec":
        grouped, bnb4 = self.method in GROUPED, self.method in BNB_4BIT
        if self.bits is not None and not grouped:
            raise ValueError(f"bits: only for {', '.join(m.value for m in GROUPED)} (got method {self.method.value})")
        if self.group_size is not None and not grouped:
            raise ValueError(f"group_size: only for {', '.join(m.value for m in GROUPED)}")
        if self.group_size == 0:
            raise ValueError("group_size: must be positive, or -1 for one group per input row")
        if (self.double_quant is not None or self.block_size is not None) and not bnb4:
            raise ValueError("double_quant: only for the bitsandbytes 4-bit methods nf4 and fp4")
        if self.compute_dtype is not None and not bnb4:
            raise ValueError("compute_dtype: only for the bitsandbytes 4-bit methods nf4 and fp4")
        if self.quant_storage is not None and not bnb4:
            raise ValueError("quant_storage: only for the bitsandbytes 4-bit methods nf4 and fp4")
        gguf_keys = (self.output_tensor_type, self.token_embedding_type, self.imatrix)
        if any(k is not None for k in gguf_keys) and self.method not in GGUF:
            raise ValueError(
                "output_tensor_type, token_embedding_type, imatrix: only for GGUF file types "
                "(q4_0 ... q8_0, q2_k ... q6_k)"
            )
        if self.method in GGUF and (self.lm_head is not None or self.skip_modules is not None):
            raise ValueError(
                "lm_head, skip_modules: not for GGUF file types (llama.cpp picks each tensor's type; "
                "use output_tensor_type)"
            )
        if self.lm_head and self.skip_modules and "lm_head" in self.skip_modules:
            raise ValueError("skip_modules: lists lm_head while lm_head: true quantizes it")
        return self


#: Keys each adapter type takes (besides ``type``); any other key given is an error.
ADAPTER_KEYS = {
    AdapterType.lora: ("rank", "alpha", "targets", "dropout", "autocast_adapter_dtype", "framework", "prepare_kbit"),
    AdapterType.dora: ("rank", "alpha", "targets", "dropout", "autocast_adapter_dtype", "prepare_kbit"),
    AdapterType.lora_fa: ("rank", "alpha", "targets", "dropout", "autocast_adapter_dtype", "prepare_kbit"),
    AdapterType.ia3: ("targets", "feedforward_modules", "autocast_adapter_dtype"),
    AdapterType.prompt_tuning: ("num_virtual_tokens",),
    AdapterType.prefix_tuning: ("num_virtual_tokens", "prefix_projection", "encoder_hidden_size"),
    AdapterType.ln_tuning: (),
    AdapterType.vera: ("rank", "targets", "dropout", "autocast_adapter_dtype"),
    AdapterType.loha: ("rank", "alpha", "targets", "autocast_adapter_dtype"),
    AdapterType.adalora: ("init_r", "target_r", "alpha", "targets", "dropout", "autocast_adapter_dtype"),
    AdapterType.tinylora: ("rank", "u", "targets", "dropout", "autocast_adapter_dtype"),
    AdapterType.osf: ("rank", "targets", "autocast_adapter_dtype"),
    AdapterType.boft: ("block_size", "block_num", "permutation", "targets", "dropout", "autocast_adapter_dtype"),
}  # fmt: skip
#: Keys a type cannot do without.
REQUIRED_KEYS = {
    AdapterType.lora: ("rank",),
    AdapterType.dora: ("rank",),
    AdapterType.lora_fa: ("rank",),
    AdapterType.prompt_tuning: ("num_virtual_tokens",),
    AdapterType.prefix_tuning: ("num_virtual_tokens",),
}


class AdapterSpec(SpecSection):
    """``adapter: {type: lora, rank: 16, alpha: 32, targets: [q_proj, v_proj] | all-linear, dropout: 0.05}``.

    Other PEFT methods (vramcalc/stacks/peft_methods.py): ``{type: dora, rank: 16, ...}`` (LoRA keys),
    ``{type: ia3, targets: [...], feedforward_modules: [...]}``, ``{type: prompt_tuning, num_virtual_tokens: 20}``,
    ``{type: prefix_tuning, num_virtual_tokens: 20, prefix_projection: false, encoder_hidden_size: ...}``,
    ``{type: ln_tuning}``, ``{type: vera, rank: 256, targets: [...]}``, ``{type: loha, rank: 8, targets: [...]}``,
    ``{type: adalora, init_r: 12, target_r: 8, targets: [...]}``, ``{type: tinylora, rank: 2, u: 64, targets: [...]}``
    (vramcalc/stacks/peft_more.py);
    ``{type: boft, block_size: 4 | block_num: 8, permutation: gpu | host, targets: [...]}``
    (vramcalc/stacks/peft_boft.py); ``{type: lora_fa, rank: 16, ...}`` (LoRA keys but ``framework``).

    ``targets`` names modules as the model's family spells them (q_proj, c_attn, query_key_value, ...)
    or by short forms (q, k, v, o, gate, up, down, attention, mlp, all-linear); they are checked against
    the model when it is estimated (vramcalc/llm/lora_targets.py). ``framework`` picks how a fused
    q/k/v projection is adapted: ``peft`` (the whole module) or ``litgpt`` (only the parts named); ``torchtune``
    models torchtune's LoRA recipe (``LoRALinear`` at the model's dtype, QLoRA on torchao's ``NF4Tensor``:
    vramcalc/stacks/torchtune_lora.py)."""

    model_config = ConfigDict(defer_build=True)  # built when a spec first gives the section

    type: AdapterType = AdapterType.lora
    rank: Annotated[int, Field(strict=True, gt=0, le=MAX_RANK)] | None = None
    alpha: Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)] | None = None
    targets: list[str] | Literal["all-linear"] | None = None
    dropout: Annotated[float, Field(ge=0, lt=1)] = 0.0
    #: None: PEFT's default (fp32 adapters on a 16-bit base); litgpt keeps the model's dtype.
    autocast_adapter_dtype: bool | None = None
    framework: Literal["peft", "litgpt", "torchtune"] = "peft"
    #: PEFT's prepare_model_for_kbit_training (vramcalc/stacks/bnb.py); None: on for PEFT on a bitsandbytes base.
    prepare_kbit: bool | None = None
    #: IA3: the targets whose input (not output) is scaled; None: the targets in the MLP's down projection.
    feedforward_modules: list[str] | None = None
    #: Prompt and prefix tuning: trained virtual tokens.
    num_virtual_tokens: Annotated[int, Field(strict=True, gt=0, le=10**6)] | None = None
    #: Prefix tuning: the prefixes come from a two-layer MLP (PEFT ``prefix_projection``), hidden width below.
    prefix_projection: bool | None = None
    encoder_hidden_size: Annotated[int, Field(strict=True, gt=0, le=10**7)] | None = None
    #: AdaLoRA: the rank every adapted linear starts at (its tensors' size) and the average rank the pruning
    #: aims at (PEFT ``init_r``, ``target_r``; defaults 12 and 8). PEFT masks pruned ranks, it does not shrink
    #: the tensors, so ``target_r`` does not change the memory.
    init_r: Annotated[int, Field(strict=True, gt=0, le=65536)] | None = None
    #: TinyLoRA: the trained vector's length per adapted linear (PEFT ``u``; default 64).
    u: Annotated[int, Field(strict=True, gt=0, le=65536)] | None = None
    target_r: Annotated[int, Field(strict=True, gt=0, le=65536)] | None = None
    #: BOFT: the size of the orthogonal blocks (PEFT ``boft_block_size``, default 4), or their number per
    #: linear (``boft_block_num``); one of the two.
    block_size: Annotated[int, Field(strict=True, gt=0, le=65536)] | None = None
    block_num: Annotated[int, Field(strict=True, gt=0, le=65536)] | None = None
    #: BOFT: where PEFT's dense ``in x in`` permutation buffers live: ``gpu`` when the model is moved after
    #: ``get_peft_model`` (the Trainer moves it), ``host`` when it was loaded onto the GPU and never moved.
    permutation: Literal["gpu", "host"] = "gpu"

    @model_validator(mode="after")
    def _keys_fit_type(self) -> "AdapterSpec":
        allowed = ADAPTER_KEYS[self.type]
        for key in sorted(self.model_fields_set - {"type"}):
            if key not in allowed:
                fits = ", ".join(allowed) if allowed else "no other key"
                raise ValueError(f"{key}: not a key of adapter type {self.type.value} (it takes {fits})")
        for key in REQUIRED_KEYS.get(self.type, ()):
            if getattr(self, key) is None:
                raise ValueError(f"{key}: required for adapter type {self.type.value}")
        if self.encoder_hidden_size is not None and not self.prefix_projection:
            raise ValueError("encoder_hidden_size: only valid with prefix_projection: true")
        if self.block_size is not None and self.block_num is not None:
            raise ValueError("block_num: give block_size or block_num, not both (PEFT's BOFT takes one)")
        if self.target_r is not None and self.target_r > (self.init_r or ADALORA_INIT_R):
            raise ValueError(f"target_r: at most init_r (default {ADALORA_INIT_R}): pruning cannot raise a rank")
        if self.feedforward_modules is not None:
            _check_names(self.feedforward_modules, "feedforward_modules")
        return self

    @field_validator("targets")
    @classmethod
    def _known_targets(cls, value: Any) -> Any:
        if isinstance(value, list):
            if not value:
                raise ValueError("targets: empty list (name modules such as q_proj, v_proj, or all-linear)")
            for name in value:
                if not name or len(name) > 100 or not name.isprintable():
                    raise ValueError("targets: a module name is empty, too long or not printable")
        return value


def name_to_mapping(value: Any, key: str) -> Any:
    """A bare method or type name (``quantization: nf4``) is short for ``{key: name}``."""
    return {key: value} if isinstance(value, str) else value


#: The quantizations litgpt runs through Lightning's ``BitsandbytesPrecision`` (its ``bnb.*`` modes).
LITGPT_QUANTIZATIONS = ("nf4", "fp4", "int8")
#: What litgpt's ``generate`` also runs: its own ``gptq.int4`` (``ColBlockQuantizedLinear``, litgpt 2023;
#: vramcalc/stacks/litgpt.py), which replaces every ``nn.Linear`` too.
LITGPT_GENERATE_QUANTIZATIONS = (*LITGPT_QUANTIZATIONS, "gptq")


def litgpt_defaults(data: Any) -> Any:
    """A workload mapping with litgpt's QLoRA default: Lightning's ``BitsandbytesPrecision`` replaces every
    ``nn.Linear`` while the model is built, the LM head included, so with ``adapter.framework: litgpt`` or
    ``runtime: litgpt`` a bitsandbytes ``quantization`` (4-bit, or ``int8``) quantizes the output layer
    unless ``lm_head`` is given; so does ``gptq`` with ``runtime: litgpt`` (its ``gptq.int4``)."""
    if not isinstance(data, dict):
        return data
    adapter, quantization = data.get("adapter"), name_to_mapping(data.get("quantization"), "method")
    runtime = data.get("runtime") == "litgpt"
    litgpt = runtime or (isinstance(adapter, dict) and adapter.get("framework") == "litgpt")
    if not litgpt or not isinstance(quantization, dict):
        return data
    methods = LITGPT_GENERATE_QUANTIZATIONS if runtime else LITGPT_QUANTIZATIONS
    if quantization.get("method") not in methods or "lm_head" in quantization:
        return data
    return {**data, "quantization": {**quantization, "lm_head": True}}


def litgpt_gptq(wl: Any) -> bool:
    """litgpt's own ``gptq.int4`` (``runtime: litgpt`` with ``quantization: gptq``)."""
    q = wl.quantization
    return wl.runtime is not None and wl.runtime.value == "litgpt" and q is not None and q.method.value == "gptq"
