"""``dvsdk replay run.dvrec``: re-execute a recording and diff it bit by bit.

Every recorded buffer is allocated on the replay device (default ``sim://``) with its
physical address's offset within a 4 KiB page kept, so every alignment the commands rely
on holds.  Exec by exec, the recorded input ranges are written and synced, the recorded
commands are rebuilt over the new buffers, committed (the replay device encodes its own
stream) and run, and every range the kick wrote is compared with the recording.  Where a
range differs, the first differing byte is located in the command's output tensor
(tensor, channel, position, both values) by the layout math of §1.  The replay's time is
set beside the recorded one: recorded on a board and replayed on the simulator, that is
measured against predicted per command list.

A recording is checked before anything is allocated (``firmware_spec/dvrec.md``, "A reader
refuses"): the manifest's structure and types, at least one exec, every range inside its
buffer (no negative offset or size), every blob name a SHA-256; each blob's content is
checked against its name when read, so a damaged or edited blob is a RecordError, never
a reported device difference.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import zipfile
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..driver.cmdlist import CommandList
from ..driver.commands import ConvCommand, IpuCommand, MaximizerCommand
from ..driver.device import Device, open_device
from ..errors import RecordError
from ..hw import dims, layout
from .record import FORMAT, FORMAT_VERSION, MANIFEST, decode_command

PAGE = 4096
#: the units an exec may run on, and the commands a list may hold
UNITS = ("conv", "ipu", "maximizer")
COMMANDS = ("ConvCommand", "FcCommand", "IpuCommand", "MaximizerCommand")
#: bounds on what a manifest may say: a buffer's size and address (a 64-bit bus)
MAX_BUFFER = 1 << 32
MAX_PHYS = (1 << 64) - 1
_SHA256 = re.compile(r"[0-9a-f]{64}\Z")


@dataclass
class Difference:
    range: str            # what the unit wrote ("output", "IPU output", ...)
    command: int          # index of the command in its list
    byte: int             # first differing byte within the range
    where: str            # tensor position in words
    recorded: Any
    replayed: Any
    bytes_differing: int


@dataclass
class ExecResult:
    index: int
    unit: str
    commands: int
    identical: bool
    recorded_us: float
    replayed_us: float
    differences: list[Difference] = field(default_factory=list)
    #: per command, when the replay device is the simulator: its predicted time (each
    #: command run alone after the comparison; the list's time also counts the stream)
    command_us: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Recording:
    """A ``.dvrec`` file opened for reading; blobs are read on demand."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = str(path)
        try:
            self.zip = zipfile.ZipFile(path)
            self.manifest = json.loads(self.zip.read(MANIFEST))
        except FileNotFoundError:
            raise RecordError("recording not found", field="recording", value=self.path) \
                from None
        except (zipfile.BadZipFile, KeyError, ValueError, OSError, EOFError) as e:
            raise RecordError(f"not a readable recording (truncated or damaged?): {e}",
                              field="recording", value=self.path) from None
        m = self.manifest
        if not isinstance(m, dict) or m.get("format") != FORMAT:
            raise RecordError("not a dvsdk recording", field="format",
                              value=m.get("format") if isinstance(m, dict) else None,
                              limit=FORMAT)
        if m.get("format_version") != FORMAT_VERSION:
            raise RecordError("unsupported recording version", field="format_version",
                              value=m.get("format_version"), limit=FORMAT_VERSION)
        ManifestCheck(os.path.basename(self.path)).check(m)

    def blob(self, key: str, nbytes: int) -> np.ndarray:
        try:
            data = self.zip.read(f"blobs/{key}")
        except (KeyError, zipfile.BadZipFile, OSError, EOFError) as e:
            raise RecordError(f"recording is missing or damaged blob {key[:12]}: {e}",
                              field="blobs", value=self.path) from None
        if len(data) != nbytes:
            raise RecordError("a recorded range has the wrong length", field="blobs",
                              value=len(data), limit=nbytes)
        digest = hashlib.sha256(data).hexdigest()
        if digest != key:
            raise RecordError(f"{os.path.basename(self.path)}: blob {key[:12]} is damaged "
                              "(its content is not the SHA-256 it is named by)",
                              field=f"blobs/{key[:12]}", value=digest[:12], limit=key[:12])
        return np.frombuffer(data, np.uint8)

    def close(self) -> None:
        self.zip.close()


class ManifestCheck:
    """The structure of ``manifest.json`` (dvrec.md), each refusal a RecordError naming the
    file, the JSON path, the value and the limit."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.sizes: dict[int, int] = {}   # buffer id -> size

    def fail(self, path: str, what: str, value: Any = None, limit: Any = None) -> None:
        text = repr(value)
        raise RecordError(f"{self.name}: manifest {path} {what}", field=path,
                          value=value if len(text) <= 64 else text[:60] + "...", limit=limit)

    def integer(self, v: Any, path: str, lo: int = 0, hi: int = MAX_PHYS) -> int:
        if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
            self.fail(path, "is not an integer in range", v, f"{lo}..{hi}")
        return v

    def lst(self, v: Any, path: str) -> list:
        if not isinstance(v, list):
            self.fail(path, "is not a list", type(v).__name__, "list")
        return v

    def obj(self, v: Any, path: str) -> dict:
        if not isinstance(v, dict):
            self.fail(path, "is not an object", type(v).__name__, "object")
        return v

    def known(self, bid: Any) -> bool:
        """Whether ``bid`` is the id of a recorded buffer."""
        return isinstance(bid, int) and not isinstance(bid, bool) and bid in self.sizes

    def sha(self, v: Any, path: str) -> None:
        if not isinstance(v, str) or not _SHA256.match(v):
            self.fail(path, "is not a blob name (64 hex digits of SHA-256)", v, "sha256")

    def check(self, m: dict) -> None:
        if m.get("device") is not None:
            self.obj(m["device"], "device")
        for i, b in enumerate(self.lst(m.get("buffers"), "buffers")):
            path = f"buffers[{i}]"
            b = self.obj(b, path)
            bid = self.integer(b.get("id"), f"{path}.id", 0, MAX_PHYS)
            if bid in self.sizes:
                self.fail(f"{path}.id", "is used twice", bid, "unique")
            self.sizes[bid] = self.integer(b.get("size"), f"{path}.size", 0, MAX_BUFFER)
            self.integer(b.get("phys"), f"{path}.phys")
            if not isinstance(b.get("name"), str):
                self.fail(f"{path}.name", "is not a string", b.get("name"))
        execs = self.lst(m.get("execs"), "execs")
        if not execs:
            self.fail("execs", "is empty: the recording holds no kick", 0, "at least 1")
        for i, e in enumerate(execs):
            self.exec(self.obj(e, f"execs[{i}]"), f"execs[{i}]")

    def exec(self, e: dict, path: str) -> None:
        self.integer(e.get("index"), f"{path}.index")
        if e.get("unit") not in UNITS:
            self.fail(f"{path}.unit", "is not a unit", e.get("unit"), UNITS)
        cmds = self.lst(e.get("commands"), f"{path}.commands")
        if not cmds:
            self.fail(f"{path}.commands", "is empty", 0, "at least 1")
        for j, c in enumerate(cmds):
            c = self.obj(c, f"{path}.commands[{j}]")
            if c.get("type") not in COMMANDS:
                self.fail(f"{path}.commands[{j}].type", "is not a command type",
                          c.get("type"), COMMANDS)
            self.command(c, f"{path}.commands[{j}]")
        for side in ("reads", "writes"):
            for j, item in enumerate(self.lst(e.get(side), f"{path}.{side}")):
                self.range(self.obj(item, f"{path}.{side}[{j}]"), f"{path}.{side}[{j}]")
        if e.get("stream") is not None:
            st = self.obj(e["stream"], f"{path}.stream")
            self.sha(st.get("blob"), f"{path}.stream.blob")
            self.integer(st.get("address"), f"{path}.stream.address")
        for key in ("time_us", "cycles"):
            v = e.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                                  or not 0 <= v < float("inf")):
                self.fail(f"{path}.{key}", "is not a finite number >= 0", v, ">= 0")

    def range(self, item: dict, path: str) -> None:
        bid = item.get("buf")
        if not self.known(bid):
            self.fail(f"{path}.buf", "names no recorded buffer", bid, sorted(self.sizes)[:8])
        size = self.sizes[bid]
        off = self.integer(item.get("offset"), f"{path}.offset", 0, size)
        self.integer(item.get("nbytes"), f"{path}.nbytes", 0, size - off)
        if not isinstance(item.get("what"), str):
            self.fail(f"{path}.what", "is not a string", item.get("what"))
        self.sha(item.get("blob"), f"{path}.blob")

    def command(self, doc: Any, path: str) -> None:
        """A recorded command (or a field of one): buffer references name recorded buffers
        at offsets inside them; the dataclass fields are checked when it is rebuilt."""
        if isinstance(doc, dict) and set(doc) == {"buf", "offset"}:
            if doc["buf"] is not None:
                if not self.known(doc["buf"]):
                    self.fail(f"{path}.buf", "names no recorded buffer", doc["buf"])
                self.integer(doc["offset"], f"{path}.offset", 0, self.sizes[doc["buf"]])
            else:
                self.integer(doc["offset"], f"{path}.offset", 0, MAX_PHYS)
        elif isinstance(doc, dict):
            if not isinstance(doc.get("type"), str):
                self.fail(f"{path}.type", "is not a command type", doc.get("type"))
            for k, v in doc.items():
                self.command(v, f"{path}.{k}")
        elif isinstance(doc, list):
            for j, v in enumerate(doc):
                self.command(v, f"{path}[{j}]")


def replay(path: str | os.PathLike, device: Device | str | None = None,
           timeout: float = 10.0) -> tuple[list[ExecResult], dict[str, Any]]:
    """Replay a recording; returns per-exec results and the recorded device's facts."""
    rec = Recording(path)
    own = not isinstance(device, Device)
    dev = open_device(device or "sim://") if own else device
    bufs: dict[int, tuple[Any, int]] = {}
    try:
        for b in rec.manifest["buffers"]:
            pad = int(b["phys"]) % PAGE
            new = dev.alloc(int(b["size"]) + pad, align=PAGE, name=f"replay:{b['name']}")
            bufs[int(b["id"])] = (new, pad)
        results = [_one(rec, dev, bufs, e, timeout) for e in rec.manifest["execs"]]
        return results, rec.manifest.get("device") or {}
    finally:
        for new, _ in bufs.values():
            new.free()
        if own:
            dev.close()
        rec.close()


def _one(rec: Recording, dev: Device, bufs: dict, entry: dict, timeout: float) -> ExecResult:
    def place(item: dict) -> tuple[Any, int]:
        if int(item["buf"]) not in bufs:
            raise RecordError("a range refers to an unknown buffer", field="buf",
                              value=item["buf"])
        new, pad = bufs[int(item["buf"])]
        return new, pad + int(item["offset"])

    for item in entry["reads"]:
        new, off = place(item)
        new.write(off, rec.blob(item["blob"], int(item["nbytes"])))
        new.sync_for_device(off, int(item["nbytes"]))

    def buffer_of(i: int) -> Any:
        return bufs[int(i)][0]

    commands = [_shift(decode_command(c, buffer_of), bufs) for c in entry["commands"]]
    cl = CommandList(dev)
    try:
        for cmd in commands:
            cl.add(cmd)
        cl.commit()
        us = cl.run(timeout)
    finally:
        cl.close()
    diffs = []
    outputs = [w for w in entry["writes"]]
    for k, item in enumerate(outputs):
        new, off = place(item)
        n = int(item["nbytes"])
        new.sync_for_cpu(off, n)
        got = new.read(off, n)
        want = rec.blob(item["blob"], n)
        bad = np.flatnonzero(got != want)
        if bad.size:
            diffs.append(_describe(commands, entry["unit"], k, item["what"], int(bad[0]),
                                   want, got, int(bad.size)))
    per_command = []
    if dev.info().simulated and len(commands) > 1:
        for cmd in commands:  # cycles depend on shapes, not on the data left behind
            with CommandList(dev) as one:
                one.add(cmd)
                one.commit()
                per_command.append(float(one.run(timeout)))
    return ExecResult(int(entry["index"]), entry["unit"], len(commands), not diffs,
                      float(entry.get("time_us") or 0.0), float(us), diffs, per_command)


def _shift(cmd: Any, bufs: dict) -> Any:
    """Move every buffer offset by its buffer's page offset (see :func:`replay`)."""
    from dataclasses import fields, replace

    from ..driver.commands import BufferRef

    pads = {id(new): pad for new, pad in bufs.values()}
    changes = {}
    for f in fields(cmd):
        v = getattr(cmd, f.name)
        if isinstance(v, BufferRef) and v.buffer is not None:
            changes[f.name] = BufferRef(v.buffer, v.offset + pads[id(v.buffer)])
        elif isinstance(v, list) and v and hasattr(v[0], "weight_buf"):
            changes[f.name] = [_shift(r, bufs) for r in v]
    return replace(cmd, **changes)


def _describe(commands: list, unit: str, k: int, what: str, byte: int, want: np.ndarray,
              got: np.ndarray, count: int) -> Difference:
    """Where the first differing byte of write range ``k`` lies, in tensor terms."""
    if unit == "conv" and k < len(commands) and isinstance(commands[k], ConvCommand):
        cmd, base = commands[k], 0
        for i, (_, (ow, oh, _, oc)) in enumerate(dims.run_shapes(cmd, cmd.runs)):
            size = ow * oh * oc * 2
            if cmd.topo >> i & 1:
                if byte < base + size:
                    e = (byte - base) // 2
                    offs = layout.offsets((oh, ow, oc))
                    y, x, ch = (int(v[0]) for v in np.nonzero(offs == e))
                    a = (base + 2 * e)
                    rec = float(want[a:a + 2].view(np.float16)[0])
                    rep = float(got[a:a + 2].view(np.float16)[0])
                    return Difference(what, k, byte, f"run {i} output (H {oh}, W {ow}, C {oc}):"
                                      f" channel {ch}, y {y}, x {x}", rec, rep, count)
                base += size
    if unit == "maximizer" and k < len(commands) and isinstance(commands[k], MaximizerCommand):
        w = commands[k].width
        return Difference(what, k, byte, f"class map pixel y {byte // w}, x {byte % w}",
                          int(want[byte]), int(got[byte]), count)
    if unit == "ipu" and k < len(commands) and isinstance(commands[k], IpuCommand):
        return Difference(what, k, byte, f"IPU output byte {byte}", int(want[byte]),
                          int(got[byte]), count)
    return Difference(what, k, byte, f"byte {byte}", int(want[byte]), int(got[byte]), count)
