"""``workload.image_resolution``: an image's tokens by its family's processor (vramcalc/spec/hf_image_tokens.py).

Expected tokens are worked out by hand from transformers 5.25's processors, and were checked against those
functions run offline (``smart_resize``, ``LlavaNextProcessor._get_number_of_features`` with
``select_best_resolution``, Pixtral's ``_num_image_tokens``): Qwen2-VL 768 x 1024 -> 999, 1080 x 1920 -> 2,691;
LLaVA-NeXT 768 x 1024 -> 2,340, 336 x 336 -> 1,176; Pixtral 768 x 1024 -> 1,064, 1080 x 1920 -> 1,736.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramcalc.spec.hf_import import model_from_config
from vramcalc.spec.load import parse_spec
from vramcalc.spec.models import with_image_tokens

CASES = {
    c["repo"]: c["config"]
    for c in json.loads((Path(__file__).resolve().parents[1] / "data" / "multimodal_configs.json").read_text("utf-8"))[
        "models"
    ]
}


def _tokens(repo: str, height: int, width: int) -> int:
    model, _ = model_from_config(CASES[repo], repo)
    workload = {"mode": "inference", "batch_size": 1, "seq_len": 10, "images": 1, "image_resolution": [height, width]}
    spec = with_image_tokens(parse_spec({"model": model, "workload": workload}))
    assert spec.workload.image_resolution is None
    return spec.workload.image_tokens or 0


@pytest.mark.parametrize(
    ("repo", "size", "tokens"),
    [
        # smart_resize, factor 28: round(768 / 28) = 27, round(1024 / 28) = 37 -> 27 x 37
        ("Qwen/Qwen2-VL-7B-Instruct", (768, 1024), 27 * 37),
        # 1080 / 28 = 38.6 -> 39, 1920 / 28 = 68.6 -> 69 (1,092 x 1,932 = 2.1 MP, under max_pixels 12,845,056)
        ("Qwen/Qwen2.5-VL-7B-Instruct", (1080, 1920), 39 * 69),
        # anyres: of the pinpoints (height x width) 336x672, 672x336, 672x672, 1008x336, 336x1008, 672 x 672
        # keeps the most of a 768 x 1024 image (scale 0.65625: 672 x 504 px); a 2 x 2 grid of 24-patch tiles is
        # 48 x 48 patches; the image is wider (1.33 > 1), so rows: round(768 x 48 / 1024) = 36 (padding 6 a
        # side) -> 36 x 48 + 36 newlines + 576 base = 2,340
        ("llava-hf/llava-v1.6-mistral-7b-hf", (768, 1024), 2_340),
        # 336 x 336: best pinpoint 336 x 672 (keeps all 112,896 px, wastes the least) -> 24 x 48 patches;
        # aspect 1 < 2, columns: round(336 x 24 / 336) = 24 -> 24 x 24 + 24 newlines + 576 base = 1,176
        ("llava-hf/llava-v1.6-mistral-7b-hf", (336, 336), 576 + 24 + 576),
        # longest edge 1540 (no scaling), cells of 28: ceil(768/28) = 28 rows, ceil(1024/28) = 37 -> 28 x 38
        ("mistralai/Mistral-Small-3.1-24B-Instruct-2503", (768, 1024), 28 * 38),
        # 1080 x 1920 scaled by 1920/1540: 866 x 1540 -> 31 rows x 55 cells -> 31 x 56
        ("mistralai/Mistral-Small-3.1-24B-Instruct-2503", (1080, 1920), 31 * 56),
        # fixed: Gemma 3's 256, LLaVA 1.5's 576, Llama 3.2 Vision's one <|image|> token
        ("google/gemma-3-4b-it", (768, 1024), 256),
        ("llava-hf/llava-1.5-7b-hf", (1080, 1920), 576),
        ("meta-llama/Llama-3.2-11B-Vision", (1080, 1920), 1),
    ],
)
def test_tokens_by_the_processors_rule(repo: str, size: tuple[int, int], tokens: int) -> None:
    assert _tokens(repo, *size) == tokens


def test_llama4_tiling_by_size_is_refused() -> None:
    with pytest.raises(Exception, match="workload.image_resolution: model.vision states no rule"):
        _tokens("meta-llama/Llama-4-Scout-17B-16E-Instruct", 768, 1024)
