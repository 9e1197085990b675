"""Closed choices of spec keys and CLI flags (plain Enums: cheap to import at CLI start-up)."""

from __future__ import annotations

from enum import StrEnum


class Architecture(StrEnum):
    encoder = "encoder"
    decoder = "decoder"
    encoder_decoder = "encoder-decoder"


class Mlp(StrEnum):
    gelu = "gelu"
    gelu_tanh = "gelu_tanh"
    relu = "relu"
    swiglu = "swiglu"


class Norm(StrEnum):
    layernorm = "layernorm"
    rmsnorm = "rmsnorm"


class Position(StrEnum):
    learned = "learned"
    rotary = "rotary"
    relative = "relative"
    none = "none"


class Head(StrEnum):
    lm = "lm"
    classification = "classification"
    none = "none"


class Mode(StrEnum):
    train = "train"
    inference = "inference"


class Precision(StrEnum):
    fp32 = "fp32"
    fp16 = "fp16"
    bf16 = "bf16"
    amp_fp16 = "amp-fp16"
    amp_bf16 = "amp-bf16"


class Optimizer(StrEnum):
    none = "none"
    sgd = "sgd"
    sgd_momentum = "sgd-momentum"
    adam = "adam"
    adamw = "adamw"
    adamw_8bit = "adamw-8bit"
    adafactor = "adafactor"
    lion = "lion"


class OptimizerImpl(StrEnum):
    foreach = "foreach"
    fused = "fused"
    forloop = "forloop"


class Checkpointing(StrEnum):
    none = "none"
    full = "full"
    selective = "selective"


class Attention(StrEnum):
    eager = "eager"
    sdpa = "sdpa"
