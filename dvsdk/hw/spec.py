"""The DV700 described once: loads ``firmware_spec/*.yaml``.

Every binary layout in dvsdk (raw commands, kernel structs, the conv configuration
image, register offsets, packet bit fields, enumerations) comes from these files,
the way a kernel ``uapi`` header is the single description of an ABI.  Structs
become numpy structured dtypes, so encoding is ``np.zeros((), dtype)`` plus field
assignment and decoding is ``np.frombuffer``.

>>> from dvsdk.hw.spec import SPEC
>>> SPEC.struct("conv_v0").size
1864
>>> SPEC.reg("conv", "KICK")
1032
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

from ..errors import InvalidArgument, SpecError

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:
        from importlib.abc import Traversable

_SCALARS = {
    "u8": "<u1", "u16": "<u2", "u32": "<u4", "u64": "<u8",
    "i8": "<i1", "i16": "<i2", "i32": "<i4", "i64": "<i8", "f16": "<f2",
}


def spec_files() -> Traversable:
    """The firmware_spec files: a source checkout's own folder (so a checkout run through
    another one's editable install reads its own spec), else the installed package data
    ``dvsdk.firmware_spec``, which may be a folder inside a zip or wheel: open its files
    with ``/``, ``read_text``, ``read_bytes``, ``iterdir`` (the Traversable API)."""
    top = Path(__file__).resolve().parents[2]
    here = top / "firmware_spec"
    if (top / "pyproject.toml").is_file() and (here / "commands.yaml").is_file():
        return here
    return resources.files("dvsdk.firmware_spec")


def spec_dir() -> Path:
    """The firmware_spec files as a directory on the file system.  An install that keeps
    them elsewhere (in a zip) raises :class:`SpecError`: :func:`spec_files` reads any."""
    files = spec_files()
    if isinstance(files, Path):
        return files
    raise SpecError("the firmware_spec files are not a directory (a zip install?): "
                    "read them with dvsdk.hw.spec.spec_files()", field="path", value=str(files))


@dataclass(frozen=True)
class BitField:
    """A packed word of sub-fields, e.g. ``conv_pad`` = left | right<<8 | top<<16 | bottom<<24."""

    name: str
    parts: dict[str, tuple[int, int]]  # part -> (lsb, width)

    def pack(self, **values: int) -> int:
        word = 0
        for part, value in values.items():
            if part not in self.parts:
                raise InvalidArgument(f"unknown sub-field of {self.name}", field=part,
                                      limit=sorted(self.parts))
            lsb, width = self.parts[part]
            value = int(value)
            if not 0 <= value < (1 << width):
                raise InvalidArgument(f"{self.name}.{part} does not fit in {width} bits",
                                      field=f"{self.name}.{part}", value=value,
                                      limit=f"0..{(1 << width) - 1}")
            word |= value << lsb
        return word

    def unpack(self, word: int) -> dict[str, int]:
        return {p: (int(word) >> lsb) & ((1 << w) - 1) for p, (lsb, w) in self.parts.items()}

    def get(self, word: int, part: str) -> int:
        lsb, width = self.parts[part]
        return (int(word) >> lsb) & ((1 << width) - 1)


@dataclass(frozen=True)
class Field:
    name: str
    offset: int
    type: str
    count: int = 1
    bits: str | None = None
    enum: str | None = None


class Struct:
    """A fixed binary layout with a numpy structured dtype."""

    def __init__(self, name: str, size: int, fields: list[Field], dtype: np.dtype,
                 sent_size: dict[str, int] | None = None) -> None:
        self.name = name
        self.size = size
        self.fields = fields
        self.dtype = dtype
        self.sent_size = sent_size
        self.by_name = {f.name: f for f in fields}

    def __repr__(self) -> str:
        return f"<Struct {self.name} {self.size} bytes>"

    def offset(self, name: str) -> int:
        return self.by_name[name].offset

    def zeros(self) -> np.ndarray:
        return np.zeros((), self.dtype)

    def pack(self, values: Mapping[str, Any]) -> bytes:
        """Encode a (nested) mapping; missing fields are zero."""
        rec = self.zeros()
        _assign(rec, values, self.name)
        return rec.tobytes()

    def unpack(self, data: bytes | np.ndarray, offset: int = 0) -> dict[str, Any]:
        """Decode ``size`` bytes at ``offset`` into nested dicts / lists of ints."""
        raw = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data
        if raw.dtype != np.uint8:
            raw = raw.view(np.uint8)
        if offset < 0 or offset + self.size > raw.size:
            raise InvalidArgument(f"{self.name} needs {self.size} bytes", field="data",
                                  value=raw.size - offset, limit=self.size)
        rec = raw[offset : offset + self.size].view(self.dtype)[0]
        return _to_python(rec)

    def record_array(self, data: np.ndarray, count: int, offset: int = 0) -> np.ndarray:
        """A read-only structured view of ``count`` consecutive records."""
        end = offset + count * self.size
        if offset < 0 or end > data.size:
            raise InvalidArgument(f"{count} x {self.name} do not fit", field="data",
                                  value=data.size, limit=end)
        return data[offset:end].view(self.dtype)

    def bytes_sent(self, runs: int) -> int:
        if not self.sent_size:
            return self.size
        return self.sent_size["base"] + self.sent_size["per_run"] * runs


def _assign(rec: np.ndarray, values: Mapping[str, Any], where: str) -> None:
    names = rec.dtype.names or ()
    for key, value in values.items():
        if key not in names:
            raise InvalidArgument(f"{where} has no field {key!r}", field=key, limit=list(names))
        sub = rec[key]
        if sub.dtype.names:  # nested struct (possibly an array of them)
            if sub.shape:
                for i, item in enumerate(value):
                    _assign(sub[i], item, f"{where}.{key}[{i}]")
            else:
                _assign(sub, value, f"{where}.{key}")
        else:
            try:
                rec[key] = value
            except (OverflowError, ValueError, TypeError):
                raise InvalidArgument(f"{where}.{key} does not fit its field", field=key,
                                      value=value, limit=str(sub.dtype)) from None
            if np.issubdtype(sub.dtype, np.integer) and np.any(
                np.asarray(rec[key]) != np.asarray(value)
            ):
                raise InvalidArgument(f"{where}.{key} does not fit its field", field=key,
                                      value=value, limit=str(sub.dtype))


def _to_python(rec: Any) -> Any:
    if isinstance(rec, np.void) and rec.dtype.names:
        return {n: _to_python(rec[n]) for n in rec.dtype.names}
    if isinstance(rec, np.ndarray):
        if rec.dtype.names:
            return [_to_python(r) for r in rec]
        return rec.tolist()
    if isinstance(rec, np.generic):
        return rec.item()
    return rec


class Enum:
    """A code table, e.g. ``actfunc``: name -> code and back."""

    def __init__(self, name: str, codes: dict[str, int]) -> None:
        self.name = name
        self.codes = dict(codes)
        self.names = {v: k for k, v in codes.items()}

    def __getitem__(self, name: str) -> int:
        return self.codes[name]

    def __getattr__(self, name: str) -> int:
        try:
            return self.codes[name]
        except KeyError:
            raise AttributeError(name) from None

    def __contains__(self, code: object) -> bool:
        return code in self.names

    def name_of(self, code: int) -> str:
        return self.names.get(int(code), f"<{self.name} {code}>")


class Spec:
    """Everything in ``firmware_spec/``, parsed and cross-checked."""

    def __init__(self, root: Traversable) -> None:
        self.root = root
        self.commands = _load(root / "commands.yaml")
        self.registers = _load(root / "registers.yaml")
        self.stream = _load(root / "stream.yaml")
        self.netbin = _load(root / "netbin.yaml")
        self.kernel = _load(root / "kernel.yaml")
        for name, desc in self.netbin["structs"].items():
            if name in self.commands["structs"]:
                raise SpecError(f"struct {name} defined twice", field="struct", value=name)
            self.commands["structs"][name] = desc
        self.bitfields = {
            n: BitField(n, {p: (int(v[0]), int(v[1])) for p, v in parts.items()})
            for n, parts in self.commands["bitfields"].items()
        }
        for n, codes in self.commands["enums"].items():
            bad = [k for k in codes if not isinstance(k, str)]
            if bad:  # YAML 1.1 reads unquoted on/off/yes/no as booleans
                raise SpecError(f"enum {n} has a non-string name (quote it)", field=n,
                                value=bad[0])
        self.enums = {n: Enum(n, c) for n, c in self.commands["enums"].items()}
        self.limits: dict[str, int] = dict(self.commands["limits"])
        self._structs: dict[str, Struct] = {}
        for name in self.commands["structs"]:
            self.struct(name)
        self.packet = BitField("write_packet", {
            p: (int(v[0]), int(v[1])) for p, v in self.stream["write_packet"].items()
        })
        self.window = int(self.registers["window"])
        self.status = Enum("status", self.registers["status_codes"])

    # -- structs -----------------------------------------------------------------------
    def struct(self, name: str) -> Struct:
        if name in self._structs:
            return self._structs[name]
        desc = self.commands["structs"].get(name)
        if desc is None:
            raise SpecError(f"unknown struct {name!r}", field="struct", value=name)
        size = int(desc["size"])
        fields = [Field(**f) for f in desc["fields"]]
        names, formats, offsets = [], [], []
        end_prev, prev = 0, None
        for f in sorted(fields, key=lambda f: f.offset):
            if f.type in _SCALARS:
                base = np.dtype(_SCALARS[f.type])
            else:
                base = self.struct(f.type).dtype
            fmt = base if f.count == 1 else np.dtype((base, (f.count,)))
            if f.offset < end_prev:
                raise SpecError(f"{name}.{f.name} overlaps {prev}", field=f.name, value=f.offset)
            end_prev, prev = f.offset + fmt.itemsize, f.name
            if f.bits and f.bits not in self.commands["bitfields"]:
                raise SpecError(f"{name}.{f.name}: unknown bitfield {f.bits}", field=f.name)
            if f.enum and f.enum not in self.commands["enums"]:
                raise SpecError(f"{name}.{f.name}: unknown enum {f.enum}", field=f.name)
            names.append(f.name)
            formats.append(fmt)
            offsets.append(f.offset)
        if end_prev > size:
            raise SpecError(f"struct {name} fields end at {end_prev}", field="size",
                            value=size, limit=end_prev)
        dtype = np.dtype({"names": names, "formats": formats, "offsets": offsets,
                          "itemsize": size})
        st = Struct(name, size, fields, dtype, desc.get("sent_size"))
        self._structs[name] = st
        return st

    def bits(self, name: str) -> BitField:
        return self.bitfields[name]

    def enum(self, name: str) -> Enum:
        return self.enums[name]

    # -- registers ---------------------------------------------------------------------
    def unit(self, unit: str) -> dict[str, Any]:
        try:
            return self.registers["units"][unit]
        except KeyError:
            raise InvalidArgument("unknown unit", field="unit", value=unit,
                                  limit=sorted(self.registers["units"])) from None

    def reg(self, unit: str, name: str) -> int:
        """Byte offset of a register in a unit's window."""
        regs = self.unit(unit)["registers"]
        if name not in regs:
            raise SpecError(f"unit {unit} has no register {name}", field="register", value=name)
        return int(regs[name]["offset"])

    def reg_info(self, unit: str, name: str) -> dict[str, Any]:
        return dict(self.unit(unit)["registers"][name])

    def ioctl(self, name: str) -> int:
        """An ioctl number of ``kernel.yaml``, derived like the kernel's ``_IOW``/``_IOR``/
        ``_IOWR``: ``_IOC(dir, type, nr, sizeof(struct))`` with the struct's size from
        ``commands.yaml``."""
        desc = self.kernel["ioctls"].get(name)
        if desc is None:
            raise SpecError(f"unknown ioctl {name!r}", field="ioctl", value=name,
                            limit=sorted(self.kernel["ioctls"]))
        enc = BitField("ioctl", {k: (int(v[0]), int(v[1]))
                                 for k, v in self.kernel["ioctl_encoding"].items()})
        return enc.pack(nr=int(desc["nr"]), type=int(desc["type"]),
                        size=self.struct(desc["struct"]).size,
                        dir=int(self.kernel["ioctl_directions"][desc["dir"]]))

    def stream_reg(self, name: str) -> int:
        """Register *word index* used inside command-stream write packets."""
        return int(self.stream["stream_registers"][name])


def _load(path: Traversable) -> dict[str, Any]:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise SpecError(f"cannot load {path.name}: {e}", field="path", value=str(path)) from None


@functools.cache
def load_spec(root: str | None = None) -> Spec:
    """The spec in the folder ``root``, or by default the installed one (:func:`spec_files`)."""
    return Spec(Path(root) if root else spec_files())


SPEC = load_spec()
