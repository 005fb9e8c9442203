"""Recording what a device consumed and produced, kick by kick (``dvsdk-run --record``).

A :class:`Recorder` attached to a device (``device.recorder``) is told by every
:class:`~dvsdk.driver.cmdlist.CommandList` before it starts the unit and after the unit
completes.  For each exec it stores the commands (the list's own dataclasses, with buffers
as recorded buffer ids), the conv command stream the device fetched, the contents of every
DRAM range the kick reads (taken right before the kick) and writes (right after completion)
as :mod:`dvsdk.driver.streamwalk` works them out from the stream or the unit's register
program, the measured and predicted time, and the device's facts.  The file format,
``.dvrec``, is ``firmware_spec/dvrec.md``: a zip archive (deflate) of a JSON manifest and
content-addressed blobs, so weights that every kick reads are stored once.

:mod:`dvsdk.qa.replay` re-executes a recording on any device and diffs it bit by bit.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import threading
import time
import typing
import zipfile
from dataclasses import fields, is_dataclass
from typing import Any

import numpy as np

from .. import __version__
from ..driver import commands as C
from ..driver import streamwalk
from ..driver.stream import REG_IRQ, conv_words, write_packet
from ..driver.unitregs import ipu_writes, maximizer_writes
from ..driver.validate import validate
from ..errors import InvalidArgument, RecordError
from ..fsutil import atomic_write

FORMAT = "dvrec"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
#: the command dataclasses a recording may hold, by name
COMMAND_TYPES = {t.__name__: t for t in (C.ConvCommand, C.ConvRun, C.FcCommand,
                                         C.IpuCommand, C.MaximizerCommand)}


# -- commands as JSON ----------------------------------------------------------------------

def encode_command(obj: Any, buf_id: Any) -> Any:
    """A command dataclass as JSON, buffers as ``{"buf": id, "offset": n}``."""
    if isinstance(obj, C.BufferRef):
        return {"buf": None if obj.buffer is None else buf_id(obj.buffer),
                "offset": int(obj.offset)}
    if is_dataclass(obj):
        return {"type": type(obj).__name__,
                **{f.name: encode_command(getattr(obj, f.name), buf_id)
                   for f in fields(obj) if f.init}}
    if isinstance(obj, (list, tuple)):
        return [encode_command(v, buf_id) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise InvalidArgument("cannot record this command field", field="command",
                          value=type(obj).__name__)


def decode_command(doc: Any, buffer_of: Any) -> Any:
    """The inverse of :func:`encode_command`; ``buffer_of(id)`` gives the DmaBuffer."""
    if isinstance(doc, dict) and set(doc) == {"buf", "offset"}:
        buf = None if doc["buf"] is None else buffer_of(doc["buf"])
        return C.BufferRef(buf, int(doc["offset"]))
    if isinstance(doc, dict) and "type" in doc:
        cls = COMMAND_TYPES.get(doc["type"])
        if cls is None:
            raise RecordError("unknown command type in the recording", field="type",
                              value=doc["type"], limit=sorted(COMMAND_TYPES))
        kwargs = {k: decode_command(v, buffer_of) for k, v in doc.items() if k != "type"}
        _check_types(cls, kwargs)
        if cls is C.IpuCommand and isinstance(kwargs.get("cnv_param"), list):
            kwargs["cnv_param"] = tuple(kwargs["cnv_param"])
        try:
            return cls(**kwargs)
        except (TypeError, ValueError) as e:
            raise RecordError(f"a recorded {cls.__name__} does not fit this dvsdk: {e}",
                              field="commands") from None
    if isinstance(doc, list):
        return [decode_command(v, buffer_of) for v in doc]
    return doc


def _fits(v: Any, hint: Any) -> bool:
    """Whether a decoded value has a command field's declared type (int, BufferRef,
    ConvRun, list[...] or tuple[...] of those)."""
    if hint is int:   # (a bool is an int: flags recorded as true/false)
        return isinstance(v, int) and -(1 << 63) <= v < 1 << 64
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list:
        return isinstance(v, list) and all(_fits(x, args[0]) for x in v)
    if origin is tuple:
        return (isinstance(v, (list, tuple)) and len(v) == len(args)
                and all(_fits(x, a) for x, a in zip(v, args)))
    return isinstance(v, hint) if isinstance(hint, type) else True


def _check_types(cls: type, kwargs: dict[str, Any]) -> None:
    """RecordError unless every field of a recorded ``cls`` has its declared type."""
    hints = typing.get_type_hints(cls)
    for name, v in kwargs.items():
        if name in hints and not _fits(v, hints[name]):
            text = repr(v)
            raise RecordError(f"a recorded {cls.__name__} has a {name} of the wrong type",
                              field=name, value=text if len(text) <= 64 else text[:60] + "...",
                              limit=getattr(hints[name], "__name__", str(hints[name])))


# -- the recorder ------------------------------------------------------------------------

class Recorder:
    """Collects executions; :meth:`save` writes the ``.dvrec`` file."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.buffers: dict[int, dict[str, Any]] = {}   # id(DmaBuffer) -> {"id", "size", ...}
        self.execs: list[dict[str, Any]] = []
        self.device_info: dict[str, Any] | None = None
        self._open: dict[int, dict[str, Any]] = {}     # id(CommandList) -> exec in flight
        self._refs: dict[int, Any] = {}                 # id -> DmaBuffer (kept alive)
        self._lock = threading.Lock()
        self.t0 = time.time()

    def attach(self, device: Any) -> Recorder:
        device.recorder = self
        self.device_info = _jsonable(device.info().as_dict())
        return self

    # -- blobs and buffers ---------------------------------------------------------------
    def _blob(self, data: np.ndarray | bytes) -> str:
        raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
        key = hashlib.sha256(raw).hexdigest()
        self.blobs.setdefault(key, raw)
        return key

    def _buf_id(self, buf: Any) -> int:
        rec = self.buffers.get(id(buf))
        if rec is None:
            rec = self.buffers[id(buf)] = {"id": len(self.buffers), "size": int(buf.size),
                                           "name": str(buf.name), "phys": int(buf.phys)}
            self._refs[id(buf)] = buf
        return rec["id"]

    # -- the CommandList hooks ------------------------------------------------------------
    def before_exec(self, cl: Any) -> None:
        """The list is about to start its unit: its commands, stream and inputs."""
        with self._lock:
            bufs = _buffers_of(cl)
            accesses = _accesses(cl, bufs)
            entry = {"index": len(self.execs) + len(self._open), "unit": cl.unit,
                     "commands": [encode_command(c, self._buf_id) for c in cl.commands],
                     "reads": [], "writes": [], "started": time.time() - self.t0}
            stream = cl.stream
            if stream is not None:
                chunks = [_device_view(c, 0, n) for c, n in zip(stream.chunks, stream.lengths)]
                entry["stream"] = {"blob": self._blob(b"".join(c.tobytes() for c in chunks)),
                                   "address": int(stream.address)}
            for a in accesses:
                buf, off = _locate(bufs, a)
                item = {"buf": self._buf_id(buf), "offset": off, "nbytes": a.nbytes,
                        "what": a.what}
                if a.write:
                    entry["writes"].append(item)
                else:
                    item["blob"] = self._blob(_device_view(buf, off, a.nbytes))
                    entry["reads"].append(item)
            for fc, blob in cl.fc_weights:  # what commit read to lower an FC (§6.4)
                ref = fc.weight_buf
                buf_id = self._buf_id(ref.buffer)
                rec = self.buffers[id(ref.buffer)]  # (the buffer may be freed by now: sized
                rec["size"] = max(rec["size"], ref.offset + int(blob.size))  # by the read)
                entry["reads"].append({"buf": buf_id, "offset": ref.offset,
                                       "nbytes": int(blob.size),
                                       "what": "fc weights (re-packed at commit)",
                                       "blob": self._blob(blob)})
            entry["_buffers"] = [_locate(bufs, a)[0] for a in accesses if a.write]
            self._open[id(cl)] = entry

    def after_wait(self, cl: Any, stats: Any) -> None:
        """The unit completed: what it wrote, and the time."""
        with self._lock:
            entry = self._open.pop(id(cl), None)
            if entry is None:
                return
            for item, buf in zip(entry["writes"], entry.pop("_buffers")):
                item["blob"] = self._blob(_device_view(buf, item["offset"], item["nbytes"]))
            entry["time_us"] = float(stats.exec_time_us)
            entry["cycles"] = None if stats.cycles is None else int(stats.cycles)
            self.execs.append(entry)

    def abandon(self, cl: Any) -> None:
        """The exec failed: nothing to record."""
        with self._lock:
            self._open.pop(id(cl), None)

    # -- the file --------------------------------------------------------------------------
    def manifest(self) -> dict[str, Any]:
        return {"format": FORMAT, "format_version": FORMAT_VERSION,
                "recorder": f"dvsdk {__version__}", "device": self.device_info,
                "buffers": sorted(({k: v for k, v in b.items()} for b in self.buffers.values()),
                                  key=lambda b: b["id"]),
                "execs": sorted(self.execs, key=lambda e: e["index"])}

    def save(self, path: str | os.PathLike) -> None:
        """Write the recording atomically (nothing half-written at ``path``)."""
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as z:
            z.writestr(MANIFEST, json.dumps(self.manifest(), separators=(",", ":")))
            for key, data in self.blobs.items():
                z.writestr(f"blobs/{key}", data)
        atomic_write(path, lambda f: f.write(buf.getvalue()))


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v if v is None or isinstance(v, (bool, int, float, str)) else str(v)


def _device_view(buf: Any, offset: int, nbytes: int) -> np.ndarray:
    """What the device sees in a range: right before a kick every CPU store has been
    synced for the device (the device would not see it otherwise), so invalidating the
    CPU's cached lines and reading gives DRAM, including what earlier kicks wrote that the
    CPU never read."""
    buf.sync_for_cpu(offset, nbytes)
    return buf.read(offset, nbytes)


def _buffers_of(cl: Any) -> list[Any]:
    """Every DMA buffer the list's commands (and its stream) refer to."""
    seen: dict[int, Any] = {}
    for cmd in cl.commands:
        for ref in cmd.buffers():
            seen.setdefault(id(ref.buffer), ref.buffer)
    for extra in list(getattr(cl, "_owned", [])) + (cl.stream.chunks if cl.stream else []):
        seen.setdefault(id(extra), extra)   # lowered FC weights, the stream's chunks
    return list(seen.values())


def _locate(bufs: list[Any], a: streamwalk.Access) -> tuple[Any, int]:
    for b in bufs:
        if b.phys <= a.address and a.end <= b.phys + b.size:
            return b, a.address - b.phys
    raise RecordError("a range the kick touches lies in no buffer of its commands",
                      field=a.what, value=f"{a.address:#x}+{a.nbytes}")


def _accesses(cl: Any, bufs: list[Any]) -> list[streamwalk.Access]:
    """What the kick reads and writes, from the stream (conv) or register program."""
    if cl.unit == "conv" and cl.stream is not None:   # the stream the device will fetch
        def fetch(addr: int, n: int) -> np.ndarray:
            b, off = _locate(bufs, streamwalk.Access(addr, n, False, "stream"))
            return _device_view(b, off, n)
        accesses, _ = streamwalk.conv_kick_accesses(fetch, cl.stream.address,
                                                    cl.stream.length8)
        return accesses
    if cl.unit == "conv":   # the kernel module builds the stream (dv://): the same words
        words = [conv_words(c, validate(c, cl.info).tiles) for c in _conv_commands(cl)]
        words.append(np.array(write_packet(REG_IRQ, 1), "<u4"))
        stream = np.concatenate(words).astype("<u4").view(np.uint8)
        stream = np.concatenate([stream, np.zeros(-stream.size % 8, np.uint8)])
        accesses, _ = streamwalk.conv_kick_accesses(
            lambda addr, n: stream[addr - _NOWHERE:addr - _NOWHERE + n], _NOWHERE,
            stream.size // 8)
        return [a for a in accesses if a.address != _NOWHERE]
    writes = ipu_writes if cl.unit == "ipu" else maximizer_writes
    walk = streamwalk.ipu_accesses if cl.unit == "ipu" else streamwalk.maximizer_accesses
    return [a for c in cl.commands for a in walk(dict(writes(c)))]


#: where an in-memory stream (not in DRAM) is walked from
_NOWHERE = 8


def _conv_commands(cl: Any) -> list:
    """The list's commands as the device runs them: an FC is lowered to a conv at commit
    (§6.4), and the list keeps that lowered form (``device_commands``)."""
    return [c for c in cl.device_commands if isinstance(c, C.ConvCommand)]
