"""Allocator-level references for torchtune's LoRA and QLoRA fine-tuning (``lora_finetune_single_device``).

Runs torchtune 0.6.1's own model code on the CPU tracer of ``shared/calibration/tracer`` (exact
``torch.cuda.max_memory_allocated()`` on fake CUDA tensors): the decoder of
``torchtune.models.llama3_2._component_builders.lora_llama3_2`` (``LoRALinear`` adapters, ``FrozenNF4Linear``
and torchao 0.14.1's ``NF4Tensor`` under ``quantize_base=True``, the LM head tied to the embedding) with fewer
layers than the published models, built in bf16 as the recipe does (``training.set_default_dtype``), only
the adapters trainable (``set_trainable_params``), in the loop of ``recipes/lora_finetune_single_device.py``:
``logits = model(tokens)`` under the activation-offloading context, the labels shifted with ``hstack``, the
loss (``CEWithChunkedOutputLoss`` with ``model.set_num_output_chunks(8)``, or ``torch.nn.CrossEntropyLoss``
on the flattened logits), ``del logits``, ``loss.backward()``, then ``torch.optim.AdamW`` (fused, as the
recipes' configs set it) and ``zero_grad(set_to_none=True)``. Two steps; the peak is the larger.

``--ac`` wraps each ``TransformerSelfAttentionLayer`` in PyTorch's non-reentrant checkpoint
(``training.set_activation_checkpointing``). ``--offload`` runs torchtune's own ``OffloadActivations``
(``get_act_offloading_ctx_manager``, the output layer under a ``NoOpManager``) with a stand-in for what a
CPU-only build cannot run: ``torch.cuda.Stream``, ``stream()``, ``default_stream()`` and events are objects
whose waits and records do nothing (on a GPU they order copies; they allocate nothing), so the forward stash
of 5 tensors and the tensors brought back in backward are freed exactly where torchtune's code frees them.
The pinned host copies are fake CPU tensors, which the tracker does not count.

SiLU's backward is the single-kernel one a GPU runs (``tracer_bnb.native_silu_backward``), and the fused
AdamW step allocates nothing beyond its states (``_fused_adamw_`` has no meta kernel on a CPU build; the
stand-in updates nothing and allocates nothing, as the CUDA kernel).

    /tmp/tracer-venv/bin/python benchmarks/tracer_torchtune.py --layers 4 --hidden 2048 --heads 32 \\
        --kv-heads 8 --ffn 8192 --vocab 128256 --batch 2 --seq 1024 --rank 64 --qlora --ac --chunked --json
    /tmp/tracer-venv/bin/python benchmarks/tracer_torchtune.py --regenerate   # benchmarks/data/tracer_torchtune.json
    python benchmarks/tracer_torchtune.py --score                              # vramcalc against it (no torch)
    /tmp/tracer-venv/bin/python benchmarks/tracer_torchtune.py --regenerate-full  # tracer_torchtune_full.json
    python benchmarks/tracer_torchtune.py --score-full

``--full`` runs ``full_finetune_single_device`` instead (``llama3_2``, every parameter trained);
``--optim-in-bwd`` its ``optimizer_in_bwd`` (one optimizer per parameter, ``register_optim_in_bwd_hooks``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TRACER = HERE.parent.parent / "shared" / "calibration" / "tracer"
DATA = HERE / "data" / "tracer_torchtune.json"
DATA_FULL = HERE / "data" / "tracer_torchtune_full.json"

#: The two model shapes: Llama-3.2-1B's and Llama-3.2-3B's widths (torchtune ``llama3_2_1b``/``llama3_2_3b``)
#: with fewer layers (every NF4 weight's size a multiple of 64 x 256, as ``to_nf4`` asserts).
SHAPES = {
    "1b": "--layers 4 --hidden 2048 --heads 32 --kv-heads 8 --ffn 8192 --vocab 128256",
    "3b": "--layers 3 --hidden 3072 --heads 24 --kv-heads 8 --ffn 8192 --vocab 128256",
}
#: The recipes' adapters (``3B_lora_single_device.yaml``: q_proj, v_proj, output_proj and the MLP, rank 64,
#: alpha 128), and a smaller one (q_proj and v_proj, rank 8: ``lora_llama3_2_1b``'s defaults).
ADAPTERS = {
    "qvo-mlp-r64": "--rank 64 --alpha 128 --attn q_proj,v_proj,output_proj --mlp",
    "qv-r8": "--rank 8 --alpha 16 --attn q_proj,v_proj",
    "full": "--full",  # full fine-tuning (full_finetune_single_device): llama3_2, every parameter trained
}
#: The cases: (shape, adapter, the technique flags, batch x sequence).
CASES = [
    (shape, adapter, flags, batch, seq)
    for shape in SHAPES
    for adapter, flags, batch, seq in (
        ("qvo-mlp-r64", "", 1, 1024),
        ("qvo-mlp-r64", "--ac", 2, 1024),
        ("qvo-mlp-r64", "--chunked", 1, 1024),
        ("qvo-mlp-r64", "--ac --chunked", 2, 2048),
        ("qvo-mlp-r64", "--ac --chunked --offload", 2, 2048),
        ("qvo-mlp-r64", "--qlora", 1, 1024),
        ("qvo-mlp-r64", "--qlora --ac --chunked", 2, 2048),
        ("qvo-mlp-r64", "--qlora --ac --chunked --offload", 2, 2048),
        ("qv-r8", "--qlora --chunked", 1, 512),
        ("qv-r8", "--ac", 1, 2048),
        ("qvo-mlp-r64", "--qlora", 1, 128),  # short: the NF4 dequantization is the peak
        ("qvo-mlp-r64", "--qlora --ac", 1, 128),
    )
]

#: Full fine-tuning (``full_finetune_single_device.py`` with ``llama3_2``): the recipe's techniques, each
#: alone and together, on both widths.
FULL_CASES = [
    (shape, "full", flags, 2, seq)
    for shape in SHAPES
    for flags, seq in (
        ("", 1024),
        ("--chunked", 1024),
        ("--ac", 2048),
        ("--ac --chunked", 2048),
        ("--ac --chunked --offload", 2048),
        ("--optim-in-bwd", 1024),
        ("--optim-in-bwd --ac --chunked", 2048),
    )
]


def _case_id(shape: str, adapter: str, flags: str, batch: int, seq: int) -> str:
    techniques = "-".join(f.lstrip("-") for f in flags.split()) or "plain"
    return f"{shape}-{adapter}-{techniques}-b{batch}-s{seq}"


def vramcalc_spec(shape: str, adapter: str, flags: str, batch: int, seq: int) -> dict[str, Any]:
    """vramcalc's spec of one case: the model torchtune builds, the recipe's workload."""
    a = _parse(shlex.split(f"{SHAPES[shape]} {ADAPTERS[adapter]} {flags} --batch {batch} --seq {seq}"))
    model = {
        "architecture": "decoder", "layers": a.layers, "hidden_size": a.hidden, "heads": a.heads,
        "kv_heads": a.kv_heads, "ffn_size": a.ffn, "mlp": "swiglu", "norm": "rmsnorm", "position": "rotary",
        "vocab_size": a.vocab, "tie_embeddings": True, "max_position_embeddings": 131072,
    }  # fmt: skip
    targets = list(a.attn.split(",")) + (["w1", "w2", "w3"] if a.mlp else [])
    workload: dict[str, Any] = {
        "mode": "train", "batch_size": batch, "seq_len": seq, "precision": "bf16", "optimizer": "adamw",
        "optimizer_impl": "fused", "attention": "sdpa",
    }  # fmt: skip
    if a.full:
        workload["runtime"] = "torchtune"
    else:
        workload["adapter"] = {"framework": "torchtune", "rank": a.rank, "alpha": a.alpha, "targets": targets}
    if a.optim_in_bwd:
        workload["optimizer_in_backward"] = True
    if a.qlora:
        workload["quantization"] = "nf4"
    if a.ac:
        workload["gradient_checkpointing"] = "full"
    if a.chunked:
        workload["cross_entropy"] = "chunked"
    if a.offload:
        workload["activation_offloading"] = True
    return {"name": _case_id(shape, adapter, flags, batch, seq), "model": model, "workload": workload}


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for flag in ("--layers", "--hidden", "--heads", "--kv-heads", "--ffn", "--vocab", "--batch", "--seq", "--rank"):
        p.add_argument(flag, type=int, required=flag != "--rank", default=8)
    p.add_argument("--alpha", type=float, default=16.0)
    p.add_argument("--attn", default="q_proj,v_proj", help="lora_attn_modules, comma-separated")
    p.add_argument("--mlp", action="store_true", help="apply_lora_to_mlp")
    p.add_argument("--qlora", action="store_true", help="quantize_base (torchao NF4Tensor)")
    p.add_argument("--full", action="store_true", help="full fine-tuning: llama3_2, every parameter trained")
    p.add_argument("--foreach", action="store_true", help="torch.optim.AdamW's default foreach step (else fused)")
    p.add_argument("--optim-in-bwd", action="store_true", help="optimizer_in_bwd: one AdamW per parameter, in backward")
    p.add_argument("--ac", action="store_true", help="enable_activation_checkpointing")
    p.add_argument("--chunked", action="store_true", help="CEWithChunkedOutputLoss (else CrossEntropyLoss)")
    p.add_argument("--offload", action="store_true", help="enable_activation_offloading")
    p.add_argument("--gpu", default="h100", help="cuBLAS workspace sizes of this card")
    p.add_argument("--top", type=int, default=0, help="list this many tensors live at the peak")
    p.add_argument("--json", action="store_true")
    return p.parse_args(argv)


class _Event:
    """A CUDA event whose waits order nothing here (the copies it orders allocate nothing on the device)."""

    def synchronize(self) -> None:
        return None


class _Stream:
    """A CUDA stream stand-in: a context manager whose waits and records do nothing."""

    def wait_event(self, event: Any) -> None:
        return None

    def wait_stream(self, stream: Any) -> None:
        return None

    def record_event(self, event: Any = None) -> _Event:
        return _Event()


def _stand_in_streams(torch: Any) -> None:
    """``torch.cuda`` streams and events for ``OffloadActivations`` on a CPU-only build (module docstring)."""
    import contextlib

    stream = _Stream()
    torch.cuda.default_stream = lambda *a, **k: stream
    torch.cuda.current_stream = lambda *a, **k: stream
    torch.cuda.Stream = lambda *a, **k: _Stream()
    torch.cuda.stream = lambda s: contextlib.nullcontext()
    torch.Tensor.record_stream = lambda self, s: None


def _fused_adamw_stand_in(torch: Any) -> None:
    """``torch.optim.AdamW(fused=True)`` steps with ``torch._fused_adamw_``, one in-place CUDA kernel; a
    CPU-only build has no kernel for fake CUDA tensors, so the step is replaced by one that allocates nothing."""
    import torch.optim.adam as adam  # noqa: F401
    from torch.optim import adamw as adamw_mod

    def fused(*args: Any, **kwargs: Any) -> None:
        return None

    for module in (adamw_mod, sys.modules["torch.optim.adam"]):
        if hasattr(module, "_fused_adamw"):
            module._fused_adamw = fused
        if hasattr(module, "_fused_adam"):
            module._fused_adam = fused


def _inplace_accumulation(torch: Any, shape: tuple[int, ...]) -> Any:
    """A dispatch mode that sums the gradients of a weight read several times in place, as autograd does on a
    GPU: ``InputBuffer::accumulate`` (torch/csrc/autograd/input_buffer.cpp) runs ``old_var.add_(var)`` when
    the buffer holds the last reference to a dense tensor and ``var`` is no tensor subclass, and ``old_var +
    var`` otherwise, which is what a fake tensor (a subclass) gets. Only the ``add`` of two gradients of
    ``shape`` (the tied output weight, read once per output chunk) outside grad mode is redirected."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class InplaceAccumulation(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            if (
                func is torch.ops.aten.add.Tensor
                and not torch.is_grad_enabled()
                and not kwargs
                and len(args) == 2
                and all(isinstance(t, torch.Tensor) and tuple(t.shape) == shape for t in args)
            ):
                return args[0].add_(args[1])
            return func(*args, **kwargs)

    return InplaceAccumulation()


def _nf4_linear_without_swap() -> None:
    """``FrozenNF4Linear.__init__`` puts the NF4 weight in with ``torch.utils.swap_tensors``, which refuses a
    fake tensor (the fake mode holds a weak reference to it); this builds the same module, the bf16 weight
    made, quantized with ``to_nf4`` and replaced by the frozen NF4 parameter."""
    import torch
    from torchao.dtypes.nf4tensor import to_nf4
    from torchtune.modules.low_precision import nf4_linear

    def init(self: Any, in_dim: int, out_dim: int, bias: bool = False, device: Any = None, dtype: Any = None,
             **quantization_kwargs: Any) -> None:  # fmt: skip
        torch.nn.Linear.__init__(self, in_dim, out_dim, bias=bias, device=device, dtype=dtype)
        self.weight = torch.nn.Parameter(to_nf4(self.weight.detach(), **quantization_kwargs), requires_grad=False)
        if self.bias is not None:
            self.bias.requires_grad_(False)

    nf4_linear.FrozenNF4Linear.__init__ = init


def _inner_tensors(param: Any) -> list[Any]:
    """An ``NF4Tensor``'s storages (codes, quantized scalers, their factors, the mean, the 16 NF4 values)."""
    names = ("quantized_data", "quantized_scalers", "quantization_factor", "scaler_mean", "nf4")
    inner = [getattr(param, n) for n in names if getattr(param, n, None) is not None]
    return inner


def run(a: argparse.Namespace) -> dict[str, Any]:
    sys.path.insert(0, str(TRACER))
    sys.path.insert(0, str(HERE))
    import fakecuda  # type: ignore[import-not-found]

    fakecuda.enable()  # before torch is imported
    import memtrack  # type: ignore[import-not-found]
    import models  # type: ignore[import-not-found]
    import sdpa_cuda  # type: ignore[import-not-found]
    import torch
    import traced_cases
    from torch._subclasses.fake_tensor import FakeTensorMode
    from tracer_bnb import native_silu_backward

    _stand_in_streams(torch)
    _fused_adamw_stand_in(torch)
    from torchtune import modules, training
    from torchtune.models.llama3_1._position_embeddings import Llama3ScaledRoPE
    from torchtune.models.llama3_2._component_builders import llama3_2, lora_llama3_2
    from torchtune.modules.loss import CEWithChunkedOutputLoss
    from torchtune.modules.peft import get_adapter_params, set_trainable_params

    models._patch_trunc_normal()
    sdpa_cuda.install("auto")
    # Llama3ScaledRoPE.apply_scaling branches on each frequency's value (a Python loop); the values do not
    # matter here, so the frequencies pass through unscaled (same shape and dtype)
    Llama3ScaledRoPE.apply_scaling = lambda self, freqs, *args, **kw: freqs.clone()
    _nf4_linear_without_swap()

    def register_module(self: Any, module: Any) -> None:
        """The tracker's registration, an NF4 weight counted by its inner tensors (the wrapper owns none)."""
        for p in module.parameters():
            for t in _inner_tensors(p) or [p]:
                self.register(t, "parameter")
                if t.device.type == self.device_type:
                    self.param_storages.add(id(t.untyped_storage()))
        for b in module.buffers():
            self.register(b, "buffer")

    memtrack.StorageTracker.register_module = register_module
    with FakeTensorMode(allow_non_fake_inputs=True):
        with training.set_default_dtype(torch.bfloat16), torch.device("cuda"):
            if a.full:
                model = llama3_2(
                    vocab_size=a.vocab, num_layers=a.layers, num_heads=a.heads, num_kv_heads=a.kv_heads,
                    embed_dim=a.hidden, max_seq_len=131072, intermediate_dim=a.ffn,
                )  # fmt: skip
            else:
                model = lora_llama3_2(
                    lora_attn_modules=a.attn.split(","),
                    apply_lora_to_mlp=a.mlp,
                    vocab_size=a.vocab,
                    num_layers=a.layers,
                    num_heads=a.heads,
                    num_kv_heads=a.kv_heads,
                    embed_dim=a.hidden,
                    max_seq_len=131072,  # lora_llama3_2_1b and _3b: the RoPE cache of 131072 positions
                    intermediate_dim=a.ffn,
                    lora_rank=a.rank,
                    lora_alpha=a.alpha,
                    quantize_base=a.qlora,
                )
        for module in model.modules():  # FeedForward's nn.SiLU: the single-kernel backward of a GPU
            if type(getattr(module, "activation", None)).__name__ == "SiLU":
                module.act_fn = module.activation
                native_silu_backward(module)
                module.activation = module.act_fn
                del module.act_fn
        if not a.full:  # full fine-tuning trains every parameter
            set_trainable_params(model, get_adapter_params(model))
        if a.ac:
            training.set_activation_checkpointing(model, auto_wrap_policy={modules.TransformerSelfAttentionLayer})
        offload = training.get_act_offloading_ctx_manager(model, a.offload)
        loss_fn = CEWithChunkedOutputLoss() if a.chunked else torch.nn.CrossEntropyLoss(ignore_index=-100)
        if a.chunked:
            model.set_num_output_chunks(loss_fn.num_output_chunks)
        with torch.device("cuda"):
            tokens = torch.randint(0, a.vocab - 1, (a.batch, a.seq))
            labels = torch.randint(0, a.vocab - 1, (a.batch, a.seq))
            ignore = torch.full((a.batch, 1), -100)
        trained = [p for p in model.parameters() if p.requires_grad]
        tracker = traced_cases.card_tracker(a.gpu, model, tokens, labels, ignore)
        hooks = [*tracker.install_module_hooks(model), *tracker.install_grad_hooks(model)]
        if a.optim_in_bwd:  # full_finetune_single_device._setup_optimizer: one optimizer per parameter
            optim_dict = {p: torch.optim.AdamW([p], lr=3e-4, weight_decay=0.01, fused=not a.foreach) for p in trained}
            training.register_optim_in_bwd_hooks(model=model, optim_dict=optim_dict)
            optimizer = None
        else:
            optimizer = torch.optim.AdamW(trained, lr=3e-4, weight_decay=0.01, fused=not a.foreach)
            hooks.append(tracker.install_optimizer_hooks(optimizer))
        model.train()
        weight = model.tok_embeddings.weight
        inplace = (
            _inplace_accumulation(torch, tuple(weight.shape)) if a.full and a.chunked else contextlib.nullcontext()
        )
        with tracker, inplace:
            for step in (1, 2):
                tracker.set_phase("forward", step)
                with offload:
                    logits = model(tokens)
                shifted = torch.hstack((labels[..., 1:], ignore[: labels.shape[0]]))
                if not isinstance(logits, list):
                    shifted = shifted.reshape(-1)
                    logits = logits.reshape(-1, logits.size(-1))
                loss = loss_fn(logits, shifted)
                del logits
                tracker.set_phase("backward")
                loss.backward()
                del loss
                tracker.set_phase("optimizer")
                if optimizer is not None:
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                tracker.set_phase("idle")
        for hook in hooks:
            hook.remove()
    peaks = tracker.iter_peaks
    step = max(peaks, key=lambda k: peaks[k].total)
    trainable = [p for p in model.parameters() if p.requires_grad]
    return {
        "peak_bytes": peaks[step].total,
        "peak_phase": peaks[step].phase,
        "peak_step": step,
        "peak_at_op": peaks[step].op,
        "peak_by_category": {k: v for k, v in peaks[step].by_cat.items() if v},
        "phase_peaks": {ph: pk.total for (it, ph), pk in tracker.phase_peaks.items() if it == step and ph != "idle"},
        "live_at_peak": tracker.live_at(peaks[step].idx, top=a.top) if a.top else [],
        "trainable": sum(p.numel() for p in trainable),
    }


def versions() -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in ("torch", "torchtune", "torchao")}


def regenerate(full: bool = False) -> None:
    """Trace every case in its own process (fake CUDA must load before torch) and write DATA (the LoRA and
    QLoRA cases) or, ``full``, DATA_FULL (the full fine-tuning cases)."""
    out, found = [], None
    for shape, adapter, flags, batch, seq in FULL_CASES if full else CASES:
        command = f"{SHAPES[shape]} {ADAPTERS[adapter]} {flags} --batch {batch} --seq {seq}"
        argv = [sys.executable, str(HERE / "tracer_torchtune.py"), *shlex.split(command), "--json"]
        res = json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)
        found = res.pop("versions")
        spec = vramcalc_spec(shape, adapter, flags, batch, seq)
        entry = {"id": spec["name"], "command": f"python benchmarks/tracer_torchtune.py {command}"}
        out.append(entry | {"model": spec["model"], "workload": spec["workload"]} | res)
        print(f"{spec['name']}: {res['peak_bytes']:,} B ({res['peak_phase']})", file=sys.stderr)
    recipe, builder = (
        ("full_finetune_single_device", "llama3_2") if full else ("lora_finetune_single_device", "lora_llama3_2")
    )
    about = (
        "CPU tracer (shared/calibration/tracer) run through benchmarks/tracer_torchtune.py: exact "
        f"max_memory_allocated() of two steps of torchtune's {recipe} loop on torchtune's "
        f"own {builder} decoder (Llama-3.2-1B and -3B widths, 4 and 3 layers), H100 cuBLAS workspaces"
    )
    (DATA_FULL if full else DATA).write_text(
        json.dumps({"about": about, "versions": found, "gpu": "h100", "cases": out}, indent=1) + "\n"
    )


def score(data: Path = DATA) -> None:
    """vramcalc against every stored case of ``data`` (no torch needed)."""
    sys.path.insert(0, str(HERE.parent))
    from vramcalc.errors import SpecError
    from vramcalc.families import estimate
    from vramcalc.spec.load import parse_spec

    cases = json.loads(data.read_text(encoding="utf-8"))["cases"]
    specs = [parse_spec({"name": c["id"], "model": c["model"], "workload": c["workload"]}) for c in cases]
    for case, spec in list(zip(cases, specs, strict=True)):
        try:
            estimate(spec)
        except SpecError as refused:  # traced but not modelled: listed, not scored
            print(f"{case['id']:66s} tracer {case['peak_bytes']:>14,}  refused: {refused}")
            cases.remove(case)
            specs.remove(spec)
    estimates = [estimate(spec, hopper_or_newer=True).peak_allocated_bytes for spec in specs]  # H100 workspaces
    errors = [100 * (est / case["peak_bytes"] - 1) for est, case in zip(estimates, cases, strict=True)]
    for case, est, error in zip(cases, estimates, errors, strict=True):
        print(f"{case['id']:66s} tracer {case['peak_bytes']:>14,}  vramcalc {est:>14,}  {error:>+7.2f} %")
    ordered = sorted(abs(e) for e in errors)
    print(f"median |error| {ordered[len(ordered) // 2]:.2f} %, max {ordered[-1]:.2f} %")


def main(argv: list[str]) -> None:
    """``--regenerate``, ``--score``, or one traced case (its flags)."""
    modes = {
        "--regenerate": regenerate,
        "--score": score,
        "--regenerate-full": lambda: regenerate(full=True),
        "--score-full": lambda: score(DATA_FULL),
    }
    if len(argv) == 1 and argv[0] in modes:
        modes[argv[0]]()
        return
    args = _parse(argv)
    result = run(args) | {"versions": versions()}
    print(json.dumps(result, indent=1) if args.json else f"{result['peak_bytes']:,} B at {result['peak_phase']}")


if __name__ == "__main__":
    main(sys.argv[1:])
