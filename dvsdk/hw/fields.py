"""C integer arithmetic (§7.1) and raw field decoding (§3.2) for the DV700 size math.

The driver computes sizes in C: ``/`` truncates toward zero (:func:`cdiv`; Python's
``//`` floors) and ``uint16``/``uint32`` values wrap (:func:`u16`, :func:`u32`).  Run
descriptors are mappings or attribute objects holding the raw §3.2 field values
(packed bitfields undecoded); an absent field reads as 0, like a zero-initialised C
struct.  Out-of-range values raise :class:`~dvsdk.errors.InvalidArgument` naming the
field, the value and the limit.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

from ..errors import InvalidArgument

#: Largest kernel side the hardware accepts (§6.2, §7.6 ``MAX_CONV_KERNEL_SIZE``).
MAX_KERNEL_SIZE = 7

U16 = 0xFFFF
U32 = 0xFFFFFFFF
I32_MAX = 0x7FFFFFFF

# Raw run fields that are 32 bits wide (§3.2); every other run field is a uint16.
_U32_RUN_FIELDS = frozenset({"conv_pad", "pool_pad"})


def check_int(value: Any, field: str, lo: int = 0, hi: int | None = None) -> int:
    """Return ``value`` as an int if it lies in ``lo..hi``; raise InvalidArgument otherwise.

    Python and numpy integers are accepted; bools, floats and other types are not.
    """
    try:
        v = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        v = None
    if v is None:
        raise InvalidArgument(f"{field} must be an integer", field=field, value=value, limit="int")
    if v < lo or (hi is not None and v > hi):
        limit = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise InvalidArgument(f"{field} out of range", field=field, value=v, limit=limit)
    return v


def check_ints(values: Any, names: tuple[str, ...], field: str, lo: int = 0) -> tuple[int, ...]:
    """Check a fixed-length tuple argument (shape, pads, strides) item by item."""
    try:
        items = tuple(values)
    except TypeError:
        items = None
    if items is None or len(items) != len(names):
        raise InvalidArgument(
            f"{field} must be ({', '.join(names)})", field=field, value=values, limit=len(names)
        )
    return tuple(check_int(v, n, lo) for v, n in zip(items, names, strict=True))


def u16(x: int) -> int:
    return x & U16


def u32(x: int) -> int:
    return x & U32


def i32(x: int) -> int:
    """Reinterpret the low 32 bits of ``x`` as a C ``int``."""
    x &= U32
    return x - (1 << 32) if x & 0x80000000 else x


def cdiv(a: int, b: int) -> int:
    """C ``a / b`` on ``int``: the quotient truncated toward zero (§7 conventions).

    Python's ``//`` floors instead, so ``cdiv(-2, 3) == 0`` while ``-2 // 3 == -1``.
    A zero divisor raises :class:`InvalidArgument` (field ``divisor``).
    """
    if b == 0:
        raise InvalidArgument("division by zero", field="divisor", value=0, limit="!= 0")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def divup(a: int, b: int) -> int:
    """``divup(a, b) = a/b + (a%b ? 1 : 0)`` with C ``int`` semantics (§7.1)."""
    q = cdiv(a, b)
    return q + (1 if a - q * b else 0)


def ceil8(x: int) -> int:
    """⌈x/8⌉ for ``x >= 0``: the number of 8-channel blocks (fact-sheet conventions)."""
    x = check_int(x, "x")
    return (x + 7) >> 3


def popcount(x: int) -> int:
    """Number of 1 bits of a non-negative integer (``conf_node_w`` of §7.1 for topo)."""
    return bin(check_int(x, "x")).count("1")


def topo_num_runs(topo: int) -> int:
    """Runs of a command: position of the highest set bit of ``topo`` + 1, 0 for 0 (§7.1)."""
    return check_int(topo, "topo", 0, U32).bit_length()


def raw_field(obj: Any, name: str, default: Any = None) -> Any:
    """``obj[name]`` for a mapping, else ``obj.name``; ``default`` if absent."""
    return obj.get(name, default) if isinstance(obj, Mapping) else getattr(obj, name, default)


def int_field(obj: Any, name: str, hi: int = U16) -> int:
    """Read a raw integer field (mapping or attribute object); absent means 0."""
    return check_int(raw_field(obj, name, 0), name, 0, hi)


def run_field(run: Any, name: str) -> int:
    return int_field(run, name, U32 if name in _U32_RUN_FIELDS else U16)


def kernel_xy(run: Any) -> tuple[int, int]:
    """``p``: kx = p & 0xFF, ky = (p >> 8) & 0xFF, 0 meaning kx (§3.2, §4.2)."""
    p = run_field(run, "p")
    kx = p & 0xFF
    ky = ((p >> 8) & 0xFF) or kx
    for axis, k in (("kx", kx), ("ky", ky)):
        if not 1 <= k <= MAX_KERNEL_SIZE:
            raise InvalidArgument(
                f"kernel size {axis}={k} out of range",
                field="p",
                value=p,
                limit=f"{axis} in 1..{MAX_KERNEL_SIZE}",
            )
    return kx, ky


def conv_pads(run: Any) -> tuple[int, int, int, int]:
    """``conv_pad`` as (left, right, top, bottom) with the 7/8/7/8-bit masks (§3.2)."""
    v = run_field(run, "conv_pad")
    return v & 0x7F, (v >> 8) & 0xFF, (v >> 16) & 0x7F, (v >> 24) & 0xFF


def pool_pads(run: Any) -> tuple[int, int, int, int]:
    """``pool_pad`` as (left, right, top, bottom), 8 bits each (kernel masks, §3.2)."""
    v = run_field(run, "pool_pad")
    return v & 0xFF, (v >> 8) & 0xFF, (v >> 16) & 0xFF, (v >> 24) & 0xFF


def byte_pair(run: Any, name: str) -> tuple[int, int]:
    """A uint16 field packing [7:0] X and [15:8] Y (strides, sizes, dilation)."""
    v = run_field(run, name)
    return v & 0xFF, (v >> 8) & 0xFF


def nonzero_pair(run: Any, name: str) -> tuple[int, int]:
    """A stride/pool-stride pair that will be used as a divisor: both bytes must be >= 1."""
    x, y = byte_pair(run, name)
    if x == 0 or y == 0:
        raise InvalidArgument(
            f"{name} has a zero X or Y byte; the driver would divide by zero"
            + (' (the "zero pool-stride trap", §15.4)' if name == "pool_stride" else ""),
            field=name,
            value=run_field(run, name),
            limit="X and Y bytes >= 1, e.g. 0x0101",
        )
    return x, y


def run_dilation(run: Any) -> tuple[int, int]:
    """``conv_dilation`` per axis, 0 patched to 1 (§3.2, §6.7 step 2)."""
    dx, dy = byte_pair(run, "conv_dilation")
    return max(1, dx), max(1, dy)
