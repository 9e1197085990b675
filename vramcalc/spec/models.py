"""Spec file models (pydantic v2) and the only YAML reader, :func:`load_spec`.

The key names of ``model`` and ``workload`` are a public contract: keys may be added, never
renamed. Every model forbids unknown keys, so a typo is an error, not a silently ignored line.
"""

# Annotations are evaluated when defined (no `from __future__ import annotations`): pydantic would
# otherwise parse each field's annotation string while it builds the models, on every start.

import unicodedata
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    PrivateAttr,
    ValidatorFunctionWrapHandler,
    field_serializer,
    field_validator,
    model_validator,
)

from vramcalc.choices import (
    Architecture,
    Attention,
    Checkpointing,
    CrossEntropy,
    Head,
    KvCache,
    KvCacheDtype,
    Mlp,
    Mode,
    Norm,
    Optimizer,
    OptimizerImpl,
    PagedStates,
    Position,
    Precision,
    QkNorm,
    Runtime,
)
from vramcalc.errors import UnitError
from vramcalc.spec.llamacpp import LLAMACPP_KEYS, OTHER_RUNTIME_KEYS, CacheType
from vramcalc.spec.llm import GGUF, AdapterSpec, QuantizationSpec, litgpt_defaults, name_to_mapping
from vramcalc.spec.parallel import ParallelSpec
from vramcalc.spec.section import BuiltOnUse, SpecSection
from vramcalc.spec.target import Target
from vramcalc.spec.versions import known_libraries, release_rules, torch_defaults
from vramcalc.units import ByteSize, Fraction, ParamCount, parse_count

#: Bidirectional overrides and isolates: they reorder what a terminal shows ("Trojan Source").
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")

PositiveInt = Annotated[int, Field(strict=True, gt=0, le=10**7)]
PositiveCount = Annotated[ParamCount, Field(gt=0, le=10**12)]
NonNegativeInt = Annotated[int, Field(strict=True, ge=0, le=10**7)]
#: The keys of a static KV cache (transformers' ``cache_implementation="static"``, gpt-fast's ``setup_caches``).
STATIC_CACHE_KEYS = ("cache", "max_cache_len")
#: A context length: larger than any tensor dimension (Llama 4 Scout: 10,485,760 positions).
PositionCount = Annotated[int, Field(strict=True, gt=0, le=10**9)]

#: Spellings of a precision that name the same choice (PyTorch/Hugging Face dtype names).
PRECISION_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}
#: Spellings of pure 16-bit training that say it is meant: ``fp16``/``bf16`` (no fp32 master weights),
#: without the warning that Hugging Face Trainer's ``fp16=True`` is ``amp-fp16``.
PURE_PRECISIONS = {"pure-fp16": "fp16", "pure-bf16": "bf16"}


def _precision_schema(schema: dict[str, Any]) -> None:
    """The JSON Schema of ``precision``: a :class:`Precision`, or a spelling of :data:`PURE_PRECISIONS`."""
    pure = {"type": "string", "enum": list(PURE_PRECISIONS), "description": "fp16/bf16, pure 16-bit meant"}
    schema["anyOf"] = [{"$ref": schema.pop("$ref")}, pure]


#: Multi-head latent attention keys (DeepSeek V2/V3).
MLA_KEYS = ("q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")


#: Bytes or elements of a checkpoint's files: a 671B model in bf16 holds 1.34e12 bytes.
CheckpointCount = Annotated[int, Field(strict=True, gt=0, le=10**15)]


class CheckpointFacts(SpecSection):
    """What the model's files hold, read from their headers when a model is named by a path, the local
    Hugging Face cache or a Hub id (docs/models.md). ``layers_modelled: false`` says the layer shape
    beside it does not account for every weight of the files (an architecture vramcalc does not model,
    or towers it does not: a vision encoder): the weights are the files', the KV cache the config's
    standard fields', activations first-order, and training is refused."""

    model_config = ConfigDict(defer_build=True)  # built when a spec is first read

    source: Annotated[str, Field(min_length=1, max_length=500)]
    weight_bytes: CheckpointCount
    params: CheckpointCount  # stored elements: the parameter count where no tensor is packed
    files: PositiveInt
    tensors: PositiveInt
    quantization: Annotated[str, Field(min_length=1, max_length=40)] | None = None
    layers_modelled: bool = True
    components: dict[Annotated[str, Field(max_length=200)], Annotated[int, Field(strict=True, ge=0)]] | None = None
    sha256: dict[Annotated[str, Field(max_length=500)], Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]] | None = None


class ImageRule(SpecSection):
    """How the processor turns an image of a given size into tokens (vramcalc/spec/hf_image_tokens.py): the
    rule and the numbers it reads."""

    model_config = ConfigDict(defer_build=True)  # built when a spec is first read

    rule: Literal["fixed", "smart_resize", "anyres", "longest_edge"]
    patch: PositiveInt | None = None  # pixels a side per token cell (smart_resize, longest_edge) or per patch
    min_pixels: PositiveCount | None = None
    max_pixels: PositiveCount | None = None
    tile: PositiveInt | None = None  # anyres: the tower's image edge
    base: PositiveInt | None = None  # anyres: the whole image's tokens at the tower's size
    grid_pinpoints: (
        Annotated[list[Annotated[list[PositiveInt], Field(min_length=2, max_length=2)]], Field(max_length=100)] | None
    ) = None
    longest_edge: PositiveInt | None = None

    @model_validator(mode="after")
    def _needs(self) -> "ImageRule":
        needed = {
            "smart_resize": ("patch", "min_pixels", "max_pixels"),
            "anyres": ("patch", "tile", "base", "grid_pinpoints"),
            "longest_edge": ("patch", "longest_edge"),
        }.get(self.rule, ())
        for key in needed:
            if getattr(self, key) is None:
                raise ValueError(f"{key}: required by rule {self.rule}")
        if self.rule == "anyres" and self.tile is not None and self.patch is not None and self.tile < self.patch:
            raise ValueError(f"tile: {self.tile} is smaller than patch {self.patch}")
        if self.grid_pinpoints is not None and self.tile is not None:
            for pin in self.grid_pinpoints:
                if pin[0] < self.tile or pin[1] < self.tile:
                    raise ValueError(f"grid_pinpoints: {pin} is smaller than a tile of {self.tile}")
        return self


class VisionSpec(SpecSection):
    """The vision tower and projector of a multimodal model (docs/models.md "Multimodal models"): their
    parameters, counted with the weights in every path (frozen or trained as the rest of the model), and the
    tokens one image adds to a sequence (``workload.images``). Read from a config's ``vision_config``."""

    model_config = ConfigDict(defer_build=True)  # built when a spec is first read

    params: PositiveCount
    hidden_size: PositiveInt  # the encoder's width: its matrices are listed as hidden_size x hidden_size
    layers: PositiveInt
    image_tokens: PositiveInt  # the language model's tokens for one image (Gemma 3: mm_tokens_per_image)
    encoder: Annotated[str, Field(min_length=1, max_length=40, pattern=r"^[\w. -]+$")] | None = None
    # Images read by cross-attention (Llama 3.2 Vision): how many of the language model's layers attend to the
    # images' states instead of the sequence (their KV cache holds those), and the states of one image
    cross_attention_layers: PositiveInt | None = None
    cross_attention_tokens: PositiveCount | None = None
    # how an image's size sets its tokens (workload.image_resolution); without it image_tokens holds as given
    image_rule: ImageRule | None = None

    @model_validator(mode="after")
    def _cross_attention_pair(self) -> "VisionSpec":
        if (self.cross_attention_layers is None) != (self.cross_attention_tokens is None):
            given = "cross_attention_layers" if self.cross_attention_layers is not None else "cross_attention_tokens"
            other = "cross_attention_tokens" if given == "cross_attention_layers" else "cross_attention_layers"
            raise ValueError(f"vision.{given}: only valid with vision.{other}")
        return self


class RopeScaling(SpecSection):
    """How the rotary embedding is scaled (a config's ``rope_scaling`` / ``rope_parameters``): no parameter
    depends on it, but a serving runtime builds its cos/sin cache from it (vramcalc/stacks/vllm.py)."""

    model_config = ConfigDict(defer_build=True)  # built when a spec first gives the section

    type: Annotated[str, Field(min_length=1, max_length=40)] = "default"
    factor: Annotated[float, Field(gt=0, le=10_000)] | None = None
    original_max_position_embeddings: PositionCount | None = None
    #: The sliding-window layers rotate with a base of their own (Gemma 3's ``rope_local_base_freq``).
    local_rope: bool = False


class ModelSpec(SpecSection):
    """Shape of the network. Omitted keys are filled by :func:`vramcalc.core.shape.resolve_model`."""

    model_config = ConfigDict(defer_build=True)  # built when a spec is first read

    architecture: Architecture | None = None
    layers: PositiveInt | None = None
    hidden_size: PositiveInt | None = None
    heads: PositiveInt | None = None
    kv_heads: PositiveInt | None = None
    head_dim: PositiveInt | None = None
    ffn_size: PositiveInt | None = None
    mlp: Mlp | None = None
    norm: Norm | None = None
    position: Position | None = None
    vocab_size: PositiveInt | None = None
    max_position_embeddings: PositionCount | None = None
    rope_scaling: Annotated[RopeScaling, BuiltOnUse()] | None = None
    tie_embeddings: bool | None = None
    params: PositiveCount | None = None
    head: Head | None = None
    num_labels: PositiveInt | None = None
    decoder_layers: PositiveInt | None = None
    # Added keys (not in the original contract; all optional):
    bias: bool | None = None
    dropout: Annotated[float, Field(ge=0, lt=1)] | None = None
    type_vocab_size: Annotated[int, Field(strict=True, ge=0, le=10**6)] | None = None
    pooler: bool | None = None
    fused_qkv: bool | None = None
    relative_attention_buckets: PositiveInt | None = None
    patch_size: PositiveInt | None = None
    depth: Literal[18, 34, 50, 101, 152] | None = None
    # Mixture of experts (vramcalc/llm/moe.py):
    experts: PositiveInt | None = None
    experts_per_token: PositiveInt | None = None
    shared_experts: Annotated[int, Field(strict=True, ge=0, le=10**4)] | None = None
    expert_ffn_size: PositiveInt | None = None
    moe_layer_frequency: PositiveInt | None = None
    capacity_factor: Annotated[float, Field(gt=0, le=1000)] | None = None
    first_dense_layers: NonNegativeInt | None = None
    shared_expert_ffn_size: PositiveInt | None = None
    shared_expert_gate: bool | None = None
    # Per-projection biases, norms and embeddings (docs/spec.md "Model shape details"):
    attention_bias: bool | None = None
    qkv_bias: bool | None = None
    mlp_bias: bool | None = None
    lm_head_bias: bool | None = None
    head_bias: bool | None = None
    qk_norm: QkNorm | None = None
    norms_per_layer: Annotated[int, Field(strict=True, ge=0, le=4)] | None = None
    parallel_block: bool | None = None
    final_norm: bool | None = None
    norm_weights: bool | None = None  # false: the norms have no weight or bias (OLMo 1)
    embedding_norm: bool | None = None
    position_offset: NonNegativeInt | None = None
    embedding_dim: PositiveInt | None = None
    # DeBERTa's disentangled attention: the relative positions each side spans, and how many of its
    # content-to-position and position-to-content score terms each layer adds
    relative_attention_span: PositiveInt | None = None
    relative_attention_terms: Annotated[int, Field(strict=True, ge=1, le=2)] | None = None
    # Soft-capping with tanh (Gemma 2): of the attention scores, of the output logits
    attention_softcap: bool | None = None
    logit_softcap: bool | None = None
    # Sliding-window attention (Mistral, Gemma 2/3, StarCoder2):
    sliding_window: PositiveInt | None = None
    sliding_window_pattern: PositiveInt | None = None
    full_attention_layers: NonNegativeInt | None = None  # the first N layers attend in full (Qwen2's max_window_layers)
    # Multi-head latent attention (DeepSeek V2/V3):
    kv_lora_rank: PositiveInt | None = None
    q_lora_rank: PositiveInt | None = None
    qk_rope_head_dim: PositiveInt | None = None
    qk_nope_head_dim: PositiveInt | None = None
    v_head_dim: PositiveInt | None = None
    # The transformers model_type of the config.json a model came from (release-specific behaviour):
    model_type: Annotated[str, Field(min_length=1, max_length=40)] | None = None
    # A multimodal model's vision tower and projector (counted with the weights):
    vision: Annotated[VisionSpec, BuiltOnUse()] | None = None
    # What the model's files hold, when it was read from them (vramcalc/sources/):
    checkpoint: Annotated[CheckpointFacts, BuiltOnUse()] | None = None

    @model_validator(mode="after")
    def _detail_rules(self) -> "ModelSpec":
        if self.sliding_window_pattern is not None and self.sliding_window is None:
            raise ValueError("sliding_window_pattern: only valid with sliding_window")
        if self.full_attention_layers is not None:
            if self.sliding_window is None:
                raise ValueError("full_attention_layers: only valid with sliding_window")
            if self.sliding_window_pattern is not None:
                raise ValueError("full_attention_layers: give it or sliding_window_pattern, not both")
            if self.layers is not None and self.full_attention_layers > self.layers:
                raise ValueError(
                    f"full_attention_layers: {self.full_attention_layers:,} is more than the {self.layers:,} layers"
                )
        if self.kv_lora_rank is None:
            given = [key for key in MLA_KEYS if getattr(self, key) is not None]
            if given:
                raise ValueError(f"{given[0]}: only valid with kv_lora_rank (multi-head latent attention)")
        else:
            if self.architecture not in (None, Architecture.decoder):
                raise ValueError("kv_lora_rank: multi-head latent attention is only modelled for decoders")
            if self.kv_heads is not None and self.heads is not None and self.kv_heads != self.heads:
                raise ValueError("kv_heads: not used with kv_lora_rank (every head reads the shared latent)")
            if self.fused_qkv:
                raise ValueError("fused_qkv: not used with kv_lora_rank (latent attention has its own projections)")
        if self.vision is not None and self.architecture not in (None, Architecture.decoder):
            raise ValueError("vision: a vision tower is only modelled beside a decoder (a multimodal language model)")
        if self.position_offset is not None and self.position not in (None, Position.learned):
            raise ValueError("position_offset: only valid with position: learned")
        if self.architecture is Architecture.vit:
            for key in ("embedding_norm", "embedding_dim", "position_offset", "sliding_window", "kv_lora_rank"):
                if getattr(self, key) is not None:
                    raise ValueError(f"{key}: not used by architecture: vit")
        return self

    @model_validator(mode="after")
    def _moe_rules(self) -> "ModelSpec":
        moe_keys = (
            "experts_per_token",
            "shared_experts",
            "expert_ffn_size",
            "moe_layer_frequency",
            "capacity_factor",
            "first_dense_layers",
            "shared_expert_ffn_size",
            "shared_expert_gate",
        )
        if self.experts is None:
            given = [key for key in moe_keys if getattr(self, key) is not None]
            if given:
                raise ValueError(f"{given[0]}: only valid with experts (a mixture-of-experts model)")
            return self
        top_k = self.experts_per_token if self.experts_per_token is not None else 2
        if top_k > self.experts:
            raise ValueError(f"experts_per_token: {top_k} is more than experts ({self.experts})")
        if self.first_dense_layers is not None and self.layers is not None and self.first_dense_layers >= self.layers:
            raise ValueError(f"first_dense_layers: {self.first_dense_layers} leaves no MoE layer of {self.layers}")
        if self.shared_experts == 0 and (self.shared_expert_ffn_size is not None or self.shared_expert_gate):
            key = "shared_expert_ffn_size" if self.shared_expert_ffn_size is not None else "shared_expert_gate"
            raise ValueError(f"{key}: given with shared_experts: 0")
        return self

    @model_validator(mode="after")
    def _shape_rules(self) -> "ModelSpec":
        if self.architecture is Architecture.resnet:
            return self._resnet_rules()
        if self.layers is None or self.hidden_size is None:
            missing = "layers" if self.layers is None else "hidden_size"
            raise ValueError(f"{missing}: required for a transformer")
        if self.depth is not None:
            raise ValueError("depth: only valid with architecture: resnet")
        if self.patch_size is not None and self.architecture is not Architecture.vit:
            raise ValueError("patch_size: only valid with architecture: vit")
        if self.head_dim is None and self.heads is not None and self.hidden_size % self.heads:
            raise ValueError(
                f"heads: {self.heads} does not divide hidden_size {self.hidden_size} (give head_dim explicitly)"
            )
        if self.kv_heads is not None:
            heads = self.heads if self.heads is not None else max(1, self.hidden_size // 64)
            if self.kv_heads > heads or heads % self.kv_heads:
                raise ValueError(f"kv_heads: {self.kv_heads} must divide heads ({heads})")
        if self.vocab_size is None and self.params is None and self.architecture is not Architecture.vit:
            raise ValueError("vocab_size: required unless params is given (then it is derived from params)")
        if self.decoder_layers is not None and self.architecture is not Architecture.encoder_decoder:
            raise ValueError("decoder_layers: only valid with architecture: encoder-decoder")
        return self

    def _resnet_rules(self) -> "ModelSpec":
        if self.depth is None:
            raise ValueError("depth: required for architecture: resnet (18, 34, 50, 101 or 152)")
        allowed = {"architecture", "depth", "num_labels", "params", "head"}
        extra = sorted(k for k in self.model_fields_set if k not in allowed)
        if extra:
            raise ValueError(f"{extra[0]}: not a ResNet key (a ResNet takes depth and num_labels)")
        return self


class Workload(SpecSection):
    """What is run: training step or inference forward, batch shape, precision, optimizer."""

    model_config = ConfigDict(defer_build=True)  # built when a spec is first read

    mode: Mode = Mode.train
    batch_size: PositiveCount
    seq_len: PositiveCount | None = None
    target_len: PositiveCount | None = None
    precision: Annotated[Precision, Field(json_schema_extra=_precision_schema)] = Precision.fp32
    optimizer: Optimizer | None = None
    optimizer_impl: OptimizerImpl = OptimizerImpl.foreach
    # a paged optimizer's states in CUDA managed memory: evictable to the host (host-ok) or counted (device)
    paged_states: PagedStates | None = None
    gradient_checkpointing: Checkpointing = Checkpointing.none
    attention: Attention = Attention.sdpa
    image_size: PositiveInt | None = None
    channels: PositiveInt | None = None
    # A multimodal model's images per sequence (model.vision): their tokens join seq_len and prompt_len,
    # and image_tokens records how many of seq_len's tokens they are
    images: Annotated[int, Field(strict=True, ge=1, le=10**4)] | None = None
    # the images' height and width in pixels: their tokens by the processor's rule (model.vision.image_rule)
    image_resolution: (
        Annotated[list[Annotated[int, Field(strict=True, ge=1, le=10**6)]], Field(min_length=2, max_length=2)] | None
    ) = None
    image_tokens: PositiveCount | None = None
    # the images' states the cross-attention layers of model.vision attend to and cache, per sequence
    cross_attention_tokens: PositiveCount | None = None
    # LLM inference, quantization and adapters (README "LLM inference, quantization and adapters"):
    prompt_len: PositiveCount | None = None
    max_new_tokens: Annotated[ParamCount, Field(ge=0, le=10**12)] | None = None
    use_cache: bool | None = None
    runtime: Runtime | None = None
    kv_cache_dtype: KvCacheDtype | None = None
    kv_block_size: PositiveInt | None = None
    memory_utilization: Annotated[float, Field(gt=0, le=1)] | None = None
    # the KV cache of transformers' generate (dynamic or static) and the tokens a static cache is set up for
    # (transformers' and gpt-fast's rules: vramcalc/stacks/transformers.py, vramcalc/stacks/gpt_fast.py)
    cache: KvCache | None = None
    max_cache_len: PositiveCount | None = None
    # vLLM's engine settings (vramcalc/stacks/vllm.py): its scheduler's limits and the release modelled.
    max_model_len: PositiveCount | None = None
    max_num_batched_tokens: PositiveCount | None = None
    max_num_seqs: PositiveInt | None = None
    # llama.cpp (vramcalc/stacks/llamacpp.py): --cache-type-k, --cache-type-v, --ubatch-size, --flash-attn
    cache_type_k: CacheType | None = None
    cache_type_v: CacheType | None = None
    n_ubatch: PositiveInt | None = None
    flash_attn: bool | None = None
    versions: dict[str, Annotated[str, Field(min_length=1, max_length=40)]] | None = None
    quantization: Annotated[QuantizationSpec, BuiltOnUse()] | None = None
    adapter: Annotated[AdapterSpec, BuiltOnUse()] | None = None
    # Training techniques of current stacks (vramcalc/stacks/techniques.py, which checks their rules):
    optimizer_in_backward: bool = False
    optimizer_offload: Literal["cpu", "none"] = "none"
    activation_offloading: bool = False
    cross_entropy: CrossEntropy = CrossEntropy.standard
    keep_outputs: bool = False
    # torch.compile with inductor around each transformer block (vramcalc/stacks/inductor.py, which checks its rules)
    compile: bool = False
    _pure_meant: bool = PrivateAttr(default=False)

    @model_validator(mode="wrap")
    @classmethod
    def _pure_spelling(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> "Workload":
        """``precision: pure-fp16`` (or ``pure-bf16``) is ``fp16`` (``bf16``) said to be meant."""
        meant = (
            isinstance(data, dict) and isinstance(data.get("precision"), str) and data["precision"] in PURE_PRECISIONS
        )
        workload: Workload = handler({**data, "precision": PURE_PRECISIONS[data["precision"]]} if meant else data)
        workload._pure_meant = meant
        return workload

    @property
    def pure_meant(self) -> bool:
        """Whether the spec wrote ``pure-fp16``/``pure-bf16``: pure 16-bit training is what it means."""
        return self._pure_meant

    @field_serializer("precision")
    def _dump_precision(self, precision: Precision) -> Precision | str:
        """The spelling given stays when the workload is written out and read again (flag overrides)."""
        return f"pure-{precision.value}" if self._pure_meant else precision

    @model_validator(mode="before")
    @classmethod
    def _context_from_prompt(cls, data: Any) -> Any:
        """``seq_len`` (the total context) defaults to ``prompt_len + max_new_tokens``; a pinned PyTorch
        before 2.0 has its own defaults (:func:`vramcalc.spec.versions.torch_defaults`)."""
        data = litgpt_defaults(torch_defaults(data))
        if not isinstance(data, dict) or data.get("seq_len") is not None:
            return data
        if data.get("prompt_len") is None or data.get("max_new_tokens") is None:
            return data
        try:
            prompt = parse_count(data["prompt_len"], "prompt_len")
            total = prompt + parse_count(data["max_new_tokens"], "max_new_tokens")
        except UnitError:
            return data  # the field validators report the bad value
        return {**data, "seq_len": total}

    @field_validator("versions", mode="before")
    @classmethod
    def _known_libraries(cls, value: Any) -> Any:
        return known_libraries(value)

    @field_validator("quantization", mode="before")
    @classmethod
    def _quantization_name(cls, value: Any) -> Any:
        return name_to_mapping(value, "method")

    @model_validator(mode="after")
    def _generation_rules(self) -> "Workload":
        llm_keys = (
            "prompt_len",
            "max_new_tokens",
            "use_cache",
            "runtime",
            "kv_cache_dtype",
            "kv_block_size",
            *STATIC_CACHE_KEYS,
        )
        serving = ("memory_utilization", "max_model_len", "max_num_batched_tokens", "max_num_seqs")
        if self.mode is Mode.train:
            given = [key for key in (*llm_keys, *serving, *LLAMACPP_KEYS) if getattr(self, key) is not None]
            if self.runtime is Runtime.torchtune:  # torchtune's own model code trains too (stacks/torchtune.py)
                given.remove("runtime")
            if given:
                raise ValueError(f"{given[0]}: only valid with mode: inference")
        elif self.adapter is not None:
            raise ValueError("adapter: only valid with mode: train (inference with merged LoRA is the base model)")
        if self.seq_len is not None and self.max_new_tokens is not None and self.max_new_tokens >= self.seq_len:
            raise ValueError(f"max_new_tokens: {self.max_new_tokens} leaves no prompt in seq_len {self.seq_len}")
        if self.seq_len is None or self.prompt_len is None:
            return self
        if self.max_new_tokens is not None and self.prompt_len + self.max_new_tokens != self.seq_len:
            raise ValueError(
                f"seq_len: {self.seq_len} is not prompt_len + max_new_tokens "
                f"({self.prompt_len} + {self.max_new_tokens})"
            )
        if self.prompt_len > self.seq_len:
            raise ValueError(f"prompt_len: {self.prompt_len} is longer than seq_len {self.seq_len} (the total context)")
        return self

    @model_validator(mode="after")
    def _pinned_releases(self) -> "Workload":
        release_rules(self.versions, self.adapter is not None and self.adapter.framework == "peft")
        return self

    @field_validator("precision", mode="before")
    @classmethod
    def _precision_alias(cls, value: Any) -> Any:
        return PRECISION_ALIASES.get(value, value) if isinstance(value, str) else value

    @field_validator("gradient_checkpointing", mode="before")
    @classmethod
    def _bool_checkpointing(cls, value: Any) -> Any:
        if value is True:
            return "full"
        if value is False:
            return "none"
        return value

    @field_validator("mode", mode="before")
    @classmethod
    def _mode_alias(cls, value: Any) -> Any:
        return {"training": "train", "infer": "inference"}.get(value, value) if isinstance(value, str) else value


class Overhead(SpecSection):
    """Runtime memory outside the tensors of the step (reported as separate lines)."""

    cuda_context: ByteSize | None = None
    allocator_reserve: Fraction | None = None
    #: NCCL's buffers per GPU with several GPUs, outside PyTorch's allocator (default: vramcalc/stacks/nccl.py).
    nccl: ByteSize | None = None


class Spec(SpecSection):
    """A whole spec file."""

    name: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    model: Annotated[ModelSpec, BuiltOnUse()]
    workload: Annotated[Workload, BuiltOnUse()]
    overhead: Overhead = Overhead()
    target: Annotated[Target, BuiltOnUse()] | None = None
    parallel: Annotated[ParallelSpec, BuiltOnUse()] | None = (
        None  # several GPUs (vramcalc/spec/parallel.py, vramcalc/parallel/layout.py)
    )

    @field_validator("name")
    @classmethod
    def _printable_name(cls, value: str | None) -> str | None:
        """The name is printed to the terminal: no control, line-break or bidi-override characters."""
        for char in value or "":
            if unicodedata.category(char) in ("Cc", "Zl", "Zp") or char in BIDI_CONTROLS:
                raise ValueError(f"contains the control character U+{ord(char):04X}; names are printed to the terminal")
        return value

    @model_validator(mode="after")
    def _inputs_match_architecture(self) -> "Spec":
        vision = self.model.architecture in (Architecture.vit, Architecture.resnet)
        wl = self.workload
        if vision and wl.image_size is None:
            raise ValueError("workload.image_size: required for a vision model")
        if vision and (wl.seq_len is not None or wl.target_len is not None):
            raise ValueError("workload.seq_len: not used by a vision model (give image_size)")
        if not vision and wl.seq_len is None:
            raise ValueError("workload.seq_len: Field required")
        if not vision and (wl.image_size is not None or wl.channels is not None):
            raise ValueError("workload.image_size: only used by vision models (architecture: vit or resnet)")
        if self.model.architecture is Architecture.vit:
            patch = self.model.patch_size or 16
            if wl.image_size is not None and wl.image_size % patch:
                raise ValueError(f"workload.image_size: {wl.image_size} is not a multiple of patch_size {patch}")
        if wl.image_resolution is not None and wl.images is None:
            raise ValueError("workload.image_resolution: only valid with workload.images")
        if wl.images is not None or wl.image_tokens is not None:
            key = "images" if wl.images is not None else "image_tokens"
            if self.model.vision is None:
                raise ValueError(f"workload.{key}: the model has no vision tower (model.vision)")
            if wl.mode is Mode.train:
                raise ValueError(
                    f"workload.{key}: training on images is not modelled (the vision tower's activations while "
                    "it encodes them); a text-only step is"
                )
            if wl.image_resolution is not None and self.model.vision.image_rule is None:
                raise ValueError(
                    "workload.image_resolution: model.vision states no rule for an image's tokens by its size "
                    "(model.vision.image_rule; Llama 4's tiling is not modelled): give model.vision.image_tokens"
                )
            if wl.image_tokens is not None and wl.seq_len is not None and wl.image_tokens > wl.seq_len:
                raise ValueError(f"workload.image_tokens: {wl.image_tokens:,} is more than seq_len {wl.seq_len:,}")
        self._cross_attention_rules()
        checkpoint = self.model.checkpoint
        if checkpoint is not None and not checkpoint.layers_modelled and wl.mode is Mode.train:
            raise ValueError(
                f"workload.mode: train needs every layer modelled; {checkpoint.source} is estimated from its "
                "files (weights, KV cache, first-order activations), for inference and serving only"
            )
        return self

    def _cross_attention_rules(self) -> None:
        """A model whose images enter by cross-attention layers (``model.vision.cross_attention_layers``) is
        modelled for inference in transformers (its KV cache per layer kind); what else would run it is refused."""
        wl, vision = self.workload, self.model.vision
        layers = vision.cross_attention_layers if vision is not None else None
        if layers is None:
            if wl.cross_attention_tokens is not None:
                raise ValueError(
                    "workload.cross_attention_tokens: the model has no cross-attention layers "
                    "(model.vision.cross_attention_layers)"
                )
            return
        if self.model.layers is not None and layers >= self.model.layers:
            raise ValueError(
                f"model.vision.cross_attention_layers: {layers:,} leaves none of the {self.model.layers:,} "
                "layers to attend to the sequence"
            )
        if wl.mode is Mode.train:
            raise ValueError(
                "workload.mode: training a model with cross-attention layers "
                "(model.vision.cross_attention_layers) is not modelled; inference is"
            )
        if self.parallel is not None:
            raise ValueError("parallel: a model with cross-attention layers is modelled on one GPU")
        runtime = wl.runtime or (Runtime.llama_cpp if runs_llamacpp(wl) else None)
        if runtime is None and is_generation(wl):
            runtime = Runtime.vllm
        if runtime is Runtime.vllm:
            raise ValueError(
                "workload.runtime: vllm runs no model with cross-attention layers since 0.11 (its encoder-decoder "
                "runner was removed) and its earlier runner is not modelled; give runtime: hf"
            )
        if runtime is not None and runtime not in CROSS_ATTENTION_RUNTIMES:
            raise ValueError(
                f"workload.runtime: {runtime.value} is not modelled for a model with cross-attention layers; "
                "runtime: hf is"
            )


CROSS_ATTENTION_RUNTIMES = (Runtime.hf,)


def with_image_tokens(spec: Spec) -> Spec:
    """``spec`` with its images' tokens (``workload.images`` x ``model.vision.image_tokens``) added to
    ``seq_len`` and ``prompt_len`` and recorded as ``workload.image_tokens``, and the states its
    cross-attention layers attend to (``images`` x ``model.vision.cross_attention_tokens``) recorded as
    ``workload.cross_attention_tokens``; written out and read again, the spec keeps its lengths (``images``
    is spent)."""
    wl, vision = spec.workload, spec.model.vision
    if wl.images is None or vision is None or wl.seq_len is None:
        return spec
    per_image = vision.image_tokens
    if wl.image_resolution is not None and vision.image_rule is not None:
        from vramcalc.spec.hf_image_tokens import image_tokens

        per_image = image_tokens(vision.image_rule.model_dump(), vision.image_tokens, *wl.image_resolution)
    added = wl.images * per_image
    update: dict[str, Any] = {
        "images": None,
        "image_resolution": None,
        "image_tokens": (wl.image_tokens or 0) + added,
        "seq_len": wl.seq_len + added,
    }
    if vision.cross_attention_tokens is not None:
        update["cross_attention_tokens"] = (wl.cross_attention_tokens or 0) + wl.images * vision.cross_attention_tokens
    if wl.prompt_len is not None:
        update["prompt_len"] = wl.prompt_len + added
    return spec.model_copy(update={"workload": wl.model_copy(update=update)})


#: Workload keys of a generation run (prefill + decode with a KV cache; vramcalc/llm/generation.py).
GENERATION_KEYS = ("prompt_len", "max_new_tokens", "runtime", *OTHER_RUNTIME_KEYS, *LLAMACPP_KEYS, *STATIC_CACHE_KEYS)


def is_generation(wl: Workload) -> bool:
    """True when any KV-cache key is given, or a vLLM release (else: the plain forward of the existing
    inference mode)."""
    return any(getattr(wl, key) is not None for key in GENERATION_KEYS) or "vllm" in (wl.versions or {})


def uses_llm_keys(spec: Spec) -> bool:
    """Whether the spec uses any of the LLM keys (quantization, adapter, experts, KV cache, generation):
    then vramcalc/families/llm.py estimates it, else the estimator's own paths run (without importing it)."""
    wl, m = spec.workload, spec.model
    generation = wl.mode is Mode.inference and is_generation(wl)
    return (
        wl.quantization is not None
        or wl.adapter is not None
        or m.experts is not None
        or wl.use_cache is not None
        or generation
    )


def is_gguf(wl: Workload) -> bool:
    """Whether the workload's weights are a GGUF file type."""
    return wl.quantization is not None and wl.quantization.method in GGUF


def runs_llamacpp(wl: Workload) -> bool:
    """``runtime: llama.cpp``, or a GGUF file type without a runtime (llama.cpp is its default)."""
    return wl.runtime is Runtime.llama_cpp or (wl.runtime is None and is_gguf(wl))
