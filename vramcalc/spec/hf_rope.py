"""A config's rotary scaling (``rope_scaling`` in transformers 4.x configs, ``rope_parameters`` in 5.x): it
changes no parameter, but a serving runtime sizes its cos/sin cache from it (vramcalc/stacks/vllm.py).
"""

from __future__ import annotations

import math
from typing import Any

from vramcalc.errors import SpecError
from vramcalc.spec.hf_reader import MAX_POSITIONS, Config, Reader
from vramcalc.units import quoted

#: The largest scaling factor read (Llama 4 Scout's is 16, DeepSeek V3's 40).
MAX_FACTOR = 10_000
#: transformers 5 writes one ``rope_parameters`` per attention kind when they differ (Gemma 3).
FULL, SLIDING = "full_attention", "sliding_attention"


def _factor(section: dict[str, Any], name: str, source: str) -> float | None:
    value = section.get("factor")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SpecError(f"{source}: {name}.factor: expected a number, got {quoted(value)}")
    if not 0 < value <= MAX_FACTOR:
        raise SpecError(f"{source}: {name}.factor: {quoted(value)} is out of range (above 0, up to {MAX_FACTOR:,})")
    return float(value)


def rope_scaling(config: Config, source: str) -> dict[str, Any] | None:
    """The ``model.rope_scaling`` section for ``config``: the rotary type (``mrope`` where it carries an
    ``mrope_section``), its factor and ``original_max_position_embeddings``, and ``local_rope`` where the
    sliding-window layers rotate with a base of their own (Gemma 3's ``rope_local_base_freq``); None for a
    config without rotary settings."""
    name = "rope_scaling" if isinstance(config.get("rope_scaling"), dict) else "rope_parameters"
    section = config.get(name)
    local = config.get("rope_local_base_freq") is not None
    if isinstance(section, dict) and isinstance(section.get(FULL), dict):
        sliding = section.get(SLIDING)
        local = isinstance(sliding, dict) and sliding.get("rope_theta") != section[FULL].get("rope_theta")
        name, section = f"{name}.{FULL}", section[FULL]
    if not isinstance(section, dict):
        if section is not None and name == "rope_parameters":
            raise SpecError(f"{source}: rope_parameters: expected a mapping, got {quoted(section)}")
        return {"type": "default", "local_rope": True} if local else None
    kind = section.get("rope_type", section.get("type", "default"))
    if not isinstance(kind, str) or not 0 < len(kind) <= 40:
        raise SpecError(f"{source}: {name}.rope_type: expected a short name, got {quoted(kind)}")
    if "mrope_section" in section and kind in ("default", "mrope"):
        kind = "mrope"
    if kind == "default":
        return {"type": "default", "local_rope": True} if local else None
    scaling: dict[str, Any] = {"type": kind}
    factor = _factor(section, name, source)
    if factor is not None:
        scaling["factor"] = factor
    original = Reader({**config, **section}, source).count(
        "original_max_position_embeddings", default=None, maximum=MAX_POSITIONS
    )
    if original is not None:
        scaling["original_max_position_embeddings"] = original
    if local:
        scaling["local_rope"] = True
    return scaling
