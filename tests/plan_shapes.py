"""The small decoder and test card the multi-GPU search tests share (one copy of each)."""

from __future__ import annotations

from vramcalc.planning.budget import Budget

GiB = 2**30

#: ~235M parameters: 16 B each under mixed-bf16 Adam (3.8 GB) does not fit a 2 GiB card unsharded.
SMALL_DECODER = {
    "architecture": "decoder",
    "layers": 8,
    "hidden_size": 1024,
    "heads": 8,
    "kv_heads": 4,
    "ffn_size": 4096,
    "mlp": "swiglu",
    "vocab_size": 32000,
}
#: One sequence of 512 tokens, mixed-bf16 AdamW.
SMALL_WORKLOAD = {"batch_size": 1, "seq_len": 512, "precision": "mixed-bf16", "optimizer": "adamw"}


def card(usable_gib: float) -> Budget:
    """A Hopper-class test card of ``usable_gib`` GiB."""
    return Budget("test-card", "test card", int(usable_gib * GiB), "test", hopper_or_newer=True)
