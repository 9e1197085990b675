"""What Lightning's ``BitsandbytesPrecision`` allocates under litgpt (``runtime: litgpt``, ``adapter.framework:
litgpt``), beyond what litgpt's model code does (:func:`vramcalc.core.hf_release.litgpt_model`), and a
quantized LM head's backward under any framework. Pure."""

from __future__ import annotations

from typing import Any

from vramcalc.choices import QuantMethod
from vramcalc.core.shape import ModelShape
from vramcalc.llm import bnb, quantization
from vramcalc.spec.llm import BNB_4BIT
from vramcalc.spec.models import Spec

Phases = dict[str, dict[str, int]]


def generate_phases(spec: Spec, shape: ModelShape, base: dict[str, int], phases: Phases) -> Phases:
    """litgpt's ``generate`` through Lightning's ``BitsandbytesPrecision``: the prefill's 4-bit dequantization
    also holds the fp16 weight before bitsandbytes 0.50 (:func:`vramcalc.llm.bnb.lightning_load_copy`), and
    a ``load`` phase: the model is built on the GPU, each linear quantized as it is made, and loading the
    checkpoint quantizes every weight again from its fp16 copy, the whole model allocated
    (``_quantize_on_load_hook``): the largest weight's fp16 copy and its new quantized form beside it
    (:func:`vramcalc.llm.quantization.requantize_bytes`)."""
    q = spec.workload.quantization
    if q is None or q.method not in (*BNB_4BIT, QuantMethod.int8):
        return phases
    largest = max(m.out * m.inp for m in quantization.quantized_matrices(shape, q))
    prefill = {**phases["prefill"]}
    if phases["prefill"]["temporaries"]:
        prefill["temporaries"] += bnb.lightning_load_copy(spec.workload, largest)
    load = dict.fromkeys(prefill, 0) | {  # before any matmul: no cuBLAS workspace, no cache yet
        "parameters": base["parameters"],
        "allocator_rounding": base.get("allocator_rounding", 0),
        "temporaries": quantization.requantize_bytes(q, largest),
    }
    return {"load": load, "prefill": prefill, "decode": phases["decode"]}


def head_dequant(wl: Any, shape: ModelShape, compute: int, litgpt: bool) -> int:
    """A bitsandbytes LM head (``quantization.lm_head``) in its backward, next to the loss gradients: the
    weight dequantized at the compute dtype (``MatMul4Bit.backward``; LLM.int8's ``CB.to(A.dtype)``) and,
    from Lightning's fp16 quantization copy before bitsandbytes 0.50, a 4-bit one at fp16 too
    (:func:`vramcalc.llm.bnb.lightning_load_copy`)."""
    q = wl.quantization
    bnb_methods = (*BNB_4BIT, QuantMethod.int8)
    head = quantization.head_matrix(shape, q) if q is not None and q.method in bnb_methods else None
    if head is None:
        return 0
    weight = head.out * head.inp
    return weight * compute + (bnb.lightning_load_copy(wl, weight) if litgpt else 0)
