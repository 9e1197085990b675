r"""What older transformers releases allocated, per model family (``workload.versions.transformers``).

The formulas of :mod:`vramcalc.core.activations` and :mod:`vramcalc.llm.generation` follow today's
release (5.x). A spec that pins an older release gets the allocations that release made, read from its
source (``transformers/models/<family>/modeling_<family>.py`` and ``transformers/generation/utils.py``
of the released wheels):

* **OPT eager attention, before 4.49.0** (``OPTAttention.forward`` up to 4.48): the causal mask is added
  (``attn_weights + attention_mask``), the sum clamped with ``torch.max(attn_weights,
  torch.tensor(torch.finfo(dtype).min))`` (``maximum`` saves both inputs: the score-sized sum at the score
  dtype), then ``softmax(dtype=torch.float32).to(torch.float16)`` when the scores are fp16 (the fp32
  output is saved), ``dropout(p=config.attention_dropout)`` (0.0 in every OPT checkpoint: PyTorch returns
  its input for p == 0, no mask, no copy), and ``bmm`` saves the 16-bit probabilities. 4.49.0 dropped
  the clamp; from 4.52 OPT uses the shared ``eager_attention_forward`` (fp32 softmax for every dtype).
* **Causal-mask buffers**: GPT-2, GPT-Neo, GPT-J and GPT-NeoX attention layers registered a
  non-persistent bool buffer ``bias`` of ``max_positions x max_positions`` (``torch.tril(torch.ones(...,
  dtype=torch.bool))``) in every layer, allocated with the model. GPT-J dropped it in 4.45.0, GPT-NeoX in
  4.49.0; GPT-2 and GPT-Neo still register it in 5.0.0 (the newest release checked), so a pinned
  release of theirs always counts it.
* **Generation logits** (``runtime: hf`` / ``hf-legacy``): until 4.44 ``generate`` ran the prompt forward
  over every position (``num_logits_to_keep`` arrived in 4.45, and only for models whose ``forward``
  takes it: the Llama-derived classes then, GPT-NeoX from 4.49, GPT-2 from 4.53, OPT from 5.0), so the
  prefill returned logits for every prompt position. Llama-derived ``ForCausalLM`` classes upcast them in ``forward``
  (``logits = logits.float()``, until 4.46); GPT-NeoX, OPT and GPT-2 return them at the model dtype.
  ``_sample`` then took the last position: a view (up to 4.41) or ``[:, -1, :].clone()`` (4.42-4.44),
  small; 4.45 and 4.46 wrote ``outputs.logits.clone()[:, -1, :].float()``: a full copy of the prompt's
  logits, alive next to them; 4.47 went back to ``[:, -1, :].clone().float()``. Up to 4.41 ``_sample``
  kept each step's ``outputs`` until the next forward had returned (``del outputs`` from 4.42).
* **Masked-LM generation**: before 4.50 a class that overrides ``prepare_inputs_for_generation``, as
  ``BertForMaskedLM`` does (it appends a pad position to predict), can ``generate``; 4.50 stopped
  ``PreTrainedModel`` inheriting ``GenerationMixin``.

* **KV cache returned while training** (``workload.keep_outputs``): decoder LMs return ``past_key_values``
  whenever ``use_cache`` is on (the configs' default) and gradient checkpointing is off. Up to 4.55 the
  cache holds the attention's own K/V tensors (a tuple, or ``DynamicCache`` appending them as they are):
  views of a fused QKV projection keep its whole output; GPT-NeoX before 4.49 applied its rotary embedding
  with fp32 ``cos``/``sin`` tables, so its cached key is an fp32 tensor. From 4.56 ``DynamicLayer``
  initialises an empty tensor and concatenates onto it (``torch.cat``): the cache is a copy, and the
  attention reads K and V back from it (the copies are what it saves).

* **Head-major queries under SDPA**: the shared ``sdpa_attention_forward`` of 4.48-4.55 called
  ``query.contiguous()`` (and on K, V) on the ``(batch, heads, seq, head_dim)`` view; OPT's own SDPA class
  (``_shape(...).contiguous()``) and GPT-NeoX's (the fp32 rotary ``torch.cat``, then ``.to(dtype)``) made
  the same layout before. PyTorch's flash kernel writes its output in the query's layout, so the output,
  saved for backward, is head-major, and ``transpose(1, 2).contiguous()`` before the output projection
  copies it: one more query-sized tensor per layer. (The memory-efficient kernel always writes
  ``(batch, seq, heads, head_dim)``; from 4.56 the query reaches the kernel as a view and nothing is copied.)

* **Static cache** (``workload.cache: static``, ``generate(..., cache_implementation="static")``, what
  ``torch.compile``d generation uses; today's release, cache_utils.py and generation/utils.py): ``StaticCache``
  gives each full-attention layer a ``StaticLayer`` whose ``lazy_initialization`` allocates K and V of
  ``(batch, kv_heads, max_cache_len, head_dim)`` with ``torch.zeros`` at the keys' dtype on the layer's first
  ``update`` (in the prefill), then writes into them in place (``index_copy_``) and hands the attention the
  whole tensors; a sliding-window layer (``StaticSlidingWindowLayer``) gets ``min(sliding_window,
  max_cache_len)``. ``generate`` sizes it ``max_length - 1`` (the prompt and the new tokens but the last,
  which is never fed back), or ``generation_config.max_cache_len`` when that is larger
  (``_prepare_cache_for_generation``). The masks (masking_utils.py): the prefill's is skipped
  (``_ignore_causal_mask_sdpa``: an empty cache whose padding is only the cache's future positions, so SDPA
  runs ``is_causal`` with the grouped K/V, ``enable_gqa``); each decode step builds a boolean ``(batch, 1, 1,
  max_cache_len)`` mask (``sdpa_mask``), with which ``use_gqa_in_sdpa`` is false, and ``sdpa_attention_forward``
  packs the single query's heads by KV head (``pack_gqa``, integrations/sdpa_attention.py, from 5.23): K and V
  are not expanded (5.22 and earlier expanded them with ``repeat_kv`` over the whole cache). Traced:
  ``benchmarks/tracer_generate_eager.py``.
  With ``workload.compile: true`` (the "static cache and torch.compile" recipe: ``model.forward`` compiled, so
  ``_prefill``'s ``self(...)`` and every decode step run it) the forward is one inductor graph: the cache's
  position is a traced tensor, so ``_ignore_causal_mask_sdpa`` does not skip the prefill's mask, whose boolean
  form is fused into each layer's float one, and ``sdpa_attention_forward`` expands K and V with ``repeat_kv`` in
  the prefill too (``pack_gqa`` is skipped while compiling): ``StaticCache.compiled``
  (:mod:`vramcalc.stacks.inductor`, ``vramcalc.core.compiled.compiled_static_step_bytes``).

Release numbers compare as (major, minor, patch); a ``.dev0`` suffix is ignored (a development tree is
taken as the release it became).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from vramcalc.choices import (
    Architecture,
    Attention,
    Checkpointing,
    KvCache,
    KvCacheDtype,
    Mode,
    Norm,
    Position,
    Precision,
    Runtime,
)
from vramcalc.core.code import ModelCode
from vramcalc.core.shape import ModelShape
from vramcalc.errors import SpecError
from vramcalc.spec.models import ModelSpec, Spec, Workload, is_generation, runs_llamacpp
from vramcalc.spec.versions import release_key
from vramcalc.stacks import torch as torch_stack
from vramcalc.units import allocation_bytes

if TYPE_CHECKING:
    from vramcalc.llm.generation import StaticCache

#: The transformers release the formulas follow when ``versions: {transformers: ...}`` is not given.
DEFAULT_VERSION = "5.24.0"
#: First release without OPT's ``torch.max`` clamp of the masked scores.
OPT_CLAMP_REMOVED = (4, 49, 0)
#: First release without the per-layer bool causal-mask buffer ``bias``, per model_type.
#: (None: still there in 5.0.0, the newest release checked).
CAUSAL_MASK_REMOVED: dict[str, tuple[int, int, int] | None] = {
    "gptj": (4, 45, 0),
    "gpt_neox": (4, 49, 0),
    "gpt2": None,
    "gpt_neo": None,
}
#: Families whose model holds one bool causal-mask buffer of ``max_position_embeddings`` squared (not one per
#: layer), in every release read (4.48, 5.25: ``GPTBigCodeModel.__init__``, ``self.bias = nn.Buffer(torch.tril(
#: torch.ones((max_positions, max_positions), dtype=torch.bool)), persistent=False)``), and its config default.
MODEL_MASK_DEFAULT_POSITIONS = {"gpt_bigcode": 1024}  # GPTBigCodeConfig n_positions
#: LayerNorm families whose eager attention runs its softmax in fp32 and casts it back (their
#: ``eager_attention_forward``, read at 5.25: ``softmax(attn_weights, dim=-1, dtype=torch.float32).to(...)``;
#: BLOOM's own attention the same), today's release: traced, ``benchmarks/data/tracer_families.json``. (RMSNorm
#: families are told apart by their norm.) Pinned releases keep their own facts.
FP32_SOFTMAX_FAMILIES = ("starcoder2", "gpt_bigcode", "falcon", "bloom", "phimoe", "olmo")
#: RMSNorm families whose norm multiplies its weight into the fp32 normalised tensor before casting back (Gemma's
#: ``output * (1.0 + self.weight.float())``, OLMo-2's ``(self.weight * hidden_states).to(input_dtype)``, read at
#: 5.25, and in every release from 4.42; Llama casts first), so the product saves the fp32 tensor
#: (:attr:`ModelCode.rmsnorm_normed_fp32`): traced.
RMSNORM_WEIGHT_FP32_FAMILIES = ("gemma", "gemma2", "gemma3_text", "olmo2")
#: LayerNorm families whose norm casts its input to fp32 and its output back (OLMo's weightless ``OlmoLayerNorm``,
#: read at 5.25: ``F.layer_norm(hidden_states.to(dtype=torch.float32), ...).to(orig_dtype)``), so the norm saves
#: the fp32 copy (:attr:`ModelCode.layernorm_fp32`): traced.
LAYERNORM_FP32_FAMILIES = ("olmo",)
#: Families whose MoE router runs in fp32 (``F.linear(hidden_states.type(torch.float32),
#: self.weight.type(torch.float32))``, read at 5.25: DeepSeek-V2's and V3's gates): traced.
ROUTER_FP32_FAMILIES = ("deepseek_v2", "deepseek_v3")
#: Families whose MoE layer runs every expert on every token (``Llama4TextMoe``, read at 5.25: ``routed_in =
#: hidden_states.repeat(router_scores.shape[1], 1)``, then ``torch.bmm`` over all experts): traced.
ALL_TOKEN_EXPERT_FAMILIES = ("llama4_text",)
#: Families whose MoE layer runs its shared experts after the routed ones (read at 5.25: ``Llama4TextMoe``,
#: ``DeepseekV2Moe``, ``DeepseekV3MoE``; Qwen2-MoE runs its shared expert first): traced.
SHARED_EXPERTS_LAST_FAMILIES = ("llama4_text", "deepseek_v2", "deepseek_v3")
#: Families whose decoder layer keeps the attention's output in a variable of its own until it returns
#: (``Llama4TextDecoderLayer``: ``attention_states``, read at 5.25): traced.
ATTENTION_OUTPUT_HELD_FAMILIES = ("llama4_text",)
#: Families whose partial rotary embedding concatenates the rotated and the passed-through dimensions
#: (``torch.cat``: Phi's ``apply_rotary_pos_emb``, read at 4.42 and 5.25; Phi-3's from 4.49, read at 4.48, 4.49 and
#: 5.25), so the query reaches SDPA head-major and the flash kernel's output is copied before the output projection
#: (:attr:`ModelCode.head_major_query`), from the release given: traced.
HEAD_MAJOR_QUERY_FAMILIES = {"phi": (4, 42, 0), "phi3": (4, 49, 0)}
#: Families whose model materialises its causal mask for every attention call (``create_causal_mask(...,
#: allow_is_causal_skip=False)``: Falcon's, read at 5.25, for ALiBi's sake), so SDPA gets a boolean mask that it
#: converts and its memory-efficient kernel saves (:attr:`ModelCode.sdpa_mask_saved`), today's release: traced.
MASKED_SDPA_FAMILIES = ("falcon",)
#: Families whose eager attention multiplies fp32 copies of Q and K (:attr:`ModelCode.eager_qk_fp32`), read at
#: 4.48 and 5.25: GPT-J's ``_attn``.
QK_FP32_FAMILIES = ("gptj",)
#: Families whose MLP activation's backward holds more ffn-wide tensors than a kernel's, and how many beyond what
#: the block saved (:attr:`ModelCode.mlp_backward_ffn_tensors`), in every release read (4.48, 5.25): BLOOM's
#: ``GeLUFunction`` runs ``bloom_gelu_back``, whose Python chain holds the incoming gradient, ``tanh_out``,
#: ``0.5 * x`` and three links of ``ff`` at its widest (six ffn-wide tensors, traced), when the activation output
#: the down projection saved is freed: five more.
MLP_BACKWARD_FFN_TENSORS = {"bloom": 5}
#: Families whose transformers classes have no SDPA path: their name, and the first release without one (None:
#: none ever had one). Asked for ``attn_implementation="sdpa"`` they raise; asked for nothing they run eager
#: attention. ``BloomForCausalLM`` and the DeBERTa-v2 classes: ``_supports_sdpa`` unset (read at 4.42, 4.48 and 5.25).
#: Gemma 2: ``_supports_sdpa =
#: False  # sdpa does not support softcapping`` from 5.21 (read at 5.20, 5.21, 5.25).
NO_SDPA_FAMILIES: dict[str, tuple[str, tuple[int, int, int] | None]] = {
    "bloom": ("BLOOM", None),
    "gemma2": ("Gemma 2", (5, 21, 0)),
    "deberta-v2": ("DeBERTa-v2", None),
}


def _no_sdpa(model_type: str, workload: Workload) -> str | None:
    """The family's name where transformers' classes of the release the workload runs have no SDPA path."""
    family, since = NO_SDPA_FAMILIES.get(model_type, (None, None))
    given = (workload.versions or {}).get("transformers")
    if family is None or (since is not None and given is not None and parse_version(given) < since):
        return None
    return family


#: Their ``max_position_embeddings`` (``n_positions``) when a spec does not give it (config defaults).
CAUSAL_MASK_DEFAULT_POSITIONS = {"gptj": 2048, "gpt_neox": 2048, "gpt2": 1024, "gpt_neo": 2048}
#: First release whose ``generate`` passes ``num_logits_to_keep=1`` to models that accept it.
LOGITS_TO_KEEP = (4, 45, 0)
#: Releases whose ``_sample`` cloned the whole logits tensor (``outputs.logits.clone()[:, -1, :]``).
FULL_LOGITS_CLONE = ((4, 45, 0), (4, 47, 0))
#: First release whose Llama-derived ``forward`` no longer upcasts logits with ``logits.float()``.
LOGITS_UPCAST_REMOVED = (4, 47, 0)
#: First release whose ``forward`` takes ``logits_to_keep``, for families that got it after the Llama-derived
#: ones (4.45): GPT-NeoX with its 4.49 refactor, GPT-2 in 4.53, OPT in 5.0; other families taken as 5.0.
LOGITS_TO_KEEP_FROM = {"gpt_neox": (4, 49, 0), "gpt2": (4, 53, 0), "opt": (5, 0, 0)}
LOGITS_TO_KEEP_OTHERS = (5, 0, 0)
#: Releases whose shared ``sdpa_attention_forward`` made Q, K, V contiguous (head-major).
SDPA_CONTIGUOUS = ((4, 48, 0), (4, 56, 0))
#: Families whose own SDPA attention made a head-major query before the shared one: the last such release.
OWN_HEAD_MAJOR_UNTIL = {"opt": (4, 56, 0), "gpt_neox": (4, 49, 0)}
#: First release whose ``DynamicLayer.update`` copies the first K/V into the cache (``torch.cat``).
CACHE_COPIED = (4, 56, 0)
#: First release whose GPT-NeoX rotary embedding returns cos/sin at the activations' dtype.
GPT_NEOX_FP32_ROTARY_REMOVED = (4, 49, 0)
#: First release whose ``_sample`` deletes a step's outputs before the next forward (``del outputs``).
STEP_OUTPUTS_DELETED = (4, 42, 0)
#: First release in which a model that overrides only ``prepare_inputs_for_generation`` (BertForMaskedLM)
#: can no longer ``generate``: ``PreTrainedModel`` stopped inheriting ``GenerationMixin``.
MASKED_LM_GENERATE_REMOVED = (4, 50, 0)
#: First release storing a MoE layer's experts as 3-D tensors (``MixtralExperts.gate_up_proj``, ...).
EXPERTS_FUSED = (5, 0, 0)


def parse_version(text: str) -> tuple[int, int, int]:
    """``"4.46.0.dev0"`` -> (4, 46, 0); raises SpecError naming ``workload.versions.transformers``."""
    return release_key(text, "transformers", "4.42.0")


#: Families given by ``model_type`` whose transformers 5 attention is the shared ``eager_attention_forward``
#: (fp32 softmax) with ``config.attention_dropout`` on the probabilities: 0.0 in every OPT checkpoint, GPT-NeoX's
#: default and Phi's (whose checkpoints drop out on the residual branches only: phi-2's ``resid_pdrop`` 0.1; the
#: importer refuses a Phi ``attention_dropout`` above 0) (checked with ``benchmarks/tracer_llm.py --family
#: opt|gpt_neox|phi``).
SHARED_EAGER_FAMILIES = ("opt", "gpt_neox", "phi")

#: GPT-NeoX applies its partial rotary embedding by concatenating the rotated and the passed-through
#: dimensions (``torch.cat``; fp32 before 4.49, then cast back): new, head-major Q and K tensors. Whether
#: they are saved next to the whole fused QKV output (V a view of it), two tensors beyond the three the count
#: of Q, K and V has (traced: 4.42, 5.24 with and without the cache): before 4.49 they are (the 16-bit casts
#: of the fp32 rotary result, whatever the attention). Later, eager attention's matmul with V copies V, and a
#: copying cache (4.56 on; ``use_cache`` is the configs' default in training) hands the attention its copies
#: of K and V: then Q, K and V are three tensors of their own. Left: SDPA with the appended caches of
#: 4.49-4.55. (Under gradient checkpointing transformers turns the cache off, so the recomputed block saves the
#: two more; that one block is not counted.) SDPA receives GPT-NeoX's concatenated rotary output head-major
#: in every release.
CAT_ROTARY_FAMILY = "gpt_neox"


def _family_code(model_type: str) -> ModelCode:
    """The facts of ``model_type`` that hold in every release read, pinned or today's (the rest at their
    defaults)."""
    return ModelCode(
        shared_eager_attention=model_type in SHARED_EAGER_FAMILIES,
        mlp_backward_ffn_tensors=MLP_BACKWARD_FFN_TENSORS.get(model_type, 1),
        eager_qk_fp32=model_type in QK_FP32_FAMILIES,
        rmsnorm_normed_fp32=model_type in RMSNORM_WEIGHT_FP32_FAMILIES,
        layernorm_fp32=model_type in LAYERNORM_FP32_FAMILIES,
        router_fp32=model_type in ROUTER_FP32_FAMILIES,
        experts_see_all_tokens=model_type in ALL_TOKEN_EXPERT_FAMILIES,
        shared_experts_last=model_type in SHARED_EXPERTS_LAST_FAMILIES,
        attention_output_held=model_type in ATTENTION_OUTPUT_HELD_FAMILIES,
    )


def resolve(
    given: str | None, model_type: str, layers: int, positions: int, fp16_scores: bool, llama_like: bool
) -> ModelCode:
    """The allocations of ``model_type`` under release ``given`` (None: today's release).

    ``positions``: the model's ``max_position_embeddings`` (0: the family's config default);
    ``fp16_scores``: the attention scores are fp16 (fp16 weights or fp16 autocast); ``llama_like``: a
    Llama-derived ``ForCausalLM`` (RMSNorm families), whose forward upcast logits and took
    ``num_logits_to_keep`` from 4.45."""
    neox = model_type == CAT_ROTARY_FAMILY
    head_major = neox or model_type in HEAD_MAJOR_QUERY_FAMILIES
    cat_rotary_since = HEAD_MAJOR_QUERY_FAMILIES.get(model_type)
    model_mask = 0
    if model_type in MODEL_MASK_DEFAULT_POSITIONS:
        model_mask = (positions or MODEL_MASK_DEFAULT_POSITIONS[model_type]) ** 2
    family = _family_code(model_type)
    if given is None:  # a family without specifics gets TODAY's defaults
        return replace(
            family,
            sdpa_mask_saved=model_type in MASKED_SDPA_FAMILIES,
            head_major_query=head_major,
            buffer_bytes=model_mask,
            eager_softmax_upcast=model_type in FP32_SOFTMAX_FAMILIES,
        )
    key = parse_version(given)
    opt_old = model_type == "opt" and key < OPT_CLAMP_REMOVED
    mask_bytes = model_mask
    removed = CAUSAL_MASK_REMOVED.get(model_type, (0, 0, 0))
    if removed is None or key < removed:
        n = positions or CAUSAL_MASK_DEFAULT_POSITIONS[model_type]
        mask_bytes = layers * n * n
    keeps_from = LOGITS_TO_KEEP if llama_like else LOGITS_TO_KEEP_FROM.get(model_type, LOGITS_TO_KEEP_OTHERS)
    fp32_rotary_key = neox and key < GPT_NEOX_FP32_ROTARY_REMOVED
    cache_copied = key >= CACHE_COPIED
    return replace(
        family,
        release=given,
        eager_clamp=opt_old,
        eager_softmax_fp32=opt_old and fp16_scores,
        clamp_attention_dropout=0.0,
        head_major_query=neox
        or (cat_rotary_since is not None and key >= cat_rotary_since)
        or SDPA_CONTIGUOUS[0] <= key < SDPA_CONTIGUOUS[1]
        or key < OWN_HEAD_MAJOR_UNTIL.get(model_type, (0, 0, 0)),
        rotary_cat_sdpa=neox and (fp32_rotary_key or not cache_copied),
        rotary_cat_eager=fp32_rotary_key,
        buffer_bytes=mask_bytes,
        all_prompt_logits=key < keeps_from,
        logits_upcast=llama_like and key < LOGITS_UPCAST_REMOVED,
        logits_clone=FULL_LOGITS_CLONE[0] <= key < FULL_LOGITS_CLONE[1],
        cache_copied=cache_copied,
        fp32_rotary_key=fp32_rotary_key,
        step_outputs_kept=key < STEP_OUTPUTS_DELETED,
        masked_lm_generates=key < MASKED_LM_GENERATE_REMOVED,
        experts_per_module=key < EXPERTS_FUSED,
    )


def runs_model(workload: Workload) -> bool:
    """Whether transformers' classes run the model: training or a forward, or generation with ``runtime: hf`` or
    ``hf-legacy``; not litgpt's, torchtune's or gpt-fast's own model code, nor a serving runtime."""
    own = (Runtime.litgpt, Runtime.torchtune, Runtime.gpt_fast, Runtime.vllm, Runtime.llama_cpp)
    if workload.runtime in own or runs_llamacpp(workload):
        return False
    if workload.adapter is not None and workload.adapter.framework in ("litgpt", "torchtune"):
        return False
    return not (workload.mode is Mode.inference and is_generation(workload) and workload.runtime is None)


def attention_run(spec: Spec) -> Spec:
    """The spec with the attention transformers runs: eager for a family without an SDPA path
    (:data:`NO_SDPA_FAMILIES`) where the workload names none; naming ``sdpa`` for it is refused in one line."""
    wl = spec.workload
    family = _no_sdpa(spec.model.model_type or "", wl)
    if family is None or wl.attention is not Attention.sdpa or not runs_model(wl):
        return spec
    if "attention" in wl.model_fields_set:
        raise SpecError(
            f"workload.attention: sdpa: transformers' {family} classes have no SDPA path (attn_implementation="
            '"sdpa" raises); use eager, what they run by default'
        )
    return spec.model_copy(update={"workload": wl.model_copy(update={"attention": Attention.eager})})


def model_code(spec: ModelSpec, workload: Workload, shape: ModelShape) -> tuple[ModelCode, list[str]]:
    """The code facts of the spec's model under the transformers release ``workload.versions.transformers``
    pins (today's when none is), and what a pinned release changes, in words."""
    given = (workload.versions or {}).get("transformers")
    model_type = spec.model_type or ""
    fp16 = workload.precision in (Precision.fp16, Precision.amp_fp16, Precision.mixed_fp16)
    positions = spec.max_position_embeddings or 0
    code = resolve(given, model_type, shape.layers, positions, fp16, shape.norm is Norm.rmsnorm)
    said = notes(code, model_type)
    family = _no_sdpa(model_type, workload)
    if family is not None and workload.attention is Attention.eager and runs_model(workload):
        said.append(f"{family}: transformers' classes have no SDPA path, so eager attention")
    if model_type and _training_cache_copies_kv(workload, shape, code):
        code = replace(code, kv_copies_beside_fused_qkv=True)
    if shape.norm is Norm.rmsnorm and workload.mode is Mode.train and torch_stack.mean_saves_input(workload):
        # LlamaRMSNorm and its kin: variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        code = replace(code, rmsnorm_square_saved=True, rmsnorm_square_fp32=True)
        said.append(
            f"torch {(workload.versions or {})['torch']}'s mean keeps its input for backward (fixed in 2.2), so "
            "each RMSNorm also keeps its fp32 squared input"
        )
    return code, said


def _training_cache_copies_kv(workload: Workload, shape: ModelShape, code: ModelCode) -> bool:
    """Whether a decoder's training forward builds a copying cache (``use_cache``, the configs' default, with
    gradient checkpointing off; ``DynamicLayer`` concatenates from 4.56) beside a fused QKV whose query stays a view
    of it (no rotary embedding makes a new one): GPT-2 and its kin (traced: the SDPA step holds the two copies).
    Asked for models whose transformers ``model_type`` is known (a spec of a bare shape says nothing of the class
    that runs it, nor of its cache)."""
    return (
        workload.mode is Mode.train
        and workload.use_cache is not False
        and workload.gradient_checkpointing is Checkpointing.none
        and shape.architecture is Architecture.decoder
        and shape.fused_qkv
        and shape.position is not Position.rotary
        and code.cache_copied
        and runs_model(workload)
    )


def notes(code: ModelCode, model_type: str) -> list[str]:
    """What a pinned release changes, and a model-wide mask buffer, in words (for the estimate's assumptions)."""
    model_mask = model_type in MODEL_MASK_DEFAULT_POSITIONS and code.buffer_bytes
    where = "held by the model" if model_mask else "per layer"
    mask = f"{model_type}: bool causal-mask buffer {where} ({code.buffer_bytes:,} B)"
    if code.release is None:
        return [mask] if model_mask else []
    said = [f"transformers {code.release} (workload.versions.transformers)"]
    if code.eager_clamp:
        said.append("OPT eager attention clamps the masked scores (torch.max) and saves them")
    if code.buffer_bytes:
        said.append(mask)
    if code.all_prompt_logits:
        said.append("generate: the prompt forward returns logits for every position")
    return ["; ".join(said)]


#: Runtimes with a KV pool of their own, which no ``cache`` key changes.
OWN_POOLS = {Runtime.vllm: "vLLM's paged pool", Runtime.llama_cpp: "llama.cpp's own cache"}


def uses_cache_keys(wl: Workload) -> bool:
    """Whether the workload gives ``cache`` or ``max_cache_len`` (then :func:`check_keys` applies)."""
    return wl.cache is not None or wl.max_cache_len is not None


def check_keys(spec: Spec) -> None:
    """The rules of ``cache`` and ``max_cache_len``, refused with one line naming the key: transformers'
    ``generate`` (``runtime: hf``) chooses its cache; a runtime that always sets up its whole cache (litgpt,
    gpt-fast) takes ``cache: static`` as said; vLLM and llama.cpp keep their own pools; a static cache is
    modelled at today's release, with SDPA, on one GPU, at the model's dtype, and holds the whole context."""
    wl = spec.workload
    runtime = Runtime.llama_cpp if runs_llamacpp(wl) else (wl.runtime or Runtime.vllm)
    key = "cache" if wl.cache is not None else "max_cache_len"
    if runtime in OWN_POOLS:
        said = "" if wl.runtime is not None else ", the default runtime"
        raise SpecError(
            f"workload.{key}: {runtime.value}{said} keeps {OWN_POOLS[runtime]}; a static cache is transformers' "
            "generate (runtime: hf) or gpt-fast's (runtime: gpt-fast)"
        )
    if runtime is Runtime.hf_legacy:
        raise SpecError(f"workload.{key}: hf-legacy (transformers before 4.36) has tuple caches only; use runtime: hf")
    if runtime is Runtime.litgpt and wl.max_cache_len is not None:
        raise SpecError("workload.max_cache_len: not a setting of litgpt's generate (its cache holds seq_len)")
    if runtime is not Runtime.hf:
        if wl.cache is KvCache.dynamic:
            raise SpecError(f"workload.cache: {runtime.value} sets up its whole cache before the prefill (static)")
        return  # the runtime's own module checks the rest
    static = wl.cache is KvCache.static
    if wl.max_cache_len is not None and not static:
        raise SpecError("workload.max_cache_len: only with cache: static (a dynamic cache grows with the tokens)")
    if not static:
        return
    _check_static(spec)


def _check_static(spec: Spec) -> None:
    """What ``cache: static`` under ``runtime: hf`` is modelled with."""
    from vramcalc.llm.generation import check_cache_len  # a static cache only: generation loads on use

    wl = spec.workload
    check_cache_len(wl)
    if wl.use_cache is False:
        raise SpecError("workload.use_cache: false keeps no cache; cache: static needs one")
    if (wl.versions or {}).get("transformers") is not None:
        raise SpecError("workload.versions.transformers: cache: static is modelled at today's release only")
    if wl.attention is not Attention.sdpa:
        raise SpecError(f"workload.attention: cache: static is modelled with sdpa (got {wl.attention.value})")
    if wl.kv_cache_dtype not in (None, KvCacheDtype.auto):
        raise SpecError("workload.kv_cache_dtype: transformers' static cache has the keys' dtype (auto)")
    from vramcalc.stacks.techniques import one_gpu_only  # a static cache only: the techniques load on use

    reason = one_gpu_only(wl)
    if spec.parallel is not None and reason is not None:
        raise SpecError(reason)


def static_cache(spec: Spec, shape: ModelShape) -> StaticCache | None:
    """transformers' ``StaticCache`` as ``generate`` sets it up (see the module's notes), or None for the
    dynamic cache: ``max_length - 1`` tokens (or ``max_cache_len`` when larger), the decode step's boolean
    mask of ``batch x max_cache_len``, the decode step's query packed by KV head (``pack_gqa``: K and V not
    expanded)."""
    wl = spec.workload
    if wl.cache is not KvCache.static:
        return None
    if shape.architecture is not Architecture.decoder or shape.mla is not None:
        what = "an encoder-decoder model" if shape.mla is None else "multi-head latent attention"
        raise SpecError(f"workload.cache: static is modelled for decoder-only models (not {what})")
    from vramcalc.llm.generation import StaticCache, prompt_and_context  # generation only

    _, context = prompt_and_context(wl)
    tokens = max(context - 1, wl.max_cache_len or 0)
    if wl.compile:  # model.forward compiled: the prefill and each decode step one graph, their masks inside it
        return StaticCache(tokens=tokens, compiled=True)
    return StaticCache(tokens=tokens, decode_extra=allocation_bytes(wl.batch_size * tokens), decode_expands=False)
