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
"""

from __future__ import annotations

import json
import os
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

    def blob(self, key: str, nbytes: int) -> np.ndarray:
        try:
            data = self.zip.read(f"blobs/{key}")
        except (KeyError, zipfile.BadZipFile, OSError, EOFError) as e:
            raise RecordError(f"recording is missing or damaged blob {key[:12]}: {e}",
                              field="blobs", value=self.path) from None
        if len(data) != nbytes:
            raise RecordError("a recorded range has the wrong length", field="blobs",
                              value=len(data), limit=nbytes)
        return np.frombuffer(data, np.uint8)

    def close(self) -> None:
        self.zip.close()


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
