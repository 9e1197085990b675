"""Fuzz target ``hub``: mutated repositories and a misbehaving server behind a Hub id.

Each input takes a ``checkpoint-folder`` input's files (the same seeds and mutations of headers, configs,
indexes and bytes; links and FIFOs aside, which a repository cannot hold), serves them from the local
Hub stand-in (tests/hubserver.py, on 127.0.0.1: no other host resolves while the command runs) as a
repository of its own, and may make the server misbehave: an error status on every request or on one
kind (the repository's info, its file list, a download, the CDN), a body a byte shorter than its
``Content-Length``, ``Range`` ignored. The command names the repository as written or with a revision
(a branch, a commit, one that does not exist) or a file of it: ``estimate --model ID --json``,
``import ID`` or a spec's ``model: ID``.

Rules: those of ``checkpoint-folder`` (exit 0 with an estimate or a spec, or exit 2 with one ``error:``
line and, with ``--json``, the ``{"error": {"message", "stage"}}`` document), with the error line naming
the repository; no traceback; within :data:`HUB_LIMIT_S`; nothing written in the working directory.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import shutil
import socket
from collections.abc import Iterator
from typing import Any

from fuzz_checkpoint import STAGES, checkpoint_cases, model_command_errors
from fuzz_support import FuzzFailure, describe, invoke, tolerating_known_issues, workspace
from hubserver import HubServer, local_resolver
from hypothesis import strategies as st

#: Seconds a request may take (VRAMCALC_HUB_TIMEOUT) and a command: a few requests, each at most that.
REQUEST_TIMEOUT_S = int(os.environ.get("FUZZ_HUB_TIMEOUT", "2"))
HUB_LIMIT_S = 20.0
#: Server faults: none most often; an error status everywhere or on one kind of request; a short body.
FAULTS = [None] * 6 + ["status", "path", "path", "short", "no-range"]
STATUSES = [401, 403, 404, 429, 500, 502, 503]
PATHS = ["/api/models/", "/tree/", "/resolve/", "/cdn/", ".safetensors", "config.json", ".index.json"]
REVISIONS = ["", "", "", "@main", "@0123456789abcdef0123456789abcdef01234567", "@v1.0", "@refs%2Fpr%2F1", "@"]
_counter = itertools.count()


class HubCase:
    """One input: a checkpoint case's files, a server fault, how the repository is named, the command."""

    def __init__(self, files: tuple[tuple[str, bytes], ...], mutations: tuple[str, ...], fault: tuple[Any, ...],
                 revision: str, filename: bool, command: str) -> None:  # fmt: skip
        self.files, self.mutations, self.fault = files, mutations, fault
        self.revision, self.filename, self.command = revision, filename, command

    def __repr__(self) -> str:
        return (
            f"HubCase(mutations={self.mutations!r}, fault={self.fault!r}, revision={self.revision!r}, "
            f"filename={self.filename!r}, command={self.command!r})"
        )


@st.composite
def hub_cases(draw: st.DrawFn) -> HubCase:
    case = draw(checkpoint_cases())
    fault_kind = draw(st.sampled_from(FAULTS))
    fault: tuple[Any, ...] = (fault_kind,)
    if fault_kind == "status":
        fault += (draw(st.sampled_from(STATUSES)),)
    elif fault_kind == "path":
        fault += (draw(st.sampled_from(PATHS)), draw(st.sampled_from(STATUSES)))
    revision = draw(st.sampled_from(REVISIONS))
    filename = draw(st.sampled_from([False] * 5 + [True]))
    return HubCase(case.files, case.mutations, fault, revision, filename, case.command)


@functools.cache
def server() -> HubServer:
    """One stand-in per process; its caches and the Hub's in the workspace."""
    from huggingface_hub import constants

    root = workspace().root
    os.environ.update(
        {
            "HF_HOME": str(root / "hf"),
            "HF_HUB_CACHE": str(root / "hf" / "hub"),
            "VRAMCALC_CACHE": str(root / "vramcalc-cache"),
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_TOKEN": "hf_anonymous",
        }
    )
    constants.HF_HUB_DISABLE_TELEMETRY = True
    return HubServer().start()


@contextlib.contextmanager
def hub_environment(hub: HubServer) -> Iterator[None]:
    """The command's environment: the stand-in as the Hub, short timeouts, online, and only local names
    resolving (a request to any other host fails at once)."""
    saved = {name: os.environ.get(name) for name in ("HF_ENDPOINT", "VRAMCALC_HUB_TIMEOUT", "HF_HUB_OFFLINE")}
    os.environ["HF_ENDPOINT"] = hub.url
    os.environ["VRAMCALC_HUB_TIMEOUT"] = str(REQUEST_TIMEOUT_S)
    os.environ.pop("HF_HUB_OFFLINE", None)
    real = socket.getaddrinfo
    socket.getaddrinfo = local_resolver(real)  # type: ignore[assignment]
    try:
        yield
    finally:
        socket.getaddrinfo = real  # type: ignore[assignment]
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _serve(hub: HubServer, case: HubCase) -> tuple[str, str]:
    """Serve the case's files as a new repository; its id, and the id as the command names it."""
    number = next(_counter)
    folder = workspace().root / "hub-repos" / str(number)
    shutil.rmtree(folder, ignore_errors=True)
    for name, data in case.files:
        path = folder / name
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        except OSError:  # a name the file system refuses (the checkpoint case's index names are not files)
            continue
    folder.mkdir(parents=True, exist_ok=True)
    repo = f"fuzz/case-{number}"
    hub.add_repo(repo, folder, revisions={"v1.0": "0123456789abcdef0123456789abcdef01234567"})
    named = repo
    weights = sorted(name for name, _ in case.files if name.endswith(".safetensors"))
    if case.filename and weights:
        named = f"{repo}/{weights[0]}"
    return repo, named + case.revision


def command_line(case: HubCase, named: str) -> list[str]:
    if case.command == "estimate":
        return ["estimate", "--model", named, "--mode", "inference", "--seq-len", "64", "--json"]
    if case.command == "import":
        return ["import", named]
    workload = "{mode: inference, batch_size: 1, seq_len: 64}"
    spec = workspace().spec_file(f"name: fuzz\nmodel: {json.dumps(named)}\nworkload: {workload}\n")
    return ["estimate", str(spec), "--json"]


@tolerating_known_issues
def check_hub_case(case: HubCase) -> None:
    import yaml

    hub = server()
    repo, named = _serve(hub, case)
    kind = case.fault[0]
    hub.status = case.fault[1] if kind == "status" else None
    hub.fail_paths = (case.fault[1], case.fault[2]) if kind == "path" else None
    hub.short_body = kind == "short"
    hub.ignore_range = kind == "no-range"
    args = command_line(case, named)
    cwd = workspace().cwd
    try:
        with hub_environment(hub):
            result = invoke(args, limit=HUB_LIMIT_S)
    finally:
        hub.status, hub.fail_paths, hub.short_body, hub.ignore_range = None, None, False, False
        hub.repos.pop(repo, None)
        shutil.rmtree(workspace().root / "hub-repos", ignore_errors=True)

    def fail(why: str) -> None:
        raise FuzzFailure(f"{why}\ninput: {case!r}\n" + describe(args, result))

    errors = model_command_errors(args, result, fail)
    if result.exit_code == 0:
        if errors:
            fail("exit 0 with an error line")
        doc = json.loads(result.stdout) if "--json" in args else yaml.safe_load(result.stdout)
        if not isinstance(doc, dict):
            fail("exit 0 without a document")
    else:
        if len(errors) != 1:
            fail(f"exit 2 with {len(errors)} error lines (one is the rule)")
        line = errors[0][len("error: ") :]
        if repo not in line and (case.command != "spec" or args[1] not in line):
            fail("the error line names neither the repository nor the spec file")
        if "--json" in args and result.stdout.strip():
            error = json.loads(result.stdout).get("error")
            if not isinstance(error, dict) or error.get("stage") not in STAGES or error.get("message") != line:
                fail("the --json error is not {'error': {'message': the error line, 'stage'}}")
    if list(cwd.iterdir()):
        fail(f"files written in the working directory: {sorted(p.name for p in cwd.iterdir())[:5]}")
