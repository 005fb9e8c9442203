"""dvsdk-agent as a process: real TCP on 127.0.0.1, real ptys, its command line, and how it
treats peers that are not well-behaved clients (issue 10 §4-§5)."""

from __future__ import annotations

import os
import select
import socket
import stat
import threading
import time

import numpy as np
import pytest

from dvsdk.driver.device import open_device
from dvsdk.errors import (
    AuthenticationError,
    CoherenceError,
    DeviceBusy,
    DeviceLost,
    DeviceNotFound,
    LinkError,
)
from dvsdk.link import protocol as lp
from dvsdk.link.agent import AgentProcess, _setup, build_parser, main

from .linkdev import (
    BUMP,
    COUNTER,
    DATA,
    ENV,
    EXPECT,
    FACTORY,
    LEN,
    RNG,
    connect,
    copy_run,
    sim_conv,
    wait_until,
)


@pytest.fixture(scope="module", params=["tcp:127.0.0.1:0", "pty"])
def mem_agent(request):
    with AgentProcess(factory=FACTORY, port=request.param, env=ENV) as agent:
        yield agent


def test_agent_announces_a_url_and_a_pty_is_owner_only(mem_agent):
    assert mem_agent.url.startswith(("socket://127.0.0.1:", "serial:///dev/"))
    if mem_agent.url.startswith("serial://"):
        mode = stat.S_IMODE(os.stat(mem_agent.url[len("serial://"):]).st_mode)
        assert mode == 0o600


def test_agent_process_full_cycle(mem_agent):
    with connect(mem_agent.url) as dev:
        assert dev.info().backend == "link:mem"
        assert copy_run(dev, DATA) == EXPECT
        big = RNG.integers(0, 256, 3 << 20, dtype=np.uint8)
        assert copy_run(dev, big) == (big + np.uint8(1)).tobytes()
    with connect(mem_agent.url) as dev:  # a second session on the same agent
        assert dev.read32("conv", LEN) == 3 << 20


def test_version_mismatch_names_both_versions(mem_agent, monkeypatch):
    agent_version = lp.VERSION
    monkeypatch.setattr(lp, "VERSION", 7)
    with pytest.raises(LinkError, match=f"client speaks v7, agent speaks v{agent_version}") \
            as e:
        connect(mem_agent.url)
    assert e.value.value == 7 and e.value.limit == agent_version


def test_agent_with_injected_faults_both_ways():
    with AgentProcess(factory=FACTORY, port="tcp:127.0.0.1:0", env=ENV,
                      args=["--inject", "corrupt=0.03,drop=0.03,dup=0.02,seed=5"]) as agent:
        with connect(agent.url, timeout=0.5, retries=12, max_payload=16384,
                     inject="corrupt=0.03,drop=0.03,dropbyte=0.02,seed=6") as dev:
            for _ in range(2):
                assert copy_run(dev, DATA) == EXPECT
            for _ in range(30):
                dev.write32("conv", BUMP, 2)
            assert dev.read32("conv", COUNTER) == 60
            assert dev.stats["fast_resends"] + dev.stats["timeouts"] > 0


@pytest.mark.parametrize("port", ["tcp:127.0.0.1:0", "pty"])
def test_killing_the_agent_gives_device_lost(port):
    agent = AgentProcess(factory=FACTORY, port=port, env=ENV)
    dev = connect(agent.url, timeout=0.5, retries=3)
    buf = dev.alloc(1 << 20)
    errors: list[BaseException] = []
    started = threading.Event()

    def work() -> None:
        try:
            while True:
                buf.view[:] += 1  # every sync pushes the whole buffer
                buf.sync_for_device()
                started.set()
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=work, daemon=True)
    t.start()
    try:
        assert started.wait(10)
        agent.kill()
        t.join(10)
        assert not t.is_alive(), "client hung after the agent died"
        assert errors and isinstance(errors[0], DeviceLost)
        with pytest.raises(DeviceLost):
            dev.read32("conv", 0)
    finally:
        agent.kill()
        dev.close()


# -- the command line (§4) ---------------------------------------------------------------


@pytest.mark.parametrize("argv,code,text", [
    (["--device", "bogus://", "--port", "pty"], 2, "unknown device URL scheme"),
    (["--factory", "nosuch:thing", "--port", "pty"], 2, "cannot load the device factory"),
    (["--factory", "os:getcwd", "--port", "pty"], 2, "did not return a Device"),
    (["--device", "sim://", "--port", "tcp:localhost:http"], 2, "not a number"),
    (["--device", "sim://", "--port", "tcp:70000"], 2, "out of range"),
    (["--device", "sim://", "--port", "/dev/no-such-tty"], 2, "cannot serve on"),
    (["--device", "sim://", "--port", "pty", "--insecure", "--secret-file", "s"], 2,
     "--insecure serves without a secret"),
    (["--device", "sim://", "--port", "pty", "--max-wait", "nan"], 2, "--max-wait"),
    (["--device", "sim://", "--port", "pty", "--max-payload", "-1"], 2, "--max-payload"),
    (["--device", "sim://", "--port", "pty", "--max-payload", "100000000"], 2,
     "frame payload out of range"),
])
def test_agent_cli_errors_are_one_line(capsys, argv, code, text):
    assert main(argv) == code
    err = capsys.readouterr().err
    assert text in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_secret_file_or_insecure_with_a_warning(tmp_path, capsys):
    secret = tmp_path / "secret"
    secret.write_text("s" * 32)
    secret.chmod(0o644)
    assert main(["--device", "sim://", "--port", "tcp:0.0.0.0:0", "--secret-file",
                 str(secret)]) == 2
    assert "readable by others" in capsys.readouterr().err
    secret.chmod(0o600)
    for extra in (["--secret-file", str(secret)], ["--insecure"]):
        args = build_parser().parse_args(["--factory", FACTORY, "--port", "tcp:0.0.0.0:0",
                                          *extra])
        kind, where, server, _ = _setup(args)  # everything checked before serving
        assert (kind, where) == ("tcp", ("0.0.0.0", 0))
        assert (server.secret is None) == ("--insecure" in extra)
        note = args.secret_note  # what every start says, after the URL
        if "--insecure" in extra:
            assert "warning: --insecure" in note and "0.0.0.0:0, not only from" in note
        else:
            assert note == f"link secret: {secret}"


# -- authentication (§5) ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def secret_agent(tmp_path_factory):
    path = tmp_path_factory.mktemp("secret") / "agent-secret"
    path.write_text("correct horse battery staple\n")
    path.chmod(0o600)
    with AgentProcess(factory=FACTORY, port="tcp:127.0.0.1:0", env=ENV,
                      args=["--secret-file", str(path)]) as agent:
        yield agent, path


def test_client_with_the_secret_is_served(secret_agent, monkeypatch):
    agent, path = secret_agent
    with connect(agent.url, secret_file=path) as dev:
        assert copy_run(dev, DATA[:1000]) == EXPECT[:1000]
    monkeypatch.setenv("DVSDK_LINK_SECRET", "correct horse battery staple")
    with connect(agent.url) as dev:
        assert dev.read32("conv", LEN) == 1000


def test_client_without_or_with_a_wrong_secret_is_refused(secret_agent, tmp_path, monkeypatch):
    agent, _ = secret_agent
    monkeypatch.delenv("DVSDK_LINK_SECRET", raising=False)
    monkeypatch.delenv("DVSDK_LINK_SECRET_FILE", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))  # (nor the config folder's)
    with pytest.raises(AuthenticationError, match="requires the shared link secret") as e:
        connect(agent.url)
    assert "DVSDK_LINK_SECRET" in str(e.value)
    monkeypatch.setenv("DVSDK_LINK_SECRET", "incorrect horse battery staple")
    with pytest.raises(AuthenticationError, match="proof does not match"):  # the agent's
        connect(agent.url)  # answer (a silent agent would be DeviceNotFound after the timeout)
    with connect(agent.url, secret_file=secret_agent[1]) as dev:  # still serving
        dev.ping()


@pytest.fixture(scope="module")
def insecure_agent():
    with AgentProcess(factory=FACTORY, port="tcp:127.0.0.1:0", env=ENV,
                      args=["--insecure"]) as agent:
        yield agent


def test_a_secret_is_not_sent_to_an_agent_that_does_not_authenticate(insecure_agent,
                                                                       monkeypatch):
    monkeypatch.setenv("DVSDK_LINK_SECRET", "x" * 20)
    with pytest.raises(AuthenticationError, match="does not authenticate"):
        connect(insecure_agent.url)
    monkeypatch.delenv("DVSDK_LINK_SECRET")  # (a secret only found in the config folder
    with connect(insecure_agent.url) as dev:  # does not refuse an --insecure agent)
        dev.ping()


# -- peers that are not agents, busy agents, silent and vanished clients (§5) ----------------


def _fake_server(answer: bytes | None):
    """A TCP server on 127.0.0.1 that answers anything with ``answer`` (None: never)."""
    lsock = socket.create_server(("127.0.0.1", 0))
    conns = []

    def run() -> None:
        try:
            conn, _ = lsock.accept()
        except OSError:
            return
        conns.append(conn)
        conn.recv(4096)
        if answer is not None:
            conn.sendall(answer)

    threading.Thread(target=run, daemon=True).start()
    return lsock, conns


@pytest.mark.parametrize("answer,match", [
    (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
     "sent 'HTTP/1.1 400 Bad Request', which is not a dvsdk agent"),
    (None, "no dvsdk agent answered within 0.5 s"),
])
def test_handshake_honours_the_timeout_and_names_the_peer(answer, match, monkeypatch):
    """The whole handshake runs under one deadline the URL's timeout sets (checked where the
    client hands it to its engine, not by the clock), and the failure names the peer."""
    from dvsdk.link.engine import Engine

    lsock, conns = _fake_server(answer)
    port = lsock.getsockname()[1]
    budgets: list[tuple[str, float]] = []  # (message, deadline - now when it was sent)
    real = Engine.exchange

    def exchange(self, requests, **kw):
        requests = list(requests)
        left = kw["deadline"] - time.monotonic() if kw.get("deadline") is not None else None
        budgets.extend((r.name, left) for r in requests)
        return real(self, requests, **kw)

    monkeypatch.setattr(Engine, "exchange", exchange)
    try:
        with pytest.raises(DeviceNotFound, match=match) as e:
            open_device(f"socket://127.0.0.1:{port}?timeout=0.5")
        assert f"127.0.0.1:{port}" in str(e.value)
        assert [name for name, _ in budgets] == ["HELLO"]
        assert budgets[0][1] is not None and budgets[0][1] <= 0.5
    finally:
        lsock.close()
        for c in conns:
            c.close()


@pytest.fixture(scope="module")
def tcp_agent():
    with AgentProcess(factory=FACTORY, port="tcp:127.0.0.1:0", env=ENV,
                      args=["--handshake-timeout", "0.5", "--idle-timeout", "0.8"]) as agent:
        yield agent


def test_second_client_is_told_who_holds_the_device(tcp_agent):
    with connect(tcp_agent.url) as first:
        first.ping()
        # the agent's answer (a timeout would be DeviceNotFound); given all the time it needs
        with pytest.raises(DeviceBusy, match="device busy: dvsdk-agent is serving 127.0.0.1:") \
                as e:
            connect(tcp_agent.url, timeout=30)
        assert e.value.field == "peer"
        assert e.value.since and e.value.pid == tcp_agent.pid
    with connect(tcp_agent.url) as second:  # free again
        second.ping()


def test_a_silent_connection_does_not_block_the_agent(tcp_agent):
    host, port = tcp_agent.url[len("socket://"):].rsplit(":", 1)
    silent = socket.create_connection((host, int(port)))
    try:
        silent.settimeout(60)  # (a bound against a hang: the agent closes it after 0.5 s)
        assert silent.recv(1) == b""  # closed by the agent: its handshake timeout
        with connect(tcp_agent.url) as dev:
            dev.ping()
    finally:
        silent.close()


def test_an_idle_session_ends_with_a_reason(tcp_agent):
    dev = connect(tcp_agent.url)
    try:
        dev.ping()
        # no request until the agent speaks: its BYE, once the session was idle for 0.8 s
        readable, _, _ = select.select([dev.transport.sock], [], [], 60)
        assert readable, "the agent never ended the idle session"
        with pytest.raises(DeviceLost, match="idle for 0.8 s"):
            dev.ping()
    finally:
        dev.close()
    with connect(tcp_agent.url) as again:
        again.ping()


def test_a_client_that_vanishes_during_a_wait_frees_the_agent_at_once(tcp_agent):
    dev = connect(tcp_agent.url, timeout=5)
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            dev.wait_irq("conv", 30.0)  # no kick: the agent waits on the device
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=wait, daemon=True)
    t.start()
    time.sleep(0.3)
    dev.transport.sock.shutdown(socket.SHUT_RDWR)  # the client process "dies"
    # the agent frees itself within a wait slice (0.25 s), not after the 30 s wait: the
    # next client gets the device (a newcomer waits 0.5 s for a session ending; one that
    # came too early is told "busy" and asks again), well before those 30 s are over
    other = None

    def served() -> bool:
        nonlocal other
        try:
            other = connect(tcp_agent.url, timeout=10)
        except DeviceBusy:
            return False
        return True

    wait_until(served, "the agent serves the next client", limit=20)
    with other:
        other.ping()
    t.join(60)
    assert errors and isinstance(errors[0], DeviceLost)


# -- the simulator behind an agent process ------------------------------------------------


@pytest.fixture(scope="module", params=["tcp:127.0.0.1:0", "pty"])
def sim_agent(request):
    pytest.importorskip("dvsdk.sim.device")
    with AgentProcess("sim://", port=request.param, env=ENV) as agent:
        yield agent


def test_conv_through_an_agent_matches_the_local_simulator(sim_agent):
    with open_device("sim://") as local:
        want = sim_conv(local)
    with connect(sim_agent.url) as dev:
        assert dev.info().backend == "link:sim"
        got = sim_conv(dev)
    assert got.tobytes() == want.tobytes() and np.abs(want).sum() > 0


def test_conv_over_a_faulty_link_is_bit_identical(sim_agent):
    with open_device("sim://") as local:
        want = sim_conv(local, seed=4)
    with connect(sim_agent.url, timeout=0.3, retries=12,
                 inject="corrupt=0.05,drop=0.05,dup=0.05,noise=0.001,seed=8") as dev:
        got = sim_conv(dev, seed=4)
        assert dev.stats["fast_resends"] + dev.stats["timeouts"] > 0
    assert got.tobytes() == want.tobytes()


def test_cpu_write_without_sync_is_caught_through_the_link(sim_agent):
    with connect(sim_agent.url) as dev:
        with pytest.raises(CoherenceError) as e:
            sim_conv(dev, sync_input=False)  # the input never synced for the device
        assert e.value.buffer == "input"


def test_ipv6_loopback():
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        socket.create_server(("::1", 0), family=socket.AF_INET6).close()
    except OSError:
        pytest.skip("no ::1 here")
    with AgentProcess(factory=FACTORY, port="tcp:[::1]:0", env=ENV) as agent:
        assert agent.url.startswith("socket://[::1]:")
        with connect(agent.url) as dev:
            assert dev.ping(b"v6") == b"v6"
