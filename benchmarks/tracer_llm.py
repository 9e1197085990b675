"""Allocator-level references for the LLM formulas: LoRA training, KV-cache forwards, more families.

Runs the CPU tracer of ``shared/calibration/tracer`` (exact ``torch.cuda.max_memory_allocated()`` of
real transformers models on fake CUDA tensors) with two additions the tracer itself does not have:

* ``--lora R:TARGETS``: wraps the model with ``peft.get_peft_model(LoraConfig(r=R, target_modules=...))``
  before the step (PEFT's defaults: fp32 adapters on a 16-bit base, dropout from ``--lora-dropout``);
* ``--peft METHOD[:KEY=VALUE,...]``: the other PEFT methods, ``dora:r=16,targets=q_proj+v_proj``
  (``LoraConfig(use_dora=True)``, dropout from ``--lora-dropout``), ``ia3`` (``IA3Config``, PEFT's
  per-family targets unless ``targets=``/``ff=`` name them), ``prompt_tuning:n=20``
  (``PromptTuningConfig``), ``prefix_tuning:n=20[,projection=1,encoder=H]`` (``PrefixTuningConfig``)
  ``ln_tuning`` (``LNTuningConfig``, PEFT's per-family norms unless ``targets=``), ``vera:r=256``
  (``VeraConfig``), ``loha:r=8`` (``LoHaConfig``, alpha = r) and ``adalora:init=12,target=8``
  (``AdaLoraConfig``, ``total_step=1000``), ``lorafa:r=16,targets=q_proj+v_proj`` (LoRA-FA: a plain
  ``LoraConfig`` as ``--lora``, alpha 2 x r, dropout from ``--lora-dropout``; the step's optimizer is the one of
  ``peft.optimizers.create_lorafa_optimizer``, which freezes every lora_A, in place of the tracer's AdamW;
  needs ``--optimizer adamw``), ``tinylora:r=2,u=64,targets=q_proj+v_proj`` (``TinyLoraConfig``, dropout from
  ``--lora-dropout``), ``boft:block=4,targets=q_proj+v_proj`` (``BOFTConfig``, one butterfly factor: PEFT's
  CUDA extension does not build here; ``blocks=N`` gives ``boft_block_num`` instead; ``host=1`` leaves the
  permutations on the host), ``osf:preserved=448,targets=q_proj+o_proj`` (``OSFConfig(effective_rank=448)``;
  or per target, ``preserved=v_proj/64+gate_proj/448``, a ``rank_pattern``, so that targets of different sizes
  train one rank);
* ``--native-silu``: SiLU's backward as a GPU runs it, one kernel with one output
  (:func:`tracer_bnb.native_silu_backward`; without it a CPU-only build runs the composite form, whose
  ffn-wide intermediates a GPU never allocates);
* ``--cache``: the inference forward runs with ``use_cache=True`` and ``logits_to_keep=1`` (the prefill of
  ``generate``), or with ``--cache-all-logits`` all positions' logits;
* ``--family NAME``: builds that family's ``*ForCausalLM`` (``FAMILIES``: OPT, GPT-NeoX, StarCoder2, GPT-BigCode,
  Falcon, BLOOM, Phi, GPT-J, GPT-2 and the Llama-style ``LLAMA_LIKE``: OLMo, OLMo-2, Gemma 1 to 3, Qwen2, Qwen3,
  Mistral, Phi-3, Llama)
  (``OPTForCausalLM``, ``GPTNeoXForCausalLM``, ...) from the config defaults with the sizes given (``--layers
  --hidden --heads --ffn --vocab``, and ``--kv-heads`` for StarCoder2), in place of ``--arch`` (pass ``--arch gpt2``,
  whose batch it shares: ``input_ids`` and ``labels``), with ``use_cache`` off unless ``--config-cache`` keeps
  the configs' default (on: a training forward then builds its KV cache, as the checkpoints' configs make it);
  ``--set KEY=VALUE`` (repeatable) sets one config field first, e.g. ``--set activation_function=gelu_fast``;
* ``--dump-config FILE``: writes the built model's ``config.json`` (as ``save_pretrained`` would) to FILE.

Another PEFT release runs with its source first on the path (``PYTHONPATH=<peft checkout>/src``); the cases
that did so carry a ``peft`` field, and their workloads pin ``versions.peft``.

Needs the tracer's venv with peft installed (``/tmp/tracer-venv/bin/pip install peft``)::

    /tmp/tracer-venv/bin/python benchmarks/tracer_llm.py --arch llama --layers 2 ... --lora 16:q_proj,v_proj --json

The results used by the tests are stored in ``benchmarks/data/tracer_llm.json`` (with the command line).
"""

from __future__ import annotations

import sys
from pathlib import Path

TRACER = Path(__file__).resolve().parent.parent.parent / "shared" / "calibration" / "tracer"


def _take(argv: list[str], flag: str, has_value: bool) -> tuple[list[str], str | None]:
    if flag not in argv:
        return argv, None
    i = argv.index(flag)
    value = argv[i + 1] if has_value else "1"
    return argv[:i] + argv[i + 1 + (1 if has_value else 0) :], value


def _torchao_absent() -> None:
    """Tell PEFT that torchao is absent: the base is not torchao-quantized, and a PEFT that wants a newer torchao
    than the tracer's venv has (for torchtune's NF4) would refuse to wrap any layer."""
    import importlib

    for name in ("peft.import_utils", "peft.tuners.lora.torchao", "peft.utils.quantization_utils"):
        module = importlib.import_module(name)
        if hasattr(module, "is_torchao_available"):
            module.is_torchao_available = lambda: False


def with_lora(model, lora: str, dropout: float):  # type: ignore[no-untyped-def]
    """``peft.get_peft_model`` with LoRA ``RANK:TARGETS`` (alpha 2 x rank, PEFT's other defaults) on a model
    whose parameters already sit on the fake CUDA device."""
    import torch
    from peft import LoraConfig, get_peft_model
    from peft.tuners import tuners_utils

    _torchao_absent()

    # adapters are created on the fake device already; module.to() cannot swap fake parameters
    tuners_utils.BaseTunerLayer._move_adapter_to_device_of_base_layer = lambda *args, **kw: None
    rank, targets = lora.split(":")
    names = "all-linear" if targets == "all-linear" else targets.split(",")
    config = LoraConfig(r=int(rank), lora_alpha=2 * int(rank), target_modules=names, lora_dropout=dropout)
    to = torch.nn.Module.to
    torch.nn.Module.to = lambda self, *args, **kw: self  # everything already sits on the fake device
    try:
        return get_peft_model(model, config)
    finally:
        torch.nn.Module.to = to


#: Families built from Llama-style config fields: (config class, causal-LM class) in transformers.
LLAMA_LIKE = {
    "olmo": ("OlmoConfig", "OlmoForCausalLM"),  # LayerNorm without weights, run in fp32
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM"),  # RMSNorm after each sublayer and on the whole Q and K
    "gemma": ("GemmaConfig", "GemmaForCausalLM"),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM"),
    "gemma3_text": ("Gemma3TextConfig", "Gemma3ForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"),
    "phi3": ("Phi3Config", "Phi3ForCausalLM"),
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM"),  # --set num_local_experts / num_experts_per_tok
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"),
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM"),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM"),
    "phimoe": ("PhimoeConfig", "PhimoeForCausalLM"),
    "deepseek_v2": ("DeepseekV2Config", "DeepseekV2ForCausalLM"),  # latent attention from --set kv_lora_rank ...
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM"),
    "llama4_text": ("Llama4TextConfig", "Llama4ForCausalLM"),
}
ENCODERS = ("roberta", "xlm-roberta", "distilbert", "deberta-v2")  # masked-LM heads: pass --arch bert
WRAPPERS = ("gemma3", "llava", "qwen2_vl")  # a multimodal model on a text-only batch
FAMILIES = (
    "opt",
    "gpt_neox",
    "starcoder2",
    "gpt_bigcode",
    "falcon",
    "bloom",
    "phi",
    "gptj",
    "gpt2",
    *LLAMA_LIKE,
    *ENCODERS,
)


def family_model(family: str, a, config_cache: bool = False, overrides: dict | None = None):  # type: ignore[no-untyped-def]
    """One of ``FAMILIES`` at the given sizes, every other field at its config default (dropouts included: OPT's
    attention_dropout 0.0 and dropout 0.1, GPT-NeoX's 0.0 and 0.0, GPT-BigCode's and GPT-2's 0.1, the others' 0.0)
    unless ``overrides`` (``--set KEY=VALUE``) replace it, on the fake device."""
    import transformers as T

    if family == "opt":
        cfg = T.OPTConfig(num_hidden_layers=a.layers, hidden_size=a.hidden, word_embed_proj_dim=a.hidden,
                          num_attention_heads=a.heads, ffn_dim=a.ffn, vocab_size=a.vocab,
                          max_position_embeddings=max(2048, a.seq))  # fmt: skip
        cls = T.OPTForCausalLM
    elif family == "gpt_neox":
        cfg = T.GPTNeoXConfig(num_hidden_layers=a.layers, hidden_size=a.hidden, num_attention_heads=a.heads,
                              intermediate_size=a.ffn, vocab_size=a.vocab,
                              max_position_embeddings=max(2048, a.seq))  # fmt: skip
        cls = T.GPTNeoXForCausalLM
    elif family == "starcoder2":  # hidden_act gelu_pytorch_tanh, biases, LayerNorm, GQA from --kv-heads
        cfg = T.Starcoder2Config(num_hidden_layers=a.layers, hidden_size=a.hidden, num_attention_heads=a.heads,
                                 num_key_value_heads=a.kv_heads or a.heads, intermediate_size=a.ffn,
                                 vocab_size=a.vocab, max_position_embeddings=max(4096, a.seq))  # fmt: skip
        cls = T.Starcoder2ForCausalLM
    elif family == "gpt_bigcode":  # activation_function gelu_pytorch_tanh, multi-query attention
        cfg = T.GPTBigCodeConfig(n_layer=a.layers, n_embd=a.hidden, n_head=a.heads, n_inner=a.ffn,
                                 vocab_size=a.vocab, n_positions=max(2048, a.seq))  # fmt: skip
        cls = T.GPTBigCodeForCausalLM
    elif family == "falcon":  # FalconConfig defaults: multi-query, parallel attention
        cfg = T.FalconConfig(num_hidden_layers=a.layers, hidden_size=a.hidden, num_attention_heads=a.heads,
                             ffn_hidden_size=a.ffn, vocab_size=a.vocab,
                             max_position_embeddings=max(2048, a.seq))  # fmt: skip
        cls = T.FalconForCausalLM
    elif family == "bloom":  # ALiBi, ffn 4 x hidden (--ffn not read)
        cfg = T.BloomConfig(n_layer=a.layers, hidden_size=a.hidden, n_head=a.heads, vocab_size=a.vocab)
        cls = T.BloomForCausalLM
    elif family == "phi":  # PhiConfig defaults: partial rotary 0.5, gelu_new, parallel block
        cfg = T.PhiConfig(num_hidden_layers=a.layers, hidden_size=a.hidden, num_attention_heads=a.heads,
                          intermediate_size=a.ffn, vocab_size=a.vocab,
                          max_position_embeddings=max(2048, a.seq))  # fmt: skip
        cls = T.PhiForCausalLM
    elif family == "gptj":  # GPTJConfig defaults: rotary_dim 64, gelu_new, parallel block
        cfg = T.GPTJConfig(n_layer=a.layers, n_embd=a.hidden, n_head=a.heads, n_inner=a.ffn, vocab_size=a.vocab,
                           n_positions=max(2048, a.seq))  # fmt: skip
        cls = T.GPTJForCausalLM
    elif family in LLAMA_LIKE:  # transformers' Llama-style config fields; head_dim = hidden / heads
        config_class, cls = (getattr(T, name) for name in LLAMA_LIKE[family])
        cfg = config_class(num_hidden_layers=a.layers, hidden_size=a.hidden, num_attention_heads=a.heads,
                           num_key_value_heads=a.kv_heads or a.heads, head_dim=a.hidden // a.heads,
                           intermediate_size=a.ffn, vocab_size=a.vocab,
                           max_position_embeddings=max(2048, a.seq))  # fmt: skip
    elif family in ("roberta", "xlm-roberta"):  # with --arch bert (masked-LM batches); positions offset by 2
        cfg = T.RobertaConfig(num_hidden_layers=a.layers, hidden_size=a.hidden, num_attention_heads=a.heads,
                              intermediate_size=a.ffn, vocab_size=a.vocab,
                              max_position_embeddings=max(514, a.seq + 2))  # fmt: skip
        cls = T.RobertaForMaskedLM if family == "roberta" else T.XLMRobertaForMaskedLM
    elif family == "distilbert":  # with --arch bert
        cfg = T.DistilBertConfig(n_layers=a.layers, dim=a.hidden, n_heads=a.heads, hidden_dim=a.ffn,
                                 vocab_size=a.vocab, max_position_embeddings=max(512, a.seq))  # fmt: skip
        cls = T.DistilBertForMaskedLM
    elif family == "deberta-v2":  # with --arch bert; DeBERTa-v3's layout comes from --set (relative_attention ...)
        cfg = T.DebertaV2Config(num_hidden_layers=a.layers, hidden_size=a.hidden, num_attention_heads=a.heads,
                                intermediate_size=a.ffn, vocab_size=a.vocab,
                                max_position_embeddings=max(512, a.seq))  # fmt: skip
        cls = T.DebertaV2ForMaskedLM
    elif family == "gemma3":  # the multimodal wrapper on a text-only batch: Gemma-3 text sizes, a small SigLIP tower
        text = T.Gemma3TextConfig(num_hidden_layers=a.layers, hidden_size=a.hidden, num_attention_heads=a.heads,
                                  num_key_value_heads=a.kv_heads or a.heads, head_dim=a.hidden // a.heads,
                                  intermediate_size=a.ffn, vocab_size=a.vocab,
                                  max_position_embeddings=max(2048, a.seq))  # fmt: skip
        vision = T.SiglipVisionConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                      num_attention_heads=2, image_size=112, patch_size=14)  # fmt: skip
        cfg = T.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=16,
                             image_token_index=a.vocab - 1)  # fmt: skip
        cls = T.Gemma3ForConditionalGeneration
    elif family == "llava":  # LLaVA on a text-only batch: a Llama of the given sizes, a small CLIP tower
        text = T.LlamaConfig(num_hidden_layers=a.layers, hidden_size=a.hidden, num_attention_heads=a.heads,
                             num_key_value_heads=a.kv_heads or a.heads, intermediate_size=a.ffn, vocab_size=a.vocab,
                             max_position_embeddings=max(2048, a.seq))  # fmt: skip
        vision = T.CLIPVisionConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                    num_attention_heads=2, image_size=112, patch_size=14)  # fmt: skip
        cfg = T.LlavaConfig(text_config=text, vision_config=vision, image_token_index=a.vocab - 1)
        cls = T.LlavaForConditionalGeneration
    elif family == "qwen2_vl":  # Qwen2-VL on a text-only batch: a Qwen2 text model of the given sizes, a small tower
        text = T.Qwen2VLTextConfig(num_hidden_layers=a.layers, hidden_size=a.hidden, num_attention_heads=a.heads,
                                   num_key_value_heads=a.kv_heads or a.heads, intermediate_size=a.ffn,
                                   vocab_size=a.vocab, max_position_embeddings=max(2048, a.seq),
                                   rope_parameters={"rope_type": "default", "mrope_section": [8, 12, 12],
                                                    "rope_theta": 10000.0})  # fmt: skip
        vision = T.Qwen2VLVisionConfig(depth=2, embed_dim=128, hidden_size=a.hidden, num_heads=2, mlp_ratio=2)
        cfg = T.Qwen2VLConfig(text_config=text.to_dict(), vision_config=vision.to_dict(),
                              image_token_id=a.vocab - 1, video_token_id=a.vocab - 2)  # fmt: skip
        cls = T.Qwen2VLForConditionalGeneration
    elif family == "gpt2":  # GPT2Config defaults (gelu_new, dropouts 0.1); --set changes e.g. activation_function
        cfg = T.GPT2Config(n_layer=a.layers, n_embd=a.hidden, n_head=a.heads, n_inner=a.ffn, vocab_size=a.vocab,
                           n_positions=max(1024, a.seq))  # fmt: skip
        cls = T.GPT2LMHeadModel
    else:
        raise SystemExit(f"--family: one of {', '.join(FAMILIES)}; not {family!r}")
    for key, value in (overrides or {}).items():
        setattr(cfg, key, value)
    cfg.use_cache = config_cache
    cfg._attn_implementation = a.attn
    return cls(cfg), f"{cls.__name__}({type(cfg).__name__} defaults, {a.layers} layers, hidden {a.hidden})"


def peft_config(spec: str, dropout: float):  # type: ignore[no-untyped-def]
    """The PEFT config of ``--peft METHOD[:KEY=VALUE,...]`` (list values joined with ``+``)."""
    import peft

    method, _, rest = spec.partition(":")
    kw = dict(item.split("=") for item in rest.split(",") if item)
    names = kw.get("targets", "").split("+") if kw.get("targets") else None
    if names == ["all-linear"]:
        names = "all-linear"
    task = peft.TaskType.CAUSAL_LM
    if method == "dora":
        rank = int(kw.get("r", "16"))
        return peft.LoraConfig(
            r=rank, lora_alpha=2 * rank, target_modules=names, lora_dropout=dropout, use_dora=True, task_type=task
        )
    if method == "ia3":
        ff = kw["ff"].split("+") if kw.get("ff") else None
        return peft.IA3Config(target_modules=names, feedforward_modules=ff, task_type=task)
    if method == "prompt_tuning":
        return peft.PromptTuningConfig(num_virtual_tokens=int(kw.get("n", "20")), task_type=task)
    if method == "prefix_tuning":
        projection = kw.get("projection", "0") == "1"
        hidden = int(kw["encoder"]) if "encoder" in kw else None
        return peft.PrefixTuningConfig(
            num_virtual_tokens=int(kw.get("n", "20")),
            prefix_projection=projection,
            encoder_hidden_size=hidden,
            task_type=task,
        )
    if method == "ln_tuning":
        return peft.LNTuningConfig(target_modules=names, task_type=task)
    if method == "vera":
        return peft.VeraConfig(r=int(kw.get("r", "256")), target_modules=names, vera_dropout=dropout, task_type=task)
    if method == "loha":
        rank = int(kw.get("r", "8"))
        return peft.LoHaConfig(r=rank, alpha=rank, target_modules=names, task_type=task)
    if method == "lorafa":  # a plain LoRA (as --lora); the LoRA-FA part is the optimizer, see lorafa_optimizer
        rank = int(kw.get("r", "16"))
        return peft.LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=names, lora_dropout=dropout)
    if method == "adalora":
        init, target = int(kw.get("init", "12")), int(kw.get("target", "8"))
        return peft.AdaLoraConfig(
            init_r=init, target_r=target, total_step=1000, target_modules=names, lora_dropout=dropout, task_type=task
        )
    if method == "osf":  # preserved: the preserved (frozen) rank, one for all targets or per target (NAME/K+...)
        preserved = kw["preserved"]
        if "/" not in preserved:
            return peft.OSFConfig(effective_rank=int(preserved), target_modules=names, task_type=task)
        pattern = {name: int(k) for name, k in (item.split("/") for item in preserved.split("+"))}
        return peft.OSFConfig(rank_pattern=pattern, target_modules=names, task_type=task)
    if method == "tinylora":
        rank, u = int(kw.get("r", "2")), int(kw.get("u", "64"))
        return peft.TinyLoraConfig(r=rank, u=u, target_modules=names, tinylora_dropout=dropout, task_type=task)
    if method == "boft":  # block: boft_block_size (block_num 0), or blocks: boft_block_num (block_size 0)
        size, number = int(kw.get("block", "0" if "blocks" in kw else "4")), int(kw.get("blocks", "0"))
        return peft.BOFTConfig(
            boft_block_size=size, boft_block_num=number, target_modules=names, boft_dropout=dropout, task_type=task
        )
    raise SystemExit(f"error: --peft: unknown method {method!r}")


def _copy_module(layer):  # type: ignore[no-untyped-def]
    """``copy.deepcopy`` of a module whose tensors stay in the running fake mode (LN tuning's copy of a norm)."""
    import copy

    import torch

    new = copy.copy(layer)
    new._parameters = {
        k: None if p is None else torch.nn.Parameter(p.detach().clone(), p.requires_grad)
        for k, p in layer._parameters.items()
    }
    new._buffers = {k: None if b is None else b.clone() for k, b in layer._buffers.items()}
    new._modules = {k: None if m is None else _copy_module(m) for k, m in layer._modules.items()}
    return new


class _NoModuleDropout:
    """``torch`` for LoHa's layer, whose ``torch.rand(1) > module_dropout`` (a data-dependent branch the fake
    tensors cannot take) is always true at the default ``module_dropout=0``."""

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        import torch

        return getattr(torch, name)

    @staticmethod
    def rand(*args, **kw) -> float:  # type: ignore[no-untyped-def]
        return 1.0


def _permutation_matrix(self, indices):  # type: ignore[no-untyped-def]
    """BOFT's ``perm2mat`` without its element-wise writes (data-dependent for fake tensors): the same
    ``n x n`` fp32 matrix, its values unset; with one butterfly factor PEFT's permutation is the identity."""
    import torch

    return torch.zeros((len(indices), len(indices)))


def with_peft(model, spec: str, dropout: float):  # type: ignore[no-untyped-def]
    """``peft.get_peft_model`` with the config of ``--peft`` on a model on the fake CUDA device."""
    import torch
    from peft import get_peft_model
    from peft.tuners import tuners_utils
    from peft.tuners.boft import layer as boft_layer
    from peft.tuners.ln_tuning import layer as ln_layer
    from peft.tuners.loha import layer as loha_layer

    ln_layer.deepcopy = _copy_module  # type: ignore[attr-defined]
    loha_layer.torch = _NoModuleDropout()  # type: ignore[attr-defined]
    boft_layer.BOFTLayer.perm2mat = _permutation_matrix  # type: ignore[attr-defined]

    tuners_utils.BaseTunerLayer._move_adapter_to_device_of_base_layer = lambda *args, **kw: None
    config = peft_config(spec, dropout)
    to, default = torch.nn.Module.to, torch.get_default_dtype()
    torch.nn.Module.to = lambda self, *args, **kw: self
    # a model loaded with from_pretrained(torch_dtype=...) leaves torch's default dtype at fp32: the prompt and
    # prefix encoders PEFT creates (and does not cast) are fp32
    torch.set_default_dtype(torch.float32)
    try:
        wrapped = get_peft_model(model, config)
    finally:
        torch.nn.Module.to = to
        torch.set_default_dtype(default)
    if "host=1" in spec:  # BOFT's permutations left on the host (a model loaded onto the GPU, never moved)
        for module in wrapped.modules():
            if isinstance(getattr(module, "boft_P", None), torch.Tensor):
                module.boft_P = torch.empty(module.boft_P.shape, device="cpu")
    return wrapped


def lorafa_optimizer(model, spec: str):  # type: ignore[no-untyped-def]
    """``peft.optimizers.create_lorafa_optimizer(model, r, lora_alpha=2 x r, lr)`` for ``--peft lorafa:...``:
    freezes every lora_A (``requires_grad_(False)``, before the tracer hooks the gradients) and returns PEFT's
    ``LoraFAOptimizer`` (AdamW-hf on lora_B only: ``exp_avg_B``/``exp_avg_sq_B``, gradient projected with
    ``(A A^T + 1e-8 I)^+`` under ``autocast(bf16)``). lr and weight decay as the tracer's AdamW (1e-4, 0.01;
    the decay is an in-place ``add_``, no memory).

    Two answers of the CPU-only build are replaced by what a CUDA machine gives, nothing else:
    ``infer_device()`` says "cpu" here (``torch.cuda.is_available()`` is False), and the step's
    ``autocast(device_type="cpu")`` would then leave the fake CUDA matmul ``grad_B @ AA_T_inv`` in fp32
    (no bf16 casts, no fp32 copy back); on a GPU it is "cuda". ``is_bf16_available()`` is what an sm80+ GPU
    answers (True; the CPU build's fall-through answers True too). ``torch.eye(r)`` (a CPU tensor, moved with
    ``.to(A.device)``) and ``torch.linalg.pinv`` run unchanged on the fake tensors: pinv is one
    CompositeExplicit op to the tracer's dispatch mode (its r x r fp32 output is counted; the SVD's
    r x r / r-sized intermediates and cuSOLVER's workspace inside it are not, a few KiB at most).
    """
    from peft.optimizers import create_lorafa_optimizer, lorafa

    lorafa.infer_device = lambda: "cuda"  # type: ignore[attr-defined]
    lorafa.is_bf16_available = lambda *args, **kw: True  # type: ignore[attr-defined]
    kw = dict(item.split("=") for item in spec.partition(":")[2].split(",") if item)
    rank = int(kw.get("r", "16"))
    return create_lorafa_optimizer(model, r=rank, lora_alpha=2 * rank, lr=1e-4, weight_decay=0.01)


def _config_value(text: str) -> object:
    """``--set`` values: a JSON literal (``0``, ``0.1``, ``null``, ``true``), else the string itself."""
    import json

    try:
        return json.loads(text)
    except ValueError:
        return text


def main(argv: list[str]) -> None:
    argv, lora = _take(argv, "--lora", True)
    argv, method = _take(argv, "--peft", True)
    argv, dropout = _take(argv, "--lora-dropout", True)
    argv, cache = _take(argv, "--cache", False)
    argv, all_logits = _take(argv, "--cache-all-logits", False)
    argv, family = _take(argv, "--family", True)
    argv, config_cache = _take(argv, "--config-cache", False)
    overrides: dict[str, object] = {}
    while "--set" in argv:
        argv, assignment = _take(argv, "--set", True)
        key, _, value = (assignment or "").partition("=")
        overrides[key] = _config_value(value)
    argv, native_silu = _take(argv, "--native-silu", False)
    argv, dump_config = _take(argv, "--dump-config", True)
    sys.path.insert(0, str(TRACER))
    import fakecuda  # type: ignore[import-not-found]

    fakecuda.enable()  # before torch is imported (idempotent: groundtruth.run calls it again)
    import torch

    # transformers' grouped-GEMM experts ask the card's compute capability: the modelled H100's
    torch.cuda.get_device_capability = lambda *args, **kw: (9, 0)
    import groundtruth  # type: ignore[import-not-found]
    import models  # type: ignore[import-not-found]

    original = models.build
    built: dict[str, object] = {}

    def build(arch, a, dtype):  # type: ignore[no-untyped-def]
        model, make_batch, desc = original(arch, a, dtype)
        if family:
            model, desc = family_model(family, a, bool(config_cache), overrides)
        if lora:
            model = with_lora(model, lora, float(dropout or 0.0))
            desc += f" + LoRA r={lora.replace(':', ' ')}"
        if method:
            model = with_peft(model, method, float(dropout or 0.0))
            desc += f" + PEFT {method}"
        built["model"] = model
        if dump_config:  # as save_pretrained writes it: with the model's class in architectures
            config = model.get_base_model().config if hasattr(model, "get_base_model") else model.config
            config.architectures = [
                type(model.get_base_model() if hasattr(model, "get_base_model") else model).__name__
            ]
            Path(dump_config).write_text(config.to_json_string(), encoding="utf-8")
        if native_silu:
            from tracer_bnb import native_silu_backward

            native_silu_backward(model)
        if cache or all_logits:
            model.config.use_cache = True

            def batch(train):  # type: ignore[no-untyped-def]
                out = make_batch(train)
                out["use_cache"] = True
                if not all_logits:
                    out["logits_to_keep"] = 1
                return out

            return model, batch, desc + " + KV cache"
        return model, make_batch, desc

    models.build = build
    if method and method.partition(":")[0] == "lorafa":
        default_optimizer = groundtruth._make_optimizer

        def make_optimizer(a, params):  # type: ignore[no-untyped-def]
            if a.optimizer == "none":
                return default_optimizer(a, params)
            if a.optimizer != "adamw":
                raise SystemExit("error: --peft lorafa: LoRA-FA is an AdamW variant, pass --optimizer adamw")
            return lorafa_optimizer(built["model"], method)  # params = built["model"].parameters()

        groundtruth._make_optimizer = make_optimizer
    groundtruth.main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
