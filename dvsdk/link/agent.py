"""``dvsdk-agent``: serve a local device over the dvlink protocol.

On the board the agent serves the hardware (``--device uio://``); in CI it
serves the simulator (``--device sim://``).  The client is
:class:`dvsdk.link.client.LinkDevice`; the protocol is ``firmware_spec/link.md``.

::

    dvsdk-agent --device sim:// --port tcp:0               # prints socket://127.0.0.1:PORT
    dvsdk-agent --device sim:// --port pty                 # prints serial:///dev/pts/N
    dvsdk-agent --device uio:// --port /dev/ttyGS0 --baud 921600

The first line on stdout is the URL a client opens; logs go to stderr.  The
agent always requires the link secret (``firmware_spec/link.md`` §5): from
``--secret-file``, the environment, or the user's config folder, where it is
created on the first start; ``--insecure`` serves without one and says so at
every start.  The request executor is :class:`~dvsdk.link.server.LinkServer`;
TCP handshakes run in :mod:`~dvsdk.link.gatekeeper`; this module has the pty and
serial ports, the command line, and :class:`AgentProcess`, which starts an agent
in a child process for tests and benchmarks.
"""

from __future__ import annotations

import argparse
import importlib
import ipaddress
import os
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
from ..errors import DvsdkError, InvalidArgument, LinkError
from . import auth, gatekeeper
from . import protocol as lp
from .server import Limits, LinkServer, log
from .transport import FaultSpec, FaultyTransport, FdTransport, SerialTransport, Transport

# -------------------------------------------------------------------------------------------------
# Ports
# -------------------------------------------------------------------------------------------------


def _announce(url: str) -> None:
    print(url, flush=True)


def serve_tcp(server: LinkServer, host: str, port: int, stop: threading.Event, *,
              once: bool = False, inject: FaultSpec | None = None,
              announce: Callable[[str], None] = _announce) -> None:
    """Listen on ``host:port`` (:func:`dvsdk.link.gatekeeper.serve_tcp`)."""
    gatekeeper.serve_tcp(server, host, port, stop, once=once, inject=inject,
                         announce=announce)


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
              mode: int = 0o600, announce: Callable[[str], None] = _announce) -> None:
    """Open a pseudo-terminal (``mode``: owner-only unless told), announce its slave path
    and serve its master side."""
    import tty

    master, slave = os.openpty()
    tty.setraw(slave)
    path = os.ttyname(slave)
    os.chmod(path, mode)
    announce(f"serial://{path}")
    # Keep the slave open ourselves: the master then never sees EOF/EIO between clients.
    _serve_one(server, FdTransport(master, f"pty:{path}", flush_fd=slave), stop, inject,
               lambda: os.close(slave))


def serve_serial(server: LinkServer, port: str, baud: int, stop: threading.Event, *,
                 inject: FaultSpec | None = None,
                 announce: Callable[[str], None] = _announce) -> None:
    """Serve a real serial port (e.g. the board's USB gadget ``/dev/ttyGS0``)."""
    import serial

    ser = serial.serial_for_url(port, baudrate=baud)
    announce(f"serial://{port}?baud={baud}")
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
  dvsdk-agent --device uio:// --port tcp:0.0.0.0:5555    on the board; copy the secret file
                                                        it names to the host, which uses
                                  DVSDK_DEVICE=socket://board:5555?secret_file=PATH
  dvsdk-agent --device sim:// --port pty                 prints serial:///dev/pts/N
  dvsdk-agent --device uio:// --port /dev/ttyPS1 --baud 921600   over the board's UART
The first line printed is the device URL a client should open.  Clients must prove they
hold the link secret: --secret-file, else ${auth.ENV_SECRET_FILE} or ${auth.ENV_SECRET},
else {auth.default_secret_path()}, created (mode 0600) on the first start.  Local clients
find that file themselves.  --insecure serves anyone who can connect.""")
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
                   help="serve without a link secret: anyone who can connect may drive the "
                        "device (a warning at every start)")
    p.add_argument("--pty-mode", default="600", metavar="OCTAL",
                   help="permissions of the pty (default 600: owner only)")
    p.add_argument("--handshake-timeout", type=float, default=d["handshake_timeout"],
                   metavar="S", help="close a TCP connection with no authenticated HELLO "
                                     "after S seconds (handshakes run side by side)")
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
    lo, hi = lp.LIMITS["min_payload"], lp.LIMITS["max_payload"]
    if not lo <= args.max_payload <= hi:   # (a session would negotiate it into range)
        raise InvalidArgument("frame payload out of range", field="--max-payload",
                              value=args.max_payload, limit=f"{lo}..{hi}")
    return Limits(**vals)


def agent_secret(path: str | None, insecure: bool, reach: str = "") -> tuple[bytes | None, str]:
    """The secret the agent requires (link.md §5) and what to say about it at the start:
    ``--secret-file``, the environment, or the config folder's, created there on the first
    start.  None only with ``--insecure``, and then a warning."""
    if insecure:
        if path:
            raise InvalidArgument("--insecure serves without a secret: drop --secret-file or "
                                  "--insecure", field="--insecure", value=path)
        return None, (f"warning: --insecure: no link secret; anyone who can reach "
                      f"{reach or 'it'} may drive the device")
    found = auth.find_secret(path)
    if found.secret is not None:
        return found.secret, f"link secret: {found.where}"
    where = auth.default_secret_path()
    secret = auth.create_secret(where)
    return secret, (f"link secret: {where} (created, mode 0600; clients on this machine "
                    "read it there, copy it to a client elsewhere)")


def _setup(args: argparse.Namespace) -> tuple[str, Any, LinkServer, FaultSpec | None]:
    """Everything that can fail on bad input, before anything is served (exit 2).  What
    the start should say about the secret is in ``args.secret_note``."""
    kind, where = parse_port(args.port)
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
    reach = args.port
    if kind == "tcp":
        reach = f"{where[0]}:{where[1]}" + ("" if is_loopback(where[0]) else
                                              ", not only from this machine")
    secret, args.secret_note = agent_secret(args.secret_file, args.insecure, reach)
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

    def announce(url: str) -> None:  # the URL first, then (stderr) the secret or a warning
        _announce(url)
        log(args.secret_note)

    try:
        if kind == "pty":
            serve_pty(server, stop, inject=inject, mode=args.pty_mode, announce=announce)
        elif kind == "tcp":
            serve_tcp(server, where[0], where[1], stop, once=args.once, inject=inject,
                      announce=announce)
        else:
            serve_serial(server, where, args.baud, stop, inject=inject, announce=announce)
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
