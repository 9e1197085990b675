"""`vramcalc check`, `fit`, `max-batch`, `max-seq`, `sweep` through the CLI: every exit code path,
every output format, the JSON contracts, and the pre-commit hook run the way pre-commit runs it."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from spec_texts import TINY_MODEL
from spec_texts import TINY_SPEC as TINY
from typer.testing import CliRunner, Result

from vramcalc.cli import app
from vramcalc.cli.check import CheckFormat, SweepFormat
from vramcalc.render.check import FORMATTERS
from vramcalc.render.planning import SWEEP_FORMATS

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "check"
FITS = str(EXAMPLES / "gpt2-a100.yaml")  # 26.3 GiB needed, 72 GiB available
TOO_BIG = str(EXAMPLES / "bert-large-v100.yaml")  # 69.3 GiB needed, 15 GiB available
GiB, MiB = 2**30, 2**20
CHECK_KEYS = ["spec", "gpu", "needed_bytes", "available_bytes", "headroom_bytes", "fits"]


def run(*args: str) -> Result:
    return runner.invoke(app, list(args))


def check_json(*args: str) -> tuple[int, list[dict]]:
    result = run("check", *args, "--format", "json")
    return result.exit_code, json.loads(result.stdout)


# -- exit codes ----------------------------------------------------------------------------------------


def test_exit_0_when_every_spec_fits() -> None:
    result = run("check", FITS)
    assert result.exit_code == 0, result.output
    assert "fits" in result.stdout and "exit 0: every spec fits" in result.stdout
    assert result.stderr == ""


def test_exit_1_when_a_spec_does_not_fit() -> None:
    result = run("check", FITS, TOO_BIG)
    assert result.exit_code == 1, result.output
    assert "DOES NOT FIT" in result.stdout and "would fit with:" in result.stdout
    assert "gradient_checkpointing: full" in result.stdout


def test_exit_2_bad_file_among_good_ones_still_reports_the_others(write_spec) -> None:
    bad = write_spec(TINY.replace("layers: 2", "layers: two") + "target: {gpu: t4}\n", "bad.yaml")
    result = run("check", FITS, str(bad), TOO_BIG, "--format", "json")
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {bad}: model.layers: Input should be a valid integer")
    docs = json.loads(result.stdout)
    assert [d["spec"] for d in docs] == [FITS, TOO_BIG, str(bad)]
    assert [d["fits"] for d in docs] == [True, False, None]  # the bad file is not reported as passing
    assert docs[2]["errors"] and docs[2]["needed_bytes"] is None
    table = run("check", FITS, str(bad))
    assert table.exit_code == 2 and "bad input" in table.stdout and "not a pass" in table.stdout


def test_exit_2_when_a_spec_has_no_target_and_no_gpu(write_spec) -> None:
    path = write_spec(TINY)
    result = run("check", str(path))
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: {path}: target.gpu: no GPU to check against (add 'target: {{gpu: NAME}}' or pass --gpu)"
    )
    assert run("check", str(path), "--gpu", "t4").exit_code == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpu", "a1000"], "error: --gpu: unknown GPU 'a1000'"),
        (["--reserve", "10"], "error: --reserve: '10' needs a unit"),
        (["--gpus", "0"], "Invalid value for '--gpus'"),
        (["--gpus", "100001"], "Invalid value for '--gpus'"),  # target.count's bound, 100,000
        (["--format", "xml"], "Invalid value for '--format'"),
    ],
)
def test_exit_2_for_bad_flags_reports_nothing(args: list[str], message: str) -> None:
    result = run("check", FITS, *args)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_exit_2_for_unknown_target_gpu_names_file_and_field(write_spec) -> None:
    path = write_spec(TINY + "target:\n  gpu: h1000\n")
    result = run("check", str(path))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {path}: target.gpu: unknown GPU 'h1000'")


def test_exit_2_for_missing_paths_and_empty_directories(tmp_path: Path) -> None:
    result = run("check", str(tmp_path / "nope.yaml"), str(tmp_path), FITS)
    assert result.exit_code == 2
    assert f"error: {tmp_path / 'nope.yaml'}: no such file" in result.stderr
    assert f"error: {tmp_path}: no *.yaml or *.yml files in this directory" in result.stderr
    assert "1 check: 1 fits, 0 do not fit, 2 files could not be checked" in result.stdout
    code, docs = check_json(str(tmp_path / "nope.yaml"), str(tmp_path), FITS)
    assert code == 2 and [d["fits"] for d in docs] == [True, None, None]  # the good spec is still reported


# -- targets and flags -------------------------------------------------------------------------------------


def test_flags_override_the_target_section() -> None:
    # bert-large-v100.yaml targets a V100 with 1 GiB reserved; --gpu and --reserve replace both.
    code, docs = check_json(TOO_BIG, "--gpu", "h200-sxm", "--reserve", "10%", "--gpus", "8")
    assert code == 0
    (doc,) = docs
    # H200 SXM: nvidia-smi memory.total 143,771 MiB on an "NVIDIA H200" (700 W) card, from
    # https://github.com/thamada/gls/blob/c0bed08d0e20bb1abccfee5aeedb80bc63b493a6/gls/H200_smi.py
    usable = 143_771 * MiB
    assert doc["gpu"] == "h200-sxm" and doc["usable_bytes"] == usable and doc["count"] == 8
    assert doc["reserve_bytes"] == -(-usable // 10)  # ceil(10 %)
    assert doc["available_bytes"] == usable - doc["reserve_bytes"]


def test_target_section_is_used_without_flags() -> None:
    code, (doc,) = check_json(TOO_BIG)
    assert code == 1
    assert doc["gpu"] == "v100-16gb-sxm2"
    # driver total 16,384 MiB = 16 GiB (nvidia-smi on a Tesla V100-SXM2-16GB, driver 550) - 1GiB reserve
    assert doc["available_bytes"] == 16 * GiB - 1 * GiB
    assert doc["headroom_bytes"] == doc["available_bytes"] - doc["needed_bytes"]


def test_ambiguous_target_name_is_a_note(write_spec) -> None:
    path = write_spec(TINY + "target:\n  gpu: a100-80gb\n")
    result = run("check", str(path))
    assert result.exit_code == 0
    assert "note: " in result.stderr and "using a100-80gb-sxm" in result.stderr


def test_needed_is_the_estimates_total() -> None:
    code, docs = check_json(TOO_BIG, "--gpu", "a100-80gb-sxm", "--gpu", "h100-sxm")
    for doc in docs:
        est = json.loads(run("estimate", TOO_BIG, "--json", "--gpu", doc["gpu"]).stdout)
        assert doc["needed_bytes"] == est["total_bytes"]
        assert est["gpu"]["usable_bytes"] == doc["usable_bytes"]


# -- formats -----------------------------------------------------------------------------------------------


def test_every_format_has_a_formatter() -> None:
    assert {f.value for f in CheckFormat} == set(FORMATTERS)
    assert {f.value for f in SweepFormat} == set(SWEEP_FORMATS)


def test_json_contract_keys_first() -> None:
    _, docs = check_json(FITS, TOO_BIG)
    for doc in docs:
        assert list(doc)[:6] == CHECK_KEYS
        assert all(isinstance(doc[k], int) for k in CHECK_KEYS[2:5]) and isinstance(doc["fits"], bool)
    assert run("check", FITS, "--json").stdout == run("check", FITS, "--format", "json").stdout


def test_github_annotations_name_the_failing_file() -> None:
    result = run("check", FITS, TOO_BIG, "--format", "github")
    assert result.exit_code == 1
    errors = [line for line in result.stdout.splitlines() if line.startswith("::error")]
    assert len(errors) == 1
    match = re.match(r"::error file=([^,]+),title=([^:]+)::(.*)", errors[0])
    assert match is not None
    assert match[1] == TOO_BIG.replace(":", "%3A")
    assert match[2] == "vramcalc%3A bert-large-v100 does not fit on v100-16gb-sxm2"
    assert "%0AWould fit with:%0A- gradient_checkpointing: full" in match[3]
    assert f"ok: {FITS}: fits on a100-80gb-sxm" in result.stdout


def test_github_annotation_for_bad_input(write_spec) -> None:
    bad = write_spec("model: [unclosed\n", "broken.yaml")
    result = run("check", str(bad), FITS, "--format", "github")
    assert result.exit_code == 2
    assert result.stdout.startswith(f"ok: {FITS}")
    assert f"::error file={bad},title=vramcalc%3A bad input::{bad}: invalid YAML" in result.stdout


def test_junit_validates_with_expected_counts(write_spec) -> None:
    bad = write_spec(TINY + "target: {gpu: t4, count: 0}\n", "bad.yaml")
    result = run("check", FITS, TOO_BIG, str(bad), "--gpu", "t4", "--gpu", "h100-sxm", "--format", "junit")
    assert result.exit_code == 2
    root = ET.fromstring(result.stdout.encode())  # well-formed XML
    suite = root.find("testsuite")
    assert suite is not None
    # 2 specs x 2 cards + 1 bad file (count: 0). On the T4 (15 GiB) neither spec fits (26.3 and 69.3 GiB
    # needed); on the H100 SXM (79.6 GiB usable) both do.
    cases = suite.findall("testcase")
    assert len(cases) == 5 == int(suite.get("tests", "")) == int(root.get("tests", ""))
    failures = [c for c in cases if c.find("failure") is not None]
    errors = [c for c in cases if c.find("error") is not None]
    assert int(suite.get("failures", "")) == int(root.get("failures", "")) == len(failures) == 2
    assert {(c.get("name"), c.get("file")) for c in failures} == {
        ("gpt2-a100 on t4", FITS),
        ("bert-large-v100 on t4", TOO_BIG),
    }
    assert int(suite.get("errors", "")) == len(errors) == 1 and errors[0].get("file") == str(bad)
    assert "target.count" in (errors[0].find("error").text or "")  # type: ignore[union-attr]


def test_markdown_table_for_a_pr_comment() -> None:
    result = run("check", FITS, TOO_BIG, "--format", "markdown")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[2] == "| spec | GPU | needed (GiB) | available (GiB) | headroom (GiB) | verdict |"
    rows = lines[4:6]
    assert lines[6] == "" and all(row.count("|") == 7 for row in rows)
    # Markdown's emphasis character is backslash-escaped in paths (a checkout may hold one).
    assert rows[0].startswith(f"| {FITS.replace('_', chr(92) + '_')} |") and rows[0].endswith("| ✅ fits |")
    assert rows[1].startswith(f"| {TOO_BIG.replace('_', chr(92) + '_')} |") and rows[1].endswith("| ❌ does not fit |")
    assert "**What would make it fit**" in result.stdout and "driver total 81,920 MiB" in result.stdout


def test_output_file_and_no_file_without_it(tmp_path: Path) -> None:
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert run("check", FITS, "--format", "markdown").exit_code == 0
        assert list(tmp_path.iterdir()) == []  # nothing written without --output
        out = tmp_path / "report.xml"
        result = run("check", FITS, TOO_BIG, "--format", "junit", "--output", str(out))
    finally:
        os.chdir(cwd)
    assert result.exit_code == 1 and result.stdout == ""
    assert ET.parse(out).getroot().get("failures") == "1"
    unwritable = run("check", FITS, "--output", str(tmp_path / "missing" / "x.txt"))
    assert unwritable.exit_code == 2 and "error: --output:" in unwritable.stderr


def test_directory_and_glob_inputs() -> None:
    by_dir = check_json(str(EXAMPLES))
    by_glob = check_json(str(EXAMPLES / "*.yaml"))
    assert by_dir == by_glob
    assert by_dir[0] == 1 and sorted(d["spec"] for d in by_dir[1]) == sorted([FITS, TOO_BIG])


# -- fit -----------------------------------------------------------------------------------------------------


def test_fit_json_lists_every_card() -> None:
    result = run("fit", FITS, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    n_cards = len(json.loads(run("gpus", "--json").stdout))
    assert len(doc["cards"]) == n_cards
    for card in doc["cards"]:
        assert card["headroom_bytes"] == card["available_bytes"] - card["needed_bytes"]
        assert card["fits"] == (card["headroom_bytes"] >= 0)
        if card["fits"]:
            assert card["min_cards"] == 1 and card["min_cards_note"] is None and card["min_cards_plan"] is None
        elif card["min_cards"] is not None:  # the fewest cards of a sharded plan that fits
            assert card["min_cards"] >= 2 and card["min_cards_needed_bytes"] <= card["available_bytes"]
            assert card["min_cards_note"] == f"{card['min_cards']} x {card['gpu']} with {card['min_cards_plan']}"
        else:
            assert card["min_cards_note"].startswith("no sharded plan fits within 64 GPUs")
    # GPT-2 (124M) needs 26 GiB at batch 16 x 1,024: 8 GB cards need more of them, never none
    assert {c["gpu"]: c["min_cards"] for c in doc["cards"]}["rtx-3070"] >= 2
    assert doc["target"]["gpu"] == "a100-80gb-sxm" and doc["target"]["fits"] is True
    assert "pure data parallelism does not reduce per-card memory" in doc["sharding"] and doc["max_gpus"] == 64


def test_fit_exit_1_and_suggestions_when_the_target_does_not_fit() -> None:
    result = run("fit", TOO_BIG)
    assert result.exit_code == 1
    assert "target v100-16gb-sxm2" in result.stdout and "It would fit with:" in result.stdout
    words = " ".join(result.stdout.split())  # the notes under the table wrap at the terminal's width
    assert "pure data parallelism does not reduce per-card memory" in words
    # 8 GPUs of tensor parallelism: FSDP's one-dimensional mesh reuses the default group (one NCCL
    # communicator), where DeepSpeed under tensor parallelism adds its own tensor group (two)
    assert re.search(r"v100-16gb-sxm2 .* no +│ 8: TP 8, FSDP no_shard \+ SP", result.stdout)
    doc = json.loads(run("fit", TOO_BIG, "--json").stdout)
    changes = [s["change"] for s in doc["target"]["suggestions"]]
    assert changes[0] == "gradient_checkpointing: full"


def test_fit_reports_the_fewest_sharded_cards() -> None:
    # configs/llama-2-70b-fsdp.yaml (32 GPUs, FSDP full_shard; 44.0 GiB per GPU). Minimality is checked
    # by hand in tests/planning/test_fit.py (16 bytes per parameter over all GPUs: at least 27 of 40 GiB).
    spec = str(ROOT / "configs" / "llama-2-70b-fsdp.yaml")
    doc = json.loads(run("fit", spec, "--json").stdout)
    cards = {c["gpu"]: c for c in doc["cards"]}
    a100 = cards["a100-40gb-sxm"]
    assert a100["fits"] is False and a100["min_cards"] == 28
    assert a100["min_cards_note"] == "28 x a100-40gb-sxm with TP 2 x DP 14, FSDP full_shard + SP"
    assert a100["min_cards_parallel"]["tensor"] == 2 and a100["min_cards_parallel"]["data"] == 14
    assert cards["h100-sxm"]["fits"] and cards["h100-sxm"]["min_cards"] == 14  # fewer than the spec's 32
    table = run("fit", spec, "--max-gpus", "16")
    assert table.exit_code == 0, table.output  # it fits its target (h100-sxm) as the spec lays it out
    assert re.search(r"a100-40gb-sxm .* no +│ > 16 ", table.stdout)
    assert "14 x h100-sxm with TP 2 x DP 7, FSDP full_shard + SP" in table.stdout  # the target's line: fewer cards
    assert run("fit", spec, "--max-gpus", "0").exit_code == 2


def test_check_suggests_sharding_that_fits(write_spec) -> None:
    # Llama-2-7B bf16 AdamW: 70.8 GiB on one GPU; FSDP full_shard over 2 GPUs: 35.7 GiB each
    code, (doc,) = check_json(str(ROOT / "configs" / "llama-2-7b.yaml"), "--gpu", "a100-40gb-sxm")
    assert code == 1 and doc["fits"] is False
    shard = [s for s in doc["suggestions"] if s["parallel"]]
    assert [s["change"] for s in shard] == ["shard over 2 GPUs (FSDP full_shard)"]
    assert shard[0]["total_bytes"] <= doc["available_bytes"] and doc["min_cards"] == 2
    assert all(s["parallel"] is None for s in doc["suggestions"] if s not in shard)
    table = run("check", str(ROOT / "configs" / "llama-2-7b.yaml"), "--gpu", "a100-40gb-sxm")
    assert "parallel: {gpus: 2, fsdp: full_shard}" in table.stdout


def test_target_count_must_match_the_parallel_section(write_spec) -> None:
    text = (ROOT / "configs" / "llama-2-70b-fsdp.yaml").read_text(encoding="utf-8")
    assert "parallel:\n  gpus: 32\n" in text and text.endswith("target:\n  gpu: h100-sxm\n")
    bad = write_spec(text + "  count: 16\n", "count.yaml")
    message = (
        f"error: {bad}: target.count: 16 GPUs, but the parallel section spreads the run over 32 "
        "(parallel.gpus, or data x tensor x pipeline x context); make them agree or drop one"
    )
    for command in (["check"], ["fit"], ["max-batch"], ["check", "--format", "json"]):
        result = run(*command, str(bad))
        assert result.exit_code == 2, result.output
        assert result.stderr.strip() == message
    flag = run("check", str(ROOT / "configs" / "llama-2-70b-fsdp.yaml"), "--gpus", "8")
    assert flag.exit_code == 2 and "--gpus: 8 GPUs, but the parallel section spreads the run over 32" in flag.stderr
    good = write_spec(text + "  count: 32\n", "same.yaml")
    result = run("check", str(good))
    assert result.exit_code == 0, result.output
    assert "planned for 32 GPUs as the spec's parallel section lays out (figures per GPU)" in result.stdout


def test_fit_without_target_and_bad_input(write_spec) -> None:
    result = run("fit", str(write_spec(TINY)))
    assert result.exit_code == 0 and "Name a card" in result.stdout
    assert run("fit", str(write_spec(TINY, "a.yaml")), "--gpu", "nope-gpu").exit_code == 2


# -- max-batch / max-seq --------------------------------------------------------------------------------------


def test_max_batch_json_contract_and_consistency_with_estimate() -> None:
    result = run("max-batch", TOO_BIG, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert {"max_batch_size", "total_bytes_at_max", "total_bytes_at_next"} <= set(doc)
    n = doc["max_batch_size"]
    at = json.loads(run("estimate", TOO_BIG, "--json", "--gpu", "v100-16gb-sxm2", "--batch-size", str(n)).stdout)
    after = json.loads(run("estimate", TOO_BIG, "--json", "--gpu", "v100-16gb-sxm2", "--batch-size", str(n + 1)).stdout)
    assert doc["total_bytes_at_max"] == at["total_bytes"] <= doc["available_bytes"]
    assert doc["total_bytes_at_next"] == after["total_bytes"] > doc["available_bytes"]
    assert doc["available_bytes"] == 15 * GiB  # 16 GiB nominal - the spec's 1GiB reserve


def test_max_batch_zero_exits_1() -> None:
    result = run("max-batch", str(ROOT / "configs" / "llama-2-7b.yaml"), "--gpu", "t4", "--json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["max_batch_size"] == 0 and doc["total_bytes_at_max"] is None and doc["total_bytes_at_next"] > 0


def test_max_batch_table_and_missing_gpu(write_spec) -> None:
    result = run("max-batch", FITS)
    assert result.exit_code == 0
    assert re.search(r"largest batch_size that fits: [\d,]+ \(seq_len 1,024\)", result.stdout)
    no_gpu = run("max-batch", str(write_spec(TINY)))
    assert no_gpu.exit_code == 2 and "target.gpu: no GPU" in no_gpu.stderr


def test_max_seq_json_and_vision_spec() -> None:
    result = run("max-seq", FITS, "--json", "--gpu", "rtx-4090")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert {"max_seq_len", "total_bytes_at_max", "total_bytes_at_next"} <= set(doc) and doc["batch_size"] == 16
    assert doc["total_bytes_at_max"] <= doc["available_bytes"] < doc["total_bytes_at_next"]
    vision = run("max-seq", str(ROOT / "configs" / "vit-base.yaml"), "--gpu", "t4")
    assert vision.exit_code == 2 and "no seq_len" in vision.stderr
    # Llama-2-7B's bf16 weights alone (13.5 GB) leave no room for even one token on a 15 GiB T4 once
    # its AdamW states are added: max_seq_len 0, exit 1
    none = run("max-seq", str(ROOT / "configs" / "llama-2-7b.yaml"), "--gpu", "t4", "--json")
    assert none.exit_code == 1 and json.loads(none.stdout)["max_seq_len"] == 0


# -- sweep ---------------------------------------------------------------------------------------------------


def test_sweep_formats_agree() -> None:
    args = ["sweep", FITS, "--batch-size", "1,2,4,8,16,32", "--seq-len", "256,512,1024", "--gpu", "rtx-4090"]
    table = run(*args)
    assert table.exit_code == 0, table.output
    assert "batch \\ seq" in table.stdout and " ok" in table.stdout and " NO" in table.stdout
    doc = json.loads(run(*args, "--json").stdout)
    rows = list(csv.DictReader(io.StringIO(run(*args, "--format", "csv").stdout)))
    assert len(doc["points"]) == len(rows) == 18
    for point, row in zip(doc["points"], rows, strict=True):
        assert (point["batch_size"], point["seq_len"], point["total_bytes"]) == (
            int(row["batch_size"]),
            int(row["seq_len"]),
            int(row["total_bytes"]),
        )
        assert point["fits"] == (point["total_bytes"] <= doc["gpu"]["available_bytes"]) == (row["fits"] == "true")
    point = next(p for p in doc["points"] if p["batch_size"] == 4 and p["seq_len"] == 1024)
    est = run("estimate", FITS, "--json", "--gpu", "rtx-4090", "--batch-size", "4", "--seq-len", "1024")
    assert point["total_bytes"] == json.loads(est.stdout)["total_bytes"]


def test_sweep_past_learned_positions_exit_2() -> None:
    # GPT-2 has a learned table of 1,024 positions (its config.json: n_positions 1024): length 2,048
    # has no embedding, so the sweep is refused rather than given a number
    result = run("sweep", FITS, "--batch-size", "1", "--seq-len", "512,2048", "--gpu", "rtx-4090")
    assert result.exit_code == 2
    assert "seq_len: 2,048 is past model.max_position_embeddings (1,024)" in result.stderr


def test_sweep_without_a_card_marks_nothing(write_spec) -> None:
    result = run("sweep", str(write_spec(TINY)), "--batch-size", "1,2", "--format", "csv")
    assert result.exit_code == 0
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [(r["batch_size"], r["seq_len"], r["fits"]) for r in rows] == [("1", "", ""), ("2", "", "")]


def test_sweep_bad_values_exit_2(write_spec) -> None:
    for args in (["--batch-size", "0"], ["--batch-size", "x"], ["--batch-size", "1", "--seq-len", "-4"]):
        result = run("sweep", FITS, *args)
        assert result.exit_code == 2 and result.stderr.startswith("error: "), args
    vision = run("sweep", str(ROOT / "configs" / "vit-base.yaml"), "--batch-size", "1", "--seq-len", "128")
    assert vision.exit_code == 2 and "no seq_len" in vision.stderr


# -- the pre-commit hook ---------------------------------------------------------------------------------------


def _as_pre_commit_would(hook: dict, repo: Path, changed: list[str]) -> list[str]:
    """The command pre-commit runs: shlex-split entry + args + the changed files its filters keep."""
    keep = re.compile(hook.get("files", "")).search
    drop = re.compile(hook.get("exclude", "^$")).search
    is_yaml = "yaml" not in hook.get("types", []) or (lambda p: p.endswith((".yaml", ".yml")))
    files = [p for p in changed if keep(p) and not drop(p) and (is_yaml is True or is_yaml(p))]
    return shlex.split(hook["entry"]) + hook.get("args", []) + files


def test_pre_commit_hook_entry(tmp_path: Path) -> None:
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert hook["id"] == "vramcalc-check" and hook["language"] == "python"
    bindir = str(Path(sys.executable).parent)
    if shutil.which(shlex.split(hook["entry"])[0], path=bindir) is None:
        pytest.skip("the vramcalc console script is not installed next to this interpreter")
    entry = shlex.split(hook["entry"])
    usage = runner.invoke(app, ["check", "--help"]).output
    if any(flag.startswith("--") and flag not in usage for flag in entry):
        pytest.skip(f"the hook's entry ({hook['entry']}) names a flag this vramcalc check lacks")
    (tmp_path / "configs").mkdir()
    (tmp_path / ".github").mkdir()
    shutil.copy(FITS, tmp_path / "configs" / "a.yaml")
    (tmp_path / ".github" / "ci.yml").write_text("on: push\n")  # not a spec: the hook's filter skips it
    env = {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}
    cmd = _as_pre_commit_would(hook, tmp_path, ["configs/a.yaml", ".github/ci.yml", "README.md"])
    assert entry[:2] == ["vramcalc", "check"] and cmd == [*entry, "configs/a.yaml"]
    ok = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr
    # pre-commit names every changed YAML file under configs/: an accelerate config there is skipped, not bad input
    (tmp_path / "configs" / "accelerate.yaml").write_text("compute_environment: LOCAL_MACHINE\nnum_processes: 2\n")
    cmd = _as_pre_commit_would(hook, tmp_path, ["configs/a.yaml", "configs/accelerate.yaml"])
    ok = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr
    assert "note: skipped configs/accelerate.yaml: an accelerate config, not a vramcalc spec" in ok.stderr
    shutil.copy(TOO_BIG, tmp_path / "configs" / "b.yml")
    cmd = _as_pre_commit_would(hook, tmp_path, ["configs/a.yaml", "configs/b.yml"])
    blocked = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    assert blocked.returncode == 1 and "configs/b.yml" in blocked.stdout and "DOES NOT FIT" in blocked.stdout


def test_max_batch_shows_the_formula_behind_its_totals(write_spec) -> None:
    # tests/planning/test_batch_totals.py derives this spec's peak by hand: max(67,516,928 + 21,584 b, 67,524,096)
    tiny = "\n".join(
        ["name: tiny-by-hand", "model:", *(f"  {k}: {str(v).lower()}" for k, v in TINY_MODEL.items())]
        + ["workload:", "  batch_size: 2", "  seq_len: 4", "  precision: fp32", "  optimizer: sgd"]
    )
    path = str(write_spec(tiny, "tiny-by-hand.yaml"))
    doc = json.loads(run("max-batch", path, "--gpu", "h100-sxm", "--json").stdout)  # Hopper: 32 MiB workspaces
    assert sorted(doc["peak_bytes_by_batch"]) == [[67_516_928, 21_584], [67_524_096]]
    text = run("max-batch", path, "--gpu", "h100-sxm").stdout
    # 67,516,928 B = 0.0629 GiB, 21,584 B = 0.0000201 GiB
    assert "formula: allocated peak = max(0.063 + 0.000 b, 0.063) GiB + inputs (b = batch_size)" in text
    seq = json.loads(run("max-seq", path, "--gpu", "h100-sxm", "--json").stdout)
    assert seq["peak_bytes_by_batch"] is None  # sequence lengths run full estimates


def test_a_directory_named_several_ways_is_checked_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # one directory as 'specs', 'specs/' and './specs/../specs', a file in it named directly, and a symbolic
    # link to that file: two files, each checked once, under the first way it was named
    specs = tmp_path / "specs"
    specs.mkdir()
    shutil.copy(FITS, specs / "a.yaml")
    shutil.copy(FITS, specs / "b.yaml")
    (tmp_path / "link.yaml").symlink_to(specs / "b.yaml")
    monkeypatch.chdir(tmp_path)
    code, rows = check_json("specs", "specs/", "./specs/../specs", "specs/a.yaml", "link.yaml")
    assert code == 0
    assert [row["spec"] for row in rows] == [str(Path("specs", "a.yaml")), str(Path("specs", "b.yaml"))]


@pytest.mark.parametrize("columns", ["80", "120"])
def test_the_verdict_is_never_split_by_a_long_path(tmp_path: Path, columns: str) -> None:
    """A checkout at a long path makes the table put the GPU under the spec and wrap the spec's path; the
    verdict a CI log is searched for stays whole on its line."""
    deep = tmp_path / ("a-rather-long-folder-name-" * 3) / "and-another-level-of-folders"
    deep.mkdir(parents=True)
    fits, too_big = deep / "gpt2-a100.yaml", deep / "bert-large-v100.yaml"
    shutil.copy(FITS, fits)
    shutil.copy(TOO_BIG, too_big)
    result = runner.invoke(app, ["check", str(fits), str(too_big)], env={"COLUMNS": columns})
    assert result.exit_code == 1, result.output
    assert "DOES NOT FIT" in result.stdout and "spec on GPU" in result.stdout
