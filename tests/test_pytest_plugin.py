"""The pytest plugin (dvsdk.qa.pytest_plugin), run in child pytest processes (pytester)
the way a user runs it: its own test files, --dv-device, xdist workers, two real agents."""

from __future__ import annotations

import json

import pytest

from dvsdk.link.agent import AgentProcess

from .conftest import ROOT

DIGITS = ROOT / "examples" / "models" / "digits.bin"
SEVEN = ROOT / "examples" / "models" / "samples" / "seven_1442.png"

USER_TESTS = f'''
import json, os
import pytest

def _record(url):
    with open(os.environ["DV_LOG"], "a") as f:
        f.write(json.dumps({{"worker": os.environ.get("PYTEST_XDIST_WORKER", "-"),
                            "url": url}}) + "\\n")

def test_digit(dv_net, dv_device_url):
    net = dv_net({str(DIGITS)!r})
    out = net.run_image({str(SEVEN)!r})
    assert net.labels[out["probs"][0].argmax()] == "seven"
    _record(dv_device_url)

@pytest.mark.parametrize("i", range(5))
def test_device_info(dv_device, dv_device_url, i):
    assert dv_device.info().ub_size > 0
    _record(dv_device_url)

@pytest.mark.dv_hardware
def test_needs_a_board(dv_device):
    raise AssertionError("must be skipped on a simulator")

@pytest.mark.dv_simulator
def test_simulator_only(dv_device):
    assert dv_device.info().simulated
'''


def _log(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def user(pytester, monkeypatch, tmp_path):
    pytester.makepyfile(test_user=USER_TESTS)
    log = tmp_path / "dv.log"
    monkeypatch.setenv("DV_LOG", str(log))
    monkeypatch.delenv("DVSDK_DEVICE", raising=False)
    return pytester, log


def test_default_device_is_the_simulator(user):
    pytester, log = user
    result = pytester.runpytest_subprocess("-rs")
    result.assert_outcomes(passed=7, skipped=1)
    result.stdout.fnmatch_lines(["*needs a real DV700; sim:// is simulated*"])
    assert {r["url"] for r in _log(log)} == {"sim://"}


def test_each_device_url_parametrizes_the_tests(user):
    pytester, log = user
    urls = ["sim://?clock_mhz=300", "sim://?clock_mhz=200"]
    result = pytester.runpytest_subprocess("--dv-device", urls[0], "--dv-device", urls[1], "-v")
    result.assert_outcomes(passed=14, skipped=2)
    result.stdout.fnmatch_lines(["*test_digit?sim://?clock_mhz=200? PASSED*"])
    runs = _log(log)
    assert sorted(r["url"] for r in runs) == sorted(urls * 6)


def test_xdist_workers_each_take_their_own_agent(user):
    pytester, log = user
    with AgentProcess("sim://") as a, AgentProcess("sim://") as b:
        result = pytester.runpytest_subprocess("-n", "2", "--dv-device", a.url,
                                               "--dv-device", b.url)
    result.assert_outcomes(passed=7, skipped=1)
    runs = _log(log)
    by_worker: dict[str, set[str]] = {}
    for r in runs:
        by_worker.setdefault(r["worker"], set()).add(r["url"])
    assert len(runs) == 6
    assert all(len(u) == 1 for u in by_worker.values()), by_worker  # one device per worker
    urls = [next(iter(u)) for u in by_worker.values()]
    assert len(set(urls)) == len(urls)                               # never shared
    assert set(urls) <= {a.url, b.url}


def test_more_workers_than_boards_is_a_usage_error(user):
    pytester, _ = user
    result = pytester.runpytest_subprocess("-n", "3", "--dv-device", "socket://127.0.0.1:9",
                                           "--dv-device", "socket://127.0.0.1:10")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*3 xdist workers but 2 device(s)*never shared*"])


def test_the_same_board_twice_is_a_usage_error(user):
    pytester, _ = user
    result = pytester.runpytest_subprocess("--dv-device", "uio://", "--dv-device", "uio://")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_the_report_names_the_device_of_every_test_under_xdist_too(user, tmp_path):
    """Issue 29 item 5: the header lists which worker tests on which device, each verbose
    result line names its device (the ids read [dv], the same on every worker), and the
    JUnit XML carries a dv_device property per test."""
    import xml.etree.ElementTree as ET

    pytester, log = user
    xml = tmp_path / "junit.xml"
    with AgentProcess("sim://") as a, AgentProcess("sim://") as b:
        result = pytester.runpytest_subprocess("-n", "2", "-v", "--dv-device", a.url,
                                               "--dv-device", b.url, f"--junitxml={xml}")
    result.assert_outcomes(passed=7, skipped=1)
    result.stdout.fnmatch_lines([f"dvsdk devices, one per xdist worker: gw0 -> {a.url}, "
                                 f"gw1 -> {b.url}*"])
    ran = {r["worker"]: r["url"] for r in _log(log)}
    for worker, url in ran.items():  # each result line: its worker and that worker's URL
        result.stdout.fnmatch_lines([f"*[[]{worker}[]]*PASSED ({url})*test_user.py::*"])
    props = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        for p in case.iter("property"):
            if p.get("name") == "dv_device":
                props[case.get("name")] = p.get("value")
    assert len(props) == 8 and set(props.values()) <= {a.url, b.url}
    assert set(props.values()) == set(ran.values())


def test_the_header_lists_the_devices_without_xdist(user):
    pytester, _ = user
    urls = ["sim://?clock_mhz=300", "sim://?clock_mhz=200"]
    result = pytester.runpytest_subprocess("--dv-device", urls[0], "--dv-device", urls[1])
    result.stdout.fnmatch_lines([f"dvsdk devices: {urls[0]}, {urls[1]} (each test runs on "
                                 "each; its id names the URL)"])
