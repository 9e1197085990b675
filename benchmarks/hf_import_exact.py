"""Exactness of ``vramcalc import`` against transformers itself: parameter counts of real configs.

For each ``tests/data/hf_configs/*.json`` (transformers-written configs of public models), the model class
named by ``architectures[0]`` is built from the config on PyTorch's meta device (no weights, no memory),
and ``sum(p.numel() for p in model.parameters())`` is compared with vramcalc's count of the imported spec.
Tied weights are one parameter in ``parameters()``, as they are one tensor in memory.

Needs a Python with torch and transformers (vramcalc is imported from this checkout)::

    /tmp/tracer-venv/bin/python benchmarks/hf_import_exact.py            # compare, exit 1 on a mismatch
    /tmp/tracer-venv/bin/python benchmarks/hf_import_exact.py --record   # also rewrite meta_counts.json
    /tmp/tracer-venv/bin/python benchmarks/hf_import_exact.py --configs tests/data/hf_configs/hub --record

``--configs DIR`` checks another folder (``tests/data/hf_configs/hub``: configs as the Hub serves them,
written by transformers 4.x, checked by ``tests/spec/test_hf_hub_configs.py``).

``--record`` stores the transformers counts (with the transformers version and the date) in
``tests/data/hf_configs/meta_counts.json``, which ``tests/spec/test_hf_exact.py`` checks vramcalc against
without torch. The recorded numbers come from transformers only, never from vramcalc.
"""

from __future__ import annotations

import datetime
import json
import sys
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "data" / "hf_configs"
COUNTS = CONFIGS / "meta_counts.json"
sys.path.insert(0, str(ROOT))


def config_files(folder: Path = CONFIGS) -> list[Path]:
    """Every config of a real model (``unknown-*.json`` are deliberately unsupported configs)."""
    counts = folder / COUNTS.name
    return sorted(p for p in folder.glob("*.json") if p != counts and not p.name.startswith("unknown-"))


def transformers_count(path: Path) -> int:
    """Parameters of ``architectures[0]`` built from the config on the meta device."""
    import torch
    import transformers

    data = json.loads(path.read_text(encoding="utf-8"))
    config = transformers.AutoConfig.for_model(**data)
    model_class = getattr(transformers, data["architectures"][0])
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = model_class(config)
    return sum(p.numel() for p in model.parameters())


def vramcalc_count(path: Path) -> int:
    """vramcalc's parameter count of the spec ``vramcalc import`` makes of the config."""
    from vramcalc.core.params import count_params
    from vramcalc.families.resolve import resolve_model
    from vramcalc.spec.hf_import import count_workload, model_from_config, read_config, validated_spec

    config = read_config(path)
    model, _ = model_from_config(config, str(path))
    spec = validated_spec(config, str(path), count_workload(config, model))
    return count_params(resolve_model(spec.model, spec.workload)[0])


def main(argv: list[str]) -> int:
    import transformers

    record = "--record" in argv
    folder = Path(argv[argv.index("--configs") + 1]).resolve() if "--configs" in argv else CONFIGS
    counts_file = folder / COUNTS.name
    counts: dict[str, Any] = {}
    failures = 0
    for path in config_files(folder):
        reference = transformers_count(path)
        counts[path.name] = reference
        try:
            ours: int | str = vramcalc_count(path)
        except Exception as error:  # a refusal is reported, not raised: every config is shown
            ours = f"refused: {error}"
        ok = ours == reference
        failures += not ok
        delta = f"{ours - reference:+,}" if isinstance(ours, int) else ours
        print(f"{'ok ' if ok else 'BAD'} {path.name:48} {reference:>18,}  {'' if ok else delta}")
    print(f"{len(counts) - failures} of {len(counts)} exact (transformers {transformers.__version__})")
    if record:
        doc = {
            "transformers_version": transformers.__version__,
            "date": datetime.date.today().isoformat(),
            "method": "sum(p.numel() for p in architectures[0](config).parameters()) on the meta device",
            "counts": counts,
        }
        counts_file.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {counts_file.relative_to(ROOT)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
