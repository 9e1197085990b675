"""Allocator-level references for litgpt's LoRA and QLoRA fine-tuning (``finetune/lora.py``).

Runs litgpt's own model code (``lit_gpt/model.py``, ``lit_gpt/lora.py``) on the CPU tracer of
``shared/calibration/tracer`` (exact ``torch.cuda.max_memory_allocated()`` on fake CUDA tensors), in the loop
of ``finetune/lora.py``: the model built in bf16 (Fabric's ``bf16-true``), only the LoRA matrices trainable,
``model.max_seq_length`` set to the sequence, then micro-batches of ``logits = model(x, lm_head_chunk_size=128)``,
the last chunk's last position dropped, ``chunked_cross_entropy`` and ``backward``, and AdamW
(``torch.optim.AdamW``; with ``--quant``, bitsandbytes' ``PagedAdamW``, whose states of 1e5 elements or more
live in managed memory outside PyTorch's allocator). Two micro-batches and an optimizer step each; the peak is
the larger of the two.

``--quant nf4|nf4-dq`` replaces every ``nn.Linear`` (the LM head included) as Lightning's
``BitsandbytesPrecision`` does, with a replica of bitsandbytes 0.41's ``Linear4bit`` (the release the tables
name): the weight packed two per byte with one fp32 absmax per 64 (double quantization: one uint8 per 64, one
fp32 per 256 of them, an fp32 offset); ``MatMul4Bit`` dequantizes the whole weight at the quantization dtype,
fp16 (Lightning casts the weight to fp16 before ``quantize_4bit``), casts it to the input's dtype, and keeps the
input for backward, where it dequantizes again (``bitsandbytes/autograd/_functions.py`` at 0.41.0).

The litgpt source is not vendored: pass a checkout of the commit the tables name (``tutorials/resource-tables.md``:
8641822)::

    git clone https://github.com/Lightning-AI/litgpt /tmp/litgpt && git -C /tmp/litgpt checkout 8641822
    /tmp/tracer-venv/bin/python benchmarks/tracer_litgpt.py --source /tmp/litgpt --model Llama-2-7b-hf \\
        --seq 1304 --json
    /tmp/tracer-venv/bin/python benchmarks/tracer_litgpt.py --source /tmp/litgpt --regenerate   # the data file

LoRA defaults are the script's at 8641822 (r 8, alpha 16, dropout 0.05 on query and value);
``--lora-r``, ``--lora-alpha`` and ``--lora-targets`` (of query, key, value, projection, mlp, head) set
others. A later checkout (the ``litgpt`` package of 2024 on, ``lora_*`` config keys) runs the same loop.
``lightning`` is not needed: the names litgpt's utilities import from it are stubbed.

``--as-published`` adds what the published run had beyond litgpt's own code: Lightning Fabric's module wrapper
(``_FabricModule.forward``, lightning 2.1 ``fabric/wrappers.py``) passes the model's output through the precision
plugin's ``convert_output``, which casts every floating tensor to ``torch.get_default_dtype()`` (float32) for both
``bf16-true`` (``HalfPrecision``, ``plugins/precision/half.py``) and ``BitsandbytesPrecision``
(``plugins/precision/bitsandbytes.py``), so the list of logit chunks reaches ``chunked_cross_entropy`` in float32;
``model.max_seq_length`` is set outside Fabric's init context (``finetune/lora.py`` ``train()``), so the RoPE
cache is float32; and PyTorch 2.1's ``mean.dim`` saved its input for backward (the saving was dropped in
PyTorch 2.2: github.com/pytorch/pytorch/pull/109935), which in litgpt's ``RMSNorm`` keeps ``x * x`` alive.
"""

from __future__ import annotations

import argparse
import builtins
import datetime
import json
import sys
import types
from pathlib import Path
from typing import Any

TRACER = Path(__file__).resolve().parent.parent.parent / "shared" / "calibration" / "tracer"
DATA = Path(__file__).resolve().parent / "data"
#: The litgpt commit of the published resource tables ("Lit-GPT version: commit 8641822").
LITGPT_COMMIT = "8641822b3249bb94f068c254aa5d13decbc9f0a0"


class _Stub(types.ModuleType):
    """A module whose every attribute is a placeholder class (names imported, never run here)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {})


def _stub_lightning() -> None:
    """litgpt's utilities import Fabric's and Lightning's names at module level; none of them runs here."""
    names = (
        "lightning",
        "lightning.fabric",
        "lightning.fabric.loggers",
        "lightning.fabric.strategies",
        "lightning.fabric.utilities",
        "lightning.fabric.utilities.load",
        "lightning.pytorch",
        "lightning.pytorch.loggers",
        "lightning_utilities",
        "lightning_utilities.core",
        "lightning_utilities.core.imports",
    )
    for name in names:
        sys.modules.setdefault(name, _Stub(name))

    class RequirementCache:  # lightning "is there"; flash-attn is not: litgpt takes scaled_dot_product_attention
        def __init__(self, requirement: str, *args: Any, **kw: Any) -> None:
            self.requirement = requirement

        def __bool__(self) -> bool:
            return self.requirement.startswith("lightning")

    sys.modules["lightning_utilities.core.imports"].RequirementCache = RequirementCache  # type: ignore[attr-defined]


def _litgpt(source: Path) -> tuple[Any, Any, str]:
    """litgpt's LoRA module, its ``chunked_cross_entropy`` and the prefix of its LoRA config keys: the package
    is ``lit_gpt`` with ``r``/``to_query`` keys up to early 2024, then ``litgpt`` with ``lora_r``/``lora_query``."""
    import importlib

    package = "litgpt" if (source / "litgpt" / "lora.py").exists() else "lit_gpt"
    lora = importlib.import_module(f"{package}.lora")
    utils = importlib.import_module(f"{package}.utils")
    # the later loss divides by ``max(1, (targets != ignore_index).sum())``: a branch on a value the fake
    # tensors do not have; the count (a 0-d tensor) is what a real run divides by
    utils.max = lambda first, second: second if hasattr(second, "shape") else builtins.max(first, second)
    return lora, utils.chunked_cross_entropy, "lora_" if package == "litgpt" else ""


def lora_config(prefix: str, r: int, alpha: int, dropout: float, targets: list[str]) -> dict[str, Any]:
    """The LoRA keys of ``Config.from_name`` in the package's spelling (``targets``: query, key, value,
    projection, mlp, head)."""
    if prefix:
        return {"lora_r": r, "lora_alpha": alpha, "lora_dropout": dropout, **{f"lora_{t}": True for t in targets}}
    return {"r": r, "alpha": alpha, "dropout": dropout, **{f"to_{t}": True for t in targets}}


def _linear4bit(double_quant: bool) -> Any:
    """A replica of bitsandbytes 0.41's ``Linear4bit`` as litgpt's QLoRA uses it (module docstring)."""
    import torch
    from torch import nn

    class MatMul4Bit(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, a: Any, packed: Any, layer: Any) -> Any:
            weight = layer.dequantize().to(a.dtype)
            ctx.layer = layer
            ctx.tensors = (a, packed) if ctx.needs_input_grad[0] else (None, None)
            return torch.nn.functional.linear(a, weight)

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            layer = ctx.layer
            grad_a = None
            if ctx.needs_input_grad[0]:
                grad_a = torch.matmul(grad, layer.dequantize().to(grad.dtype))
            return grad_a, None, None

    class Linear4bit(nn.Module):
        def __init__(self, in_features: int, out_features: int, bias: bool = True, **kw: Any) -> None:
            super().__init__()
            self.in_features, self.out_features = in_features, out_features
            n = in_features * out_features
            blocks = -(-n // 64)
            self.packed = nn.Parameter(torch.empty(-(-n // 2), 1, dtype=torch.uint8), requires_grad=False)
            if double_quant:  # uint8 absmax per block, fp32 absmax per 256 of them, fp32 offset
                self.register_buffer("absmax", torch.empty(blocks, dtype=torch.uint8))
                self.register_buffer("absmax2", torch.empty(-(-blocks // 256), dtype=torch.float32))
                self.register_buffer("offset", torch.empty((), dtype=torch.float32))
            else:
                self.register_buffer("absmax", torch.empty(blocks, dtype=torch.float32))
            self.bias = nn.Parameter(torch.empty(out_features), requires_grad=False) if bias else None

        def dequantize(self) -> Any:
            if double_quant:  # F.dequantize_blockwise(absmax, state2) + offset: an fp32 absmax first
                absmax = torch.empty(self.absmax.shape, dtype=torch.float32, device=self.absmax.device) + self.offset
                del absmax
            return torch.empty(self.out_features, self.in_features, dtype=torch.float16, device=self.packed.device)

        def forward(self, x: Any) -> Any:
            out = MatMul4Bit.apply(x, self.packed, self)
            return out if self.bias is None else out + self.bias

    return Linear4bit


def _mean_saving_input() -> Any:
    """``torch.mean`` as PyTorch 2.1's autograd ran it: the input is saved for backward (module docstring)."""
    import torch

    class MeanSavingInput(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any, dim: Any, keepdim: bool) -> Any:
            ctx.save_for_backward(x)
            ctx.dim, ctx.keepdim = dim, keepdim
            return torch.mean(x, dim=dim, keepdim=keepdim)

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            (x,) = ctx.saved_tensors
            g = grad if ctx.keepdim else grad.unsqueeze(ctx.dim)
            return g.expand(x.shape) / x.shape[ctx.dim], None, None

    def mean(x: Any, dim: Any = None, keepdim: bool = False, **kw: Any) -> Any:
        if dim is None or kw or not x.requires_grad:
            return torch.mean(x, *(() if dim is None else (dim,)), keepdim=keepdim, **kw)
        return MeanSavingInput.apply(x, dim, keepdim)

    return mean


def run(a: argparse.Namespace) -> dict[str, Any]:
    sys.path.insert(0, str(TRACER))
    sys.path.insert(0, str(Path(a.source).resolve()))
    import fakecuda  # type: ignore[import-not-found]

    fakecuda.enable()
    _stub_lightning()
    import traced_cases

    traced_cases.native_silu_everywhere()  # SiLU's single-kernel backward, as on a GPU
    import memtrack  # type: ignore[import-not-found]
    import models  # type: ignore[import-not-found]
    import sdpa_cuda  # type: ignore[import-not-found]
    import torch
    import workspace  # type: ignore[import-not-found]
    from torch._subclasses.fake_tensor import FakeTensorMode

    lora, chunked_cross_entropy, prefix = _litgpt(Path(a.source).resolve())
    if a.as_published:  # PyTorch 2.1's mean in litgpt's RMSNorm (module docstring)
        import importlib

        rmsnorm = importlib.import_module(f"{'litgpt' if prefix else 'lit_gpt'}.rmsnorm")
        mean = _mean_saving_input()
        names = {k: getattr(torch, k) for k in dir(torch) if not k.startswith("__")}
        rmsnorm.torch = types.SimpleNamespace(**(names | {"mean": mean}))
    models._patch_trunc_normal()
    sdpa_cuda.install("auto")
    if a.quant:
        torch.nn.Linear = _linear4bit(a.quant == "nf4-dq")  # as BitsandbytesPrecision.init_context replaces it
        lora.nn.Linear = torch.nn.Linear
    with FakeTensorMode(allow_non_fake_inputs=False):
        targets = a.lora_targets.split(",")
        config = lora.Config.from_name(a.model, **lora_config(prefix, a.lora_r, a.lora_alpha, 0.05, targets))
        torch.set_default_dtype(torch.bfloat16)  # Fabric bf16-true: the module is built in bf16
        with torch.device("cuda"):
            model = lora.GPT(config)
        lora.mark_only_lora_as_trainable(model)
        if a.as_published:  # set in train(), outside Fabric's init context: the float32 RoPE cache
            torch.set_default_dtype(torch.float32)
        with torch.device("cuda"):
            model.max_seq_length = a.seq  # the longest training sample (finetune/lora.py:176)
        torch.set_default_dtype(torch.float32)
        with torch.device("cuda"):
            x = torch.randint(0, config.padded_vocab_size - 1, (a.batch, a.seq))
            y = torch.randint(0, config.padded_vocab_size - 1, (a.batch, a.seq))
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=3e-4, weight_decay=0.01)
        paged = 0
        if a.quant:  # PagedAdamW: fp32 states; those of 1e5+ elements in managed memory (bnb optimizer.py)
            paged = sum(2 * 4 * p.numel() for p in trainable if p.numel() >= 100_000)
            optimizer = torch.optim.AdamW(trainable, lr=3e-4, weight_decay=0.01, foreach=False)
            for p in trainable:
                if p.numel() < 100_000:
                    optimizer.state[p] = {
                        "exp_avg": torch.zeros_like(p, dtype=torch.float32, device="cuda"),
                        "exp_avg_sq": torch.zeros_like(p, dtype=torch.float32, device="cuda"),
                    }
        tracker = memtrack.StorageTracker(
            device_type="cuda",
            block=512,
            workspace_fn=workspace.make_workspace_fn(),
            persistent_fn=workspace.make_persistent_fn(a.gpu),
        )
        tracker.register_module(model)
        for state in optimizer.state.values():  # PagedAdamW's device states, made before the first step
            for tensor in state.values():
                tracker.register(tensor, "optimizer_state")
        tracker.register(x, "input")
        tracker.register(y, "input")
        hooks = [*tracker.install_module_hooks(model), *tracker.install_grad_hooks(model)]
        model.train()
        with tracker:
            for step in (1, 2):
                tracker.set_phase("forward", step)
                logits = model(x, lm_head_chunk_size=128)
                if a.as_published:  # Fabric's convert_output: every floating output to the default dtype
                    logits = [chunk.to(torch.get_default_dtype()) for chunk in logits]
                logits[-1] = logits[-1][..., :-1, :]
                loss = chunked_cross_entropy(logits, y[..., 1:])
                tracker.set_phase("backward")
                loss.backward()
                del logits, loss
                tracker.set_phase("optimizer")
                if not a.quant:
                    optimizer.step()
                optimizer.zero_grad()
                tracker.set_phase("idle")
        for hook in hooks:
            hook.remove()
    peaks = tracker.iter_peaks
    step = max(peaks, key=lambda k: peaks[k].total)
    return {
        "litgpt_model": a.model,
        "quant": a.quant,
        "batch": a.batch,
        "seq": a.seq,
        "peak_bytes": peaks[step].total,
        "peak_phase": peaks[step].phase,
        "peak_step": step,
        "peak_at_op": peaks[step].op,
        "peak_by_category": {k: v for k, v in peaks[step].by_cat.items() if v},
        "live_at_peak": tracker.live_at(peaks[step].idx, top=a.top) if a.top else [],
        "phase_peaks": {ph: pk.total for (it, ph), pk in tracker.phase_peaks.items() if it == step and ph != "idle"},
        "paged_state_bytes": paged,
        "params": sum(p.numel() for p in model.parameters()),
        "trainable": sum(p.numel() for p in trainable),
    }


def case_arguments(row: dict[str, Any]) -> list[str]:
    """The tracer's command line for one row of benchmarks/data/measured_litgpt.yaml."""
    argv = ["--model", row["litgpt_config"], "--seq", str(row["longest_sample_tokens"])]
    argv += ["--batch", str(row["micro_batch_size"])]
    quant = {"bnb.nf4": "nf4", "bnb.nf4-dq": "nf4-dq"}.get(row["quantize"] or "")
    return argv + (["--quant", quant] if quant else [])


def regenerate(source: str) -> None:
    """Trace every measured row of benchmarks/data/measured_litgpt.yaml, each in its own process (the
    quantized runs replace ``torch.nn.Linear``), and write benchmarks/data/tracer_litgpt.json."""
    import subprocess

    import yaml

    rows = yaml.safe_load((DATA / "measured_litgpt.yaml").read_text(encoding="utf-8"))
    cases = {}
    for row in rows:
        if row["outcome"] != "measured" or row.get("kind") == "generate":  # fine-tuning rows only
            continue
        argv = [*case_arguments(row), "--as-published", "--json"]
        run_ = subprocess.run([sys.executable, __file__, "--source", source, *argv], capture_output=True, text=True)
        cases[row["id"]] = json.loads(run_.stdout.splitlines()[-1]) | {"command": " ".join(argv)}
    about = f"benchmarks/tracer_litgpt.py on litgpt at {LITGPT_COMMIT}; run of {datetime.date.today()}"
    text = json.dumps({"about": about, "cases": dict(sorted(cases.items()))}, indent=1)
    (DATA / "tracer_litgpt.json").write_text(text + "\n", encoding="utf-8")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", required=True, help="a litgpt checkout (the folder holding lit_gpt/)")
    parser.add_argument("--regenerate", action="store_true", help="trace every case, write the data file")
    parser.add_argument("--model", help="a litgpt config name, e.g. Llama-2-7b-hf")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int)
    parser.add_argument("--quant", choices=("nf4", "nf4-dq"))
    parser.add_argument("--lora-r", type=int, default=8)
    parser.add_argument("--lora-alpha", type=int, default=16)
    parser.add_argument("--lora-targets", default="query,value", help="of query,key,value,projection,mlp,head")
    parser.add_argument("--gpu", default="a100", help="cuBLAS workspace sizes of this card")
    parser.add_argument("--top", type=int, default=0, help="list this many tensors live at the peak")
    parser.add_argument("--as-published", action="store_true", help="Fabric's output cast, PyTorch 2.1's mean")
    parser.add_argument("--json", action="store_true")
    a = parser.parse_args(argv)
    if a.regenerate:
        regenerate(a.source)
        return
    if a.model is None or a.seq is None:
        parser.error("--model and --seq are needed (or --regenerate)")
    result = run(a)
    print(json.dumps(result) if a.json else f"{result['peak_bytes']:,} B at {result['peak_phase']}")


if __name__ == "__main__":
    main(sys.argv[1:])
