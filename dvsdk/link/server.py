"""The agent's request executor: one :class:`Device`, one session at a time.

``firmware_spec/link.md`` §4-§10.  :meth:`LinkServer.handle` maps one received
frame to the frame to send back (the frame level, replay cache and handshake
are :class:`~dvsdk.link.session.Session`'s); :meth:`LinkServer.serve` runs that
over a transport and enforces the session limits.
Every buffer handed out is zeroed first, and every write that may start a unit
is vetted by :class:`~dvsdk.link.guard.KickGuard`.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import __version__
from ..driver.device import Device, DmaBuffer
from ..errors import DeviceError, DeviceLost, DeviceTimeout, InvalidArgument, LinkError
from . import protocol as lp
from .guard import KickGuard, started_unit
from .session import ClientGone, Session, error_frame, log
from .transport import Transport
from .unitclaims import SessionOwner, UnitClaims

__all__ = ["Limits", "LinkServer", "error_frame", "log"]

_U32 = 0xFFFFFFFF


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


class LinkServer(Session):
    """Executes dvlink requests against one :class:`Device`."""

    def __init__(self, device: Device, *, max_payload: int = lp.LIMITS["max_payload"],
                 cache_size: int = lp.LIMITS["replay_cache"], verbose: bool = False,
                 secret: bytes | None = None, limits: Limits | None = None) -> None:
        if not getattr(device, "has_registers", True):
            raise DeviceError(f"{getattr(device, 'url', 'this device')} cannot be served: the "
                              "link carries register accesses, and DMP's kernel module owns "
                              "the registers", field="device", value=getattr(device, "url", ""),
                              hint="serve the board as uio:// instead, or run on the board")
        super().__init__(secret=secret, max_payload=max_payload, cache_size=cache_size,
                         verbose=verbose)
        self.device = device
        self.limits = limits or Limits()
        self.buffers: dict[int, DmaBuffer] = {}
        self.guard = KickGuard()
        #: the units this session holds in the device's gate (unitclaims.py)
        self.claims = UnitClaims(device.gate, SessionOwner(self), self.guard)
        self._next_handle = 1
        self._transport: Transport | None = None
        self._info_doc: bytes | None = None  # the INFO document being read in chunks
        self._handlers.update({
            "PING": self._ping, "READ32": self._read32, "WRITE32": self._write32,
            "ALLOC": self._alloc, "FREE": self._free, "MEM_WRITE": self._mem_write,
            "MEM_READ": self._mem_read, "SYNC": self._sync, "CHECK_READ": self._check_read,
            "WAIT_IRQ": self._wait_irq, "INFO": self._info, "RESET": self._reset,
            "CAPS": self._caps,
        })

    # -- session ------------------------------------------------------------------------------
    def end_session(self) -> None:
        """Free every buffer the current client allocated and forget its replies."""
        for buf in self.buffers.values():
            try:
                buf.free()
            except Exception as exc:  # keep serving whatever the backend says
                log(f"free of {buf!r} failed: {exc}")
        self.buffers.clear()
        self.claims.end()
        super().end_session()
        self._info_doc = None
        self.guard.reset()

    @property
    def transport_name(self) -> str:
        """The transport being served (named in others' DeviceBusy)."""
        return self._transport.name if self._transport is not None else ""

    # -- handlers ------------------------------------------------------------------------------
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

    def _ping(self, a: dict[str, Any]) -> dict[str, Any]:
        return {"data": a["data"]}

    def _read32(self, a: dict[str, Any]) -> dict[str, Any]:
        self.claims.check(a["unit"], "register read")
        return {"value": int(self.device.read32(a["unit"], a["offset"])) & _U32}

    def _write32(self, a: dict[str, Any]) -> dict[str, Any]:
        """A register write, vetted by the kick guard; a start takes its unit in the gate
        until the session's wait for it (unitclaims.py), any other write is refused while
        someone else holds the unit."""
        unit, offset = a["unit"], a["offset"]
        self.device.check_reg(unit, offset)
        value = Device.check_value(a["value"])  # whatever the served device would do
        starts = started_unit(unit, offset, value) is not None
        taken = self.claims.take(unit, "a start") if starts else False
        if not starts:
            self.claims.check(unit, "register write")
        try:
            commit = self.guard.prepare(unit, offset, value, self.buffers.values())
            self.device.write32(unit, offset, value)
        except BaseException:
            if taken:
                self.claims.give(unit)
            raise
        commit()
        if not starts:
            self.claims.wrote(unit)
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
        self.claims.take(unit, "an interrupt wait")  # (nobody else's interrupt is taken)
        try:
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
                    raise ClientGone(f"client left during WAIT_IRQ {unit}")
        finally:
            self.claims.give(unit)  # the wait ends the run, as a command list's does

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
        other = self.claims.others_hold_any()
        if other is not None:  # a reset would stop someone else's run
            raise self.claims.busy(other, other, "a device reset")
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
        except (DeviceLost, ClientGone) as exc:
            return f"client gone: {exc}"
        finally:
            self._transport = None

