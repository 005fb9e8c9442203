"""net.bin: the compiled network file (``firmware_spec/netbin.md``, ``netbin.yaml``).

A 64-byte header, a section table, then 64-byte aligned sections, each with its
own CRC32.  ``META`` is JSON; ``CMDS`` holds raw DV700 command structs whose
buffer handles are region ids (1 = activation arena, 2 = weights), so the file
is relocatable; ``WGTS``, ``CNST`` and ``GOLD`` are raw blobs indexed from META.

:func:`write` is atomic (temporary file, fsync, rename).  :func:`read` rejects
truncated, corrupt, unknown-version and foreign files, duplicate sections, and META
that is unbounded, mistyped or disagrees with the sections it indexes, with
:class:`NetFileError` naming the reason (for META, the JSON path); :func:`check_hardware`
compares the requirements with a device.  What the commands and CPU ops mean is checked
by :mod:`dvsdk.runtime.records`, which needs the kernels.
"""

from __future__ import annotations

import json
import math
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from . import __version__
from .driver.device import DeviceInfo
from .errors import NetFileError
from .fsutil import atomic_write
from .hw.spec import SPEC
from .netprogram import ProgramShape, check_program, program_shape  # noqa: F401 (re-exported)

NB = SPEC.netbin
MAGIC = NB["magic"].encode()
FORMAT_VERSION = int(NB["format_version"])
ALIGN = int(NB["alignment"])
REGIONS: dict[str, int] = dict(NB["regions"])
HEADER = SPEC.struct("netbin_header")
SECTION = SPEC.struct("netbin_section")
TAGS = tuple(NB["sections"])
#: bounds on everything META holds (netbin.yaml ``meta_limits``)
LIMITS: dict[str, int] = {k: int(v) for k, v in NB["meta_limits"].items()}
#: offset alignment a reader requires (netbin.yaml ``align``)
ALIGNMENT: dict[str, int] = {k: int(v) for k, v in NB["align"].items()}
#: element types META may name, by dtype string and by numpy name
DTYPES: dict[str, np.dtype] = {np.dtype(s).str: np.dtype(s) for s in NB["dtypes"]}
DTYPES.update({d.name: d for d in list(DTYPES.values())})
#: META keys every reader needs (netbin.md, "Metadata"); the others are optional
META_REQUIRED = ("inputs", "outputs", "tensors", "program", "arena")
#: the layouts inputs and outputs may be given in (see netbin.md: NHWC for Keras models)
LAYOUTS = ("NCHW", "NHWC", "ND")
#: sections a table may list
MAX_SECTIONS = 64


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
        m = MetaReader("net.bin")
        dtype, shape = m.dtype(entry.get("dtype"), section), m.shape(entry.get("shape"), section)
        n = math.prod(shape) * dtype.itemsize          # exact: no int64 wrap
        off = entry.get("offset")
        if not _is_int(off) or off < 0 or off + n > len(blob):
            raise NetFileError(f"{section} entry outside its section", field=section,
                               value=(off, n), limit=len(blob))
        return np.frombuffer(blob, dtype, count=math.prod(shape), offset=off).reshape(shape)

    def command_records(self) -> list[bytes]:
        """Split CMDS into raw structs by their own header size (§3.1)."""
        out, pos, data = [], 0, self.commands
        while pos < len(data):
            if len(out) == LIMITS["commands"]:
                raise NetFileError("CMDS holds too many command records", field="CMDS",
                                   value=f"more than {len(out)}", limit=LIMITS["commands"])
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
        shape = np.shape(arr)                 # ascontiguousarray makes a 0-d array 1-d
        arr = np.ascontiguousarray(arr).reshape(shape)
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
    if n > MAX_SECTIONS or table_end > len(data):
        raise NetFileError(f"{name} section table is corrupt", field="section_count", value=n,
                           limit=MAX_SECTIONS)
    table = data[HEADER.size : table_end]
    covered = HEADER.pack({k: v for k, v in hdr.items() if k != "header_crc32"}) + table
    if _crc(covered) != hdr["header_crc32"]:
        raise NetFileError(f"{name} header is corrupt (CRC mismatch)", field="header_crc32",
                           value=hdr["header_crc32"], limit=_crc(covered))
    _check_header(hdr, name)
    sections: dict[str, bytes] = {}
    spans: list[tuple[int, int, str]] = []
    for i in range(n):
        e = SECTION.unpack(table, i * SECTION.size)
        tag = bytes(e["tag"]).rstrip(b"\0").decode("ascii", "replace")
        start, size = e["offset"], e["size"]
        if tag in sections:   # which copy wins would be the reader's guess
            raise NetFileError(f"{name} has two {tag} sections", field=tag, value=i,
                               limit="one section per tag")
        if e["flags"]:
            raise NetFileError(f"{name} section {tag} has flags this reader does not know",
                               field=f"{tag}.flags", value=e["flags"], limit=0)
        if start + size > len(data):
            raise NetFileError(f"{name} section {tag} runs past the end", field=tag,
                               value=start + size, limit=len(data))
        if start % ALIGN or start < table_end:
            raise NetFileError(f"{name} section {tag} does not start on a {ALIGN}-byte boundary "
                               "after the section table", field=tag, value=start,
                               limit=f"multiple of {ALIGN}, >= {table_end}")
        body = data[start : start + size]
        if _crc(body) != e["crc32"]:
            raise NetFileError(f"{name} section {tag} is corrupt (CRC mismatch)", field=tag,
                               value=_crc(body), limit=e["crc32"])
        sections[tag] = body
        spans.append((start, start + size, tag))
    _check_padding(data, table_end, spans, name)
    if "META" not in sections:
        raise NetFileError(f"{name} has no META section", field="META")
    meta = parse_meta(sections.pop("META"), name)
    compiler = bytes(hdr["compiler_version"]).rstrip(b"\0").decode("ascii", "replace")
    net = NetFile(meta=meta, commands=sections.pop("CMDS", b""),
                  weights=sections.pop("WGTS", b""), constants=sections.pop("CNST", b""),
                  golden=sections.pop("GOLD", b""), format_version=version,
                  compiler_version=compiler, extra=sections)
    check(net, name)
    return net


def _check_header(hdr: dict[str, Any], name: str) -> None:
    """The header fields version 1 fixes: its size, no flags, reserved words zero."""
    if hdr["header_size"] != HEADER.size:
        raise NetFileError(f"{name} header size is not this format's", field="header_size",
                           value=hdr["header_size"], limit=HEADER.size)
    if hdr["flags"]:
        raise NetFileError(f"{name} header has flags this reader does not know",
                           field="flags", value=hdr["flags"], limit=0)
    if any(hdr["rsvd"]):
        raise NetFileError(f"{name} header has reserved fields set", field="rsvd",
                           value=list(hdr["rsvd"]), limit="all 0")


def _check_padding(data: bytes, table_end: int, spans: list[tuple[int, int, str]],
                   name: str) -> None:
    """Sections do not overlap, and every byte outside the header, the table and the
    sections (which no CRC covers) is alignment padding: zero, shorter than
    :data:`ALIGN` per gap, ending the file at the first aligned offset after the last
    section (exactly what :func:`encode` writes)."""
    pos, prev = table_end, "the section table"
    for start, end, tag in sorted(spans):
        if start < pos:
            raise NetFileError(f"{name} section {tag} overlaps {prev}", field=tag,
                               value=start, limit=f">= {pos}")
        _zero_gap(data, pos, start, f"before section {tag}", name)
        if end > start:
            pos, prev = end, f"section {tag}"
    if len(data) != -(-pos // ALIGN) * ALIGN and spans:
        raise NetFileError(f"{name} has bytes after its last section", field="file_size",
                           value=len(data), limit=-(-pos // ALIGN) * ALIGN)
    _zero_gap(data, pos, len(data), "at the end", name)


def _zero_gap(data: bytes, a: int, b: int, where: str, name: str) -> None:
    if b - a >= ALIGN:
        raise NetFileError(f"{name} has {b - a} bytes no section holds {where}",
                           field="padding", value=b - a, limit=f"< {ALIGN}")
    if data[a:b].strip(b"\0"):
        raise NetFileError(f"{name} has non-zero padding {where} (covered by no CRC)",
                           field="padding", value=a, limit="zero bytes")


# -- META as bounded JSON --------------------------------------------------------------------
# A JSON string, or an unterminated one up to the end (so a stray quote costs one linear scan)
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.S)


class _Unbounded(str):
    """A number literal the parser refused to convert; reported with its JSON path."""

    def __repr__(self) -> str:
        return f"{self[:12]}...({len(self)} characters)"


def _number(convert: Any) -> Any:
    return lambda text: convert(text) if len(text) <= LIMITS["number_chars"] else \
        _Unbounded(text)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):   # which copy wins would be the reader's guess
        keys = [k for k, _ in pairs]
        raise NetFileError("META has an object with a duplicate key", field="META",
                           value=next(k for i, k in enumerate(keys) if k in keys[:i])[:64])
    return out


def json_depth(text: str) -> int:
    """Deepest nesting of ``[``/``{`` outside strings, in linear time (no recursion)."""
    bare = np.frombuffer(_JSON_STRING.sub("", text).encode("utf-8", "replace"), np.uint8)
    step = (np.isin(bare, (0x5B, 0x7B)).astype(np.int64)
            - np.isin(bare, (0x5D, 0x7D)).astype(np.int64))
    return int(np.cumsum(step).max(initial=0))


def parse_meta(raw: bytes, name: str = "net.bin") -> dict[str, Any]:
    """META bytes -> dict, bounded before the parser sees them: size, nesting depth (before
    ``json.loads`` recurses), number literal lengths, duplicate keys; then :func:`bounded`."""
    if len(raw) > LIMITS["meta_bytes"]:
        raise NetFileError(f"{name} metadata is too large", field="META", value=len(raw),
                           limit=LIMITS["meta_bytes"])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise NetFileError(f"{name} metadata is not valid JSON: {e}", field="META") from None
    depth = json_depth(text)
    if depth > LIMITS["json_depth"]:
        raise NetFileError(f"{name} metadata nests {depth} deep", field="META", value=depth,
                           limit=LIMITS["json_depth"])
    try:
        meta = json.loads(text, parse_int=_number(int), parse_float=_number(float),
                          object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as e:
        raise NetFileError(f"{name} metadata is not valid JSON: {e}", field="META") from None
    except RecursionError:   # the depth scan above makes this unreachable; never a crash
        raise NetFileError(f"{name} metadata nests too deep", field="META",
                           limit=LIMITS["json_depth"]) from None
    # valid JSON of the wrong shape would otherwise surface as a KeyError/AttributeError
    # deep in the runtime
    if not isinstance(meta, dict):
        raise NetFileError(f"{name} metadata is not a JSON object", field="META",
                           value=type(meta).__name__)
    return meta


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _short(v: Any) -> Any:
    """A value small enough for an error message."""
    if _is_int(v) and abs(v) >= 10**24:
        return f"<integer of {v.bit_length()} bits>"
    text = repr(v) if isinstance(v, (dict, list, tuple, str)) else ""
    return f"{text[:60]}..." if len(text) > 64 else v


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def bounded(node: Any, name: str = "net.bin", path: str = "", depth: int = 0) -> None:
    """Every number, string, key and depth of META within ``LIMITS`` (JSON types only)."""
    fail = MetaReader(name).fail
    if depth > LIMITS["json_depth"]:
        fail(path or "META", "nests too deep", depth, LIMITS["json_depth"])
    if isinstance(node, dict):
        for k, v in node.items():
            if not isinstance(k, str) or len(k) > LIMITS["string_chars"]:
                fail(path or "META", "has a key too long or not a string", k,
                     LIMITS["string_chars"])
            bounded(v, name, _join(path, k), depth + 1)
    elif isinstance(node, (list, tuple)):
        for i, v in enumerate(node):
            bounded(v, name, _join(path, i), depth + 1)
    elif isinstance(node, _Unbounded):
        fail(path, "is a number literal too long to read", node,
             f"{LIMITS['number_chars']} characters")
    elif isinstance(node, str) and len(node) > LIMITS["string_chars"]:
        fail(path, "is too long", len(node), LIMITS["string_chars"])
    elif _is_int(node) and abs(node) > LIMITS["int_abs"]:
        fail(path, "does not fit 64 bits", node, LIMITS["int_abs"])
    elif not (node is None or isinstance(node, (bool, float, int, str))):
        fail(path, "is not a JSON value", type(node).__name__)


class MetaReader:
    """Typed, bounded reads of META; every refusal names the JSON path, value and limit."""

    def __init__(self, name: str) -> None:
        self.name = name

    def fail(self, path: str, what: str, value: Any = None, limit: Any = None) -> NoReturn:
        raise NetFileError(f"{self.name} metadata: {path} {what}", field=path,
                           value=_short(value), limit=limit)

    def obj(self, v: Any, path: str) -> dict[str, Any]:
        if not isinstance(v, dict):
            self.fail(path, "is not an object", type(v).__name__, "object")
        return v

    def lst(self, v: Any, path: str) -> list[Any]:
        if not isinstance(v, (list, tuple)):
            self.fail(path, "is not a list", type(v).__name__, "list")
        return list(v)

    def integer(self, v: Any, path: str, lo: int = 0, hi: int | None = None) -> int:
        hi = LIMITS["int_abs"] if hi is None else hi
        if not _is_int(v) or not lo <= v <= hi:
            self.fail(path, "is not an integer in range", v, f"{lo}..{hi}")
        return v

    def number(self, v: Any, path: str, lo: float = -math.inf, finite: bool = True) -> float:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)
        if not ok or (finite and not math.isfinite(v)) or v < lo:
            self.fail(path, "is not a number in range", v,
                      f">= {lo}" + (", finite" if finite else ""))
        return float(v)

    def text(self, v: Any, path: str, choices: tuple[str, ...] | None = None) -> str:
        if not isinstance(v, str) or (choices is not None and v not in choices):
            self.fail(path, "is not " + ("one of the allowed names" if choices else "a string"),
                      v, choices)
        return v

    def flag(self, v: Any, path: str) -> bool:
        if not isinstance(v, bool):
            self.fail(path, "is not true or false", v, "boolean")
        return v

    def names(self, v: Any, path: str) -> list[str]:
        return [self.text(x, _join(path, i)) for i, x in enumerate(self.lst(v, path))]

    def shape(self, v: Any, path: str) -> tuple[int, ...]:
        dims = self.lst(v, path)
        if len(dims) > LIMITS["rank"]:
            self.fail(path, "has too many dimensions", len(dims), LIMITS["rank"])
        out = tuple(self.integer(d, _join(path, i), 0, LIMITS["dim"]) for i, d in enumerate(dims))
        if math.prod(out) > LIMITS["elements"]:   # exact integers: no int64 wrap
            self.fail(path, "has too many elements", math.prod(out), LIMITS["elements"])
        return out

    def dtype(self, v: Any, path: str) -> np.dtype:
        if not isinstance(v, str) or v not in DTYPES:
            self.fail(path, "is not an allowed element type", v, NB["dtypes"])
        return DTYPES[v]

    def entry(self, v: Any, path: str, blob: int, align: int) -> tuple[np.dtype, tuple]:
        """``{offset, dtype, shape}`` of an array in a blob of ``blob`` bytes."""
        e = self.obj(v, path)
        dtype = self.dtype(e.get("dtype"), _join(path, "dtype"))
        shape = self.shape(e.get("shape"), _join(path, "shape"))
        off = self.integer(e.get("offset"), _join(path, "offset"))
        if off % align:
            self.fail(_join(path, "offset"), "is not aligned", off, f"multiple of {align}")
        end = off + math.prod(shape) * dtype.itemsize
        if end > blob:
            self.fail(path, "lies outside its section", end, blob)
        return dtype, shape


def check(net: NetFile, name: str = "net.bin") -> None:
    """META bounded, typed and consistent with itself and the sections it indexes (CMDS
    records, WGTS size, CNST entries, the arena plan), so a hand-edited or damaged file fails
    here with NetFileError naming the JSON path instead of deep inside the runtime or, worse,
    running differently (netbin.md, "What a reader rejects").  The I/O specs, the golden
    pair, the commands and the CPU steps are checked by :func:`dvsdk.runtime.records.verify`."""
    meta = net.meta
    m = MetaReader(name)
    m.obj(meta, "META")
    bounded(meta, name)
    missing = [k for k in META_REQUIRED if k not in meta]
    if missing:
        raise NetFileError(f"{name} metadata lacks {', '.join(missing)}", field="META",
                           value=missing, limit=META_REQUIRED)
    if "format_version" in meta and m.integer(meta["format_version"], "format_version") \
            != net.format_version:
        m.fail("format_version", "disagrees with the header", meta["format_version"],
               net.format_version)
    m.flag(meta.get("transposed", False), "transposed")
    hw = m.obj(meta.get("hardware", {}), "hardware")
    for key in ("ub_size_min", "max_kernel_size", "svn_version_min"):
        m.integer(hw.get(key, 0), f"hardware.{key}", 0, 1 << 32)
    m.names(hw.get("units", ["conv"]), "hardware.units")
    arena = m.obj(meta["arena"], "arena")
    arena_size = m.integer(arena.get("size"), "arena.size", 0, LIMITS["arena_bytes"])
    weights = m.obj(meta.get("weights", {}), "weights")
    if "size" in weights and m.integer(weights["size"], "weights.size") != len(net.weights):
        m.fail("weights.size", "disagrees with the WGTS section", weights["size"],
               len(net.weights))
    m.flag(weights.get("quantized", False), "weights.quantized")
    constants = m.obj(meta.get("constants") or {}, "constants")
    for cname, e in constants.items():
        m.entry(e, f"constants.{cname}", len(net.constants), ALIGNMENT["constants"])
    tensors = m.obj(meta["tensors"], "tensors")
    if len(tensors) > LIMITS["tensors"]:
        m.fail("tensors", "has too many tensors", len(tensors), LIMITS["tensors"])
    device = {}
    for tname, t in tensors.items():
        path = f"tensors.{tname}"
        if tname in constants or not tname:
            m.fail(path, "is also a constant (or has no name)", tname, "one meaning per name")
        t = m.obj(t, path)
        shape = m.shape(t.get("shape"), f"{path}.shape")
        if "dtype" in t:
            m.dtype(t["dtype"], f"{path}.dtype")
        if t.get("device") is not None:
            device[tname] = _check_device(m, t["device"], f"{path}.device", shape, arena_size)
    extent = -(-max((o + n for o, n in device.values()), default=0) // 64) * 64
    if arena_size != extent:   # the plan is exactly as large as its tensors (64-byte slots)
        m.fail("arena.size", "is not the extent of the device tensors (rounded to 64)",
               arena_size, extent)
    offsets = arena.get("offsets")
    if device or offsets is not None:   # the plan and the placements say the same thing twice
        offsets = m.obj(offsets, "arena.offsets")
        for tname in sorted(set(offsets) | set(device)):
            want = device[tname][0] if tname in device else None
            if offsets.get(tname) != want:
                m.fail(f"arena.offsets.{tname}", "disagrees with the tensor's device placement",
                       offsets.get(tname), want)
    for side in ("inputs", "outputs"):
        for i, spec in enumerate(m.lst(meta[side], side)):
            spec = m.obj(spec, f"{side}[{i}]")
            lay = m.text(spec.get("layout", "NCHW"), f"{side}[{i}].layout", LAYOUTS)
            if lay == "NHWC" and len(m.shape(spec.get("shape"), f"{side}[{i}].shape")) != 4:
                m.fail(f"{side}[{i}].layout", "NHWC is for 4-D tensors", lay, "NCHW or ND")
    check_program(m, meta["program"], len(net.command_records()), tensors, constants)
    if meta.get("labels") is not None:
        m.names(meta["labels"], "labels")
    if meta.get("golden_omitted") is not None:
        m.text(meta["golden_omitted"], "golden_omitted")
    if meta.get("task") is not None:
        _check_task(meta, name)


def _check_task(meta: dict, name: str) -> None:
    """META ``task`` (a head, :mod:`dvsdk.tasks.spec`): valid, naming real outputs."""
    from .errors import TaskError
    from .tasks.spec import TaskSpec

    try:
        spec = TaskSpec.from_meta(meta["task"])
    except TaskError as e:
        raise NetFileError(f"{name} metadata: {e.message}", field=e.field, value=e.value,
                           limit=e.limit) from None
    names = [o.get("name") for o in meta["outputs"] if isinstance(o, dict)]
    for out in spec.outputs or []:
        if out not in names:
            raise NetFileError(f"{name} metadata: the task reads an output the network "
                               "lacks", field="task.outputs", value=out, limit=names)


def _check_device(m: MetaReader, dev: Any, path: str, shape: tuple[int, ...], arena: int
                  ) -> tuple[int, int]:
    """A device placement: (offset, bytes) in the arena, 2-byte aligned (§6.8)."""
    dev = m.obj(dev, path)
    off = m.integer(dev.get("offset"), f"{path}.offset", 0, arena)
    if off % ALIGNMENT["activation"]:
        m.fail(f"{path}.offset", "is not aligned as the DV700 requires", off,
               f"multiple of {ALIGNMENT['activation']}")
    hwc = m.lst(dev.get("hwc"), f"{path}.hwc")
    if len(hwc) != 3:
        m.fail(f"{path}.hwc", "is not (H, W, C)", hwc, 3)
    hwc = [m.integer(d, f"{path}.hwc[{i}]", 1, LIMITS["hw_dim"]) for i, d in enumerate(hwc)]
    # the runtime moves (N, C, H, W) and (N, C) values as N samples of (H, W, C) and
    # (1, 1, C), back to back (§1, §4.10); "batch" is N, absent for 1
    batch = m.integer(dev.get("batch", 1), f"{path}.batch", 1, LIMITS["batch"])
    want = {4: list(shape[2:]) + list(shape[1:2]), 2: [1, 1] + list(shape[1:])}.get(len(shape))
    if not shape or hwc != want:
        m.fail(f"{path}.hwc", "is not the (H, W, C) of the tensor's (N, C, H, W) or (N, C) "
               "shape", hwc, want)
    if shape[0] != batch:
        m.fail(f"{path}.batch", "is not the N of the tensor's shape", batch, shape[0])
    m.flag(dev.get("transpose", False), f"{path}.transpose")
    end = off + 2 * math.prod(hwc) * batch
    if end > arena:
        m.fail(path, "lies outside the arena", end, arena)
    return off, end - off


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
