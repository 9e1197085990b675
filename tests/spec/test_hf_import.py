"""Offline import of transformers config.json files (tests/data/hf_configs, fields of the public configs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from vramcalc.cli import app
from vramcalc.core.params import count_params
from vramcalc.errors import SpecError
from vramcalc.families.resolve import resolve_model
from vramcalc.spec.hf_import import model_from_config, read_config, spec_from_config
from vramcalc.spec.load import parse_spec

runner = CliRunner()
CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf_configs"


def params_of(name: str) -> int:
    path = CONFIGS / name
    config = read_config(path)
    wl = {"mode": "inference", "batch_size": 1}
    wl |= {"image_size": 224} if config["model_type"] == "vit" else {"seq_len": 128}
    s = parse_spec(spec_from_config(config, str(path), wl), str(path))
    return count_params(resolve_model(s.model, s.workload)[0])


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("llama-3-8b.json", 8_030_261_248),  # meta-llama/Meta-Llama-3-8B, "8.03B" (model card, safetensors)
        ("mistral-7b.json", 7_241_732_096),  # mistralai/Mistral-7B-v0.1, "7.24B"
        ("mixtral-8x7b.json", 46_702_792_704),  # mistralai/Mixtral-8x7B-v0.1, 46.7B (see test_moe)
        ("gemma-7b.json", 8_537_680_896),  # google/gemma-7b, "8.54B"
        ("gpt2.json", 124_439_808),  # openai-community/gpt2, 124M
        ("pythia-410m.json", 405_334_016),  # EleutherAI/pythia-410m, total params in the Pythia table
        ("bert-base-uncased.json", 109_514_298),  # BertForMaskedLM (README's worked example)
        ("t5-base.json", 222_903_552),  # google-t5/t5-base, 223M
        ("vit-base-patch16-224.json", 86_567_656),  # google/vit-base-patch16-224, 86.6M
        # Qwen/Qwen2.5-1.5B-Instruct: 1,543,714,304 (measured.yaml vllm-qwen2.5-1.5b-t4-util0.5), q/k/v biases included
        ("qwen2.5-1.5b-instruct.json", 1_543_714_304),
        # microsoft/phi-2: 2,779,683,840 (one LayerNorm per layer, lm_head bias; the model card's 2.7B)
        ("phi-2.json", 2_779_683_840),
        # tiiuae/falcon-7b: 6,921,720,704 (one LayerNorm per layer in the 7B layout; the 7B of its card)
        ("falcon-7b.json", 6_921_720_704),
    ],
)
def test_imported_parameter_counts(name: str, expected: int) -> None:
    assert params_of(name) == expected


def test_qwen3_non_embedding_params() -> None:
    # Qwen/Qwen3-0.6B model card: 0.44B non-embedding parameters (embedding 151,936 x 1,024, tied)
    assert round((params_of("qwen3-0.6b.json") - 151_936 * 1024) / 1e9, 2) == 0.44


def test_gqa_and_head_dim_are_imported() -> None:
    model, _ = model_from_config(read_config(CONFIGS / "qwen3-0.6b.json"), "q")
    assert (model["heads"], model["kv_heads"], model["head_dim"]) == (16, 8, 128)
    model, _ = model_from_config(read_config(CONFIGS / "mixtral-8x7b.json"), "m")
    assert (model["experts"], model["experts_per_token"]) == (8, 2)


def test_unknown_model_type_lists_supported() -> None:
    with pytest.raises(SpecError, match=r"model_type: 'mamba' is not supported \(supported: bert, .*vit"):
        model_from_config(read_config(CONFIGS / "unknown-mamba.json"), "unknown-mamba.json")


def test_missing_field_names_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}), encoding="utf-8")
    with pytest.raises(SpecError, match=r"config.json: num_attention_heads: missing"):
        model_from_config(read_config(path), str(path))


def test_import_command_writes_a_valid_spec(tmp_path: Path) -> None:
    out = tmp_path / "mixtral.yaml"
    result = runner.invoke(app, ["import", str(CONFIGS / "mixtral-8x7b.json"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    parse_spec(yaml.safe_load(out.read_text(encoding="utf-8")), str(out))
    estimated = runner.invoke(app, ["estimate", str(out), "--json"])
    assert estimated.exit_code == 0, estimated.output
    assert json.loads(estimated.stdout)["active_params"] == 12_879_925_248


def test_import_to_stdout_has_notes() -> None:
    result = runner.invoke(app, ["import", str(CONFIGS / "pythia-410m.json")])
    assert result.exit_code == 0, result.output
    assert "# note: rotary_pct 0.25: rotary on part of each head" in result.stdout


def test_estimate_from_hf_config_with_flags() -> None:
    args = [
        "estimate",
        "--hf-config",
        str(CONFIGS / "llama-3-8b.json"),
        "--mode",
        "inference",
        "--batch-size",
        "1",
        "--seq-len",
        "4096",
        "--precision",
        "bf16",
        "--max-new-tokens",
        "512",
        "--kv-cache-dtype",
        "fp8",
        "--json",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["kv_cache_bytes_per_token"] == 65_536  # 2 x 32 x 8 x 128 x 1 B (fp8)
    assert doc["params"] == 8_030_261_248


def test_estimate_hf_config_with_adapter_and_quantization_flags() -> None:
    args = [
        "estimate",
        "--hf-config",
        str(CONFIGS / "llama-3-8b.json"),
        "--batch-size",
        "1",
        "--seq-len",
        "512",
        "--precision",
        "bf16",
        "--quantization",
        "{method: nf4, double_quant: true}",
        "--adapter",
        "{rank: 16, targets: all-linear}",
        "--gradient-checkpointing",
        "full",
        "--json",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    # 32 x 16 x [(4096+4096) x 2 + (4096+1024) x 2 + 3 x (4096+14336)] = 41,943,040 (peft's count for r=16)
    assert json.loads(result.stdout)["trainable_params"] == 41_943_040


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--hf-config", "missing.json", "--batch-size", "1", "--seq-len", "8"], "missing.json: no such file"),
        (["--hf-config", str(CONFIGS / "unknown-mamba.json"), "--batch-size", "1", "--seq-len", "8"], "mamba"),
        # GPT-2's learned position table has 1,024 rows (n_positions): a longer sequence has no position
        (
            ["--hf-config", str(CONFIGS / "gpt2.json"), "--batch-size", "1", "--seq-len", "2048"],
            "max_position_embeddings",
        ),
        (
            ["--hf-config", str(CONFIGS / "gpt2.json"), "--batch-size", "1", "--seq-len", "8", "--quantization", "[1"],
            "--quantization",
        ),
        ([], "give a SPEC file or --hf-config"),
    ],
)
def test_bad_hf_estimates_are_one_error_line(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["estimate", *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and result.stderr.startswith("error: ")
    assert "Traceback" not in result.output
