"""The assumptions line: ``key=value`` without the reasons by default, the whole notes with ``--explain``."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.render.estimate import assumptions_line, compact

runner = CliRunner()
SPEC = str(Path(__file__).resolve().parents[2] / "configs" / "llama-3-8b.yaml")


def test_a_default_is_key_equals_value() -> None:
    assert compact("bias not given: false (linear biases as in BERT/GPT-2; none in Llama/T5)") == "bias=false"
    assert compact("vLLM version not given (versions: {vllm: ...}): 0.11.0 assumed (V1 engine)") == (
        "vLLM version=0.11.0 assumed"
    )
    two = "max_num_batched_tokens not given: 8,192, max_num_seqs not given: 1,024 (V1 defaults (70 GiB or more))"
    assert compact(two) == "max_num_batched_tokens=8,192, max_num_seqs=1,024"


def test_other_notes_lose_their_asides_only() -> None:
    note = "CUDA context 512 MiB (outside PyTorch's allocator; set overhead.cuda_context)"
    assert compact(note) == "CUDA context 512 MiB"
    assert compact("quantization nf4: bitsandbytes 4-bit") == "quantization nf4: bitsandbytes 4-bit"


def test_explain_keeps_every_word() -> None:
    notes = ["bias not given: false (linear biases as in BERT/GPT-2; none in Llama/T5)", "attention not given: sdpa"]
    assert assumptions_line(notes) == "assumptions: bias=false; attention=sdpa (--explain: the reasons)"
    assert assumptions_line(notes, explain=True) == "assumptions: " + "; ".join(notes)


def test_the_command_line_prints_both_forms() -> None:
    short = runner.invoke(app, ["estimate", SPEC], env={"COLUMNS": "300"})
    full = runner.invoke(app, ["estimate", SPEC, "--explain"], env={"COLUMNS": "300"})
    assert "attention=sdpa" in short.stdout and "(--explain: the reasons)" in short.stdout
    assert "attention not given: sdpa" in full.stdout and "--explain" not in full.stdout
    assert len(short.stdout) < len(full.stdout)
