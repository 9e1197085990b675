"""``parallel.offload.activations: cpu`` (DeepSpeed ``activation_checkpointing.cpu_checkpointing``): under full
checkpointing each block's checkpointed input is copied to host memory as it is made
(deepspeed/runtime/activation_checkpointing/checkpointing.py, ``CheckpointFunction.forward``:
``partition.cpu()`` when ``PA_TO_CPU``) and brought back to the GPU one block at a time in backward
(``get_full_inputs(..., device=cuda_device)``).

Hand counts on the GPT-2 preset (12 layers, hidden 768) at batch 8 x 128 tokens in fp16: one checkpoint is
8 x 128 x 768 x 2 B = 1,572,864 B, twelve are 18,874,368 B.
"""

from __future__ import annotations

from typing import Any

import pytest

from vramcalc.errors import SpecError
from vramcalc.families import estimate
from vramcalc.spec.load import parse_spec

ONE = 8 * 128 * 768 * 2  # one block input, fp16
ALL = 12 * ONE


def run(offload: dict[str, str], **workload: Any) -> Any:
    wl = {"batch_size": 8, "seq_len": 128, "precision": "mixed-fp16", "gradient_checkpointing": "full", **workload}
    parallel = {"data": 2, "zero": 1, "offload": offload}
    return estimate(parse_spec({"model": {"preset": "gpt2"}, "workload": wl, "parallel": parallel}, "t.yaml"))


def test_the_checkpoints_move_to_the_host() -> None:
    kept, moved = run({}), run({"activations": "cpu"})
    assert moved.parallel is not None and kept.parallel is not None
    assert moved.parallel.host_bytes - kept.parallel.host_bytes == ALL
    forward = kept.phase_components["forward"]["activations"] - moved.phase_components["forward"]["activations"]
    assert forward == ALL
    assert "offload activations" in moved.parallel.plan.summary


def test_the_recomputed_block_gets_its_input_back() -> None:
    """A small vocabulary and eager attention at 512 tokens, so the recomputation of a block is the peak of
    backward (4 layers, hidden 256: one checkpoint 8 x 512 x 256 x 2 B = 2,097,152 B). The recomputed block's
    input is a copy brought back from the host: 3 checkpoints fewer on the device than without offloading."""
    model = {"architecture": "decoder", "layers": 4, "hidden_size": 256, "heads": 4, "vocab_size": 1000}
    one = 8 * 512 * 256 * 2
    runs = []
    for offload in ({}, {"activations": "cpu"}):
        wl = {"batch_size": 8, "seq_len": 512, "precision": "mixed-fp16", "gradient_checkpointing": "full"}
        parallel = {"data": 2, "zero": 1, "offload": offload}
        spec = {"model": model, "workload": {**wl, "attention": "eager"}, "parallel": parallel}
        runs.append(estimate(parse_spec(spec, "t.yaml")))
    kept, moved = runs
    assert kept.peak_phase == moved.peak_phase == "backward"
    difference = kept.phase_components["backward"]["activations"] - moved.phase_components["backward"]["activations"]
    assert difference == 3 * one


@pytest.mark.parametrize(
    ("offload", "workload", "message"),
    [
        ({"activations": "cpu"}, {"gradient_checkpointing": "none"}, "needs gradient_checkpointing: full"),
        ({"activations": "cpu"}, {"mode": "inference", "optimizer": "none"}, "only valid with mode: train"),
    ],
)
def test_refused(offload: dict[str, str], workload: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        run(offload, **workload)


def test_needs_deepspeed() -> None:
    spec = {
        "model": {"preset": "gpt2"},
        "workload": {"batch_size": 8, "seq_len": 128, "gradient_checkpointing": "full"},
        "parallel": {"data": 2, "fsdp": "full_shard", "offload": {"activations": "cpu"}},
    }
    with pytest.raises(SpecError, match="cpu_checkpointing"):
        estimate(parse_spec(spec, "t.yaml"))
