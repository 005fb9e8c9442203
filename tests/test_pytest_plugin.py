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


def test_xdist_runs_each_test_on_each_agent_and_each_board_on_one_worker(user):
    """Issue 29 item 5: under -n 2 every test runs once per device with the URL in its id
    (the same ids on every worker), and a board's tests all run on one worker: a board is
    never shared between workers (the plugin's scheduler reads the board from the id: with
    pytest 9.2, xdist 3.8's loadgroup suffix no longer changes ids and spread a board's
    tests over both workers)."""
    pytester, log = user
    with AgentProcess("sim://") as a, AgentProcess("sim://") as b:
        result = pytester.runpytest_subprocess("-n", "2", "-v", "--dv-device", a.url,
                                               "--dv-device", b.url)
    result.assert_outcomes(passed=14, skipped=2)
    for url in (a.url, b.url):
        result.stdout.fnmatch_lines([f"*PASSED test_user.py::test_digit[[]{url}[]]*"])
        for i in range(5):
            result.stdout.fnmatch_lines(
                [f"*PASSED test_user.py::test_device_info[[]{url}-{i}[]]*"])
        assert f"]@{url}" not in result.stdout.str()   # the id is the user's, no suffix
    assert "[dv]" not in result.stdout.str()
    runs = _log(log)
    assert sorted(r["url"] for r in runs) == sorted([a.url, b.url] * 6)
    workers_of = {}
    for r in runs:
        workers_of.setdefault(r["url"], set()).add(r["worker"])
    assert all(len(w) == 1 for w in workers_of.values()), workers_of   # one worker each


def test_simulators_under_xdist_are_spread_over_the_workers(user):
    """Simulator URLs are not grouped: -n 2 runs their tests on both workers (each opens
    its own simulator); the ids still name the URL."""
    pytester, log = user
    urls = ["sim://?clock_mhz=300", "sim://?clock_mhz=200"]
    result = pytester.runpytest_subprocess("-n", "2", "-v", "--dv-device", urls[0],
                                           "--dv-device", urls[1])
    result.assert_outcomes(passed=14, skipped=2)
    result.stdout.fnmatch_lines([f"dvsdk devices: {urls[0]}, {urls[1]} (each test runs on "
                                 "each; its id names the URL); under 2 xdist workers "
                                 "simulators on every worker",
                                 "*PASSED test_user.py::test_digit[[]sim://?clock_mhz=200[]]*"])
    assert sorted(r["url"] for r in _log(log)) == sorted(urls * 6)
    assert {r["worker"] for r in _log(log)} == {"gw0", "gw1"}


def test_a_dist_mode_that_could_share_a_board_is_a_usage_error(user):
    pytester, _ = user
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadscope", "--dv-device",
                                           "socket://127.0.0.1:9", "--dv-device",
                                           "socket://127.0.0.1:10")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--dist loadscope could run one board's tests on two "
                                 "xdist workers at once*use --dist load or loadgroup"])


def test_the_same_board_twice_is_a_usage_error(user):
    pytester, _ = user
    result = pytester.runpytest_subprocess("--dv-device", "uio://", "--dv-device", "uio://")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_the_report_names_the_device_of_every_test_under_xdist_too(user, tmp_path):
    """Issue 29 item 5: under -n 2 the header lists the devices and how they are spread,
    each test id names its URL, and the JUnit XML carries a dv_device property per test,
    the one in its id."""
    import xml.etree.ElementTree as ET

    pytester, log = user
    xml = tmp_path / "junit.xml"
    with AgentProcess("sim://") as a, AgentProcess("sim://") as b:
        result = pytester.runpytest_subprocess("-n", "2", "-v", "--dv-device", a.url,
                                               "--dv-device", b.url, f"--junitxml={xml}")
    result.assert_outcomes(passed=14, skipped=2)
    result.stdout.fnmatch_lines([f"dvsdk devices: {a.url}, {b.url} (each test runs on "
                                 "each; its id names the URL); under 2 xdist workers each "
                                 "board's tests on one worker"])
    props = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        for p in case.iter("property"):
            if p.get("name") == "dv_device":
                props[case.get("name")] = p.get("value")
    assert len(props) == 16
    assert all(f"[{url}" in name and (url in (a.url, b.url))
               for name, url in props.items()), props


def test_the_header_lists_the_devices_without_xdist(user):
    pytester, _ = user
    urls = ["sim://?clock_mhz=300", "sim://?clock_mhz=200"]
    result = pytester.runpytest_subprocess("--dv-device", urls[0], "--dv-device", urls[1])
    result.stdout.fnmatch_lines([f"dvsdk devices: {urls[0]}, {urls[1]} (each test runs on "
                                 "each; its id names the URL)"])
