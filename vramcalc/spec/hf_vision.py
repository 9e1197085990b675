"""The vision tower and projector of a multimodal transformers config, counted from its ``vision_config``
as transformers builds them: the ``model.vision`` mapping of a spec (its parameters, its width and depth,
and the tokens one image becomes in the language model's sequence).

Each count is the sum of the modules' parameters in transformers' modeling files (cited per family),
checked in tests against the same classes instantiated on PyTorch's meta device with the real configs and
against the checkpoints' published totals. A ``vision_config`` field that changes the count and is not read
here is refused by name, never ignored.
"""

from __future__ import annotations

from collections.abc import Callable

from vramcalc.spec.hf_reader import Config, Model, Reader

#: A family's counter: the vision mapping of a whole multimodal config (its ``vision_config`` and the
#: language model's width, which the projector ends in).
Counter = Callable[[Config, str], Model]


def _vision_reader(config: Config, source: str) -> Reader:
    """The ``vision_config`` fields; absent, the vision config class's defaults (as transformers builds it)."""
    vision = config.get("vision_config")
    if vision is None:
        vision = {}
    if not isinstance(vision, dict):
        raise Reader(config, source).fail("vision_config", "expected the vision tower's config (a JSON object)")
    return Reader(vision, f"{source}: vision_config")


def _text_width(config: Config, source: str) -> int:
    text = config.get("text_config")
    assert isinstance(text, dict)  # model_from_config checked it
    return Reader(text, f"{source}: text_config").need("hidden_size")


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


def gemma3(config: Config, source: str) -> Model:
    """Gemma 3 (transformers ``models/gemma3/modeling_gemma3.py``): a SigLIP tower without its head, and
    ``Gemma3MultiModalProjector``: ``mm_soft_emb_norm`` (an RMSNorm of the tower's width) and
    ``mm_input_projection_weight`` (tower width x the language model's width), after an average pool to
    ``mm_tokens_per_image`` tokens (256 by default; no parameters)."""
    r = _vision_reader(config, source)
    tower, hidden, layers, _ = siglip_params(r)
    tokens = Reader(config, source).count("mm_tokens_per_image", default=256) or 256
    projector = hidden + hidden * _text_width(config, source)
    return _mapping(tower + projector, hidden, layers, tokens, "SigLIP")


def llama4(config: Config, source: str) -> Model:
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
    projector = output * _text_width(config, source)
    tokens = max(1, int(patches * ratio * ratio))
    return _mapping(total + projector, hidden, layers, tokens, "Llama 4 vision")


def _mapping(params: int, hidden: int, layers: int, image_tokens: int, encoder: str) -> Model:
    return {"params": params, "hidden_size": hidden, "layers": layers, "image_tokens": image_tokens, "encoder": encoder}


#: The multimodal model types whose vision tower is counted, by the wrapper's model_type.
VISION: dict[str, Counter] = {"gemma3": gemma3, "llama4": llama4}


def vision_of(config: Config, model_type: str, source: str) -> tuple[Model | None, list[str]]:
    """The ``model.vision`` mapping of a multimodal config (None for a type without a vision tower) and the
    note on a ``vision_config`` left out (transformers then builds its class's default tower)."""
    counter = VISION.get(model_type)
    if counter is None:
        return None, []
    notes = (
        []
        if config.get("vision_config") is not None
        else [f"{model_type}: vision_config not given: the default vision tower transformers builds for it"]
    )
    return counter(config, source), notes
