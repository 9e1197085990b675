"""What the caching allocator counts beyond the weights of every catalog model as they load, in bf16.

``max_memory_allocated()`` counts whole blocks where the allocator hands a large block out unsplit
(vramcalc/core/allocator.py). For each transformer in ``vramcalc/spec/models.yaml`` this prints
vramcalc's figure (``allocator_rounding``: the weights in vramcalc's load order) and its share of the
weights. With ``--transformers`` it also builds the model with transformers on the meta device and
replays the tensors in the order ``model.to("cuda")`` visits them (``Module._apply``: a module's children
first, then its own parameters; a tied weight once) through the same allocator rules, an independent
check of the load order::

    python benchmarks/allocator_rounding.py
    /tmp/tracer-venv/bin/python benchmarks/allocator_rounding.py --transformers

The second needs torch and transformers (imported only then); the run quoted in docs/design.md used
transformers 5.24.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vramcalc.core.allocator import load_rounding_bytes, weights_rounding_bytes  # noqa: E402
from vramcalc.core.params import count_params  # noqa: E402
from vramcalc.families.resolve import resolve_workload  # noqa: E402
from vramcalc.spec.load import parse_spec  # noqa: E402

BF16 = 2


def apply_order(module: Any, seen: set[int] | None = None) -> list[int]:
    """Element counts of ``module``'s parameters in the order ``Module._apply`` moves them."""
    seen = set() if seen is None else seen
    out = [n for child in module.children() for n in apply_order(child, seen)]
    for param in module._parameters.values():
        if param is not None and id(param) not in seen:
            seen.add(id(param))
            out.append(param.numel())
    return out


def transformers_rounding(entry: dict[str, Any]) -> int:
    """The allocator's excess over the model's weights, placed in transformers' own order."""
    import model_catalog_counts

    model = model_catalog_counts.meta_model(entry)
    order = apply_order(model)
    config = entry.get("config", {})
    if config.get("model_type") == "t5" and config.get("tie_word_embeddings") is False:
        order.append(model.lm_head.weight.numel())  # the checkpoint's own LM head (model_catalog_counts.py)
    return load_rounding_bytes([(tuple(n * BF16 for n in order), 1)])


def main() -> int:
    import yaml

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--transformers", action="store_true", help="also replay transformers' own order")
    args = parser.parse_args()
    entries = yaml.safe_load((ROOT / "vramcalc" / "spec" / "models.yaml").read_text(encoding="utf-8"))
    shares, same, worst = [], 0, 0
    for entry in entries:
        if "model" in entry:  # ResNet: not replayed
            continue
        wl: dict[str, Any] = {"mode": "inference", "batch_size": 1, "seq_len": 16, "precision": "bf16"}
        try:
            shape = resolve_workload(parse_spec({"model": entry["id"], "workload": wl})).shape
        except Exception:  # a vision model: an image, not a sequence
            wl = {**wl, "seq_len": None, "image_size": 224}
            shape = resolve_workload(parse_spec({"model": entry["id"], "workload": wl})).shape
        ours, weights = weights_rounding_bytes(shape, BF16), count_params(shape) * BF16
        shares.append(ours / weights)
        line = f"{entry['id']:34} weights {weights / 1e9:9.3f} GB  rounding {ours / 2**20:9.2f} MiB"
        line += f" {ours / weights:7.3%}"
        if args.transformers:
            theirs = transformers_rounding(entry)
            same += theirs == ours
            worst = max(worst, abs(theirs - ours))
            line += f"  transformers order {theirs / 2**20:9.2f} MiB"
        print(line)
    print(
        f"{len(shares)} models: share of the weights median {statistics.median(shares):.3%}, "
        f"max {max(shares):.3%}, zero for {sum(s == 0 for s in shares)}"
    )
    if args.transformers:
        print(f"transformers' order gives the same bytes for {same} of {len(shares)}; largest difference {worst:,} B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
