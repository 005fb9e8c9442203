"""DMP's header facts (``tests/data/dmp_abi_facts.json``) as struct codecs, independent of
dvsdk's ``firmware_spec``.

The fake kernel module (``tests/fakedv.py``) decodes what dvsdk sends with these codecs and
answers with the ioctl numbers of the facts, so a struct or a number that drifts in the spec
is seen as a wrong argument by the fake, as the real module would see it.  The facts were
printed by compiling DMP's public headers (provenance in the JSON and in
``tests/data/README.md``); nothing here reads ``firmware_spec``.
"""

from __future__ import annotations

import json
import struct as _struct
from functools import cache
from pathlib import Path
from typing import Any

FACTS: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data" / "dmp_abi_facts.json").read_text())
#: every struct of the facts by its C name
STRUCTS: dict[str, dict] = {**FACTS["structs"], **FACTS["ion"], **FACTS["linux"],
                            "run_argument": FACTS["structs_run_argument"],
                            "wait_argument_before_96130ca":
                                FACTS["wait_argument_before_96130ca"]}
IOCTLS: dict[str, int] = FACTS["ioctls"]
PRIMITIVE = {"__u8": "B", "__s8": "b", "char": "B", "__u16": "H", "__s16": "h",
             "__u32": "I", "__s32": "i", "__u64": "Q", "__s64": "q"}


class FactStruct:
    """Pack / unpack one C struct of the facts as nested dicts (arrays as lists)."""

    def __init__(self, name: str) -> None:
        self.name = name
        desc = STRUCTS[name]
        self.size = int(desc["size"])
        self.fields = desc["fields"]

    def _elem(self, ctype: str) -> tuple[int, Any]:
        if ctype in PRIMITIVE:
            return _struct.calcsize(PRIMITIVE[ctype]), PRIMITIVE[ctype]
        sub = fact(ctype)
        return sub.size, sub

    def unpack(self, data: bytes, offset: int = 0) -> dict[str, Any]:
        raw = bytes(data[offset:offset + self.size]).ljust(self.size, b"\0")
        out: dict[str, Any] = {}
        for name, d in self.fields.items():
            size, kind = self._elem(d["type"])
            count = d.get("count")
            values = []
            for i in range(count or 1):
                at = d["offset"] + i * size
                values.append(kind.unpack(raw, at) if isinstance(kind, FactStruct)
                              else _struct.unpack_from("<" + kind, raw, at)[0])
            out[name] = values if count else values[0]
        return out

    def pack(self, values: dict[str, Any]) -> bytes:
        buf = bytearray(self.size)
        for name, value in values.items():
            d = self.fields[name]  # KeyError: a field the header does not have
            size, kind = self._elem(d["type"])
            items = value if d.get("count") else [value]
            for i, v in enumerate(items):
                at = d["offset"] + i * size
                if isinstance(kind, FactStruct):
                    buf[at:at + size] = kind.pack(v)
                else:
                    _struct.pack_into("<" + kind, buf, at, v)
        return bytes(buf)


@cache
def fact(name: str) -> FactStruct:
    """The codec of the struct ``name`` (a C name: ``dmp_dv_kcmd``, ``ion_heap_data``...)."""
    return FactStruct(name)


def c_declarations() -> str:
    """The structs of the facts written as C (the compiler's fixed-width types, fields in
    offset order), for the compile test: written from the facts, not copied from DMP's
    headers, and needing no C library headers (so ``-m32`` works without a 32-bit libc)."""
    ctypes = {"__u8": "__UINT8_TYPE__", "__s8": "__INT8_TYPE__", "char": "char",
              "__u16": "__UINT16_TYPE__", "__s16": "__INT16_TYPE__",
              "__u32": "__UINT32_TYPE__", "__s32": "__INT32_TYPE__",
              "__u64": "__UINT64_TYPE__", "__s64": "__INT64_TYPE__"}
    out, done = [], set()

    def emit(name: str) -> None:
        if name in done:
            return
        for d in STRUCTS[name]["fields"].values():
            if d["type"] not in ctypes:
                emit(d["type"])
        lines = [f"struct {name} {{"]
        for field, d in STRUCTS[name]["fields"].items():
            t = ctypes.get(d["type"], f"struct {d['type']}")
            lines.append(f"  {t} {field}" + (f"[{d['count']}]" if d.get("count") else "") + ";")
        out.append("\n".join(lines + ["};"]))
        done.add(name)

    for name in STRUCTS:
        emit(name)
    return "\n".join(out) + "\n"
