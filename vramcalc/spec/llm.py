"""Spec models of the LLM workload keys: ``quantization`` and ``adapter``.

Kept apart from :mod:`vramcalc.spec.models` (which imports them) so that the formula modules
(:mod:`vramcalc.llm.quantization`, :mod:`vramcalc.llm.adapters`) can import these models without a cycle.
The key names are a public contract, like every spec key.
"""

# Annotations are evaluated when defined (no `from __future__ import annotations`): pydantic would
# otherwise parse each field's annotation string while it builds the models, on every start.

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from vramcalc.choices import AdapterType, QuantMethod
from vramcalc.spec.section import SpecSection

if TYPE_CHECKING:
    pass

#: Methods that store groups of ``bits``-wide integers with per-group scales (GPTQ, AWQ, torchao int4).
GROUPED = (QuantMethod.int4, QuantMethod.gptq, QuantMethod.awq)
#: bitsandbytes 4-bit data types (blockwise absmax, optional double quantization).
BNB_4BIT = (QuantMethod.nf4, QuantMethod.fp4)

#: LoRA target names as Hugging Face (and torchtune) models spell them -> the projection they are.
#: q/k/v/o attention, qkv fused attention input, gate/up/down MLP (up is the only input of a plain MLP).
TARGET_ALIASES: dict[str, str] = {
    "q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "o",
    "gate_proj": "gate", "up_proj": "up", "down_proj": "down",
    "q": "q", "k": "k", "v": "v", "o": "o",  # T5
    "query": "q", "key": "k", "value": "v",  # BERT, ViT
    "wi": "up", "wi_0": "gate", "wi_1": "up", "wo": "down",  # T5 (v1.1 gated: wi_0, wi_1)
    "query_key_value": "qkv", "c_attn": "qkv", "qkv_proj": "qkv", "Wqkv": "qkv",  # NeoX/Falcon/BLOOM, GPT-2, Phi-3
    "dense": "o", "out_proj": "o", "output_proj": "o",  # NeoX/Falcon attention output, torchtune
    "dense_h_to_4h": "up", "dense_4h_to_h": "down", "c_fc": "up", "fc1": "up", "fc2": "down",
    "w1": "gate", "w3": "up", "w2": "down",  # Mixtral experts, torchtune
}  # fmt: skip
ALL_LINEAR = "all-linear"


class QuantizationSpec(SpecSection):
    """``quantization: nf4`` or ``{method: gptq, bits: 4, group_size: 128}`` (layouts: vramcalc/llm/quantization.py)."""

    method: QuantMethod
    bits: Literal[2, 3, 4, 8] | None = None
    group_size: Annotated[int, Field(strict=True, ge=-1, le=1 << 20)] | None = None
    double_quant: bool | None = None
    block_size: Annotated[int, Field(strict=True, gt=0, le=4096)] | None = None

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
        return self


class AdapterSpec(SpecSection):
    """``adapter: {type: lora, rank: 16, alpha: 32, targets: [q_proj, v_proj] | all-linear, dropout: 0.05}``."""

    type: AdapterType = AdapterType.lora
    rank: Annotated[int, Field(strict=True, gt=0, le=65536)]
    alpha: Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)] | None = None
    targets: list[str] | Literal["all-linear"] | None = None
    dropout: Annotated[float, Field(ge=0, lt=1)] = 0.0
    autocast_adapter_dtype: bool = True

    @field_validator("targets")
    @classmethod
    def _known_targets(cls, value: Any) -> Any:
        if isinstance(value, list):
            if not value:
                raise ValueError("targets: empty list (name modules such as q_proj, v_proj, or all-linear)")
            for name in value:
                if name not in TARGET_ALIASES:
                    known = ", ".join(sorted({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj"}))
                    raise ValueError(f"targets: unknown module {name!r} (e.g. {known}, down_proj, or all-linear)")
        return value


def name_to_mapping(value: Any, key: str) -> Any:
    """A bare method or type name (``quantization: nf4``) is short for ``{key: name}``."""
    return {key: value} if isinstance(value, str) else value
