"""The language-model tokens one image of a given size becomes, by each multimodal family's processor in
transformers 5.25 (the ``model.vision.image_rule`` of a spec; ``workload.image_resolution`` names the size).

* ``smart_resize`` (Qwen2-VL, Qwen2.5-VL: ``models/qwen2_vl/image_processing_qwen2_vl.py``, ``smart_resize``):
  each side rounded to a multiple of ``patch`` (patch x spatial merge, 28), then scaled so the area lies
  within ``min_pixels`` and ``max_pixels``; one token per ``patch`` x ``patch`` pixels.
* ``anyres`` (LLaVA-NeXT: ``models/llava_next/processing_llava_next.py``,
  ``LlavaNextProcessor._get_number_of_features``, with ``image_processing_utils.select_best_resolution``): the
  base view's tokens, plus the grid of the best of ``grid_pinpoints`` in ``tile``-pixel tiles of ``tile /
  patch`` patches a side, less the rows or columns that are padding, plus a newline token per row.
* ``longest_edge`` (Pixtral, Mistral 3: ``models/pixtral/image_processing_pixtral.py``,
  ``get_resize_output_image_size``, and ``processing_pixtral.py``): the image scaled down (floored) until its
  longest edge is at most ``longest_edge``, each side rounded up to whole ``patch``-pixel cells (patch x merge,
  28); a token per cell and an ``[IMG_BREAK]`` closing each row (the last one ``[IMG_END]``).
* ``fixed`` (Gemma 3, LLaVA 1.5, Llama 3.2 Vision): every image is resized (Gemma 3: 896 px, 256 tokens after
  pooling; LLaVA 1.5: 336 px) or tiled and padded to ``max_num_tiles`` (Llama 3.2 Vision), so its tokens do not
  depend on its size.
"""

from __future__ import annotations

import math
from typing import Any

from vramcalc.errors import SpecError

#: The rules, by name.
RULES = ("fixed", "smart_resize", "anyres", "longest_edge")
#: Qwen2-VL's processor refuses an image whose sides differ by more than this ratio (``smart_resize``).
MAX_ASPECT = 200


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """transformers' ``smart_resize`` (Qwen2-VL), step by step."""
    if max(height, width) / min(height, width) > MAX_ASPECT:
        raise SpecError(f"workload.image_resolution: {height} x {width} is wider than the processor's 1:200")
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def best_resolution(height: int, width: int, pinpoints: list[list[int]]) -> tuple[int, int]:
    """``select_best_resolution``: the pinpoint that keeps the most of the image, then wastes the least."""
    best, most, least = (pinpoints[0][0], pinpoints[0][1]), 0, math.inf
    for pin_h, pin_w in pinpoints:
        scale = min(pin_w / width, pin_h / height)
        kept = min(int(width * scale) * int(height * scale), width * height)
        wasted = pin_w * pin_h - kept
        if kept > most or (kept == most and wasted < least):
            best, most, least = (pin_h, pin_w), kept, wasted
    return best


def anyres_tokens(height: int, width: int, tile: int, patch: int, base: int, pinpoints: list[list[int]]) -> int:
    """LLaVA-NeXT: ``base`` tokens of the whole image at ``tile`` pixels, plus the unpadded grid and its
    newline tokens (``_get_number_of_features`` and ``_get_unpadded_features``)."""
    best_h, best_w = best_resolution(height, width, pinpoints)
    side = tile // patch
    rows, cols = side * (best_h // tile), side * (best_w // tile)
    if width / height > cols / rows:
        kept = int(round(height * (cols / width), 7))
        rows -= (rows - kept) // 2 * 2
    else:
        kept = int(round(width * (rows / height), 7))
        cols -= (cols - kept) // 2 * 2
    return base + rows * cols + rows


def longest_edge_tokens(height: int, width: int, patch: int, longest_edge: int) -> int:
    """Pixtral: a token per ``patch``-pixel cell of the scaled image and one break per row."""
    ratio = max(height / longest_edge, width / longest_edge)
    if ratio > 1:
        height, width = max(1, math.floor(height / ratio)), max(1, math.floor(width / ratio))
    rows, cols = (height - 1) // patch + 1, (width - 1) // patch + 1
    return rows * (cols + 1)


def image_tokens(rule: dict[str, Any], fixed: int, height: int, width: int) -> int:
    """One ``height`` x ``width`` image's tokens under ``rule`` (a ``model.vision.image_rule`` mapping);
    ``fixed``: the tokens of a ``fixed`` rule."""
    kind, patch, tile = rule["rule"], rule.get("patch") or 0, rule.get("tile") or 0
    if kind == "smart_resize":
        h_bar, w_bar = smart_resize(height, width, patch, rule.get("min_pixels") or 0, rule.get("max_pixels") or 0)
        return (h_bar // patch) * (w_bar // patch)
    if kind == "anyres":
        pinpoints = rule.get("grid_pinpoints") or [[tile, tile]]
        return anyres_tokens(height, width, tile, patch, rule.get("base") or 0, pinpoints)
    if kind == "longest_edge":
        return longest_edge_tokens(height, width, patch, rule.get("longest_edge") or 0)
    return fixed
