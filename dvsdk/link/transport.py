"""Byte transports for dvlink, and fault injection.

Every transport has the same calls: ``read(timeout)`` returns what has arrived
(``b""`` when nothing did within ``timeout``) and raises
:class:`~dvsdk.errors.DeviceLost` at end of file; ``write(data)`` sends one
whole frame; ``peer_gone()`` says, without reading, whether the other end has
certainly gone (a closed TCP connection); ``close()``.  :class:`FaultyTransport`
wraps any of them and damages frames with a seeded RNG (``firmware_spec/link.md``
§9).
"""

from __future__ import annotations

import errno
import os
import random
import select
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import DeviceLost, InvalidArgument

READ_SIZE = 1 << 18


class Transport:
    """A full-duplex byte pipe.  Reads return ``b""`` on timeout; EOF raises DeviceLost."""

    name = "transport"

    def read(self, timeout: float) -> bytes:
        """Whatever arrived within ``timeout`` seconds (``b""`` if nothing)."""
        raise NotImplementedError

    def write(self, data: bytes) -> None:
        """Send all of ``data`` (one whole frame)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the underlying port; idempotent."""

    def peer_gone(self) -> bool:
        """True when the other end has certainly gone (only connections can tell)."""
        return False

    def _lost(self, why: object) -> DeviceLost:
        return DeviceLost(f"link {self.name} closed: {why}", field="link", value=self.name)


class SerialTransport(Transport):
    """A pyserial port (posix tty, ``socket://``, ``rfc2217://``, ...)."""

    POLL = 0.05

    def __init__(self, ser: Any, name: str = "") -> None:
        self.ser = ser
        self.name = name or str(getattr(ser, "portstr", "serial"))
        try:
            self._fd: int | None = int(ser.fileno())
        except Exception:
            self._fd = None
        ser.timeout = 0 if self._fd is not None else self.POLL
        sock = getattr(ser, "_socket", None)
        if isinstance(sock, socket.socket):  # no Nagle delay on small requests
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def read(self, timeout: float) -> bytes:
        import serial

        deadline = time.monotonic() + max(0.0, timeout)
        try:
            if self._fd is not None:
                ready, _, _ = select.select([self._fd], [], [], max(0.0, timeout))
                return self.ser.read(READ_SIZE) if ready else b""
            while True:
                data = self.ser.read(1)
                if data:
                    waiting = self.ser.in_waiting
                    return data + (self.ser.read(waiting) if waiting else b"")
                if time.monotonic() >= deadline:
                    return b""
        except (serial.SerialException, OSError, ValueError, TypeError) as exc:
            raise self._lost(exc) from None

    def write(self, data: bytes) -> None:
        import serial

        try:
            self.ser.write(data)
        except (serial.SerialException, OSError, ValueError, TypeError) as exc:
            raise self._lost(exc) from None

    def close(self) -> None:
        sock = getattr(self.ser, "_socket", None)
        if isinstance(sock, socket.socket):
            # pyserial's socket:// close() sleeps 0.3 s "for quick reconnects"; the agent
            # does not need that, so close the socket ourselves and mark the port closed.
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
            self.ser._socket = None
            self.ser.is_open = False
            return
        try:
            self.ser.close()
        except Exception:
            pass


class FdTransport(Transport):
    """A raw file descriptor, e.g. a pty master.

    If a write cannot make progress for ``write_stall`` seconds (nobody reads
    the other end) the rest of the frame is dropped and, when ``flush_fd`` is
    given, the peer's pending input is flushed: a later client retries anyway.
    """

    def __init__(self, fd: int, name: str = "fd", flush_fd: int | None = None,
                 write_stall: float = 5.0) -> None:
        self.fd = fd
        self.name = name
        self.flush_fd = flush_fd
        self.write_stall = write_stall
        os.set_blocking(fd, False)

    def read(self, timeout: float) -> bytes:
        try:
            ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
            if not ready:
                return b""
            data = os.read(self.fd, READ_SIZE)
        except BlockingIOError:
            return b""
        except OSError as exc:
            raise self._lost(exc) from None
        if not data:
            raise self._lost("EOF")
        return data

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        stall = time.monotonic() + self.write_stall
        while view:
            try:
                _, ready, _ = select.select([], [self.fd], [], 0.05)
                n = os.write(self.fd, view) if ready else 0
            except BlockingIOError:
                n = 0
            except OSError as exc:
                raise self._lost(exc) from None
            if n:
                view = view[n:]
                stall = time.monotonic() + self.write_stall
            elif time.monotonic() > stall:
                if self.flush_fd is not None:
                    import termios

                    try:
                        termios.tcflush(self.flush_fd, termios.TCIFLUSH)
                    except (OSError, termios.error):
                        pass
                return

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


class SocketTransport(Transport):
    """A connected TCP socket: the agent's side of a connection, and ``socket://``."""

    def __init__(self, sock: socket.socket, name: str = "tcp", write_stall: float = 30.0) -> None:
        self.sock = sock
        self.name = name
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(write_stall)

    @classmethod
    def connect(cls, host: str, port: int, timeout: float, name: str = "") -> SocketTransport:
        """Connect within ``timeout`` seconds (OSError as ``socket.create_connection``)."""
        sock = socket.create_connection((host, port), timeout=timeout)
        return cls(sock, name or f"tcp:{host}:{port}", write_stall=max(timeout, 30.0))

    def peer_gone(self) -> bool:
        try:
            ready, _, _ = select.select([self.sock], [], [], 0)
            return bool(ready) and self.sock.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def read(self, timeout: float) -> bytes:
        try:
            ready, _, _ = select.select([self.sock], [], [], max(0.0, timeout))
            if not ready:
                return b""
            data = self.sock.recv(READ_SIZE)
        except OSError as exc:
            raise self._lost(exc) from None
        if not data:
            raise self._lost("connection closed by peer")
        return data

    def write(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise self._lost(exc) from None

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class _Pipe:
    def __init__(self) -> None:
        self.buf = bytearray()
        self.closed = False
        self.cond = threading.Condition()


class PipeTransport(Transport):
    """One end of an in-memory full-duplex pipe (``loop://``): behaves like a serial port."""

    def __init__(self, rx: _Pipe, tx: _Pipe, name: str) -> None:
        self._rx, self._tx, self.name = rx, tx, name

    @classmethod
    def pair(cls) -> tuple[PipeTransport, PipeTransport]:
        """(client end, agent end) of a new pipe."""
        a, b = _Pipe(), _Pipe()
        return cls(a, b, "loop:client"), cls(b, a, "loop:agent")

    def read(self, timeout: float) -> bytes:
        with self._rx.cond:
            if not self._rx.buf and not self._rx.closed:
                self._rx.cond.wait(max(0.0, timeout))
            if self._rx.buf:
                data = bytes(self._rx.buf)
                self._rx.buf.clear()
                return data
            if self._rx.closed:
                raise self._lost("EOF")
            return b""

    def write(self, data: bytes) -> None:
        with self._tx.cond:
            if self._tx.closed:
                raise self._lost(errno.errorcode[errno.EPIPE])
            self._tx.buf += data
            self._tx.cond.notify_all()

    def peer_gone(self) -> bool:
        with self._rx.cond:
            return self._rx.closed and not self._rx.buf

    def close(self) -> None:
        for p in (self._rx, self._tx):
            with p.cond:
                p.closed = True
                p.cond.notify_all()


@dataclass
class FaultSpec:
    """Per-frame fault probabilities for :class:`FaultyTransport`.

    ``corrupt`` flips one bit, ``drop`` loses the frame, ``dropbyte`` loses one
    byte of it, ``dup`` sends it twice, ``delay`` sleeps up to ``delay_ms``
    first; ``noise`` is per byte, not per frame: each byte sent (delimiters too)
    is replaced by another value with that probability, as on a noisy line.
    Parsed from ``"corrupt=0.01,drop=0.01,delay=0.2,delay_ms=5,seed=7"``.
    """

    noise: float = 0.0
    corrupt: float = 0.0
    drop: float = 0.0
    dropbyte: float = 0.0
    dup: float = 0.0
    delay: float = 0.0
    delay_ms: float = 0.0
    seed: int = 0
    counts: dict[str, int] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> FaultSpec:
        """``"key=value,..."`` -> FaultSpec; InvalidArgument on anything unknown."""
        spec = cls()
        known = {"noise", "corrupt", "drop", "dropbyte", "dup", "delay", "delay_ms", "seed"}
        for item in filter(None, (s.strip() for s in text.replace(";", ",").split(","))):
            key, sep, val = item.partition("=")
            key = key.strip()
            if key not in known or not sep:
                raise InvalidArgument("bad fault injection item", field="inject", value=item,
                                      limit=sorted(known))
            try:
                num = float(val)
            except ValueError:
                raise InvalidArgument("fault injection value is not a number", field=key,
                                      value=val) from None
            if key not in ("seed", "delay_ms") and not 0.0 <= num <= 1.0:
                raise InvalidArgument("fault probability out of range", field=key, value=num,
                                      limit="0..1")
            setattr(spec, key, int(num) if key == "seed" else num)
        if spec.delay_ms and not spec.delay:
            spec.delay = 1.0
        return spec

    def __bool__(self) -> bool:
        return any((self.noise, self.corrupt, self.drop, self.dropbyte, self.dup, self.delay))


class FaultyTransport(Transport):
    """Wraps a transport and damages what is written through it (one write = one frame)."""

    def __init__(self, inner: Transport, spec: FaultSpec, seed: int | None = None) -> None:
        self.inner = inner
        self.spec = spec
        self.name = f"faulty({inner.name})"
        self.rng = random.Random(spec.seed if seed is None else seed)
        self.np_rng = np.random.default_rng(spec.seed if seed is None else seed)
        self.counts = spec.counts

    def _hit(self, kind: str, p: float) -> bool:
        if p and self.rng.random() < p:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            return True
        return False

    def read(self, timeout: float) -> bytes:
        return self.inner.read(timeout)

    def peer_gone(self) -> bool:
        return self.inner.peer_gone()

    def _noise(self, data: bytes) -> bytes:
        arr = np.frombuffer(data, np.uint8)
        hits = self.np_rng.random(arr.size) < self.spec.noise
        k = int(np.count_nonzero(hits))
        if not k:
            return data
        arr = arr.copy()
        arr[hits] ^= self.np_rng.integers(1, 256, k, dtype=np.uint8)
        self.counts["noise"] = self.counts.get("noise", 0) + k
        return arr.tobytes()

    def write(self, data: bytes) -> None:
        s, rng = self.spec, self.rng
        if s.noise:
            data = self._noise(data)
        if self._hit("delay", s.delay):
            time.sleep(rng.uniform(0.0, s.delay_ms) / 1000.0)
        if self._hit("drop", s.drop):
            return
        buf = bytearray(data)
        if len(buf) > 2 and self._hit("corrupt", s.corrupt):
            i = rng.randrange(1, len(buf) - 1)
            buf[i] ^= 1 << rng.randrange(8)
        if len(buf) > 2 and self._hit("dropbyte", s.dropbyte):
            del buf[rng.randrange(1, len(buf) - 1)]
        self.inner.write(bytes(buf))
        if self._hit("dup", s.dup):
            self.inner.write(bytes(buf))

    def close(self) -> None:
        self.inner.close()
