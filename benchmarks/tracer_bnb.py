"""Allocator-level references for bitsandbytes k-bit training (QLoRA, 8-bit LoRA) and k-bit forwards.

Runs the CPU tracer of ``shared/calibration/tracer`` (exact ``torch.cuda.max_memory_allocated()`` of real
transformers models on fake CUDA tensors) on a model whose decoder linears are bitsandbytes modules, as
transformers' bitsandbytes loader leaves them (``lm_head`` is not converted):

* ``--quant nf4|fp4 [--double-quant]``: ``bnb.nn.Linear4bit`` with ``Params4bit`` quantized by
  ``Params4bit._quantize`` (``F.quantize_4bit``: 2 weights per uint8, one fp32 absmax per 64-block; with
  double quantization uint8 absmax, one fp32 absmax per 256 of them and an fp32 offset), compute dtype
  ``--compute-dtype`` (``bnb_4bit_compute_dtype``);
* ``--quant int8``: ``bnb.nn.Linear8bitLt(has_fp16_weights=False, threshold=--int8-threshold)`` with
  ``Int8Params._quantize`` (int8 ``CB`` + fp32 ``SCB`` per row);
* ``--lora R:TARGETS``: ``peft.prepare_model_for_kbit_training`` (unless ``--no-prepare``; its gradient
  checkpointing is reentrant, as peft sets it, unless ``--no-checkpointing``) then ``get_peft_model``.

The kernels run as fake ops. Where a CUDA kernel's Python body (bitsandbytes/backends/cuda/ops.py,
backends/default/ops.py) allocates more than its outputs, the op is replaced by a replica of that body that
allocates the same tensors in the same order (``_CudaOps``): ``gemm_4bit`` (dequantize + ``F.linear`` above
the custom kernel's token range, chosen by bitsandbytes' own ``_gemm_4bit_use_custom_cuda`` for ``--gpu``),
``int8_scaled_mm`` (int32 product, fp16 dequant, cast), ``int8_mixed_scaled_mm`` and
``int8_vectorwise_quant`` (the outlier mask). Outlier columns depend on the data: none are found (as on a
model without activations above the threshold). The quantization state tensors, which are neither
parameters nor buffers, are counted as parameters.

Needs bitsandbytes and peft in the tracer's venv::

    /tmp/tracer-venv/bin/pip install bitsandbytes peft
    /tmp/tracer-venv/bin/python benchmarks/tracer_bnb.py --arch llama ... --quant nf4 --double-quant \
        --lora 16:all-linear --json
    /tmp/tracer-venv/bin/python benchmarks/tracer_bnb.py --regenerate   # benchmarks/data/tracer_bnb.json
"""

from __future__ import annotations

import ast
import functools
import json
import sys
from pathlib import Path
from typing import Any

from tracer_llm import _take

HERE = Path(__file__).resolve().parent
TRACER = HERE.parent.parent / "shared" / "calibration" / "tracer"
#: (SMs, major, minor) for bitsandbytes' gemm_4bit kernel choice
GPUS = {"h100": (132, 9, 0), "h200": (132, 9, 0), "a100": (108, 8, 0), "b200": (148, 10, 0), "l40s": (142, 8, 9)}
FLAGS = {
    "--quant": True, "--double-quant": False, "--compute-dtype": True, "--int8-threshold": True,
    "--lora": True, "--lora-dropout": True, "--no-prepare": False, "--no-checkpointing": False,
    "--cache": False, "--keep-silu-decomposition": False,
}  # fmt: skip


def _use_custom_fn(gpu: str) -> Any:
    """bitsandbytes' own ``_gemm_4bit_use_custom_cuda`` (backends/cuda/ops.py), read from its source (the
    module loads CUDA symbols and cannot be imported here), with ``gpu``'s properties."""
    import bitsandbytes
    import torch

    path = Path(bitsandbytes.__file__).parent / "backends" / "cuda" / "ops.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_gemm_4bit_use_custom_cuda")
    props = GPUS[gpu]
    ns: dict[str, Any] = {"torch": torch, "functools": functools, "_GEMM_4BIT_CUSTOM_FLOOR_M": 4}
    ns["_gpu_dispatch_props"] = lambda _i: props
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(path), "exec"), ns)
    return ns["_gemm_4bit_use_custom_cuda"]


class _Packet:
    """Stands in for ``torch.ops.bitsandbytes.<op>``: ``.default`` is the replica, the rest the real op."""

    def __init__(self, original: Any, default: Any) -> None:
        self._original, self.default = original, default

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.default(*args, **kwargs)


class _CudaOps:
    """Replicas of the CUDA kernels' Python bodies in bitsandbytes 0.50 (backends/cuda/ops.py and the
    composite ops of backends/default/ops.py): the same tensors, allocated in the same order."""

    def __init__(self, gpu: str) -> None:
        import torch

        self.torch, self.use_custom = torch, _use_custom_fn(gpu)
        self.kernel_choice: dict[str, int] = {}

    def install(self) -> None:
        ns = self.torch.ops.bitsandbytes
        for name in ("gemm_4bit", "int8_scaled_mm", "int8_mixed_scaled_mm", "int8_vectorwise_quant"):
            setattr(ns, name, _Packet(getattr(ns, name), getattr(self, name)))

    def gemm_4bit(self, A, B, shapeB, absmax, blocksize, quant_type, bias=None, absmax_8bit=None,  # noqa: ANN001
                  absmax_code=None, absmax_offset=None):  # fmt: skip
        torch = self.torch
        K = A.shape[-1]
        M, N = A.numel() // K, shapeB[0]
        if M > 1536 or K % blocksize != 0:  # _gemm_4bit_custom_max_m on CUDA
            custom = False
        else:
            custom = self.use_custom(0, A.dtype, M, N, K)
        key = "custom" if custom else "dequant+linear"
        self.kernel_choice[key] = self.kernel_choice.get(key, 0) + 1
        if not custom:  # _dequant_linear_fallback
            if absmax_8bit is not None:
                absmax_dq = torch.empty_like(absmax_8bit, dtype=torch.float32)
                absmax = absmax_dq + absmax_offset  # noqa: F841  (alive until F.linear returns, as there)
            B_dq = torch.empty(shapeB, dtype=A.dtype, device=A.device)
            return torch.nn.functional.linear(A, B_dq, bias)
        A = A.contiguous()  # _gemm_4bit_kernel_impl
        out = torch.empty((*A.shape[:-1], N), dtype=A.dtype, device=A.device)
        if absmax_offset is not None:
            absmax_offset.to(dtype=torch.float32)
        return out

    def int8_vectorwise_quant(self, A, threshold=0.0):  # noqa: ANN001
        torch = self.torch
        row_stats = torch.empty(A.numel() // A.shape[-1], device=A.device, dtype=torch.float32)
        out_row = torch.empty(A.shape, device=A.device, dtype=torch.int8)
        outlier_cols = None
        if threshold > 0.0:
            outliers = A.abs() >= threshold
            outliers.any()  # `if outliers.any():` -- traced as False: no outlier column
            outlier_cols = torch.empty(0, device=A.device, dtype=torch.int64)
        if A.numel() // A.shape[-1] > 1 and outlier_cols is not None:
            out_row[:, outlier_cols] = 0
        return out_row, row_stats, outlier_cols

    def int8_mixed_scaled_mm(self, A, CA, CB, SCA, SCB, outlier_cols=None, bias=None):  # noqa: ANN001
        if outlier_cols is not None and outlier_cols.numel():
            raise NotImplementedError("outlier columns depend on the data")
        subA = self.torch.empty(0, device=A.device, dtype=A.dtype)
        output = self.int8_scaled_mm(CA, CB, SCA, SCB, bias=bias, dtype=A.dtype)
        return output, subA

    def int8_scaled_mm(self, A, B, row_stats, col_stats, bias=None, dtype=None):  # noqa: ANN001
        torch = self.torch
        if A.shape[-1] % 4 != 0:
            raise NotImplementedError("int8_linear_matmul's fp32 fallback (inner dimension not a multiple of 4)")
        out_i32 = torch.empty((*A.shape[:-1], B.shape[0]), device=A.device, dtype=torch.int32)
        out = torch.empty_like(out_i32, dtype=torch.float16)  # int8_mm_dequant
        if bias is not None and bias.dtype != torch.float16:
            out.add_(bias)
        return out.to(dtype or torch.float16)


def _plain_param(data: Any, requires_grad: bool = False, **attrs: Any) -> Any:
    """``Params4bit`` / ``Int8Params`` cannot wrap a fake tensor (``Tensor._make_subclass`` refuses a tensor
    that already has a Python object): a plain parameter carrying the same attributes stands in for them;
    bitsandbytes' kernels and PEFT read only those attributes."""
    import torch

    param = torch.nn.Parameter(data, requires_grad=requires_grad)
    defaults = {"blocksize": 64, "compress_statistics": True, "quant_type": "fp4", "quant_state": None,
                "quant_storage": torch.uint8, "bnb_quantized": False, "module": None,
                "has_fp16_weights": False, "CB": None, "SCB": None}  # fmt: skip
    for key, value in {**defaults, **attrs}.items():
        setattr(param, key, value)
    return param


def quantize_linears(model: Any, quant: str, double_quant: bool, compute: Any, threshold: float) -> int:
    """Replace every linear of the decoder blocks (not ``lm_head``) as transformers' bitsandbytes loader does,
    quantizing each weight with ``Params4bit._quantize`` / ``Int8Params._quantize``."""
    import bitsandbytes as bnb
    import bitsandbytes.nn.modules as bnb_modules
    import torch

    real = bnb_modules.Params4bit, bnb_modules.Int8Params
    # F.quantize_blockwise caches create_dynamic_map() (256 fp32 values, read with .tolist()) on the device
    # once, shared by every weight: its values cannot be computed on fake tensors, its size is what counts
    bnb.functional.name2qmap.setdefault("dynamic", torch.empty(256, dtype=torch.float32))
    bnb_modules.Params4bit = bnb_modules.Int8Params = _plain_param
    count = 0
    try:
        for name, module in list(model.named_modules()):
            for child_name, child in list(module.named_children()):
                if not isinstance(child, torch.nn.Linear) or "lm_head" in f"{name}.{child_name}":
                    continue
                w, bias = child.weight.data, child.bias
                shape = (child.in_features, child.out_features)
                if quant == "int8":
                    new = bnb.nn.Linear8bitLt(*shape, bias=bias is not None, has_fp16_weights=False,
                                              threshold=threshold)  # fmt: skip
                    new.weight = real[1]._quantize(_plain_param(w), w.device)
                else:
                    new = bnb.nn.Linear4bit(*shape, bias=bias is not None, compute_dtype=compute,
                                            compress_statistics=double_quant, quant_type=quant)  # fmt: skip
                    param = _plain_param(w, compress_statistics=double_quant, quant_type=quant, module=new)
                    new.weight = real[0]._quantize(param, w.device)
                if bias is not None:
                    new.bias = bias
                setattr(module, child_name, new)
                count += 1
    finally:
        bnb_modules.Params4bit, bnb_modules.Int8Params = real
    setattr(model, "is_loaded_in_8bit" if quant == "int8" else "is_loaded_in_4bit", True)
    return count


def quant_state_tensors(model: Any) -> list[Any]:
    """Tensors of the quantization states, which are neither parameters nor buffers."""
    import torch

    out = []
    for m in model.modules():
        w = getattr(m, "weight", None)
        qs = getattr(w, "quant_state", None)
        if qs is not None:
            out += [qs.absmax, qs.code, qs.offset]
            if qs.state2 is not None:
                out += [qs.state2.absmax, qs.state2.code]
        state = getattr(m, "state", None)
        out += [getattr(w, "CB", None), getattr(w, "SCB", None)]
        out += [getattr(state, "CB", None), getattr(state, "SCB", None)]
    return [t for t in out if isinstance(t, torch.Tensor)]


def native_silu_backward(model: Any) -> int:
    """Give every SiLU of ``model`` the backward a GPU runs: one ``silu_backward`` kernel, one output.

    A CPU-only build has no CUDA kernel for ``aten.silu_backward``, so on fake CUDA tensors the dispatcher
    falls through to its CompositeImplicitAutograd kernel (``math_silu_backward``: sigmoid, 1 - sigmoid and
    four products), whose ffn-wide intermediates do not exist on a GPU (and not on CPU tensors either,
    which have the fused kernel). The replacement saves the same input and allocates only the gradient,
    as the CUDA kernel does (structured: the common dtype of the gradient and the input)."""
    import torch

    class Silu(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):  # type: ignore[no-untyped-def]
            ctx.save_for_backward(x)
            return torch.ops.aten.silu.default(x)

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def]
            (x,) = ctx.saved_tensors
            return torch.empty_like(x, dtype=torch.result_type(grad, x))

    class NativeSilu(torch.nn.Module):
        def forward(self, x):  # type: ignore[no-untyped-def]
            return Silu.apply(x)

    count = 0
    for module in model.modules():
        for name in ("act_fn", "activation_fn"):  # Phi-3's MLP names it activation_fn
            act = getattr(module, name, None)
            if act is not None and type(act).__name__ in ("SiLU", "SiLUActivation"):
                setattr(module, name, NativeSilu())
                count += 1
    return count


def main(argv: list[str]) -> None:
    opts: dict[str, str | None] = {}
    for flag, has_value in FLAGS.items():
        argv, opts[flag] = _take(argv, flag, has_value)
    sys.path.insert(0, str(TRACER))
    import fakecuda  # type: ignore[import-not-found]

    fakecuda.enable()  # before torch is imported
    import groundtruth  # type: ignore[import-not-found]
    import memtrack  # type: ignore[import-not-found]
    import models  # type: ignore[import-not-found]
    import torch

    gpu = groundtruth.parse_args(argv).gpu
    ops = _CudaOps(gpu)
    ops.install()
    original, register = models.build, memtrack.StorageTracker.register_module

    def register_module(self, module):  # type: ignore[no-untyped-def]
        register(self, module)
        for t in quant_state_tensors(module):
            self.register(t, "parameter")

    def build(arch, a, dtype):  # type: ignore[no-untyped-def]
        model, make_batch, desc = original(arch, a, dtype)
        if not opts["--keep-silu-decomposition"]:
            native_silu_backward(model)
        quant = opts["--quant"]
        if quant:
            dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
            compute = dtypes[opts["--compute-dtype"] or "bf16"]
            threshold = float(opts["--int8-threshold"] or 6.0)
            n = quantize_linears(model, quant, bool(opts["--double-quant"]), compute, threshold)
            desc += f" + {n} bitsandbytes {quant}{' double-quant' if opts['--double-quant'] else ''} linears"
        if opts["--lora"]:
            from peft import prepare_model_for_kbit_training
            from tracer_llm import with_lora

            if not opts["--no-prepare"]:
                ckpt = not opts["--no-checkpointing"]
                kwargs = {"use_reentrant": True, "preserve_rng_state": False}  # no CUDA RNG on the fake device
                model = prepare_model_for_kbit_training(model, ckpt, kwargs, auto_clear_cache=False)
                desc += " + prepare_model_for_kbit_training" + (" (reentrant checkpointing)" if ckpt else "")
            model = with_lora(model, opts["--lora"], float(opts["--lora-dropout"] or 0.0))
            rank, targets = opts["--lora"].split(":")
            desc += f" + LoRA r={rank} {targets}"
        if opts["--cache"]:
            model.config.use_cache = True

            def batch(train):  # type: ignore[no-untyped-def]
                return {**make_batch(train), "use_cache": True, "logits_to_keep": 1}

            return model, batch, desc + " + KV cache, last logits"
        return model, make_batch, desc

    models.build, memtrack.StorageTracker.register_module = build, register_module
    res = groundtruth.run(groundtruth.parse_args(argv))
    res["gemm_4bit_kernel_calls"] = ops.kernel_choice
    res["versions"] = versions()
    print(json.dumps(res, indent=2))


def versions() -> dict[str, str]:
    from importlib.metadata import version

    return {k: version(k) for k in ("bitsandbytes", "torch", "transformers", "peft")}


if __name__ == "__main__":
    if sys.argv[1:] == ["--regenerate"]:
        sys.path.insert(0, str(HERE))
        from tracer_bnb_cases import regenerate

        regenerate()
    else:
        main(sys.argv[1:])
