"""Shared fixtures: paths to the golden data in ../shared."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _shared_dir() -> Path:
    env = os.environ.get("DVSDK_SHARED")
    for cand in ([Path(env)] if env else []) + [ROOT.parent / "shared", ROOT / "shared"]:
        if (cand / "vectors").is_dir():
            return cand
    raise RuntimeError("cannot find ../shared (golden vectors)")


SHARED = _shared_dir()


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    return SHARED


@pytest.fixture(scope="session")
def weight_golden() -> dict:
    return json.loads((SHARED / "vectors" / "dmp_weight_golden.json").read_text())


@pytest.fixture(scope="session")
def layout_vectors() -> dict:
    return json.loads((SHARED / "vectors" / "layout_offsets.json").read_text())


# -- devices -----------------------------------------------------------------------------
# Every driver test takes `device`; BACKENDS lists the URLs (or factories) it runs against.
# The fake board (uio://) and the link (socket://, pty) join this list as they land.

def _sim_url() -> str:
    return "sim://"


def _fake_board():
    from .fakeboard import open_fake_device

    return open_fake_device()


_AGENTS: dict = {}


def _link(port: str):
    """A dvsdk-agent in another process serving sim:// over TCP loopback or a pty."""

    def make() -> str:
        from dvsdk.agent import AgentProcess

        if port not in _AGENTS:
            _AGENTS[port] = AgentProcess("sim://", port=port)
        url = _AGENTS[port].url
        return url + ("&" if "?" in url else "?") + "timeout=2"

    return make


def pytest_sessionfinish(session, exitstatus):
    for agent in _AGENTS.values():
        agent.stop()
    _AGENTS.clear()


BACKENDS = {"sim": _sim_url, "uio": _fake_board, "link-tcp": _link("tcp:127.0.0.1:0"),
            "link-pty": _link("pty")}


@pytest.fixture(params=sorted(BACKENDS))
def device(request):
    import dvsdk

    url = BACKENDS[request.param]()
    dev = dvsdk.open_device(url) if isinstance(url, str) else url
    try:
        yield dev
    finally:
        dev.close()


@pytest.fixture
def sim():
    """The simulator itself, for tests of simulator-only behaviour (faults, coherence)."""
    import dvsdk

    dev = dvsdk.open_device("sim://")
    try:
        yield dev
    finally:
        dev.close()
