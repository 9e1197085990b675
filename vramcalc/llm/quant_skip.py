"""Modules kept unquantized (``quantization.skip_modules``), resolved against a model's blocks.

Loaders name the modules they leave at 16 bits: bitsandbytes through transformers'
``llm_int8_skip_modules``, transformers' ``modules_to_not_convert`` (FP8, fbgemm_fp8, AWQ), vLLM and
compressed-tensors' ``ignore``. A name is matched as those lists match it, by the module's name (the
names of :mod:`vramcalc.llm.lora_targets`: ``q_proj``, ``c_attn``, ``w2``, ... or the short forms q, k,
v, o, gate, up, down, attention, mlp); ``lm_head`` keeps the output layer (the default). A range
``{layers: [first, last], modules: [...]}`` keeps the modules of those blocks only, as Meta's
Llama-3.1-405B FP8 checkpoint does: attention in bf16 everywhere and the MLPs of the first and last
blocks (Llama 3 paper, section 6.2; the checkpoint's ``modules_to_not_convert``).
"""

from __future__ import annotations

from dataclasses import dataclass

from vramcalc.core.shape import ModelShape
from vramcalc.errors import SpecError
from vramcalc.llm.lora_targets import resolve_targets
from vramcalc.spec.llm import QuantizationSpec, SkipRange

#: Latent-attention keys, counted as the q/k/v projections the quantized layout uses.
_MLA = {"q_a": ("q",), "q_b": ("q",), "kv_a": ("k", "v"), "kv_b": ("k", "v")}
HEAD = "lm_head"
KEY = "workload.quantization.skip_modules"


@dataclass(frozen=True)
class Skip:
    """Projection keys (q, k, v, o, qkv, gate, up, down) kept unquantized, in ``layers`` (None: every block)."""

    keys: frozenset[str]
    layers: tuple[int, int] | None


def _keys(shape: ModelShape, names: list[str]) -> frozenset[str]:
    names = [n for n in names if n != HEAD]
    if not names:
        return frozenset()
    try:
        keys, _ = resolve_targets(shape, names, False)
    except SpecError as err:
        raise SpecError(str(err).replace("workload.adapter.targets", KEY)) from None
    out: set[str] = set()
    for k in keys:
        out.update(_MLA.get(k, ("gate", "up") if k == "gate_up" else (k,)))
    return frozenset(out)


def resolve_skips(shape: ModelShape, q: QuantizationSpec) -> list[Skip]:
    """The spec's ``skip_modules`` on this model (ranges checked against its blocks)."""
    from vramcalc.choices import Architecture

    out: list[Skip] = []
    for item in q.skip_modules or []:
        if isinstance(item, str):
            out.append(Skip(_keys(shape, [item]), None))
            continue
        assert isinstance(item, SkipRange)
        if shape.architecture is not Architecture.decoder or shape.moe is not None:
            raise SpecError(f"{KEY}: layer ranges are modelled for dense decoder-only models (give module names)")
        if item.layers[1] >= shape.layers:
            raise SpecError(
                f"{KEY}: layers {list(item.layers)} beyond the model's {shape.layers} blocks (0 .. {shape.layers - 1})"
            )
        out.append(Skip(_keys(shape, item.modules), item.layers))
    return out


def kept_layers(skips: list[Skip], key: str, layers: int) -> int:
    """How many of ``layers`` blocks keep projection ``key`` unquantized."""
    if any(s.layers is None and key in s.keys for s in skips):
        return layers
    kept: set[int] = set()
    for s in skips:
        if s.layers is not None and key in s.keys:
            kept.update(range(s.layers[0], min(s.layers[1], layers - 1) + 1))
    return len(kept)
