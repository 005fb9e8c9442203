"""``dvsdk-agent``: serve a local device over the dvlink protocol.

On the board the agent serves the hardware (``--device uio://``); in CI it
serves the simulator (``--device sim://``).  The client is
:class:`dvsdk.link.client.LinkDevice`; the protocol is ``firmware_spec/link.md``.

::

    dvsdk-agent --device sim:// --port tcp:127.0.0.1:0     # prints socket://127.0.0.1:PORT
    dvsdk-agent --device sim:// --port pty                 # prints serial:///dev/pts/N
    dvsdk-agent --device uio:// --port /dev/ttyGS0 --baud 921600

The first line on stdout is the URL a client opens; logs go to stderr.
:class:`AgentProcess` starts an agent in a child process for tests and benchmarks.
"""

from __future__ import annotations

import argparse
import collections
import importlib
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
from ..driver.device import Device, DmaBuffer, open_device
from ..errors import DeviceLost, DvsdkError, InvalidArgument, LinkError
from . import protocol as lp
from .transport import (
    FaultSpec,
    FaultyTransport,
    FdTransport,
    SerialTransport,
    SocketTransport,
    Transport,
)

_U32 = 0xFFFFFFFF


def _log(msg: str) -> None:
    print(f"dvsdk-agent: {msg}", file=sys.stderr, flush=True)


def _overrides(buf: DmaBuffer, *names: str) -> bool:
    cls = type(buf)
    return any(getattr(cls, n) is not getattr(DmaBuffer, n) for n in names)


class LinkServer:
    """Executes dvlink requests against one :class:`Device`.

    :meth:`handle` maps one received frame body to the bytes to send back (or
    None); :meth:`serve` runs that over a transport.  Responses are kept in a
    replay cache keyed by sequence number and request CRC, so a retried request
    is answered again but never executed twice.
    """

    def __init__(self, device: Device, *, max_payload: int = lp.LIMITS["max_payload"],
                 cache_size: int = lp.LIMITS["replay_cache"], verbose: bool = False) -> None:
        self.device = device
        self.max_payload = max(lp.LIMITS["min_payload"], min(max_payload,
                                                             lp.LIMITS["max_payload"]))
        self.cache_size = cache_size
        self.verbose = verbose
        self.buffers: dict[int, DmaBuffer] = {}
        self._next_handle = 1
        self._cache: collections.OrderedDict[int, tuple[int, bytes]] = collections.OrderedDict()
        self._max_seq: int | None = None
        self.session: int | None = None
        self.stats: collections.Counter[str] = collections.Counter()
        self._handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "BYE": self._bye, "PING": self._ping, "READ32": self._read32,
            "WRITE32": self._write32, "ALLOC": self._alloc, "FREE": self._free,
            "MEM_WRITE": self._mem_write, "MEM_READ": self._mem_read, "SYNC": self._sync,
            "CHECK_READ": self._check_read, "WAIT_IRQ": self._wait_irq, "INFO": self._info,
            "RESET": self._reset,
        }

    # -- session ------------------------------------------------------------------------------
    def end_session(self) -> None:
        """Free every buffer the current client allocated and forget its replies."""
        for buf in self.buffers.values():
            try:
                buf.free()
            except Exception as exc:  # keep serving whatever the backend says
                _log(f"free of {buf!r} failed: {exc}")
        self.buffers.clear()
        self._cache.clear()
        self._max_seq = None
        self.session = None

    # -- one frame ------------------------------------------------------------------------------
    def handle(self, raw: bytes) -> bytes | None:
        """One received (stuffed) frame body -> the frame to send back, if any."""
        try:
            frame = lp.decode_frame(raw)
        except lp.FrameError as exc:
            self.stats["corrupt"] += 1
            return self._respond(lp.MESSAGES["NAK"], 0, {"reason": str(exc)})
        if frame.is_response:
            self.stats["ignored"] += 1
            return None
        cached = self._cache.get(frame.seq)
        if cached is not None and cached[0] == frame.crc:
            self.stats["replayed"] += 1
            return cached[1]
        msg = frame.message
        if msg is not None and msg.name == "HELLO":
            out = self._hello(frame)
        elif self._is_stale(frame.seq):
            self.stats["stale"] += 1
            return None
        elif frame.version != lp.VERSION:
            out = self._error(frame, LinkError(
                f"protocol version mismatch: client speaks v{frame.version}, "
                f"agent speaks v{lp.VERSION}", field="version", value=frame.version,
                limit=lp.VERSION))
        elif msg is None or msg.name not in self._handlers:
            out = self._error(frame, LinkError("unknown message code", field="code",
                                               value=frame.code))
        else:
            out = self._execute(msg, frame)
        self._remember(frame, out)
        return out

    def _is_stale(self, seq: int) -> bool:
        if self._max_seq is None:
            return False
        behind = (self._max_seq - seq) & _U32
        return self.cache_size <= behind < 1 << 31

    def _remember(self, frame: lp.Frame, out: bytes) -> None:
        if self._max_seq is None or 0 < (frame.seq - self._max_seq) & _U32 < 1 << 31:
            self._max_seq = frame.seq
        self._cache[frame.seq] = (frame.crc, out)
        self._cache.move_to_end(frame.seq)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def _respond(self, msg: lp.Message, seq: int, values: dict[str, Any]) -> bytes:
        return lp.encode_frame(msg.code, seq, msg.response.pack(values), lp.FLAG_RESPONSE)

    def _error(self, frame: lp.Frame, exc: BaseException) -> bytes:
        self.stats["errors"] += 1
        return lp.encode_frame(frame.code, frame.seq, lp.error_payload(exc),
                               lp.FLAG_RESPONSE | lp.FLAG_ERROR)

    def _execute(self, msg: lp.Message, frame: lp.Frame) -> bytes:
        self.stats[msg.name] += 1
        try:
            args = msg.request.unpack(frame.payload)
            return self._respond(msg, frame.seq, self._handlers[msg.name](args))
        except DvsdkError as exc:
            return self._error(frame, exc)
        except Exception as exc:  # a backend bug must not kill the agent
            if self.verbose:
                traceback.print_exc()
            return self._error(frame, exc)

    def _hello(self, frame: lp.Frame) -> bytes:
        payload = frame.payload
        version = int.from_bytes(payload[:2], "little") if len(payload) >= 2 else frame.version
        if version != lp.VERSION:
            return self._error(frame, LinkError(
                f"protocol version mismatch: client speaks v{version}, "
                f"agent speaks v{lp.VERSION}", field="version", value=version,
                limit=lp.VERSION))
        try:
            args = lp.MESSAGES["HELLO"].request.unpack(payload)
        except DvsdkError as exc:
            return self._error(frame, exc)
        self.end_session()
        self.session = args["nonce"]
        self.stats["sessions"] += 1
        info = self.device.info()
        mp = max(lp.LIMITS["min_payload"], min(self.max_payload, args["max_payload"]))
        caps = {"agent": f"dvsdk-agent {__version__}", "backend": info.backend,
                "units": list(info.units), "device_url": getattr(self.device, "url", ""),
                "replay_cache": self.cache_size, "pid": os.getpid()}
        if self.verbose:
            _log(f"session {self.session:#x} from {args['client']!r}, max_payload {mp}")
        return self._respond(lp.MESSAGES["HELLO"], frame.seq,
                             {"version": lp.VERSION, "max_payload": mp, "caps": caps})

    # -- handlers ------------------------------------------------------------------------------
    def _buf(self, handle: int) -> DmaBuffer:
        buf = self.buffers.get(handle)
        if buf is None:
            raise InvalidArgument("unknown DMA buffer handle (freed, or from another session)",
                                  field="handle", value=handle)
        return buf

    def _bye(self, a: dict[str, Any]) -> dict[str, Any]:
        self.end_session()
        return {}

    def _ping(self, a: dict[str, Any]) -> dict[str, Any]:
        return {"data": a["data"]}

    def _read32(self, a: dict[str, Any]) -> dict[str, Any]:
        return {"value": int(self.device.read32(a["unit"], a["offset"])) & _U32}

    def _write32(self, a: dict[str, Any]) -> dict[str, Any]:
        self.device.write32(a["unit"], a["offset"], a["value"])
        return {}

    def _alloc(self, a: dict[str, Any]) -> dict[str, Any]:
        buf = self.device.alloc(a["nbytes"], a["align"], a["name"])
        handle = self._next_handle
        self._next_handle = self._next_handle % 0xFFFFFFFF + 1
        self.buffers[handle] = buf
        flags = (lp.BUF_CHECKS_READS if _overrides(buf, "read", "_check_cpu_read") else 0) | (
            lp.BUF_TRACKS_WRITES if _overrides(buf, "write") else 0)
        return {"handle": handle, "phys": buf.phys, "size": buf.size, "flags": flags,
                "name": buf.name}

    def _free(self, a: dict[str, Any]) -> dict[str, Any]:
        self._buf(a["handle"]).free()
        del self.buffers[a["handle"]]
        return {}

    def _mem_write(self, a: dict[str, Any]) -> dict[str, Any]:
        self._buf(a["handle"]).write(a["offset"], a["data"])
        return {}

    def _mem_read(self, a: dict[str, Any]) -> dict[str, Any]:
        buf = self._buf(a["handle"])
        off, n = buf._range(a["offset"], a["nbytes"])
        return {"data": buf.view[off:off + n].tobytes()}

    def _sync(self, a: dict[str, Any]) -> dict[str, Any]:
        buf = self._buf(a["handle"])
        if a["direction"] == lp.SYNC_FOR_DEVICE:
            buf.sync_for_device(a["offset"], a["nbytes"])
        elif a["direction"] == lp.SYNC_FOR_CPU:
            buf.sync_for_cpu(a["offset"], a["nbytes"])
        else:
            raise InvalidArgument("unknown sync direction", field="direction",
                                  value=a["direction"])
        return {}

    def _check_read(self, a: dict[str, Any]) -> dict[str, Any]:
        self._buf(a["handle"]).read(a["offset"], a["nbytes"])
        return {}

    def _wait_irq(self, a: dict[str, Any]) -> dict[str, Any]:
        self.device.wait_irq(a["unit"], a["timeout"])
        return {}

    def _info(self, a: dict[str, Any]) -> dict[str, Any]:
        return {"info": self.device.info().as_dict()}

    def _reset(self, a: dict[str, Any]) -> dict[str, Any]:
        self.device.reset()
        return {}

    # -- transport loop ------------------------------------------------------------------------
    def serve(self, transport: Transport, stop: threading.Event | None = None) -> None:
        """Answer requests until the transport closes or ``stop`` is set."""
        stop = stop or threading.Event()
        deframer = lp.Deframer(lp.max_frame_bytes(lp.LIMITS["max_payload"]))
        try:
            while not stop.is_set():
                data = transport.read(0.1)
                for raw in deframer.feed(data):
                    out = self.handle(raw)
                    if out is not None:
                        transport.write(out)
        except DeviceLost as exc:
            if self.verbose:
                _log(f"client gone: {exc}")


# -------------------------------------------------------------------------------------------------
# Ports
# -------------------------------------------------------------------------------------------------


def _announce(url: str) -> None:
    print(url, flush=True)


def serve_tcp(server: LinkServer, host: str, port: int, stop: threading.Event, *,
              once: bool = False, inject: FaultSpec | None = None) -> None:
    """Listen on ``host:port`` and serve one client connection at a time."""
    with socket.create_server((host, port)) as lsock:
        bound = lsock.getsockname()
        _announce(f"socket://{bound[0]}:{bound[1]}")
        while not stop.is_set():
            ready, _, _ = select.select([lsock], [], [], 0.1)
            if not ready:
                continue
            conn, peer = lsock.accept()
            if server.verbose:
                _log(f"connection from {peer[0]}:{peer[1]}")
            _serve_one(server, SocketTransport(conn, f"tcp:{peer[0]}:{peer[1]}"), stop,
                       inject, server.end_session)
            if once:
                return


def _serve_one(server: LinkServer, transport: Transport, stop: threading.Event,
               inject: FaultSpec | None, cleanup: Callable[[], None]) -> None:
    """Serve one transport (through the fault injector when asked), then clean up."""
    if inject:
        transport = FaultyTransport(transport, inject)
    try:
        server.serve(transport, stop)
    finally:
        transport.close()
        cleanup()


def serve_pty(server: LinkServer, stop: threading.Event, *,
              inject: FaultSpec | None = None) -> None:
    """Open a pseudo-terminal, announce its slave path and serve its master side."""
    import tty

    master, slave = os.openpty()
    tty.setraw(slave)
    path = os.ttyname(slave)
    os.chmod(path, 0o666)
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
    obj: Any = importlib.import_module(module_name)
    for name in attr.split("."):
        obj = getattr(obj, name)
    return obj()


def build_parser() -> argparse.ArgumentParser:
    """The ``dvsdk-agent`` command line."""
    p = argparse.ArgumentParser(
        prog="dvsdk-agent",
        description="Serve a DV700 device (hardware or simulator) over the dvlink protocol.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="""examples:
  dvsdk-agent --device uio:// --port tcp:0.0.0.0:5555   on the board; a host then uses
                                                        DVSDK_DEVICE=socket://board:5555
  dvsdk-agent --device sim:// --port pty                 prints serial:///dev/pts/N
  dvsdk-agent --device uio:// --port /dev/ttyPS1 --baud 921600   over the board's UART
The first line printed is the device URL a client should open.""")
    p.add_argument("--device", default=None,
                   help="device URL to serve (default $DVSDK_DEVICE, else sim://)")
    p.add_argument("--factory", default=None, metavar="MODULE:CALLABLE",
                   help="serve the Device returned by this zero-argument callable instead")
    p.add_argument("--port", required=True,
                   help="PATH of a serial port, 'pty', or tcp:HOST:PORT (port 0 = any)")
    p.add_argument("--baud", type=int, default=115200, help="baud rate for a serial PATH")
    p.add_argument("--inject", default="", metavar="SPEC",
                   help="fault injection on what the agent sends, e.g. "
                        "corrupt=0.01,drop=0.01,delay=0.1,delay_ms=5,seed=1")
    p.add_argument("--max-payload", type=int, default=lp.LIMITS["max_payload"],
                   help="largest frame payload the agent accepts")
    p.add_argument("--once", action="store_true", help="exit after the first TCP client leaves")
    p.add_argument("-v", "--verbose", action="store_true", help="log sessions and errors")
    p.add_argument("--version", action="version", version=f"dvsdk-agent {__version__} "
                                                              f"(dvlink v{lp.VERSION})")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``dvsdk-agent``; returns the process exit status."""
    args = build_parser().parse_args(argv)
    stop = threading.Event()

    def _on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    try:
        inject = FaultSpec.parse(args.inject) if args.inject else None
        device = _factory_device(args.factory) if args.factory else open_device(args.device)
    except DvsdkError as exc:
        _log(f"error: {exc}")
        return exc.exit_code
    server = LinkServer(device, max_payload=args.max_payload, verbose=args.verbose)
    try:
        if args.port == "pty":
            serve_pty(server, stop, inject=inject)
        elif args.port.startswith("tcp:"):
            host, _, port = args.port[4:].rpartition(":")
            serve_tcp(server, host or "127.0.0.1", int(port), stop, once=args.once,
                      inject=inject)
        else:
            serve_serial(server, args.port, args.baud, stop, inject=inject)
    except (OSError, ValueError) as exc:
        _log(f"error: cannot serve on {args.port}: {exc}")
        return 3
    finally:
        server.end_session()
        device.close()
        if args.verbose:
            _log(f"stats: {dict(server.stats)}")
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
