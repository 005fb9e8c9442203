"""The agent's front door (issue 25 §1-§3): a key always, handshakes side by side, and
every client past the first told who holds the device.

Attacks are made deterministic: keyless connections are opened and kept, nothing depends
on how fast the machine is.  Time bounds only turn a hang into a failure (``wait_until``,
socket timeouts far above any wait they stand for).
"""

from __future__ import annotations

import collections
import os
import socket
import stat
import threading
import time

import pytest

from dvsdk.errors import AuthenticationError, DeviceBusy, DeviceNotFound
from dvsdk.link import protocol as lp
from dvsdk.link.agent import AgentProcess, _setup, build_parser

from .linkdev import BUMP, COUNTER, ENV, FACTORY, connect, wait_until

PER_PEER = int(lp.AGENT_LIMITS.get("handshakes_per_peer", 8))


def _env(config: os.PathLike) -> dict[str, str]:
    """The agent's environment: this config folder, no secret from the caller's shell."""
    env = {k: v for k, v in ENV.items() if not k.startswith("DVSDK_LINK_SECRET")}
    env["XDG_CONFIG_HOME"] = str(config)
    return env


def _addr(url: str) -> tuple[str, int]:
    host, port = url[len("socket://"):].rsplit(":", 1)
    return host.strip("[]"), int(port)


def _frame(name: str, seq: int, **fields: object) -> bytes:
    msg = lp.MESSAGES[name]
    return lp.encode_frame(msg.code, seq, msg.request.pack(fields))


def _hello(seq: int = 1, nonce: int = 77) -> bytes:
    return _frame("HELLO", seq, version=lp.VERSION, max_payload=4096, nonce=nonce,
                  client="test")


def _state(sock: socket.socket) -> str:
    """"open" (nothing to read, or data) or "closed" (EOF or reset), without waiting."""
    sock.setblocking(False)  # (a socket with a timeout would wait for data first)
    try:
        data = sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return "open"
    except OSError:
        return "closed"
    return "open" if data else "closed"


def _first_frame(sock: socket.socket) -> lp.Frame:
    sock.settimeout(60)  # (a bound against a hang only)
    deframer, frames = lp.Deframer(1 << 20), []
    while not frames:
        data = sock.recv(4096)
        assert data, "the agent closed the connection instead of answering"
        frames = deframer.feed(data)
    return lp.decode_frame(frames[0])


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    """An agent whose key is in its own config folder; its handshake deadline (60 s) is far
    longer than any test here, so only closing that is not a timeout can be seen."""
    config = tmp_path_factory.mktemp("config")
    with AgentProcess(factory=FACTORY, port="tcp:127.0.0.1:0", env=_env(config),
                      args=["--handshake-timeout", "60"]) as agent:
        yield agent, config / "dvsdk" / "link-secret"


# -- §1: connections without the key never hold the device ---------------------------------


def test_a_client_with_the_key_is_served_while_keyless_connections_stay_open(keyed):
    """Before: the first connection took the device at accept, so one that sent nothing
    held it for the whole handshake timeout and everyone else was told "busy"."""
    agent, key = keyed
    addr = _addr(agent.url)
    silent = [socket.create_connection(addr) for _ in range(3)]
    unproven = []  # a HELLO, then never the proof
    try:
        for i in range(3):
            s = socket.create_connection(addr)
            s.sendall(_hello(nonce=100 + i))
            unproven.append(s)
        # their handshakes run side by side: each HELLO is answered, none waits for another
        for s in unproven:
            answer = _first_frame(s)
            assert answer.code == lp.MESSAGES["HELLO"].code and not answer.is_error
        t0 = time.monotonic()
        with connect(agent.url, secret_file=key, timeout=30) as dev:
            dev.ping()
        served_after = time.monotonic() - t0  # (shown, not judged: the bound is "at all")
        # ... while every keyless connection is still there, long before their deadline
        assert [_state(s) for s in silent + unproven] == ["open"] * 6, served_after
    finally:
        for s in silent + unproven:
            s.close()


def test_pending_handshakes_per_address_are_capped_oldest_first(keyed):
    """Keyless connections from one address past ``handshakes_per_peer`` close that
    address's oldest; the newest stay, and a client with the key is still served."""
    agent, key = keyed
    addr = _addr(agent.url)
    socks = [socket.create_connection(addr) for _ in range(PER_PEER + 3)]
    try:
        wait_until(lambda: all(_state(s) == "closed" for s in socks[:3]),
                   "the three oldest closed")
        assert [_state(s) for s in socks[3:]] == ["open"] * PER_PEER
        with connect(agent.url, secret_file=key, timeout=30) as dev:
            dev.ping()
    finally:
        for s in socks:
            s.close()


# -- §2: a key by default; what is not our HELLO is closed at once -------------------------


def test_an_agent_started_without_a_key_makes_one_and_requires_it(tmp_path, monkeypatch):
    """Before: no key unless --secret-file; anyone on loopback was served."""
    config, elsewhere = tmp_path / "config", tmp_path / "elsewhere"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    for name in ("DVSDK_LINK_SECRET", "DVSDK_LINK_SECRET_FILE"):
        monkeypatch.delenv(name, raising=False)
    key = config / "dvsdk" / "link-secret"
    notes = []
    for _ in range(2):  # the first start creates it, the next ones use it; both say where
        args = build_parser().parse_args(["--factory", FACTORY, "--port", "tcp:0"])
        _setup(args)
        notes.append(args.secret_note)
    assert notes[0].startswith(f"link secret: {key} (created, mode 0600")
    assert notes[1] == f"link secret: {key}"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    content = key.read_bytes()
    with AgentProcess(factory=FACTORY, port="tcp:127.0.0.1:0", env=_env(config)) as agent:
        assert key.read_bytes() == content  # never replaced
        with connect(agent.url) as dev:  # a client on this machine finds it by itself
            dev.ping()
        monkeypatch.setenv("XDG_CONFIG_HOME", str(elsewhere))
        with pytest.raises(AuthenticationError, match="requires the shared link secret") \
                as e:
            connect(agent.url)
        assert str(elsewhere / "dvsdk" / "link-secret") in str(e.value)


def _post(body: bytes) -> bytes:
    return (b"POST /submit HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)) + body


@pytest.mark.parametrize("insecure", [False, True])
def test_frames_in_an_http_post_are_never_executed(tmp_path, monkeypatch, insecure):
    """What a web page can make a browser send to 127.0.0.1: an HTTP POST whose body holds
    a HELLO and a register write.  Before: executed (the register changed).  Now the
    connection is closed at once, without a byte, with a key or without."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    args = ["--insecure"] if insecure else []
    with AgentProcess(factory=FACTORY, port="tcp:127.0.0.1:0", env=_env(tmp_path),
                      args=args) as agent:
        body = _hello() + _frame("WRITE32", 2, unit="conv", offset=BUMP, value=41)
        s = socket.create_connection(_addr(agent.url))
        try:
            s.settimeout(60)  # (a bound against a hang only)
            try:
                s.sendall(_post(body))
                got = s.recv(4096)
            except (ConnectionResetError, BrokenPipeError):  # closed while we still sent
                got = b""
            assert got == b""  # closed, nothing answered
        finally:
            s.close()
        with connect(agent.url) as dev:
            assert dev.read32("conv", COUNTER) == 0


def test_a_first_frame_that_is_not_a_hello_is_closed_at_once(keyed):
    agent, key = keyed
    s = socket.create_connection(_addr(agent.url))
    try:
        s.settimeout(60)  # (a bound against a hang only)
        try:
            s.sendall(_frame("WRITE32", 1, unit="conv", offset=BUMP, value=1))
            assert s.recv(4096) == b""  # closed, nothing answered
        except (ConnectionResetError, BrokenPipeError):
            pass
    finally:
        s.close()
    with connect(agent.url, secret_file=key) as dev:
        assert dev.read32("conv", COUNTER) == 0


def test_a_hello_whose_first_delimiter_the_line_damaged_is_not_taken_for_http(keyed):
    """Line noise may replace the leading END: a byte, then a HELLO's header.  That frame
    fails its CRC (answered with NAK) and the client's next HELLO goes through."""
    agent, _ = keyed
    s = socket.create_connection(_addr(agent.url))
    try:
        hello = _hello()
        s.sendall(b"\x55" + hello[1:])
        assert _first_frame(s).code == lp.MESSAGES["NAK"].code
        s.sendall(_hello(seq=2, nonce=9))
        answer = _first_frame(s)
        assert answer.code == lp.MESSAGES["HELLO"].code and not answer.is_error
    finally:
        s.close()


def test_requests_sent_with_the_proof_reach_the_session(keyed):
    """A client that sends AUTH and its next requests in one packet: the gatekeeper hands
    those over with the session, in order."""
    from dvsdk.link import auth

    agent, key = keyed
    secret = auth.read_secret_file(str(key))
    s = socket.create_connection(_addr(agent.url))
    try:
        s.sendall(_hello(seq=1, nonce=5))
        hello = lp.MESSAGES["HELLO"].response.unpack(_first_frame(s).payload)
        mine = bytes(16)
        proof = auth.client_proof(secret, hello["challenge"], mine, 5)
        s.sendall(_frame("AUTH", 2, proof=proof, challenge=mine)
                  + _frame("PING", 3, data=b"one") + _frame("PING", 4, data=b"two"))
        deframer, frames = lp.Deframer(1 << 20), []
        while len(frames) < 3:
            data = s.recv(4096)
            assert data, "closed"
            frames += [lp.decode_frame(f) for f in deframer.feed(data)]
        assert [(f.seq, f.is_error) for f in frames] == [(2, False), (3, False), (4, False)]
        assert [bytes(lp.MESSAGES["PING"].response.unpack(f.payload)["data"])
                for f in frames[1:]] == [b"one", b"two"]
    finally:
        s.close()


# -- §3: past 8 clients, still DeviceBusy -----------------------------------------------------


def test_every_client_past_the_first_is_told_the_device_is_busy():
    """Before: 8 newcomers were told "busy" and the rest found the connection closed
    (DeviceNotFound)."""
    with AgentProcess(factory=FACTORY, port="tcp:127.0.0.1:0", env=ENV) as agent, \
            connect(agent.url) as holder:
        holder.ping()
        n = 12
        start = threading.Barrier(n)
        outcomes: collections.Counter[str] = collections.Counter()
        lock = threading.Lock()

        def newcomer() -> None:
            start.wait(60)
            try:
                connect(agent.url, timeout=30).close()
                what = "served"
            except DeviceBusy as e:
                what = "busy" if e.pid == agent.pid and "127.0.0.1:" in str(e) else repr(e)
            except DeviceNotFound as e:
                what = f"DeviceNotFound: {e}"
            with lock:
                outcomes[what] += 1

        threads = [threading.Thread(target=newcomer) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert outcomes == {"busy": n}, outcomes
        holder.ping()  # the holder never noticed
