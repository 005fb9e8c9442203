"""The agent's request executor: one :class:`Device`, one session at a time.

``firmware_spec/link.md`` §4-§10.  :meth:`LinkServer.handle` maps one received
frame to the frame to send back; :meth:`LinkServer.serve` runs that over a
transport and enforces the session limits.  Responses are kept in a replay
cache keyed by sequence number and request CRC, so a retried request is
answered again but never executed twice.  With a secret, nothing but
``HELLO``/``AUTH``/``BYE`` is served until the client proved it holds it.
Every buffer handed out is zeroed first, and every write that may start a unit
is vetted by :class:`~dvsdk.link.guard.KickGuard`.
"""

from __future__ import annotations

import collections
import math
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import __version__
from ..driver.device import Device, DmaBuffer
from ..errors import (
    AuthenticationError,
    DeviceError,
    DeviceLost,
    DeviceTimeout,
    DvsdkError,
    InvalidArgument,
    LinkError,
)
from . import auth
from . import protocol as lp
from .guard import KickGuard
from .transport import Transport

_U32 = 0xFFFFFFFF
#: what an unauthenticated session may send
_OPEN = {"HELLO", "AUTH", "BYE"}


def log(msg: str) -> None:
    print(f"dvsdk-agent: {msg}", file=sys.stderr, flush=True)


def _overrides(buf: DmaBuffer, *names: str) -> bool:
    cls = type(buf)
    return any(getattr(cls, n) is not getattr(DmaBuffer, n) for n in names)


@dataclass
class Limits:
    """The agent's session limits (link.yaml ``agent``; seconds, 0 = none)."""

    handshake_timeout: float = lp.AGENT_LIMITS["handshake_timeout"]
    idle_timeout: float = lp.AGENT_LIMITS["idle_timeout"]
    session_timeout: float = lp.AGENT_LIMITS["session_timeout"]
    max_wait: float = lp.AGENT_LIMITS["max_wait"]
    wait_slice: float = lp.AGENT_LIMITS["wait_slice"]


class _ClientGone(Exception):
    """The client vanished while the agent waited on its behalf."""


class LinkServer:
    """Executes dvlink requests against one :class:`Device`."""

    def __init__(self, device: Device, *, max_payload: int = lp.LIMITS["max_payload"],
                 cache_size: int = lp.LIMITS["replay_cache"], verbose: bool = False,
                 secret: bytes | None = None, limits: Limits | None = None) -> None:
        if not getattr(device, "has_registers", True):
            raise DeviceError(f"{getattr(device, 'url', 'this device')} cannot be served: the "
                              "link carries register accesses, and DMP's kernel module owns "
                              "the registers", field="device", value=getattr(device, "url", ""),
                              hint="serve the board as uio:// instead, or run on the board")
        self.device = device
        self.max_payload = max(lp.LIMITS["min_payload"], min(max_payload,
                                                             lp.LIMITS["max_payload"]))
        self.cache_size = cache_size
        self.verbose = verbose
        self.secret = secret
        self.limits = limits or Limits()
        self.buffers: dict[int, DmaBuffer] = {}
        self.guard = KickGuard()
        self._next_handle = 1
        self._cache: collections.OrderedDict[int, tuple[int, bytes]] = collections.OrderedDict()
        self._max_seq: int | None = None
        self.session: int | None = None
        self.authenticated = False
        self._challenge = b""
        self._ending: str | None = None  # set when the current connection should close
        self._transport: Transport | None = None
        self._info_doc: bytes | None = None  # the INFO document being read in chunks
        self.peer = ""
        self.stats: collections.Counter[str] = collections.Counter()
        self._handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "BYE": self._bye, "PING": self._ping, "READ32": self._read32,
            "WRITE32": self._write32, "ALLOC": self._alloc, "FREE": self._free,
            "MEM_WRITE": self._mem_write, "MEM_READ": self._mem_read, "SYNC": self._sync,
            "CHECK_READ": self._check_read, "WAIT_IRQ": self._wait_irq, "INFO": self._info,
            "RESET": self._reset, "AUTH": self._auth, "CAPS": self._caps,
        }

    # -- session ------------------------------------------------------------------------------
    def end_session(self) -> None:
        """Free every buffer the current client allocated and forget its replies."""
        for buf in self.buffers.values():
            try:
                buf.free()
            except Exception as exc:  # keep serving whatever the backend says
                log(f"free of {buf!r} failed: {exc}")
        self.buffers.clear()
        self._cache.clear()
        self._max_seq = None
        self.session = None
        self.authenticated = False
        self._info_doc = None
        self.guard.reset()

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
        elif self.session is None and msg.name != "BYE":
            out = self._error(frame, LinkError("no session: send HELLO first", field="code",
                                               value=msg.name))
        elif not self.authenticated and msg.name not in _OPEN:
            out = self._error(frame, AuthenticationError(
                "this agent requires authentication: send AUTH first", field="code",
                value=msg.name))
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
        return error_frame(frame.code, frame.seq, exc)

    def _execute(self, msg: lp.Message, frame: lp.Frame) -> bytes:
        self.stats[msg.name] += 1
        try:
            args = msg.request.unpack(frame.payload)
            return self._respond(msg, frame.seq, self._handlers[msg.name](args))
        except _ClientGone:
            raise
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
        self.authenticated = self.secret is None
        self._challenge = auth.challenge()
        self.stats["sessions"] += 1
        mp = max(lp.LIMITS["min_payload"], min(self.max_payload, args["max_payload"]))
        if self.verbose:
            log(f"session {self.session:#x} from {args['client']!r} {self.peer}, "
                f"max_payload {mp}")
        return self._respond(lp.MESSAGES["HELLO"], frame.seq,
                             {"version": lp.VERSION, "max_payload": mp,
                              "auth": int(self.secret is not None),
                              "challenge": self._challenge})

    # -- handlers ------------------------------------------------------------------------------
    def _auth(self, a: dict[str, Any]) -> dict[str, Any]:
        secret = self.secret
        if secret is None:
            raise AuthenticationError("this agent has no secret: AUTH is not needed",
                                      field="auth")
        want = auth.client_proof(secret, self._challenge, a["challenge"], self.session or 0)
        if not auth.same(a["proof"], want):
            self.stats["auth_failures"] += 1
            self._ending = "authentication failed"
            log(f"authentication failed{' from ' + self.peer if self.peer else ''}")
            time.sleep(0.2)  # make guessing slow
            raise AuthenticationError("the client's proof does not match the agent's secret",
                                      field="proof")
        self.authenticated = True
        return {"proof": auth.agent_proof(secret, a["challenge"], self._challenge)}

    def _caps(self, a: dict[str, Any]) -> dict[str, Any]:
        info = self.device.info()
        lim = self.limits
        return {"caps": {"agent": f"dvsdk-agent {__version__}", "backend": info.backend,
                         "units": list(info.units), "device_url": getattr(self.device, "url", ""),
                         "replay_cache": self.cache_size, "pid": os.getpid(),
                         "max_wait": lim.max_wait, "idle_timeout": lim.idle_timeout,
                         "session_timeout": lim.session_timeout}}

    def _buf(self, handle: int) -> DmaBuffer:
        buf = self.buffers.get(handle)
        if buf is None:
            raise InvalidArgument("unknown DMA buffer handle (freed, or from another session)",
                                  field="handle", value=handle)
        return buf

    def _bye(self, a: dict[str, Any]) -> dict[str, Any]:
        self.end_session()
        self._ending = "client said BYE"
        return {}

    def _ping(self, a: dict[str, Any]) -> dict[str, Any]:
        return {"data": a["data"]}

    def _read32(self, a: dict[str, Any]) -> dict[str, Any]:
        return {"value": int(self.device.read32(a["unit"], a["offset"])) & _U32}

    def _write32(self, a: dict[str, Any]) -> dict[str, Any]:
        unit, offset = a["unit"], a["offset"]
        self.device.check_reg(unit, offset)
        value = Device.check_value(a["value"])  # whatever the served device would do
        commit = self.guard.prepare(unit, offset, value, self.buffers.values())
        self.device.write32(unit, offset, value)
        commit()
        return {}

    def _alloc(self, a: dict[str, Any]) -> dict[str, Any]:
        buf = self.device.alloc(a["nbytes"], a["align"], a["name"])
        try:  # nothing of an earlier owner may show through: CPU view and DRAM both zero
            buf.write(0, np.zeros(buf.size, np.uint8))
            buf.sync_for_device(0, buf.size)
        except BaseException:
            buf.free()
            raise
        handle = self._next_handle
        self._next_handle = self._next_handle % 0xFFFFFFFF + 1
        self.buffers[handle] = buf
        flags = lp.BUF_ZEROED | (
            lp.BUF_CHECKS_READS if _overrides(buf, "read", "_check_cpu_read") else 0) | (
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
        """Wait in slices, checking between them that the client is still there; the
        timeout is capped at ``max_wait`` (NaN and negative are refused)."""
        unit, t = a["unit"], a["timeout"]
        if math.isnan(t) or t < 0:
            raise InvalidArgument("timeout must be a number of seconds >= 0", field="timeout",
                                  value=t, limit=">= 0 seconds")
        t = min(t, self.limits.max_wait)
        end = time.monotonic() + t
        while True:
            step = max(0.0, min(end - time.monotonic(), self.limits.wait_slice))
            try:
                self.device.wait_irq(unit, step)
                return {}
            except DeviceTimeout as exc:
                if time.monotonic() >= end - 1e-3:
                    raise DeviceTimeout(f"{unit} interrupt did not arrive within {t:g} s",
                                        registers=exc.registers, field="timeout",
                                        value=t) from None
            if self._transport is not None and self._transport.peer_gone():
                raise _ClientGone(f"client left during WAIT_IRQ {unit}")

    def _info(self, a: dict[str, Any]) -> dict[str, Any]:
        """A chunk of the device's facts as JSON (link.md §6): offset 0 encodes them afresh,
        later chunks come from that copy, so the pieces of one read fit together (past its
        end: no bytes)."""
        offset = a["offset"]
        if offset == 0 or self._info_doc is None:
            self._info_doc = lp.encode_json(self.device.info().as_dict())
        doc = self._info_doc
        n = min(a["nbytes"], self.max_payload - lp.MESSAGES["INFO"].response.struct.size)
        return {"total": len(doc), "data": doc[offset:offset + n]}

    def _reset(self, a: dict[str, Any]) -> dict[str, Any]:
        self.device.reset()
        self.guard.device_reset()
        return {}

    # -- transport loop ------------------------------------------------------------------------
    def _expired(self, now: float, opened: float, started: float, last: float,
                 per_connection: bool) -> str | None:
        lim = self.limits
        if self.session is None or not self.authenticated:
            if per_connection and lim.handshake_timeout and now - opened > lim.handshake_timeout:
                return f"no authenticated HELLO within {lim.handshake_timeout:g} s"
            return None
        if lim.idle_timeout and now - last > lim.idle_timeout:
            return f"idle for {lim.idle_timeout:g} s"
        if lim.session_timeout and now - started > lim.session_timeout:
            return f"session longer than {lim.session_timeout:g} s"
        return None

    def serve(self, transport: Transport, stop: threading.Event | None = None, *,
              initial: bytes = b"", per_connection: bool = False,
              on_release: Callable[[], None] | None = None) -> str:
        """Answer requests until the transport closes or ``stop`` is set; returns why it
        stopped.  ``per_connection`` (TCP): the connection is the session, so BYE, a failed
        AUTH or a timeout ends it (``on_release`` runs before the last answer is sent);
        otherwise (pty, serial, loop) a timeout only ends the session."""
        stop = stop or threading.Event()
        deframer = lp.Deframer(lp.max_frame_bytes(lp.LIMITS["max_payload"]))
        self._transport, self._ending = transport, None
        opened = started = last = time.monotonic()
        session = None
        data = initial
        try:
            while not stop.is_set():
                for raw in deframer.feed(data or transport.read(0.1)):
                    out = self.handle(raw)
                    last = time.monotonic()
                    if self.session != session:
                        session, started = self.session, last
                    if self._ending and per_connection:
                        if on_release:
                            on_release()
                        if out is not None:
                            transport.write(out)
                        return self._ending
                    self._ending = None
                    if out is not None:
                        transport.write(out)
                data = b""
                reason = self._expired(time.monotonic(), opened, started, last, per_connection)
                if reason:
                    if self.session is not None:
                        transport.write(error_frame(lp.MESSAGES["BYE"].code, 0, LinkError(
                            f"dvsdk-agent ended the session: {reason}", field="session")))
                    self.end_session()
                    if per_connection:
                        return reason
                    session = None
            return "agent stopping"
        except (DeviceLost, _ClientGone) as exc:
            return f"client gone: {exc}"
        finally:
            self._transport = None


def error_frame(code: int, seq: int, exc: BaseException) -> bytes:
    """An error response (link.md §8) to a request of ``code`` and ``seq``."""
    return lp.encode_frame(code, seq, lp.error_payload(exc), lp.FLAG_RESPONSE | lp.FLAG_ERROR)
