"""Allocator-level references for the LLM formulas: LoRA training, KV-cache forwards, more families.

Runs the CPU tracer of ``shared/calibration/tracer`` (exact ``torch.cuda.max_memory_allocated()`` of
real transformers models on fake CUDA tensors) with two additions the tracer itself does not have:

* ``--lora R:TARGETS``: wraps the model with ``peft.get_peft_model(LoraConfig(r=R, target_modules=...))``
  before the step (PEFT's defaults: fp32 adapters on a 16-bit base, dropout from ``--lora-dropout``);
* ``--cache``: the inference forward runs with ``use_cache=True`` and ``logits_to_keep=1`` (the prefill of
  ``generate``), or with ``--cache-all-logits`` all positions' logits;
* ``--family opt|gpt_neox``: builds ``OPTForCausalLM`` / ``GPTNeoXForCausalLM`` from the config defaults with
  the sizes given (``--layers --hidden --heads --ffn --vocab``), in place of ``--arch`` (pass ``--arch gpt2``,
  whose batch it shares: ``input_ids`` and ``labels``).

Needs the tracer's venv with peft installed (``/tmp/tracer-venv/bin/pip install peft``)::

    /tmp/tracer-venv/bin/python benchmarks/tracer_llm.py --arch llama --layers 2 ... --lora 16:q_proj,v_proj --json

The results used by the tests are stored in ``benchmarks/data/tracer_llm.json`` (with the command line).
"""

from __future__ import annotations

import sys
from pathlib import Path

TRACER = Path(__file__).resolve().parent.parent.parent / "shared" / "calibration" / "tracer"


def _take(argv: list[str], flag: str, has_value: bool) -> tuple[list[str], str | None]:
    if flag not in argv:
        return argv, None
    i = argv.index(flag)
    value = argv[i + 1] if has_value else "1"
    return argv[:i] + argv[i + 1 + (1 if has_value else 0) :], value


def with_lora(model, lora: str, dropout: float):  # type: ignore[no-untyped-def]
    """``peft.get_peft_model`` with LoRA ``RANK:TARGETS`` (alpha 2 x rank, PEFT's other defaults) on a model
    whose parameters already sit on the fake CUDA device."""
    import torch
    from peft import LoraConfig, get_peft_model
    from peft.tuners import tuners_utils

    # adapters are created on the fake device already; module.to() cannot swap fake parameters
    tuners_utils.BaseTunerLayer._move_adapter_to_device_of_base_layer = lambda *args, **kw: None
    rank, targets = lora.split(":")
    names = "all-linear" if targets == "all-linear" else targets.split(",")
    config = LoraConfig(r=int(rank), lora_alpha=2 * int(rank), target_modules=names, lora_dropout=dropout)
    to = torch.nn.Module.to
    torch.nn.Module.to = lambda self, *args, **kw: self  # everything already sits on the fake device
    try:
        return get_peft_model(model, config)
    finally:
        torch.nn.Module.to = to


def family_model(family: str, a):  # type: ignore[no-untyped-def]
    """OPT or GPT-NeoX at the given sizes, every other field at its config default (dropouts included:
    OPT's attention_dropout 0.0 and dropout 0.1, GPT-NeoX's 0.0 and 0.0), on the fake device."""
    import transformers as T

    if family == "opt":
        cfg = T.OPTConfig(num_hidden_layers=a.layers, hidden_size=a.hidden, word_embed_proj_dim=a.hidden,
                          num_attention_heads=a.heads, ffn_dim=a.ffn, vocab_size=a.vocab,
                          max_position_embeddings=max(2048, a.seq))  # fmt: skip
        cls = T.OPTForCausalLM
    elif family == "gpt_neox":
        cfg = T.GPTNeoXConfig(num_hidden_layers=a.layers, hidden_size=a.hidden, num_attention_heads=a.heads,
                              intermediate_size=a.ffn, vocab_size=a.vocab,
                              max_position_embeddings=max(2048, a.seq))  # fmt: skip
        cls = T.GPTNeoXForCausalLM
    else:
        raise SystemExit(f"--family: opt or gpt_neox, not {family!r}")
    cfg.use_cache = False
    cfg._attn_implementation = a.attn
    return cls(cfg), f"{cls.__name__}({type(cfg).__name__} defaults, {a.layers} layers, hidden {a.hidden})"


def main(argv: list[str]) -> None:
    argv, lora = _take(argv, "--lora", True)
    argv, dropout = _take(argv, "--lora-dropout", True)
    argv, cache = _take(argv, "--cache", False)
    argv, all_logits = _take(argv, "--cache-all-logits", False)
    argv, family = _take(argv, "--family", True)
    sys.path.insert(0, str(TRACER))
    import fakecuda  # type: ignore[import-not-found]

    fakecuda.enable()  # before torch is imported (idempotent: groundtruth.run calls it again)
    import groundtruth  # type: ignore[import-not-found]
    import models  # type: ignore[import-not-found]

    original = models.build

    def build(arch, a, dtype):  # type: ignore[no-untyped-def]
        model, make_batch, desc = original(arch, a, dtype)
        if family:
            model, desc = family_model(family, a)
        if lora:
            model = with_lora(model, lora, float(dropout or 0.0))
            desc += f" + LoRA r={lora.replace(':', ' ')}"
        if cache or all_logits:
            model.config.use_cache = True

            def batch(train):  # type: ignore[no-untyped-def]
                out = make_batch(train)
                out["use_cache"] = True
                if not all_logits:
                    out["logits_to_keep"] = 1
                return out

            return model, batch, desc + " + KV cache"
        return model, make_batch, desc

    models.build = build
    groundtruth.main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
