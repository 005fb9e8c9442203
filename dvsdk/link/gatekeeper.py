"""The agent's TCP front door: handshakes side by side, the device only after authentication.

``firmware_spec/link.md`` §5 and §9.  One thread accepts connections and runs
every handshake that is still going on (``HELLO``, ``AUTH``), each with its own
deadline, without blocking on any of them.  A connection that has not
authenticated never holds the device, the session, or the thread: a client that
sends nothing, or a ``HELLO`` and no proof, only costs a socket until its
deadline (``--handshake-timeout``, 2 s).  Each address may have
``handshakes_per_peer`` (8) such connections at once: past that, those quiet the
longest are closed once they have been quiet for ``handshake_quiet`` (1 s), so
keyless connections kept open make room for newcomers, while a burst of real
clients (whose handshakes take a round trip or two) is not cut short.  In all,
``handshakes_max`` (64) may be pending: past that the one quiet the longest is
closed at once.  A connection whose
first bytes are not a ``HELLO``'s (a frame delimiter, or a damaged one and a
``HELLO`` header), or whose first frame is not a ``HELLO`` (an HTTP request, say),
is closed at once.

Once a connection has authenticated (with ``--insecure``: once it said
``HELLO``) it asks for the device: if it is free, the connection and its
session (nonce, challenge, replay cache, :meth:`Session.adopt`) go to the
executor; if another client holds it, the newcomer waits ``busy_grace``
(0.5 s) for a session that is just ending, then its next request is answered
with :class:`~dvsdk.errors.DeviceBusy` naming the holder, however many
newcomers there are.
"""

from __future__ import annotations

import os
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import DeviceBusy, DeviceLost
from . import protocol as lp
from .server import LinkServer
from .session import Session, error_frame, log
from .transport import FaultSpec, FaultyTransport, SocketTransport, Transport

_AGENT = lp.AGENT_LIMITS
#: longest a handshake frame may be (HELLO carries a short client name)
_HANDSHAKE_FRAME = lp.max_frame_bytes(lp.LIMITS["min_payload"])
#: the gatekeeper looks at deadlines and a busy device at least this often (s)
_TICK = 0.05
_HELLO_CODE = lp.MESSAGES["HELLO"].code
#: bytes an authenticated connection may send ahead while it waits for the device
_QUEUE_MAX = 4 << 20


def peer_name(addr: Any) -> str:
    """``HOST:PORT`` of a socket address (``[HOST]:PORT`` for IPv6)."""
    host, port = addr[0], addr[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass
class GateLimits:
    """How many handshakes, for how long (link.yaml ``agent``)."""

    handshake_timeout: float = _AGENT["handshake_timeout"]
    per_peer: int = int(_AGENT["handshakes_per_peer"])
    quiet: float = _AGENT["handshake_quiet"]
    max_pending: int = int(_AGENT["handshakes_max"])
    max_requests: int = int(_AGENT["handshake_requests"])
    busy_grace: float = _AGENT["busy_grace"]


class DeviceClaim:
    """Who holds the device now (one TCP session at a time)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.peer: str | None = None
        self.since = 0.0

    def claim(self, peer: str) -> bool:
        with self.lock:
            if self.peer is not None:
                return False
            self.peer, self.since = peer, time.time()
            return True

    def release(self) -> None:
        with self.lock:
            self.peer = None

    def error(self) -> DeviceBusy:
        """DeviceBusy naming the holder and since when (fields peer, since, pid)."""
        with self.lock:
            peer, since = self.peer, self.since
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since))
        exc = DeviceBusy(f"device busy: dvsdk-agent is serving {peer} since {stamp} "
                         f"({time.time() - since:.0f} s)", pid=os.getpid(), field="peer",
                         value=peer)
        exc.since = stamp  # type: ignore[attr-defined]
        return exc


class _SendNow(Transport):
    """Writes to a non-blocking socket; a peer that does not read its answers is dropped
    (DeviceLost) rather than stalling the other handshakes."""

    def __init__(self, sock: socket.socket, name: str) -> None:
        self.sock, self.name = sock, name

    def write(self, data: bytes) -> None:
        try:
            sent = self.sock.send(data)
        except OSError as exc:
            raise self._lost(exc) from None
        if sent != len(data):
            raise self._lost("the peer does not read its answers")


class Handshake(Session):
    """One connection that has not been handed to the executor yet."""

    def __init__(self, conn: socket.socket, addr: Any, server: LinkServer, now: float,
                 limits: GateLimits, inject: FaultSpec | None) -> None:
        super().__init__(secret=server.secret, max_payload=server.max_payload,
                         cache_size=server.cache_size, verbose=server.verbose)
        self.conn, self.host, self.peer = conn, str(addr[0]), peer_name(addr)
        self.opened = self.last = now  # connected; last heard from
        self.deadline = now + limits.handshake_timeout if limits.handshake_timeout else None
        self.deframer = lp.Deframer(_HANDSHAKE_FRAME)
        self.out: Transport = _SendNow(conn, self.peer)
        if inject:
            self.out = FaultyTransport(self.out, inject)
        self.started = False  # the first bytes have come and look like a HELLO
        self.head = b""  # the first bytes, until there are enough to tell
        self.hello_seen = False
        self.requests = 0
        self.ready_at: float | None = None  # authenticated: waiting for the device since
        self.queued: list[bytes] = []  # frames after authentication, for the executor
        self.held: bytes | None = None  # a failed AUTH's answer, sent at hold_until
        self.hold_until = 0.0
        self.closed = False

    def _slow_down(self, seconds: float) -> None:
        self.hold_until = time.monotonic() + seconds  # held back, nobody else waits

    @property
    def ready(self) -> bool:
        return self.ready_at is not None

    def initial_bytes(self) -> bytes:
        """What the executor must read first: the queued frames and any partial one."""
        frames = b"".join(lp.END + raw for raw in self.queued)
        rest = self.deframer.leftover()
        return frames + lp.END + rest if (frames or rest) else b""


class Gatekeeper:
    """Accepts TCP connections and runs their handshakes in one thread (module docstring)."""

    def __init__(self, lsock: socket.socket, server: LinkServer, claim: DeviceClaim,
                 handoff: Callable[[socket.socket, str, Handshake], None], *,
                 limits: GateLimits | None = None, inject: FaultSpec | None = None) -> None:
        self.lsock, self.server, self.claim, self.handoff = lsock, server, claim, handoff
        self.limits = limits or GateLimits(handshake_timeout=server.limits.handshake_timeout)
        self.inject = inject
        self.pending: list[Handshake] = []  # in arrival order
        self.sel = selectors.DefaultSelector()
        self.stats: dict[str, int] = {}

    def _count(self, what: str) -> None:
        self.stats[what] = self.stats.get(what, 0) + 1

    # -- the loop ------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Serve until ``stop`` is set; then close every connection still pending."""
        self.lsock.setblocking(False)
        self.sel.register(self.lsock, selectors.EVENT_READ, None)
        try:
            while not stop.is_set():
                for key, _ in self.sel.select(self._wake()):
                    if key.data is None:
                        self._accept()
                    else:
                        self._read(key.data)
                self._tick(time.monotonic())
        finally:
            for hs in list(self.pending):
                self._close(hs, "agent stopping")
            self.sel.close()

    def _wake(self) -> float:
        now = time.monotonic()
        times = [_TICK] + [hs.deadline - now for hs in self.pending
                           if hs.deadline is not None and not hs.ready]
        return max(0.0, min(times))

    def _accept(self) -> None:
        while True:
            try:
                conn, addr = self.lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            self._admit(conn, addr)

    def _admit(self, conn: socket.socket, addr: Any) -> None:
        now = time.monotonic()
        conn.setblocking(False)
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        hs = Handshake(conn, addr, self.server, now, self.limits, self.inject)
        lim = self.limits
        if len(self.pending) >= lim.max_pending:  # the one quiet the longest makes room
            unauth = [h for h in self.pending if not h.ready] or self.pending
            self._close(min(unauth, key=lambda h: h.last),
                        f"more than {lim.max_pending} handshakes in all")
            self._count("evicted_all")
        self.pending.append(hs)
        self.sel.register(conn, selectors.EVENT_READ, hs)
        if self.server.verbose:
            log(f"connection from {hs.peer}")
        self._cap_peer(hs.host, now)

    def _cap_peer(self, host: str, now: float) -> None:
        """Past ``per_peer`` pending handshakes from ``host``, close those quiet the longest,
        if they have been quiet for ``quiet`` seconds."""
        mine = sorted((h for h in self.pending if h.host == host and not h.ready),
                      key=lambda h: h.last)
        for h in mine[:max(0, len(mine) - self.limits.per_peer)]:
            if now - h.last >= self.limits.quiet:
                self._close(h, f"more than {self.limits.per_peer} handshakes from {host}")
                self._count("evicted_peer")

    def _close(self, hs: Handshake, why: str) -> None:
        if hs.closed:
            return
        hs.closed = True
        if hs in self.pending:
            self.pending.remove(hs)
        try:
            self.sel.unregister(hs.conn)
        except (KeyError, ValueError):
            pass
        hs.conn.close()
        if self.server.verbose:
            log(f"{hs.peer} closed: {why}")

    def _send(self, hs: Handshake, frame: bytes) -> bool:
        try:
            hs.out.write(frame)
            return True
        except DeviceLost as exc:
            self._close(hs, exc.message)
            return False

    # -- one connection's bytes --------------------------------------------------------------
    def _read(self, hs: Handshake) -> None:
        try:
            data = hs.conn.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._close(hs, str(exc))
            return
        if not data:
            self._close(hs, "the peer closed the connection")
            return
        hs.last = time.monotonic()
        if not hs.started:
            hs.head += data
            if len(hs.head) < 3 and lp.END not in hs.head:
                return  # (too few bytes to tell yet)
            data, hs.head, hs.started = hs.head, b"", True
            if not _starts_like_hello(data):  # an HTTP request line, say
                self._count("not_dvlink")
                self._close(hs, f"not a dvlink client (first bytes {data[:16]!r})")
                return
        for raw in hs.deframer.feed(data):
            if hs.closed or hs.held is not None:
                return
            if hs.ready:  # (frames after the proof in the same read wait for the session)
                self._while_waiting(hs, raw)
            else:
                self._handshake_frame(hs, raw)
        if hs.ready:
            self._try_device(hs)

    def _handshake_frame(self, hs: Handshake, raw: bytes) -> None:
        hs.requests += 1
        if hs.requests > self.limits.max_requests:
            self._close(hs, f"more than {self.limits.max_requests} requests before "
                            "authenticating")
            return
        try:
            frame = lp.decode_frame(raw)
        except lp.FrameError:  # line noise: the Session's NAK, the client resends
            out = hs.handle(raw)
            if out is not None:
                self._send(hs, out)
            return
        msg = frame.message
        if not hs.hello_seen:
            if frame.is_response or msg is None or msg.name != "HELLO":
                self._count("not_dvlink")
                self._close(hs, "the first frame is not a HELLO")
                return
            hs.hello_seen = True
        out = hs.handle_frame(frame)
        if hs.hold_until:  # a wrong proof: its answer waits, the connection then closes
            hs.held = out
            return
        if out is not None and not self._send(hs, out):
            return
        if hs._ending:  # BYE
            self._close(hs, hs._ending)
            return
        if hs.session is not None and hs.authenticated:  # the device next (_read, _tick)
            hs.ready_at = time.monotonic()
            hs.deframer.max_frame = lp.max_frame_bytes(lp.LIMITS["max_payload"])
            self._count("authenticated")

    def _while_waiting(self, hs: Handshake, raw: bytes) -> None:
        """Authenticated, waiting for the device: a resent HELLO or AUTH is answered from
        the cache, anything else waits for the executor (or the busy answer)."""
        try:
            frame: lp.Frame | None = lp.decode_frame(raw)
        except lp.FrameError:
            frame = None
        cached = hs.replay(frame) if frame is not None else None
        if cached is not None:
            self._send(hs, cached)
            return
        hs.queued.append(raw)
        if sum(map(len, hs.queued)) > _QUEUE_MAX:
            self._close(hs, f"more than {_QUEUE_MAX} bytes sent ahead while waiting for the "
                            "device")

    # -- time ------------------------------------------------------------------------------------
    def _tick(self, now: float) -> None:
        lim = self.limits
        for host in {h.host for h in self.pending}:
            self._cap_peer(host, now)
        for hs in list(self.pending):
            if hs.held is not None or hs.hold_until:
                if now >= hs.hold_until:
                    if hs.held is not None:
                        self._send(hs, hs.held)
                    self._close(hs, "authentication failed")
            elif hs.ready:
                self._try_device(hs)
                if hs.closed or now - (hs.ready_at or now) < lim.busy_grace:
                    continue
                request = next((f for f in map(_decoded, hs.queued) if f is not None), None)
                if request is not None:
                    self._send(hs, error_frame(request.code, request.seq, self.claim.error()))
                    self._count("busy")
                    self._close(hs, f"busy with {self.claim.peer}")
                elif lim.handshake_timeout and now - (hs.ready_at or now) > max(
                        lim.handshake_timeout, lim.busy_grace):
                    self._close(hs, "no request after authenticating")
            elif hs.deadline is not None and now >= hs.deadline:
                self._count("timed_out")
                self._close(hs, f"no authenticated HELLO within {lim.handshake_timeout:g} s")

    def _try_device(self, hs: Handshake) -> None:
        if hs.closed or not self.claim.claim(hs.peer):
            return
        self.pending.remove(hs)
        self.sel.unregister(hs.conn)
        hs.closed = True  # (no longer ours)
        hs.conn.setblocking(True)
        self.handoff(hs.conn, hs.peer, hs)


def _starts_like_hello(data: bytes) -> bool:
    """A dvlink client's first bytes: a frame delimiter, or (line noise replaced it) a
    byte and then a HELLO's header (version, code).  No HTTP method has code 0x01 as its
    third byte."""
    if data[:1] == lp.END:
        return True
    return len(data) >= 3 and data[2] == _HELLO_CODE


def _decoded(raw: bytes) -> lp.Frame | None:
    try:
        frame = lp.decode_frame(raw)
    except lp.FrameError:
        return None
    return None if frame.is_response else frame


def serve_tcp(server: LinkServer, host: str, port: int, stop: threading.Event, *,
              once: bool = False, inject: FaultSpec | None = None,
              announce: Callable[[str], None] = lambda url: print(url, flush=True),
              limits: GateLimits | None = None) -> None:
    """Listen on ``host:port``: handshakes run side by side in the gatekeeper's thread, and
    this thread serves one authenticated client at a time; others are told it is busy.

    A connection is one session: it ends at BYE, a failed AUTH, the idle or session
    timeout, or when the client goes away (noticed within ``wait_slice`` even during a
    WAIT_IRQ)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.create_server((host, port), family=family, backlog=128) as lsock:
        announce(f"socket://{peer_name(lsock.getsockname())}")
        claim = DeviceClaim()
        handoff: queue.Queue[tuple[socket.socket, str, Handshake]] = queue.Queue()
        gate = Gatekeeper(lsock, server, claim, lambda *item: handoff.put(item),
                          limits=limits, inject=inject)
        done = threading.Event()
        thread = threading.Thread(target=gate.run, args=(done,), name="dvsdk-agent-gate",
                                  daemon=True)
        thread.start()
        try:
            while not stop.is_set():
                try:
                    conn, peer, hs = handoff.get(timeout=0.1)
                except queue.Empty:
                    continue
                _serve_connection(server, conn, peer, hs, claim, stop, inject)
                if once:
                    return
        finally:
            done.set()
            thread.join(2.0)
            while not handoff.empty():
                handoff.get()[0].close()


def _serve_connection(server: LinkServer, conn: socket.socket, peer: str, hs: Handshake,
                      claim: DeviceClaim, stop: threading.Event,
                      inject: FaultSpec | None) -> None:
    """One authenticated connection: the executor adopts its session and serves it."""
    transport: Transport = SocketTransport(conn, f"tcp:{peer}")
    if inject:
        transport = FaultyTransport(transport, inject)
    server.adopt(hs)
    server.peer = peer
    if server.verbose:
        log(f"session for {peer}")
    try:
        reason = server.serve(transport, stop, initial=hs.initial_bytes(), per_connection=True,
                              on_release=claim.release)
    finally:
        transport.close()
        server.end_session()
        claim.release()
    if server.verbose:
        log(f"{peer} done: {reason}")
