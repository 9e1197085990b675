"""ResNet (18/34/50/101/152) parameters and activation bytes, stage by stage.

Modelled on Hugging Face ``ResNetForImageClassification`` (microsoft/resnet-*, the torchvision
v1.5 layout: stride on the 3x3 convolution, a 1x1 projection shortcut where the shape changes).
Each ``ResNetConvLayer`` is conv -> BatchNorm -> ReLU: autograd keeps the convolution output (BatchNorm's
input), the ReLU output (ReLU's backward reads it; it is also the next convolution's input) and
BatchNorm's fp32 mean and inverse std per channel. The last convolution of a block has no ReLU: its
BatchNorm output goes into the residual add and the block's ReLU output is kept. The stem keeps its
convolution and ReLU outputs, the max-pool output and the pool's int64 indices.
Under autocast convolutions run in 16 bits (the input image gets a 16-bit copy) and BatchNorm/ReLU
keep that dtype, so activations are 2 bytes; pure precisions use the parameter dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

from vramcalc.choices import Checkpointing, Mode
from vramcalc.core.optimizer import DEFAULT_OPTIMIZER, DEFAULT_OPTIMIZER_NOTE
from vramcalc.core.stack import Stack
from vramcalc.core.workload import DTYPES, input_bytes_images, workspace_bytes
from vramcalc.errors import SpecError
from vramcalc.spec.models import Spec
from vramcalc.units import FP32

#: Blocks per stage (He et al. 2016, Table 1).
STAGE_BLOCKS = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}
#: Bottleneck inner widths per stage; block output = 4 x width (basic blocks: output = width).
STAGE_WIDTHS = (64, 128, 256, 512)
BOTTLENECK_EXPANSION = 4
STEM_WIDTH = 64
INDEX = 8


@dataclass(frozen=True)
class Conv:
    """One conv (no bias) + BatchNorm (+ ReLU when ``relu``), output ``out`` channels at ``size`` x ``size``."""

    cin: int
    out: int
    kernel: int
    size: int
    relu: bool
    in_size: int = 0

    @property
    def params(self) -> int:
        return self.cin * self.out * self.kernel**2 + 2 * self.out  # conv weight + BN weight and bias


def _block(cin: int, width: int, size_in: int, stride: int, bottleneck: bool) -> list[Conv]:
    size = size_in // stride
    if bottleneck:
        out = width * BOTTLENECK_EXPANSION
        convs = [
            Conv(cin, width, 1, size_in, True, size_in),
            Conv(width, width, 3, size, True, size_in),
            Conv(width, out, 1, size, False, size),
        ]
    else:
        out = width
        convs = [Conv(cin, width, 3, size, True, size_in), Conv(width, width, 3, size, False, size)]
    if cin != out or stride != 1:
        convs.append(Conv(cin, out, 1, size, False, size_in))  # projection shortcut
    return convs


def stages(depth: int, image_size: int) -> list[list[list[Conv]]]:
    """Stages -> blocks -> conv layers, with spatial sizes for a square ``image_size`` input."""
    bottleneck = depth >= 50
    size = image_size // 4  # stride-2 stem convolution, then stride-2 max-pool
    cin = STEM_WIDTH
    result = []
    for index, (n_blocks, width) in enumerate(zip(STAGE_BLOCKS[depth], STAGE_WIDTHS, strict=True)):
        blocks = []
        for b in range(n_blocks):
            stride = 2 if index > 0 and b == 0 else 1
            blocks.append(_block(cin, width, size, stride, bottleneck))
            size //= stride
            cin = width * (BOTTLENECK_EXPANSION if bottleneck else 1)
        result.append(blocks)
    return result


def resnet_params(depth: int, channels: int, num_labels: int) -> int:
    """Exact count: stem conv + BN, every conv + BN, and the classifier (2048 x labels + bias for 50+).
    ResNet-50 with 1000 labels: 25,557,032 (torchvision's published figure)."""
    stem = channels * STEM_WIDTH * 7 * 7 + 2 * STEM_WIDTH
    body = sum(c.params for stage in stages(depth, 224) for block in stage for c in block)
    return stem + body + final_width(depth) * num_labels + num_labels


def _conv_saved_elements(conv: Conv) -> int:
    """Per image: conv output (BatchNorm input) and, with ReLU, the ReLU output."""
    return conv.out * conv.size**2 * (2 if conv.relu else 1)


def block_output(block: list[Conv]) -> Conv:
    """The branch's last conv (a bottleneck starts with a 1x1 conv and has three; a basic block two)."""
    return block[2] if block[0].kernel == 1 else block[1]


def final_width(depth: int) -> int:
    return STAGE_WIDTHS[-1] * (BOTTLENECK_EXPANSION if depth >= 50 else 1)


def block_saved_bytes(block: list[Conv], batch: int, act_bytes: int) -> int:
    """One block: its conv layers, BatchNorm statistics and the block's final ReLU output."""
    elements = sum(_conv_saved_elements(c) for c in block)
    out = block_output(block)
    elements += out.out * out.size**2  # ReLU after the residual add
    stats = sum(2 * c.out * FP32 for c in block)
    return batch * elements * act_bytes + stats


def stem_saved_bytes(image_size: int, batch: int, act_bytes: int) -> int:
    """Stem: conv and ReLU outputs at image/2, max-pool output and int64 indices at image/4."""
    half, quarter = image_size // 2, image_size // 4
    elements = 2 * STEM_WIDTH * half**2 + STEM_WIDTH * quarter**2
    return batch * (elements * act_bytes + STEM_WIDTH * quarter**2 * INDEX) + 2 * STEM_WIDTH * FP32


def param_tensors(depth: int, channels: int, num_labels: int) -> list[tuple[int, int, int]]:
    """Parameter tensors as (count, rows, columns) for optimizer-state rounding."""
    tensors = [(1, STEM_WIDTH, channels * 49), (2, STEM_WIDTH, 1)]
    for stage in stages(depth, 224):
        for block in stage:
            for c in block:
                tensors += [(1, c.out, c.cin * c.kernel**2), (2, c.out, 1)]
    return [*tensors, (1, num_labels, final_width(depth)), (1, num_labels, 1)]


def resnet_phases(
    spec: Spec, stack: Stack, *, hopper_or_newer: bool = True
) -> tuple[dict[str, dict[str, int]], int, list[str]]:
    """Phases of a ResNet step (same conventions as :func:`vramcalc.core.dense.estimate`)."""
    from vramcalc.core.optimizer import optimizer_state_bytes_for, optimizer_temp_bytes_for

    wl = spec.workload
    if wl.mode is Mode.train and wl.gradient_checkpointing is not Checkpointing.none:
        raise SpecError("workload.gradient_checkpointing: not modelled for architecture: resnet")
    dt = DTYPES[wl.precision]
    depth, image, batch = spec.model.depth or 50, wl.image_size or 224, wl.batch_size
    channels, labels = wl.channels or 3, spec.model.num_labels or 1000
    derived = resnet_params(depth, channels, labels)
    n_params = spec.model.params or derived
    notes: list[str] = []
    if wl.channels is None:
        notes.append("channels not given: 3")
    if spec.model.num_labels is None:
        notes.append("num_labels not given: 1000 (ImageNet-1k)")
    if wl.mode is Mode.train and wl.optimizer is None:
        notes.append(DEFAULT_OPTIMIZER_NOTE)
    pixels = batch * channels * image**2
    pixel_copy = pixels * dt.compute if dt.amp else 0
    base = {
        "parameters": n_params * dt.param,
        "inputs": input_bytes_images(pixels, dt.param, batch, wl.mode),
        "workspace": workspace_bytes(wl.mode, hopper_or_newer),
    }
    all_stages = stages(depth, image)
    if wl.mode is Mode.inference:
        stem_moment = pixel_copy + batch * 2 * STEM_WIDTH * (image // 2) ** 2 * dt.compute
        transient = max(_inference_bytes(all_stages, image, batch, dt.compute), stem_moment)
        return {"forward": {**base, "activations": transient}}, n_params, notes
    optimizer = wl.optimizer or DEFAULT_OPTIMIZER
    tensors = param_tensors(depth, channels, labels)
    states = optimizer_state_bytes_for(optimizer, tensors, dt.param, stack.optimizer_state_block)
    copies = n_params * dt.compute if dt.amp else 0
    kept = stack.zero_grad_in_place  # allocated from the start of the step
    live = {**base, "optimizer_states": states, **({"gradients": n_params * dt.param} if kept else {})}
    stem = stem_saved_bytes(image, batch, dt.compute) + pixel_copy
    per_stage = [sum(block_saved_bytes(b, batch, dt.compute) for b in stage) for stage in all_stages]
    head = batch * final_width(depth) * dt.compute  # pooled features, saved by the classifier
    forward = {**live, "autocast_weight_copies": copies, "activations": stem + sum(per_stage) + head}
    backward = _backward_sweep(live, copies, stem, per_stage, all_stages, batch, dt, n_params, labels, kept)
    temps = optimizer_temp_bytes_for(optimizer, wl.optimizer_impl, tensors, n_params * dt.param, dt.param)
    step = {**live, "gradients": n_params * dt.param, "temporaries": temps}
    return {"forward": forward, "backward": backward, "optimizer": step}, n_params, notes


def _backward_sweep(
    live: dict[str, int],
    copies: int,
    stem: int,
    per_stage: list[int],
    all_stages: list[list[list[Conv]]],
    batch: int,
    dt: object,
    n_params: int,
    labels: int,
    kept: bool = False,
) -> dict[str, int]:
    """Backward reaches stage k with the activations of stages <= k still kept and the gradients of
    the later stages (and the classifier) already allocated; the gradient flowing through a block is
    its output, its branch and the input-resolution gradient of its first convolution (3 x the block
    output); all of them when ``kept`` (gradients zeroed in place). The peak is the largest of these moments
    and the end of backward."""
    param_bytes = getattr(dt, "param")
    compute = getattr(dt, "compute")
    candidates = []
    for k in range(len(all_stages) - 1, -1, -1):
        classifier = labels * (block_output(all_stages[-1][-1]).out + 1)
        later = sum(c.params for stage in all_stages[k + 1 :] for b in stage for c in b) + classifier
        out = block_output(all_stages[k][-1])
        block_out = batch * out.out * out.size**2 * compute
        candidates.append(
            {
                **live,
                "autocast_weight_copies": copies,
                "activations": stem + sum(per_stage[: k + 1]),
                "gradients": (n_params if kept else later) * param_bytes,
                "temporaries": 3 * block_out,
            }
        )
    candidates.append({**live, "gradients": n_params * param_bytes})
    return max(candidates, key=lambda p: sum(p.values()))


def _inference_bytes(all_stages: list[list[list[Conv]]], image: int, batch: int, act_bytes: int) -> int:
    """No-grad forward, largest moment: during a conv layer's BatchNorm, the stem output (the model's
    ``forward`` keeps it), the block input (kept for the residual), the conv layer's input and its
    conv and BatchNorm outputs. The stem's own moment: its conv and BatchNorm outputs at image/2."""
    largest = 0
    stem_out = STEM_WIDTH * (image // 4) ** 2
    for stage in all_stages:
        for block in stage:
            block_in = block[0].cin * block[0].in_size ** 2
            conv_in = block_in
            for conv in block:
                size = conv.out * conv.size**2
                extra = 0 if conv_in == block_in else conv_in
                largest = max(largest, batch * (stem_out + block_in + extra + 2 * size) * act_bytes)
                conv_in = size
    return largest
