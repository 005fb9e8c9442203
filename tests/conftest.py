"""Shared fixtures: the golden vectors in tests/data (see tests/data/README.md) and devices."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# Keras (tests/keras_apps.py) reads its backend once, when first imported: numpy, which
# needs neither TensorFlow nor JAX, whichever test imports it first
os.environ.setdefault("KERAS_BACKEND", "numpy")

pytest_plugins = ["pytester"]

# No verdict depends on the machine's speed: hypothesis's per-example deadline (200 ms) and
# its "data generation too slow" health check are wall-clock measures, off for every test.
try:
    from hypothesis import HealthCheck, settings
except ImportError:  # (a dev dependency; the tests that use it import it themselves)
    pass
else:
    settings.register_profile("dvsdk", deadline=None,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile("dvsdk")

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"


def pytest_configure(config):
    """dvsdk-agent creates its link secret in the user's config folder on its first start
    and clients read it there (firmware_spec/link.md §5): the tests' agents and clients
    share a private folder instead (one for the whole run, xdist workers included)."""
    if not os.environ.get("DVSDK_TEST_CONFIG_HOME"):
        os.environ["DVSDK_TEST_CONFIG_HOME"] = tempfile.mkdtemp(prefix="dvsdk-test-config-")
        config._dvsdk_config_home = os.environ["DVSDK_TEST_CONFIG_HOME"]
    os.environ["XDG_CONFIG_HOME"] = os.environ["DVSDK_TEST_CONFIG_HOME"]


def pytest_unconfigure(config):
    made = getattr(config, "_dvsdk_config_home", None)
    if made:
        shutil.rmtree(made, ignore_errors=True)


@pytest.fixture(scope="session")
def weight_golden() -> dict:
    return json.loads((DATA / "dmp_weight_golden.json").read_text())


@pytest.fixture(scope="session")
def layout_vectors() -> dict:
    return json.loads((DATA / "layout_offsets.json").read_text())


# -- devices -----------------------------------------------------------------------------
# Every driver test takes `device`; BACKENDS lists the URLs (or factories) it runs against:
# the simulator with either kick protocol (§10.4: the R5 through shared memory and an IPI,
# as DMP's current image runs, and the direct kick of older bitstreams), the fake board
# (uio://) in both, DMP's kernel module faked at the ioctl/mmap level (dv://), and the
# link (socket://, pty) to an agent serving the simulator's default (r5).

def _sim(kick: str):
    return lambda: f"sim://?kick={kick}"


def _fake_board(kick: str):
    def make():
        from .fakeboard import open_fake_device

        return open_fake_device(kick=kick)

    return make


def _fake_kmod():
    from .fakedv import open_fake_kmod

    return open_fake_kmod()


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


BACKENDS = {"sim-r5": _sim("r5"), "sim-direct": _sim("direct"), "uio-r5": _fake_board("r5"),
            "uio-direct": _fake_board("direct"), "dv": _fake_kmod,
            "link-tcp": _link("tcp:127.0.0.1:0"), "link-pty": _link("pty")}


@pytest.fixture(params=sorted(BACKENDS))
def device(request):
    import dvsdk

    url = BACKENDS[request.param]()
    dev = dvsdk.open_device(url) if isinstance(url, str) else url
    try:
        yield dev
    finally:
        dev.close()


@pytest.fixture(params=["r5", "direct"])
def sim(request):
    """The simulator itself, for tests of simulator-only behaviour (faults, coherence), with
    either kick protocol (tests/hw.py ``kick_stream`` starts a raw stream with either)."""
    import dvsdk

    dev = dvsdk.open_device(f"sim://?kick={request.param}")
    try:
        yield dev
    finally:
        dev.close()
