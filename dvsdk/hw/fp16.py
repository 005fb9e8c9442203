"""FP16, the DV700's storage format: bit patterns of parameters and whole-array conversions.

The hardware stores every tensor and parameter as IEEE binary16 (dv700-interface.md §1,
conventions).  Scalars: :func:`fp16_bits`, :func:`fp16_value`, and the IPU's FP24
(:func:`fp24`).  Arrays (the simulator's and the layout's data paths): :func:`f16_to_f32`,
:func:`round_f16` (round float32 to the nearest binary16 value, kept in float32) and
:func:`f32_to_f16` (float32 holding binary16 values to binary16), :func:`to_f16` (any
float32 rounded to binary16) and :func:`to_f32` (the inverse, exact).  numpy's own
float16 casts are exact but branch per element and run several times slower on data
mixing zeros with other values (every ReLU output), so these use integer bit operations
with the same results, or the compiled module's one-pass loops (:mod:`dvsdk.native`)
where it is built.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .. import native

_U32 = np.uint32
_U16LE = np.dtype("<u2")
# 2*|x| bit patterns (the sign shifted out) of the binary16 range limits
_TWICE_MIN_NORMAL = _U32(0x38800000 << 1)   # 2**-14: below it binary16 is subnormal
_TWICE_OVERFLOW = _U32(0x477FF000 << 1)     # 65520: from it a float32 rounds to inf
_HALF_MAX_SAFE = np.float32(65520.0)
#: the one NaN dvsdk stores (firmware_spec/arithmetic.md): binary16 0x7E00, float32 0x7FC00000
NAN_F16 = np.uint16(0x7E00).view(np.float16)
NAN_F32 = np.uint32(0x7FC00000).view(np.float32)


def fp16_bits(value: float) -> int:
    """IEEE binary16 bit pattern of ``value`` (round to nearest even)."""
    return int(np.array(value, np.float16).view(np.uint16))


@lru_cache(maxsize=4096)
def fp16_value(bits: int) -> float:
    """The float a binary16 bit pattern stands for (memoized: the simulator decodes the
    same few register fields for every command)."""
    return float(np.array(int(bits) & 0xFFFF, np.uint16).view(np.float16))


def fp24(f: float) -> int:
    """Encode a float as the IPU's FP24 (s1 e7 m16, bias 63) (§9.1).

    ``f`` is first rounded to float32 (the driver computes ``1.0f/width``).
    With ``exp8``/``mant23`` the float32 exponent/mantissa fields and
    ``e = exp8 - 64``:

    * ``exp8 == 0`` or ``e <= 0`` → 0 (sign dropped);
    * ``exp8 == 255`` or ``e >= 127`` → ``0x7F0000 | sign << 23`` (inf and NaN too);
    * else ``(e << 16) | sign << 23 | (mant23 >> 7)``, plus 1 if bit 6 of mant23
      is set (round half up; the carry may ripple into the exponent).

    Examples: ``fp24(1/3) == 0x3D5555``, ``fp24(1/256) == 0x370000``.
    """
    bits = int(np.array(f, dtype=np.float32).view(np.uint32))
    sign = bits >> 31
    exp8 = (bits >> 23) & 0xFF
    mant = bits & 0x7FFFFF
    e = exp8 - 64
    if exp8 == 0 or e <= 0:
        return 0
    if exp8 == 255 or e >= 127:
        return 0x7F0000 | (sign << 23)
    v = (e << 16) | (sign << 23) | (mant >> 7)
    if mant & 0x40:
        v += 1
    return v


def denormals_work() -> bool:
    """False when float32 subnormals are flushed to zero in this thread (FTZ/DAZ, which a
    library loaded into the process may switch on): the scaling tricks of
    :func:`f16_to_f32` and :func:`f32_to_f16` then fall back to numpy's casts."""
    return bool(np.multiply(np.float32(1e-45), np.float32(2.0**112)) != 0)


def _f16_to_f32_bits(h: np.ndarray) -> np.ndarray:
    """Exact binary16 -> float32 by bit operations (builds :func:`f16_to_f32`'s table).

    The magnitude bits shifted into a float32 and scaled by 2**112 give every finite value
    exactly (subnormals too); inf/NaN get the all-ones exponent; the sign is copied over.
    """
    if not denormals_work():
        return np.ascontiguousarray(h).astype(np.float32)
    w = h.view(_U16LE).astype(_U32)
    m = w & _U32(0x7FFF)
    m <<= _U32(13)
    f = m.view(np.float32)
    f *= np.float32(2.0**112)
    special = f >= np.float32(65536.0)  # exponent 31: inf / NaN
    if special.any():
        np.bitwise_or(m, _U32(0x7F800000), out=m, where=special)
    w &= _U32(0x8000)
    w <<= _U32(16)
    m |= w
    return f


_TABLE: list[np.ndarray] = []  # the float32 value of each of the 65536 binary16 patterns


def f16_to_f32(h: np.ndarray) -> np.ndarray:
    """Exact binary16 -> float32 of a float16 array, as a new array of its shape.

    Same bits as ``h.astype(np.float32)`` for all 65536 inputs (NaN payloads included):
    one gather from a 256 KiB table of every pattern's value, built once.  One pass and
    one allocation (the result): a chain of whole-array integer passes allocates
    temporaries, whose page faults made the time swing 4x with the allocator's history.
    """
    if not _TABLE:
        _TABLE.append(_f16_to_f32_bits(np.arange(1 << 16, dtype=np.uint32).astype(_U16LE)
                                       .view(np.float16)))
    return np.take(_TABLE[0], np.ascontiguousarray(h).view(_U16LE), mode="clip")


def round_f16(x: np.ndarray) -> np.ndarray:
    """Round float32 to the nearest binary16 value (ties to even), as a new float32 array.

    The same bits as ``x.astype(np.float16).astype(np.float32)`` for every float32 but a
    NaN, which becomes the canonical one (:data:`NAN_F32`; magnitudes from 65520 become
    inf).  Normal results come from
    integer rounding of the float32 pattern at mantissa bit 13; the few elements outside
    that range (subnormal results below 2**-14, overflow, inf, NaN) are found with
    reductions and converted by numpy, so the common case costs five integer passes.
    With the compiled module (:mod:`dvsdk.native`) it is one pass, same bits.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    if native.NATIVE is not None:
        out = np.empty_like(x)
        native.NATIVE.round_f16(x, out)
        return out
    u = x.view(_U32)
    r = np.right_shift(u, _U32(13))
    r &= _U32(1)             # the bit that decides ties: round half to even
    r += _U32(0xFFF)
    r += u
    r &= _U32(0xFFFFE000)
    out = r.view(np.float32)
    if out.size == 0:
        return out
    twice = np.left_shift(u, _U32(1))   # 2*|x| patterns; zero wraps to the maximum below
    twice -= _U32(1)
    fix = np.less(twice, _TWICE_MIN_NORMAL - _U32(1))  # 0 < |x| < 2**-14
    hi, lo = x.max(), x.min()
    if not (hi < _HALF_MAX_SAFE and lo > -_HALF_MAX_SAFE):  # overflow, inf or NaN present
        fix |= twice >= _TWICE_OVERFLOW - _U32(1)
    if fix.any():
        idx = np.flatnonzero(fix)
        with np.errstate(over="ignore", invalid="ignore"):
            v = x.reshape(-1)[idx]
            out.reshape(-1)[idx] = np.where(np.isnan(v), NAN_F32,
                                            v.astype(np.float16).astype(np.float32))
    return out


def f32_to_f16(v: np.ndarray) -> np.ndarray:
    """binary16 of float32 values that are binary16 values already (:func:`round_f16`
    output), as a new float16 array of the same shape.

    Exact for those inputs, the same bits as ``v.astype(np.float16)``: scaling by
    2**-112 moves a binary16 exponent into float32's (subnormals into float32
    subnormals, exactly), so the pattern shifted right by 13 is the binary16 one; inf and
    NaN keep their all-ones exponent and top mantissa bits.  Other inputs are truncated,
    not rounded (with the compiled module, :mod:`dvsdk.native`: rounded as numpy's cast).
    """
    v = np.ascontiguousarray(v, dtype=np.float32)
    if native.NATIVE is not None:  # one pass, the same bits
        out = np.empty(v.shape, _U16LE)
        native.NATIVE.f32_to_f16(v, out)
        return out.view(np.float16)
    if not denormals_work():
        h = v.astype(np.float16)
        canonical_nans(h)
        return h
    with np.errstate(invalid="ignore"):  # a signalling NaN; replaced below
        w = np.multiply(v, np.float32(2.0**-112)).view(_U32)
    if v.size and not (v.max() <= np.float32(65504.0) and v.min() >= np.float32(-65504.0)):
        special = ~np.isfinite(v)  # inf, NaN: the pattern itself (a NaN made canonical)
        np.copyto(w, np.where(np.isnan(v), NAN_F32, v).view(_U32), where=special)
        np.bitwise_and(w, _U32(0x807FFFFF), out=w, where=special)
        np.bitwise_or(w, _U32(0x0F800000), out=w, where=special)  # >> 13: exponent 31
    h = np.right_shift(w, _U32(13))
    h &= _U32(0x7FFF)
    w >>= _U32(16)
    w &= _U32(0x8000)
    h |= w
    return h.astype(_U16LE).view(np.float16)


def to_f16(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """float32 rounded to binary16 (nearest even; inf from 65520; every NaN the canonical
    one), as a new float16 array, or into ``out`` (contiguous float16, as many elements,
    e.g. a view of DMA memory; returned): the bits of ``x.astype(np.float16)`` but for NaN
    payloads, in one pass with the compiled module (:mod:`dvsdk.native`)."""
    v = np.ascontiguousarray(x, dtype=np.float32)
    if out is not None and (out.dtype != np.float16 or out.size != v.size
                            or not out.flags.c_contiguous):
        raise ValueError(f"to_f16: out must be {v.size} contiguous float16 values")
    if native.NATIVE is not None:
        dst = np.empty(v.shape, _U16LE) if out is None else out.view(_U16LE)
        native.NATIVE.f32_to_f16(v, dst)
        return dst.view(np.float16) if out is None else out
    with np.errstate(over="ignore", invalid="ignore"):
        if out is None:
            out = v.astype(np.float16)
        else:
            out.reshape(v.shape)[...] = v
    canonical_nans(out)
    return out


def canonical_nans(h: np.ndarray) -> None:
    """Every NaN of the float16 array ``h`` (in place) made the canonical quiet NaN
    0x7E00: a NaN's sign and payload depend on the machine that computed it (x86 makes
    negative ones, Arm positive), so dvsdk stores only this one (arithmetic.md)."""
    if h.size and np.isnan(h.max()):
        h[np.isnan(h)] = NAN_F16


def to_f32(h: np.ndarray) -> np.ndarray:
    """binary16 to float32, exact (NaN payloads included), as a new array of its shape:
    :func:`f16_to_f32`, in one compiled pass where the module is built."""
    if native.NATIVE is not None:
        out = np.empty(np.shape(h), np.float32)
        native.NATIVE.f16_to_f32(np.ascontiguousarray(h).view(_U16LE), out)
        return out
    return f16_to_f32(h)


def lookup(table: np.ndarray, bits: np.ndarray, out: np.ndarray) -> None:
    """``out = table[bits]``: ``bits`` uint16 binary16 patterns, ``table`` 65,536 entries
    (an Fp16Table step's: binary16 bits or float32 values), ``out`` as many items of the
    table's type, never partly over ``bits``.  The compiled gather (``native.lookup16``),
    else numpy's ``take``: the same copy of bits."""
    if native.NATIVE is not None and out.flags.c_contiguous and table.flags.c_contiguous:
        native.NATIVE.lookup16(table, bits, out)
    else:
        np.take(table, bits, out=out, mode="clip")
