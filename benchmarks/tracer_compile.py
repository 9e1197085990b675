"""Allocator-level references for ``workload.compile: true``: each transformer block compiled as torch.compile with
inductor compiles it, traced.

Runs the shared tracer's step (``shared/calibration/tracer/groundtruth.py``: real transformers models on fake CUDA
tensors, exact ``torch.cuda.max_memory_allocated()``) with every transformer block compiled the way torchtune's
``compile_model`` compiles a model (one compiled region per layer, torchtune/training/_compile.py), through
AOTAutograd with inductor's own pieces, at the installed PyTorch release:

* ``torch._functorch.aot_autograd.aot_function`` traces the block's joint forward and backward graph with inductor's
  decompositions (``torch._inductor.decomposition.select_decomp_table``);
* inductor's ``partition_fn`` (``torch/_inductor/compile_fx.py``) runs its joint-graph passes and splits the graph
  with ``min_cut_rematerialization_partition(..., compiler="inductor")``: what the forward graph returns beyond the
  block's output is what the block saves for backward;
* the forward and backward graphs then run on the fake tensors node by node, with inductor's fusion emulated: a
  fusible node's output (the partitioner's ``is_fusible`` ops: pointwise, reductions, views) is allocated only where a
  non-fusible node reads it (a matmul, SDPA: inductor's extern kernels) or the graph returns it; the other fused
  intermediates never exist. Every value is freed after its last use (inductor's generated code frees buffers the
  same way), and the backward graph frees the saved tensors it has read.

Gradient checkpointing wraps the compiled block (``checkpoint(compiled_block)``, as torchtune's
``checkpoint_wrapper`` around a compiled layer). ``--chunked-ce`` replaces the model's loss by torchtune's
``CEWithChunkedOutputLoss`` over the LM head applied per chunk (torchtune's ``TransformerDecoder`` with
``num_output_chunks`` 8) and compiles its ``compute_cross_entropy`` the same way (torchtune's ``compile_loss``).
Embedding, final norm and LM head run eagerly. Every other argument goes to the tracer::

    /tmp/tracer-venv/bin/python benchmarks/tracer_compile.py --arch llama --layers 2 --hidden 256 --heads 4 \
        --kv-heads 4 --ffn 688 --vocab 1000 --batch 2 --seq 512 --dtype bf16 --optimizer adamw --json

``--amp`` runs the step under ``torch.autocast("cuda", dtype)`` with fp32 parameters (the tracer's own flag;
AOTAutograd traces under the ambient autocast state, so autocast's casts are nodes of each compiled graph); with
``--dtype fp16`` the step also scales the loss and unscales the gradients with ``torch.amp.GradScaler`` as the HF
Trainer does under fp16 (:func:`_with_grad_scaler`).

``--lora R:TARGETS`` (and ``--lora-dropout P``) wraps the model with ``peft.get_peft_model(LoraConfig(r=R,
lora_alpha=2R, target_modules=TARGETS, lora_dropout=P))`` (``benchmarks/tracer_llm.py`` ``with_lora``; needs peft in
the tracer's venv) before its blocks are compiled, as the HF Trainer's ``torch_compile=True`` runs a PEFT model; the
first block, whose input needs no gradient, is measured apart (``first_block``).

``--new N`` (with ``--seq`` the prompt) traces transformers' generation with a static cache and ``model.forward``
compiled, the "static cache and torch.compile" recipe (:func:`trace_generate`): the whole forward one graph
(AOTAutograd, inductor's decompositions, the cache's tensors graph inputs it updates in place as inductor's
re-inplacing leaves them), fusion emulated as above, and the chains inductor realizes for their many reads
materialized; mode "default" (CUDA graphs cannot run on fake tensors). ``--generate-cases`` prints
``benchmarks/data/tracer_compile_generate.json``; ``--top`` lists the largest tensors alive at the peak.

``--score`` (with the project's environment) prints vramcalc's estimate of each stored case, its error and the
quality bar; ``--score-peft`` the same for the PEFT cases. ``--cases`` traces the cases below again and prints
``benchmarks/data/tracer_compile.json`` (each case with its traced step and the saved-for-backward bytes of one
compiled block, measured from the partitioned graph); ``--infer-cases`` prints ``tracer_compile_infer.json``,
``--peft-cases`` ``tracer_compile_peft.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

TRACER = Path(__file__).resolve().parent.parent.parent / "shared" / "calibration" / "tracer"

_LLAMA = "--arch llama --layers 2 --hidden 256 --heads 4 --kv-heads 4 --ffn 688 --vocab 1000"
_LLAMA_GQA = "--arch llama --layers 3 --hidden 512 --heads 8 --kv-heads 2 --ffn 1376 --vocab 2000"
_GPT2 = "--arch gpt2 --layers 2 --hidden 256 --heads 4 --ffn 1024 --vocab 1000"
_BERT = "--arch bert --layers 2 --hidden 256 --heads 4 --ffn 1024 --vocab 1000"

#: The traced cases: each a command line of this script (arguments after its name).
CASES: dict[str, str] = {
    "compile-llama_l2_h256_b2_s512_bf16_adamw": f"{_LLAMA} --batch 2 --seq 512 --dtype bf16 --optimizer adamw",
    "compile-llama_l3_h512_gqa_b1_s1024_bf16_adamw": f"{_LLAMA_GQA} --batch 1 --seq 1024 --dtype bf16 "
    "--optimizer adamw",
    "compile-llama_l2_h256_b4_s256_fp32_sgd": f"{_LLAMA} --batch 4 --seq 256 --dtype fp32 --optimizer sgd",
    "compile-gc-llama_l3_h512_gqa_b1_s1024_bf16_adamw": f"{_LLAMA_GQA} --batch 1 --seq 1024 --dtype bf16 "
    "--optimizer adamw --grad-checkpointing",
    "compile-ce-llama_l2_h256_b2_s512_bf16_adamw": f"{_LLAMA} --batch 2 --seq 512 --dtype bf16 --optimizer adamw "
    "--chunked-ce",
    "compile-ce-gc-llama_l3_h512_gqa_b1_s1024_bf16_adamw": f"{_LLAMA_GQA} --batch 1 --seq 1024 --dtype bf16 "
    "--optimizer adamw --chunked-ce --grad-checkpointing",
    "compile-gpt2_l2_h256_b2_s512_bf16_adamw": f"{_GPT2} --batch 2 --seq 512 --dtype bf16 --optimizer adamw",
    "compile-gpt2_l2_h256_b4_s256_fp32_adamw": f"{_GPT2} --batch 4 --seq 256 --dtype fp32 --optimizer adamw",
    "compile-gc-gpt2_l2_h256_b2_s512_bf16_adamw": f"{_GPT2} --batch 2 --seq 512 --dtype bf16 --optimizer adamw "
    "--grad-checkpointing",
    "compile-bert_l2_h256_b2_s512_bf16_adamw": f"{_BERT} --batch 2 --seq 512 --dtype bf16 --optimizer adamw",
    "compile-gc-bert_l2_h256_b2_s512_bf16_adamw": f"{_BERT} --batch 2 --seq 512 --dtype bf16 --optimizer adamw "
    "--grad-checkpointing",
    "compile-infer-llama_l2_h256_b2_s512_bf16": f"{_LLAMA} --batch 2 --seq 512 --dtype bf16 --mode infer",
    # autocast (``--amp``: fp32 parameters, the step under ``torch.autocast("cuda", dtype)``; fp16 with a GradScaler)
    "compile-amp-llama_l2_h256_b2_s512_bf16_adamw": f"{_LLAMA} --batch 2 --seq 512 --dtype bf16 --amp "
    "--optimizer adamw",
    "compile-amp-llama_l3_h512_gqa_b1_s1024_fp16_adamw": f"{_LLAMA_GQA} --batch 1 --seq 1024 --dtype fp16 --amp "
    "--optimizer adamw",
    "compile-amp-gc-llama_l3_h512_gqa_b4_s2048_bf16_adamw": f"{_LLAMA_GQA} --batch 4 --seq 2048 --dtype bf16 --amp "
    "--optimizer adamw --grad-checkpointing",
    "compile-amp-ce-llama_l2_h256_b2_s512_bf16_adamw": f"{_LLAMA} --batch 2 --seq 512 --dtype bf16 --amp "
    "--optimizer adamw --chunked-ce",
    "compile-amp-ce-gc-llama_l3_h512_gqa_b4_s2048_bf16_adamw": f"{_LLAMA_GQA} --batch 4 --seq 2048 --dtype bf16 "
    "--amp --optimizer adamw --chunked-ce --grad-checkpointing",
    "compile-amp-gpt2_l2_h256_b2_s512_fp16_adamw": f"{_GPT2} --batch 2 --seq 512 --dtype fp16 --amp --optimizer adamw",
    "compile-amp-gc-gpt2_l2_h256_b2_s512_bf16_adamw": f"{_GPT2} --batch 2 --seq 512 --dtype bf16 --amp "
    "--optimizer adamw --grad-checkpointing",
    "compile-amp-bert_l2_h256_b2_s512_bf16_adamw": f"{_BERT} --batch 2 --seq 512 --dtype bf16 --amp --optimizer adamw",
    "compile-amp-gc-bert_l2_h256_b2_s512_fp16_adamw": f"{_BERT} --batch 2 --seq 512 --dtype fp16 --amp "
    "--optimizer adamw --grad-checkpointing",
}

#: The traced compiled forwards (``mode: inference``), stored in ``benchmarks/data/tracer_compile_infer.json``.
INFER_CASES: dict[str, str] = {
    "compile-infer-llama_l2_h256_b2_s512_bf16": f"{_LLAMA} --batch 2 --seq 512 --dtype bf16 --mode infer",
    "compile-infer-llama_l2_h256_b4_s256_fp32": f"{_LLAMA} --batch 4 --seq 256 --dtype fp32 --mode infer",
    "compile-infer-llama_l3_h512_gqa_b1_s1024_bf16": f"{_LLAMA_GQA} --batch 1 --seq 1024 --dtype bf16 --mode infer",
    "compile-infer-llama_l3_h512_gqa_b2_s2048_bf16": f"{_LLAMA_GQA} --batch 2 --seq 2048 --dtype bf16 --mode infer",
    "compile-infer-gpt2_l2_h256_b2_s512_bf16": f"{_GPT2} --batch 2 --seq 512 --dtype bf16 --mode infer",
    "compile-infer-gpt2_l2_h256_b4_s1024_fp32": f"{_GPT2} --batch 4 --seq 1024 --dtype fp32 --mode infer",
    "compile-infer-bert_l2_h256_b2_s512_bf16": f"{_BERT} --batch 2 --seq 512 --dtype bf16 --mode infer",
    "compile-infer-bert_l2_h256_b4_s256_fp32": f"{_BERT} --batch 4 --seq 256 --dtype fp32 --mode infer",
    "compile-infer-amp-llama_l2_h256_b2_s512_bf16": f"{_LLAMA} --batch 2 --seq 512 --dtype bf16 --amp --mode infer",
    "compile-infer-amp-llama_l3_h512_gqa_b2_s2048_bf16": f"{_LLAMA_GQA} --batch 2 --seq 2048 --dtype bf16 --amp "
    "--mode infer",
    "compile-infer-amp-gpt2_l2_h256_b2_s512_fp16": f"{_GPT2} --batch 2 --seq 512 --dtype fp16 --amp --mode infer",
    "compile-infer-amp-bert_l2_h256_b2_s512_bf16": f"{_BERT} --batch 2 --seq 512 --dtype bf16 --amp --mode infer",
}

#: PEFT's LoRA (``peft.get_peft_model`` on the transformers model, then each block compiled, as the HF Trainer's
#: ``torch_compile=True`` runs a PEFT model), stored in ``benchmarks/data/tracer_compile_peft.json``.
PEFT_CASES: dict[str, str] = {
    "compile-peft-llama_l2_h256_b2_s512_bf16_qv_r8": f"{_LLAMA} --batch 2 --seq 512 --dtype bf16 --optimizer adamw "
    "--lora 8:q_proj,v_proj",
    "compile-peft-llama_l3_h512_gqa_b1_s1024_bf16_qv_r16": f"{_LLAMA_GQA} --batch 1 --seq 1024 --dtype bf16 "
    "--optimizer adamw --lora 16:q_proj,v_proj",
    "compile-peft-llama_l3_h512_gqa_b1_s1024_bf16_all_r16": f"{_LLAMA_GQA} --batch 1 --seq 1024 --dtype bf16 "
    "--optimizer adamw --lora 16:all-linear",
    "compile-peft-llama_l3_h512_gqa_b1_s1024_bf16_all_r16_do05": f"{_LLAMA_GQA} --batch 1 --seq 1024 --dtype bf16 "
    "--optimizer adamw --lora 16:all-linear --lora-dropout 0.05",
    "compile-peft-gc-llama_l3_h512_gqa_b1_s1024_bf16_all_r16": f"{_LLAMA_GQA} --batch 1 --seq 1024 --dtype bf16 "
    "--optimizer adamw --grad-checkpointing --lora 16:all-linear",
    "compile-peft-gc-llama_l3_h512_gqa_b2_s2048_bf16_qv_r16_do05": f"{_LLAMA_GQA} --batch 2 --seq 2048 --dtype bf16 "
    "--optimizer adamw --grad-checkpointing --lora 16:q_proj,v_proj --lora-dropout 0.05",
    "compile-peft-amp-llama_l3_h512_gqa_b1_s1024_bf16_qv_r16": f"{_LLAMA_GQA} --batch 1 --seq 1024 --dtype bf16 "
    "--amp --optimizer adamw --lora 16:q_proj,v_proj",
    "compile-peft-amp-llama_l3_h512_gqa_b1_s1024_bf16_all_r16_do05": f"{_LLAMA_GQA} --batch 1 --seq 1024 "
    "--dtype bf16 --amp --optimizer adamw --lora 16:all-linear --lora-dropout 0.05",
    "compile-peft-amp-gc-llama_l3_h512_gqa_b4_s2048_bf16_all_r16": f"{_LLAMA_GQA} --batch 4 --seq 2048 --dtype bf16 "
    "--amp --optimizer adamw --grad-checkpointing --lora 16:all-linear",
    "compile-peft-gpt2_l2_h256_b2_s512_bf16_all_r8": f"{_GPT2} --batch 2 --seq 512 --dtype bf16 --optimizer adamw "
    "--lora 8:all-linear",
    "compile-peft-gpt2_l2_h256_b2_s512_bf16_attn_r8_do05": f"{_GPT2} --batch 2 --seq 512 --dtype bf16 "
    "--optimizer adamw --lora 8:c_attn --lora-dropout 0.05",
    "compile-peft-gc-gpt2_l2_h256_b2_s512_bf16_all_r8_do05": f"{_GPT2} --batch 2 --seq 512 --dtype bf16 "
    "--optimizer adamw --grad-checkpointing --lora 8:all-linear --lora-dropout 0.05",
    "compile-peft-amp-gpt2_l2_h256_b2_s512_bf16_all_r8": f"{_GPT2} --batch 2 --seq 512 --dtype bf16 --amp "
    "--optimizer adamw --lora 8:all-linear",
    "compile-peft-amp-gc-gpt2_l2_h256_b4_s1024_bf16_attn_r8": f"{_GPT2} --batch 4 --seq 1024 --dtype bf16 --amp "
    "--optimizer adamw --grad-checkpointing --lora 8:c_attn",
}

#: What the compiled regions measured in the last trace: the saved-for-backward bytes of one block (the forward
#: graph's outputs beyond the block's own), and of one loss chunk.
MEASURED: dict[str, Any] = {}
#: torchtune's CEWithChunkedOutputLoss default (and its recipes').
CE_CHUNKS = 8


def _fusible_ops() -> Any:
    """The partitioner's fusible ops (``get_default_op_list``: recomputable ops, pointwise, views, random)."""
    from torch._functorch.partitioners import get_default_op_list

    return get_default_op_list()


def _is_fused(node: Any, ops: Any) -> bool:
    """Whether inductor fuses ``node`` into its readers, so that its output is never allocated: a fusible op whose
    every reader is a fusible op too (the partitioner's ``is_materialized``, its stand-in for inductor's)."""
    if node.op != "call_function" or not _fusible(node, ops):
        return False
    import operator

    if node.target is operator.getitem:
        return False
    return all(user.op == "call_function" and _fusible(user, ops) for user in node.users)


#: Inductor lowers a ``cat`` of at most this many inputs read only by pointwise ops as one pointwise op
#: (``torch/_inductor/lowering.py`` ``cat`` → ``pointwise_cat``; ``config.max_complex_pointwise_cat_inputs``).
POINTWISE_CAT_INPUTS = 8


def _fusible(node: Any, ops: Any) -> bool:
    """The partitioner's ``is_fusible``, and a small ``cat`` read by fusible ops only (the rotary embedding's
    ``rotate_half``), which inductor fuses as a pointwise op."""
    if ops.is_fusible(node):
        return True
    import torch

    if node.op == "call_function" and node.target is torch.ops.aten.constant_pad_nd.default:
        return True  # lowered as one pointwise op (lowering.py ``constant_pad_nd``: ``Pointwise.create``)
    if node.op != "call_function" or node.target is not torch.ops.aten.cat.default:
        return False
    inputs = node.args[0]
    users = node.users
    return len(inputs) <= POINTWISE_CAT_INPUTS and all(u.op == "call_function" and ops.is_fusible(u) for u in users)


#: Inductor realizes a pointwise node read by several users once it reads more than this many buffers, and any
#: node once it has accumulated more than ``REALIZE_ACC_READS`` (``torch/_inductor/config.py``
#: ``realize_reads_threshold``, ``realize_acc_reads_threshold``; ``graph.py`` ``run_node``: ``mark_reuse``,
#: ``has_exceeded_max_reads``; ``ir.py`` ``StorageBox.should_realize_on_reuse``).
REALIZE_READS = 4
REALIZE_ACC_READS = 8


def _realized_on_reuse(gm: Any, fused: set[Any]) -> set[Any]:
    """The fused nodes inductor would realize all the same: a chain read by several users that reads more than
    :data:`REALIZE_READS` buffers, or any chain that reads more than :data:`REALIZE_ACC_READS` (a whole model's
    residual stream, whose adds would otherwise hold every layer's outputs alive)."""
    reads: dict[Any, set[Any]] = {}
    realized = set()
    for node in gm.graph.nodes:
        if node not in fused:
            continue
        mine: set[Any] = set()
        for arg in node.all_input_nodes:
            mine |= reads[arg] if arg in reads else {arg}
        if (len(node.users) > 1 and len(mine) > REALIZE_READS) or len(mine) > REALIZE_ACC_READS:
            realized.add(node)
        else:
            reads[node] = mine
    return realized


def _fused_runner(gm: Any, realize_on_reuse: bool = False) -> Any:
    """A boxed callable that runs ``gm`` node by node, fused nodes outside the tracker's view; with
    ``realize_on_reuse``, the chains inductor realizes for their many reads materialized (:func:`_realized_on_reuse`,
    for a whole model's graph)."""
    import memtrack  # type: ignore[import-not-found]
    import torch
    import torch.fx
    from torch.utils._pytree import tree_leaves

    ops = _fusible_ops()
    fused = {node for node in gm.graph.nodes if _is_fused(node, ops)}
    if realize_on_reuse:
        fused -= _realized_on_reuse(gm, fused)

    class Fused(torch.fx.Interpreter):
        """The kernel that materializes a fused chain reads the chain's inputs: they stay alive until every reader
        of the chain has run (inductor's generated code frees a buffer after the last kernel that reads it)."""

        holds: dict[Any, list[Any]]
        done: set[Any]

        def run_node(self, n: Any) -> Any:
            if not hasattr(self, "holds"):
                self.holds, self.done = {}, set()
            if n not in fused:
                out = super().run_node(n)
            else:
                memtrack.IGNORE["fused"] = True
                try:
                    out = super().run_node(n)
                finally:
                    memtrack.IGNORE["fused"] = False
                args, kwargs = self.fetch_args_kwargs_from_env(n)
                reads = [a for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
                self.holds[n] = reads + [t for node in n.all_input_nodes for t in self.holds.get(node, [])]
            self.done.add(n)
            for node in [node for node in self.holds if all(user in self.done for user in node.users)]:
                del self.holds[node]
            return out

    def run(args: list[Any]) -> Any:
        return Fused(gm).boxed_run(args)

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


def _ignoring_tracker() -> None:
    """The tracker skips what a fused node allocates (``memtrack.IGNORE["fused"]``), and everything the first
    iteration's forward and backward (or inference) allocate (``IGNORE["compiling"]``): they trace and partition the
    graphs, whose nodes keep example tensors for good, which a GPU run keeps on no device (its compile-time tensors
    are fake)."""
    import memtrack  # type: ignore[import-not-found]

    if hasattr(memtrack, "IGNORE"):
        return
    memtrack.IGNORE = {"fused": False, "compiling": False}
    add, set_phase = memtrack.StorageTracker._add, memtrack.StorageTracker.set_phase

    def _add(self: Any, t: Any, *args: Any, **kwargs: Any) -> None:
        if not (memtrack.IGNORE["fused"] or memtrack.IGNORE["compiling"]):
            add(self, t, *args, **kwargs)

    def _set_phase(self: Any, phase: str, iteration: int | None = None) -> None:
        set_phase(self, phase, iteration)
        memtrack.IGNORE["compiling"] = self.iteration == 1 and phase in ("forward", "backward", "inference")

    memtrack.StorageTracker._add = _add
    memtrack.StorageTracker.set_phase = _set_phase


def _base(node: Any, ops: Any) -> Any:
    """The node whose storage ``node`` views (itself when it is not a view)."""
    while node.op == "call_function" and ops.is_view(node) and node.args:
        node = node.args[0]
    return node


def _saved(gm: Any, n_outputs: int, n_params: int) -> dict[str, Any]:
    """What the forward graph returns beyond the region's own ``n_outputs``, by storage (a view counts as its base):
    the bytes made inside the region (``saved_bytes``), those of its non-parameter inputs it keeps (``input_bytes``:
    the block input, the rotary tables), and each saved tensor: the op that made it, its shape and dtype."""
    import torch

    ops = _fusible_ops()
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    params = set(placeholders[:n_params])
    (output,) = [n for n in gm.graph.nodes if n.op == "output"]
    seen: set[Any] = set()
    made, inputs, rows = 0, 0, []
    for node in output.args[0][n_outputs:]:
        if not hasattr(node, "meta"):
            continue
        base = _base(node, ops)
        val = base.meta.get("val")
        if not isinstance(val, torch.Tensor) or base in params or base in seen:
            continue
        seen.add(base)
        size = val.numel() * val.element_size()
        target = getattr(base.target, "__name__", str(base.target)) if base.op == "call_function" else base.op
        rows.append(f"{target} {list(val.shape)} {str(val.dtype).removeprefix('torch.')}")
        if base.op == "placeholder":
            inputs += size
        else:
            made += size
    return {"saved_bytes": made, "input_bytes": inputs, "saved": rows}


def compiled(fn: Any, key: str) -> Any:
    """``fn`` (tensors in, tensors out) compiled through AOTAutograd with inductor's decompositions and partitioner,
    its graphs run with inductor's fusion emulated; the saved bytes of its forward graph recorded under ``key``."""
    from functorch.compile import aot_function
    from torch._inductor.compile_fx import partition_fn
    from torch._inductor.decomposition import select_decomp_table

    def fw_compiler(gm: Any, example_inputs: Any) -> Any:
        if key not in MEASURED:
            MEASURED[key] = _saved(gm, N_OUT[key], N_PARAMS.get(key, 0))
        return _fused_runner(gm)

    def bw_compiler(gm: Any, example_inputs: Any) -> Any:
        return _fused_runner(gm)

    return aot_function(
        fn,
        fw_compiler=fw_compiler,
        bw_compiler=bw_compiler,
        inference_compiler=fw_compiler_inference,
        partition_fn=_on_fake_tensors(partition_fn),
        decompositions=select_decomp_table(),
    )


def _on_fake_tensors(partition: Any) -> Any:
    """Inductor's partitioner, its joint-graph passes run in the fake mode of the traced inputs (its constant folding
    would otherwise make a real CUDA tensor)."""
    import torch._inductor.fx_passes.joint_graph as joint_graph
    from torch._guards import detect_fake_mode

    # folding constant tensors (``full``) into the graph evaluates them on a real device; they stay ``full`` nodes
    joint_graph.constant_fold_uniform_value = lambda gm: None

    from torch._inductor.virtualized import V

    def run(gm: Any, joint_inputs: Any, **kwargs: Any) -> Any:
        mode = detect_fake_mode(joint_inputs)
        with mode, V.set_fake_mode(mode):
            return partition(gm, joint_inputs, **kwargs)

    return run


def fw_compiler_inference(gm: Any, example_inputs: Any) -> Any:
    return _fused_runner(gm)


#: The number of real outputs of each compiled region (the rest of its forward graph's outputs are saved), and of
#: parameters among its inputs (the first ones).
N_OUT: dict[str, int] = {}
N_PARAMS: dict[str, int] = {}


def _state(layer: Any) -> list[tuple[str, Any]]:
    """The layer's parameters and buffers (a torchtune layer's RoPE cache), the compiled region's first inputs (as
    ``torch.compile`` lifts them), not constants of its graph."""
    return [*layer.named_parameters(), *layer.named_buffers()]


def _compile_block(layer: Any, key: str) -> None:
    """Replace ``layer``'s forward by its compiled form (checkpointed around it when the layer checkpoints)."""
    import torch
    from torch.nn.utils import stateless
    from torch.utils._pytree import tree_flatten, tree_unflatten

    original = type(layer).forward
    original = getattr(original, "__wrapped__", original)  # transformers' checkpointing wrapper
    cache: dict[Any, Any] = {}
    names = [n for n, _ in _state(layer)]
    N_PARAMS[key] = len(names)

    def call(*args: Any, **kwargs: Any) -> Any:
        leaves, spec = tree_flatten((args, kwargs))
        slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
        statics = tuple((i, leaf) for i, leaf in enumerate(leaves) if not isinstance(leaf, torch.Tensor))
        cache_key = (str(spec), tuple((i, repr(v)) for i, v in statics))
        if cache_key not in cache:
            out_spec: dict[str, Any] = {}

            def fn(params: list[Any], tensors: list[Any]) -> Any:
                full = list(leaves)
                for slot, tensor in zip(slots, tensors, strict=True):
                    full[slot] = tensor
                a, k = tree_unflatten(full, spec)
                with stateless._reparametrize_module(layer, dict(zip(names, params, strict=True))):
                    out = original(layer, *a, **k)
                out_leaves, out_spec["spec"] = tree_flatten(out)
                out_spec["slots"] = [i for i, leaf in enumerate(out_leaves) if isinstance(leaf, torch.Tensor)]
                out_spec["leaves"] = out_leaves
                kept = [leaf for leaf in out_leaves if isinstance(leaf, torch.Tensor)]
                N_OUT.setdefault(key, len(kept))
                return kept

            cache[cache_key] = (compiled(fn, key), out_spec)
        fn_compiled, out_spec = cache[cache_key]
        params = [p for _, p in _state(layer)]
        outs = fn_compiled(params, [leaves[i] for i in slots])
        full = list(out_spec["leaves"])
        for slot, tensor in zip(out_spec["slots"], outs, strict=True):
            full[slot] = tensor
        return tree_unflatten(full, out_spec["spec"])

    def forward(*args: Any, **kwargs: Any) -> Any:
        if getattr(layer, "gradient_checkpointing", False) and layer.training and torch.is_grad_enabled():
            from torch.utils.checkpoint import checkpoint

            return checkpoint(call, *args, use_reentrant=False, preserve_rng_state=False, **kwargs)
        return call(*args, **kwargs)

    layer.forward = forward


def _blocks(model: Any) -> list[Any]:
    """The transformer blocks of the tracer's models."""
    for path in ("model.layers", "transformer.h", "bert.encoder.layer"):
        obj = model
        try:
            for part in path.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            continue
        return list(obj)
    raise SystemExit("tracer_compile.py: no transformer blocks found in this model")


def _chunked_loss(model: Any) -> None:
    """torchtune's chunked output and loss on a transformers causal LM: the LM head per chunk of the sequence,
    ``CEWithChunkedOutputLoss`` with its ``compute_cross_entropy`` compiled, labels shifted as torchtune's
    recipes shift them."""
    import torch
    from torchtune.modules.loss import CEWithChunkedOutputLoss

    loss_fn = CEWithChunkedOutputLoss(num_output_chunks=CE_CHUNKS)
    compute = loss_fn.compute_cross_entropy
    N_OUT["loss"] = 1
    loss_compiled = compiled(lambda logits, labels: [compute(logits, labels)], "loss")
    loss_fn.compute_cross_entropy = lambda logits, labels, **kw: loss_compiled(logits, labels)[0]

    def forward(input_ids: Any, labels: Any, **kwargs: Any) -> Any:
        hidden = model.model(input_ids=input_ids).last_hidden_state
        chunks = [model.lm_head(chunk) for chunk in hidden.tensor_split(CE_CHUNKS, dim=1)]
        ignore = torch.full_like(labels[:, :1], -100)
        shifted = torch.hstack((labels[..., 1:], ignore))
        return {"loss": loss_fn(chunks, shifted)}

    model.forward = forward


def _with_grad_scaler(groundtruth: Any) -> Any:
    """The tracer's step with ``torch.amp.GradScaler("cuda")``, as the HF Trainer (accelerate) steps under fp16
    autocast: the loss scaled before backward; the gradients unscaled in place (``unscale_``: one
    ``_amp_foreach_non_finite_check_and_unscale_``), the optimizer stepped and the scale updated
    (``torch/amp/grad_scaler.py``). The scale, its growth tracker and ``found_inf`` are one-element tensors.
    Returns a callable that restores the tracer."""
    import torch

    make, loss_of = groundtruth._make_optimizer, groundtruth._loss_of
    scalers: list[Any] = []  # made in the tracer's step, once it has let autocast (and so GradScaler) enable itself

    def make_scaled(a: Any, params: Any) -> Any:
        opt = make(a, params)
        scalers.append(torch.amp.GradScaler("cuda"))
        scaler = scalers[-1]
        step = opt.step

        def scaled_step(*args: Any, **kwargs: Any) -> Any:
            scaler.unscale_(opt)  # GradScaler.step steps when found_inf is 0, as here
            out = step(*args, **kwargs)
            scaler.update()
            return out

        opt.step = scaled_step
        return opt

    groundtruth._make_optimizer = make_scaled
    groundtruth._loss_of = lambda out: scalers[-1].scale(loss_of(out))

    def restore() -> None:
        groundtruth._make_optimizer, groundtruth._loss_of = make, loss_of

    return restore


def _peft_blocks(model: Any) -> list[Any]:
    """The transformer blocks of a model, under PEFT's wrapper (``PeftModel.get_base_model``) where it has one."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return _blocks(base)


def trace(argv: list[str]) -> dict[str, Any]:
    """The tracer's result for one command line with every block compiled (and, with ``--chunked-ce``, torchtune's
    chunked loss compiled), plus the saved bytes of one compiled block and loss chunk. With ``--lora R:TARGETS``
    (and ``--lora-dropout P``) the model is first wrapped by ``peft.get_peft_model`` (``tracer_llm.with_lora``:
    alpha 2 x R, PEFT's other defaults), then its blocks compiled; the first block (whose input, the frozen
    embedding's output, needs no gradient) is measured apart as ``first_block``."""
    chunked = "--chunked-ce" in argv
    argv = [a for a in argv if a != "--chunked-ce"]
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from tracer_llm import _take, with_lora

    argv, lora = _take(argv, "--lora", True)
    argv, dropout = _take(argv, "--lora-dropout", True)
    if "infer" in argv:  # the first forward compiles; the second is the one reported
        argv = [*argv, "--iters", "2"]
    sys.path.insert(0, str(TRACER))
    import fakecuda  # type: ignore[import-not-found]

    fakecuda.enable()
    import models  # type: ignore[import-not-found]

    _ignoring_tracker()
    MEASURED.clear()
    N_OUT.clear()
    N_PARAMS.clear()
    build = models.build

    def build_compiled(*args: Any, **kwargs: Any) -> Any:
        model, batch, desc = build(*args, **kwargs)
        if lora:
            import peft.tuners.lora.torchao as peft_torchao

            # torchao 0.14.1 (torchtune's) is older than PEFT's torchao dispatcher accepts; no weight here is torchao's
            peft_torchao.is_torchao_available = lambda: False
            model = with_lora(model, lora, float(dropout or 0.0))
            desc += f" + LoRA r={lora.replace(':', ' ')}"
        for i, layer in enumerate(_peft_blocks(model)):
            _compile_block(layer, "first_block" if lora and i == 0 else "block")
        if chunked:
            _chunked_loss(model)
        return model, batch, desc

    models.build = build_compiled
    import groundtruth  # type: ignore[import-not-found]

    args = groundtruth.parse_args([*argv, "--attn", "sdpa", "--no-allocator-sim"])
    scaled = args.amp and args.dtype == "fp16" and args.mode == "train"
    restore = _with_grad_scaler(groundtruth) if scaled else (lambda: None)
    try:
        result: dict[str, Any] = groundtruth.run(args)
    finally:
        models.build = build
        restore()
    result["compiled"] = json.loads(json.dumps(MEASURED))
    return result


#: transformers' generation with a static cache and ``model.forward`` compiled (the "static cache and
#: torch.compile" recipe), stored in ``benchmarks/data/tracer_compile_generate.json``: ``--seq`` is the prompt.
GENERATE_CASES: dict[str, str] = {
    "compile-gen-llama_l2_h256_b1_p512_n8_bf16": f"{_LLAMA} --batch 1 --seq 512 --new 8 --dtype bf16",
    "compile-gen-llama_l2_h256_b4_p256_n16_bf16": f"{_LLAMA} --batch 4 --seq 256 --new 16 --dtype bf16",
    "compile-gen-llama_l3_h512_gqa_b1_p1024_n8_bf16": f"{_LLAMA_GQA} --batch 1 --seq 1024 --new 8 --dtype bf16",
    "compile-gen-llama_l3_h512_gqa_b4_p512_n64_bf16": f"{_LLAMA_GQA} --batch 4 --seq 512 --new 64 --dtype bf16",
    "compile-gen-llama_l3_h512_gqa_b1_p64_n1024_bf16": f"{_LLAMA_GQA} --batch 1 --seq 64 --new 1024 --dtype bf16",
    "compile-gen-llama_l3_h512_gqa_b4_p2048_n8_fp16": f"{_LLAMA_GQA} --batch 4 --seq 2048 --new 8 --dtype fp16",
    "compile-gen-gpt2_l2_h256_b1_p512_n8_bf16": f"{_GPT2} --batch 1 --seq 512 --new 8 --dtype bf16",
    "compile-gen-gpt2_l2_h256_b4_p256_n64_fp32": f"{_GPT2} --batch 4 --seq 256 --new 64 --dtype fp32",
}


def _in_place_cache_update(gm: Any) -> None:
    """Inductor's re-inplacing (``torch/_inductor/fx_passes/reinplace.py`` ``reinplace_inplaceable_ops``,
    ``inplaceable_ops``: ``index_put`` → ``index_put_``): a ``StaticLayer.update``'s ``index_copy_``,
    functionalized by AOTAutograd and decomposed to ``index_put`` by inductor's table, whose result the graph copies
    back into the cache (its input), runs in place: no copy of the cache is made, and the final ``copy_`` is
    dropped."""
    import torch

    aten = torch.ops.aten
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.copy_.default:
            continue
        dst, src = node.args
        in_place = {aten.index_copy.default: aten.index_copy_.default, aten.index_put.default: aten.index_put_.default}
        if dst.op == "placeholder" and src.op == "call_function" and src.target in in_place:
            if src.args[0] is dst:
                src.target = in_place[src.target]
                node.replace_all_uses_with(dst)
                gm.graph.erase_node(node)
    gm.graph.lint()
    gm.recompile()


#: List the largest tensors alive at the peak (``--top``).
TOP = "--top" in sys.argv
#: True while a compiled forward is being traced.
TRACING = [False]


def _seen_as_compiling() -> None:
    """transformers' ``is_torchdynamo_compiling`` answers True while the compiled forward is traced, as under dynamo
    (``masking_utils._ignore_causal_mask_sdpa`` then builds the mask rather than read the cache's position)."""
    import transformers.utils.import_utils as iu

    if getattr(iu, "_seen_as_compiling", False):
        return
    original = iu.is_torchdynamo_compiling
    iu._seen_as_compiling = True

    def compiling() -> bool:
        return TRACING[0] or original()

    for name, module in list(sys.modules.items()):
        if name.startswith("transformers") and getattr(module, "is_torchdynamo_compiling", None) is original:
            module.is_torchdynamo_compiling = compiling


def _compiled_forward(model: Any) -> Any:
    """``model.forward`` (keyword ``input_ids`` and ``cache``) compiled as one graph, as the recipe's
    ``torch.compile(model.forward, fullgraph=True)``: AOTAutograd with inductor's decompositions, the static cache's
    tensors lifted as graph inputs it mutates (kept in the graph, ``keep_inference_input_mutations``, and
    re-inplaced as inductor does), run with inductor's fusion emulated; one graph per input shape (the prefill's,
    the decode step's)."""
    from functorch.compile import aot_function
    from torch._inductor.decomposition import select_decomp_table
    from torch.nn.utils import stateless

    _seen_as_compiling()
    names = [n for n, _ in _state(model)]
    forward = type(model).forward
    graphs: dict[Any, Any] = {}
    current: list[Any] = []  # the cache of the running call

    def cache_tensors() -> list[Any]:
        (cache,) = current
        return [t for layer in cache.layers for t in (layer.keys, layer.values, layer.cumulative_length)]

    def set_cache(tensors: list[Any]) -> None:
        (cache,) = current
        for i, layer in enumerate(cache.layers):
            layer.keys, layer.values, layer.cumulative_length = tensors[3 * i : 3 * i + 3]

    def fn(params: list[Any], input_ids: Any, tensors: list[Any]) -> Any:
        real = cache_tensors()
        set_cache(tensors)
        TRACING[0] = True
        try:
            with stateless._reparametrize_module(model, dict(zip(names, params, strict=True))):
                out = forward(model, input_ids=input_ids, cache=current[0], use_cache=True, logits_to_keep=1)
        finally:
            TRACING[0] = False
            set_cache(real)
        return [out.logits]

    def compiler(gm: Any, example_inputs: Any) -> Any:
        _in_place_cache_update(gm)
        return _fused_runner(gm, realize_on_reuse=True)

    def call(input_ids: Any, cache: Any) -> Any:
        current[:] = [cache]
        key = tuple(input_ids.shape)
        if key not in graphs:
            graphs[key] = aot_function(
                fn,
                fw_compiler=compiler,
                inference_compiler=compiler,
                decompositions=select_decomp_table(),
                keep_inference_input_mutations=True,
            )
        params = [p for _, p in _state(model)]
        (logits,) = graphs[key](params, input_ids, cache_tensors())
        return logits

    return call


def trace_generate(argv: list[str]) -> dict[str, Any]:
    """The traced peak of transformers' static-cache generation with ``model.forward`` compiled: the cache set up
    for ``max_length - 1`` tokens (``_prepare_cache_for_generation``), the prefill and ``--new`` - 1 decode steps
    through the compiled forward (``logits_to_keep=1``), each step's last logits copied to fp32 and the next token
    picked (``_sample``); run twice, the second reported (the first compiles)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from tracer_llm import _take

    argv, new = _take(argv, "--new", True)
    argv = [a for a in argv if a != "--top"]
    n_new = int(new or 8)
    sys.path.insert(0, str(TRACER))
    import fakecuda  # type: ignore[import-not-found]

    fakecuda.enable()
    import torch
    import traced_cases
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import StaticCache

    _ignoring_tracker()
    a, dtype = traced_cases.inference_args(argv)
    with FakeTensorMode(allow_non_fake_inputs=False):
        model, desc = traced_cases.frozen_model(a, dtype, a.seq + n_new)
        with torch.device("cuda"):
            prompt = torch.randint(0, model.config.vocab_size, (a.batch, a.seq))
        tracker = traced_cases.card_tracker(a.gpu, model, prompt)
        text = model.config.get_text_config(decoder=True)
        heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        max_cache_len = a.seq + n_new - 1  # generate's max_length - 1
        step = _compiled_forward(model)

        def generate() -> Any:
            cache = StaticCache(config=text, max_cache_len=max_cache_len)
            cache.early_initialization(a.batch, heads, head_dim, dtype, prompt.device)
            input_ids, next_input = prompt, prompt
            for _ in range(n_new):
                logits = step(next_input, cache)
                next_logits = logits[:, -1].to(copy=True, dtype=torch.float32)
                del logits
                next_tokens = torch.argmax(next_logits, dim=-1)
                input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
                next_input = next_tokens[:, None]
            return input_ids

        result = traced_cases.second_run(tracker, generate, desc, TOP)
        result["params"] = sum(p.numel() for p in model.parameters())
    return result


#: The traced families as vramcalc's model keys.
FAMILIES: dict[str, dict[str, Any]] = {
    "llama": {
        "architecture": "decoder",
        "mlp": "swiglu",
        "norm": "rmsnorm",
        "position": "rotary",
        "bias": False,
        "tie_embeddings": False,
    },
    "gpt2": {
        "architecture": "decoder",
        "mlp": "gelu_tanh",
        "norm": "layernorm",
        "position": "learned",
        "dropout": 0.1,
        "tie_embeddings": True,
    },
    "bert": {
        "architecture": "encoder",
        "mlp": "gelu",
        "norm": "layernorm",
        "position": "learned",
        "dropout": 0.1,
        "tie_embeddings": True,
    },
}


def score(name: str = "tracer_compile.json") -> None:
    """vramcalc's estimate of every stored training case of ``benchmarks/data/<name>`` against the traced peak, and
    the quality bar (median |error| <= 2 %, largest <= 5 %). Run with the project's environment (no torch needed)."""
    import statistics

    from vramcalc.families import estimate

    data = json.loads((Path(__file__).resolve().parent / "data" / name).read_text(encoding="utf-8"))
    errors = []
    for case in data["cases"]:
        if "--mode infer" in case["command"]:
            print(f"{case['id']:55s} (a compiled forward: see tracer_compile_infer.json and its tests)")
            continue
        got = estimate(traced_spec(case["command"])).peak_allocated_bytes
        errors.append(got / case["peak_bytes"] - 1)
        print(f"{case['id']:55s} traced {case['peak_bytes']:>13,}  vramcalc {got:>13,}  {errors[-1]:+.2%}")
    absolute = [abs(e) for e in errors]
    print(f"median |error| {statistics.median(absolute):.2%}, largest {max(absolute):.2%} (bar: 2 %, 5 %)")


def traced_spec(command: str, compile_: bool = True) -> Any:
    """The vramcalc spec of a stored case's tracer command line: the family's shape, the batch, the dtype (with
    ``--amp``, autocast over fp32 weights), SDPA, and the step the tracer ran (the tests and ``--score`` share it)."""
    from vramcalc.spec.models import Spec

    words = command.split()[2:]
    args: dict[str, Any] = {
        w[2:]: (n if not n.startswith("--") else True) for w, n in zip(words, [*words[1:], "--"]) if w[:2] == "--"
    }
    model = {
        **FAMILIES[args["arch"]],
        "layers": int(args["layers"]),
        "hidden_size": int(args["hidden"]),
        "heads": int(args["heads"]),
        "kv_heads": int(args.get("kv-heads", args["heads"])),
        "ffn_size": int(args["ffn"]),
        "vocab_size": int(args["vocab"]),
        "head": "lm",
    }
    workload: dict[str, Any] = {
        "batch_size": int(args["batch"]),
        "seq_len": int(args["seq"]),
        "precision": f"amp-{args['dtype']}" if args.get("amp") else args["dtype"],
        "attention": "sdpa",
        "compile": compile_,
    }
    if args.get("new"):  # transformers' generate with a static cache, --seq the prompt
        del workload["seq_len"]
        workload |= {"mode": "inference", "prompt_len": int(args["seq"]), "max_new_tokens": int(args["new"])}
        workload |= {"runtime": "hf", "cache": "static"}
    elif args.get("mode") == "infer":
        workload["mode"] = "inference"
    else:
        workload["optimizer"] = args["optimizer"]
        if args.get("grad-checkpointing"):
            workload["gradient_checkpointing"] = "full"
        if args.get("chunked-ce"):
            workload["cross_entropy"] = "chunked"
    if args.get("lora"):  # tracer_llm.with_lora's LoraConfig: alpha 2 x rank
        rank, targets = args["lora"].split(":")
        workload["adapter"] = {
            "type": "lora",
            "rank": int(rank),
            "alpha": 2 * int(rank),
            "targets": targets if targets == "all-linear" else targets.split(","),
            "dropout": float(args.get("lora-dropout", 0.0)),
        }
    return Spec.model_validate({"model": model, "workload": workload})


def main(argv: list[str]) -> None:
    scored = {"--score": "tracer_compile.json", "--score-peft": "tracer_compile_peft.json"}
    scored["--score-generate"] = "tracer_compile_generate.json"
    if len(argv) == 1 and argv[0] in scored:
        score(scored[argv[0]])
        return
    if "--new" in argv:
        print(json.dumps(trace_generate(argv), indent=2, default=str))
        return
    if argv == ["--generate-cases"]:
        import traced_cases  # beside this script

        traced_cases.print_generation_cases("tracer_compile.py", GENERATE_CASES, trace_generate)
        return
    sets = {"--cases": CASES, "--infer-cases": INFER_CASES, "--peft-cases": PEFT_CASES}
    if len(argv) != 1 or argv[0] not in sets:
        print(json.dumps(trace(argv), indent=2, default=str))
        return
    rows = []
    for case_id, command in sets[argv[0]].items():
        result = trace(command.split())
        rows.append(
            {
                "id": case_id,
                "command": f"python benchmarks/tracer_compile.py {command}",
                "peak_bytes": result["peak_bytes"],
                "peak_phase": result["peak_phase"],
                "phase_peaks": {k: v["peak_bytes"] for k, v in result["phases"].items()},
                "params": result["params"],
                "compiled": result["compiled"],
            }
        )
    import torch

    found = {"torch": str(torch.__version__)}
    if argv == ["--peft-cases"]:
        import peft
        import transformers

        found |= {"transformers": transformers.__version__, "peft": peft.__version__}
    print(json.dumps({**found, "cases": rows}, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
