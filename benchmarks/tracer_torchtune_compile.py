"""Allocator-level references for torchtune's LoRA and QLoRA recipe with ``compile=True``, traced.

Combines the two tracers it imports: ``benchmarks/tracer_torchtune.py`` runs torchtune 0.6.1's own
``lora_llama3_2`` decoder (``LoRALinear``, torchao 0.14.1's ``NF4Tensor`` under QLoRA) in the loop of
``recipes/lora_finetune_single_device.py`` on fake CUDA tensors; ``benchmarks/tracer_compile.py`` compiles a
region through AOTAutograd with inductor's decompositions and ``partition_fn`` (``min_cut_rematerialization_partition``)
and runs its graphs with inductor's fusion emulated. Here, as the recipe's ``compile: True`` does
(torchtune/training/_compile.py):

* ``compile_model``: every ``TransformerSelfAttentionLayer`` is compiled (per-layer ``m.compile()``), before
  ``set_activation_checkpointing`` wraps it, so a checkpointed layer recomputes the compiled one;
* ``compile_loss``: ``CEWithChunkedOutputLoss.compute_cross_entropy`` is compiled (the upcast and the
  cross-entropy of one chunk), or the whole ``CrossEntropyLoss`` module when the loss is not chunked.

An ``NF4Tensor`` weight enters the compiled layer as a parameter; AOTAutograd flattens the subclass into its inner
tensors (``__tensor_flatten__``) and traces ``linear_nf4``'s ``weight.to(dtype)`` (``get_original_weight``) as plain
ops in the joint graph, so the partitioner and the fusion emulation see the dequantization like any other op.
The first step compiles (its forward and backward are not counted, as in tracer_compile.py); the second is the
one reported.

    /tmp/tracer-venv/bin/python benchmarks/tracer_torchtune_compile.py --layers 4 --hidden 2048 --heads 32 \\
        --kv-heads 8 --ffn 8192 --vocab 128256 --batch 1 --seq 1024 --rank 64 --alpha 128 \\
        --attn q_proj,v_proj,output_proj --mlp --qlora --chunked --json
    /tmp/tracer-venv/bin/python benchmarks/tracer_torchtune_compile.py --regenerate  # tracer_torchtune_compile.json
    /tmp/tracer-venv/bin/python benchmarks/tracer_torchtune_compile.py --regenerate-full  # its full fine-tuning cases
    python benchmarks/tracer_torchtune_compile.py --score                            # vramcalc against it (no torch)

``--full`` (tracer_torchtune.py's flag) runs ``full_finetune_single_device`` on ``llama3_2`` instead, every
parameter trained, each ``TransformerSelfAttentionLayer`` compiled as above; ``--optim-in-bwd`` its
``optimizer_in_bwd``.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "tracer_torchtune_compile.json"
sys.path.insert(0, str(HERE))

import tracer_torchtune  # noqa: E402

#: The cases: (shape, adapter, the technique flags, batch, sequence), shapes and adapters of tracer_torchtune.py.
CASES = [
    ("1b", "qvo-mlp-r64", "--chunked", 1, 1024),
    ("1b", "qvo-mlp-r64", "--ac --chunked", 2, 1024),
    ("1b", "qvo-mlp-r64", "--ac --chunked --offload", 2, 1024),
    ("1b", "qvo-mlp-r64", "--qlora --chunked", 1, 1024),
    ("1b", "qvo-mlp-r64", "--qlora --ac --chunked", 2, 1024),
    ("1b", "qvo-mlp-r64", "--qlora --ac --chunked --offload", 2, 1024),
    ("1b", "qv-r8", "--ac --chunked", 1, 1024),
    ("1b", "qvo-mlp-r64", "--qlora --chunked", 1, 256),  # short: the weights and their dequantization dominate
]
#: Full fine-tuning (``full_finetune_single_device`` with ``llama3_2``, every parameter trained), compiled.
FULL_CASES = [
    ("1b", "full", "--chunked", 2, 1024),
    ("1b", "full", "--ac --chunked", 2, 2048),
    ("1b", "full", "--ac --chunked --offload", 2, 2048),
    ("1b", "full", "--optim-in-bwd --chunked", 2, 1024),
    ("3b", "full", "--chunked", 2, 1024),
    ("3b", "full", "--ac --chunked", 2, 2048),
    ("3b", "full", "--optim-in-bwd --ac --chunked", 2, 2048),
]


def _flat_count(param: Any) -> int:
    """How many graph inputs AOTAutograd makes of ``param``: an ``NF4Tensor``'s inner tensors, else one."""
    flatten = getattr(param, "__tensor_flatten__", None)
    return len(flatten()[0]) if flatten is not None else 1


def _compiling_builder(builder: Any) -> Any:
    """``builder`` (``lora_llama3_2``) whose model has each ``TransformerSelfAttentionLayer`` compiled."""
    import tracer_compile
    from torchtune.modules import TransformerSelfAttentionLayer

    def build(*args: Any, **kwargs: Any) -> Any:
        model = builder(*args, **kwargs)
        layers = [m for m in model.modules() if isinstance(m, TransformerSelfAttentionLayer)]
        for i, layer in enumerate(layers):
            # the first layer's input needs no gradient (the embedding is frozen): it saves less than the others
            key = "first_block" if i == 0 else "block"
            tracer_compile._compile_block(layer, key)
            tracer_compile.N_PARAMS[key] = sum(_flat_count(t) for _, t in tracer_compile._state(layer))
        return model

    return build


def _compiled_losses() -> None:
    """torchtune's ``compile_loss``: the chunked loss's ``compute_cross_entropy``, or ``CrossEntropyLoss`` whole."""
    import torch
    import tracer_compile
    from torchtune.modules.loss import CEWithChunkedOutputLoss

    tracer_compile.N_OUT["loss"] = 1
    init = CEWithChunkedOutputLoss.__init__

    def chunked_init(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        compute = self.compute_cross_entropy
        fn = tracer_compile.compiled(lambda logits, labels: [compute(logits, labels)], "loss")
        self.compute_cross_entropy = lambda logits, labels, **kw: fn(logits, labels)[0]

    CEWithChunkedOutputLoss.__init__ = chunked_init
    plain = torch.nn.CrossEntropyLoss.forward
    state: dict[str, Any] = {}

    def whole(self: Any, logits: Any, labels: Any) -> Any:
        if "fn" not in state:
            state["fn"] = tracer_compile.compiled(lambda x, y: [plain(self, x, y)], "loss")
        return state["fn"](logits, labels)[0]

    torch.nn.CrossEntropyLoss.forward = whole


def run(argv: list[str]) -> dict[str, Any]:
    """One case: tracer_torchtune's run with the layers and the loss compiled, and the saved bytes measured."""
    a = tracer_torchtune._parse(argv)
    sys.path.insert(0, str(tracer_torchtune.TRACER))
    import fakecuda  # type: ignore[import-not-found]

    fakecuda.enable()
    import tracer_compile

    tracer_compile._ignoring_tracker()
    import torchtune.models.llama3_2._component_builders as builders

    builders.lora_llama3_2 = _compiling_builder(builders.lora_llama3_2)
    builders.llama3_2 = _compiling_builder(builders.llama3_2)  # --full: full_finetune_single_device's model
    _compiled_losses()
    result = tracer_torchtune.run(a)
    result["compiled"] = json.loads(json.dumps(tracer_compile.MEASURED))
    return result


def regenerate(full_only: bool = False) -> None:
    """Trace every case in its own process and write DATA; ``full_only``, the full fine-tuning cases alone,
    the stored LoRA cases kept."""
    out, found = [], None
    if full_only:
        out = [c for c in json.loads(DATA.read_text(encoding="utf-8"))["cases"] if "adapter" in c["workload"]]
    for shape, adapter, flags, batch, seq in FULL_CASES if full_only else CASES + FULL_CASES:
        command = (
            f"{tracer_torchtune.SHAPES[shape]} {tracer_torchtune.ADAPTERS[adapter]} {flags} --batch {batch} --seq {seq}"
        )
        argv = [sys.executable, str(HERE / "tracer_torchtune_compile.py"), *shlex.split(command), "--json"]
        res = json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)
        found = res.pop("versions")
        spec = tracer_torchtune.vramcalc_spec(shape, adapter, flags, batch, seq)
        spec["workload"]["compile"] = True
        case_id = f"compile-{spec['name']}"
        entry = {"id": case_id, "command": f"python benchmarks/tracer_torchtune_compile.py {command}"}
        out.append(entry | {"model": spec["model"], "workload": spec["workload"]} | res)
        print(f"{case_id}: {res['peak_bytes']:,} B ({res['peak_phase']})", file=sys.stderr)
    about = (
        "CPU tracer (shared/calibration/tracer) run through benchmarks/tracer_torchtune_compile.py: exact "
        "max_memory_allocated() of the second step of torchtune's lora_finetune_single_device loop with "
        "compile=True (each TransformerSelfAttentionLayer and the loss through AOTAutograd with inductor's "
        "decompositions and partitioner, fusion emulated) on torchtune's own lora_llama3_2 decoder "
        "(Llama-3.2-1B widths, 4 layers), and of full_finetune_single_device's loop so on llama3_2 (Llama-3.2-1B "
        "and -3B widths, 4 and 3 layers), H100 cuBLAS workspaces"
    )
    DATA.write_text(json.dumps({"about": about, "versions": found, "gpu": "h100", "cases": out}, indent=1) + "\n")


def score() -> None:
    """vramcalc against every stored case (no torch needed)."""
    tracer_torchtune.score(DATA)


def main(argv: list[str]) -> None:
    """``--regenerate``, ``--score``, or one traced case (tracer_torchtune.py's flags)."""
    modes = {"--regenerate": regenerate, "--regenerate-full": lambda: regenerate(full_only=True), "--score": score}
    if len(argv) == 1 and argv[0] in modes:
        modes[argv[0]]()
        return
    result = run(argv) | {"versions": tracer_torchtune.versions()}
    as_json = "--json" in argv
    print(
        json.dumps(result, indent=1, default=str)
        if as_json
        else f"{result['peak_bytes']:,} B at {result['peak_phase']}"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
