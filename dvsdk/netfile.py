"""net.bin: the compiled network file (``firmware_spec/netbin.md``, ``netbin.yaml``).

A 64-byte header, a section table, then 64-byte aligned sections, each with its
own CRC32.  ``META`` is JSON; ``CMDS`` holds raw DV700 command structs whose
buffer handles are region ids (1 = activation arena, 2 = weights), so the file
is relocatable; ``WGTS``, ``CNST`` and ``GOLD`` are raw blobs indexed from META.

:func:`write` is atomic (temporary file, fsync, rename).  :func:`read` rejects
truncated, corrupt, unknown-version and foreign files with :class:`NetFileError`
naming the reason; :func:`check_hardware` compares the requirements with a device.
"""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import __version__
from .driver.device import DeviceInfo
from .errors import NetFileError
from .fsutil import atomic_write
from .hw.spec import SPEC

NB = SPEC.netbin
MAGIC = NB["magic"].encode()
FORMAT_VERSION = int(NB["format_version"])
ALIGN = int(NB["alignment"])
REGIONS: dict[str, int] = dict(NB["regions"])
HEADER = SPEC.struct("netbin_header")
SECTION = SPEC.struct("netbin_section")
TAGS = tuple(NB["sections"])
#: META keys every reader needs (netbin.md, "Metadata"); the others are optional
META_REQUIRED = ("inputs", "outputs", "tensors", "program", "arena")


@dataclass
class NetFile:
    """The decoded contents of a net.bin."""

    meta: dict[str, Any]
    commands: bytes = b""
    weights: bytes = b""
    constants: bytes = b""
    golden: bytes = b""
    format_version: int = FORMAT_VERSION
    compiler_version: str = f"dvsdk {__version__}"
    extra: dict[str, bytes] = field(default_factory=dict)

    # -- indexed arrays in CNST / GOLD ----------------------------------------------------
    def array(self, entry: dict[str, Any], section: str = "CNST") -> np.ndarray:
        blob = self.constants if section == "CNST" else self.golden
        dtype, shape = np.dtype(entry["dtype"]), tuple(entry["shape"])
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        off = int(entry["offset"])
        if off < 0 or off + n > len(blob):
            raise NetFileError(f"{section} entry outside its section", field=section,
                               value=(off, n), limit=len(blob))
        return np.frombuffer(blob, dtype, count=n // dtype.itemsize, offset=off).reshape(shape)

    def command_records(self) -> list[bytes]:
        """Split CMDS into raw structs by their own header size (§3.1)."""
        out, pos, data = [], 0, self.commands
        while pos < len(data):
            if pos + 8 > len(data):
                raise NetFileError("command record cut short", field="CMDS", value=pos)
            size = int.from_bytes(data[pos : pos + 4], "little")
            if size < 8 or pos + size > len(data):
                raise NetFileError("command record size out of range", field="CMDS.size",
                                   value=size, limit=len(data) - pos)
            out.append(data[pos : pos + size])
            pos += -(-size // 8) * 8
        return out


class BlobBuilder:
    """Appends arrays to a blob at aligned offsets and returns their index entries."""

    def __init__(self, align: int = 16) -> None:
        self.parts: list[bytes] = []
        self.size = 0
        self.align = align

    def add(self, data: bytes | np.ndarray, align: int | None = None) -> int:
        a = align or self.align
        pad = -self.size % a
        if pad:
            self.parts.append(b"\0" * pad)
            self.size += pad
        off = self.size
        raw = data if isinstance(data, bytes) else np.ascontiguousarray(data).tobytes()
        self.parts.append(raw)
        self.size += len(raw)
        return off

    def add_array(self, arr: np.ndarray) -> dict[str, Any]:
        arr = np.ascontiguousarray(arr)
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        return {"offset": self.add(arr), "dtype": arr.dtype.str, "shape": list(arr.shape)}

    def bytes(self) -> bytes:
        return b"".join(self.parts)


def _crc(data: bytes) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def encode(net: NetFile) -> bytes:
    meta = json.dumps(net.meta, separators=(",", ":"), sort_keys=True).encode()
    sections = [("META", meta), ("CMDS", net.commands), ("WGTS", net.weights),
                ("CNST", net.constants), ("GOLD", net.golden), *net.extra.items()]
    table_end = HEADER.size + SECTION.size * len(sections)
    pos = -(-table_end // ALIGN) * ALIGN
    entries, body = [], []
    for tag, data in sections:
        entries.append({"tag": list(tag.encode().ljust(8, b"\0")), "offset": pos,
                        "size": len(data), "crc32": _crc(data)})
        body.append((pos, data))
        pos = -(-(pos + len(data)) // ALIGN) * ALIGN
    file_size = pos if sections else table_end
    table = b"".join(SECTION.pack(e) for e in entries)
    header = {"magic": list(MAGIC), "format_version": net.format_version,
              "header_size": HEADER.size, "section_count": len(sections),
              "file_size": file_size,
              "compiler_version": list(net.compiler_version.encode()[:16].ljust(16, b"\0"))}
    crc = _crc(HEADER.pack(header) + table)
    out = bytearray(file_size)
    out[: HEADER.size] = HEADER.pack({**header, "header_crc32": crc})
    out[HEADER.size : table_end] = table
    for p, data in body:
        out[p : p + len(data)] = data
    return bytes(out)


def write(net: NetFile, path: str | os.PathLike) -> int:
    """Write atomically: nothing half-written is ever left at ``path``."""
    data = encode(net)
    atomic_write(path, lambda f: f.write(data))
    return len(data)


def decode(data: bytes, name: str = "net.bin") -> NetFile:
    if len(data) < HEADER.size:
        raise NetFileError(f"{name} is truncated: {len(data)} bytes, no header", field="size",
                           value=len(data), limit=HEADER.size)
    hdr = HEADER.unpack(data)
    if bytes(hdr["magic"]) != MAGIC:
        raise NetFileError(f"{name} is not a dvsdk net.bin (bad magic)", field="magic",
                           value=bytes(hdr["magic"]), limit=MAGIC)
    version = hdr["format_version"]
    if version > FORMAT_VERSION or version < 1:
        raise NetFileError(f"{name} has format version {version}; this dvsdk reads "
                           f"1..{FORMAT_VERSION}", field="format_version", value=version,
                           limit=FORMAT_VERSION, hint="upgrade dvsdk or recompile the model")
    if hdr["file_size"] != len(data):
        raise NetFileError(f"{name} is truncated or padded: header says {hdr['file_size']} "
                           f"bytes, file has {len(data)}", field="file_size",
                           value=len(data), limit=hdr["file_size"])
    n = hdr["section_count"]
    table_end = HEADER.size + SECTION.size * n
    if n > 64 or table_end > len(data):
        raise NetFileError(f"{name} section table is corrupt", field="section_count", value=n)
    table = data[HEADER.size : table_end]
    check = HEADER.pack({k: v for k, v in hdr.items() if k != "header_crc32"}) + table
    if _crc(check) != hdr["header_crc32"]:
        raise NetFileError(f"{name} header is corrupt (CRC mismatch)", field="header_crc32",
                           value=hdr["header_crc32"], limit=_crc(check))
    sections: dict[str, bytes] = {}
    for i in range(n):
        e = SECTION.unpack(table, i * SECTION.size)
        tag = bytes(e["tag"]).rstrip(b"\0").decode("ascii", "replace")
        start, size = e["offset"], e["size"]
        if start + size > len(data):
            raise NetFileError(f"{name} section {tag} runs past the end", field=tag,
                               value=start + size, limit=len(data))
        body = data[start : start + size]
        if _crc(body) != e["crc32"]:
            raise NetFileError(f"{name} section {tag} is corrupt (CRC mismatch)", field=tag,
                               value=_crc(body), limit=e["crc32"])
        sections[tag] = body
    if "META" not in sections:
        raise NetFileError(f"{name} has no META section", field="META")
    try:
        meta = json.loads(sections.pop("META").decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise NetFileError(f"{name} metadata is not valid JSON: {e}", field="META") from None
    # valid JSON of the wrong shape would otherwise surface as a KeyError/AttributeError
    # deep in the runtime
    if not isinstance(meta, dict):
        raise NetFileError(f"{name} metadata is not a JSON object", field="META",
                           value=type(meta).__name__)
    missing = [k for k in META_REQUIRED if k not in meta]
    if missing:
        raise NetFileError(f"{name} metadata lacks {', '.join(missing)}", field="META",
                           value=missing, limit=META_REQUIRED)
    check_meta(meta, name)
    compiler = bytes(hdr["compiler_version"]).rstrip(b"\0").decode("ascii", "replace")
    return NetFile(meta=meta, commands=sections.pop("CMDS", b""),
                   weights=sections.pop("WGTS", b""), constants=sections.pop("CNST", b""),
                   golden=sections.pop("GOLD", b""), format_version=version,
                   compiler_version=compiler, extra=sections)


def _want(ok: bool, name: str, what: str, field: str, value: Any = None,
          limit: Any = None) -> None:
    if not ok:
        raise NetFileError(f"{name} metadata: {what}", field=field, value=value, limit=limit)


def _is_int(v: Any, lo: int = 0) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= lo


def _is_shape(v: Any) -> bool:
    return isinstance(v, list) and all(_is_int(d) for d in v)


def _check_entries(entries: Any, name: str, where: str) -> None:
    """An index of raw arrays: ``{name: {offset, dtype, shape}}``."""
    _want(isinstance(entries, dict), name, f"{where} is not an object", where, type(entries))
    for key, entry in entries.items():
        ok = isinstance(entry, dict) and _is_int(entry.get("offset")) \
            and _is_shape(entry.get("shape"))
        if ok:
            try:
                np.dtype(entry.get("dtype"))
            except (TypeError, ValueError):
                ok = False
        _want(ok, name, "array entry is malformed", f"{where}.{key}", entry)


def check_meta(meta: dict[str, Any], name: str = "net.bin") -> None:
    """Types and ranges of everything the runtime reads from META, so a hand-edited or
    damaged file fails here with NetFileError instead of deep inside the runtime."""
    hw = meta.get("hardware", {})
    _want(isinstance(hw, dict), name, "hardware is not an object", "hardware", type(hw))
    for key in ("ub_size_min", "max_kernel_size", "svn_version_min"):
        _want(_is_int(hw.get(key, 0)), name, f"hardware.{key} is not a count",
              f"hardware.{key}", hw.get(key), "integer >= 0")
    units = hw.get("units", ["conv"])
    _want(isinstance(units, list) and all(isinstance(u, str) for u in units), name,
          "hardware.units is not a list of unit names", "hardware.units", units)
    arena = meta["arena"]
    _want(isinstance(arena, dict) and _is_int(arena.get("size")), name,
          "arena.size is not a byte count", "arena.size",
          arena.get("size") if isinstance(arena, dict) else arena, "integer >= 0")
    tensors = meta["tensors"]
    _want(isinstance(tensors, dict), name, "tensors is not an object", "tensors")
    for tname, t in tensors.items():
        _want(isinstance(t, dict) and _is_shape(t.get("shape")), name,
              "tensor has no valid shape", f"tensors.{tname}.shape",
              t.get("shape") if isinstance(t, dict) else t)
        dev = t.get("device")
        if dev is None:
            continue
        ok = (isinstance(dev, dict) and _is_int(dev.get("offset")) and _is_shape(dev.get("hwc"))
              and len(dev["hwc"]) == 3 and min(dev["hwc"]) >= 1)
        _want(ok, name, "tensor has no valid device placement", f"tensors.{tname}.device", dev)
        _want(int(np.prod(dev["hwc"], dtype=np.int64)) == int(np.prod(t["shape"],
                                                                        dtype=np.int64)),
              name, "device placement and shape disagree", f"tensors.{tname}.device",
              dev["hwc"], t["shape"])
        end = dev["offset"] + 2 * int(np.prod(dev["hwc"], dtype=np.int64))
        _want(end <= arena["size"], name, "tensor lies outside the arena",
              f"tensors.{tname}.device", end, arena["size"])
    for side in ("inputs", "outputs"):
        specs = meta[side]
        _want(isinstance(specs, list), name, f"{side} is not a list", side, type(specs))
        for i, spec in enumerate(specs):
            ok = (isinstance(spec, dict) and isinstance(spec.get("name"), str)
                  and isinstance(spec.get("tensor"), str) and spec["tensor"] in tensors
                  and _is_shape(spec.get("shape")))
            _want(ok, name, f"{side}[{i}] does not name a tensor with a shape",
                  f"{side}[{i}]", spec)
            flip = spec.get("transpose", False)
            _want(isinstance(flip, bool) and (not flip or len(spec["shape"]) == 4), name,
                  f"{side}[{i}].transpose must be a boolean, true only for 4-D tensors",
                  f"{side}[{i}].transpose", flip)
            want = int(np.prod(tensors[spec["tensor"]]["shape"], dtype=np.int64))
            _want(int(np.prod(spec["shape"], dtype=np.int64)) == want, name,
                  f"{side}[{i}] shape does not match its tensor", f"{side}[{i}].shape",
                  spec["shape"], tensors[spec["tensor"]]["shape"])
    program = meta["program"]
    _want(isinstance(program, list), name, "program is not a list", "program", type(program))
    for i, step in enumerate(program):
        _want(isinstance(step, dict) and step.get("kind") in ("hw", "cpu"), name,
              "program step of unknown kind", f"program[{i}].kind",
              step.get("kind") if isinstance(step, dict) else step, ("hw", "cpu"))
        if step["kind"] == "hw":
            cmds = step.get("commands")
            _want(isinstance(cmds, list) and len(cmds) == 2 and _is_int(cmds[0])
                  and _is_int(cmds[1], 1), name, "hw step has no command range",
                  f"program[{i}].commands", cmds, "[first, count >= 1]")
        else:
            ok = (isinstance(step.get("op"), str) and isinstance(step.get("attrs", {}), dict)
                  and all(isinstance(step.get(k), list) and all(isinstance(n, str)
                                                                for n in step[k])
                          for k in ("inputs", "outputs")))
            _want(ok, name, "cpu step is malformed", f"program[{i}]", step.get("op"))
    _check_entries(meta.get("constants") or {}, name, "constants")
    golden = meta.get("golden")
    if golden is not None:
        _want(isinstance(golden, dict), name, "golden is not an object", "golden", type(golden))
        _check_entries(golden.get("inputs"), name, "golden.inputs")
        _check_entries(golden.get("outputs"), name, "golden.outputs")
        tol = golden.get("tolerance")
        _want(isinstance(tol, dict) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
            for v in tol.values()) and set(tol) == set(golden["outputs"]), name,
            "golden.tolerance needs a number per golden output", "golden.tolerance", tol)
    labels = meta.get("labels")
    _want(labels is None or (isinstance(labels, list) and all(isinstance(x, str)
                                                               for x in labels)),
          name, "labels is not a list of strings", "labels", type(labels))


def read(path: str | os.PathLike) -> NetFile:
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise NetFileError(f"cannot read {path}: {e.strerror}", field="path",
                           value=str(path)) from None
    return decode(data, Path(path).name)


def check_hardware(net: NetFile, info: DeviceInfo) -> None:
    """Reject a net.bin compiled for hardware this device is not."""
    hw = net.meta.get("hardware", {})
    need_ub = int(hw.get("ub_size_min", 0))
    if info.ub_size < need_ub:
        raise NetFileError(f"net.bin needs a unified buffer of {need_ub} bytes; the device "
                           f"has {info.ub_size}", field="ub_size", value=info.ub_size,
                           limit=need_ub, hint="recompile with --ub-size for this device")
    need_k = int(hw.get("max_kernel_size", 1))
    if info.max_kernel_size < need_k:
        raise NetFileError(f"net.bin uses {need_k}x{need_k} kernels; the device allows "
                           f"{info.max_kernel_size}", field="max_kernel_size",
                           value=info.max_kernel_size, limit=need_k)
    need_svn = int(hw.get("svn_version_min", 0))
    if info.svn_version < need_svn:
        raise NetFileError("net.bin needs a newer DV700 (svn_version)", field="svn_version",
                           value=info.svn_version, limit=need_svn)
    for unit in hw.get("units", ["conv"]):
        if unit not in info.units:
            raise NetFileError(f"net.bin uses the {unit} unit, which this device lacks",
                               field="units", value=list(info.units), limit=unit)


def dma_bytes(net: NetFile) -> int:
    """DMA memory a net.bin needs on the device: arena, weights and command streams."""
    stream = len(net.commands) // 1864 * 1500 + 64 * 1024
    return int(net.meta["arena"]["size"]) + len(net.weights) + stream


@dataclass(frozen=True)
class ProgramShape:
    """How a program alternates between the DV700 and the CPU (META ``program``)."""

    hw_segments: int
    cpu_steps: int
    cpu_segments: int   # runs of consecutive CPU steps
    transitions: int    # device <-> CPU hand-overs between consecutive steps

    def __str__(self) -> str:
        if not self.cpu_steps:
            return (f"no CPU steps: {self.hw_segments} hardware segment"
                    f"{'s' if self.hw_segments != 1 else ''}, no device<->CPU transitions")
        return (f"{self.cpu_steps} CPU step{'s' if self.cpu_steps != 1 else ''} in "
                f"{self.cpu_segments} segment{'s' if self.cpu_segments != 1 else ''}, "
                f"{self.transitions} device<->CPU transition"
                f"{'s' if self.transitions != 1 else ''}")


def program_shape(meta: dict[str, Any]) -> ProgramShape:
    """Count the hardware segments, CPU steps, CPU segments and transitions of META's
    program (the hand-overs between consecutive steps; the input upload and the output
    download of every run are not counted)."""
    kinds = [s.get("kind") for s in meta.get("program", [])]
    starts = [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]
    return ProgramShape(hw_segments=starts.count("hw"), cpu_steps=kinds.count("cpu"),
                        cpu_segments=starts.count("cpu"),
                        transitions=max(len(starts) - 1, 0))
