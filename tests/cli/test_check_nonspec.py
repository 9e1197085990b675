"""`vramcalc check` in a real repository: YAML files that are not vramcalc specs (accelerate, DeepSpeed,
Hugging Face configs, Kubernetes manifests, lists), `--skip-non-specs` for pre-commit, `--exclude`."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from vramcalc.cli import app
from vramcalc.planning.nonspec import kind_of

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
FITS = ROOT / "examples" / "check" / "gpt2-a100.yaml"  # 26.3 GiB needed, 72 GiB available
TOO_BIG = ROOT / "examples" / "check" / "bert-large-v100.yaml"  # 69.3 GiB needed, 15 GiB available

# What `accelerate config` writes (default_config.yaml, accelerate 0.2x), trimmed to its usual keys.
ACCELERATE = """\
compute_environment: LOCAL_MACHINE
debug: false
distributed_type: MULTI_GPU
downcast_bf16: 'no'
gpu_ids: all
machine_rank: 0
main_training_function: main
mixed_precision: bf16
num_machines: 1
num_processes: 8
rdzv_backend: static
same_network: true
use_cpu: false
"""
# A DeepSpeed config written as YAML (the keys of the DeepSpeed configuration JSON).
DEEPSPEED = """\
train_micro_batch_size_per_gpu: auto
gradient_accumulation_steps: auto
bf16:
  enabled: true
zero_optimization:
  stage: 3
  overlap_comm: true
"""
# A Hugging Face config.json (Llama-2-7B's keys) saved as YAML.
HF_CONFIG = """\
architectures: [LlamaForCausalLM]
model_type: llama
hidden_size: 4096
intermediate_size: 11008
num_attention_heads: 32
num_hidden_layers: 32
vocab_size: 32000
torch_dtype: float16
"""
# A Kubernetes manifest: two documents in one file.
K8S = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: trainer}
---
apiVersion: batch/v1
kind: Job
metadata: {name: trainer}
"""
LIST = "- id: vramcalc-check\n  entry: vramcalc check\n"


def run(*args: str) -> Result:
    return runner.invoke(app, ["check", *args])


def notes(result: Result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("note: skipped")]


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository's configs/ folder: one fitting spec and the other YAML files such a folder holds."""
    configs = tmp_path / "configs"
    (configs / "deploy").mkdir(parents=True)
    shutil.copy(FITS, configs / "gpt2.yaml")
    for name, text in {
        "accelerate.yaml": ACCELERATE,
        "ds_zero3.yaml": DEEPSPEED,
        "llama-config.yaml": HF_CONFIG,
        "deploy/job.yaml": K8S,
        "hooks.yml": LIST,
    }.items():
        (configs / name).write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return configs


def test_folder_of_fitting_specs_and_other_configs_exits_0_with_one_note_each(repo: Path) -> None:
    result = run("configs/")
    assert result.exit_code == 0, result.output
    assert sorted(notes(result)) == [
        "note: skipped configs/accelerate.yaml: an accelerate config, not a vramcalc spec",
        "note: skipped configs/deploy/job.yaml: several YAML documents in one file, not a vramcalc spec",
        "note: skipped configs/ds_zero3.yaml: a DeepSpeed config, not a vramcalc spec",
        "note: skipped configs/hooks.yml: a YAML list, not a vramcalc spec",
        "note: skipped configs/llama-config.yaml: a Hugging Face model config, not a vramcalc spec",
    ]
    assert "error" not in result.stderr
    assert "1 check: 1 fits, 0 do not fit, 5 files skipped (not vramcalc specs) (exit 0" in result.stdout
    # a pattern search skips them the same way, and a file found twice is named once
    again = run("configs/", "configs/*.yaml")
    assert again.exit_code == 0 and len(notes(again)) == 5, again.output


def test_reports_list_skipped_files_without_breaking_their_contracts(repo: Path) -> None:
    docs = json.loads(run("configs/", "--format", "json").stdout)
    rows = [d for d in docs if d["fits"] is not None]
    skipped = {d["spec"]: d for d in docs if "skipped" in d}
    assert [r["spec"] for r in rows] == ["configs/gpt2.yaml"] and rows[0]["fits"] is True
    assert skipped["configs/accelerate.yaml"] == {
        "spec": "configs/accelerate.yaml",
        "gpu": None,
        "needed_bytes": None,
        "available_bytes": None,
        "headroom_bytes": None,
        "fits": None,
        "skipped": "an accelerate config",
    }
    assert len(skipped) == 5 and not any("errors" in d for d in docs)
    suite = ET.fromstring(run("configs/", "--format", "junit").stdout).find("testsuite")
    assert suite is not None
    counts = [suite.get(key) for key in ("tests", "failures", "errors", "skipped")]
    assert counts == ["6", "0", "0", "5"]
    assert len(suite.findall("testcase/skipped")) == 5
    github = run("configs/", "--format", "github")
    assert github.exit_code == 0 and "::" not in github.stdout  # no annotation for a skipped file


def test_a_non_spec_named_explicitly_is_bad_input(repo: Path) -> None:
    result = run("configs/gpt2.yaml", "configs/accelerate.yaml")
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        "error: configs/accelerate.yaml: an accelerate config, not a vramcalc spec (a spec is a mapping with "
        "model and workload; --skip-non-specs skips such files)"
    ]
    assert "configs/gpt2.yaml" in result.stdout  # the other spec is still reported
    # named explicitly, even a file a search would have skipped is checked
    assert run("configs/deploy/job.yaml").exit_code == 2


def test_skip_non_specs_skips_explicit_files_as_pre_commit_names_them(repo: Path) -> None:
    result = run("--skip-non-specs", "configs/gpt2.yaml", "configs/accelerate.yaml", "configs/llama-config.yaml")
    assert result.exit_code == 0, result.output
    assert notes(result) == [
        "note: skipped configs/accelerate.yaml: an accelerate config, not a vramcalc spec",
        "note: skipped configs/llama-config.yaml: a Hugging Face model config, not a vramcalc spec",
    ]
    # a commit that changes only non-specs passes: nothing to check is not a failure
    only = run("--skip-non-specs", "configs/ds_zero3.yaml")
    assert only.exit_code == 0, only.output
    assert "note: nothing checked" in only.stderr


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("broken.yaml", "model: [unclosed\n", "invalid YAML"),
        ("typo.yaml", FITS.read_text().replace("batch_size:", "batch_sise:"), "workload.batch_sise: unknown key"),
        ("named.yaml", "name: half-written\ntarget: {gpu: h100}\n", "model: Field required"),
    ],
)
def test_invalid_yaml_and_broken_specs_are_errors_even_when_found_by_a_search(
    repo: Path, name: str, text: str, message: str
) -> None:
    (repo / name).write_text(text, encoding="utf-8")
    for args in (("configs/",), ("--skip-non-specs", f"configs/{name}")):
        result = run(*args)
        assert result.exit_code == 2, result.output
        assert f"error: configs/{name}" in result.stderr and message in result.stderr


def test_a_search_that_finds_no_spec_is_bad_input(repo: Path) -> None:
    result = run("configs/deploy")
    assert result.exit_code == 2, result.output
    assert "error: configs/deploy: no vramcalc spec here (1 YAML file skipped as not specs" in result.stderr


def test_exclude_is_repeatable_and_matches_paths_and_names(repo: Path) -> None:
    (repo / "legacy").mkdir()
    shutil.copy(TOO_BIG, repo / "legacy" / "old.yaml")
    (repo / "draft.yaml").write_text("model: [unclosed\n", encoding="utf-8")
    assert run("configs/").exit_code == 2
    # a directory matched by its name is not searched; a file matched by its name or its path is left out
    for excludes in (["legacy", "draft.yaml"], ["configs/legacy/*", "configs/draft.*"], ["./configs/legacy/", "dr*"]):
        args = [arg for pattern in excludes for arg in ("--exclude", pattern)]
        result = run("configs/", *args)
        assert result.exit_code == 0, (excludes, result.output)
        assert "old.yaml" not in result.output and "draft.yaml" not in result.output
    only_legacy = run("configs/", "--exclude", "draft.yaml")
    assert only_legacy.exit_code == 1 and "configs/legacy/old.yaml" in only_legacy.stdout
    # explicit files are left out too
    assert run("configs/gpt2.yaml", "configs/draft.yaml", "--exclude", "draft.yaml").exit_code == 0


def test_excluding_everything_and_bad_patterns(repo: Path) -> None:
    files = run("configs/", "--exclude", "*.y*ml")
    assert files.exit_code == 2
    assert "error: configs/: --exclude matches every file found here (6 files); nothing to check" in files.stderr
    (repo / "nested" / "inner").mkdir(parents=True)
    shutil.copy(FITS, repo / "nested" / "inner" / "a.yaml")
    pruned = run("configs/nested", "--exclude", "inner")  # the one directory holding files is not searched
    assert pruned.exit_code == 2
    assert "error: configs/nested: no *.yaml or *.yml files in this directory outside --exclude" in pruned.stderr
    named = run("configs/gpt2.yaml", "--exclude", "gpt2.yaml")  # the user left out the one file named
    assert named.exit_code == 0 and "note: nothing checked" in named.stderr
    empty = run("configs/", "--exclude", "")
    assert empty.exit_code == 2 and empty.stdout == ""
    assert empty.stderr.startswith("error: --exclude: '' is not a pattern")


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (None, "an empty YAML file"),
        ([1, 2], "a YAML list"),
        ("text", "a single YAML value"),
        ({"distributed_type": "FSDP", "fsdp_config": {}}, "an accelerate config"),
        ({"zero_optimization": {"stage": 2}}, "a DeepSpeed config"),
        ({"model_type": "bert", "name": "bert"}, "a Hugging Face model config"),
        ({"apiVersion": "v1", "kind": "Pod"}, "a Kubernetes manifest"),
        ({"lr": 0.1}, "a mapping without the keys model, workload or name"),
        ({"name": "x"}, None),  # meant to be a spec: checked, and its missing keys reported
        ({"model": {}, "num_processes": 2}, None),  # a spec's own key wins over another tool's
        ({"workload": {}}, None),
    ],
)
def test_kind_of(data: object, kind: str | None) -> None:
    assert kind_of(data) == kind
