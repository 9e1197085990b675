"""How the code that runs a model allocates beyond what its shape says: :class:`ModelCode`, plain facts of
one library release for one model family (transformers by release, litgpt's own model code), set on the
model's shape by the stack modules (``vramcalc/stacks/transformers.py``, ``vramcalc/stacks/litgpt.py``,
``vramcalc/stacks/torchtune.py`` for torchtune's decoder in training) and
read by the activation and generation formulas.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FusedAttention:
    """What a fused attention library's kernel keeps and allocates beyond PyTorch's SDPA flash kernel (which
    saves Q, K and V at the K/V heads' width, its output and an fp32 logsumexp per head and query), as the
    stack module of that library states it (``vramcalc/stacks/flash_attn.py``)."""

    #: Bytes per element the kernel runs in: wider inputs (fp32) are cast to it first, and the casts are what
    #: it saves.
    element_bytes: int
    #: The output is laid out as the query is (heads before positions), so the output projection reads a copy.
    output_copied: bool
    #: Backward writes dK and dV for every query head before summing them over each group (grouped K/V).
    grouped_grads_expanded: bool


@dataclass(frozen=True)
class ModelCode:
    """How the code that runs a model allocates, beyond what its shape says: the facts of one library
    release for one model family. The defaults are today's transformers (5.x) for a family without
    specifics. A model's shape carries them (:attr:`vramcalc.core.shape.ModelShape.code`), since every
    activation formula reads the shape."""

    #: The release these facts were read from (None: today's release, not pinned).
    release: str | None = None
    #: Eager attention is the shared ``eager_attention_forward`` (fp32 softmax) whose attention dropout is
    #: 0.0 while the model's hidden dropout is not.
    shared_eager_attention: bool = False
    #: Eager attention's softmax runs in fp32 and is cast back (``softmax(..., dtype=torch.float32).to(dtype)``)
    #: in a LayerNorm family that its norm does not tell apart (RMSNorm families always do).
    eager_softmax_upcast: bool = False
    #: ffn-wide tensors the backward of a block's MLP activation holds beyond what the block saved, whose
    #: activation output (the down projection's saved input) is freed by then: 1 for a kernel's (the incoming
    #: gradient and the input's, less that output), 5 for BLOOM's GELU, whose backward is written out in Python
    #: (``bloom_gelu_back``: six at its widest).
    mlp_backward_ffn_tensors: int = 1
    #: SDPA receives a materialised boolean mask on every call, which PyTorch converts to the query's dtype per
    #: call and the memory-efficient kernel (the flash kernel takes no mask) saves for backward: batch x seq^2.
    sdpa_mask_saved: bool = False
    #: Eager attention multiplies fp32 copies of Q and K (GPT-J's ``_attn``: ``query.to(torch.float32)``), which
    #: the matmul saves, and so takes the softmax of fp32 scores (saved, then cast back for the matmul with V).
    eager_qk_fp32: bool = False
    #: Eager attention clamps the masked scores with ``torch.max``, which saves them.
    eager_clamp: bool = False
    #: The clamped eager softmax runs in fp32 and its output is saved.
    eager_softmax_fp32: bool = False
    #: Dropout probability on the clamped eager attention's probabilities.
    clamp_attention_dropout: float = 0.0
    #: SDPA receives a head-major (contiguous) query: the flash kernel's output is head-major and is copied
    #: before the output projection.
    head_major_query: bool = False
    #: The concatenated rotary Q and K are saved next to a fused QKV output, under SDPA / under eager attention.
    rotary_cat_sdpa: bool = False
    rotary_cat_eager: bool = False
    #: The output projection reads a copy of the attention output, not the tensor the kernel saved.
    attention_output_copied: bool = False
    #: Bytes of buffers allocated with the model beyond its parameters (per-layer causal masks).
    buffer_bytes: int = 0
    #: Generation: the prompt forward returns logits for every position.
    all_prompt_logits: bool = False
    #: Generation: ``forward`` upcasts the logits to fp32, a copy next to them.
    logits_upcast: bool = False
    #: Generation: the sampling loop clones the whole logits tensor.
    logits_clone: bool = False
    #: The returned KV cache is a copy of K and V, not the attention's own tensors.
    cache_copied: bool = True
    #: A training forward's copying cache hands SDPA copies of K and V while the query, a view of the fused QKV
    #: output, keeps all of that output: two K/V-sized tensors beyond the three a QKV count has (GPT-2).
    kv_copies_beside_fused_qkv: bool = False
    #: The rotary embedding runs in fp32, so the cached key is an fp32 tensor.
    fp32_rotary_key: bool = False
    #: Generation without a cache keeps a step's outputs until the next forward returns.
    step_outputs_kept: bool = False
    #: A masked-LM head can ``generate``, one whole forward per new token.
    masked_lm_generates: bool = False
    #: Every expert is a module of its own (one weight per expert and projection), not one 3-D tensor.
    experts_per_module: bool = False
    #: RMSNorm's ``mean`` keeps its input, the squared residual, for backward: at the residual dtype (litgpt's
    #: ``x * x``), or in fp32 with ``rmsnorm_square_fp32`` (transformers squares its fp32 copy of the input).
    rmsnorm_square_saved: bool = False
    rmsnorm_square_fp32: bool = False
    #: SDPA receives K and V expanded to every query head (copies of grouped K/V), which its kernel saves in
    #: place of the grouped ones.
    kv_expanded: bool = False
    #: RMSNorm runs on an fp32 copy of its input with the weight multiplied in fp32: it keeps the fp32
    #: normalised tensor (the weight's gradient reads it) where a 16-bit one is kept otherwise (pure precision).
    rmsnorm_normed_fp32: bool = False
    #: LayerNorm runs on an fp32 copy of its input and casts its output back (OLMo 1's weightless norm): it saves
    #: that fp32 copy where a norm saves its input at the residual dtype otherwise.
    layernorm_fp32: bool = False
    #: The MoE router multiplies fp32 copies of its input and weight (DeepSeek's ``F.linear(hidden_states.type(
    #: torch.float32), self.weight.type(torch.float32))``), which the matmul keeps for backward.
    router_fp32: bool = False
    #: Every expert runs on every token, the router's scores zeroing the unrouted ones (Llama 4's
    #: ``hidden_states.repeat(num_experts, 1) * router_scores`` and batched matmuls): experts x tokens rows.
    experts_see_all_tokens: bool = False
    #: The MoE layer runs its shared experts after the routed ones (Llama 4, DeepSeek), so their backward
    #: comes first.
    shared_experts_last: bool = False
    #: The decoder layer keeps the attention's output in a variable of its own until it returns (Llama 4's
    #: ``attention_states``), one more hidden-wide tensor through the MLP of a no-grad forward.
    attention_output_held: bool = False
    #: The fused kernel of ``attention: flash`` (None: that attention is not asked for).
    flash: FusedAttention | None = None

    @property
    def pinned(self) -> bool:
        """Whether a pinned release's facts replace today's."""
        return self.release is not None

    def rotary_cat_saved(self, sdpa: bool) -> bool:
        """Whether the concatenated rotary Q and K are saved, under SDPA (any kernel) or eager attention."""
        return self.rotary_cat_sdpa if sdpa else self.rotary_cat_eager


#: Today's release, no family specifics.
TODAY = ModelCode()
