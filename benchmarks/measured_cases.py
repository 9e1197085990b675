"""The vramcalc spec of every case of ``shared/calibration/measured.yaml`` that a spec can express.

``case_for(record)`` returns a :class:`Case` (the spec, what to compare, the inputs the source did not
state) or a :class:`NotExpressible` with the reason. Scoring is in ``benchmarks/measured_score.py``.

Where a curated spec already exists it is used, so one run is described in one place:
``benchmarks/data/measured_llm.yaml`` (LLM generation, LoRA, vLLM), ``benchmarks/parallel_accuracy.py``
(torchtitan, Megatron-LM, DeepSpeed) and ``benchmarks/accuracy.py`` (BERT-large with the HF Trainer on a
V100). The other families are mapped here from the record's own fields; every value a source did not
state is listed in ``Case.inferred``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import accuracy
import parallel_accuracy
import yaml

ROOT = Path(__file__).resolve().parent.parent
MiB = 2**20

#: CUDA context measured on the V100 with 2022 PyTorch (case hf-perf-bert-large-load-context-only).
V100_CONTEXT = 1343 * MiB
#: The HF SDPA generation tables do not state the number of new tokens; the peak is the prefill's
#: full-vocabulary logits, which the new tokens' KV cache barely moves (about 0.2 MB per token here).
SDPA_NEW_TOKENS = 100
#: New tokens of the BERT generation table (inferred: see _sdpa_table).
BERT_NEW_TOKENS = 128
#: PEFT's 2022 example scripts (twitter_complaints) pad to at most 64 tokens (``max_length = 64``).
PEFT_EXAMPLE_SEQ = 64
#: Their seq2seq script (examples/conditional_generation/peft_lora_seq2seq_accelerate_ds_zero3_offload.py)
#: tokenizes the tweets with ``truncation=True`` and no max_length and pads each batch to its longest, so
#: the cap there is the longest tweet: the records' "< ~100 tokens". It pads the labels to
#: ``target_max_length``, the longest tokenized class name ("Unlabeled", "complaint", "no complaint" with
#: the closing </s>): about 4 tokens with the T5 / mT5 tokenizers (not run here).
PEFT_SEQ2SEQ_SEQ = 100
PEFT_EXAMPLE_TARGET = 4

#: measured.yaml `compare` rules.
ALLOCATED, ALLOCATED_CONTEXT, RESERVED, NVML, KV_TOKENS, WEIGHTS, WEIGHTS_CONTEXT, LABEL, STATIC = (
    "allocated",
    "allocated+context",
    "reserved",
    "nvml",
    "kv_tokens",
    "weights",
    "weights+context",
    "label",
    "static",
)


@dataclass
class Case:
    """One measured number and the spec of its run.

    ``compare``: allocated (peak allocated vs v), allocated+context (the source's figure includes memory
    outside PyTorch: peak allocated + CUDA context vs v), reserved (allocated + allocator reserve vs v), nvml
    (reserved + CUDA context vs v), kv_tokens (vLLM's KV tokens vs v), weights (the parameters
    component, less any stated CPU offload, vs v; weights+context adds the CUDA context), static
    (weights + gradients + optimizer states after the step vs v), label (the fit verdict on the run's
    card vs fits/oom). ``bound``: the measurement only bounds the step, so the row is checked
    one-sidedly and kept out of the signed medians: with
    ``bound_is_upper`` the estimate at the longest sample must be at least v (variable-length batches
    draw shorter ones), else the allocated estimate must not exceed v (a whole-run reserved peak)."""

    spec: dict[str, Any]
    compare: str
    inferred: list[str] = field(default_factory=list)
    hopper_or_newer: bool = True
    usable_bytes: int | None = None
    offload_bytes: int = 0
    bound: str = ""
    bound_is_upper: bool = False


@dataclass
class NotExpressible:
    reason: str


def _by_id(path: Path, key: str = "cases") -> dict[str, dict[str, Any]]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return {c["id"]: c for c in (data[key] if key else data)}


CURATED_LLM = _by_id(ROOT / "benchmarks" / "data" / "measured_llm.yaml")
CURATED_MULTI_GPU = _by_id(ROOT / "benchmarks" / "data" / "measured_multi_gpu.yaml", key="")
LLM_COMPARE = {"allocated": ALLOCATED, "allocated+context": ALLOCATED_CONTEXT, "reserved": RESERVED, "weights": WEIGHTS}

UNMEASURED_CONTEXT = "NVML used on a stack whose CUDA context is not measured: allocated <= v"
WHOLE_RUN_RESERVED = "reserved peak of a whole run (evaluation included) with variable-length batches"

NOT_EXPRESSIBLE = {
    "peft-readme-sd14-": "latent diffusion (a UNet, a VAE and a text encoder) is not a model family",
    "hf-perf-bert-large-load-context-only": "the CUDA context alone: the context the V100 cases use as input",
    "-longprompt-": "the prompt length is not stated (only the eager/flash difference is usable)",
    "accelerate-bmi-GPT-NeoX-20B-float32": "weights also offloaded to disk, by an amount the source does not state",
    "accelerate-bmi-OPT-30B-float32": "weights also offloaded to disk, by an amount the source does not state",
}


def usable_bytes(record: dict[str, Any]) -> tuple[int, list[str]]:
    """The driver total of the run's card, else its nominal capacity (stated as an input)."""
    gpu = record["gpu"]
    if gpu.get("vram_usable_bytes"):
        return gpu["vram_usable_bytes"], []
    return gpu["vram_bytes"], ["card memory: the nominal capacity (the driver total is not stated)"]


def case_for(record: dict[str, Any]) -> Case | NotExpressible:
    """The spec of one measured.yaml record, or why none describes the run."""
    rid = record["id"]
    for marker, reason in NOT_EXPRESSIBLE.items():
        if marker in rid:
            return NotExpressible(reason)
    if record["kind"] == "training_peft":
        method = record["workload"]["peft"]["method"] if "peft" in record["workload"] else "DoRA"
        if method not in PEFT_METHODS:
            return NotExpressible(
                f"PEFT adapter {method}: vramcalc models LoRA, DoRA, LoRA-FA, IA3, prompt, prefix and LN tuning, VeRA, "
                "LoHa, AdaLoRA, TinyLoRA, OSF and BOFT"
            )
    if rid in CURATED_LLM:
        return _curated_llm(CURATED_LLM[rid])
    if rid in CURATED_MULTI_GPU:
        return _multi_gpu(CURATED_MULTI_GPU[rid])
    if rid.startswith("hf-perf-bert-large"):
        return _bert_large_v100(record)
    for prefix, build in BUILDERS.items():
        if rid.startswith(prefix):
            return build(record)
    return NotExpressible("no spec mapping for this source")


def _curated_llm(case: dict[str, Any]) -> Case:
    spec = {"name": case["id"], **case["spec"]}
    if case["compare"] == "reserved":
        return Case(spec, RESERVED, list(case.get("inferred", [])), bound=WHOLE_RUN_RESERVED)
    if case["compare"] == "kv_tokens":
        return Case(
            spec, KV_TOKENS, list(case.get("inferred", [])), case.get("hopper_or_newer", True), case.get("usable_bytes")
        )
    return Case(spec, LLM_COMPARE[case["compare"]], list(case.get("inferred", [])))


def _multi_gpu(case: dict[str, Any]) -> Case | NotExpressible:
    reason = parallel_accuracy.comparability(case)
    if reason:
        return NotExpressible(reason)
    spec, inferred = parallel_accuracy.case_spec(case)
    quantity = case["measured"]["quantity"]
    if quantity in ("fits", "oom"):
        spec["overhead"] = {"cuda_context": f"{V100_CONTEXT}B"}
        return Case(spec, LABEL, inferred, usable_bytes=case["gpu"]["vram_usable_bytes"])
    if quantity == "peak_allocated":  # Megatron-LM: only memory_allocated after the step is stated
        return Case(spec, STATIC, inferred)
    return Case(spec, RESERVED, inferred)


def _bert_large_v100(record: dict[str, Any]) -> Case:
    if record["workload"]["mode"] == "load":
        spec = accuracy.measured_spec(
            {
                **record,
                "workload": {
                    **record["workload"],
                    "batch_size": 1,
                    "seq_len": 512,
                    "optimizer": "adamw",
                    "gradient_checkpointing": False,
                    "attention": "eager",
                },
            },
            V100_CONTEXT,
        )
        spec["workload"] = {"mode": "inference", "batch_size": 1, "seq_len": 1, "precision": "fp32"}
        return Case(spec, WEIGHTS_CONTEXT, [])
    spec = accuracy.measured_spec(record, V100_CONTEXT)
    del spec["overhead"]["allocator_reserve"]  # the reserve model decides, as for any spec
    said = [f"versions.torch {accuracy.V100_TORCH} (early 2022; any release before 2.0 keeps zeroed gradients)"]
    if "bitsandbytes" in spec["workload"]["versions"]:
        said.append(
            f"versions.bitsandbytes {accuracy.V100_BITSANDBYTES} (early 2022; any release before 0.44 keeps an "
            "absmax per 2,048 elements)"
        )
    return Case(spec, NVML, said, hopper_or_newer=False)


#: The transformers release each SDPA table was made with: the release that shipped the pull request adding
#: SDPA to the model, whose description carries the table (the benchmark ran on its development tree):
#: BERT #28802 (BertSdpaSelfAttention first in 4.41.0), GPT-NeoX #31031 (GPTNeoXSdpaAttention first in 4.42.0;
#: PyTorch 2.2.1). OPT #33298 (OPTSdpaAttention first in 4.46.0; PyTorch 2.4.0) posted its table on
#: 2024-09-25 from a tree without the whole-logits ``clone()`` that 4.45.0 and 4.46 run in ``_sample``: at batch
#: 8 x 1,024 tokens the weights (0.66 GB), the prompt's cache (0.81 GB) and its logits with that copy (2 x 0.82
#: GB) alone come to 2.90 GiB, above the 2.28 / 2.45 GiB measured; for OPT that tree's generation is 4.44's.
SDPA_RELEASES = {"bert": "4.41.0", "gpt-neox": "4.42.0", "opt": "4.44.0"}


def _sdpa_table(record: dict[str, Any]) -> Case:
    """HF SDPA benchmark tables (transformers model docs, 2024): fp16 weights; training is forward +
    ``logits.sum().backward()`` without an optimizer or a loss (``cross_entropy: none``; ``model.train()``:
    dropout on); generation is ``generate`` after a ``seq_len``-token prompt, BERT's inference table too
    (a masked LM generating without a KV cache)."""
    w, m = record["workload"], record["model"]
    preset = {"opt": "opt-350m", "gpt-neox": "pythia-410m", "bert": "bert-base-uncased"}[m["arch"]]
    model: dict[str, Any] = {"preset": preset}
    inferred: list[str] = []
    release = SDPA_RELEASES[m["arch"]]
    workload: dict[str, Any] = {
        "batch_size": w["batch_size"],
        "precision": "fp16",
        "attention": w["attention"],
        "versions": {"transformers": release},
    }
    inferred.append(f"transformers {release} (the release of the pull request that added the table)")
    if m["arch"] == "bert":
        model["head"] = "lm"
        inferred.append("head: BertForMaskedLM (not stated)")
    if w["mode"] == "forward":
        # BERT's "inference" table: a per-token latency of 5-6 ms at every batch and length is one whole
        # forward per generated token, so it ran ``generate`` (benchmarks/tracer_bert_generate.py)
        workload |= {
            "mode": "inference",
            "prompt_len": w["seq_len"],
            "max_new_tokens": BERT_NEW_TOKENS,
            "use_cache": False,
            "runtime": "hf",
        }
        inferred += [
            "generate on BertForMaskedLM without a KV cache (the table's per-token latency: one forward per token)",
            f"max_new_tokens {BERT_NEW_TOKENS} (not stated: the table grows by 16.0 MB per sequence, two fp16 "
            f"logits of {BERT_NEW_TOKENS} positions)",
        ]
        spec = {"name": record["id"], "model": model, "workload": workload}
        return Case(spec, ALLOCATED, inferred, hopper_or_newer=False)
    if w["mode"] == "fwd_bwd":
        # the script binds ``outputs = model(**inputs)``: the previous step's logits and KV cache stay alive
        # through the next forward (keep_outputs)
        workload |= {
            "mode": "train",
            "seq_len": w["seq_len"],
            "optimizer": "none",
            "cross_entropy": "none",
            "keep_outputs": True,
        }
    else:
        workload |= {
            "mode": "inference",
            "prompt_len": w["seq_len"],
            "max_new_tokens": SDPA_NEW_TOKENS,
            "runtime": "hf-legacy",
        }
        inferred += [
            f"max_new_tokens {SDPA_NEW_TOKENS} (not stated)",
            "runtime hf-legacy (tuple caches; the prefill logits follow the pinned release)",
        ]
    spec = {"name": record["id"], "model": model, "workload": workload}
    if record["kind"] == "fit_oom":
        usable, note = usable_bytes(record)
        return Case(spec, LABEL, inferred + note, usable_bytes=usable)
    return Case(spec, ALLOCATED, inferred, hopper_or_newer=False)


def _hf_benchmark(record: dict[str, Any]) -> Case:
    """transformers 2.11 PyTorchBenchmark: BertModel (no head) forward in fp32 under no_grad; NVML used.
    The CUDA context of that stack (PyTorch 1.4, TITAN RTX) is not measured in the set: the README's
    "about 1 GB" cannot be right to the few % a two-sided score needs (the smallest row is 0.98 GiB in
    all), so the allocated estimate is checked to stay below NVML used."""
    m, w = record["model"], record["workload"]
    model = {
        "architecture": "encoder",
        "layers": m["layers"],
        "hidden_size": m["hidden_size"],
        "heads": m["heads"],
        "ffn_size": m["ffn_size"],
        "vocab_size": m["vocab_size"],
        "head": "none",
        "pooler": True,
    }
    workload = {
        "mode": "inference",
        "batch_size": w["batch_size"],
        "seq_len": w["seq_len"],
        "precision": "fp32",
        "attention": "eager",
    }
    spec = {"name": record["id"], "model": model, "workload": workload}
    return Case(spec, ALLOCATED, [], hopper_or_newer=False, bound=UNMEASURED_CONTEXT)


def _accelerate_load(record: dict[str, Any]) -> Case:
    """accelerate big-model inference: weights placed over two GPUs, the rest on the CPU (stated)."""
    preset = {"gpt-j": "gpt-j-6b", "gpt-neox": "gpt-neox-20b", "opt": "opt-30b"}.get(record["model"]["arch"])
    model = {"preset": preset} if preset else _shaped("t5-v1.1-base", record["model"])
    precision = record["workload"]["precision"]
    spec = {
        "name": record["id"],
        "model": model,
        "workload": {"mode": "inference", "batch_size": 1, "seq_len": 1, "precision": precision},
    }
    offload = next((a["value_bytes"] for a in record["measured"].get("also", []) if a["quantity"] == "cpu_offload"), 0)
    return Case(spec, WEIGHTS, ["weights less the stated CPU offload"], offload_bytes=offload)


def _shaped(preset: str, m: dict[str, Any]) -> dict[str, Any]:
    """A catalog model of the same family (its norm, MLP, positions) with the record's own shape."""
    keys = ("layers", "hidden_size", "heads", "ffn_size", "vocab_size", "tie_embeddings")
    model = {"preset": preset} | {k: m[k] for k in keys}
    if preset.startswith("t5"):  # as many decoder layers as encoder layers (T5 / mT5 configs)
        model["decoder_layers"] = m["layers"]
    return model


#: T0 / mT0 are T5-v1.1 / mT5 checkpoints (gated GELU, RMS norm, relative positions, untied head);
#: BLOOMZ is BLOOM. The shapes are the records' (from the public config.json files).
FAMILY_PRESETS = {"t5": "t5-v1.1-base", "mt5": "t5-v1.1-base", "bloom": "bloom-560m"}


def _peft_readme(record: dict[str, Any]) -> Case | NotExpressible:
    """PEFT README (Dec 2022): fp32 weights, AdamW, batch 8, short tweets padded per batch."""
    name = record["model"]["hf_id"].split("/")[1]
    w = record["workload"]
    workload: dict[str, Any] = {
        "mode": "train",
        "batch_size": w["batch_size"],
        "seq_len": PEFT_EXAMPLE_SEQ,
        "precision": "fp32",
        "optimizer": "adamw",
        "attention": "eager",
    }
    inferred = [f"seq_len {PEFT_EXAMPLE_SEQ} (the example scripts' max_length)", *w.get("inferred", [])]
    if record["model"].get("arch_family") == "encoder-decoder":
        workload["seq_len"], workload["target_len"] = PEFT_SEQ2SEQ_SEQ, PEFT_EXAMPLE_TARGET
        inferred[0] = f"seq_len {PEFT_SEQ2SEQ_SEQ} (no max_length in the seq2seq script: the longest tweet, < ~100)"
        inferred.append(f"target_len {PEFT_EXAMPLE_TARGET} (the seq2seq script's target_max_length: the class names)")
    parallel = w.get("parallelism")
    if "lora" in w:
        lora = w["lora"]
        targets = ["query_key_value"] if name.startswith("bloomz") else lora["targets"]
        workload["adapter"] = {
            "rank": lora["rank"],
            "alpha": lora.get("alpha"),
            "targets": targets,
            "dropout": lora.get("dropout", 0.0),
        }
    if parallel is None and record["model"].get("arch_family") != "encoder-decoder":
        # the example loops bind ``outputs = model(**batch)`` (peft_lora_clm_accelerate_*.py)
        workload["keep_outputs"] = True
        inferred.append("keep_outputs (the example scripts' loop keeps each step's outputs)")
    arch = record["model"]["arch"].split()[0].removesuffix("-v1.1")
    spec = {"name": record["id"], "model": _shaped(FAMILY_PRESETS[arch], record["model"]), "workload": workload}
    if parallel is not None:  # DeepSpeed ZeRO-3 with parameters and optimizer offloaded to the CPU, one GPU
        offload = {"params": parallel["offload_param"], "optimizer": parallel["offload_optimizer"]}
        spec["parallel"] = {"gpus": w["num_gpus"], "zero": parallel["zero_stage"], "offload": offload}
        inferred.append("DeepSpeed 0.8 defaults: reduce_bucket_size 5e8, stage3_prefetch_bucket_size 5e7 elements")
        release = re.search(r"DeepSpeed (\d+\.\d+)", w["framework"])
        if release is not None:  # the record's framework line ("Accelerate/DeepSpeed 0.8")
            workload["versions"] = {"deepspeed": release.group(1)}
    if record["kind"] == "fit_oom":
        usable, note = usable_bytes(record)
        return Case(spec, LABEL, inferred + note, usable_bytes=usable)
    return Case(
        spec,
        ALLOCATED,
        inferred,
        bound="variable-length batches: the estimate at the cap is an upper bound",
        bound_is_upper=True,
    )


def _peft_qlora_2gpu(record: dict[str, Any]) -> Case:
    """PEFT docs "DeepSpeed" / "FSDP" QLoRA of Llama-2-70B on 2 GPUs (peft examples/sft, TRL SFTTrainer):
    nf4 with double quantization stored as bf16, the model loaded in bf16, LoRA r 8 / alpha 16 / dropout 0.1
    on all linears, 2 packed sequences of 2048 tokens per GPU, flash-attention-2, gradient checkpointing."""
    w = record["workload"]
    lora, par = w["lora"], w["parallelism"]
    workload: dict[str, Any] = {
        "mode": "train",
        "batch_size": w["batch_size"],
        "seq_len": w["seq_len"],
        "precision": "bf16",
        "attention": "sdpa",
        "gradient_checkpointing": "full",
        "optimizer": "adamw",
        "quantization": {"method": "nf4", "double_quant": True, "quant_storage": "bf16"},
        "adapter": {"rank": lora["rank"], "alpha": lora["alpha"], "dropout": lora["dropout"], "targets": "all-linear"},
    }
    if par["strategy"] == "fsdp":
        offload = par.get("offload_params", "none")
        parallel = {"gpus": w["num_gpus"], "fsdp": "full_shard", "offload": {"params": offload, "optimizer": offload}}
    else:
        parallel = {"gpus": w["num_gpus"], "zero": par["zero_stage"]}
    spec = {"name": record["id"], "model": {"preset": "llama-2-70b"}, "workload": workload, "parallel": parallel}
    inferred = [
        "the per-GPU figure read as device memory (the docs do not say how it was measured)",
        "attention sdpa with a flash kernel for flash-attention-2 (both save no score matrix)",
        "precision bf16 (torch_dtype = the quant storage dtype, bf16, in peft examples/sft)",
        "bitsandbytes 0.50.1 (the docs require >= 0.43.3)",
        "packed sequences counted as full 2048-token rows (packing fills them)",
        "CUDA context: vramcalc's default; an Ampere-class GPU (pre-Hopper cuBLAS workspace)",
        "gradient accumulation 2 adds nothing beyond the adapters' gradients (kept between micro-batches)",
    ]
    if par["strategy"] == "deepspeed":
        inferred.append("DeepSpeed defaults: reduce_bucket_size 5e8, stage3_prefetch_bucket_size 5e7 elements")
    return Case(spec, NVML, inferred, hopper_or_newer=False)


def _peft_method_comparison(record: dict[str, Any]) -> Case:
    """PEFT method_comparison on Llama-3.2-3B: bf16, AdamW, batch 4, samples truncated to 768 tokens.
    The measured peak is the reserved peak over the whole run (evaluation with batch 50 included) with
    variable-length batches: only a one-sided bound on the training step."""
    w = record["workload"]
    workload: dict[str, Any] = {
        "mode": "train",
        "batch_size": w["batch_size"],
        "seq_len": w["seq_len"],
        "precision": "bf16",
        "optimizer": "adamw",
        "attention": "sdpa",
    }
    inferred = ["attention sdpa (transformers' default)"]
    if "lora" in w:
        lora = w["lora"]
        workload["adapter"] = {"rank": lora["rank"], "targets": lora["targets"], "alpha": lora.get("alpha")}
        if w.get("optimizer") == "lora-fa":  # PEFT's create_lorafa_optimizer: lora_A frozen, AdamW on lora_B
            workload["adapter"]["type"] = "lora_fa"
    if "peft" in w:
        workload["adapter"], more = _peft_adapter(w["peft"], record["model"]["hidden_size"])
        inferred += more
    if "adapter" in workload:  # the release the runs name (w["framework"]): OSF rebuilt each weight then
        workload["versions"] = {"peft": "0.19.2.dev0"}
    spec = {"name": record["id"], "model": {"preset": "llama-3.2-3b"}, "workload": workload}
    return Case(spec, RESERVED, inferred, bound=WHOLE_RUN_RESERVED)


#: PEFT methods of method_comparison that an adapter type expresses.
PEFT_METHODS = (
    "dora",
    "ia3",
    "prompt_tuning",
    "prefix_tuning",
    "ln_tuning",
    "vera",
    "loha",
    "adalora",
    "tinylora",
    "osf",
    "boft",
)
#: Llama-3.2-3B: OSF parameters per unit of trained rank on all seven linears (28 layers x (out + in + 1) each).
OSF_PER_RANK = 28 * ((3072 + 3072 + 1) * 2 + (1024 + 3072 + 1) * 2 + (8192 + 3072 + 1) * 3)
#: Llama-3.2-3B: AdaLoRA parameters per unit of init_r on q_proj and v_proj (28 layers x (A, E, B) of both).
ADALORA_PER_RANK = 28 * ((3072 + 1 + 3072) + (3072 + 1 + 1024))


def _peft_adapter(peft: dict[str, Any], hidden: int) -> tuple[dict[str, Any], list[str]]:
    """The adapter of a method_comparison record's ``peft`` block. The records give the trainable count but
    not the number of virtual tokens: prompt tuning trains ``N x hidden``, prefix tuning ``N x 2 layers x
    kv_width`` (Llama-3.2-3B: 28 x 2 x 1024), so N is derived from the count (200 in both)."""
    method, trainable = peft["method"], peft["trainable_params"]
    if method in ("dora", "vera", "loha", "tinylora"):  # TinyLoRA: PEFT's default u (64 per adapted linear)
        return {"type": method, "rank": peft["rank"], "targets": peft["targets"]}, []
    if method == "ia3":
        ff = [t for t in peft["targets"] if t == "down_proj"]
        return {"type": "ia3", "targets": peft["targets"], "feedforward_modules": ff}, []
    if method == "ln_tuning":
        return {"type": "ln_tuning"}, []
    if method == "osf":
        # the trained rank from the trainable count (194,535,936 / OSF_PER_RANK = 128); the run's
        # experiments/osf/llama-3.2-3B-rank128/training_params.json sets autocast_adapter_dtype false
        rank = trainable // OSF_PER_RANK
        adapter = {"type": "osf", "rank": rank, "targets": "all-linear", "autocast_adapter_dtype": False}
        return adapter, [
            f"rank {rank} (trainable {trainable:,} / {OSF_PER_RANK:,}); adapters at bf16 (the run's config)"
        ]
    if method == "boft":
        # the run's adapter_config.json: boft_block_size 4; its script loads the model onto the GPU
        # (device_map) and never moves it after get_peft_model, so the permutations stay on the host
        note = "BOFT permutations on the host (the script never moves the model after get_peft_model)"
        return {"type": "boft", "block_size": 4, "permutation": "host", "targets": peft["targets"]}, [note]
    if method == "adalora":
        # the record's rank is LoraConfig's r, which AdaLoRA ignores; init_r from the trainable count
        # (18,353,664 / 286,776 = 64, as the run's adapter_config.json); target_r (32 there) changes no memory
        init_r = trainable // ADALORA_PER_RANK
        derived = f"init_r {init_r} (trainable {trainable:,} / {ADALORA_PER_RANK:,})"
        return {"type": "adalora", "init_r": init_r, "targets": peft["targets"]}, [derived]
    per_token = hidden if method == "prompt_tuning" else 28 * 2 * 1024
    n = trainable // per_token
    derived = f"num_virtual_tokens {n} (trainable {trainable:,} / {per_token:,})"
    return {"type": method, "num_virtual_tokens": n}, [derived]


def _megatron_gpt2xl(record: dict[str, Any]) -> Case:
    """Megatron-LM GPT-2 XL on one H100: bf16 with fp32 main parameters, gradients and Adam (18 B/param)."""
    m = record["model"]
    model = {
        "architecture": "decoder",
        "layers": m["layers"],
        "hidden_size": m["hidden_size"],
        "heads": m["heads"],
        "ffn_size": m["ffn_size"],
        "vocab_size": m["vocab_size"],
        "mlp": "gelu",
        "norm": "layernorm",
        "position": "learned",
        "max_position_embeddings": 1024,
        "bias": True,
        "tie_embeddings": True,
    }
    workload = {
        "mode": "train",
        "batch_size": 1,
        "seq_len": 1024,
        "precision": "mixed-bf16",
        "optimizer": "adam",
        "attention": "sdpa",
    }
    spec = {"name": record["id"], "model": model, "workload": workload}
    return Case(spec, NVML, ["attention: a fused kernel (not stated)", "CUDA context: vramcalc's default"])


def _vllm_405b_fp8(record: dict[str, Any]) -> Case:
    """Meta-Llama-3.1-405B-Instruct-FP8 in vLLM, TP 8: every block's attention and the first and last
    blocks' MLPs stay bf16 (the checkpoint's modules_to_not_convert); weights of one rank."""
    skip = ["attention", {"layers": [0, 0], "modules": ["mlp"]}, {"layers": [125, 125], "modules": ["mlp"]}]
    spec = {
        "name": record["id"],
        "model": {"preset": "llama-3.1-405b"},
        "workload": {
            "mode": "inference",
            "batch_size": 1,
            "seq_len": 1,
            "precision": "bf16",
            "quantization": {"method": "fp8", "skip_modules": skip},
        },
        "parallel": {"tensor": 8},
    }
    return Case(spec, WEIGHTS, [])


BUILDERS = {
    "vllm-llama31-405b-fp8": _vllm_405b_fp8,
    "hf-sdpa-": _sdpa_table,
    "hf-benchmark-bert": _hf_benchmark,
    "accelerate-bmi-": _accelerate_load,
    "peft-readme-": _peft_readme,
    "peft-docs-llama2-70b-qlora-": _peft_qlora_2gpu,
    "peft-mc-": _peft_method_comparison,
    "megatron-gpt2xl": _megatron_gpt2xl,
}
