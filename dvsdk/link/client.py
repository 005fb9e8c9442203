"""The hardware-in-the-loop backend: a :class:`Device` served by ``dvsdk-agent``.

URLs (``firmware_spec/link.md`` §1)::

    serial:///dev/ttyUSB0?baud=921600   a serial port or pty (pyserial; ``baud`` default 115200)
    socket://HOST:PORT                  TCP
    rfc2217://HOST:PORT                 a telnet COM-port server (pyserial)
    loop://?device=sim://               an in-process agent serving ``device`` (default
                                        sim://) through an in-memory pipe: zero setup

Link options: ``timeout`` (seconds per attempt and for the whole handshake,
default 1.0), ``retries`` (default 5), ``window`` (requests in flight, default
8), ``max_payload`` (bytes per frame, default 65536), ``secret_file`` (the
shared secret, else ``$DVSDK_LINK_SECRET_FILE`` / ``$DVSDK_LINK_SECRET``, else the
config folder's ``dvsdk/link-secret``, which a local agent creates) and
``inject`` (fault injection on what this side sends, see
:class:`~dvsdk.link.transport.FaultSpec`).

DMA buffers keep a local shadow of the CPU mapping: ``view`` is that shadow.
:meth:`DmaBuffer.sync_for_device` pushes the range to the agent and then syncs
it there; :meth:`DmaBuffer.sync_for_cpu` syncs there and pulls the range back.
That is exactly the cache model of the device seam, so code that syncs
correctly on the hardware behaves identically over the link.  Every call is
serialized on the connection, so a :class:`LinkDevice` may be shared by threads.
"""

from __future__ import annotations

import math
import os
import secrets
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import urlencode, urlsplit

import numpy as np

from ..driver.device import Device, DeviceInfo, DmaBuffer, parse_url
from ..errors import (
    AuthenticationError,
    DeviceLost,
    DeviceNotFound,
    InvalidArgument,
    InvalidURL,
    LinkError,
)
from . import auth
from . import protocol as lp
from .buffer import LinkDmaBuffer
from .engine import REL, Engine, Request
from .transport import (
    FaultSpec,
    FaultyTransport,
    PipeTransport,
    SerialTransport,
    SocketTransport,
    Transport,
)

#: query options pyserial's rfc2217:// handler understands
_RFC2217_OPTIONS = {"logging", "ign_set_control", "poll_modem"}

def _start_registers() -> frozenset[tuple[str, int]]:
    """(unit, offset) of every register whose write lets a unit run (firmware_spec)."""
    from ..hw.spec import SPEC

    return frozenset((u, SPEC.reg(u, SPEC.unit(u)["start"])) for u in lp.UNITS
                     if SPEC.unit(u).get("start"))


def check_timeout(timeout: Any) -> float:
    """A wait timeout in seconds: a number >= 0 (inf allowed), else InvalidArgument."""
    try:
        t = float(timeout)
    except (TypeError, ValueError):
        raise InvalidArgument("timeout is not a number", field="timeout", value=timeout,
                              limit=">= 0 seconds") from None
    if math.isnan(t) or t < 0:
        raise InvalidArgument("timeout must be a number of seconds >= 0", field="timeout",
                              value=t, limit=">= 0 seconds")
    return t


class LinkDevice(Device):
    """A :class:`Device` whose every call is a dvlink request to an agent.

    Requests carry sequence numbers and are retried on corruption or timeout
    (:mod:`dvsdk.link.engine`); the agent answers a retry from its replay cache,
    so nothing runs twice.  When the link dies (EOF, reset, no answer after
    ``retries``) every call raises :class:`~dvsdk.errors.DeviceLost`.
    """

    def __init__(self, transport: Transport, *, url: str = "", timeout: float = REL["timeout"],
                 retries: int = int(REL["retries"]), window: int = int(REL["window"]),
                 max_payload: int = lp.LIMITS["max_payload"], baud: int | None = None,
                 secret: bytes | None = None, insist: bool | None = None,
                 on_close: Callable[[], None] | None = None) -> None:
        self.url = url or f"link:{transport.name}"
        mp = max(lp.LIMITS["min_payload"], min(int(max_payload), lp.LIMITS["max_payload"]))
        self.engine = Engine(transport, self.url, float(timeout), int(retries),
                             max(1, int(window)), 10.0 / baud if baud else 0.0, mp)
        self.lock = self.engine.lock
        self.on_close = on_close
        self._secret = secret
        #: refuse an agent that does not authenticate (a secret configured for this link;
        #: not one merely found in the config folder)
        self._insist = secret is not None if insist is None else insist
        self._closed = False
        self.caps: dict[str, Any] = {}
        self._live: weakref.WeakValueDictionary[int, LinkDmaBuffer] = (
            weakref.WeakValueDictionary())
        self._kick_regs = _start_registers()
        self._kick: str | None = None
        self._hello()

    @property
    def kick(self) -> str:
        """The served device's kick protocol (its INFO; "r5" or "direct"): the client kicks
        conv streams through the link with register writes of that protocol."""
        if self._kick is None:
            self._kick = self.info().kick or "direct"
        return self._kick

    # -- views on the engine ---------------------------------------------------------------
    @property
    def transport(self) -> Transport:
        return self.engine.transport

    @property
    def stats(self) -> Any:
        """Counters: frames_out, timeouts, fast_resends, naks, corrupt, stale, probes, recut."""
        return self.engine.stats

    @property
    def timeout(self) -> float:
        return self.engine.timeout

    @timeout.setter
    def timeout(self, value: float) -> None:
        self.engine.timeout = float(value)

    @property
    def max_payload(self) -> int:
        return self.engine.max_payload

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def from_url(cls, url: str) -> LinkDevice:
        """Open ``serial://``, ``socket://``, ``rfc2217://`` or ``loop://``."""
        p = parse_url(url)
        kw: dict[str, Any] = {
            "timeout": p.pop_float("timeout", REL["timeout"], lo=0.001),
            "retries": p.pop_int("retries", int(REL["retries"]), 0, 1000),
            "window": p.pop_int("window", int(REL["window"]), 1, int(REL["window_max"])),
            "max_payload": p.pop_int("max_payload", lp.LIMITS["max_payload"],
                                     lp.LIMITS["min_payload"], lp.LIMITS["max_payload"]),
        }
        try:
            inject = FaultSpec.parse(p.pop_str("inject", ""))
            found = auth.find_secret(p.pop_str("secret_file", "") or None)
            kw["secret"], kw["insist"] = found.secret, found.explicit
        except InvalidArgument as exc:
            raise InvalidURL(exc.message, field=exc.field, value=exc.value,
                             limit=exc.limit) from None
        if p.scheme == "loop":
            from ..driver.device import open_device

            target = p.pop_str("device", "sim://")
            p.reject_unknown()
            device = open_device(target)
            return cls.loopback(device, inject=inject, owns_device=True, url=url, **kw)
        if p.scheme == "socket":
            p.reject_unknown()
            transport = cls._tcp(url, p.raw, kw["timeout"])
        else:
            transport = cls._pyserial(url, p, kw)
        if inject:
            transport = FaultyTransport(transport, inject)
        return cls._connect(transport, url, kw)

    @staticmethod
    def _tcp(url: str, raw: str, timeout: float) -> Transport:
        parts = urlsplit(raw)
        try:
            host, port = parts.hostname, parts.port
        except ValueError:
            host = port = None
        if not host or port is None:
            raise InvalidURL("socket:// needs HOST:PORT", field="url", value=url,
                             limit="socket://HOST:PORT")
        try:
            return SocketTransport.connect(host, port, timeout, name=f"{host}:{port}")
        except TimeoutError:
            raise DeviceNotFound(f"{host}:{port}: no answer to connect within {timeout:g} s",
                                 field="url", value=url) from None
        except OSError as exc:
            raise DeviceNotFound(f"cannot connect to {host}:{port}: {exc.strerror or exc}",
                                 field="url", value=url) from None

    @staticmethod
    def _pyserial(url: str, p: Any, kw: dict[str, Any]) -> Transport:
        import serial

        if p.scheme == "serial":
            port = p.netloc + p.path
            explicit = "baud" in p.options
            baud = p.pop_int("baud", 115200, 1)
            kw["baud"] = baud if explicit else None
            p.reject_unknown()
            opener: Callable[[], Any] = lambda: serial.serial_for_url(  # noqa: E731
                port, baudrate=baud, timeout=0)
        else:  # rfc2217://: the rest of the query is pyserial's
            for key in p.options:
                if key not in _RFC2217_OPTIONS:
                    raise InvalidURL(f"unknown option for {p.scheme}://", field=key,
                                     value=p.options[key], limit=sorted(_RFC2217_OPTIONS))
            query = urlencode(p.options)
            target = f"{p.scheme}://{p.netloc}{p.path}" + (f"?{query}" if query else "")
            opener = lambda: serial.serial_for_url(target, timeout=0)  # noqa: E731
        try:
            ser = opener()
        except (serial.SerialException, OSError, ValueError) as exc:
            raise DeviceNotFound(f"cannot open link: {exc}", field="url", value=url) from None
        return SerialTransport(ser, url)

    @classmethod
    def _connect(cls, transport: Transport, url: str, kw: dict[str, Any],
                 on_close: Callable[[], None] | None = None) -> LinkDevice:
        try:
            return cls(transport, url=url, on_close=on_close, **kw)
        except BaseException:
            transport.close()
            if on_close:
                on_close()
            raise

    @classmethod
    def loopback(cls, device: Device, *, inject: FaultSpec | None = None,
                 owns_device: bool = False, url: str = "loop://", **kw: Any) -> LinkDevice:
        """Serve ``device`` from an in-process agent thread over an in-memory pipe.

        ``inject`` damages both directions (the agent's side with seed+1).  The agent
        thread shares the client's secret, if any.
        """
        import threading

        from .server import LinkServer

        client_end, agent_end = PipeTransport.pair()
        server = LinkServer(device, secret=kw.get("secret"))
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

    # -- requests ------------------------------------------------------------------------------
    def _call(self, message: str, /, *, extra_wait: float = 0.0, **fields: Any) -> dict[str, Any]:
        with self.lock:
            self.engine.check_usable(self._closed)
            return self.engine.call(message, extra_wait=extra_wait, **fields)

    def _exchange(self, requests: Iterator[Request]) -> None:
        with self.lock:
            self.engine.check_usable(self._closed)
            self.engine.exchange(requests, window=self.engine.window)

    # -- handshake ---------------------------------------------------------------------------
    def _hello(self) -> None:
        eng = self.engine
        # The whole handshake takes at most `timeout` (plus wire time at a given baud);
        # a silent request is asked again every quarter of it.
        limit = eng._attempt_timeout(1024)
        deadline = time.monotonic() + limit
        nonce = secrets.randbits(64)
        try:
            resp = eng.call("HELLO", version=lp.VERSION, max_payload=eng.max_payload,
                            nonce=nonce, client=f"dvsdk pid {os.getpid()}", deadline=deadline,
                            attempt=limit / 4)
            if resp["version"] != lp.VERSION:
                raise LinkError(f"protocol version mismatch: client speaks v{lp.VERSION}, "
                                f"agent speaks v{resp['version']}", field="version",
                                value=resp["version"], limit=lp.VERSION)
            self._authenticate(resp, nonce, deadline, limit)
            self.caps = dict(eng.call("CAPS", deadline=deadline, attempt=limit / 4)["caps"])
        except DeviceLost as exc:
            raise DeviceNotFound(self._who_answered(exc), field="url", value=self.url) from None
        eng.max_payload = min(eng.max_payload, int(resp["max_payload"]))

    def _who_answered(self, exc: DeviceLost) -> str:
        """Why the handshake failed, naming the peer: what it sent, or its silence."""
        eng = self.engine
        peer = getattr(eng.transport, "inner", eng.transport).name
        raw = bytes(eng.raw_seen)
        if raw and not eng.frames_seen:
            line = raw.split(b"\n")[0].strip()
            text = line.decode("latin-1")
            shown = text if line.isascii() and text.isprintable() else raw.hex()
            return f"{peer} sent {shown[:48]!r}, which is not a dvsdk agent"
        if "closed" in exc.message:
            return f"{peer} closed the connection without a dvsdk agent's answer"
        return f"{peer}: no dvsdk agent answered within {eng.timeout:g} s"

    def _authenticate(self, hello: dict[str, Any], nonce: int, deadline: float,
                      limit: float) -> None:
        secret = self._secret
        if not hello["auth"]:
            if self._insist:
                raise AuthenticationError(
                    f"the agent at {self.url} does not authenticate, but a link secret is "
                    "configured: refusing to use it (start the agent with the same secret)",
                    field="auth", value=0)
            return
        if secret is None:
            raise AuthenticationError(
                f"the agent at {self.url} requires the shared link secret", field="auth",
                value=1, hint="copy the secret file the agent named when it started to "
                f"{auth.default_secret_path()} (mode 0600), add secret_file=PATH to the URL, "
                f"or set ${auth.ENV_SECRET_FILE} or ${auth.ENV_SECRET}")
        mine = auth.challenge()
        resp = self.engine.call("AUTH", proof=auth.client_proof(secret, hello["challenge"],
                                                                 mine, nonce),
                                challenge=mine, deadline=deadline, attempt=limit / 4)
        if not auth.same(resp["proof"], auth.agent_proof(secret, mine, hello["challenge"])):
            raise AuthenticationError(f"the agent at {self.url} could not prove it holds the "
                                      "link secret", field="proof")

    # -- memory transfers ----------------------------------------------------------------------
    def _write_req(self, handle: int, base: int, data: memoryview, i: int, n: int) -> Request:
        def split(size: int) -> list[Request]:
            return [self._write_req(handle, base, data, j, min(size, i + n - j))
                    for j in range(i, i + n, size)]

        return Request("MEM_WRITE", {"handle": handle, "offset": base + i,
                                     "data": data[i:i + n]}, split=split, data_bytes=n)

    def _mem_write(self, handle: int, copies: Sequence[tuple[int, np.ndarray]]) -> None:
        """Send each ``(offset, bytes)`` in frames of the engine's current chunk size."""

        def requests() -> Iterator[Request]:
            for base, arr in copies:
                data = memoryview(arr).cast("B")
                i = 0
                while i < len(data):
                    n = min(self.engine.chunk_bytes(), len(data) - i)
                    yield self._write_req(handle, base, data, i, n)
                    i += n

        self._exchange(requests())

    def _read_req(self, handle: int, offset: int, out: np.ndarray, i: int, n: int) -> Request:
        def done(r: dict[str, Any]) -> None:
            data = r["data"]
            if len(data) != n:
                raise LinkError("short MEM_READ answer", field="nbytes", value=len(data),
                                limit=n)
            out[i:i + n] = np.frombuffer(data, np.uint8)

        def split(size: int) -> list[Request]:
            return [self._read_req(handle, offset, out, j, min(size, i + n - j))
                    for j in range(i, i + n, size)]

        return Request("MEM_READ", {"handle": handle, "offset": offset + i, "nbytes": n}, done,
                       split, data_bytes=n, resp_bytes=n)

    def _mem_read(self, handle: int, offset: int, out: np.ndarray) -> None:
        def requests() -> Iterator[Request]:
            i = 0
            while i < out.size:
                n = min(self.engine.chunk_bytes(), out.size - i)
                yield self._read_req(handle, offset, out, i, n)
                i += n

        self._exchange(requests())

    def _sync(self, handle: int, direction: int, offset: int, nbytes: int) -> None:
        self._call("SYNC", handle=handle, direction=direction, offset=offset, nbytes=nbytes)

    def _free_handle(self, handle: int) -> None:
        with self.lock:
            self._live.pop(handle, None)
            if self._closed or self.engine.dead is not None:
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
        value = self.check_value(value)  # before it is packed as the wire's i64
        with self.lock:
            if (unit, offset) in self._kick_regs:
                self._mirror_cpu_writes()
            self._call("WRITE32", unit=unit, offset=offset, value=value)

    def alloc(self, nbytes: int, align: int = 64, name: str = "") -> DmaBuffer:
        """ALLOC on the agent; the result's ``view`` is a zeroed local shadow."""
        with self.lock:
            r = self._call("ALLOC", nbytes=nbytes, align=align, name=name)
            buf = LinkDmaBuffer(self, r["handle"], r["phys"], r["size"], r["name"] or name,
                                r["flags"])
            self._live[r["handle"]] = buf
            return buf

    def wait_irq(self, unit: str, timeout: float) -> None:
        """WAIT_IRQ; the agent's DeviceTimeout (with its registers) is raised here.  The
        agent caps the wait at its ``max_wait`` (``caps``); NaN or negative is refused."""
        if unit not in lp.UNITS:
            Device.check_reg(unit, 0)
        t = min(check_timeout(timeout), float(self.caps.get("max_wait", math.inf)))
        self._call("WAIT_IRQ", unit=unit, timeout=t, extra_wait=t)

    def _read_info(self) -> dict[str, Any]:
        """INFO's JSON document, read in chunks of the engine's chunk size (link.md §6), so
        a noisy line carries it as it carries memory (a resent chunk is cut smaller): the
        first chunk says how long the document is, the rest are pipelined."""
        head = lp.MESSAGES["INFO"].response.struct.size
        limit = lp.LIMITS["max_document"]
        eng = self.engine
        doc = bytearray()
        total: list[int] = []  # the document's length, once an answer said it

        def size() -> int:
            return max(1, min(eng.chunk_bytes(), eng.max_payload - head))

        def req(i: int, n: int) -> Request:
            def done(r: dict[str, Any]) -> None:
                t = int(r["total"])
                if not total:
                    if t > limit:
                        raise LinkError("the agent's INFO document is too large",
                                        field="total", value=t, limit=limit)
                    total.append(t)
                    doc.extend(bytes(t))
                want = max(0, min(n, t - i))
                if t != total[0] or len(r["data"]) != want:
                    raise LinkError("INFO chunk does not match its request", field="nbytes",
                                    value=len(r["data"]), limit=want)
                doc[i:i + want] = r["data"]
                eng.stats["info_chunks"] += 1

            def split(k: int) -> list[Request]:
                return [req(j, min(k, i + n - j)) for j in range(i, i + n, k)]

            return Request("INFO", {"offset": i, "nbytes": n}, done, split, data_bytes=n,
                           resp_bytes=n)

        with self.lock:
            self.engine.check_usable(self._closed)
            first = size()
            eng.exchange([req(0, first)])  # (offset 0: the agent takes a fresh copy)

            def rest() -> Iterator[Request]:
                i = first
                while i < total[0]:
                    n = min(size(), total[0] - i)
                    yield req(i, n)
                    i += n

            eng.exchange(rest(), window=eng.window)
        info = lp.decode_json(doc, "info")
        if not isinstance(info, dict):
            raise LinkError("the agent's INFO document is not an object", field="info",
                            value=type(info).__name__)
        return info

    def info(self) -> DeviceInfo:
        """The agent device's facts; ``backend`` is ``link:<remote backend>``."""
        d = dict(self._read_info())
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
        with self.lock:
            if self._closed:
                return
            eng = self.engine
            if eng.dead is None:
                saved = eng.retries
                eng.retries = min(eng.retries, 1)
                try:
                    eng.call("BYE")
                except (DeviceLost, LinkError):
                    pass
                finally:
                    eng.retries = saved
            self._closed = True
            self.transport.close()
            if self.on_close:
                self.on_close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "lost" if self.engine.dead else "open"
        return f"<LinkDevice {self.url} {state}>"
