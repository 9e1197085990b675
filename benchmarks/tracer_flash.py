"""Allocator-level references for ``attention: flash``: transformers' ``attn_implementation="flash_attention_2"``
path run by the CPU tracer of ``shared/calibration/tracer`` with a stand-in for the ``flash_attn`` package.

flash-attn's CUDA kernels cannot run on fake tensors, so a module named ``flash_attn`` is registered that
allocates exactly what flash-attn 2 allocates (``flash_attn/flash_attn_interface.py`` and
``csrc/flash_attn/flash_api.cpp`` of Dao-AILab/flash-attention at commit 0251105, 2026-08-15):

* ``FlashAttnFunc.forward``: q, k, v padded with zeros to a multiple of 8 in the head dimension (a new tensor
  each, only when the head dimension is not one), then ``mha_fwd``: ``out = empty_like(q)``, ``softmax_lse``
  fp32 (batch, heads, seqlen_q), ``rng_state`` int64 (2); saved for backward: q, k, v, out, softmax_lse,
  rng_state;
* ``FlashAttnFunc.backward``: ``dq, dk, dv = empty_like(q), empty_like(k), empty_like(v)``, then ``mha_bwd``:
  ``softmax_d`` fp32 (batch, heads, round(seqlen_q, 128)), ``dq_accum`` fp32 (batch, round(seqlen_q, 128),
  heads, round(head_dim, 32 up to 128 else 64)), and with grouped K/V ``dk_expanded`` and ``dv_expanded``
  (batch, seqlen_k, heads, head_dim) at q's dtype, summed into dk and dv; all freed on return.

transformers finds the package through ``is_flash_attn_2_available()`` (patched to True: the package is not
installed) and calls ``flash_attn_func`` from ``_flash_attention_forward`` (modeling_flash_attention_utils.py),
which casts fp32 q, k, v to the target dtype first (integrations/flash_attention.py ``get_target_dtype``:
the autocast dtype, else ``config.dtype`` for a quantized model, else the first linear's weight dtype). A
bitsandbytes model is marked quantized as ``from_pretrained`` marks it (``config._is_quantized``,
``config.dtype`` bf16). The batches have no padding, so no unpadding runs (transformers builds no mask).

Everything else is ``benchmarks/tracer_bnb.py`` (its flags: ``--quant``, ``--lora``, ``--no-prepare``,
``--cache`` ...), with ``--attn sdpa`` replaced by flash_attention_2 when ``--flash`` is given::

    /tmp/tracer-venv/bin/pip install bitsandbytes peft
    /tmp/tracer-venv/bin/python benchmarks/tracer_flash.py --flash --arch llama ... --json
    /tmp/tracer-venv/bin/python benchmarks/tracer_flash.py --regenerate   # benchmarks/data/tracer_flash.json
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "tracer_flash.json"
sys.path.insert(0, str(HERE))


def _round(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def _fake_flash_attn() -> types.ModuleType:
    """A ``flash_attn`` module whose ``flash_attn_func`` allocates what flash-attn 2's does (module docstring)."""
    import torch

    class FlashAttnFunc(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal):  # type: ignore[no-untyped-def,override]
            head_dim = q.size(3)
            if head_dim % 8:
                q, k, v = (torch.nn.functional.pad(x, [0, 8 - head_dim % 8]) for x in (q, k, v))
            q, k, v = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, k, v))  # maybe_contiguous
            b, s_q, heads, _ = q.shape
            out = torch.empty_like(q)
            lse = torch.empty((b, heads, s_q), dtype=torch.float32, device=q.device)
            rng = torch.empty((2,), dtype=torch.int64, device=q.device)
            ctx.save_for_backward(q, k, v, out, lse, rng)
            ctx.head_dim = head_dim
            return out[..., :head_dim]

        @staticmethod
        def backward(ctx, dout):  # type: ignore[no-untyped-def,override]
            q, k, v, out, lse, rng = ctx.saved_tensors
            dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
            if ctx.head_dim % 8:
                dout = torch.nn.functional.pad(dout, [0, 8 - ctx.head_dim % 8])
            dout = dout if dout.stride(-1) == 1 else dout.contiguous()
            b, s_q, heads, d = q.shape
            s_k, kv_heads = k.shape[1], k.shape[2]
            s_q_r = _round(s_q, 128)
            work = [torch.empty((b, heads, s_q_r), dtype=torch.float32, device=q.device)]  # softmax_d
            d_r = _round(d, 32 if d <= 128 else 64)
            work.append(torch.empty((b, s_q_r, heads, d_r), dtype=torch.float32, device=q.device))  # dq_accum
            if kv_heads != heads:  # dk_expanded, dv_expanded, summed into dk and dv
                work += [torch.empty((b, s_k, heads, d), dtype=q.dtype, device=q.device) for _ in range(2)]
                dk = work[-2].view(b, s_k, kv_heads, heads // kv_heads, d).sum(3)
                dv = work[-1].view(b, s_k, kv_heads, heads // kv_heads, d).sum(3)
            del work
            h = ctx.head_dim
            return dq[..., :h], dk[..., :h], dv[..., :h], None

    def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, **kw):  # type: ignore[no-untyped-def]
        return FlashAttnFunc.apply(q, k, v, causal)

    def unsupported(*args, **kw):  # type: ignore[no-untyped-def]
        raise SystemExit("error: the fake flash_attn models the dense path only (a batch without padding)")

    module = types.ModuleType("flash_attn")
    module.__version__ = "2.8.3"  # type: ignore[attr-defined]
    module.flash_attn_func = flash_attn_func  # type: ignore[attr-defined]
    module.flash_attn_varlen_func = unsupported  # type: ignore[attr-defined]
    module.flash_attn_with_kvcache = unsupported  # type: ignore[attr-defined]
    padding = types.ModuleType("flash_attn.bert_padding")
    padding.pad_input = padding.unpad_input = unsupported  # type: ignore[attr-defined]
    module.bert_padding = padding  # type: ignore[attr-defined]
    sys.modules["flash_attn"], sys.modules["flash_attn.bert_padding"] = module, padding
    return module


def install() -> None:
    """Register the fake package and make transformers see flash-attn 2 as installed."""
    import torch
    from transformers import modeling_flash_attention_utils as fa_utils
    from transformers.utils import import_utils

    _fake_flash_attn()
    for where in (fa_utils, import_utils):
        where.is_flash_attn_2_available = lambda *args, **kw: True  # type: ignore[attr-defined]
        where.is_flash_attn_3_available = lambda *args, **kw: False  # type: ignore[attr-defined]
        where.is_flash_attn_4_available = lambda *args, **kw: False  # type: ignore[attr-defined]
    # position_ids are arange(seq) for every sequence (no packing): the answer is False, read from values the
    # fake tensors do not have
    fa_utils._is_packed_sequence = lambda *args, **kw: False  # type: ignore[attr-defined]
    import models  # type: ignore[import-not-found]

    original = models.build

    def build(arch, a, dtype):  # type: ignore[no-untyped-def]
        model, make_batch, desc = original(arch, a, dtype)
        model.config._attn_implementation = "flash_attention_2"
        if "--quant" in sys.argv:  # as from_pretrained(quantization_config=..., dtype=torch.bfloat16) marks it
            model.config._is_quantized = True
            model.config.dtype = torch.bfloat16
        return model, make_batch, desc + " + flash_attention_2 (fake flash_attn)"

    models.build = build


def main(argv: list[str]) -> None:
    import tracer_bnb

    flash = "--flash" in argv
    argv = [x for x in argv if x != "--flash"]
    sys.path.insert(0, str(tracer_bnb.TRACER))
    import fakecuda  # type: ignore[import-not-found]

    fakecuda.enable()
    if flash:
        install()
    tracer_bnb.main(argv)


def regenerate() -> None:
    """Run every case of :mod:`tracer_flash_cases` and write ``benchmarks/data/tracer_flash.json``."""
    from tracer_bnb_cases import ARCH, MODEL  # the same model as the bitsandbytes cases
    from tracer_flash_cases import CASES

    cases: list[dict[str, Any]] = []
    versions: dict[str, str] = {}
    for case_id, flags, workload in CASES:
        command = f"python benchmarks/tracer_flash.py {ARCH} {flags}"
        args = [sys.executable, str(HERE / "tracer_flash.py"), *shlex.split(f"{ARCH} {flags}"), "--json"]
        run = subprocess.run(args, capture_output=True, text=True, check=True)
        res = json.loads(run.stdout[run.stdout.index("{") :])
        versions = res.get("versions", versions)
        print(case_id, res["peak_bytes"], res["peak_phase"], file=sys.stderr)
        cases.append(
            {
                "id": case_id,
                "command": command,
                "model": MODEL,
                "workload": workload,
                "params": res["params"],
                "peak_bytes": res["peak_bytes"],
                "peak_phase": res["peak_phase"],
                "peak_at_op": res.get("peak_at_op"),
                "peak_by_category": res["peak_by_category"],
                "phase_peaks": {name: p["peak_bytes"] for name, p in res["phases"].items()},
            }
        )
    about = "benchmarks/tracer_flash.py: transformers' flash_attention_2 path with flash-attn 2's allocations"
    DATA.write_text(json.dumps({"about": about, "versions": versions, "cases": cases}, indent=1) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["--regenerate"]:
        regenerate()
    else:
        main(sys.argv[1:])
