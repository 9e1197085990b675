"""Parameter counts of the bundled model catalog, from transformers itself.

Each entry's ``config`` of ``vramcalc/spec/models.yaml`` is instantiated with transformers on the meta
device (no weights, no memory): its ``architectures`` class, else the model type's bare model. The
count, ``sum(p.numel() for p in model.parameters())``, is compared with the entry's recorded
``meta_params`` and with the model card's ``published_params``. ResNet entries (a vramcalc model
mapping, not a transformers config) are counted through transformers' ``ResNetConfig`` of the same depth.

    python benchmarks/model_catalog_counts.py [ID ...] [--write]

Needs torch and transformers (imported only when run). ``--write`` records the counts as ``meta_params``
in the catalog file (the header names the transformers version they come from).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CATALOG = ROOT / "vramcalc" / "spec" / "models.yaml"

#: ResNet depth -> (block type, blocks per stage, stage widths), as microsoft/resnet-* configs have them.
RESNETS = {
    18: ("basic", [2, 2, 2, 2], [64, 128, 256, 512]),
    34: ("basic", [3, 4, 6, 3], [64, 128, 256, 512]),
    50: ("bottleneck", [3, 4, 6, 3], [256, 512, 1024, 2048]),
    101: ("bottleneck", [3, 4, 23, 3], [256, 512, 1024, 2048]),
    152: ("bottleneck", [3, 8, 36, 3], [256, 512, 1024, 2048]),
}


def published_tolerance(text: str) -> tuple[float, float]:
    """(value, half a unit of its last digit) of a published figure: "8.03B", "355M", "70,426,624"."""
    text = text.replace(",", "").strip()
    scale = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}.get(text[-1:], 1.0)
    digits = text.rstrip("KMBT")
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    return float(digits) * scale, 0.5 * scale * 10.0**-decimals


#: Class-name endings -> the auto class that builds that head, for a class transformers names differently
#: (PhiMoEForCausalLM is PhimoeForCausalLM there).
AUTO_HEADS = {
    "ForCausalLM": "AutoModelForCausalLM",
    "LMHeadModel": "AutoModelForCausalLM",
    "ForMaskedLM": "AutoModelForMaskedLM",
    "ForConditionalGeneration": "AutoModelForSeq2SeqLM",
    "ForImageClassification": "AutoModelForImageClassification",
}


def model_class(transformers: Any, architectures: list[str]) -> Any:
    """A callable building the model the config's ``architectures`` names (the bare model when none)."""
    if not architectures:
        return transformers.AutoModel.from_config
    name = architectures[0]
    if hasattr(transformers, name):
        return getattr(transformers, name)
    for ending, auto in AUTO_HEADS.items():
        if name.endswith(ending):
            return getattr(transformers, auto).from_config
    if name.endswith("Model"):
        return transformers.AutoModel.from_config
    raise ValueError(f"no transformers class for {name}")


def meta_count(entry: dict[str, Any]) -> int:
    model = meta_model(entry)
    count = sum(p.numel() for p in model.parameters())
    if entry.get("config", {}).get("model_type") == "t5" and entry["config"].get("tie_word_embeddings") is False:
        # transformers 5 ties T5's LM head to the shared embedding whatever the config says (it reads
        # tie_word_embeddings: false only as "do not scale the decoder output"), but the T5 v1.1 and
        # Flan-T5 checkpoints hold their own lm_head (vocab x d_model): counted here.
        count += model.lm_head.weight.numel()
    return count


def meta_model(entry: dict[str, Any]) -> Any:
    """The catalog entry's model built by transformers on the meta device."""
    import torch
    import transformers

    with torch.device("meta"):
        if "model" in entry:  # ResNet: vramcalc's own keys
            layer_type, depths, widths = RESNETS[entry["model"]["depth"]]
            config = transformers.ResNetConfig(
                embedding_size=64, hidden_sizes=widths, depths=depths, layer_type=layer_type, num_labels=1000
            )
            model = transformers.ResNetForImageClassification(config)
        else:
            fields = dict(entry["config"])
            model_type = fields.pop("model_type")
            config = transformers.AutoConfig.for_model(model_type, **fields)
            model = model_class(transformers, fields.get("architectures") or [])(config)
    return model


def write_counts(counts: dict[str, int], version: str) -> None:
    text = CATALOG.read_text(encoding="utf-8")
    text = re.sub(r"(meta_params` the parameter count of transformers )\S+", rf"\g<1>{version}", text)
    text = re.sub(r"(#   meta_params\s+the parameter count of transformers )\S+", rf"\g<1>{version}", text)
    for entry_id, count in counts.items():
        pattern = rf"(- id: {re.escape(entry_id)}\n(?:  .*\n)*?  meta_params: )\S+"
        text, n = re.subn(pattern, rf"\g<1>{count}", text, count=1)
        assert n == 1, entry_id
    CATALOG.write_text(text, encoding="utf-8")


def main() -> int:
    import transformers
    import yaml

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("ids", nargs="*", help="entries to count (default: all)")
    parser.add_argument("--write", action="store_true", help="record the counts as meta_params in the catalog")
    args = parser.parse_args()
    entries = yaml.safe_load(CATALOG.read_text(encoding="utf-8"))
    counts: dict[str, int] = {}
    bad = 0
    for entry in entries:
        if args.ids and entry["id"] not in args.ids:
            continue
        try:
            count = meta_count(entry)
        except Exception as exc:  # report and go on: one config's problem is not the others'
            print(f"{entry['id']:34} ERROR {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
            bad += 1
            continue
        counts[entry["id"]] = count
        verdict = ""
        if entry.get("published_params"):
            value, half = published_tolerance(str(entry["published_params"]))
            margin = half + (0.005 * value if entry.get("published_coarse") else 0.0)
            ok = abs(count - value) <= margin
            verdict = f"published {entry['published_params']:>16} {'ok' if ok else 'MISMATCH'}"
            bad += not ok
        recorded = entry.get("meta_params")
        if recorded is not None and recorded != count:
            verdict += f"  recorded {recorded:,} differs"
            bad += 1
        print(f"{entry['id']:34} {count:>18,}  {verdict}")
    if args.write:
        write_counts(counts, transformers.__version__)
    print(f"{len(counts)} counted, {bad} problems (transformers {transformers.__version__})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
