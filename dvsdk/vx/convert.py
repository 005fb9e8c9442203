"""Conversions between the user's numbers and a tensor's element type.

OpenVX's fixed-point NN types (``formats.md`` §2.3): ``VX_TYPE_INT16`` with
``fixed_point_position`` p holds ``raw / 2**p`` (KHR_NN_16: p = 8, Q7.8, range
[-128, 127.99609375], step 1/256); ``VX_TYPE_UINT8`` / ``VX_TYPE_INT8`` with p = 0 hold
integers (KHR_NN_8).  A real value x becomes ``raw = round(x * 2**p)`` with the rounding
policy (TO_ZERO truncates, TO_NEAREST_EVEN rounds half to even), then the overflow policy
(SATURATE clamps to the type's range, WRAP keeps the low bits in two's complement, exactly,
for any finite x).  Not-a-number becomes 0 and ±inf the type's bounds under both policies
(OpenVX leaves them undefined).  FLOAT16 rounds to nearest even and overflows to ±inf as
IEEE 754 does; FLOAT32 stores as is.

The user's array type decides what its numbers mean: a float array holds real values; an
integer array holds raw values of a fixed-point tensor (converted between integer widths with
the overflow policy) and real values of a float tensor.
"""

from __future__ import annotations

import numpy as np

from .types import ConvertPolicy, RoundPolicy

__all__ = ["to_raw", "real_values", "to_storage", "from_storage", "int_range"]


def int_range(dtype: np.dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _fit(values: np.ndarray, dtype: np.dtype, overflow: int) -> np.ndarray:
    """Integral float64 (or integer) ``values`` into integer ``dtype`` with the policy."""
    lo, hi = int_range(dtype)
    if np.asarray(values).dtype.kind in "iub":     # integers: exact in their own width
        ints = np.asarray(values)
        ints = ints.astype(np.uint8) if ints.dtype.kind == "b" else ints
        if overflow == ConvertPolicy.SATURATE:
            return np.clip(ints, max(lo, _min(ints)), min(hi, _max(ints))).astype(dtype)
        return ints.astype(dtype)                  # numpy keeps the low bits
    v = np.asarray(values, np.float64)
    v = np.where(np.isnan(v), 0.0, v)
    if overflow == ConvertPolicy.SATURATE:
        return np.clip(v, lo, hi).astype(dtype)
    finite = np.isfinite(v)
    bits = dtype.itemsize * 8
    low = np.fmod(np.where(finite, v, 0.0), 2.0 ** bits)        # exact for any finite v
    low = np.where(low < 0, low + 2.0 ** bits, low).astype(np.uint64)
    wrapped = low.astype(np.dtype(f"u{dtype.itemsize}")).view(dtype)
    return np.where(finite, wrapped, np.clip(v, lo, hi).astype(dtype)).astype(dtype)


def _min(a: np.ndarray) -> int:
    return int(np.iinfo(a.dtype).min) if a.dtype.kind in "iu" else 0


def _max(a: np.ndarray) -> int:
    return int(np.iinfo(a.dtype).max) if a.dtype.kind in "iu" else 1


def to_raw(real: np.ndarray, dtype: np.dtype, fpp: int, overflow: int, rounding: int
           ) -> np.ndarray:
    """Real values -> raw fixed-point integers of ``dtype`` (the module docstring's rules)."""
    scaled = np.asarray(real, np.float64) * 2.0 ** fpp
    with np.errstate(invalid="ignore"):
        r = np.trunc(scaled) if rounding == RoundPolicy.TO_ZERO else np.rint(scaled)
    return _fit(r, np.dtype(dtype), overflow)


def real_values(raw: np.ndarray, fpp: int) -> np.ndarray:
    """Raw fixed-point integers -> their real values (float64, exact)."""
    return np.asarray(raw, np.float64) / 2.0 ** fpp


def to_storage(user: np.ndarray, dtype: np.dtype, fpp: int, overflow: int, rounding: int
               ) -> np.ndarray:
    """A user array -> the tensor's storage type ``dtype`` (float or fixed point)."""
    u = np.asarray(user)
    if u.dtype.kind not in "fiub":
        raise TypeError(f"cannot convert {u.dtype} data")
    if dtype.kind == "f":                          # IEEE: overflow to +-inf, as documented
        with np.errstate(over="ignore"):
            return u.astype(np.float64).astype(dtype) if u.dtype.kind in "iub" \
                else u.astype(dtype)
    if u.dtype.kind == "f":
        return to_raw(u, dtype, fpp, overflow, rounding)
    return _fit(u, dtype, overflow) if u.dtype != dtype else u.copy()


def from_storage(stored: np.ndarray, fpp: int, user_dtype: np.dtype, overflow: int,
                 rounding: int) -> np.ndarray:
    """Stored values -> ``user_dtype`` (the inverse of :func:`to_storage`)."""
    s = np.asarray(stored)
    user_dtype = np.dtype(user_dtype)
    if s.dtype == user_dtype:
        return s.copy()
    if s.dtype.kind == "f":                        # a float tensor: real values
        if user_dtype.kind == "f":
            with np.errstate(over="ignore"):
                return s.astype(user_dtype)
        return to_raw(s, user_dtype, 0, overflow, rounding)
    if user_dtype.kind == "f":                     # fixed point to real values
        return real_values(s, fpp).astype(user_dtype)
    return _fit(s, user_dtype, overflow)           # raw between integer widths
