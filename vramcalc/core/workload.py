"""The resolved workload every estimator reads (:class:`ResolvedWorkload`, built once by
:func:`resolve_workload`): the model shape, the dtypes of the precision, the batch/token geometry of
the step, the parameter count the weights are sized by and the optimizer, defaults filled. Also the
rules it is built from (dtypes per precision, tokens of a batch, input and cuBLAS workspace bytes).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from vramcalc.choices import Architecture, Mode, Optimizer, Precision
from vramcalc.core import activations as act
from vramcalc.core.optimizer import DEFAULT_OPTIMIZER
from vramcalc.core.params import count_params
from vramcalc.core.shape import DEFAULT_CHANNELS, ModelShape
from vramcalc.core.stack import Stack
from vramcalc.spec.models import Spec
from vramcalc.units import MiB, allocation_bytes, ceil_div

#: cuBLAS workspace PyTorch allocates through its caching allocator, per handle: 32 MiB on Hopper
#: and newer (CUBLAS_WORKSPACE_CONFIG ":4096:8"), 8.125 MiB before (":4096:2:16:8"), per
#: aten/src/ATen/cuda/CublasHandlePool.cpp. Training uses two handles (forward and autograd threads).
CUBLAS_WORKSPACE_HOPPER = 32 * MiB


CUBLAS_WORKSPACE_PRE_HOPPER = 8 * MiB + 128 * 1024


DTYPES = {
    Precision.fp32: act.Dtypes(param=4, compute=4, residual=4, amp=False),
    Precision.fp16: act.Dtypes(param=2, compute=2, residual=2, amp=False),
    Precision.bf16: act.Dtypes(param=2, compute=2, residual=2, amp=False),
    Precision.amp_fp16: act.Dtypes(param=4, compute=2, residual=4, amp=True),
    Precision.amp_bf16: act.Dtypes(param=4, compute=2, residual=4, amp=True),
    # activations as pure 16-bit; master weights and states per vramcalc/parallel/layout.py (``layout``)
    Precision.mixed_fp16: act.Dtypes(param=2, compute=2, residual=2, amp=False),
    Precision.mixed_bf16: act.Dtypes(param=2, compute=2, residual=2, amp=False),
}


def workspace_bytes(mode: Mode, hopper_or_newer: bool = True) -> int:
    per_handle = CUBLAS_WORKSPACE_HOPPER if hopper_or_newer else CUBLAS_WORKSPACE_PRE_HOPPER
    return per_handle * (2 if mode is Mode.train else 1)


def input_bytes_images(pixels: int, pixel_bytes: int, batch: int, mode: Mode) -> int:
    """Image batch in the parameter dtype, plus int64 class labels when training."""
    labels = allocation_bytes(batch * act.TOKEN_ID) if mode is Mode.train else 0
    return allocation_bytes(pixels * pixel_bytes) + labels


def image_elements(spec: Spec, batch: Any = None) -> Any:
    """Pixels of one batch: batch x channels x height x width (square images); ``batch`` defaults
    to the spec's."""
    wl = spec.workload
    if wl.image_size is None:
        return 0
    return (wl.batch_size if batch is None else batch) * (wl.channels or DEFAULT_CHANNELS) * wl.image_size**2


def input_bytes(shape: ModelShape, tk: act.Tokens, mode: Mode, pixels: int = 0, pixel_bytes: int = 4) -> int:
    """Token ids (int64). Training: input_ids plus labels (a causal LM passes the same tensor as
    labels, so one); inference: input_ids (and decoder_input_ids for an encoder-decoder).
    Images: batch x channels x H x W in the parameter dtype, plus int64 class labels when training."""
    if pixels:
        return input_bytes_images(pixels, pixel_bytes, tk.batch, mode)
    ids = allocation_bytes(tk.encoder * act.TOKEN_ID)
    if shape.architecture is Architecture.decoder:
        return ids
    return ids + allocation_bytes(tk.decoder * act.TOKEN_ID)


def tokens_for(spec: Spec, shape: ModelShape, batch: Any, context_parallel: int = 1) -> act.Tokens:
    """The batch shape of a step, the one rule every estimator uses: ViT's length follows the image;
    an encoder-decoder's target is ``target_len`` (default: the source length). ``batch`` may be a
    symbolic batch size. With context parallelism each rank holds ``1/context_parallel`` of every
    sequence, rounded up (the frameworks pad a sequence that does not divide evenly)."""
    wl = spec.workload
    seq = shape.positions if shape.architecture is Architecture.vit else wl.seq_len or 0
    target = wl.target_len if wl.target_len is not None else seq
    if shape.architecture is not Architecture.encoder_decoder:
        target = seq
    if context_parallel > 1:
        seq, target = ceil_div(seq, context_parallel), ceil_div(target, context_parallel)
    return act.Tokens(batch=batch, seq=seq, target=target)


def weight_count(shape: ModelShape) -> int:
    """Parameters the weights are sized by: ``params`` when the spec states it, else the exact count."""
    return shape.stated_params or count_params(shape)


def weight_count_notes(shape: ModelShape) -> list[str]:
    """What :func:`weight_count` says when the stated ``params`` is more than 1 % off the shape's count."""
    if not shape.stated_params:
        return []
    derived = count_params(shape)
    if abs(shape.stated_params - derived) > 0.01 * derived:
        return [f"params {shape.stated_params:,} used for weights; the shape gives {derived:,}"]
    return []


def default_optimizer(spec: Spec) -> Optimizer:
    if spec.workload.optimizer is not None:
        return spec.workload.optimizer
    return DEFAULT_OPTIMIZER if spec.workload.mode is Mode.train else Optimizer.none


@dataclass(frozen=True)
class ResolvedWorkload:
    """A spec resolved once, read by every estimator (ints throughout; ``tokens.batch`` may be a
    symbolic batch size on the sweep path)."""

    spec: Spec
    shape: ModelShape
    dtypes: act.Dtypes
    tokens: act.Tokens  # the step's batch geometry: batch x seq (an encoder-decoder's target too)
    n_params: int  # what the weights are sized by: the spec's params, else the exact count
    optimizer: Optimizer  # the spec's, else AdamW for training and none for inference
    notes: tuple[str, ...]  # the defaults the resolution filled, in order
    stack: Stack  # the software stack the step runs on (vramcalc/stacks/)

    @property
    def mode(self) -> Mode:
        return self.spec.workload.mode

    def at_batch(self, batch: Any) -> ResolvedWorkload:
        """The same workload at another (possibly symbolic) batch size."""
        return replace(self, tokens=act.Tokens(batch=batch, seq=self.tokens.seq, target=self.tokens.target))

    def tokens_per_rank(self, context_parallel: int) -> act.Tokens:
        """One rank's share of every sequence under context parallelism (:func:`tokens_for`)."""
        return tokens_for(self.spec, self.shape, self.tokens.batch, context_parallel)


def build_workload(
    spec: Spec, shape: ModelShape, notes: list[str], stack: Stack, flash_runs: bool = False
) -> ResolvedWorkload:
    """The resolved workload of ``spec`` (not ResNet, which has no transformer shape) on ``stack``, from its
    resolved ``shape`` and the ``notes`` its resolution made: the dtypes, the step's tokens, the weight count
    and the optimizer. ``flash_runs``: ``attention: flash`` would run it (a note on materialised scores says
    so)."""
    n_params = weight_count(shape)
    notes = [*notes, *weight_count_notes(shape)]
    dtypes = DTYPES[spec.workload.precision]
    tokens = tokens_for(spec, shape, spec.workload.batch_size)
    if not stack.fused_attention:
        scores = act.scores_note(shape, tokens, dtypes, spec.workload.attention, flash_runs)
        notes += [scores] if scores else []
    return ResolvedWorkload(spec, shape, dtypes, tokens, n_params, default_optimizer(spec), tuple(notes), stack)
