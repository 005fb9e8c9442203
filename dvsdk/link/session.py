"""The frame-level half of a dvlink session, shared by the agent's handshakes and its executor.

``firmware_spec/link.md`` §3-§5.  A :class:`Session` decodes a received frame,
answers a damaged one with ``NAK``, answers a repeated request from its replay
cache (keyed by sequence number and request CRC) so nothing runs twice, ignores
stale sequence numbers, and runs the handshake itself: ``HELLO`` opens a
session with a fresh challenge, ``AUTH`` checks the client's HMAC proof, and
until it succeeds nothing but ``HELLO``, ``AUTH`` and ``BYE`` is served.

:class:`~dvsdk.link.server.LinkServer` adds the device's messages; the agent's
TCP gatekeeper (:mod:`dvsdk.link.gatekeeper`) uses a bare :class:`Session` per
connection that has not authenticated yet, and hands it to the executor with
:meth:`Session.adopt` once it has.
"""

from __future__ import annotations

import collections
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from ..errors import AuthenticationError, DvsdkError, LinkError
from . import auth
from . import protocol as lp

_U32 = 0xFFFFFFFF
#: what an unauthenticated session may send
OPEN = frozenset({"HELLO", "AUTH", "BYE"})
#: how long a wrong AUTH proof waits for its answer (guessing is slow)
AUTH_FAILURE_DELAY = 0.2


def log(msg: str) -> None:
    """One line on the agent's stderr."""
    print(f"dvsdk-agent: {msg}", file=sys.stderr, flush=True)


def error_frame(code: int, seq: int, exc: BaseException) -> bytes:
    """An error response (link.md §8) to a request of ``code`` and ``seq``."""
    return lp.encode_frame(code, seq, lp.error_payload(exc), lp.FLAG_RESPONSE | lp.FLAG_ERROR)


class ClientGone(Exception):
    """The client vanished while the agent waited on its behalf."""


class Session:
    """Decodes frames, replays answers, runs HELLO/AUTH/BYE; subclasses add messages."""

    def __init__(self, *, secret: bytes | None = None,
                 max_payload: int = lp.LIMITS["max_payload"],
                 cache_size: int = lp.LIMITS["replay_cache"], verbose: bool = False) -> None:
        self.secret = secret
        self.max_payload = max(lp.LIMITS["min_payload"], min(max_payload,
                                                             lp.LIMITS["max_payload"]))
        self.cache_size = cache_size
        self.verbose = verbose
        self._cache: collections.OrderedDict[int, tuple[int, bytes]] = collections.OrderedDict()
        self._max_seq: int | None = None
        self.session: int | None = None
        self.authenticated = False
        self._challenge = b""
        self._ending: str | None = None  # set when the current connection should close
        self.peer = ""
        self.stats: collections.Counter[str] = collections.Counter()
        self._handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "BYE": self._bye, "AUTH": self._auth}

    # -- session state -------------------------------------------------------------------------
    def end_session(self) -> None:
        """Forget the session: its replies, its nonce, its authentication."""
        self._cache.clear()
        self._max_seq = None
        self.session = None
        self.authenticated = False

    def adopt(self, other: Session) -> None:
        """Take over ``other``'s session (the gatekeeper's handshake): its nonce, challenge,
        authentication and replay cache, so a resent HELLO or AUTH is still answered from
        the cache, never run again."""
        self.end_session()
        self._cache = collections.OrderedDict(other._cache)
        self._max_seq = other._max_seq
        self.session = other.session
        self.authenticated = other.authenticated
        self._challenge = other._challenge
        self.stats["sessions"] += 1

    # -- one frame ------------------------------------------------------------------------------
    def replay(self, frame: lp.Frame) -> bytes | None:
        """The cached answer if ``frame`` is a request already answered."""
        cached = self._cache.get(frame.seq)
        if cached is not None and cached[0] == frame.crc:
            self.stats["replayed"] += 1
            return cached[1]
        return None

    def handle(self, raw: bytes) -> bytes | None:
        """One received (stuffed) frame body -> the frame to send back, if any."""
        try:
            frame = lp.decode_frame(raw)
        except lp.FrameError as exc:
            self.stats["corrupt"] += 1
            return self._respond(lp.MESSAGES["NAK"], 0, {"reason": str(exc)})
        return self.handle_frame(frame)

    def handle_frame(self, frame: lp.Frame) -> bytes | None:
        """A decoded frame -> the frame to send back, if any (link.md §3-§5)."""
        if frame.is_response:
            self.stats["ignored"] += 1
            return None
        cached = self.replay(frame)
        if cached is not None:
            return cached
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
        elif msg is None:
            out = self._error(frame, LinkError("unknown message code", field="code",
                                               value=frame.code))
        elif self.session is None and msg.name != "BYE":
            out = self._error(frame, LinkError("no session: send HELLO first", field="code",
                                               value=msg.name))
        elif not self.authenticated and msg.name not in OPEN:
            out = self._error(frame, AuthenticationError(
                "this agent requires authentication: send AUTH first", field="code",
                value=msg.name))
        elif msg.name not in self._handlers:
            out = self._error(frame, LinkError("not a request", field="code", value=msg.name))
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
        except ClientGone:
            raise
        except DvsdkError as exc:
            return self._error(frame, exc)
        except Exception as exc:  # a backend bug must not kill the agent
            if self.verbose:
                traceback.print_exc()
            return self._error(frame, exc)

    # -- the handshake (link.md §5) ----------------------------------------------------------
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
            self._slow_down(AUTH_FAILURE_DELAY)
            raise AuthenticationError("the client's proof does not match the agent's secret",
                                      field="proof")
        self.authenticated = True
        return {"proof": auth.agent_proof(secret, a["challenge"], self._challenge)}

    def _slow_down(self, seconds: float) -> None:
        """Make guessing slow: sleep (one session at a time: nobody else waits).  The
        gatekeeper, which serves many handshakes in one thread, overrides this to hold the
        answer back instead."""
        time.sleep(seconds)

    def _bye(self, a: dict[str, Any]) -> dict[str, Any]:
        self.end_session()
        self._ending = "client said BYE"
        return {}
