"""The model-source tests' Hub: a local stand-in (tests/hubserver.py) on 127.0.0.1, with every cache in a
temporary folder and every name other than 127.0.0.1 and localhost made unresolvable, so no test can
reach huggingface.co (or anything else) whatever it does."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from hubserver import HubServer, local_resolver


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only local names resolve: a request to any other host fails at once, in every thread."""
    monkeypatch.setattr(socket, "getaddrinfo", local_resolver(socket.getaddrinfo))


@pytest.fixture
def hf_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_network: None) -> Path:
    """The Hugging Face and vramcalc caches in ``tmp_path``; no token, no offline mode, no telemetry."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("VRAMCALC_CACHE", str(tmp_path / "vramcalc"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_TOKEN", "hf_anonymous")  # never a token saved on this machine
    monkeypatch.setenv("VRAMCALC_HUB_TIMEOUT", "5")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


@pytest.fixture
def hub(hf_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    """A running Hub stand-in that ``HF_ENDPOINT`` points at; stopped after the test."""
    from huggingface_hub import constants

    # huggingface_hub reads its environment once, when first imported: a user agent built without
    # telemetry asks no registry of agents from the Hub (a request the counts below would see).
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    server = HubServer().start()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    try:
        yield server
    finally:
        server.stop()
