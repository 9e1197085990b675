"""Allocator-level references for ``workload.keep_outputs`` and pinned transformers releases.

Runs real ``OPTForCausalLM`` / ``GPTNeoXForCausalLM`` steps on the CPU tracer of ``shared/calibration/tracer``
(exact ``torch.cuda.max_memory_allocated()`` on fake CUDA tensors) in the loop of the transformers SDPA
benchmark scripts: ``model.zero_grad()``, then ``outputs = model(**inputs)``, ``outputs.logits.sum().backward()``
(fp16 weights, ``model.train()``, no optimizer). The name ``outputs`` keeps the previous step's logits and KV
cache alive through the next forward. ``--drop-outputs`` deletes them after backward instead (the HF Trainer's
behaviour); the peak is the last of four steps (two warm-up steps without ``zero_grad``, as the scripts run).

The transformers release is whatever ``import transformers`` finds: to trace an older one, install it into a
folder and put that folder first on ``PYTHONPATH`` (the CPU torch of the tracer's venv stays)::

    /tmp/tracer-venv/bin/pip install --target /tmp/tf4.46.0 transformers==4.46.0 "tokenizers<0.21" \
        "huggingface-hub<0.27" requests --no-deps
    PYTHONPATH=/tmp/tf4.46.0 /tmp/tracer-venv/bin/python benchmarks/tracer_hf_loop.py --model opt-350m \
        --batch 1 --seq 128 --attn sdpa --json

(4.42.0 also needs ``"numpy<2" "tokenizers<0.20"`` in its folder.) The inputs are all ones as attention masks,
so the masks the releases would skip are skipped here too (their checks read tensor values the fake tensors do
not have). The cuBLAS workspaces are pre-Hopper (8.125 MiB each): the tables ran on an L40S and an RTX 3080 Ti.
Results used by the tests: ``benchmarks/data/tracer_hf_loop.json`` (each case keeps its command line).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

TRACER = Path(__file__).resolve().parent.parent.parent / "shared" / "calibration" / "tracer"

#: The public configs of the two checkpoints (facebook/opt-350m, EleutherAI/pythia-410m-deduped).
MODELS: dict[str, dict[str, Any]] = {
    "opt-350m": {
        "hidden_size": 1024, "ffn_dim": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
        "vocab_size": 50272, "max_position_embeddings": 2048, "word_embed_proj_dim": 512,
        "do_layer_norm_before": False, "dropout": 0.1, "attention_dropout": 0.0, "activation_function": "relu",
    },
    "pythia-410m": {
        "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096,
        "vocab_size": 50304, "rotary_pct": 0.25, "rotary_emb_base": 10000, "max_position_embeddings": 2048,
        "use_parallel_residual": True, "tie_word_embeddings": False,
    },
}  # fmt: skip


class _NoLayerDrop:
    """``torch`` for modeling_opt: ``torch.rand([]) < layerdrop`` (0.0) is a branch on a value the fake
    tensors do not have; a real draw is never below 0."""

    def __getattr__(self, name: str) -> Any:
        import torch

        return getattr(torch, name)

    @staticmethod
    def rand(*args: Any, **kw: Any) -> float:
        return 1.0


def _skip_all_ones_masks() -> None:
    """The releases' SDPA paths drop an all-ones mask after ``torch.all(mask == 1)``; do the same."""
    try:
        from transformers.modeling_attn_mask_utils import AttentionMaskConverter
    except ImportError:
        return
    original = AttentionMaskConverter._ignore_causal_mask_sdpa

    def ignore(attention_mask: Any, *args: Any, **kw: Any) -> Any:
        if attention_mask is not None and attention_mask.dim() == 2:
            attention_mask = None  # all ones: the real check answers as for no mask
        return original(attention_mask, *args, **kw)

    AttentionMaskConverter._ignore_causal_mask_sdpa = staticmethod(ignore)


def build(name: str, attn: str) -> Any:
    import transformers as T

    if name == "opt-350m":
        import transformers.models.opt.modeling_opt as modeling_opt

        modeling_opt.torch = _NoLayerDrop()  # type: ignore[assignment]
        cfg = T.OPTConfig(**MODELS[name])
        cls = T.OPTForCausalLM
    else:
        cfg = T.GPTNeoXConfig(**MODELS[name])
        cls = T.GPTNeoXForCausalLM
    cfg._attn_implementation = attn
    return cls(cfg), cfg


def run(a: argparse.Namespace) -> dict[str, Any]:
    sys.path.insert(0, str(TRACER))
    import fakecuda  # type: ignore[import-not-found]

    fakecuda.enable()
    import memtrack  # type: ignore[import-not-found]
    import models  # type: ignore[import-not-found]
    import sdpa_cuda  # type: ignore[import-not-found]
    import torch
    import transformers
    import workspace  # type: ignore[import-not-found]
    from torch._subclasses.fake_tensor import FakeTensorMode

    models._patch_trunc_normal()
    models.patch_transformers()
    _skip_all_ones_masks()
    sdpa_cuda.install("auto")
    with FakeTensorMode(allow_non_fake_inputs=False):
        torch.set_default_dtype(torch.float16)  # from_pretrained(torch_dtype=torch.float16)
        with torch.device("cuda"):
            model, cfg = build(a.model, a.attn)
        torch.set_default_dtype(torch.float32)
        with torch.device("cuda"):
            inputs = {"input_ids": torch.randint(0, cfg.vocab_size - 1, (a.batch, a.seq))}
            if not a.no_mask:
                inputs["attention_mask"] = torch.ones(a.batch, a.seq, dtype=torch.int64)
        tracker = memtrack.StorageTracker(
            device_type="cuda",
            block=512,
            workspace_fn=workspace.make_workspace_fn(),
            persistent_fn=workspace.make_persistent_fn("a100"),  # pre-Hopper: 8.125 MiB per handle
        )
        tracker.register_module(model)
        for tensor in inputs.values():
            tracker.register(tensor, "input")
        hooks = [*tracker.install_module_hooks(model), *tracker.install_grad_hooks(model)]
        model.train()
        with tracker:
            for step in range(1, 5):
                tracker.set_phase("forward", step)
                if step > 2:
                    model.zero_grad()  # set_to_none
                outputs = model(**inputs)
                loss = outputs.logits.sum()
                tracker.set_phase("backward")
                loss.backward()
                if a.drop_outputs:
                    del outputs, loss
                tracker.set_phase("idle")
        for hook in hooks:
            hook.remove()
    last = max(tracker.iter_peaks)
    peak = tracker.iter_peaks[last]
    phases = {ph: pk.total for (it, ph), pk in tracker.phase_peaks.items() if it == last and ph != "idle"}
    return {
        "transformers": transformers.__version__,
        "peak_bytes": peak.total,
        "peak_phase": peak.phase,
        "phase_peaks": phases,
        "params": sum(p.numel() for p in model.parameters()),
        "sdpa_backend_calls": dict(sdpa_cuda.STATS),
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), required=True)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--attn", choices=("sdpa", "eager"), default="sdpa")
    parser.add_argument("--drop-outputs", action="store_true", help="del outputs after backward")
    parser.add_argument("--no-mask", action="store_true", help="pass input_ids only")
    parser.add_argument("--json", action="store_true")
    a = parser.parse_args(argv)
    result = run(a)
    print(json.dumps(result) if a.json else f"{result['peak_bytes']:,} B at {result['peak_phase']}")


if __name__ == "__main__":
    main(sys.argv[1:])
