"""The pre-commit snippet of docs/ci.md, run by pre-commit itself: a project's .pre-commit-config.yaml
names a clone of this repository (its working tree committed) at the commit's full SHA and the hook
`vramcalc-check` with the defaults of .pre-commit-hooks.yaml; `pre-commit run` on a project with one
spec that fits, one that does not and one YAML file that is not a spec. The first run clones the
repository, builds the hook's environment and installs vramcalc into it; the second reuses it from
pre-commit's cache, as a developer's later commits do. (`pre-commit try-repo` runs the same hook the
same way, but builds a fresh environment on every call.)

Skipped when pre-commit is not installed (it is not a test dependency: building the hook's virtual
environment installs vramcalc and its dependencies, which takes about a minute and needs a package
index), when the hook's entry names a flag this `vramcalc check` lacks, and when the hook's
environment cannot be built (no network or package index). Everything it writes, pre-commit's cache
and pip's included, stays under tmp_path.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from vramcalc.cli import app

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "check"
FITS = EXAMPLES / "gpt2-a100.yaml"  # 26.3 GiB needed, 72 GiB available on its target card
TOO_BIG = EXAMPLES / "bert-large-v100.yaml"  # 69.3 GiB needed, 15 GiB available on its target card
#: pre-commit's exit code for an error of its own (the hook's environment could not be built).
PRE_COMMIT_ERROR = 3


def _pre_commit() -> str:
    found = shutil.which("pre-commit", path=str(Path(sys.executable).parent)) or shutil.which("pre-commit")
    if found is None:
        pytest.skip("pre-commit is not installed (pip install pre-commit)")
    return found


def _hook() -> dict:
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    usage = CliRunner().invoke(app, ["check", "--help"]).output
    missing = [flag for flag in shlex.split(hook["entry"]) if flag.startswith("--") and flag not in usage]
    if missing:
        pytest.skip(f"the hook's entry names {', '.join(missing)}, which this vramcalc check lacks")
    return hook


def _git(cwd: Path, *args: str) -> None:
    identity = ("-c", "user.name=vramcalc tests", "-c", "user.email=tests@localhost", "-c", "commit.gpgsign=false")
    subprocess.run(["git", *identity, *args], cwd=cwd, check=True, capture_output=True)


def _clone_of_working_tree(into: Path) -> Path:
    """A git repository holding this checkout's working tree (tracked and untracked files, not the
    ignored ones) as one commit: what pre-commit would clone from the published repository."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=False,
    )
    if listed.returncode != 0:
        pytest.skip("this checkout is not a git repository")
    into.mkdir()
    for name in sorted(set(listed.stdout.decode().split("\0")) - {""}):
        source = ROOT / name
        if source.is_file():  # a file deleted but not yet staged is listed too
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    _git(into, "init", "-q")
    _git(into, "add", "-A")
    _git(into, "commit", "-q", "-m", "working tree")
    return into


def test_pre_commit_hook_from_a_clone_blocks_a_spec_that_does_not_fit(tmp_path: Path) -> None:
    pre_commit = _pre_commit()
    _hook()
    clone = _clone_of_working_tree(tmp_path / "vramcalc")
    rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True, check=True)
    project = tmp_path / "project"
    (project / "configs").mkdir(parents=True)
    shutil.copy(FITS, project / "configs" / "fits.yaml")
    shutil.copy(TOO_BIG, project / "configs" / "too-big.yaml")
    # Not a spec: pre-commit passes it (a changed YAML file under configs/); --skip-non-specs skips it.
    (project / "configs" / "deepspeed.yaml").write_text("zero_optimization: {stage: 2}\n", encoding="utf-8")
    # docs/ci.md's snippet without the optional keys: the hook's own files pattern and entry apply.
    config = {"repos": [{"repo": str(clone), "rev": rev.stdout.strip(), "hooks": [{"id": "vramcalc-check"}]}]}
    (project / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    _git(project, "init", "-q")
    _git(project, "add", "-A")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {
        **os.environ,
        "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-cache"),
        "XDG_CACHE_HOME": str(scratch),
        "XDG_DATA_HOME": str(scratch),
        "TMPDIR": str(scratch),
        "PIP_NO_CACHE_DIR": "1",
        "PRE_COMMIT_COLOR": "never",
        # virtualenv would start background `pip download`s of newer seed wheels into XDG_DATA_HOME (its
        # periodic update, for environments made later); they would outlive the test and its tmp_path
        "VIRTUALENV_NO_PERIODIC_UPDATE": "1",
    }
    env.pop("PYTHONPATH", None)  # the hook runs the vramcalc pre-commit installed from the clone

    def run_hook(*files: str) -> subprocess.CompletedProcess[str]:
        cmd = [pre_commit, "run", "vramcalc-check", "--verbose", "--files", *files]
        return subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=600, check=False)

    passed = run_hook("configs/fits.yaml", "configs/deepspeed.yaml")
    if passed.returncode == PRE_COMMIT_ERROR and "pip" in passed.stdout + passed.stderr:
        pytest.skip("pre-commit could not build the hook's environment (no network or package index?)")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "configs/fits.yaml" in passed.stdout and "Passed" in passed.stdout

    blocked = run_hook("configs/fits.yaml", "configs/too-big.yaml")
    assert blocked.returncode == 1, blocked.stdout + blocked.stderr
    assert "Failed" in blocked.stdout and "exit code: 1" in blocked.stdout
    assert "configs/too-big.yaml" in blocked.stdout and "DOES NOT FIT" in blocked.stdout
