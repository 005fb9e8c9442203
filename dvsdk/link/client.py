"""The hardware-in-the-loop backend: a :class:`Device` served by ``dvsdk-agent``.

URLs (pyserial's ``serial_for_url`` does the byte transport)::

    serial:///dev/ttyUSB0?baud=921600   a serial port or pty (``baud`` default 115200)
    socket://HOST:PORT                  TCP (pyserial's socket:// handler)
    rfc2217://HOST:PORT                 a telnet COM-port server
    loop://?device=sim://               an in-process agent serving ``device`` (default
                                        sim://) through an in-memory pipe: zero setup

Link options, stripped before the URL reaches pyserial: ``timeout`` (seconds
per attempt, default 1.0), ``retries`` (default 5), ``window`` (memory chunks in
flight, default 8), ``max_payload`` (bytes per frame, default 65536) and
``inject`` (fault injection on what this side sends, see
:class:`~dvsdk.link.protocol.FaultSpec`).

DMA buffers keep a local shadow of the CPU mapping: ``view`` is that shadow.
:meth:`DmaBuffer.sync_for_device` pushes the range to the agent and then syncs
it there; :meth:`DmaBuffer.sync_for_cpu` syncs there and pulls the range back.
That is exactly the cache model of the device seam, so code that syncs
correctly on the hardware behaves identically over the link.
"""

from __future__ import annotations

import collections
import os
import secrets
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import numpy as np

from ..driver.device import Device, DeviceInfo, DmaBuffer, parse_url
from ..errors import DeviceLost, DeviceNotFound, InvalidArgument, InvalidURL, LinkError
from . import protocol as lp
from .transport import FaultSpec, FaultyTransport, PipeTransport, SerialTransport, Transport

_U32 = 0xFFFFFFFF
_CORRUPT = object()
_TIMEOUT = object()
#: upper bound on a single wait, so an infinite irq timeout stays a finite deadline
_MAX_WAIT = 1e6
#: query options pyserial's URL handlers understand (``timeout`` is always ours)
_PYSERIAL_OPTIONS = {"socket": {"logging"},
                     "rfc2217": {"logging", "ign_set_control", "poll_modem"}}
#: changed byte runs closer than this are pushed as one
_GAP = 64


def _start_registers() -> frozenset[tuple[str, int]]:
    """(unit, offset) of every register whose write lets a unit run (firmware_spec)."""
    try:
        from ..hw.spec import SPEC

        return frozenset((u, SPEC.reg(u, SPEC.unit(u)["start"])) for u in lp.UNITS)
    except Exception:  # no register spec: nothing is mirrored before a kick
        return frozenset()


@dataclass
class _Pending:
    index: int
    msg: lp.Message
    frame: bytes
    deadline: float  # next resend
    expires: float  # the agent may legitimately take until then (wait_irq)
    retry_timeout: float
    send_id: int = 0
    attempts: int = 0
    fast: int = 0
    probes: int = 0


class LinkDmaBuffer(DmaBuffer):
    """A remote DMA buffer; ``view`` is the local shadow of the CPU mapping.

    ``_snap`` holds what the agent's CPU mapping is known to contain where
    ``_known`` is set, so a push sends only the bytes the CPU changed (plus,
    for :meth:`sync_for_device`, bytes never exchanged yet).
    """

    def __init__(self, device: LinkDevice, handle: int, phys: int, size: int, name: str,
                 flags: int) -> None:
        super().__init__(device, phys, np.zeros(size, np.uint8), name)
        self.handle = handle
        self.remote_flags = flags
        self._snap = np.zeros(size, np.uint8)
        self._known = np.zeros(size, bool)
        self._written = np.zeros(size, bool)  # stored by write() since the last push

    @property
    def _link(self) -> LinkDevice:
        assert isinstance(self.device, LinkDevice)
        return self.device

    def _runs(self, offset: int, nbytes: int, unknown_too: bool) -> list[tuple[int, int]]:
        """Byte ranges of ``[offset, offset+nbytes)`` the agent does not hold yet."""
        sl = slice(offset, offset + nbytes)
        need = (self.view[sl] != self._snap[sl]) | self._written[sl]
        if unknown_too:
            need |= ~self._known[sl]
        if need.all():
            return [(offset, offset + nbytes)]
        if not need.any():
            return []
        change = np.flatnonzero(need[1:] != need[:-1]) + 1
        edges = np.concatenate(([0] if need[0] else [], change, [need.size] if need[-1] else []))
        starts, ends = edges[0::2].astype(np.int64), edges[1::2].astype(np.int64)
        if starts.size > 1:  # a gap shorter than a frame header is cheaper to resend
            keep = (starts[1:] - ends[:-1]) >= _GAP
            starts = np.concatenate((starts[:1], starts[1:][keep]))
            ends = np.concatenate((ends[:-1][keep], ends[-1:]))
        return [(offset + int(a), offset + int(b)) for a, b in zip(starts, ends, strict=True)]

    def _push(self, offset: int, nbytes: int, unknown_too: bool = True) -> None:
        runs = self._runs(offset, nbytes, unknown_too)
        if runs:
            self._link._mem_write(self.handle, self.view, runs)
            for a, b in runs:
                self._snap[a:b] = self.view[a:b]
                self._known[a:b] = True
                self._written[a:b] = False

    def write(self, offset: int, data: Any) -> None:
        """Copy into the shadow and remember the span as stored: it reaches the agent, in
        coalesced runs, at the next sync or before the next kick (a store dirties its
        bytes whatever the value, as in a cache, so rewriting a stale value counts)."""
        super().write(offset, data)
        if self.remote_flags & lp.BUF_TRACKS_WRITES:
            n = memoryview(np.ascontiguousarray(data)).nbytes
            self._written[offset : offset + n] = True

    def _sync_for_device(self, offset: int, nbytes: int) -> None:
        self._push(offset, nbytes)
        self._link._sync(self.handle, lp.SYNC_FOR_DEVICE, offset, nbytes)

    def _sync_for_cpu(self, offset: int, nbytes: int) -> None:
        # CPU writes the agent has not seen go out first (what a dirty line would do),
        # then the agent invalidates and we reload the range.
        self._push(offset, nbytes, unknown_too=False)
        self._link._sync(self.handle, lp.SYNC_FOR_CPU, offset, nbytes)
        sl = slice(offset, offset + nbytes)
        self._link._mem_read(self.handle, offset, self.view[sl])
        self._snap[sl] = self.view[sl]
        self._known[sl] = True

    def _check_cpu_read(self, offset: int, nbytes: int) -> None:
        if self.remote_flags & lp.BUF_CHECKS_READS and nbytes:
            self._link._call("CHECK_READ", handle=self.handle, offset=offset, nbytes=nbytes)

    def _free(self) -> None:
        self._link._free_handle(self.handle)


class LinkDevice(Device):
    """A :class:`Device` whose every call is a dvlink request to an agent.

    Requests carry sequence numbers and are retried on corruption or timeout;
    the agent answers a retry from its replay cache, so nothing runs twice.
    When the link dies (EOF, reset, no answer after ``retries``) every call
    raises :class:`~dvsdk.errors.DeviceLost`.
    """

    def __init__(self, transport: Transport, *, url: str = "", timeout: float = 1.0,
                 retries: int = 5, window: int = 8,
                 max_payload: int = lp.LIMITS["max_payload"], baud: int | None = None,
                 on_close: Callable[[], None] | None = None) -> None:
        self.url = url or f"link:{transport.name}"
        self.transport = transport
        self.timeout = float(timeout)
        self.retries = int(retries)
        self.window = max(1, int(window))
        self.byte_time = 10.0 / baud if baud else 0.0
        self.on_close = on_close
        self.stats: collections.Counter[str] = collections.Counter()
        self._lock = threading.RLock()
        self._events: collections.deque[Any] = collections.deque()
        self._deframer = lp.Deframer(lp.max_frame_bytes(lp.LIMITS["max_payload"]))
        self._seq = secrets.randbelow(1 << 32)
        self._send_id = 0
        self._closed = False
        self._dead: DeviceLost | None = None
        self.caps: dict[str, Any] = {}
        self._live: weakref.WeakValueDictionary[int, LinkDmaBuffer] = (
            weakref.WeakValueDictionary())
        self._kick_regs = _start_registers()
        self.max_payload = max(lp.LIMITS["min_payload"], min(int(max_payload),
                                                             lp.LIMITS["max_payload"]))
        self._hello()

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def from_url(cls, url: str) -> LinkDevice:
        """Open ``serial://``, ``socket://``, ``rfc2217://`` or ``loop://``."""
        p = parse_url(url)
        kw: dict[str, Any] = {
            "timeout": p.pop_float("timeout", 1.0, lo=0.001),
            "retries": p.pop_int("retries", 5, 0, 1000),
            "window": p.pop_int("window", 8, 1, lp.LIMITS["replay_cache"] // 4),
            "max_payload": p.pop_int("max_payload", lp.LIMITS["max_payload"],
                                     lp.LIMITS["min_payload"], lp.LIMITS["max_payload"]),
        }
        try:
            inject = FaultSpec.parse(p.pop_str("inject", ""))
        except InvalidArgument as exc:
            raise InvalidURL(exc.message, field=exc.field, value=exc.value,
                             limit=exc.limit) from None
        if p.scheme == "loop":
            from ..driver.device import open_device

            target = p.pop_str("device", "sim://")
            p.reject_unknown()
            device = open_device(target)
            return cls.loopback(device, inject=inject, owns_device=True, url=url, **kw)
        import serial

        if p.scheme == "serial":
            port = p.netloc + p.path
            explicit = "baud" in p.options
            baud = p.pop_int("baud", 115200, 1)
            kw["baud"] = baud if explicit else None
            p.reject_unknown()
            opener: Callable[[], Any] = lambda: serial.serial_for_url(  # noqa: E731
                port, baudrate=baud, timeout=0)
        else:  # socket:// and rfc2217://: the rest of the query is pyserial's
            for key in p.options:
                if key not in _PYSERIAL_OPTIONS[p.scheme]:
                    raise InvalidURL(f"unknown option for {p.scheme}://", field=key,
                                     value=p.options[key],
                                     limit=sorted(_PYSERIAL_OPTIONS[p.scheme]))
            query = urlencode(p.options)
            target = f"{p.scheme}://{p.netloc}{p.path}" + (f"?{query}" if query else "")
            opener = lambda: serial.serial_for_url(target, timeout=0)  # noqa: E731
        try:
            ser = opener()
        except (serial.SerialException, OSError, ValueError) as exc:
            raise DeviceNotFound(f"cannot open link: {exc}", field="url", value=url) from None
        transport: Transport = SerialTransport(ser, url)
        if inject:
            transport = FaultyTransport(transport, inject)
        return cls._connect(transport, url, kw)

    @classmethod
    def _connect(cls, transport: Transport, url: str, kw: dict[str, Any],
                 on_close: Callable[[], None] | None = None) -> LinkDevice:
        try:
            return cls(transport, url=url, on_close=on_close, **kw)
        except DeviceLost as exc:
            transport.close()
            if on_close:
                on_close()
            raise DeviceNotFound(f"no agent answered at {url}: {exc.message}", field="url",
                                 value=url) from None
        except BaseException:
            transport.close()
            if on_close:
                on_close()
            raise

    @classmethod
    def loopback(cls, device: Device, *, inject: FaultSpec | None = None,
                 owns_device: bool = False, url: str = "loop://", **kw: Any) -> LinkDevice:
        """Serve ``device`` from an in-process agent thread over an in-memory pipe.

        ``inject`` damages both directions (the agent's side with seed+1).
        """
        from .agent import LinkServer

        client_end, agent_end = PipeTransport.pair()
        server = LinkServer(device)
        stop = threading.Event()
        agent_t: Transport = agent_end
        client_t: Transport = client_end
        if inject:
            agent_t = FaultyTransport(agent_end, inject, seed=inject.seed + 1)
            client_t = FaultyTransport(client_end, inject, seed=inject.seed)
        thread = threading.Thread(target=server.serve, args=(agent_t, stop),
                                  name="dvlink-loop-agent", daemon=True)
        thread.start()

        def _shutdown() -> None:
            stop.set()
            agent_end.close()
            thread.join(5.0)
            server.end_session()
            if owns_device:
                device.close()

        dev = cls._connect(client_t, url, kw, on_close=_shutdown)
        dev.server = server  # type: ignore[attr-defined]
        return dev

    # -- the request engine ------------------------------------------------------------------
    def _check_usable(self) -> None:
        if self._dead is not None:
            raise DeviceLost(f"link to {self.url} is down: {self._dead.message}",
                             field="link", value=self.url)
        if self._closed:
            raise DeviceLost(f"link to {self.url} was closed", field="link", value=self.url)

    def _attempt_timeout(self, nbytes: int) -> float:
        """How long an answer may take: the link timeout plus wire time at ``baud``."""
        return self.timeout + nbytes * self.byte_time

    def _send(self, p: _Pending) -> None:
        self._send_id += 1
        p.send_id = self._send_id
        self.stats["frames_out"] += 1
        self.transport.write(p.frame)

    def _next_event(self, deadline: float) -> Any:
        while not self._events:
            left = deadline - time.monotonic()
            if left <= 0:
                return _TIMEOUT
            for raw in self._deframer.feed(self.transport.read(left)):
                try:
                    self._events.append(lp.decode_frame(raw))
                except lp.FrameError:
                    self._events.append(_CORRUPT)
        return self._events.popleft()

    def _exchange(self, requests: Sequence[tuple[str, dict[str, Any]]], *, extra_wait: float = 0.0,
                  resp_bytes: int = 0, window: int = 1) -> list[dict[str, Any]]:
        """Send requests (up to ``window`` in flight) and return their decoded responses."""
        with self._lock:
            self._check_usable()
            try:
                return self._exchange_locked(requests, extra_wait, resp_bytes, window)
            except DeviceLost as exc:
                self._dead = exc
                self.transport.close()
                raise

    def _exchange_locked(self, requests: Sequence[tuple[str, dict[str, Any]]],
                         extra_wait: float, resp_bytes: int,
                         window: int) -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = [{}] * len(requests)
        pending: dict[int, _Pending] = {}
        nxt = 0
        while nxt < len(requests) or pending:
            while nxt < len(requests) and len(pending) < window:
                name, fields = requests[nxt]
                msg = lp.MESSAGES[name]
                self._seq = (self._seq + 1) & _U32
                frame = lp.encode_frame(msg.code, self._seq, msg.request.pack(fields))
                retry = self._attempt_timeout(len(frame) + resp_bytes)
                now = time.monotonic()
                p = _Pending(nxt, msg, frame, now + retry,
                             now + retry + min(max(extra_wait, 0.0), _MAX_WAIT), retry)
                pending[self._seq] = p
                self._send(p)
                nxt += 1
            ev = self._next_event(min(p.deadline for p in pending.values()))
            if ev is _TIMEOUT:
                self._on_timeout(pending)
            elif ev is _CORRUPT or (isinstance(ev, lp.Frame) and ev.code == lp.MESSAGES[
                    "NAK"].code and ev.is_response):
                self.stats["corrupt" if ev is _CORRUPT else "naks"] += 1
                self._fast_resend(pending.values())
            else:
                p = pending.get(ev.seq) if ev.is_response else None
                if p is None or ev.code != p.msg.code:
                    self.stats["stale"] += 1
                    continue
                del pending[ev.seq]
                # Frames are answered in order: anything sent before this one is lost.
                self._fast_resend(q for q in pending.values() if q.send_id < p.send_id)
                if ev.is_error:
                    raise lp.error_from_payload(ev.payload)
                results[p.index] = p.msg.response.unpack(ev.payload)
        return results

    def _fast_resend(self, which: Any) -> None:
        for q in sorted(which, key=lambda q: q.send_id):
            if q.fast < 2 * self.retries + 2:
                q.fast += 1
                self.stats["fast_resends"] += 1
                self._send(q)

    def _on_timeout(self, pending: dict[int, _Pending]) -> None:
        now = time.monotonic()
        for q in sorted(pending.values(), key=lambda q: q.send_id):
            if q.deadline > now:
                continue
            if now < q.expires:
                # A long call (wait_irq) still running is fine, but its request or answer
                # may have been lost: ask again, which the replay cache makes harmless.
                q.probes += 1
                self.stats["probes"] += 1
                q.deadline = min(q.expires, now + self.timeout * min(2.0 ** q.probes, 8.0))
                self._send(q)
                continue
            q.attempts += 1
            self.stats["timeouts"] += 1
            if q.attempts > self.retries:
                raise DeviceLost(f"no answer from the agent at {self.url} to {q.msg.name} "
                                 f"after {self.retries} retries", field="link", value=self.url,
                                 limit=f"timeout={self.timeout}s")
            q.deadline = now + q.retry_timeout * min(1.5 ** q.attempts, 4.0)
            self._send(q)

    def _call(self, message: str, /, *, extra_wait: float = 0.0, **fields: Any) -> dict[str, Any]:
        return self._exchange([(message, fields)], extra_wait=extra_wait)[0]

    # -- handshake ---------------------------------------------------------------------------
    def _hello(self) -> None:
        resp = self._call("HELLO", version=lp.VERSION, max_payload=self.max_payload,
                          nonce=secrets.randbits(64), client=f"dvsdk pid {os.getpid()}")
        if resp["version"] != lp.VERSION:
            raise LinkError(f"protocol version mismatch: client speaks v{lp.VERSION}, "
                            f"agent speaks v{resp['version']}", field="version",
                            value=resp["version"], limit=lp.VERSION)
        self.caps = dict(resp["caps"])
        self.max_payload = min(self.max_payload, int(resp["max_payload"]))

    # -- memory transfers ----------------------------------------------------------------------
    @property
    def chunk(self) -> int:
        """Data bytes per MEM_WRITE/MEM_READ frame."""
        return self.max_payload - lp.MESSAGES["MEM_WRITE"].request.struct.size

    def _mem_write(self, handle: int, view: np.ndarray, runs: Sequence[tuple[int, int]]) -> None:
        """Send ``view[a:b]`` for every run, chunked, ``window`` frames in flight."""
        mv = memoryview(view).cast("B")
        step = self.chunk
        reqs = [("MEM_WRITE", {"handle": handle, "offset": i, "data": mv[i:min(i + step, b)]})
                for a, b in runs for i in range(a, b, step)]
        self._exchange(reqs, window=self.window)

    def _mem_read(self, handle: int, offset: int, out: np.ndarray) -> None:
        step = self.chunk
        n = out.size
        reqs = [("MEM_READ", {"handle": handle, "offset": offset + i,
                              "nbytes": min(step, n - i)}) for i in range(0, n, step)]
        for i, r in zip(range(0, n, step), self._exchange(reqs, window=self.window,
                                                          resp_bytes=step), strict=True):
            data = r["data"]
            want = min(step, n - i)
            if len(data) != want:
                raise LinkError("short MEM_READ answer", field="nbytes", value=len(data),
                                limit=want)
            out[i:i + want] = np.frombuffer(data, np.uint8)

    def _sync(self, handle: int, direction: int, offset: int, nbytes: int) -> None:
        self._call("SYNC", handle=handle, direction=direction, offset=offset, nbytes=nbytes)

    def _free_handle(self, handle: int) -> None:
        self._live.pop(handle, None)
        if self._closed or self._dead is not None:
            return  # the agent frees a session's buffers when it ends
        self._call("FREE", handle=handle)

    def _mirror_cpu_writes(self) -> None:
        """Before a kick: hand the agent every byte the CPU changed, synced or not.

        The device then sees exactly what it would see locally, including a
        missing ``sync_for_device`` (the simulator reports it).
        """
        for buf in list(self._live.values()):
            if not buf.freed:
                buf._push(0, buf.size, unknown_too=False)

    # -- the Device interface ----------------------------------------------------------------
    def read32(self, unit: str, offset: int) -> int:
        """READ32 on the agent's device."""
        if unit not in lp.UNITS:
            Device.check_reg(unit, 0)
        return int(self._call("READ32", unit=unit, offset=offset)["value"])

    def write32(self, unit: str, offset: int, value: int) -> None:
        """WRITE32; a write to a start register first mirrors the CPU's writes (link.md §7)."""
        if unit not in lp.UNITS:
            Device.check_reg(unit, 0)
        if (unit, offset) in self._kick_regs:
            self._mirror_cpu_writes()
        self._call("WRITE32", unit=unit, offset=offset, value=value)

    def alloc(self, nbytes: int, align: int = 64, name: str = "") -> DmaBuffer:
        """ALLOC on the agent; the result's ``view`` is a zeroed local shadow."""
        r = self._call("ALLOC", nbytes=nbytes, align=align, name=name)
        buf = LinkDmaBuffer(self, r["handle"], r["phys"], r["size"], r["name"] or name,
                            r["flags"])
        self._live[r["handle"]] = buf
        return buf

    def wait_irq(self, unit: str, timeout: float) -> None:
        """WAIT_IRQ; the agent's DeviceTimeout (with its registers) is raised here."""
        if unit not in lp.UNITS:
            Device.check_reg(unit, 0)
        self._call("WAIT_IRQ", unit=unit, timeout=float(timeout),
                   extra_wait=max(0.0, float(timeout)))

    def info(self) -> DeviceInfo:
        """The agent device's facts; ``backend`` is ``link:<remote backend>``."""
        d = dict(self._call("INFO")["info"])
        known = set(DeviceInfo.__dataclass_fields__)
        extra = dict(d.pop("extra", None) or {})
        extra.update({k: d.pop(k) for k in list(d) if k not in known})
        remote = d.get("backend", "")
        d["backend"] = f"link:{remote}"
        d["units"] = tuple(d.get("units") or ())
        extra["link"] = {"url": self.url, "remote_backend": remote, "agent": self.caps.get("agent"),
                         "max_payload": self.max_payload, "protocol": lp.VERSION}
        return DeviceInfo(**d, extra=extra)

    def reset(self) -> None:
        """RESET on the agent's device."""
        self._call("RESET")

    def ping(self, data: bytes = b"") -> bytes:
        """Echo ``data`` through the agent (link health and latency)."""
        return bytes(self._call("PING", data=data)["data"])

    def close(self) -> None:
        """Say BYE (the agent frees this session's buffers) and release the port."""
        with self._lock:
            if self._closed:
                return
            if self._dead is None:
                saved = self.retries
                self.retries = min(self.retries, 1)
                try:
                    self._call("BYE")
                except (DeviceLost, LinkError):
                    pass
                finally:
                    self.retries = saved
            self._closed = True
            self.transport.close()
            if self.on_close:
                self.on_close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "lost" if self._dead else "open"
        return f"<LinkDevice {self.url} {state}>"
