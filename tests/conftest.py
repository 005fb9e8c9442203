"""Shared fixtures: the golden vectors in tests/data (see tests/data/README.md) and devices."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"


@pytest.fixture(scope="session")
def weight_golden() -> dict:
    return json.loads((DATA / "dmp_weight_golden.json").read_text())


@pytest.fixture(scope="session")
def layout_vectors() -> dict:
    return json.loads((DATA / "layout_offsets.json").read_text())


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
        from dvsdk.link.agent import AgentProcess

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
