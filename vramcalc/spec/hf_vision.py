"""The vision tower and projector of a multimodal transformers config, counted from its ``vision_config``
as transformers builds them: the ``model.vision`` mapping of a spec (its parameters, its width and depth,
and the tokens one image becomes in the language model's sequence).

Each count is the sum of the modules' parameters in transformers' modeling files (cited per family),
checked in tests against the same classes instantiated on PyTorch's meta device with the real configs and
against the checkpoints' published totals (tests/data/multimodal_configs.json). Every field that changes a
count is read here: each family's fields were changed one at a time and recounted with transformers; the
others (heads, window sizes, ``mm_tokens_per_image``, Pixtral's ``image_size``) change none.

The language model is read by its own family's importer, from ``text_config`` with that class's defaults
filled in (:func:`text_config`), or from the top-level fields of Qwen2-VL's flat configs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from vramcalc.errors import SpecError
from vramcalc.spec.hf_image_tokens import longest_edge_tokens
from vramcalc.spec.hf_reader import Config, Model, Reader
from vramcalc.units import quoted

#: A family's counter: the vision mapping of a whole multimodal config, given its language model's config
#: (whose width the projector ends in).
Counter = Callable[[Config, Config, str], Model]


def _vision_reader(config: Config, source: str) -> Reader:
    """The ``vision_config`` fields; absent, the vision config class's defaults (as transformers builds it)."""
    vision = config.get("vision_config")
    if vision is None:
        vision = {}
    if not isinstance(vision, dict):
        raise Reader(config, source).fail("vision_config", "expected the vision tower's config (a JSON object)")
    return Reader(vision, f"{source}: vision_config")


def _text_width(text: Config, source: str) -> int:
    return Reader(text, f"{source}: text_config").need("hidden_size")


def _given(config: Config) -> bool:
    return config.get("vision_config") is not None


def _linear(n_in: int, n_out: int, bias: bool = True) -> int:
    return n_in * n_out + (n_out if bias else 0)


def _vit_layers(layers: int, hidden: int, ffn: int, bias: bool = True) -> int:
    """``layers`` pre-norm ViT blocks: two LayerNorms (weight and bias), q/k/v/out projections and a
    two-layer MLP (SigLIP's ``SiglipEncoderLayer``, Llama 4's ``Llama4VisionEncoderLayer``)."""
    attention = 4 * _linear(hidden, hidden, bias)
    mlp = _linear(hidden, ffn, bias) + _linear(ffn, hidden, bias)
    return layers * (attention + mlp + 2 * 2 * hidden)


#: The fields of a ViT-style vision config, in the order :func:`_vit_fields` returns them.
VIT_FIELDS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_channels", "image_size", "patch_size")


def _vit_fields(r: Reader, defaults: tuple[int, ...]) -> tuple[int, ...]:
    """Width, MLP width, depth, channels, image and patch edge (each its config class's default when
    absent); a patch larger than the image is refused."""
    values = tuple(
        r.count(name, default=default) or default for name, default in zip(VIT_FIELDS, defaults, strict=True)
    )
    if values[5] > values[4]:
        raise r.fail("patch_size", f"{values[5]:,} is larger than image_size {values[4]:,}")
    return values


def siglip_params(r: Reader) -> tuple[int, int, int, int]:
    """A SigLIP vision tower (transformers ``models/siglip/modeling_siglip.py``, ``SiglipVisionTransformer``
    with ``SiglipVisionConfig``'s defaults): the patch convolution with bias, a learned position per patch,
    the blocks, the post LayerNorm, and with ``vision_use_head`` the attention-pooling head
    (``SiglipMultiheadAttentionPoolingHead``: a probe, ``nn.MultiheadAttention``'s in/out projections, a
    LayerNorm and an MLP). Returns the parameters, the width, the depth and the patches per image."""
    hidden, ffn, layers, channels, image, patch = _vit_fields(r, (768, 3072, 12, 3, 224, 16))
    patches = (image // patch) ** 2
    total = channels * patch * patch * hidden + hidden + patches * hidden
    total += _vit_layers(layers, hidden, ffn) + 2 * hidden
    if r.flag("vision_use_head", True):
        head = hidden + _linear(hidden, 3 * hidden) + _linear(hidden, hidden) + 2 * hidden
        total += head + _linear(hidden, ffn) + _linear(ffn, hidden)
    return total, hidden, layers, patches


def gemma3(config: Config, text: Config, source: str) -> Model:
    """Gemma 3 (transformers ``models/gemma3/modeling_gemma3.py``): a SigLIP tower without its head, and
    ``Gemma3MultiModalProjector``: ``mm_soft_emb_norm`` (an RMSNorm of the tower's width) and
    ``mm_input_projection_weight`` (tower width x the language model's width), after an average pool to
    ``mm_tokens_per_image`` tokens (256 by default; no parameters)."""
    r = _vision_reader(config, source)
    tower, hidden, layers, _ = siglip_params(r)
    tokens = Reader(config, source).count("mm_tokens_per_image", default=256) or 256
    projector = hidden + hidden * _text_width(text, source)
    return _mapping(tower + projector, hidden, layers, tokens, "SigLIP") | {"image_rule": FIXED}


def llama4(config: Config, text: Config, source: str) -> Model:
    """Llama 4 (transformers ``models/llama4/modeling_llama4.py``): ``Llama4VisionModel``: the patches
    unfolded into a bias-free linear (``Llama4UnfoldConvolution``), a class embedding and a learned position
    per patch and for it, LayerNorms before and after the blocks, the blocks (``Llama4VisionEncoderLayer``:
    biased q/k/v/o and fc1/fc2, two LayerNorms), and ``Llama4VisionPixelShuffleMLP``, whose bias-free
    ``fc1`` takes ``intermediate_size`` inputs (the pixel-shuffled width) to ``projector_input_dim`` and
    ``fc2`` maps ``projector_output_dim`` to itself; then ``Llama4MultiModalProjector``, a bias-free linear
    from ``vision_output_dim`` to the language model's width. One 336-pixel tile of an image becomes
    (336 / 14)^2 x ``pixel_shuffle_ratio``^2 = 144 tokens; an image is cut into up to 16 tiles and a
    global view, so ``image_tokens`` is one tile's."""
    r = _vision_reader(config, source)
    hidden, ffn, layers, channels, image, patch = _vit_fields(r, (768, 5632, 34, 3, 448, 14))
    shuffle_in = r.count("projector_input_dim", default=4096) or 4096
    shuffle_out = r.count("projector_output_dim", default=4096) or 4096
    output = r.count("vision_output_dim", default=7680) or 7680
    ratio = r.fraction("pixel_shuffle_ratio", 0.5)
    if ratio == 0:
        raise r.fail("pixel_shuffle_ratio", "0 leaves no tokens")
    patches = (image // patch) ** 2
    total = channels * patch * patch * hidden + hidden + (patches + 1) * hidden + 2 * 2 * hidden
    total += _vit_layers(layers, hidden, ffn) + ffn * shuffle_in + shuffle_out * shuffle_out
    projector = output * _text_width(text, source)
    tokens = max(1, int(patches * ratio * ratio))
    return _mapping(total + projector, hidden, layers, tokens, "Llama 4 vision")


def _feature_layers(r: Reader) -> int:
    """How many of the tower's layers feed the projector: one for an index, n for a list of n
    (``vision_feature_layer``; the projector's input is their concatenation)."""
    value = r.config.get("vision_feature_layer")
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return 1
    if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        if len(value) > 1000:
            raise r.fail("vision_feature_layer", f"{len(value):,} layers is more than 1,000")
        return len(value)
    raise r.fail("vision_feature_layer", f"expected a layer index or a list of them, got {quoted(value)}")


def _llava_projector(config: Config, text: Config, source: str, vision_width: int) -> int:
    """``LlavaMultiModalProjector`` (``models/llava/modeling_llava.py``): ``linear_1`` from the tower's
    width times the feature layers to the language model's, GELU, ``linear_2``; biases with
    ``multimodal_projector_bias`` (default true)."""
    r = Reader(config, source)
    width, bias = _text_width(text, source), r.flag("multimodal_projector_bias", True)
    return _linear(vision_width * _feature_layers(r), width, bias) + _linear(width, width, bias)


#: LlavaConfig's tower when ``vision_config`` is absent (``sub_configs_defaults``: CLIP ViT-L/14 at 336
#: pixels); a ``vision_config`` that is given takes ``CLIPVisionConfig``'s own defaults instead.
LLAVA_TOWER = (1024, 4096, 24, 3, 336, 14)
CLIP_DEFAULTS = (768, 3072, 12, 3, 224, 32)


def clip_params(config: Config, source: str) -> tuple[int, int, int, int]:
    """A CLIP vision tower (``models/clip/modeling_clip.py``, ``CLIPVisionModel``): a class embedding, a
    bias-free patch convolution, a learned position per patch and for the class token, the pre and post
    LayerNorms and the blocks. Every layer is built, whichever ``vision_feature_layer`` the projector reads
    (transformers runs them all and takes that layer's hidden states). Returns the parameters, the width,
    the depth and the patch grid's side."""
    r = _vision_reader(config, source)
    fields = _vit_fields(r, CLIP_DEFAULTS if _given(config) else LLAVA_TOWER)
    hidden, ffn, layers, channels, image, patch = fields
    side = image // patch
    total = hidden + channels * patch * patch * hidden + (side * side + 1) * hidden + 2 * hidden
    return total + _vit_layers(layers, hidden, ffn) + 2 * hidden, hidden, layers, side


def _llava_tokens(config: Config, source: str, side: int) -> int:
    """One image's tokens: a token per patch, and the class token's with ``vision_feature_select_strategy:
    full``."""
    return side * side + (Reader(config, source).text("vision_feature_select_strategy", "default") == "full")


#: The rule of a family whose image tokens do not depend on the image's size (hf_image_tokens.py).
FIXED: Model = {"rule": "fixed"}
#: LlavaNextConfig's ``image_grid_pinpoints`` when the config has none.
LLAVA_NEXT_PINPOINTS = [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]]


def tower_patch(config: Config, source: str) -> int:
    """The CLIP tower's patch edge, as :func:`clip_params` reads it."""
    return _vit_fields(_vision_reader(config, source), CLIP_DEFAULTS if _given(config) else LLAVA_TOWER)[5]


def _pinpoints(config: Config, source: str) -> list[list[int]]:
    """``image_grid_pinpoints``: the grids (height, width in pixels) LLaVA-NeXT tiles an image into."""
    value = config.get("image_grid_pinpoints")
    if value is None:
        return LLAVA_NEXT_PINPOINTS
    ok = isinstance(value, list) and 0 < len(value) <= 100
    ok = ok and all(isinstance(pin, list) and len(pin) == 2 for pin in value)
    ok = ok and all(isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 10**6 for pin in value for v in pin)
    if not ok:
        raise Reader(config, source).fail(
            "image_grid_pinpoints", f"expected [height, width] pairs, got {quoted(value)}"
        )
    return value


def llava(config: Config, text: Config, source: str) -> Model:
    """LLaVA (``models/llava/modeling_llava.py``): a CLIP tower and ``LlavaMultiModalProjector``; one
    image is a token per patch (576 at 336 pixels in 14-pixel patches)."""
    tower, hidden, layers, side = clip_params(config, source)
    projector = _llava_projector(config, text, source, hidden)
    tokens = _llava_tokens(config, source, side)
    return _mapping(tower + projector, hidden, layers, tokens, "CLIP") | {"image_rule": FIXED}


def llava_next(config: Config, text: Config, source: str) -> Model:
    """LLaVA-NeXT (``models/llava_next/modeling_llava_next.py``): LLaVA's tower and projector and
    ``image_newline``, a parameter of the language model's width. An image is cut into tiles of the
    tower's size on a grid of ``image_grid_pinpoints``; a 672 x 672 image (a 2 x 2 grid at 336 pixels) is
    the base view's 576 tokens and the grid's 48 x 48, with a newline token closing each of its 48 rows:
    2,928 tokens, which ``image_tokens`` holds (2 x 2 tiles of the tower's side)."""
    tower, hidden, layers, side = clip_params(config, source)
    projector = _llava_projector(config, text, source, hidden) + _text_width(text, source)
    base = _llava_tokens(config, source, side)
    tokens = base + (2 * side) ** 2 + 2 * side
    patch = tower_patch(config, source)
    rule = {
        "rule": "anyres",
        "patch": patch,
        "tile": side * patch,
        "base": base,
        "grid_pinpoints": _pinpoints(config, source),
    }
    return _mapping(tower + projector, hidden, layers, tokens, "CLIP") | {"image_rule": rule}


#: Mistral3Config's Pixtral tower when ``vision_config`` is absent; a given one takes PixtralVisionConfig's
#: defaults (1024-pixel images in 16-pixel patches).
MISTRAL3_TOWER = (1024, 4096, 24, 3, 1540, 14)
PIXTRAL_DEFAULTS = (1024, 4096, 24, 3, 1024, 16)


def mistral3(config: Config, text: Config, source: str) -> Model:
    """Mistral 3 (``models/mistral3/modeling_mistral3.py``) with a Pixtral tower
    (``models/pixtral/modeling_pixtral.py``, ``PixtralVisionModel``): a bias-free patch convolution, an
    RMSNorm before the blocks, bias-free attention and gated MLP blocks with two RMSNorms, no learned
    positions (2-D rotary); then ``Mistral3MultiModalProjector``: an RMSNorm, the patch merger (a bias-free
    linear from ``spatial_merge_size``^2 patches to one) and LLaVA's two linears. An image at the tower's
    ``image_size`` is the processor's (image / (patch x merge))^2 tokens and an ``[IMG_BREAK]`` per row (the last
    ``[IMG_END]``): 55 x 56 = 3,080 at 1540 pixels, the largest one (``image_rule``: longest_edge)."""
    r = _vision_reader(config, source)
    hidden, ffn, layers, channels, image, patch = _vit_fields(r, PIXTRAL_DEFAULTS if _given(config) else MISTRAL3_TOWER)
    top = Reader(config, source)
    merge = top.count("spatial_merge_size", default=2) or 2
    tower = channels * patch * patch * hidden + hidden + layers * (4 * hidden * hidden + 3 * hidden * ffn + 2 * hidden)
    width, bias = _text_width(text, source), top.flag("multimodal_projector_bias", False)
    projector = hidden + merge * merge * hidden * hidden + _linear(hidden * _feature_layers(top), width, bias)
    projector += _linear(width, width, bias)
    cell = patch * merge
    rule = {"rule": "longest_edge", "patch": cell, "longest_edge": image}
    tokens = longest_edge_tokens(image, image, cell, image)
    return _mapping(tower + projector, hidden, layers, tokens, "Pixtral") | {"image_rule": rule}


#: The image Qwen2-VL's ``image_tokens`` is for: 1,024 x 1,024 pixels, resized by the processor's
#: ``smart_resize`` to multiples of 28 (1,036 x 1,036), one token per 28 x 28 pixels: 37^2 = 1,369.
QWEN_IMAGE = 1024


def _qwen_fields(r: Reader, hidden_name: str, hidden_default: int) -> tuple[int, ...]:
    """Width, depth, channels, patch, temporal patch and merge size of a Qwen2-VL / Qwen2.5-VL tower
    (``in_channels``: the spelling ``in_chans`` of the Hub's configs is not read by transformers)."""
    names = [(hidden_name, hidden_default), ("depth", 32), ("in_channels", 3), ("patch_size", 14)]
    names += [("temporal_patch_size", 2), ("spatial_merge_size", 2)]
    return tuple(r.count(name, default=default) or default for name, default in names)


#: The processors' pixel bounds (``min_pixels``, ``max_pixels`` in the preprocessor_config.json of the
#: Qwen2-VL and Qwen2.5-VL Instruct repositories: 56 x 56 and 28 x 28 x 16,384).
QWEN_PIXELS = (3136, 12845056)


def _qwen_tokens(patch: int, merge: int) -> int:
    factor = patch * merge
    side = max(1, round(QWEN_IMAGE / factor))
    return side * side


def _qwen_rule(patch: int, merge: int) -> Model:
    return {"rule": "smart_resize", "patch": patch * merge, "min_pixels": QWEN_PIXELS[0], "max_pixels": QWEN_PIXELS[1]}


def _qwen_merger(embed: int, merge: int, out: int, norm: int) -> int:
    """The patch merger (``PatchMerger``): a norm of the tower's width (``norm`` parameters), then
    ``merge``^2 patches' features through a square linear, GELU and a linear to the language model's width,
    both with biases."""
    wide = embed * merge * merge
    return norm + _linear(wide, wide) + _linear(wide, out)


def qwen2_vl(config: Config, text: Config, source: str) -> Model:
    """Qwen2-VL (``models/qwen2_vl/modeling_qwen2_vl.py``, ``Qwen2VisionTransformerPretrainedModel``): a
    bias-free 3-D patch convolution (``temporal_patch_size`` frames), blocks with two LayerNorms, a fused
    biased qkv and output projection and an MLP of ``mlp_ratio`` x the width, then ``PatchMerger`` (a
    LayerNorm) to ``vision_config.hidden_size``. No learned positions (rotary)."""
    r = _vision_reader(config, source)
    embed, depth, channels, patch, temporal, merge = _qwen_fields(r, "embed_dim", 1280)
    ratio = r.config.get("mlp_ratio", 4)
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 1000:
        raise r.fail("mlp_ratio", f"expected a number from 0 to 1,000, got {quoted(ratio)}")
    ffn = int(embed * ratio)
    out = r.count("hidden_size", default=3584) or 3584
    tower = channels * temporal * patch * patch * embed + _vit_layers(depth, embed, ffn)
    merger = _qwen_merger(embed, merge, out, 2 * embed)
    return _mapping(tower + merger, embed, depth, _qwen_tokens(patch, merge), "Qwen2-VL ViT") | {
        "image_rule": _qwen_rule(patch, merge)
    }


def qwen2_5_vl(config: Config, text: Config, source: str) -> Model:
    """Qwen2.5-VL (``models/qwen2_5_vl/modeling_qwen2_5_vl.py``): Qwen2-VL's tower with RMSNorms and a
    biased gated MLP of ``intermediate_size`` (``Qwen2_5_VLMLP``), and a merger whose norm is an RMSNorm, to
    ``out_hidden_size``. Windowed attention in most blocks changes no parameter."""
    r = _vision_reader(config, source)
    embed, depth, channels, patch, temporal, merge = _qwen_fields(r, "hidden_size", 3584)
    ffn = r.count("intermediate_size", default=3420) or 3420
    out = r.count("out_hidden_size", default=3584) or 3584
    block = 4 * embed * embed + 4 * embed + 3 * _linear(embed, ffn) - ffn + embed + 2 * embed
    # q/k/v/o with biases; gate and up (embed -> ffn) and down (ffn -> embed) with biases; two RMSNorms
    tower = channels * temporal * patch * patch * embed + depth * block
    merger = _qwen_merger(embed, merge, out, embed)
    return _mapping(tower + merger, embed, depth, _qwen_tokens(patch, merge), "Qwen2.5-VL ViT") | {
        "image_rule": _qwen_rule(patch, merge)
    }


#: MllamaVisionConfig's tower when ``vision_config`` is absent (448-pixel tiles); its aspect ratios.
MLLAMA_TOWER = (1280, 5120, 32, 3, 448, 14)
MLLAMA_ASPECT_RATIOS = 8
#: MllamaTextModel's embedding has 8 rows beyond ``vocab_size`` (the ``<|image|>`` token is row 128,256).
MLLAMA_EXTRA_EMBEDDINGS = 8
#: MllamaTextConfig's cross-attention layers when ``text_config`` does not list them (the 11B model's).
MLLAMA_CROSS_LAYERS = [3, 8, 13, 18, 23, 28, 33, 38]


def _cross_layers(text: Config, source: str) -> int:
    """How many of the language model's layers are cross-attention layers: ``MllamaTextModel`` builds layer
    i as one when ``i in cross_attention_layers``, so repeated indices and those at or past
    ``num_hidden_layers`` name none."""
    r = Reader(text, f"{source}: text_config")
    value = text.get("cross_attention_layers")
    value = MLLAMA_CROSS_LAYERS if value is None else value
    layers = r.need("num_hidden_layers")
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise r.fail("cross_attention_layers", f"expected a list of layer indices, got {quoted(value)}")
    cross = len({v for v in value if 0 <= v < layers})
    if cross >= layers:
        raise r.fail("cross_attention_layers", "leaves no self-attention layer")
    if not cross:
        raise r.fail("cross_attention_layers", f"names no layer below num_hidden_layers {layers:,} (no image input)")
    return cross


def mllama(config: Config, text: Config, source: str) -> Model:
    """Llama 3.2 Vision (transformers ``models/mllama/modeling_mllama.py``). ``MllamaVisionModel``: a
    bias-free patch convolution, a class embedding, ``MllamaPrecomputedPositionEmbedding`` (a gate, a learned
    position per patch and for the class token, and a tile embedding of every position in every tile for each
    aspect ratio and none: (ratios + 1) x ``max_num_tiles`` x positions x width), the pre- and post-tile
    ``MllamaPrecomputedAspectRatioEmbedding`` ((ratios + 1) x ``max_num_tiles`` x width and a gate each),
    ``layernorm_pre`` and ``layernorm_post``, ``num_hidden_layers`` local blocks and ``num_global_layers``
    gated global blocks (``MllamaVisionEncoderLayer``: bias-free q/k/v/o, biased fc1/fc2, two LayerNorms; a
    global block adds two scalar gates); then ``multi_modal_projector``, a biased linear from
    ``vision_output_dim`` to the language model's width.

    The language model (``MllamaTextModel``) is a Llama whose ``cross_attention_layers`` are
    ``MllamaCrossAttentionDecoderLayer``: the same q/k/v/o and MLP shapes, no self-attention, and beyond a
    Llama layer a q and a k RMSNorm of ``head_dim`` and two scalar gates; its embedding has
    ``vocab_size + 8`` rows (the LM head ``vocab_size``). Those image parameters of the language model (the 8
    rows and the cross-attention layers' norms and gates) are counted here with the tower, so the language
    model reads as a Llama. One image is one ``<|image|>`` token in the text; the cross-attention layers attend
    to (and cache) ``max_num_tiles`` x (patches + 1) vision states per image, every tile padded in
    (``MllamaImageProcessor`` pads to ``max_image_tiles``): 4 x 1,601 = 6,404 at 560 pixels."""
    r = _vision_reader(config, source)
    hidden, ffn, layers, channels, image, patch = _vit_fields(r, MLLAMA_TOWER)
    global_layers = r.count("num_global_layers", default=8) or 8
    tiles = r.count("max_num_tiles", default=4) or 4
    output = r.count("vision_output_dim", default=7680) or 7680
    ratios = r.config.get("supported_aspect_ratios")
    if ratios is not None and (not isinstance(ratios, list) or not ratios or len(ratios) > 1000):
        raise r.fail("supported_aspect_ratios", f"expected a list of [width, height] tile grids, got {quoted(ratios)}")
    aspect_ids = (len(ratios) if ratios is not None else MLLAMA_ASPECT_RATIOS) + 1
    positions = (image // patch) ** 2 + 1
    embeddings = channels * patch * patch * hidden + hidden + 1 + positions * hidden
    embeddings += aspect_ids * tiles * positions * hidden + 2 * (aspect_ids * tiles * hidden + 1) + 2 * 2 * hidden
    attention_free = _vit_layers(1, hidden, ffn) - 4 * hidden  # the bias-free q/k/v/o
    blocks = layers * attention_free + global_layers * (attention_free + 2)
    width = _text_width(text, source)
    cross = _cross_layers(text, source)
    heads = Reader(text, f"{source}: text_config").need("num_attention_heads")
    language = MLLAMA_EXTRA_EMBEDDINGS * width + cross * (2 * (width // heads) + 2)
    params = embeddings + blocks + _linear(output, width) + language
    mapping = _mapping(params, hidden, layers + global_layers, 1, "Mllama vision")
    return mapping | {"cross_attention_layers": cross, "cross_attention_tokens": tiles * positions, "image_rule": FIXED}


def _mapping(params: int, hidden: int, layers: int, image_tokens: int, encoder: str) -> Model:
    return {"params": params, "hidden_size": hidden, "layers": layers, "image_tokens": image_tokens, "encoder": encoder}


@dataclass(frozen=True)
class Wrapper:
    """A multimodal config type: the model_type of its language model when its ``text_config`` does not
    say, the counter of its vision tower, and whether its language model's fields may sit at the top level
    (Qwen2-VL's Hub configs)."""

    text_type: str
    counter: Counter
    flat: bool = False
    #: whose ``tie_word_embeddings`` ties the LM head to the embedding: the wrapper's ("wrapper": the
    #: wrapper class holds the LM head), the text config's ("text": the LM head is inside the language model,
    #: Llama4ForCausalLM), or nobody's ("never": Mllama's LM head and embedding differ in rows)
    tie_by: str = "wrapper"
    tied: bool = False  # the wrapper config class's tie_word_embeddings default
    text_ties: bool = False  # a text config that ties carries it to the wrapper (pre-v5 configs kept it there)


#: The multimodal model types vramcalc counts, by the wrapper's model_type.
WRAPPERS: dict[str, Wrapper] = {
    "gemma3": Wrapper("gemma3_text", gemma3, tied=True),
    "llama4": Wrapper("llama4_text", llama4, tie_by="text"),
    "llava": Wrapper("llama", llava, text_ties=True),
    "llava_next": Wrapper("llama", llava_next),
    "mistral3": Wrapper("mistral", mistral3, tied=True),
    "mllama": Wrapper("mllama_text_model", mllama, tie_by="never"),
    "qwen2_vl": Wrapper("qwen2_vl_text", qwen2_vl, flat=True, text_ties=True),
    "qwen2_5_vl": Wrapper("qwen2_5_vl_text", qwen2_5_vl, flat=True, text_ties=True),
}

#: The class defaults of the language models' configs (transformers 5.25, ``AutoConfig.for_model(type)``)
#: for the fields vramcalc reads: ``save_pretrained`` writes a nested ``text_config`` as its difference
#: from them (Gemma 3's holds six fields), and transformers fills the rest from them. ``head_dim`` and
#: ``num_key_value_heads`` only where they are defaults of their own (LlamaConfig's follow the heads).
TEXT_DEFAULTS: dict[str, Config] = {
    "llama": {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
              "vocab_size": 32000, "max_position_embeddings": 2048},
    "mistral": {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
                "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 131072,
                "sliding_window": 4096},
    "gemma3_text": {"hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26, "num_attention_heads": 8,
                    "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 262208,
                    "max_position_embeddings": 131072, "sliding_window": 4096, "_sliding_window_pattern": 6},
    "llama4_text": {"hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
                    "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
                    "vocab_size": 202048, "max_position_embeddings": 131072, "num_local_experts": 16,
                    "num_experts_per_tok": 1, "interleave_moe_layer_step": 1, "attention_chunk_size": 8192,
                    "use_qk_norm": True},
    "qwen2_vl_text": {"hidden_size": 8192, "intermediate_size": 29568, "num_hidden_layers": 80,
                      "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 152064,
                      "max_position_embeddings": 32768, "use_sliding_window": False},
}  # fmt: skip
TEXT_DEFAULTS["qwen2_5_vl_text"] = TEXT_DEFAULTS["qwen2_vl_text"]
TEXT_DEFAULTS["mllama_text_model"] = {
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 40, "num_attention_heads": 32,
    "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072, "rope_theta": 500000.0,
}  # fmt: skip
#: Language-model types whose layers are another type's (Qwen2-VL's text model is Qwen2 with 3-D rotary; Mllama's
#: self-attention layers are a bias-free Llama's, MistralConfig's reading).
TEXT_ALIASES = {"qwen2_vl_text": "qwen2", "qwen2_5_vl_text": "qwen2", "mllama_text_model": "mistral"}
#: Top-level fields of a flat config that are the wrapper's, not the language model's.
WRAPPER_FIELDS = ("vision_config", "text_config", "model_type", "architectures", "_name_or_path")


def text_config(config: Config, model_type: str, source: str) -> Config:
    """The language model's config of a multimodal ``config``, under the model_type vramcalc reads it as:
    a nested ``text_config`` with its class's defaults filled in, or a flat config's own fields. The head
    is the wrapper's: its class (``architectures``: ``*ForConditionalGeneration`` an LM head, ``*Model`` none,
    ``Gemma3ForSequenceClassification`` a score of the wrapper's labels)."""
    wrapper = WRAPPERS[model_type]
    text = config.get("text_config")
    head = {name: config.get(name) for name in ("architectures", "id2label", "num_labels")}
    if text is None and wrapper.flat:
        return (
            {key: value for key, value in config.items() if key not in WRAPPER_FIELDS}
            | head
            | {
                "model_type": TEXT_ALIASES.get(wrapper.text_type, wrapper.text_type),
            }
        )
    if not isinstance(text, dict):
        raise SpecError(f"{source}: text_config: expected the text model's config (a JSON object)")
    text_type = text.get("model_type") or wrapper.text_type
    defaults = TEXT_DEFAULTS.get(text_type, {}) if isinstance(text_type, str) else {}
    named = TEXT_ALIASES.get(text_type, text_type) if isinstance(text_type, str) else text_type
    return {**defaults, **text, **head, "model_type": named, "_name_or_path": ""}


def tied(config: Config, model_type: str, text_tied: bool, source: str) -> bool:
    """Whether the wrapper's LM head shares the embedding's weight. transformers 5 ties the weights each
    model class names in ``_tied_weights_keys`` by that model's own config (``PreTrainedModel
    .get_expanded_tied_weights_keys``, modeling_utils.py): a wrapper class that holds the LM head
    (``Gemma3ForConditionalGeneration``, ``LlavaForConditionalGeneration``, ...) by the wrapper's
    ``tie_word_embeddings`` (its class's default when absent), which ``LlavaConfig``, ``Qwen2VLConfig`` and
    ``Qwen2_5_VLConfig`` turn on when the text config ties (their ``__post_init__``);
    ``Llama4ForConditionalGeneration``'s LM head is its ``Llama4ForCausalLM``'s, tied by the text config.

    transformers 5 writes the wrapper's ``tie_word_embeddings``; a config without one was written before
    (transformers 4 tied by the text config, and the checkpoint stores what that built: Mistral Small 3.1's
    separate ``lm_head.weight``), so the text config's tying holds there (``text_tied``: its field, else its
    class's default)."""
    wrapper = WRAPPERS[model_type]
    if wrapper.tie_by != "wrapper":
        return wrapper.tie_by == "text" and text_tied
    if config.get("tie_word_embeddings") is None:
        return text_tied
    return Reader(config, source).flag("tie_word_embeddings", wrapper.tied) or (wrapper.text_ties and text_tied)


def vision_of(config: Config, model_type: str, text: Config, source: str) -> tuple[Model | None, list[str]]:
    """The ``model.vision`` mapping of a multimodal config (None for a type without a vision tower) and the
    note on a ``vision_config`` left out (transformers then builds its default tower)."""
    wrapper = WRAPPERS.get(model_type)
    if wrapper is None:
        return None, []
    notes = (
        []
        if _given(config)
        else [f"{model_type}: vision_config not given: the default vision tower transformers builds for it"]
    )
    return wrapper.counter(config, text, source), notes
