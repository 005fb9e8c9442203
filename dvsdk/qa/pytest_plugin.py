"""A pytest plugin for hardware-in-the-loop tests of your own networks (entry point
``pytest11``: installed with dvsdk, active in every pytest run).

Fixtures:

* ``dv_device``: an open device. With ``--dv-device URL`` given several times, every test
  that uses it runs once per device (the test id names the URL). Without ``--dv-device``:
  the ``dv_devices`` ini option, else ``$DVSDK_DEVICE``, else ``sim://``.
* ``dv_net``: a loader, ``dv_net("model.bin")`` → :class:`dvsdk.runtime.net.Net` on
  ``dv_device``; every net it loaded is closed after the test.
* ``dv_device_url``: the URL of the device the test runs on.

Under pytest-xdist (``-n N``) each worker takes its own device from the list instead of
running every device: worker ``gwK`` gets the K-th URL (modulo their number), so a board is
never shared between workers. More workers than URLs is a usage error when any of them is a
board; simulators may be shared (each worker opens its own).

Which device ran what: the report header lists the devices (under xdist, which worker
tests on which), every test that uses a device records it as the ``dv_device`` property
(JUnit XML), and under xdist, whose test ids cannot name a worker's device, each verbose
result line does, as ``PASSED (URL)``.

Markers: ``@pytest.mark.dv_hardware`` skips a test on a simulated device (``sim://``, or an
agent serving one); ``@pytest.mark.dv_simulator`` skips it on real hardware (for tests of
simulator-only features such as fault injection or coherence checks).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

_HELP = ("DV700 device URL for the dv_device fixture (repeatable: tests run on each; "
         "with -n each xdist worker takes one). Default: the dv_devices ini option, "
         "$DVSDK_DEVICE, else sim://")


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
    workers = _xdist_workers(config)
    if boards and workers > len(urls):
        raise pytest.UsageError(
            f"{workers} xdist workers but {len(urls)} device(s) ({', '.join(urls)}): a board "
            f"is never shared between workers; pass -n {len(urls)} or more --dv-device URLs")


_WORKER = "xdist-worker"


def _worker_url(config: pytest.Config) -> str | None:
    """Under xdist, the one URL this worker tests on (None outside a worker)."""
    worker = getattr(config, "workerinput", {}).get("workerid")  # "gw3"
    if worker is None:
        return None
    urls = _urls(config)
    return urls[int(worker[2:]) % len(urls)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "dv_device_url" not in metafunc.fixturenames:
        return
    if _xdist_workers(metafunc.config) or hasattr(metafunc.config, "workerinput"):
        # xdist needs the same test ids on every worker: the URL is resolved per worker
        metafunc.parametrize("dv_device_url", [_WORKER], ids=["dv"], indirect=True,
                             scope="session")
    else:
        urls = _urls(metafunc.config)
        metafunc.parametrize("dv_device_url", urls, ids=urls, indirect=True,
                             scope="session")


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Which device runs what: every URL, and under xdist which worker tests on which."""
    urls = _urls(config)
    workers = _xdist_workers(config)
    if workers:
        pairs = ", ".join(f"gw{k} -> {urls[k % len(urls)]}" for k in range(workers))
        return [f"dvsdk devices, one per xdist worker: {pairs} (each result line names its "
                "device)"]
    return [f"dvsdk devices: {', '.join(urls)}"
            + (" (each test runs on each; its id names the URL)" if len(urls) > 1 else "")]


def _item_url(item: pytest.Item) -> str | None:
    """The device URL ``item`` runs on (None: it uses no device)."""
    if "dv_device_url" not in getattr(item, "fixturenames", ()):
        return None
    param = getattr(getattr(item, "callspec", None), "params", {}).get("dv_device_url")
    if param is None or param == _WORKER:
        return _worker_url(item.config) or _urls(item.config)[0]
    return param


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Record the device in the test's report (``user_properties``: JUnit XML properties,
    and carried from xdist workers to the controller)."""
    url = _item_url(item)
    if url is not None and ("dv_device", url) not in item.user_properties:
        item.user_properties.append(("dv_device", url))


@pytest.hookimpl(tryfirst=True)
def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config
                             ) -> tuple[str, str, str] | None:
    """Under xdist the test ids read ``[dv]`` (every worker must collect the same ids): the
    verbose result names the device instead, as ``PASSED (URL)``."""
    url = dict(getattr(report, "user_properties", ()) or ()).get("dv_device")
    if url is None or url in report.nodeid or report.when != "call" \
            or hasattr(report, "wasxfail"):
        return None
    word = {"passed": "PASSED", "failed": "FAILED", "skipped": "SKIPPED"}[report.outcome]
    letter = {"passed": ".", "failed": "F", "skipped": "s"}[report.outcome]
    return report.outcome, letter, f"{word} ({url})"


@pytest.fixture(scope="session")
def dv_device_url(request: pytest.FixtureRequest) -> str:
    """The URL of the device this test runs on."""
    param = getattr(request, "param", None)
    if param is None or param == _WORKER:
        return _worker_url(request.config) or _urls(request.config)[0]
    return param


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
