"""vramcalc.paths: directory and glob-pattern searches for spec files stay inside the directory given,
never loop, skip kernel file systems and special files, and stop at their bounds with one error line
naming the argument."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vramcalc import paths
from vramcalc.errors import SpecError
from vramcalc.paths import MAX_DEPTH, is_pattern, spec_files_matching, spec_files_under
from vramcalc.planning.check import expand_paths

SUFFIXES = (".yaml", ".yml")
ROOT = Path(__file__).resolve().parent.parent


def touch(root: Path, *names: str) -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x: 1\n", encoding="utf-8")


def rel(found: list[str], root: Path) -> list[str]:
    return [str(Path(path).relative_to(root)) for path in found]


# -- directories ---------------------------------------------------------------------------------------


def test_directory_lists_spec_files_below_it_sorted_by_path_components(tmp_path: Path) -> None:
    touch(tmp_path, "top.yaml", "b/x.yml", "b-c/x.yaml", "b/deep/er/z.yaml", "notes.md", "b/x.yaml.bak")
    touch(tmp_path, ".git/hooks/h.yaml", "b/.cache/c.yaml", ".hidden.yaml")
    found = spec_files_under(str(tmp_path), SUFFIXES)
    # sorted as path components, the order pathlib gives: ("b", ...) before ("b-c", ...) before ("top.yaml",)
    assert rel(found, tmp_path) == ["b/deep/er/z.yaml", "b/x.yml", "b-c/x.yaml", "top.yaml"]


def test_symlink_loop_is_not_followed(tmp_path: Path) -> None:
    touch(tmp_path, "a/spec.yaml")
    (tmp_path / "a" / "loop").symlink_to(tmp_path / "a", target_is_directory=True)
    (tmp_path / "a" / "self").symlink_to("self")  # a link to itself: ELOOP on every stat
    assert rel(spec_files_under(str(tmp_path), SUFFIXES), tmp_path) == ["a/spec.yaml"]
    assert rel(spec_files_matching(f"{tmp_path}/**/*.yaml", SUFFIXES), tmp_path) == ["a/spec.yaml"]


def test_symlinked_directory_leading_outside_the_root_is_not_entered(tmp_path: Path) -> None:
    touch(tmp_path, "outside/secret.yaml", "root/own.yaml")
    (tmp_path / "root" / "out").symlink_to(tmp_path / "outside", target_is_directory=True)
    root = tmp_path / "root"
    assert rel(spec_files_under(str(root), SUFFIXES), root) == ["own.yaml"]
    for pattern in ("**/*.yaml", "*/*.yaml", "*/secret.yaml"):
        assert rel(spec_files_matching(f"{root}/{pattern}", SUFFIXES), root) == (
            ["own.yaml"] if "**" in pattern else []
        )


def test_the_directory_named_may_itself_be_a_symlink(tmp_path: Path) -> None:
    touch(tmp_path, "real/a.yaml")
    (tmp_path / "named").symlink_to(tmp_path / "real", target_is_directory=True)
    assert spec_files_under(str(tmp_path / "named"), SUFFIXES) == [str(tmp_path / "named" / "a.yaml")]


def test_only_regular_files_are_listed(tmp_path: Path) -> None:
    touch(tmp_path, "real.yaml")
    os.mkfifo(tmp_path / "fifo.yaml")
    (tmp_path / "broken.yaml").symlink_to(tmp_path / "nowhere.yaml")
    (tmp_path / "linked.yaml").symlink_to(tmp_path / "real.yaml")
    (tmp_path / "dir.yaml").mkdir()
    expected = ["linked.yaml", "real.yaml"]
    assert rel(spec_files_under(str(tmp_path), SUFFIXES), tmp_path) == expected
    assert rel(spec_files_matching(f"{tmp_path}/*.yaml", SUFFIXES), tmp_path) == expected


def test_depth_limit(tmp_path: Path) -> None:
    deepest = tmp_path.joinpath(*["d"] * MAX_DEPTH)
    touch(deepest, "ok.yaml")
    assert spec_files_under(str(tmp_path), SUFFIXES) == [str(deepest / "ok.yaml")]
    (deepest / "d").mkdir()  # one level more than allowed, even without a spec in it
    with pytest.raises(SpecError) as caught:
        spec_files_under(str(tmp_path), SUFFIXES)
    assert str(caught.value).startswith(f"{tmp_path}: directories nested more than {MAX_DEPTH} levels deep")
    with pytest.raises(SpecError, match=f"more than {MAX_DEPTH} levels"):
        spec_files_matching(f"{tmp_path}/**/*.yaml", SUFFIXES)


def test_entry_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "MAX_ENTRIES", 5)
    touch(tmp_path, "a.yaml", "b.yaml", "c.md", "sub/d.yaml")  # 4 entries in tmp_path, 1 in sub: 5
    assert len(spec_files_under(str(tmp_path), SUFFIXES)) == 3
    touch(tmp_path, ".e.yaml")  # hidden entries are looked at too: 6
    with pytest.raises(SpecError) as caught:
        spec_files_under(str(tmp_path), SUFFIXES)
    assert str(caught.value) == (
        f"{tmp_path}: more than 5 directory entries to search; name a smaller directory or the spec files themselves"
    )
    with pytest.raises(SpecError, match="more than 5 directory entries"):
        spec_files_matching(f"{tmp_path}/**/*.yaml", SUFFIXES)


def test_spec_file_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "MAX_SPEC_FILES", 2)
    touch(tmp_path, "a.yaml", "b.yml", "readme.md")
    assert len(spec_files_under(str(tmp_path), SUFFIXES)) == 2
    touch(tmp_path, "c.yaml")
    for search in (
        lambda: spec_files_under(str(tmp_path), SUFFIXES),
        lambda: spec_files_matching(f"{tmp_path}/*", SUFFIXES),
    ):
        with pytest.raises(SpecError, match="more than 2 spec files"):
            search()


def test_kernel_file_systems_are_refused_when_named(tmp_path: Path) -> None:
    for root in ("/proc", "/sys", "/dev", "/proc/self"):
        with pytest.raises(SpecError) as caught:
            spec_files_under(root, SUFFIXES)
        assert str(caught.value).startswith(f"{root}: a kernel file system")
    (tmp_path / "p").symlink_to("/proc", target_is_directory=True)
    with pytest.raises(SpecError, match="kernel file system"):
        spec_files_under(str(tmp_path / "p"), SUFFIXES)
    with pytest.raises(SpecError, match="kernel file system"):
        spec_files_matching("/proc/*/status.yaml", SUFFIXES)


def test_kernel_file_systems_are_skipped_when_met(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    touch(tmp_path, "kernel/k.yaml", "kernelish/ok.yaml", "top.yaml")
    monkeypatch.setattr(paths, "SYSTEM_DIRS", (str(tmp_path / "kernel"),))
    expected = ["kernelish/ok.yaml", "top.yaml"]  # the prefix alone is not the directory
    assert rel(spec_files_under(str(tmp_path), SUFFIXES), tmp_path) == expected
    assert rel(spec_files_matching(f"{tmp_path}/**/*.yaml", SUFFIXES), tmp_path) == expected
    assert rel(spec_files_matching(f"{tmp_path}/*/*.yaml", SUFFIXES), tmp_path) == ["kernelish/ok.yaml"]


def test_unreadable_subdirectory_is_skipped_and_missing_root_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as caught:
        spec_files_under(str(tmp_path / "missing"), SUFFIXES)
    assert str(caught.value) == f"{tmp_path / 'missing'}: cannot read this directory (No such file or directory)"
    assert spec_files_matching(f"{tmp_path}/missing/*.yaml", SUFFIXES) == []


# -- glob patterns ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("*.yaml", ["a.yaml"]),
        ("**/*.yaml", ["a.yaml", "m/b.yaml", "m/n/c.yaml"]),  # ** spans zero or more directories
        ("**/*.y*ml", ["a.yaml", "m/b.yaml", "m/n/c.yaml", "m/n/d.yml"]),
        ("m/**", ["m/b.yaml", "m/n/c.yaml", "m/n/d.yml"]),  # 'dir/**': every file below dir
        ("*/*.yaml", ["m/b.yaml"]),
        ("m/n/[cd].y?ml", ["m/n/c.yaml"]),
        ("?/n/*.yml", ["m/n/d.yml"]),
        ("*/.h/*.yaml", ["m/.h/e.yaml"]),  # a hidden directory named literally is searched
        ("m/.*.yaml", ["m/.f.yaml"]),  # a component starting with a dot matches hidden names
        ("none*.yaml", []),
    ],
)
def test_glob_patterns(tmp_path: Path, pattern: str, expected: list[str]) -> None:
    touch(tmp_path, "a.yaml", "a.txt", "m/b.yaml", "m/n/c.yaml", "m/n/d.yml", "m/.h/e.yaml", "m/.f.yaml")
    assert rel(spec_files_matching(f"{tmp_path}/{pattern}", SUFFIXES), tmp_path) == expected


def test_relative_pattern_keeps_the_spelling_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    touch(tmp_path, "a.yaml", "m/b.yaml")
    monkeypatch.chdir(tmp_path)
    assert spec_files_matching("**/*.yaml", SUFFIXES) == ["a.yaml", "m/b.yaml"]
    assert spec_files_matching("./m/*.yaml", SUFFIXES) == ["./m/b.yaml"]


def test_is_pattern() -> None:
    assert [is_pattern(arg) for arg in ("a/*.yaml", "a?.yaml", "[ab].yaml", "a.yaml", "")] == [
        True,
        True,
        True,
        False,
        False,
    ]


# -- through vramcalc check ------------------------------------------------------------------------------


def test_expand_paths_turns_a_bound_into_one_error_naming_the_argument(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(paths, "MAX_SPEC_FILES", 1)
    touch(tmp_path, "many/a.yaml", "many/b.yaml", "one/c.yaml")
    found, errors = expand_paths([str(tmp_path / "many"), str(tmp_path / "one"), str(tmp_path / "one")])
    assert found == [str(tmp_path / "one" / "c.yaml")]  # listed once
    assert [error.messages for error in errors] == [
        (f"{tmp_path / 'many'}: more than 1 spec files; name fewer directories or files",)
    ]


@pytest.mark.parametrize("arg", ["/", "/**/*.yaml"])
def test_check_of_the_whole_file_system_ends(arg: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "vramcalc", "check", arg], capture_output=True, text=True, timeout=30, env=env
    )
    assert done.returncode in (0, 1, 2), done.stderr
    assert "Traceback" not in done.stderr
    if done.returncode == 2:
        assert done.stderr.startswith(f"error: {arg}: ")
