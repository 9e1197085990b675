"""The storage layout of each quantization method: one row per method, naming the stack module whose layout
it is (:class:`~vramcalc.llm.quantization.QuantLayout`), so only the spec's own stack is imported."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from vramcalc.choices import QuantMethod
from vramcalc.spec.llm import GGUF

if TYPE_CHECKING:
    from vramcalc.llm.quantization import QuantLayout

#: Each method's (stack module, layout).
QUANT_LAYOUTS: dict[QuantMethod, tuple[str, str]] = {
    QuantMethod.int8: ("vramcalc.stacks.bnb", "INT8"),
    QuantMethod.nf4: ("vramcalc.stacks.bnb", "FOUR_BIT"),
    QuantMethod.fp4: ("vramcalc.stacks.bnb", "FOUR_BIT"),
    QuantMethod.int4: ("vramcalc.stacks.torchao", "INT4"),
    QuantMethod.int8_weight_only: ("vramcalc.stacks.torchao", "INT8"),
    QuantMethod.int8_dynamic_activation_int8_weight: ("vramcalc.stacks.torchao", "INT8"),
    QuantMethod.gptq: ("vramcalc.stacks.gptq", "GPTQ"),
    QuantMethod.awq: ("vramcalc.stacks.gptq", "AWQ"),
    QuantMethod.fp8: ("vramcalc.stacks.fp8", "FP8"),
    **dict.fromkeys(GGUF, ("vramcalc.stacks.gguf", "GGUF")),
}


def quant_layout(method: QuantMethod, litgpt: bool = False, torchtune: bool = False) -> QuantLayout:
    """The layout a quantization method stores weights in; ``litgpt``: a ``gptq`` quantization is litgpt's own
    ``gptq.int4`` (vramcalc/stacks/litgpt.py); ``torchtune``: ``nf4`` is torchao's ``NF4Tensor`` under
    torchtune's QLoRA (vramcalc/stacks/torchtune_lora.py)."""
    if litgpt and method is QuantMethod.gptq:
        from vramcalc.stacks import litgpt as litgpt_stack

        return litgpt_stack.GPTQ_INT4
    if torchtune and method is QuantMethod.nf4:
        from vramcalc.stacks import torchtune_lora

        return torchtune_lora.NF4
    module, name = QUANT_LAYOUTS[method]
    layout: QuantLayout = getattr(importlib.import_module(module), name)
    return layout
