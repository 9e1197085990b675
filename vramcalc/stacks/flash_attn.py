"""FlashAttention-2 as transformers runs it: ``attention: flash`` is ``attn_implementation="flash_attention_2"``
with the flash-attn 2 package (Dao-AILab/flash-attention).

transformers 5 (``integrations/flash_attention.py``, ``modeling_flash_attention_utils.py``): the attention
transposes Q, K and V to (batch, seq, heads, head_dim) (views); fp32 inputs are cast to a 16-bit target dtype
first (``get_target_dtype``: the autocast dtype, else the dtype a quantized model was loaded in, else the
first linear's weight dtype; ``fa_peft_integration_check`` casts), which is the case of PEFT's
``prepare_model_for_kbit_training``, whose fp32 norms make the attention inputs fp32; a batch with padding is
unpadded into the variable-length kernel (not modelled: every sequence is taken full, as vramcalc's batches
are). ``_flash_attention_forward`` then calls ``flash_attn_func``.

flash-attn 2 (``flash_attn/flash_attn_interface.py``, ``FlashAttnFunc``; ``csrc/flash_attn/flash_api.cpp``
``mha_fwd``/``mha_bwd``): the forward saves Q, K, V (zero-padded to a multiple of 8 in the head dimension, a
copy only where it is not one), the output (``empty_like(q)``, laid out as the query, heads before positions,
so the model's ``reshape`` before ``o_proj`` copies it), an fp32 logsumexp (batch x heads x seq) and the RNG
state; grouped K/V are read as they are (no ``repeat_kv``), and no heads x seq^2 tensor exists. The backward
allocates dQ, dK and dV, an fp32 ``softmax_d`` (batch x heads x seq rounded up to 128) and ``dq_accum``
(batch x seq rounded up to 128 x heads x head_dim rounded up to 32), and with grouped K/V ``dk_expanded`` and
``dv_expanded`` for every query head, summed into dK and dV before it returns. The kernels take fp16 and bf16
only and head dimensions up to 256.

Where transformers would refuse (a model class with ``_supports_flash_attn = False``, ``modeling_utils.py``
``_flash_attn_can_dispatch``) or flash-attn could not run, the spec is refused with one line naming
``workload.attention``. The allocator-level check is ``benchmarks/tracer_flash.py``
(``benchmarks/data/tracer_flash.json``).
"""

from __future__ import annotations

from dataclasses import replace

from vramcalc.choices import AdapterType, Architecture, Attention, Checkpointing, Precision, Runtime
from vramcalc.core.code import FusedAttention, ModelCode
from vramcalc.core.shape import ModelShape
from vramcalc.errors import SpecError
from vramcalc.spec.models import Spec

#: flash-attn 2's kernels run in fp16 or bf16 (``mha_fwd``: "FlashAttention only support fp16 and bf16 data
#: type"), 2 bytes an element; the output is ``empty_like(q)`` of the transposed (head-major) query; grouped K/V
#: gradients are written per query head (``dk_expanded``, ``dv_expanded``) and summed.
FLASH_ATTN_2 = FusedAttention(element_bytes=2, output_copied=True, grouped_grads_expanded=True)
#: ``mha_fwd``/``mha_bwd``: "FlashAttention forward only supports head dimension at most 256".
MAX_HEAD_DIM = 256
NOTE = (
    "attention: flash: transformers' flash_attention_2 with flash-attn 2: Q, K, V (fp32 inputs cast to 16 bits "
    "first), the output and an fp32 logsumexp per head and query saved; no heads x seq^2 scores; batches "
    "without padding"
)


def refusal(spec: Spec, shape: ModelShape) -> str | None:
    """Why transformers' flash_attention_2 cannot run this spec, in words (None: it runs)."""
    wl = spec.workload
    if shape.architecture is Architecture.resnet:
        return "a ResNet has no attention"
    if shape.architecture is Architecture.encoder_decoder:
        return "transformers' T5 classes do not support flash attention (_supports_flash_attn is False)"
    if spec.model.model_type == "bloom":  # ALiBi: read at transformers 5.25
        return "transformers' BLOOM classes do not support flash attention (_supports_flash_attn is unset)"
    if shape.mla is not None:
        return "multi-head latent attention (its value head is narrower than its key head) is not modelled with it"
    if shape.head_dim > MAX_HEAD_DIM:
        return f"flash-attn takes head dimensions up to {MAX_HEAD_DIM}, not {shape.head_dim}"
    if wl.precision is Precision.fp32:
        return (
            "flash-attn runs fp16 and bf16 only, and with precision fp32 transformers has no 16-bit dtype to cast "
            "the attention inputs to; use precision bf16 or amp-bf16"
        )
    if wl.runtime is Runtime.litgpt or (wl.adapter is not None and wl.adapter.framework == "litgpt"):
        return "litgpt runs its own attention, not transformers' flash_attention_2"
    if wl.gradient_checkpointing is Checkpointing.selective_op:
        return "selective-op checkpointing is torchtitan's, whose model does not run transformers' attention"
    if wl.adapter is not None and wl.adapter.type is AdapterType.prefix_tuning:
        return "prefix tuning's masked attention over the virtual positions is not modelled with it"
    return None


def runs(spec: Spec, shape: ModelShape) -> bool:
    """Whether ``attention: flash`` would run this spec (what a note may suggest)."""
    return refusal(spec, shape) is None


def check_spec(spec: Spec, shape: ModelShape) -> None:
    """``attention: flash`` where it cannot run, refused with one line naming the key."""
    why = refusal(spec, shape)
    if why is not None:
        raise SpecError(f"workload.attention: flash is not possible here: {why}")


def model_code(code: ModelCode, attention: Attention) -> tuple[ModelCode, list[str]]:
    """The model's code facts with flash-attn 2's kernel where ``attention: flash`` asks for it, and its note."""
    if attention is not Attention.flash:
        return code, []
    return replace(code, flash=FLASH_ATTN_2), [NOTE]
