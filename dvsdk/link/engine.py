"""The client half of dvlink's reliability: sequence numbers, resends, frame sizing.

``firmware_spec/link.md`` §3-§4.  Every request is answered by one response of
the same sequence number, in order; the agent answers a repeated request from
its replay cache.  So a request is its own acknowledgement unit, and
retransmission is selective: only what went missing is sent again.

* An answer that overtakes an earlier request proves that request (or its
  answer) lost: it is resent at once.
* A ``NAK`` (the agent got a damaged frame) or a frame we cannot decode
  implicates the oldest pending request: resent at once when it is the only one,
  else if its answer is still missing a round trip later (it may have been a
  damaged duplicate answer).
* Only the oldest pending request can be overdue (answers come in order): it is
  resent after ``srtt + 4·rttvar`` without an answer (RFC 6298), and counted as
  a timeout after ``timeout`` of silence; ``retries`` of those declare the link
  dead.
* Memory transfers are cut into frames of ``chunk`` data bytes, sized from the
  line's byte error rate ``p``, estimated as damaged frames (NAKs, frames that
  fail their CRC) per byte sent and received over the last ``noise_memory``
  frames.  A frame of ``n`` data bytes and ``h`` bytes of overhead per exchange
  gets through with probability ``(1-p)^(n+h)``; the useful fraction
  ``n/(n+h)·(1-p)^(n+h)`` is largest at ``n ≈ sqrt(h/p) - h/2``: the full payload
  on a clean line, ~190 bytes at 0.1 %, ~45 at 1 %.  A frame bigger than the
  current chunk is cut up again when it has to be resent.
"""

from __future__ import annotations

import collections
import math
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import DeviceLost
from . import protocol as lp
from .transport import Transport

_U32 = 0xFFFFFFFF
_CORRUPT = object()
_TIMEOUT = object()
#: upper bound on a single wait, so an infinite irq timeout stays a finite deadline
MAX_WAIT = 1e6
REL = lp.RELIABILITY
_DECAY = 1.0 - 1.0 / REL["noise_memory"]
#: bytes a transfer exchange costs besides its data: both frames' header, CRC and
#: delimiters, and MEM_WRITE's handle and offset
EXCHANGE_OVERHEAD = 2 * (lp.FRAME_OVERHEAD + 2) + lp.MESSAGES["MEM_WRITE"].request.struct.size


@dataclass
class Request:
    """One request to send: a message, its fields and what to do with the answer.

    ``split(n)`` (memory transfers) re-cuts the request into requests of at most
    ``n`` data bytes covering the same range; ``data_bytes`` is its data size.
    """

    name: str
    fields: dict[str, Any]
    on_reply: Callable[[dict[str, Any]], None] | None = None
    split: Callable[[int], list[Request]] | None = None
    data_bytes: int = 0
    resp_bytes: int = 0


@dataclass
class _Pending:
    req: Request
    msg: lp.Message
    seq: int
    frame: bytes
    deadline: float  # next resend
    expires: float  # the agent may legitimately take until then (wait_irq)
    retry_timeout: float
    send_id: int = 0
    attempts: int = 0
    fast: int = 0
    probes: int = 0
    sends: int = 0
    sent_at: float = 0.0
    quiet: int = 0  # resends because its answer was overdue
    suspect: float = math.inf  # resend then unless answered (overdue, or implicated by noise)


@dataclass
class Engine:
    """Sends requests over one transport and matches their answers (thread-safe)."""

    transport: Transport
    url: str
    timeout: float = REL["timeout"]
    retries: int = int(REL["retries"])
    window: int = int(REL["window"])
    byte_time: float = 0.0
    max_payload: int = lp.LIMITS["max_payload"]
    stats: collections.Counter[str] = field(default_factory=collections.Counter)
    lock: threading.RLock = field(default_factory=threading.RLock)

    def __post_init__(self) -> None:
        self._events: collections.deque[Any] = collections.deque()
        self._deframer = lp.Deframer(lp.max_frame_bytes(lp.LIMITS["max_payload"]))
        self._seq = secrets.randbelow(1 << 32)
        self._send_id = 0
        self.dead: DeviceLost | None = None
        self._rtt: float | None = None  # smoothed round trip of first-time answers ...
        self._rttvar = 0.0  # ... and its mean deviation (RFC 6298)
        self._noise_bytes = 0.0  # bytes sent and received, decayed per frame
        self._noise_errors = 0.0  # damaged frames, decayed alike
        #: the first bytes that arrived while nothing had decoded yet (handshake diagnostics)
        self.raw_seen = bytearray()
        self.frames_seen = 0

    # -- frame sizing --------------------------------------------------------------------
    @property
    def max_data(self) -> int:
        """Data bytes in the largest MEM_WRITE / MEM_READ frame."""
        return self.max_payload - lp.MESSAGES["MEM_WRITE"].request.struct.size

    @property
    def error_rate(self) -> float:
        """Estimated probability that a byte on the line is damaged."""
        return self._noise_errors / self._noise_bytes if self._noise_bytes else 0.0

    def chunk_bytes(self) -> int:
        """Data bytes per transfer frame now (link.md §4: sqrt(h/p) - h/2)."""
        p = self.error_rate
        if p <= 0.0:
            return self.max_data
        best = (EXCHANGE_OVERHEAD / p) ** 0.5 - EXCHANGE_OVERHEAD / 2
        return int(max(REL["min_chunk"], min(best, self.max_data)))

    def _observe(self, nbytes: int, damaged: bool = False) -> None:
        self._noise_bytes = self._noise_bytes * _DECAY + nbytes
        self._noise_errors = self._noise_errors * _DECAY + damaged

    def _in_flight(self) -> int:
        by_bytes = int(REL["window_bytes"]) // (self.chunk_bytes() + lp.FRAME_OVERHEAD)
        return max(self.window, min(int(REL["window_max"]), by_bytes))

    # -- transport ---------------------------------------------------------------------------
    def _send(self, p: _Pending) -> None:
        self._send_id += 1
        p.send_id = self._send_id
        p.sends += 1
        p.sent_at = time.monotonic()
        p.suspect = p.sent_at + self._rto(p)
        self.stats["frames_out"] += 1
        self._observe(len(p.frame))
        self.transport.write(p.frame)

    def _next_event(self, deadline: float) -> Any:
        while not self._events:
            left = deadline - time.monotonic()
            if left <= 0:
                return _TIMEOUT
            data = self.transport.read(left)
            if data and not self.frames_seen and len(self.raw_seen) < 64:
                self.raw_seen += data[:64 - len(self.raw_seen)]
            for raw in self._deframer.feed(data):
                try:
                    self._events.append(lp.decode_frame(raw))
                    self.frames_seen += 1
                    self._observe(len(raw) + 2)
                except lp.FrameError:
                    self._events.append(_CORRUPT)
                    self._observe(len(raw) + 2, damaged=True)
        return self._events.popleft()

    def _attempt_timeout(self, nbytes: int) -> float:
        """How long an answer may take: the link timeout plus wire time at ``baud``."""
        return self.timeout + nbytes * self.byte_time

    # -- exchanges -------------------------------------------------------------------------
    def check_usable(self, closed: bool) -> None:
        if self.dead is not None:
            raise DeviceLost(f"link to {self.url} is down: {self.dead.message}", field="link",
                             value=self.url)
        if closed:
            raise DeviceLost(f"link to {self.url} was closed", field="link", value=self.url)

    def exchange(self, requests: Iterable[Request], *, extra_wait: float = 0.0,
                 window: int = 1, deadline: float | None = None,
                 attempt: float | None = None) -> None:
        """Send ``requests`` (pulled lazily, up to ``window`` in flight; memory transfers may
        widen it) and hand each answer to its ``on_reply``.  An error answer is raised.
        ``deadline`` (monotonic) bounds the whole exchange; ``attempt`` overrides the
        time before a silent request is resent."""
        with self.lock:
            try:
                self._exchange(iter(requests), extra_wait, window, deadline, attempt)
            except DeviceLost as exc:
                self.dead = exc
                self.transport.close()
                raise

    def call(self, name: str, /, *, extra_wait: float = 0.0, deadline: float | None = None,
             attempt: float | None = None, **fields: Any) -> dict[str, Any]:
        """One request; its decoded answer."""
        out: list[dict[str, Any]] = []
        self.exchange([Request(name, fields, out.append)], extra_wait=extra_wait,
                      deadline=deadline, attempt=attempt)
        return out[0]

    def _new(self, req: Request, extra_wait: float, attempt: float | None) -> _Pending:
        msg = lp.MESSAGES[req.name]
        self._seq = (self._seq + 1) & _U32
        frame = lp.encode_frame(msg.code, self._seq, msg.request.pack(req.fields))
        retry = self._attempt_timeout(len(frame) + req.resp_bytes)
        if attempt is not None:
            retry = min(retry, attempt)
        now = time.monotonic()
        return _Pending(req, msg, self._seq, frame, now + retry,
                        now + retry + min(max(extra_wait, 0.0), MAX_WAIT), retry)

    def _exchange(self, source: Iterator[Request], extra_wait: float, window: int,
                  deadline: float | None, attempt: float | None) -> None:
        pending: dict[int, _Pending] = {}
        front: collections.deque[Request] = collections.deque()  # re-cut frames go first
        cache = lp.LIMITS["replay_cache"]
        exhausted = False
        while True:
            limit = window if window <= 1 else max(window, self._in_flight())
            while len(pending) < limit:
                oldest = min((p.seq for p in pending.values()), default=self._seq)
                if pending and (self._seq - oldest) & _U32 >= cache // 2:
                    break  # keep every pending request inside the agent's replay window
                if front:
                    req = front.popleft()
                elif not exhausted:
                    req = next(source, None)
                    if req is None:
                        exhausted = True
                        break
                else:
                    break
                p = self._new(req, extra_wait, attempt)
                pending[p.seq] = p
                self._send(p)
            if not pending:
                return
            wake = min(min(p.deadline, p.suspect) for p in pending.values())
            if deadline is not None:
                if time.monotonic() >= deadline:
                    raise DeviceLost(f"no answer within {self.timeout:g} s", field="link",
                                     value=self.url, limit=f"timeout={self.timeout:g}s")
                wake = min(wake, deadline)
            ev = self._next_event(wake)
            if ev is _TIMEOUT:
                self._on_timeout(pending, front)
            elif ev is _CORRUPT or (ev.code == lp.MESSAGES["NAK"].code and ev.is_response
                                    and ev.seq == 0):
                self.stats["corrupt" if ev is _CORRUPT else "naks"] += 1
                if ev is not _CORRUPT:
                    self._noise_errors += 1  # a request the agent received damaged
                # The agent answers in order, so the damage is most likely the oldest
                # request's, unless it was a duplicate answer: resend it if its answer
                # has not come a little later (a later answer resends it at once).
                oldest = min(pending.values(), key=lambda q: q.send_id)
                if len(pending) == 1:  # nothing else could be implicated
                    self._resend(oldest, pending, front, fast=True)
                elif oldest.suspect == math.inf:
                    oldest.suspect = time.monotonic() + self._quick()
            else:
                self._on_frame(ev, pending, front)

    def _on_frame(self, ev: lp.Frame, pending: dict[int, _Pending],
                  front: collections.deque[Request]) -> None:
        if ev.is_error and ev.seq == 0 and ev.code == lp.MESSAGES["BYE"].code:
            err = lp.error_from_payload(ev.payload)
            raise DeviceLost(getattr(err, "message", str(err)), field="link", value=self.url)
        p = pending.get(ev.seq) if ev.is_response else None
        if p is None or ev.code != p.msg.code:
            self.stats["stale"] += 1
            return
        del pending[ev.seq]
        now = time.monotonic()
        if p.sends == 1:
            rtt = now - p.sent_at
            if self._rtt is None:
                self._rtt, self._rttvar = rtt, rtt / 2
            else:
                self._rttvar += (abs(rtt - self._rtt) - self._rttvar) / 4
                self._rtt += (rtt - self._rtt) / 8
        for q in pending.values():  # the line moves: time out only on silence
            q.deadline = max(q.deadline, now + q.retry_timeout)
            q.suspect = max(q.suspect, now + self._rto(q))
        # Frames are answered in order: anything sent before this one is lost.
        for q in sorted((q for q in pending.values() if q.send_id < p.send_id),
                        key=lambda q: q.send_id):
            self._resend(q, pending, front, fast=True)
        if ev.is_error:
            raise lp.error_from_payload(ev.payload)
        reply = p.msg.response.unpack(ev.payload)
        if p.req.on_reply is not None:
            p.req.on_reply(reply)

    def _resend(self, q: _Pending, pending: dict[int, _Pending],
                front: collections.deque[Request], *, fast: bool) -> None:
        if q.req.data_bytes:
            if q.req.split is not None and q.req.data_bytes > self.chunk_bytes():
                # too big for this line: cut it up (the old sequence number is abandoned; a
                # late answer to it is stale, and rewriting or rereading bytes is harmless)
                del pending[q.seq]
                front.extendleft(reversed(q.req.split(self.chunk_bytes())))
                self.stats["recut"] += 1
                return
        if fast:
            if q.fast >= int(REL["fast_resends"]) * (self.retries + 1):
                return  # only timeouts resend it now
            q.fast += 1
            self.stats["fast_resends"] += 1
        self._send(q)

    def _quick(self) -> float:
        """How long to give an implicated request's answer before resending it."""
        if self._rtt is None:
            return self.timeout / 4
        return min(self.timeout / 2, max(0.002, self._rtt + 4 * self._rttvar))

    def _rto(self, p: _Pending) -> float:
        """When to resend a request nobody implicated, before its timeout: the measured
        round trip plus four deviations (RFC 6298), doubling per such resend.  Not for
        calls that may legitimately take long."""
        if self._rtt is None or p.expires > p.deadline:
            return math.inf
        return min(self.timeout / 2,
                   max(0.002, self._rtt + 4 * self._rttvar) * 2.0 ** min(p.quiet, 10))

    def _on_timeout(self, pending: dict[int, _Pending],
                    front: collections.deque[Request]) -> None:
        now = time.monotonic()
        order = sorted(pending.values(), key=lambda q: q.send_id)
        for q in order[1:]:
            # Answers come in order, so only the oldest request can be overdue; the rest
            # wait behind it (a later answer resends any it proves lost).
            if q.suspect <= now:
                q.suspect = now + self._rto(q)
            if q.deadline <= now and now >= q.expires:
                q.deadline = now + q.retry_timeout
        q = order[0]
        if q.suspect <= now < q.deadline:
            q.quiet += 1
            self._resend(q, pending, front, fast=True)
            return
        if q.deadline > now:
            return
        if now < q.expires:
            # A long call (wait_irq) still running is fine, but its request or answer
            # may have been lost: ask again, which the replay cache makes harmless.
            q.probes += 1
            self.stats["probes"] += 1
            q.deadline = min(q.expires, now + self.timeout * min(2.0 ** q.probes, 8.0))
            self._send(q)
            return
        q.attempts += 1
        self.stats["timeouts"] += 1
        if q.attempts > self.retries:
            raise DeviceLost(f"no answer from the agent at {self.url} to {q.msg.name} "
                             f"after {self.retries} retries", field="link", value=self.url,
                             limit=f"timeout={self.timeout}s")
        q.deadline = now + q.retry_timeout * min(REL["backoff"] ** q.attempts,
                                                 REL["backoff_max"])
        self._resend(q, pending, front, fast=False)
