"""A randomized audit of the config importer: every config transformers writes for a claimed model type is
counted exactly or refused in one line, never counted wrong.

For every ``model_type`` vramcalc claims (``FAMILIES`` and the multimodal ``WRAPPERS`` of
vramcalc/spec/hf_import.py) and every model class transformers defines for it (the auto mappings
``MODEL_*_MAPPING_NAMES`` of ``transformers/models/auto/modeling_auto.py`` and the ``PreTrainedModel``
classes of the model's ``__all__`` whose ``config_class`` is that type's), the script draws small random
configurations from a seed: small sizes (width 32-128, 1-3 layers, heads dividing the width, a small
vocabulary) and random values for the fields that change a parameter count (flags flipped, biases, norms,
expert counts and layouts, ``head_dim``, windows and layer types, ``num_labels``, tying, cross-attention,
sub-configs of multimodal models). Each configuration transformers accepts is written as transformers
writes it (``to_dict()`` with ``architectures=[class]``, and ``to_diff_dict()``, what ``save_pretrained``
writes), read back by transformers (``AutoConfig.for_model(**written)``) and built on the meta device;
the reference is ``sum(p.numel() for p in model.parameters())`` (tied tensors once). vramcalc reads the
same written dict as ``vramcalc estimate --hf-config`` does (``model_from_config``, then the spec
validated with the smallest workload that builds the model) and as ``vramcalc import`` does
(``import_spec``), and each config is classed:

* ``exact``: vramcalc's count equals transformers';
* ``refused``: vramcalc stops with one ``SpecError`` line (``estimate`` and ``import`` alike);
* ``WRONG``: a count that differs, or a crash that is not a ``SpecError``, or ``estimate`` and ``import``
  disagreeing on whether the config is refused.

Needs torch and transformers (run with the tracer's venv)::

    PYTHONPATH=. /tmp/tracer-venv/bin/python benchmarks/hf_variant_audit.py                 # seed 1, 12 per class
    PYTHONPATH=. /tmp/tracer-venv/bin/python benchmarks/hf_variant_audit.py --seed 7 --per-class 20
    PYTHONPATH=. /tmp/tracer-venv/bin/python benchmarks/hf_variant_audit.py --types opt,gpt2 --no-store

The run (seed, transformers version, counts per type and class, every WRONG case with both counts and the
written config) is stored in ``benchmarks/data/hf_variant_audit.json`` unless ``--no-store``; exit 1 when
any case is WRONG.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import inspect
import io
import json
import logging
import random
import sys
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
STORE = ROOT / "benchmarks" / "data" / "hf_variant_audit.json"
sys.path.insert(0, str(ROOT))

#: Field names by the size they hold (the names transformers' configuration classes use).
WIDTHS = {"hidden_size", "n_embd", "n_embed", "d_model", "dim", "embed_dim"}
HEADS = {"num_attention_heads", "n_head", "num_heads", "n_heads", "attention_heads"}
KV_HEADS = {"num_key_value_heads", "num_kv_heads"}
FFN = {
    "intermediate_size",
    "ffn_dim",
    "n_inner",
    "d_ff",
    "hidden_dim",
    "ffn_hidden_size",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "intermediate_size_mlp",
}
LAYERS = {"num_hidden_layers", "n_layer", "num_layers", "n_layers", "depth"}
POSITIONS = {"max_position_embeddings", "n_positions"}
EXPERTS = {"num_experts", "num_local_experts", "n_routed_experts"}
#: Widths that need not equal the model's (projections, latent ranks, poolers, sub-module outputs).
FREE_WIDTHS = {
    "kv_lora_rank",
    "q_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
    "d_kv",
    "word_embed_proj_dim",
    "embedding_size",
    "pooler_hidden_size",
    "pooler_output_size",
    "attention_head_size",
    "projection_dim",
    "vision_output_dim",
    "projector_input_dim",
    "projector_output_dim",
    "out_hidden_size",
    "rotary_dim",
}
#: Fields that list layer indices.
LAYER_LISTS = {
    "mlp_only_layers",
    "moe_layers",
    "fullatt_block_indexes",
    "intermediate_layers_indices",
    "cross_attention_layers",
}
#: String fields and the values drawn for them (some that vramcalc does not model, to see them refused).
CHOICES: dict[str, list[Any]] = {
    "activation_function": ["gelu_new", "gelu", "relu", "gelu_pytorch_tanh", "gelu_fast", "silu", "quick_gelu"],
    "feed_forward_proj": ["relu", "gelu", "gated-gelu", "gated-silu", "gated-relu", "silu"],
    "activation": ["gelu", "relu"],
    "hidden_act": ["silu", "gelu", "gelu_pytorch_tanh", "relu"],
    "hidden_activation": ["gelu_pytorch_tanh", "silu"],
    "norm_rel_ebd": ["none", "layer_norm"],
    "position_embedding_type": ["absolute", "absolute", "relative_key", "relative_key_query"],
    "vision_feature_select_strategy": ["default", "full"],
    "vision_feature_layer": [-1, -2, [-2, -5], [-1], [-3, -2, -1]],
    "pos_att_type": [None, ["c2p"], ["p2c"], ["c2p", "p2c"], []],
    "partial_rotary_factor": [0.25, 0.5, 1.0],
    "rotary_pct": [0.25, 0.5, 1.0],
}
#: Fields any configuration class accepts (PreTrainedConfig keeps unknown keyword arguments): drawn for
#: every type, since a class may read them (``getattr(config, name, default)``) without declaring them.
EXTRA_FLAGS = {"add_cross_attention": True, "is_decoder": True, "token_classification_bias": False}


#: Fields of other families that a config may carry although its class declares none of them (a
#: PreTrainedConfig keeps unknown keyword arguments, and a model may read them with ``getattr``): the
#: importer must read them only where the class does.
FOREIGN = (
    "attention_bias",
    "mlp_bias",
    "head_dim",
    "qkv_bias",
    "use_bias",
    "bias",
    "lm_head_bias",
    "qk_layernorm",
    "num_key_value_heads",
    "sliding_window",
    "use_sliding_window",
    "pooler_output_size",
    "multi_query",
    "parallel_attn",
    "num_experts",
    "num_local_experts",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "rotary_dim",
    "embedding_size",
    "attention_head_size",
    "type_vocab_size",
    "intermediate_size",
    "n_inner",
)


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


class Draw:
    """The random sizes of one configuration: the width, heads and depth its fields are drawn around."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.width = rng.choice([32, 48, 64, 96, 128])
        self.heads = rng.choice([d for d in _divisors(self.width, 8) if self.width // d >= 8])
        self.layers = rng.randint(1, 3)
        self.vocab = rng.randrange(64, 1001)

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def small_width(self) -> int:
        return self.rng.choice([8, 16, 24, 32, 48, 64])

    def ffn(self) -> int:
        return self.rng.randrange(16, 257, 8)

    def layer_subset(self) -> list[int]:
        return sorted(self.rng.sample(range(self.layers), self.rng.randint(0, self.layers)))


def _sized(d: Draw, name: str, default: Any) -> tuple[bool, Any]:
    """A value for a field that holds a size (True and the value), else (False, None)."""
    if name in WIDTHS:
        return True, d.width
    if name in HEADS:
        return True, d.heads
    if name in KV_HEADS:
        return True, d.rng.choice(_divisors(d.heads, d.heads))
    if name in FFN:
        return True, (None if name == "n_inner" and d.chance(0.3) else d.ffn())
    if name in LAYERS:
        return True, d.layers
    if name == "num_decoder_layers":
        return True, d.rng.choice([None, 1, 2, 3])
    if name == "vocab_size":
        return True, d.vocab
    if name in POSITIONS:
        return True, d.rng.choice([64, 128, 256, 512])
    if name in EXPERTS:
        return True, d.rng.randint(2, 8)
    if name == "num_experts_per_tok":
        return True, d.rng.randint(1, 2)
    if name in FREE_WIDTHS:
        if default is None and d.chance(0.5):
            return True, None
        return True, d.width if d.chance(0.4) else d.small_width()
    if name == "head_dim":
        return True, None if d.chance(0.4) else d.rng.choice([8, 16, 24, 32])
    return False, None


def _special(d: Draw, name: str, default: Any) -> tuple[bool, Any]:
    """A value for a field with rules of its own (layer lists, windows, label counts, positions)."""
    rng = d.rng
    if name in CHOICES:
        return d.chance(0.5), rng.choice(CHOICES[name])
    if name == "layer_types" and isinstance(default, list) and default:
        kinds = sorted(set(default) | {"full_attention"})
        if d.chance(0.5):
            return True, None
        return True, [rng.choice(kinds) for _ in range(d.layers)]
    if name in LAYER_LISTS:
        return d.chance(0.5), d.layer_subset()
    if name in ("sliding_window", "attention_chunk_size"):
        return d.chance(0.6), rng.choice([None, 0, 16, 64, 4096])
    if name in ("max_window_layers", "first_k_dense_replace"):
        return True, rng.randint(0, d.layers + 1)
    if name in ("decoder_sparse_step", "interleave_moe_layer_step", "moe_layer_freq"):
        return d.chance(0.5), rng.choice([1, 1, 2])
    if name in ("sliding_window_pattern", "_sliding_window_pattern"):
        return d.chance(0.5), rng.randint(1, 6)
    if name in ("n_shared_experts",):
        return True, rng.randint(0, 2)
    if name in ("n_group", "topk_group"):
        return True, 1
    if name == "type_vocab_size":
        return d.chance(0.5), rng.randint(0, 3)
    if name in ("position_buckets", "max_relative_positions"):
        return d.chance(0.5), rng.choice([-1, 16, 32, 64])
    if name == "conv_kernel_size":
        return d.chance(0.2), rng.choice([0, 3])
    if name == "relative_attention_num_buckets":
        return d.chance(0.5), rng.choice([8, 16, 32])
    if name == "num_ln_in_parallel_attn":
        return d.chance(0.5), rng.choice([None, 1, 2])
    if name == "chunk_size_feed_forward":
        return d.chance(0.05), 2
    if name in ("pad_token_id",):
        return True, None if d.chance(0.5) else rng.randrange(d.vocab)
    if name in ("bos_token_id", "eos_token_id", "sep_token_id", "decoder_start_token_id"):
        return True, rng.randrange(d.vocab)
    return False, None


def draw_fields(d: Draw, defaults: dict[str, Any], flip: float = 0.35) -> dict[str, Any]:
    """Keyword arguments for a configuration class whose default ``to_dict()`` is ``defaults``."""
    kwargs: dict[str, Any] = {}
    for name, default in defaults.items():
        if name in ("model_type", "architectures", "transformers_version", "id2label", "label2id", "dtype"):
            continue
        if isinstance(default, dict):
            continue  # sub-configs and rope parameters: drawn by the caller
        for rule in (_sized, _special):
            hit, value = rule(d, name, default)
            if hit:
                kwargs[name] = value
                break
        else:
            if isinstance(default, bool) and d.chance(flip):
                kwargs[name] = not default
    return kwargs


def _vision_fields(d: Draw, defaults: dict[str, Any]) -> dict[str, Any]:
    """A small vision tower: a width, heads, depth, patch and image edge, and random flags."""
    v = Draw(d.rng)
    kwargs = draw_fields(v, defaults, flip=0.3)
    width_name = "embed_dim" if "embed_dim" in defaults else "hidden_size"
    kwargs[width_name] = v.width
    if width_name == "embed_dim":  # Qwen2-VL's hidden_size is the merger's output width
        kwargs["hidden_size"] = d.width if d.chance(0.5) else v.small_width()
    patch = d.rng.choice([2, 4, 8, 14])
    if "image_size" in defaults:
        kwargs["image_size"] = patch * d.rng.randint(1, 4) * 2
    kwargs["patch_size"] = patch
    if "num_global_layers" in defaults:
        kwargs["num_global_layers"] = d.rng.randint(1, 2)
        tiles = d.rng.randint(1, 4)
        kwargs["max_num_tiles"] = tiles
        grids = [[w, h] for w in range(1, tiles + 1) for h in range(1, tiles + 1) if w * h <= tiles]
        kwargs["supported_aspect_ratios"] = d.rng.sample(grids, d.rng.randint(1, len(grids)))
        kwargs["intermediate_layers_indices"] = v.layer_subset()
    if "mlp_ratio" in defaults:
        kwargs["mlp_ratio"] = d.rng.choice([1, 2, 4, 2.5])
    if "pixel_shuffle_ratio" in defaults:
        kwargs["pixel_shuffle_ratio"] = d.rng.choice([0.5, 0.5, 0.25])
    for name in ("spatial_merge_size", "temporal_patch_size"):
        if name in defaults:
            kwargs[name] = d.rng.choice([1, 2])
    if "num_channels" in defaults or "in_channels" in defaults:
        kwargs["num_channels" if "num_channels" in defaults else "in_channels"] = d.rng.choice([1, 3, 3])
    return kwargs


def _defaults(config_class: type) -> dict[str, Any]:
    return config_class().to_dict()


#: The language models a wrapper's text_config is drawn from (its own type, and other claimed types that
#: transformers' ``AutoModel`` builds inside it).
TEXT_TYPES = {
    "llava": ["llama", "mistral", "qwen2", "gemma", "phi3"],
    "llava_next": ["llama", "mistral", "qwen2"],
    "mistral3": ["mistral", "llama"],
}


def draw_kwargs(d: Draw, model_type: str, config_class: type) -> dict[str, Any]:
    """Keyword arguments for one random configuration of ``model_type``."""
    from transformers import AutoConfig

    defaults = _defaults(config_class)
    kwargs = draw_fields(d, defaults)
    sub = {name: value for name, value in defaults.items() if name in ("text_config", "vision_config")}
    if "text_config" in sub:
        text_type = d.rng.choice(TEXT_TYPES.get(model_type, [sub["text_config"]["model_type"]]))
        text_class = type(AutoConfig.for_model(text_type))
        text_defaults = _defaults(text_class)
        text = draw_fields(d, text_defaults)
        if "cross_attention_layers" in text_defaults:  # Mllama: some cross-attention and some self-attention layers
            layers = text["num_hidden_layers"] = d.rng.randint(2, 4)
            text["cross_attention_layers"] = sorted(d.rng.sample(range(layers), d.rng.randint(1, layers - 1)))
        kwargs["text_config"] = {**text, "model_type": text_type}
    if "vision_config" in sub:
        vision_type = sub["vision_config"]["model_type"]
        kwargs["vision_config"] = {**_vision_fields(d, sub["vision_config"]), "model_type": vision_type}
    if "mm_tokens_per_image" in defaults:
        kwargs["mm_tokens_per_image"] = d.rng.choice([1, 4, 16])
    for name, value in EXTRA_FLAGS.items():
        if name not in defaults and d.chance(0.1):
            kwargs[name] = value
    if d.chance(0.25):
        for name in d.rng.sample([n for n in FOREIGN if n not in defaults], 2):
            hit, value = _sized(d, name, None)
            kwargs[name] = value if hit else d.rng.choice([True, False, d.small_width()])
    if d.chance(0.7):
        kwargs["num_labels"] = d.rng.randint(1, 5)
    if d.chance(0.6):
        kwargs["tie_word_embeddings"] = d.chance(0.5)
    return kwargs


def model_classes(model_type: str) -> list[type]:
    """The model classes transformers defines for ``model_type``: its entries in the auto mappings and the
    PreTrainedModel classes its modeling module exports, whose configuration class is the type's own."""
    import transformers
    from transformers.models.auto import modeling_auto
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config_class = CONFIG_MAPPING[model_type]
    names: set[str] = set()
    for mapping in dir(modeling_auto):
        if mapping.startswith("MODEL") and mapping.endswith("_MAPPING_NAMES"):
            entry = getattr(modeling_auto, mapping).get(model_type)
            names.update([entry] if isinstance(entry, str) else entry or [])
    module = importlib.import_module(config_class.__module__.replace("configuration_", "modeling_"))
    names.update(getattr(module, "__all__", []))
    classes = []
    for name in sorted(names):
        cls = getattr(transformers, name, None) or getattr(module, name, None)
        if inspect.isclass(cls) and issubclass(cls, transformers.PreTrainedModel) and cls.config_class is config_class:
            if not name.endswith("PreTrainedModel"):
                classes.append(cls)
    return classes


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


@contextlib.contextmanager
def _quiet():
    """transformers' warnings and logs off (a random config draws many)."""
    logger = logging.getLogger("transformers")
    level = logger.level
    logger.setLevel(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        try:
            yield
        finally:
            logger.setLevel(level)


def reference_count(written: dict[str, Any], model_class: type) -> int:
    """transformers' count of the written config, read back as ``from_pretrained`` reads it."""
    import torch
    from transformers import AutoConfig

    config = AutoConfig.for_model(**json.loads(json.dumps(written)))
    with torch.device("meta"):
        model = model_class(config)
    return sum(p.numel() for p in model.parameters())


def vramcalc_result(written: dict[str, Any]) -> tuple[str, int | None, str]:
    """vramcalc's reading of a written config: ("count", n, "") or ("refused", None, the line)."""
    from vramcalc.core.params import count_params
    from vramcalc.errors import SpecError
    from vramcalc.families.resolve import resolve_model
    from vramcalc.spec.hf_import import count_workload, import_spec, model_from_config, validated_spec

    source = "config.json"
    try:
        model, _ = model_from_config(written, source)
        spec = validated_spec(written, source, count_workload(written, model, source))
        counted = count_params(resolve_model(spec.model, spec.workload)[0])
    except SpecError as error:
        said = str(error)
        try:
            import_spec(written, source)
        except SpecError:
            return "refused", None, said
        return "split", None, f"estimate refuses ({said}) but import does not"
    try:
        import_spec(written, source)
    except SpecError as error:
        return "split", counted, f"import refuses ({error}) but estimate counts"
    return "count", counted, ""


def written_forms(config: Any, class_name: str) -> dict[str, dict[str, Any]]:
    """The config as transformers writes it: ``to_dict()`` and ``to_diff_dict()`` (save_pretrained's)."""
    config.architectures = [class_name]
    return {"full": _plain(config.to_dict()), "diff": _plain(config.to_diff_dict())}


def audit_class(
    rng: random.Random, model_type: str, model_class: type, tries: int, record: Callable[..., None]
) -> None:
    """Draw ``tries`` configs for one class; each one transformers accepts is checked in both forms."""
    from transformers import AutoConfig

    config_class = type(AutoConfig.for_model(model_type))
    for _ in range(tries):
        d = Draw(rng)
        kwargs = draw_kwargs(d, model_type, config_class)
        try:
            with _quiet():
                config = config_class(**kwargs)
                forms = written_forms(config, model_class.__name__)
                references = {form: reference_count(written, model_class) for form, written in forms.items()}
        except Exception:  # a combination transformers itself rejects
            record(model_type, model_class.__name__, "skipped")
            continue
        for form, written in forms.items():
            try:
                kind, ours, said = vramcalc_result(written)
            except Exception as error:  # a traceback, not one line
                kind, ours, said = "crash", None, f"{type(error).__name__}: {error}"
            reference = references[form]
            if kind == "count" and ours == reference:
                record(model_type, model_class.__name__, "exact")
            elif kind == "refused":
                record(model_type, model_class.__name__, "refused", said=said)
            else:
                why = said or f"vramcalc {ours:,} != transformers {reference:,} ({ours - reference:+,})"
                record(
                    model_type,
                    model_class.__name__,
                    "WRONG",
                    case={
                        "form": form,
                        "kind": kind,
                        "transformers": reference,
                        "vramcalc": ours,
                        "why": why,
                        "config": written,
                    },
                )


def main(argv: list[str]) -> int:
    import transformers

    from vramcalc.spec.hf_import import FAMILIES, TEXT_CONFIGS

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--per-class", type=int, default=12, help="configs drawn per model class")
    parser.add_argument("--types", default="", help="comma-separated model types (default: every claimed one)")
    parser.add_argument("--no-store", action="store_true", help="do not write benchmarks/data/hf_variant_audit.json")
    parser.add_argument("--out", default=str(STORE))
    args = parser.parse_args(argv)
    types = args.types.split(",") if args.types else [*FAMILIES, *TEXT_CONFIGS]
    rng = random.Random(args.seed)
    tally: dict[str, dict[str, Counter[str]]] = defaultdict(lambda: defaultdict(Counter))
    wrong: list[dict[str, Any]] = []
    refusals: dict[str, Counter[str]] = defaultdict(Counter)

    def record(model_type: str, name: str, outcome: str, *, said: str = "", case: dict[str, Any] | None = None) -> None:
        tally[model_type][name][outcome] += 1
        if said:
            refusals[model_type][said.removeprefix("config.json: ")[:100]] += 1
        if case is not None:
            wrong.append({"model_type": model_type, "class": name, **case})

    started = time.time()
    for model_type in types:
        for model_class in model_classes(model_type):
            audit_class(rng, model_type, model_class, args.per_class, record)
    totals: Counter[str] = Counter()
    print(f"{'model_type':14} {'class':44} {'exact':>6} {'refused':>8} {'WRONG':>6} {'skipped':>8}")
    for model_type, classes in tally.items():
        for name, counts in classes.items():
            totals.update(counts)
            print(
                f"{model_type:14} {name:44} {counts['exact']:6} {counts['refused']:8} {counts['WRONG']:6} "
                f"{counts['skipped']:8}"
            )
    checked = totals["exact"] + totals["refused"] + totals["WRONG"]
    print(
        f"{checked} configs checked ({totals['skipped']} draws transformers rejected): {totals['exact']} exact, "
        f"{totals['refused']} refused, {totals['WRONG']} WRONG in {time.time() - started:.0f} s "
        f"(seed {args.seed}, transformers {transformers.__version__})"
    )
    for case in wrong[:40]:
        print(f"WRONG {case['model_type']} {case['class']} ({case['form']}): {case['why']}")
    if not args.no_store:
        doc = {
            "seed": args.seed,
            "per_class": args.per_class,
            "transformers_version": transformers.__version__,
            "date": datetime.date.today().isoformat(),
            "method": "random configs written by to_dict()/to_diff_dict(), architectures[0] built on the meta "
            "device, sum(p.numel() for p in model.parameters()) against vramcalc's count",
            "totals": {"configs": checked, **{k: totals[k] for k in ("exact", "refused", "WRONG", "skipped")}},
            "by_type": {t: {n: dict(c) for n, c in classes.items()} for t, classes in tally.items()},
            "refusals": {t: dict(c.most_common()) for t, c in refusals.items()},
            "wrong": wrong,
        }
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {Path(args.out).relative_to(ROOT) if Path(args.out).is_relative_to(ROOT) else args.out}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
