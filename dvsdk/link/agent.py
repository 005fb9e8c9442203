"""``dvsdk-agent``: serve a local device over the dvlink protocol.

On the board the agent serves the hardware (``--device uio://``); in CI it
serves the simulator (``--device sim://``).  The client is
:class:`dvsdk.link.client.LinkDevice`; the protocol is ``firmware_spec/link.md``.

::

    dvsdk-agent --device sim:// --port tcp:0               # prints socket://127.0.0.1:PORT
    dvsdk-agent --device sim:// --port pty                 # prints serial:///dev/pts/N
    dvsdk-agent --device uio:// --port /dev/ttyGS0 --baud 921600

The first line on stdout is the URL a client opens; logs go to stderr.  The
request executor is :class:`~dvsdk.link.server.LinkServer`; this module has the
ports (TCP with one client at a time and a plain "busy" for the others, pty,
serial), the command line, and :class:`AgentProcess`, which starts an agent in a
child process for tests and benchmarks.
"""

from __future__ import annotations

import argparse
import importlib
import ipaddress
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from .. import __version__
from ..driver.device import Device, open_device
from ..errors import DeviceBusy, DvsdkError, InvalidArgument, LinkError
from . import auth
from . import protocol as lp
from .server import Limits, LinkServer, error_frame, log
from .transport import (
    FaultSpec,
    FaultyTransport,
    FdTransport,
    SerialTransport,
    SocketTransport,
    Transport,
)

#: connections turned away at the same time, at most
_MAX_TURN_AWAY = 8
#: how long a newcomer waits for the device to come free before it is told it is busy
_BUSY_GRACE = 0.5


# -------------------------------------------------------------------------------------------------
# Ports
# -------------------------------------------------------------------------------------------------


def _announce(url: str) -> None:
    print(url, flush=True)


class _Busy:
    """Who holds the device now (one TCP client at a time)."""

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
        with self.lock:
            peer, since = self.peer, self.since
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since))
        exc = DeviceBusy(f"device busy: dvsdk-agent is serving {peer} since {stamp} "
                         f"({time.time() - since:.0f} s)", pid=os.getpid(), field="peer",
                         value=peer)
        exc.since = stamp  # type: ignore[attr-defined]
        return exc


def _peer_name(addr: Any) -> str:
    host, port = addr[0], addr[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _turn_away(conn: socket.socket, peer: str, busy: _Busy, handoff: queue.Queue,
               server: LinkServer, slots: threading.Semaphore) -> None:
    """A second client while one is served: read its HELLO and answer DeviceBusy, naming
    the holder.  If the device came free meanwhile, hand the connection over instead."""
    deframer = lp.Deframer(lp.max_frame_bytes(lp.LIMITS["max_payload"]))
    received = b""
    hello: lp.Frame | None = None
    start = time.monotonic()
    deadline = start + (server.limits.handshake_timeout or 5.0)
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([conn], [], [], 0.05)
            frames: list[bytes] = []
            if ready:
                data = conn.recv(1 << 16)
                if not data:
                    break
                received += data
                frames = deframer.feed(data)
            if busy.claim(peer):
                handoff.put((conn, peer, received))
                conn = None  # type: ignore[assignment]
                return
            for raw in frames:
                try:
                    frame = lp.decode_frame(raw)
                except lp.FrameError:
                    continue
                if not frame.is_response and hello is None:
                    hello = frame
            # a session that is just ending (BYE, a client that vanished) gets a moment
            if hello is not None and time.monotonic() - start > _BUSY_GRACE:
                conn.settimeout(2.0)
                conn.sendall(error_frame(hello.code, hello.seq, busy.error()))
                if server.verbose:
                    log(f"turned {peer} away: busy with {busy.peer}")
                return
    except OSError:
        pass
    finally:
        if conn is not None:
            conn.close()
        slots.release()


def _listen(lsock: socket.socket, busy: _Busy, handoff: queue.Queue, server: LinkServer,
            stop: threading.Event) -> None:
    slots = threading.Semaphore(_MAX_TURN_AWAY)
    while not stop.is_set():
        ready, _, _ = select.select([lsock], [], [], 0.1)
        if not ready:
            continue
        try:
            conn, addr = lsock.accept()
        except OSError:
            continue
        peer = _peer_name(addr)
        if busy.claim(peer):
            handoff.put((conn, peer, b""))
        elif slots.acquire(blocking=False):
            threading.Thread(target=_turn_away, args=(conn, peer, busy, handoff, server, slots),
                             name="dvsdk-agent-busy", daemon=True).start()
        else:
            conn.close()


def serve_tcp(server: LinkServer, host: str, port: int, stop: threading.Event, *,
              once: bool = False, inject: FaultSpec | None = None) -> None:
    """Listen on ``host:port`` and serve one client at a time; others are told it is busy.

    A connection is one session: it ends at BYE, a failed AUTH, the handshake, idle or
    session timeout, or when the client goes away (noticed within ``wait_slice`` even
    during a WAIT_IRQ)."""
    with socket.create_server((host, port), family=_family(host)) as lsock:
        bound = lsock.getsockname()
        _announce(f"socket://{_peer_name(bound)}")
        busy = _Busy()
        handoff: queue.Queue = queue.Queue()
        done = threading.Event()
        listener = threading.Thread(target=_listen, args=(lsock, busy, handoff, server, done),
                                    name="dvsdk-agent-listen", daemon=True)
        listener.start()
        try:
            while not stop.is_set():
                try:
                    conn, peer, initial = handoff.get(timeout=0.1)
                except queue.Empty:
                    continue
                server.peer = peer
                if server.verbose:
                    log(f"connection from {peer}")
                reason = _serve_one(server, SocketTransport(conn, f"tcp:{peer}"), stop, inject,
                                    server.end_session, initial=initial, per_connection=True,
                                    on_release=busy.release)
                busy.release()
                if server.verbose:
                    log(f"{peer} done: {reason}")
                if once:
                    return
        finally:
            done.set()
            listener.join(2.0)
            while not handoff.empty():
                handoff.get()[0].close()


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _serve_one(server: LinkServer, transport: Transport, stop: threading.Event,
               inject: FaultSpec | None, cleanup: Callable[[], None], **kw: Any) -> str:
    """Serve one transport (through the fault injector when asked), then clean up."""
    if inject:
        transport = FaultyTransport(transport, inject)
    try:
        return server.serve(transport, stop, **kw)
    finally:
        transport.close()
        cleanup()


def serve_pty(server: LinkServer, stop: threading.Event, *, inject: FaultSpec | None = None,
              mode: int = 0o600) -> None:
    """Open a pseudo-terminal (``mode``: owner-only unless told), announce its slave path
    and serve its master side."""
    import tty

    master, slave = os.openpty()
    tty.setraw(slave)
    path = os.ttyname(slave)
    os.chmod(path, mode)
    _announce(f"serial://{path}")
    # Keep the slave open ourselves: the master then never sees EOF/EIO between clients.
    _serve_one(server, FdTransport(master, f"pty:{path}", flush_fd=slave), stop, inject,
               lambda: os.close(slave))


def serve_serial(server: LinkServer, port: str, baud: int, stop: threading.Event, *,
                 inject: FaultSpec | None = None) -> None:
    """Serve a real serial port (e.g. the board's USB gadget ``/dev/ttyGS0``)."""
    import serial

    ser = serial.serial_for_url(port, baudrate=baud)
    _announce(f"serial://{port}?baud={baud}")
    _serve_one(server, SerialTransport(ser, port), stop, inject, lambda: None)


# -------------------------------------------------------------------------------------------------
# CLI
# -------------------------------------------------------------------------------------------------


def _factory_device(spec: str) -> Device:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise InvalidArgument("factory must be MODULE:CALLABLE", field="--factory", value=spec)
    try:
        obj: Any = importlib.import_module(module_name)
        for name in attr.split("."):
            obj = getattr(obj, name)
    except (ImportError, AttributeError) as exc:
        raise InvalidArgument(f"cannot load the device factory: {exc}", field="--factory",
                              value=spec) from None
    if not callable(obj):
        raise InvalidArgument("the device factory is not callable", field="--factory",
                              value=spec)
    dev = obj()
    if not isinstance(dev, Device):
        raise InvalidArgument("the device factory did not return a Device", field="--factory",
                              value=type(dev).__name__)
    return dev


def parse_port(text: str) -> tuple[str, Any]:
    """``pty`` | ``tcp:[HOST:]PORT`` (HOST default 127.0.0.1; ``[::1]:PORT`` for IPv6) |
    a serial device path -> (kind, details); InvalidArgument for a malformed one."""
    if text == "pty":
        return "pty", None
    if text.startswith("tcp:"):
        rest = text[4:]
        host, sep, port = rest.rpartition(":")
        host = host.strip("[]") if sep else ""
        try:
            num = int(port)
        except ValueError:
            raise InvalidArgument("TCP port is not a number", field="--port", value=text,
                                  limit="tcp:[HOST:]PORT") from None
        if not 0 <= num <= 65535:
            raise InvalidArgument("TCP port out of range", field="--port", value=num,
                                  limit="0..65535")
        return "tcp", (host or "127.0.0.1", num)
    if not text or text.startswith("-"):
        raise InvalidArgument("bad --port", field="--port", value=text,
                              limit="PATH | pty | tcp:[HOST:]PORT")
    return "serial", text


def is_loopback(host: str) -> bool:
    """Every address ``host`` resolves to is a loopback address (InvalidArgument if none)."""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        raise InvalidArgument(f"cannot resolve the listen address: {exc}", field="--port",
                              value=host) from None
    return all(ipaddress.ip_address(i[4][0].split("%")[0]).is_loopback for i in infos)


def build_parser() -> argparse.ArgumentParser:
    """The ``dvsdk-agent`` command line."""
    d = lp.AGENT_LIMITS
    p = argparse.ArgumentParser(
        prog="dvsdk-agent",
        description="Serve a DV700 device (hardware or simulator) over the dvlink protocol.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"""examples:
  dvsdk-agent --device sim:// --port tcp:0               prints socket://127.0.0.1:PORT
  dvsdk-agent --device uio:// --port tcp:0.0.0.0:5555 --secret-file ~/.dvsdk-link-secret
                                                        on the board; hosts then use
                                  DVSDK_DEVICE=socket://board:5555?secret_file=~/.dvsdk-link-secret
  dvsdk-agent --device sim:// --port pty                 prints serial:///dev/pts/N
  dvsdk-agent --device uio:// --port /dev/ttyPS1 --baud 921600   over the board's UART
The first line printed is the device URL a client should open.  The secret may also come
from ${auth.ENV_SECRET_FILE} or ${auth.ENV_SECRET}; a TCP listener on anything but loopback
needs one unless --insecure.""")
    p.add_argument("--device", default=None,
                   help="device URL to serve (default $DVSDK_DEVICE, else sim://)")
    p.add_argument("--factory", default=None, metavar="MODULE:CALLABLE",
                   help="serve the Device returned by this zero-argument callable instead")
    p.add_argument("--port", required=True,
                   help="PATH of a serial port, 'pty', or tcp:[HOST:]PORT (HOST default "
                        "127.0.0.1, port 0 = any)")
    p.add_argument("--baud", type=int, default=115200, help="baud rate for a serial PATH")
    p.add_argument("--secret-file", default=None, metavar="PATH",
                   help="file holding the shared link secret (mode 0600)")
    p.add_argument("--insecure", action="store_true",
                   help="allow a TCP listener on a non-loopback address without a secret")
    p.add_argument("--pty-mode", default="600", metavar="OCTAL",
                   help="permissions of the pty (default 600: owner only)")
    p.add_argument("--handshake-timeout", type=float, default=d["handshake_timeout"],
                   metavar="S", help="close a TCP connection with no authenticated HELLO "
                                     "after S seconds")
    p.add_argument("--idle-timeout", type=float, default=d["idle_timeout"], metavar="S",
                   help="end a session idle for S seconds (0 = never)")
    p.add_argument("--session-timeout", type=float, default=d["session_timeout"], metavar="S",
                   help="end a session older than S seconds (0 = never)")
    p.add_argument("--max-wait", type=float, default=d["max_wait"], metavar="S",
                   help="cap on the timeout of a client's interrupt wait")
    p.add_argument("--inject", default="", metavar="SPEC",
                   help="fault injection on what the agent sends, e.g. "
                        "noise=0.001,corrupt=0.01,drop=0.01,delay=0.1,delay_ms=5,seed=1")
    p.add_argument("--max-payload", type=int, default=lp.LIMITS["max_payload"],
                   help="largest frame payload the agent accepts")
    p.add_argument("--once", action="store_true", help="exit after the first TCP client leaves")
    p.add_argument("-v", "--verbose", action="store_true", help="log sessions and errors")
    p.add_argument("--debug", action="store_true", help="tracebacks for errors")
    p.add_argument("--version", action="version", version=f"dvsdk-agent {__version__} "
                                                              f"(dvlink v{lp.VERSION})")
    return p


def _limits(args: argparse.Namespace) -> Limits:
    vals = {k: getattr(args, k) for k in ("handshake_timeout", "idle_timeout",
                                          "session_timeout", "max_wait")}
    for k, v in vals.items():
        if not v >= 0 or v == float("inf"):
            raise InvalidArgument("must be a finite number of seconds >= 0",
                                  field="--" + k.replace("_", "-"), value=v)
    return Limits(**vals)


def _setup(args: argparse.Namespace) -> tuple[str, Any, LinkServer, FaultSpec | None]:
    """Everything that can fail on bad input, before anything is served (exit 2)."""
    kind, where = parse_port(args.port)
    secret = auth.load_secret(args.secret_file)
    if kind == "tcp" and secret is None and not args.insecure and not is_loopback(where[0]):
        raise InvalidArgument(
            f"refusing to listen on {where[0]} without a link secret", field="--port",
            value=args.port, hint=f"give --secret-file (or ${auth.ENV_SECRET_FILE}, "
            f"${auth.ENV_SECRET}), listen on 127.0.0.1, or pass --insecure")
    try:
        pty_mode = int(args.pty_mode, 8)
    except ValueError:
        raise InvalidArgument("--pty-mode is not an octal mode", field="--pty-mode",
                              value=args.pty_mode) from None
    if not 0 <= pty_mode <= 0o777:
        raise InvalidArgument("--pty-mode out of range", field="--pty-mode",
                              value=args.pty_mode, limit="000..777")
    args.pty_mode = pty_mode
    limits = _limits(args)
    inject = FaultSpec.parse(args.inject) if args.inject else None
    device = _factory_device(args.factory) if args.factory else open_device(args.device)
    server = LinkServer(device, max_payload=args.max_payload, verbose=args.verbose,
                        secret=secret, limits=limits)
    return kind, where, server, inject


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``dvsdk-agent``; returns the process exit status."""
    args = build_parser().parse_args(argv)
    try:
        kind, where, server, inject = _setup(args)
    except DvsdkError as exc:
        if args.debug:
            traceback.print_exc()
        log(f"error: {exc}")
        return exc.exit_code
    except Exception as exc:  # a factory that raised: its problem, reported in one line
        if args.debug:
            traceback.print_exc()
        log(f"error: {type(exc).__name__}: {exc}")
        return 2
    stop = threading.Event()
    saved = {sig: signal.signal(sig, lambda signum, frame: stop.set())
             for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        if kind == "pty":
            serve_pty(server, stop, inject=inject, mode=args.pty_mode)
        elif kind == "tcp":
            serve_tcp(server, where[0], where[1], stop, once=args.once, inject=inject)
        else:
            serve_serial(server, where, args.baud, stop, inject=inject)
    except (OSError, ValueError) as exc:
        if args.debug:
            traceback.print_exc()
        log(f"error: cannot serve on {args.port}: {exc}")
        return 2
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        server.end_session()
        server.device.close()
        if args.verbose:
            log(f"stats: {dict(server.stats)}")
    return 0


# -------------------------------------------------------------------------------------------------
# Child-process helper
# -------------------------------------------------------------------------------------------------


class AgentProcess:
    """``python -m dvsdk.link.agent`` in a child process; ``url`` is what it announced.

    ::

        with AgentProcess("sim://", port="pty") as agent:
            dev = open_device(agent.url)
    """

    def __init__(self, device: str | None = "sim://", port: str = "tcp:127.0.0.1:0",
                 args: Sequence[str] = (), *, factory: str | None = None,
                 env: dict[str, str] | None = None, start_timeout: float = 30.0) -> None:
        cmd = [sys.executable, "-m", "dvsdk.link.agent", "--port", port, *args]
        cmd += ["--factory", factory] if factory else ["--device", device or "sim://"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                     env=env)
        try:
            self.url = self._read_line(start_timeout)
        except BaseException:
            self.kill()
            raise

    def _read_line(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(0.0, left))
            chunk = os.read(fd, 1) if ready else b""
            if not chunk:
                code = self.proc.poll()
                if ready or left <= 0 or code is not None:
                    raise LinkError("agent did not announce its URL", field="agent",
                                    value=self.proc.args, limit=f"{timeout}s")
            line += chunk
        return line.decode().strip()

    @property
    def pid(self) -> int:
        """The agent's process id."""
        return self.proc.pid

    def kill(self) -> None:
        """SIGKILL: the agent vanishes without a goodbye."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._close_pipe()

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, then SIGKILL after ``timeout``; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._close_pipe()
        return int(self.proc.returncode)

    def _close_pipe(self) -> None:
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> AgentProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":
    sys.exit(main())
