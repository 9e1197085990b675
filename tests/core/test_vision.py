"""Vision families: exact parameter counts, image inputs, and the ResNet/ViT structure."""

from __future__ import annotations

import pytest

from vramcalc.core.params import count_params
from vramcalc.core.vision import resnet_params, stages
from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.families.resolve import resolve_model
from vramcalc.spec.load import parse_spec


@pytest.mark.parametrize(
    ("depth", "expected"),
    # torchvision's published parameter counts (torchvision.models docs, "Params" column):
    # resnet18 11.7M = 11,689,512; resnet34 21,797,672; resnet50 25,557,032; resnet101 44,549,160;
    # resnet152 60,192,808 (sum(p.numel()) of the ImageNet-1k models)
    [(18, 11_689_512), (34, 21_797_672), (50, 25_557_032), (101, 44_549_160), (152, 60_192_808)],
)
def test_resnet_params_match_torchvision(depth: int, expected: int) -> None:
    assert resnet_params(depth, 3, 1000) == expected


def vit(**workload: object) -> object:
    return parse_spec(
        {
            "model": {"architecture": "vit", "layers": 12, "hidden_size": 768, "heads": 12, "ffn_size": 3072},
            "workload": {"batch_size": 1, "image_size": 224, **workload},
        }
    )


def test_vit_base_params() -> None:
    # google/vit-base-patch16-224 (ViTForImageClassification): 86,567,656 parameters. By hand:
    # class token 768 + positions 197 x 768 + patch conv 3 x 16 x 16 x 768 + 768 = 742,656;
    # 12 blocks x 7,087,872; final LayerNorm 1,536; classifier 768 x 1000 + 1000 = 769,000
    spec = vit()
    shape, _ = resolve_model(spec.model, spec.workload)
    assert count_params(shape) == 742_656 + 12 * 7_087_872 + 1_536 + 769_000 == 86_567_656
    assert shape.positions == 197  # (224 / 16)^2 patches + the class token


def test_image_inputs_from_the_design_notes() -> None:
    # one 1024 x 1024 RGB image in fp32: 1024 * 1024 * 3 * 4 = 12,582,912 bytes (design notes)
    result = estimate(vit(image_size=1024, mode="inference"))
    assert result.components["inputs"] == 12_582_912
    # ResNet-50 at batch 256, 224 px, fp32: 256 * 3 * 224 * 224 * 4 = 154,140,672 bytes of pixels,
    # plus 256 int64 labels (2,048 B) when training
    spec = parse_spec(
        {"model": {"architecture": "resnet", "depth": 50}, "workload": {"batch_size": 256, "image_size": 224}}
    )
    assert estimate(spec).components["inputs"] == 154_140_672 + 2_048


def test_resnet50_stage_shapes() -> None:
    # He et al. 2016 Table 1: conv2_x 56x56 (256 out), conv3_x 28x28 (512), conv4_x 14x14 (1024), conv5_x 7x7 (2048)
    result = stages(50, 224)
    assert [len(s) for s in result] == [3, 4, 6, 3]
    assert [(s[-1][2].out, s[-1][2].size) for s in result] == [(256, 56), (512, 28), (1024, 14), (2048, 7)]


def test_resnet50_saved_activations_by_hand() -> None:
    # per image, fp32: stem conv + ReLU outputs 2 x 64 x 112^2 = 1,605,632, max-pool output
    # 64 x 56^2 = 200,704 (+ int64 indices); stages (conv outputs, ReLU outputs, block ReLU,
    # shortcut conv outputs) 8,028,160 + 5,820,416 + 4,114,432 + 1,154,048 = 19,117,056 elements
    # (hand sums per stage in the commit introducing this test); pooled features 2048.
    from vramcalc.core.vision import block_saved_bytes, stem_saved_bytes

    per_stage = [sum(block_saved_bytes(b, 1, 4) for b in stage) for stage in stages(50, 224)]
    stats = 2 * 4 * sum(c.out for stage in stages(50, 224) for b in stage for c in b)
    assert sum(per_stage) - stats == 19_117_056 * 4
    assert stem_saved_bytes(224, 1, 4) == (1_605_632 + 200_704) * 4 + 200_704 * 8 + 2 * 64 * 4


@pytest.mark.parametrize(
    ("model", "workload", "message"),
    [
        ({"architecture": "resnet"}, {"batch_size": 1, "image_size": 224}, "depth: required"),
        ({"architecture": "resnet", "depth": 50, "layers": 3}, {"batch_size": 1, "image_size": 224}, "layers"),
        ({"architecture": "resnet", "depth": 51}, {"batch_size": 1, "image_size": 224}, "depth"),
        ({"architecture": "resnet", "depth": 50}, {"batch_size": 1, "seq_len": 224}, "image_size"),
        ({"architecture": "vit", "layers": 2, "hidden_size": 64}, {"batch_size": 1, "image_size": 230}, "multiple"),
        (
            {"architecture": "decoder", "layers": 2, "hidden_size": 64, "vocab_size": 9},
            {"batch_size": 1, "seq_len": 8, "image_size": 224},
            "image_size",
        ),
    ],
)
def test_vision_spec_errors(model: dict[str, object], workload: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_spec({"model": model, "workload": workload})


@pytest.mark.parametrize("checkpointing", ["full", "selective", "selective-op"])
def test_resnet_checkpointing_is_refused(checkpointing: str) -> None:
    """The ResNet estimator has no checkpointed step: the key is refused, not ignored."""
    spec = {
        "model": {"architecture": "resnet", "depth": 50},
        "workload": {"batch_size": 8, "image_size": 224, "gradient_checkpointing": checkpointing},
    }
    with pytest.raises(SpecError, match="gradient_checkpointing: not modelled for architecture: resnet"):
        estimate(parse_spec(spec, "r.yaml"))
