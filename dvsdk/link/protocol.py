"""The dvlink wire format, shared by :mod:`dvsdk.link.client` and :mod:`dvsdk.link.agent`.

Everything binary is described once, in ``firmware_spec/link.yaml``: the frame
header, the message codes and every payload layout.  This module loads that file
and provides

* :class:`Layout` / :class:`Message` -- payload encode/decode from the YAML tables;
* :func:`encode_frame` / :func:`decode_frame` and :class:`Deframer` -- SLIP
  framing with a CRC-32 trailer (``firmware_spec/link.md`` §2);
* :func:`error_payload` / :func:`error_from_payload` -- carrying a
  :mod:`dvsdk.errors` exception across the link with its class and fields;
* the byte transports of :mod:`dvsdk.link.transport` (pyserial, pty file
  descriptors, sockets, in-memory pipes, fault injection), re-exported here.
"""

from __future__ import annotations

import builtins
import json
import struct
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import errors
from ..errors import DeviceError, DvsdkError, InvalidArgument, LinkError, SpecError

# ---------------------------------------------------------------------------------------------
# The spec file
# ---------------------------------------------------------------------------------------------


def _spec_text() -> str:
    from ..hw.spec import spec_files

    path = spec_files() / "link.yaml"
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read {path}: {exc}", field="link.yaml") from None


def load_spec(text: str | None = None) -> dict[str, Any]:
    """Parse link.yaml (or ``text``) and check the parts the code relies on."""
    import yaml

    spec = yaml.safe_load(text if text is not None else _spec_text())
    for key in ("version", "framing", "crc", "header", "flags", "limits", "units", "types",
                "messages", "error", "sync", "buffer_flags", "reliability", "auth", "agent"):
        if key not in spec:
            raise SpecError("link.yaml lacks a section", field=key)
    codes = [m["code"] for m in spec["messages"].values()]
    if len(set(codes)) != len(codes):
        raise SpecError("link.yaml has duplicate message codes", field="messages.code")
    return spec


SPEC: dict[str, Any] = load_spec()
VERSION: int = int(SPEC["version"])
UNITS: tuple[str, ...] = tuple(SPEC["units"])
LIMITS: dict[str, int] = {k: int(v) for k, v in SPEC["limits"].items()}
FLAG_RESPONSE: int = int(SPEC["flags"]["response"])
FLAG_ERROR: int = int(SPEC["flags"]["error"])
SYNC_FOR_DEVICE: int = int(SPEC["sync"]["for_device"])
SYNC_FOR_CPU: int = int(SPEC["sync"]["for_cpu"])
BUF_CHECKS_READS: int = int(SPEC["buffer_flags"]["checks_reads"])
BUF_TRACKS_WRITES: int = int(SPEC["buffer_flags"]["tracks_writes"])
BUF_ZEROED: int = int(SPEC["buffer_flags"]["zeroed"])
#: the client's retransmission and frame-sizing parameters (link.md §4)
RELIABILITY: dict[str, float] = {k: float(v) for k, v in SPEC["reliability"].items()}
#: authentication parameters (link.md §5)
AUTH: dict[str, Any] = dict(SPEC["auth"])
#: the agent's session limits (link.md §9)
AGENT_LIMITS: dict[str, float] = {k: float(v) for k, v in SPEC["agent"].items()}

_ORDER = {"little": "<", "big": ">"}
_FRAMING = SPEC["framing"]
END = bytes([_FRAMING["end"]])
ESC = bytes([_FRAMING["esc"]])
_ESC_END = ESC + bytes([_FRAMING["esc_end"]])
_ESC_ESC = ESC + bytes([_FRAMING["esc_esc"]])
CRC_SIZE: int = int(SPEC["crc"]["size"])
_CRC_ORDER: str = SPEC["crc"]["byteorder"]


# ---------------------------------------------------------------------------------------------
# Payload layouts
# ---------------------------------------------------------------------------------------------


class Layout:
    """A payload layout: fixed-size fields packed with ``struct``, then one optional tail."""

    def __init__(self, fields: list[dict[str, str]], byteorder: str = "<") -> None:
        types = SPEC["types"]
        codes = []
        self.names: list[str] = []
        self.kinds: list[str] = []
        self.sizes: dict[str, int] = {}  # fixed-size byte fields
        self.tail: tuple[str, str] | None = None
        for i, f in enumerate(fields):
            kind = f["type"]
            if kind not in types:
                raise SpecError("unknown field type in link.yaml", field=f["name"], value=kind)
            if types[kind].get("tail"):
                if i != len(fields) - 1:
                    raise SpecError("tail field must be last", field=f["name"], value=kind)
                self.tail = (f["name"], kind)
            else:
                codes.append(types[kind]["struct"])
                self.names.append(f["name"])
                self.kinds.append(kind)
                if "size" in types[kind]:
                    self.sizes[f["name"]] = int(types[kind]["size"])
        self.struct = struct.Struct(byteorder + "".join(codes))

    def pack(self, values: dict[str, Any]) -> bytes:
        """Encode ``values`` (a dict with every field name)."""
        fixed = []
        for name, kind in zip(self.names, self.kinds, strict=True):
            v = values[name]
            if kind == "unit":
                if v not in UNITS:
                    raise InvalidArgument("unknown register unit", field="unit", value=v,
                                          limit=UNITS)
                v = UNITS.index(v)
            elif name in self.sizes and len(v) != self.sizes[name]:
                raise InvalidArgument("fixed-size field has the wrong length", field=name,
                                      value=len(v), limit=self.sizes[name])
            fixed.append(v)
        try:
            head = self.struct.pack(*fixed)
        except struct.error as exc:
            raise InvalidArgument(f"value does not fit the link encoding: {exc}",
                                  field=",".join(self.names), value=tuple(fixed)) from None
        if self.tail is None:
            return head
        name, kind = self.tail
        v = values[name]
        if kind == "str":
            tail = str(v).encode("utf-8")
        elif kind == "json":
            tail = encode_json(v)
        else:
            tail = v
        return head + tail

    def unpack(self, data: bytes | memoryview) -> dict[str, Any]:
        """Decode a payload; :class:`LinkError` if it does not match the layout."""
        n = self.struct.size
        if len(data) < n or (self.tail is None and len(data) != n):
            raise LinkError("payload does not match its layout", field="length",
                            value=len(data), limit=n)
        out: dict[str, Any] = {}
        for name, kind, v in zip(self.names, self.kinds, self.struct.unpack_from(data),
                                 strict=True):
            if kind == "unit":
                if v >= len(UNITS):
                    raise InvalidArgument("unknown register unit", field="unit", value=v,
                                          limit=UNITS)
                v = UNITS[v]
            out[name] = v
        if self.tail is not None:
            name, kind = self.tail
            rest = data[n:]
            try:
                if kind == "str":
                    out[name] = bytes(rest).decode("utf-8")
                elif kind == "json":
                    out[name] = json.loads(bytes(rest).decode("utf-8"))
                else:
                    out[name] = rest
            except (UnicodeDecodeError, ValueError) as exc:
                raise LinkError(f"bad {kind} field in payload: {exc}", field=name) from None
        return out


@dataclass(frozen=True)
class Message:
    """One message type of link.yaml: its code and both payload layouts."""

    name: str
    code: int
    request: Layout
    response: Layout


MESSAGES: dict[str, Message] = {}
BY_CODE: dict[int, Message] = {}
for _name, _m in SPEC["messages"].items():
    _msg = Message(_name, int(_m["code"]), Layout(_m["request"]), Layout(_m["response"]))
    MESSAGES[_name] = _msg
    BY_CODE[_msg.code] = _msg
ERROR_LAYOUT = Layout(SPEC["error"])


# ---------------------------------------------------------------------------------------------
# Frames
# ---------------------------------------------------------------------------------------------


def _header_struct() -> tuple[struct.Struct, list[str]]:
    hdr = SPEC["header"]
    names = [f["name"] for f in hdr["fields"]]
    need = {"version", "code", "flags", "seq", "length"}
    if not need <= set(names):
        raise SpecError("link.yaml header lacks fields", field="header",
                        value=sorted(need - set(names)))
    fmt = _ORDER[hdr["byteorder"]] + "".join(SPEC["types"][f["type"]]["struct"]
                                             for f in hdr["fields"])
    return struct.Struct(fmt), names


HEADER, _HEADER_NAMES = _header_struct()
#: bytes added to a payload before stuffing: header and CRC.
FRAME_OVERHEAD = HEADER.size + CRC_SIZE


class FrameError(LinkError):
    """A frame failed its CRC, length or header check (line noise)."""


@dataclass
class Frame:
    """A decoded frame: header fields and the raw payload."""

    code: int
    seq: int
    payload: bytes = b""
    flags: int = 0
    version: int = VERSION
    crc: int = 0

    @property
    def message(self) -> Message | None:
        """The message type of ``code``, or None if unknown."""
        return BY_CODE.get(self.code)

    @property
    def is_response(self) -> bool:
        """Sent by the agent."""
        return bool(self.flags & FLAG_RESPONSE)

    @property
    def is_error(self) -> bool:
        """The payload is the error layout."""
        return bool(self.flags & FLAG_ERROR)


def slip_escape(body: bytes) -> bytes:
    """RFC 1055 byte stuffing (ESC first, then END)."""
    return body.replace(ESC, _ESC_ESC).replace(END, _ESC_END)


def slip_unescape(body: bytes) -> bytes:
    """Undo :func:`slip_escape`.  Every ESC in a valid stream starts an escape pair."""
    return body.replace(_ESC_END, END).replace(_ESC_ESC, ESC)


def encode_frame(code: int, seq: int, payload: Any = b"", flags: int = 0,
                 version: int = VERSION) -> bytes:
    """Header + payload + CRC-32, SLIP-stuffed and delimited: ready to write."""
    values = {"version": version, "code": code, "flags": flags, "reserved": 0,
              "seq": seq & 0xFFFFFFFF, "length": len(payload)}
    body = HEADER.pack(*(values.get(n, 0) for n in _HEADER_NAMES)) + payload
    body += zlib.crc32(body).to_bytes(CRC_SIZE, _CRC_ORDER)
    return END + slip_escape(body) + END


def decode_frame(raw: bytes) -> Frame:
    """Unstuffed frame body -> :class:`Frame`; :class:`FrameError` on any damage."""
    if ESC in raw:  # a bad escape is left as is and fails the CRC
        raw = slip_unescape(raw)
    if len(raw) < FRAME_OVERHEAD:
        raise FrameError("frame too short", field="length", value=len(raw),
                         limit=FRAME_OVERHEAD)
    crc = int.from_bytes(raw[-CRC_SIZE:], _CRC_ORDER)
    if zlib.crc32(memoryview(raw)[:-CRC_SIZE]) != crc:
        raise FrameError("CRC mismatch", field="crc", value=crc)
    h = dict(zip(_HEADER_NAMES, HEADER.unpack_from(raw), strict=True))
    payload = raw[HEADER.size:-CRC_SIZE]
    if h["length"] != len(payload):
        raise FrameError("payload length mismatch", field="length", value=h["length"],
                         limit=len(payload))
    return Frame(h["code"], h["seq"], bytes(payload), h["flags"], h["version"], crc)


class Deframer:
    """Splits a byte stream at END delimiters into stuffed frame bodies.

    A run of more than ``max_frame`` bytes without a delimiter is discarded and
    reported as one undecodable item (``b"!"``), so it takes the same path as
    any other damaged frame.
    """

    OVERFLOW = b"!"

    def __init__(self, max_frame: int) -> None:
        self.max_frame = int(max_frame)
        self._buf = bytearray()
        self._overflow = False

    def feed(self, data: bytes) -> list[bytes]:
        """Add received bytes; return the complete frame bodies (still stuffed)."""
        if not data:
            return []
        if END not in data:
            if not self._overflow:
                self._buf += data
                if len(self._buf) > self.max_frame:
                    self._buf.clear()
                    self._overflow = True
            return []
        self._buf += data
        parts = self._buf.split(END)
        self._buf = parts.pop()
        out = [bytes(p) for p in parts if p]
        if self._overflow:
            self._overflow = False
            out = [self.OVERFLOW, *out[1:]] if parts and parts[0] else [self.OVERFLOW, *out]
        return out


    def leftover(self) -> bytes:
        """The bytes of an unfinished frame held so far (to hand a stream over)."""
        return b"" if self._overflow else bytes(self._buf)


def max_frame_bytes(max_payload: int) -> int:
    """Worst-case stuffed size of a frame with ``max_payload`` bytes of payload."""
    return 2 * (max_payload + FRAME_OVERHEAD) + 2


# ---------------------------------------------------------------------------------------------
# Errors across the link
# ---------------------------------------------------------------------------------------------

_BUILTIN_ERRORS = ("ValueError", "TypeError", "KeyError", "IndexError", "RuntimeError",
                   "NotImplementedError", "OverflowError", "ZeroDivisionError")


def encode_json(value: Any) -> bytes:
    """A ``json`` field's bytes (UTF-8, compact), as :class:`Layout` writes it."""
    return json.dumps(value, default=_json_default, separators=(",", ":")).encode("utf-8")


def decode_json(data: bytes | memoryview, field: str) -> Any:
    """The document in ``data``; LinkError if it is not UTF-8 JSON."""
    try:
        return json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise LinkError(f"bad json field in payload: {exc}", field=field) from None


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=repr)
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj).hex()
    return repr(obj)


def error_payload(exc: BaseException) -> bytes:
    """Encode an exception raised by the served device for an error response."""
    attrs = {k: v for k, v in vars(exc).items() if not k.startswith("_")}
    doc = {"type": type(exc).__name__, "text": str(exc), "attrs": attrs}
    if not isinstance(exc, DvsdkError):
        doc["module"] = type(exc).__module__
    return ERROR_LAYOUT.pack({"error": doc})


def error_from_payload(payload: bytes) -> Exception:
    """Rebuild the agent's exception: same :mod:`dvsdk.errors` class, text and fields."""
    doc = ERROR_LAYOUT.unpack(payload)["error"]
    name = str(doc.get("type", ""))
    text = str(doc.get("text", ""))
    cls = getattr(errors, name, None)
    if isinstance(cls, type) and issubclass(cls, DvsdkError):
        exc = cls.__new__(cls)
        exc.args = (text,)
        exc.__dict__.update(doc.get("attrs") or {})
        return exc
    if name in _BUILTIN_ERRORS:
        return getattr(builtins, name)(text)
    return DeviceError(f"agent raised {name}: {text}", field="agent")


__all__ = [
    "BY_CODE", "END", "ESC", "FLAG_ERROR", "FLAG_RESPONSE", "HEADER", "LIMITS", "MESSAGES",
    "SPEC", "UNITS", "VERSION", "Deframer", "Frame", "FrameError", "Layout", "Message",
    "decode_frame", "encode_frame", "error_from_payload", "error_payload", "load_spec",
    "max_frame_bytes",
]
