"""Allocator-level references for torchao's int8 configurations run eagerly (an inference forward).

Runs the CPU tracer of ``shared/calibration/tracer`` (exact ``torch.cuda.max_memory_allocated()`` of real
transformers models on fake CUDA tensors) on a model whose decoder linears torchao's ``quantize_`` has
converted, as transformers' ``TorchAoConfig`` leaves them (``lm_head`` is not converted unless
``--lm-head``); ``--score`` compares vramcalc's estimate of the same forwards with the stored results:

* ``--quant int8_weight_only``: ``Int8WeightOnlyConfig()``;
* ``--quant int8_dynamic_activation_int8_weight``: ``Int8DynamicActivationInt8WeightConfig()``.

torchao's own code runs on the fake tensors (``Int8Tensor`` and its ``_linear_impl``; ``torch._int_mm``
has a fake kernel). A quantized weight is a tensor subclass that owns no storage: its inner tensors are
registered as the parameters instead of its nominal bf16 shape.

Needs torchao in the tracer's venv::

    /tmp/tracer-venv/bin/pip install torchao==0.18.0
    /tmp/tracer-venv/bin/python benchmarks/tracer_torchao.py --quant int8_weight_only --arch llama \
        --layers 2 --hidden 1024 --heads 16 --kv-heads 4 --ffn 2816 --vocab 32000 --batch 2 --seq 256 \
        --dtype bf16 --mode infer --json
    /tmp/tracer-venv/bin/python benchmarks/tracer_torchao.py --regenerate   # benchmarks/data/tracer_torchao.json
    python benchmarks/tracer_torchao.py --score       # vramcalc against the stored cases (no torch needed)
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from tracer_llm import _take

HERE = Path(__file__).resolve().parent
TRACER = HERE.parent.parent / "shared" / "calibration" / "tracer"
DATA = HERE / "data" / "tracer_torchao.json"
ARCH = (
    "--arch llama --layers 2 --hidden 1024 --heads 16 --kv-heads 4 --ffn 2816 --vocab 32000 --dtype bf16 "
    "--optimizer none --mode infer --gpu a100"
)
#: vramcalc's model of ARCH (transformers' LlamaConfig: SwiGLU, RMSNorm, rotary, untied head).
MODEL = {
    "architecture": "decoder", "layers": 2, "hidden_size": 1024, "heads": 16, "kv_heads": 4, "ffn_size": 2816,
    "mlp": "swiglu", "norm": "rmsnorm", "position": "rotary", "vocab_size": 32000, "tie_embeddings": False,
}  # fmt: skip
#: The cases of benchmarks/data/tracer_torchao.json: (id, tracer flags, vramcalc workload).
CASES = [
    (
        f"{quant}{'-head' if head else ''}-b{batch}-s{seq}",
        f"--quant {quant}{' --lm-head' if head else ''} --batch {batch} --seq {seq}",
        {"mode": "inference", "batch_size": batch, "seq_len": seq, "precision": "bf16",
         "quantization": {"method": quant, "lm_head": True} if head else quant},
    )
    for quant in ("int8_weight_only", "int8_dynamic_activation_int8_weight")
    for head in (False, True)
    for batch, seq in ((1, 1), (1, 128), (2, 512), (4, 1024))
]  # fmt: skip
KEEP = ("params", "peak_bytes", "peak_phase", "peak_at_op", "peak_by_category")


def quantize(model: Any, quant: str, lm_head: bool) -> int:
    """``quantize_`` every decoder linear (and the LM head with ``lm_head``); the number converted."""
    import torch
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, Int8WeightOnlyConfig, quantize_

    config = Int8WeightOnlyConfig() if quant == "int8_weight_only" else Int8DynamicActivationInt8WeightConfig()
    names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    chosen = [n for n in names if lm_head or not n.endswith("lm_head")]
    quantize_(model, config, filter_fn=lambda module, fqn: fqn in chosen)
    return len(chosen)


def eager_int_mm() -> None:
    """``safe_int_mm`` (torchao/kernel/intmm.py) takes its ``torch.compile`` branch for any FakeTensor input,
    so on the tracer it would skip what an eager CUDA run does. This replica is its eager CUDA branch
    (torchao 0.18, lines 60-86): the transposed weight made contiguous (a whole copy), a non-contiguous input
    whose rows are not a multiple of 8 too, then ``torch._int_mm`` (the int32 product)."""
    import torch
    from torchao.kernel import intmm

    def safe_int_mm(input: Any, mat2: Any) -> Any:
        if input.shape[1] % 8 or not input.shape[1] or mat2.shape[1] % 8 or not mat2.shape[1]:
            raise NotImplementedError("the host fallback for odd dimensions is not replicated")
        if not mat2.is_contiguous():
            mat2 = mat2.contiguous()
        if not input.is_contiguous() and input.shape[0] % 8:
            input = input.contiguous()
        return torch._int_mm(input, mat2)

    intmm.safe_int_mm = safe_int_mm


def inner_tensors(param: Any) -> list[Any]:
    """The plain tensors inside a torchao quantized weight (``qdata``, ``scale``, ``zero_point``); empty for
    a plain parameter."""
    names = [
        *(getattr(param, "tensor_data_names", None) or []),
        *(getattr(param, "optional_tensor_data_names", None) or []),
    ]
    return [t for n in names if (t := getattr(param, n, None)) is not None]


def main(argv: list[str]) -> dict[str, Any]:
    argv, quant = _take(argv, "--quant", True)
    argv, lm_head = _take(argv, "--lm-head", False)
    sys.path.insert(0, str(TRACER))
    import fakecuda  # type: ignore[import-not-found]

    fakecuda.enable()  # before torch is imported
    import groundtruth  # type: ignore[import-not-found]
    import memtrack  # type: ignore[import-not-found]
    import models  # type: ignore[import-not-found]

    original = models.build

    def register_module(self, module):  # type: ignore[no-untyped-def]
        """The tracker's own registration, but a quantized weight counts its inner tensors, not the bytes
        of its nominal bf16 shape (the wrapper owns no storage)."""
        for p in module.parameters():
            for t in inner_tensors(p) or [p]:
                self.register(t, "parameter")
                if t.device.type == self.device_type:
                    self.param_storages.add(id(t.untyped_storage()))
        for b in module.buffers():
            self.register(b, "buffer")

    def build(arch, a, dtype):  # type: ignore[no-untyped-def]
        eager_int_mm()
        model, make_batch, desc = original(arch, a, dtype)
        n = quantize(model, str(quant), bool(lm_head))
        return model, make_batch, desc + f" + {n} torchao {quant} linears"

    models.build, memtrack.StorageTracker.register_module = build, register_module
    return groundtruth.run(groundtruth.parse_args(argv))


def versions() -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in ("torch", "transformers", "torchao")}


def regenerate() -> None:
    """Run every case in its own process (fake CUDA must load before torch) and write DATA."""
    out, versions = [], None
    for case_id, flags, workload in CASES:
        argv = [sys.executable, str(HERE / "tracer_torchao.py"), *shlex.split(f"{ARCH} {flags} --json")]
        res = json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)
        versions = res["versions"]
        entry: dict[str, Any] = {"id": case_id, "command": f"python benchmarks/tracer_torchao.py {ARCH} {flags}"}
        entry |= {"model": MODEL, "workload": workload} | {k: res[k] for k in KEEP if k in res}
        out.append(entry)
        print(f"{case_id}: {res['peak_bytes']:,} B", file=sys.stderr)
    about = (
        "CPU tracer (shared/calibration/tracer) run through benchmarks/tracer_torchao.py: exact "
        "max_memory_allocated() of one eager inference forward of a Llama (2 layers, hidden 1024, 16 heads, "
        "4 KV heads, ffn 2816, vocabulary 32000, untied) whose decoder linears (and LM head, '-head') torchao's "
        "quantize_ converted"
    )
    DATA.write_text(json.dumps({"about": about, "versions": versions, "gpu": "a100", "cases": out}, indent=1) + "\n")


def score() -> None:
    """vramcalc against every stored case (no torch needed)."""
    from vramcalc.families import estimate
    from vramcalc.spec.load import parse_spec

    print(f"{'case':50s} {'tracer B':>14s} {'vramcalc B':>14s} {'error':>8s}")
    for case in json.loads(DATA.read_text(encoding="utf-8"))["cases"]:
        spec = parse_spec({"name": case["id"], "model": case["model"], "workload": case["workload"]})
        est = estimate(spec, hopper_or_newer=False).peak_allocated_bytes  # the cases' A100 cuBLAS workspace
        error = 100 * (est / case["peak_bytes"] - 1)
        print(f"{case['id']:50s} {case['peak_bytes']:>14,} {est:>14,} {error:>+7.2f}%")


if __name__ == "__main__":
    if sys.argv[1:] == ["--regenerate"]:
        regenerate()
    elif sys.argv[1:] == ["--score"]:
        score()
    else:
        result = main(sys.argv[1:])
        result["versions"] = versions()
        print(json.dumps(result, indent=1))
