"""A pytest plugin for hardware-in-the-loop tests of your own networks (entry point
``pytest11``: installed with dvsdk, active in every pytest run).

Fixtures:

* ``dv_device``: an open device. With ``--dv-device URL`` given several times, every test
  that uses it runs once per device (the test id names the URL). Without ``--dv-device``:
  the ``dv_devices`` ini option, else ``$DVSDK_DEVICE``, else ``sim://``.
* ``dv_net``: a loader, ``dv_net("model.bin")`` → :class:`dvsdk.runtime.net.Net` on
  ``dv_device``; every net it loaded is closed after the test.
* ``dv_device_url``: the URL of the device the test runs on.

Under pytest-xdist (``-n N``) it is the same: every test that uses a device runs once per
URL and its id names the URL (every worker computes the same ids from the same options or
ini). A board is never shared between workers: with a board URL the plugin schedules
xdist's default ``--dist load`` (or ``loadgroup``) itself (``pytest_xdist_make_scheduler``):
the tests whose id names a board form one unit, run by one worker, and every other test is
spread as ``load`` spreads them; simulators are not grouped (each worker opens its own).
It reads the board from the id, not from xdist's ``@group`` suffix (pytest 9.2 computes
ids from a structured form that xdist 3.8's suffix no longer changes, so ``loadgroup``
alone would spread a board's tests). Another ``--dist`` mode with a board URL is a usage
error.

Which device ran what: the report header lists the devices, each test id names its URL,
and every test that uses a device records it as the ``dv_device`` property (JUnit XML).

Markers: ``@pytest.mark.dv_hardware`` skips a test on a simulated device (``sim://``, or an
agent serving one); ``@pytest.mark.dv_simulator`` skips it on real hardware (for tests of
simulator-only features such as fault injection or coherence checks).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

_HELP = ("DV700 device URL for the dv_device fixture (repeatable: tests run on each, "
         "under xdist too, a board's tests on one worker). Default: the dv_devices ini "
         "option, $DVSDK_DEVICE, else sim://")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dvsdk", "DV700 hardware-in-the-loop")
    group.addoption("--dv-device", action="append", default=[], metavar="URL", help=_HELP)
    parser.addini("dv_devices", type="linelist", default=[],
                  help="device URLs used when --dv-device is not given")


def _is_simulator_url(url: str) -> bool:
    return url.split(":", 1)[0].lower() == "sim"


def _urls(config: pytest.Config) -> list[str]:
    return (list(config.getoption("dv_device")) or list(config.getini("dv_devices"))
            or [os.environ.get("DVSDK_DEVICE") or "sim://"])


def _xdist_workers(config: pytest.Config) -> int:
    """Worker processes this run starts (0: no xdist, or running inside a worker)."""
    n = getattr(config.option, "numprocesses", None)
    if n in (None, 0) or hasattr(config, "workerinput"):
        return 0
    return n if isinstance(n, int) else os.cpu_count() or 1


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "dv_hardware: needs a real DV700 (skipped on "
                                       "simulated devices)")
    config.addinivalue_line("markers", "dv_simulator: needs the simulator (skipped on "
                                       "real hardware)")
    urls = _urls(config)
    boards = [u for u in urls if not _is_simulator_url(u)]
    if len(set(boards)) != len(boards):
        raise pytest.UsageError(f"--dv-device names the same board twice: {boards}")
    if not boards or hasattr(config, "workerinput"):
        return
    if _xdist_workers(config):
        dist = getattr(config.option, "dist", "load")
        if dist not in ("load", "loadgroup"):
            raise pytest.UsageError(
                f"--dist {dist} could run one board's tests on two xdist workers at once "
                f"({', '.join(boards)}); use --dist load or loadgroup")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Each test using a device runs once per URL, the URL as its id; under xdist a
    board's tests are one group (one worker)."""
    if "dv_device_url" not in metafunc.fixturenames:
        return
    params = [pytest.param(u, id=u) for u in _urls(metafunc.config)]
    metafunc.parametrize("dv_device_url", params, indirect=True, scope="session")


def board_of(nodeid: str, boards: list[str]) -> str | None:
    """The board URL a test id names in its parameters (``test_x[socket://b1:7000-3]``),
    or None."""
    params = nodeid[nodeid.find("["):] if "[" in nodeid else ""
    for url in sorted(boards, key=len, reverse=True):   # b1:70 is not b1:7000's board
        for before in ("[", "-"):
            at = params.find(before + url)
            end = at + 1 + len(url)
            if at >= 0 and (end == len(params) or params[end] in "-]"):
                return url
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With a board URL: xdist's load scheduling with each board's tests one unit (one
    worker); None (xdist's own) otherwise."""
    boards = [u for u in _urls(config) if not _is_simulator_url(u)]
    if not boards:
        return None
    from xdist.scheduler import LoadScopeScheduling

    class BoardScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return board_of(nodeid, boards) or nodeid

    return BoardScheduling(config, log)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Which device runs what: every URL, and under xdist how they are spread."""
    urls = _urls(config)
    line = f"dvsdk devices: {', '.join(urls)}"
    if len(urls) > 1:
        line += " (each test runs on each; its id names the URL)"
    if _xdist_workers(config):
        boards = [u for u in urls if not _is_simulator_url(u)]
        line += (f"; under {_xdist_workers(config)} xdist workers "
                 + ("each board's tests on one worker" if boards else
                    "simulators on every worker"))
    return [line]


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Record the device in the test's report (``user_properties``: JUnit XML properties,
    and carried from xdist workers to the controller)."""
    if "dv_device_url" not in getattr(item, "fixturenames", ()):
        return
    url = getattr(getattr(item, "callspec", None), "params", {}).get("dv_device_url")
    if url is not None and ("dv_device", url) not in item.user_properties:
        item.user_properties.append(("dv_device", url))


@pytest.fixture(scope="session")
def dv_device_url(request: pytest.FixtureRequest) -> str:
    """The URL of the device this test runs on."""
    param = getattr(request, "param", None)
    return _urls(request.config)[0] if param is None else param


@pytest.fixture(scope="session")
def _dv_open_devices() -> Iterator[dict[str, Any]]:
    devices: dict[str, Any] = {}
    yield devices
    for dev in devices.values():
        dev.close()


@pytest.fixture
def dv_device(request: pytest.FixtureRequest, dv_device_url: str,
              _dv_open_devices: dict[str, Any]) -> Any:
    """The open device this test runs on (kept open for the session)."""
    import dvsdk

    dev = _dv_open_devices.get(dv_device_url)
    if dev is None:
        dev = _dv_open_devices[dv_device_url] = dvsdk.open_device(dv_device_url)
    simulated = bool(dev.info().simulated)
    if simulated and request.node.get_closest_marker("dv_hardware"):
        pytest.skip(f"needs a real DV700; {dv_device_url} is simulated")
    if not simulated and request.node.get_closest_marker("dv_simulator"):
        pytest.skip(f"needs the simulator; {dv_device_url} is a real DV700")
    return dev


@pytest.fixture
def dv_net(dv_device: Any) -> Iterator[Callable[..., Any]]:
    """``dv_net(path_or_netfile)`` loads a net.bin on ``dv_device``; closed after the test."""
    from dvsdk.runtime.net import load

    nets: list[Any] = []

    def _load(source: Any) -> Any:
        net = load(source, dv_device)
        nets.append(net)
        return net

    yield _load
    for net in nets:
        net.close()
