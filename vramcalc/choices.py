"""Closed choices of spec keys and CLI flags (plain Enums: cheap to import at CLI start-up)."""

from __future__ import annotations

from enum import StrEnum


class Architecture(StrEnum):
    encoder = "encoder"
    decoder = "decoder"
    encoder_decoder = "encoder-decoder"
    vit = "vit"
    resnet = "resnet"


class Mlp(StrEnum):
    gelu = "gelu"
    gelu_tanh = "gelu_tanh"
    relu = "relu"
    swiglu = "swiglu"
    geglu = "geglu"


class Norm(StrEnum):
    layernorm = "layernorm"
    rmsnorm = "rmsnorm"


class Position(StrEnum):
    learned = "learned"
    rotary = "rotary"
    relative = "relative"
    none = "none"


class Head(StrEnum):
    lm = "lm"
    classification = "classification"
    none = "none"
    token_classification = "token_classification"
    question_answering = "question_answering"
    pretraining = "pretraining"


class QkNorm(StrEnum):
    """Norms on the queries and keys: none, one with weights of head_dim per projection, one over its whole
    width, or Llama 4's L2 norm of each head, without weights."""

    none = "none"
    head = "head"
    projection = "projection"
    l2 = "l2"


class Mode(StrEnum):
    train = "train"
    inference = "inference"


class Precision(StrEnum):
    fp32 = "fp32"
    fp16 = "fp16"
    bf16 = "bf16"
    amp_fp16 = "amp-fp16"
    amp_bf16 = "amp-bf16"
    # 16-bit parameters and activations with fp32 master weights and optimizer states (DeepSpeed fp16/bf16,
    # Megatron-LM, FSDP MixedPrecision); estimated per rank by vramcalc/parallel/layout.py.
    mixed_fp16 = "mixed-fp16"
    mixed_bf16 = "mixed-bf16"


class Optimizer(StrEnum):
    none = "none"
    sgd = "sgd"
    sgd_momentum = "sgd-momentum"
    adam = "adam"
    adamw = "adamw"
    adamw_8bit = "adamw-8bit"
    paged_adamw_8bit = "paged-adamw-8bit"
    paged_adamw_32bit = "paged-adamw-32bit"
    adafactor = "adafactor"
    lion = "lion"


class PagedStates(StrEnum):
    """Whether a paged optimizer's states (CUDA managed memory) may be evicted to the host: ``host-ok`` leaves
    them out of the fit verdict, ``device`` counts them (the step must run without paging)."""

    host_ok = "host-ok"
    device = "device"


class OptimizerImpl(StrEnum):
    foreach = "foreach"
    fused = "fused"
    forloop = "forloop"


class Checkpointing(StrEnum):
    none = "none"
    full = "full"
    selective = "selective"
    selective_op = "selective-op"  # torchtitan's op-level selective activation checkpointing (vramcalc/stacks/sac.py)


class Attention(StrEnum):
    eager = "eager"
    sdpa = "sdpa"
    flash = "flash"  # transformers' attn_implementation="flash_attention_2" (vramcalc/stacks/flash_attn.py)


class Runtime(StrEnum):
    """Inference runtime whose allocation pattern a generation estimate follows (see vramcalc/llm/generation.py)."""

    vllm = "vllm"
    hf = "hf"
    hf_legacy = "hf-legacy"
    llama_cpp = "llama.cpp"  # GGUF files: KV cache and compute buffer of vramcalc/stacks/llamacpp.py
    litgpt = "litgpt"  # litgpt's generate: the whole context's KV cache set up front (vramcalc/llm/generation.py)
    gpt_fast = "gpt-fast"  # gpt-fast's (and torchao's) generate: a static cache and a causal mask (stacks/gpt_fast.py)
    torchtune = "torchtune"  # torchtune's generate: caches for max_seq_len, fp32 logits kept (stacks/torchtune.py)


class KvCache(StrEnum):
    """How transformers' ``generate`` holds the KV cache (``cache_implementation``; vramcalc/stacks/transformers.py):
    ``dynamic`` grows with the tokens generated, ``static`` is allocated for ``max_cache_len`` tokens up front."""

    dynamic = "dynamic"
    static = "static"


class KvCacheDtype(StrEnum):
    auto = "auto"
    fp32 = "fp32"
    fp16 = "fp16"
    bf16 = "bf16"
    fp8 = "fp8"
    int8 = "int8"


class QuantMethod(StrEnum):
    """Weight quantization methods (layouts in vramcalc/llm/quantization.py)."""

    int8 = "int8"
    int4 = "int4"
    int8_weight_only = "int8_weight_only"  # torchao Int8WeightOnlyConfig
    int8_dynamic_activation_int8_weight = "int8_dynamic_activation_int8_weight"  # torchao Int8DynamicActivation...
    gptq = "gptq"
    awq = "awq"
    nf4 = "nf4"
    fp4 = "fp4"
    fp8 = "fp8"
    q4_0 = "q4_0"
    q4_1 = "q4_1"
    q5_0 = "q5_0"
    q5_1 = "q5_1"
    q8_0 = "q8_0"
    q2_k = "q2_k"
    q3_k_s = "q3_k_s"
    q3_k_m = "q3_k_m"
    q3_k_l = "q3_k_l"
    q4_k_s = "q4_k_s"
    q4_k_m = "q4_k_m"
    q5_k_s = "q5_k_s"
    q5_k_m = "q5_k_m"
    q6_k = "q6_k"


#: torchao's int8 configurations, as transformers' ``TorchAoConfig`` names them (vramcalc/llm/quantization.py).
TORCHAO_INT8 = (QuantMethod.int8_weight_only, QuantMethod.int8_dynamic_activation_int8_weight)


class AdapterType(StrEnum):
    """PEFT methods modelled (vramcalc/llm/adapters.py: LoRA; vramcalc/stacks/peft_methods.py: the others)."""

    lora = "lora"
    dora = "dora"  # LoRA + a trained magnitude vector (PEFT LoraConfig(use_dora=True))
    lora_fa = "lora_fa"  # LoRA with lora_A frozen at its initialisation, lora_B trained (PEFT create_lorafa_optimizer)
    ia3 = "ia3"  # learned vectors scaling k, v and the MLP's down_proj input (PEFT IA3Config)
    prompt_tuning = "prompt_tuning"  # trained virtual input tokens (PEFT PromptTuningConfig)
    prefix_tuning = "prefix_tuning"  # trained key/value prefixes of every layer (PEFT PrefixTuningConfig)
    ln_tuning = "ln_tuning"  # only the norms train (PEFT LNTuningConfig)
    vera = "vera"  # shared frozen random projections, trained scaling vectors (PEFT VeraConfig)
    loha = "loha"  # Hadamard product of two low-rank products as the delta weight (PEFT LoHaConfig)
    adalora = "adalora"  # LoRA in SVD form whose rank is pruned during training (PEFT AdaLoraConfig)
    tinylora = "tinylora"  # a trained vector through frozen SVD factors of the weight (PEFT TinyLoraConfig)
    osf = "osf"  # the low singular subspace of each weight trained, the high one kept (PEFT OSFConfig)
    boft = "boft"  # each input rotated by a trained block-diagonal orthogonal matrix (PEFT BOFTConfig)


class CrossEntropy(StrEnum):
    """How the LM loss handles the vocabulary-sized logits (vramcalc/stacks/techniques.py)."""

    standard = "standard"  # Hugging Face: all logits, their fp32 upcast and the log-softmax at once
    chunked = "chunked"  # torchtune CEWithChunkedOutputLoss (8 output chunks)
    fused_linear = "fused_linear"  # Liger LigerFusedLinearCrossEntropyLoss (logits one token chunk at a time)
    none = "none"  # no loss: the step backpropagates from the logits (e.g. logits.sum().backward())
