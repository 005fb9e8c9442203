"""The DV700 tensor layout: FP16, chunked by 8 channels ("WHC8").

Implements dv700-interface.md §1 and formats.md §1.3/§1.4.  Element ``(n, y, x, c)``
of an ``(N, H, W, C)`` tensor lives at element offset::

    n*W*H*C + (c & ~7)*W*H + (x*H + y)*min(C - (c & ~7), 8) + (c & 7)

("DWHC": x is the outer spatial index).  The transposed orientation ("DHWC", the
convertor's ``transpose_weight = 1``) uses ``(y*W + x)`` in place of ``(x*H + y)``.
The last chunk holds ``C - 8*floor((C-1)/8)`` channels and is **not** padded, so one
sample is exactly ``W*H*C*2`` bytes.  FP16 is stored little-endian.

All data paths are vectorized: the tensor is first cast to FP16 in one contiguous
pass, then each group of 8 channels (and the one partial group) is moved as a single
opaque 2..16-byte unit by one strided copy.  With the compiled module
(:mod:`dvsdk.native`) a float32 tensor is converted and moved in one pass, same bits.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import native
from ..errors import LayoutError
from .fp16 import canonical_nans, f16_to_f32

__all__ = ["pack", "unpack", "to_chunks", "from_chunks", "offset", "offsets", "nbytes"]

_F16 = np.dtype("<f2")
_CHUNK = 8
# Dtypes that copy `n` bytes as one element (fast same-dtype strided copies).
_UNIT = {2: np.dtype("<u2"), 4: np.dtype("<u4"), 8: np.dtype("<u8")}


_SCRATCH_MAX = 16 << 20  # keep at most one 16 MiB FP16 staging buffer per thread
_tls = threading.local()


def _scratch_f16(shape: tuple[int, ...]) -> np.ndarray:
    """An uninitialized FP16 staging array, reused per thread to avoid page faults.

    The result is only valid until the next call in the same thread; it never escapes.
    """
    count = int(np.prod(shape))
    if 2 * count > _SCRATCH_MAX:
        return np.empty(shape, dtype=_F16)
    buf = getattr(_tls, "buf", None)
    if buf is None or buf.size < count:
        buf = np.empty(count, dtype=_F16)
        _tls.buf = buf
    return buf[:count].reshape(shape)


def _unit(n_channels: int, itemsize: int = 2) -> np.dtype:
    """A dtype whose one element is ``n_channels`` values of ``itemsize`` bytes (an opaque
    copy unit)."""
    nb = itemsize * n_channels
    return _UNIT.get(nb, np.dtype(f"V{nb}"))


def _check_shape(shape: Sequence[int]) -> tuple[int, int, int, int, bool]:
    """Validate ``(H, W, C)`` or ``(N, H, W, C)``; return ``(N, H, W, C, batched)``."""
    if type(shape) is tuple and len(shape) == 3:  # the common case, checked in a few ns
        h, w, c = shape
        if type(h) is int and type(w) is int and type(c) is int and h > 0 and w > 0 \
                and c > 0:
            return 1, h, w, c, False
    try:
        dims = tuple(shape)
    except TypeError:
        raise LayoutError("shape must be a sequence", field="shape", value=shape) from None
    if len(dims) not in (3, 4):
        raise LayoutError(
            "tensor must be (H, W, C) or (N, H, W, C)",
            field="ndim",
            value=len(dims),
            limit="3 or 4",
        )
    names = ("N", "H", "W", "C")[4 - len(dims) :]
    out = []
    for name, d in zip(names, dims, strict=True):
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
            raise LayoutError(f"dimension {name} must be an integer", field=name, value=d)
        if d < 1:
            raise LayoutError(f"dimension {name} must be positive", field=name, value=int(d),
                              limit=">= 1")
        out.append(int(d))
    if len(out) == 3:
        return 1, out[0], out[1], out[2], False
    return out[0], out[1], out[2], out[3], True


def nbytes(shape: Sequence[int]) -> int:
    """Bytes of a tensor of ``shape`` in the chunked layout: ``N*W*H*C*2`` (§1)."""
    n, h, w, c, _ = _check_shape(shape)
    return n * h * w * c * 2


def offset(
    shape: Sequence[int], y: int, x: int, c: int, n: int = 0, transpose: bool = False
) -> int:
    """Element (not byte) offset of ``(n, y, x, c)`` in the chunked layout (§1).

    ``shape`` is ``(H, W, C)`` or ``(N, H, W, C)``.  Multiply by 2 for bytes.
    """
    nn, h, w, cc, _ = _check_shape(shape)
    for name, v, lim in (("n", n, nn), ("y", y, h), ("x", x, w), ("c", c, cc)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= v < lim:
            raise LayoutError(f"index {name} out of range", field=name, value=v,
                              limit=f"0..{lim - 1}")
    c0 = int(c) & ~7
    cs = min(cc - c0, _CHUNK)
    spatial = int(y) * w + int(x) if transpose else int(x) * h + int(y)
    return int(n) * w * h * cc + c0 * w * h + spatial * cs + (int(c) & 7)


def offsets(shape: Sequence[int], transpose: bool = False) -> np.ndarray:
    """Element offsets of every element, as an int64 array of ``shape`` (§1).

    ``offsets(shape)[..., y, x, c]`` equals ``offset(shape, y, x, c, ...)``; so
    ``buf[offsets(shape)]`` gathers a packed buffer back into ``shape`` order.
    """
    n, h, w, c, batched = _check_shape(shape)
    ni = np.arange(n, dtype=np.int64)[:, None, None, None]
    yi = np.arange(h, dtype=np.int64)[None, :, None, None]
    xi = np.arange(w, dtype=np.int64)[None, None, :, None]
    ci = np.arange(c, dtype=np.int64)[None, None, None, :]
    c0 = ci & ~7
    cs = np.minimum(c - c0, _CHUNK)
    spatial = yi * w + xi if transpose else xi * h + yi
    res = ni * (w * h * c) + c0 * (w * h) + spatial * cs + (ci & 7)
    return res if batched else res[0]


def _as_tensor(x: Any) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype.kind not in "fiu":
        raise LayoutError(
            "tensor dtype must be numeric (float or integer)",
            field="dtype",
            value=str(arr.dtype),
            limit="float16/float32/float64/uint8/int",
        )
    _check_shape(arr.shape)
    return arr


def pack(x: Any, transpose: bool = False, out: np.ndarray | None = None) -> np.ndarray:
    """Pack an ``(H, W, C)`` or ``(N, H, W, C)`` tensor into the chunked layout (§1).

    Returns a new 1-D little-endian float16 array of ``N*H*W*C`` elements, or fills
    ``out``, such an array given by the caller (a DMA buffer's view: packed in place, with
    no copy after).  Any float or integer dtype is accepted; values are rounded to FP16
    (IEEE nearest-even, magnitudes from 65520 become +-inf, every NaN the canonical
    0x7E00: :func:`~dvsdk.hw.fp16.to_f16`).
    ``transpose=True`` selects the DHWC orientation (formats.md §1.3).
    """
    arr = _as_tensor(x)
    n, h, w, c, _ = _check_shape(arr.shape)
    arr = arr.reshape(n, h, w, c)
    if out is None:
        out = np.empty(n * h * w * c, dtype=_F16)
    elif (not isinstance(out, np.ndarray) or out.dtype != _F16 or out.ndim != 1
          or not out.flags.c_contiguous or not out.flags.writeable):
        raise LayoutError("out must be a writable contiguous 1-D float16 array", field="out",
                          value=getattr(out, "dtype", type(out).__name__),
                          limit="float16, 1-D, C-contiguous, writable")
    elif out.size != n * h * w * c:
        raise LayoutError("out has another number of elements than the tensor", field="out",
                          value=out.size, limit=n * h * w * c)
    if native.NATIVE is not None and arr.dtype == np.float32:
        native.NATIVE.pack(arr, out, transpose)
        return out
    nfull, rem = divmod(c, _CHUNK)
    identity = (transpose or h == 1 or w == 1) and nfull + (rem > 0) == 1
    with np.errstate(over="ignore", invalid="ignore"):
        if identity:
            # One chunk and an order-preserving spatial walk: a plain cast copy.
            out.reshape(n, h, w, c)[...] = arr
            canonical_nans(out)
            return out
        if arr.dtype == _F16 and arr.flags.c_contiguous:
            src = arr  # already FP16 (the simulator's stored tensors): no staging copy
        else:
            src = _scratch_f16((n, h, w, c))
            src[...] = arr
    _to_chunked(src, out, transpose)
    canonical_nans(out)
    return out


def _to_chunked(src: np.ndarray, out: np.ndarray, transpose: bool) -> None:
    """Contiguous ``src`` (N, H, W, C) into the 1-D ``out`` of the same dtype, in the
    chunked order: each group of 8 channels (and the one partial group) moves as one
    opaque unit by one strided copy."""
    n, h, w, c = src.shape
    whc, item = w * h * c, src.dtype.itemsize
    nfull, rem = divmod(c, _CHUNK)
    dst2 = out.reshape(n, whc)
    # Destination spatial order: (W, H) for DWHC, (H, W) for DHWC.
    dshape = (w, h) if not transpose else (h, w)
    if nfull:
        u = _unit(_CHUNK, item)
        s = src[..., : nfull * _CHUNK].view(u).reshape(n, h, w, nfull)
        d = dst2[:, : nfull * _CHUNK * w * h].view(u).reshape(n, nfull, *dshape)
        d[...] = s.transpose((0, 3, 2, 1) if not transpose else (0, 3, 1, 2))
    if rem:
        u = _unit(rem, item)
        s = src[..., nfull * _CHUNK :].view(u).reshape(n, h, w)
        d = dst2[:, nfull * _CHUNK * w * h :].view(u).reshape(n, *dshape)
        d[...] = s.transpose((0, 2, 1)) if not transpose else s


def _from_chunked(flat: np.ndarray, tmp: np.ndarray, transpose: bool) -> None:
    """The inverse of :func:`_to_chunked`: 1-D ``flat`` into contiguous ``tmp``
    (N, H, W, C) of the same dtype."""
    n, h, w, c = tmp.shape
    whc, item = w * h * c, flat.dtype.itemsize
    nfull, rem = divmod(c, _CHUNK)
    src2 = flat.reshape(n, whc)
    dshape = (w, h) if not transpose else (h, w)
    if nfull:
        u = _unit(_CHUNK, item)
        s = src2[:, : nfull * _CHUNK * w * h].view(u).reshape(n, nfull, *dshape)
        d = tmp[..., : nfull * _CHUNK].view(u).reshape(n, h, w, nfull)
        d[...] = s.transpose((0, 3, 2, 1) if not transpose else (0, 2, 3, 1))
    if rem:
        u = _unit(rem, item)
        s = src2[:, nfull * _CHUNK * w * h :].view(u).reshape(n, *dshape)
        d = tmp[..., nfull * _CHUNK :].view(u).reshape(n, h, w)
        d[...] = s.transpose((0, 2, 1)) if not transpose else s


def to_chunks(x: np.ndarray, transpose: bool = False) -> np.ndarray:
    """A float32 ``(H, W, C)`` or ``(N, H, W, C)`` tensor in the chunked order (§1), as a
    new 1-D float32 array: :func:`pack`'s element order without the rounding to FP16
    (element-wise work on it is layout-agnostic, see ``dvsdk.runtime.cpusteps``)."""
    arr = np.asarray(x, np.float32)
    n, h, w, c, _ = _check_shape(arr.shape)
    arr = arr.reshape(n, h, w, c)
    out = np.empty(n * h * w * c, np.float32)
    if native.NATIVE is not None:
        native.NATIVE.pack(arr, out, transpose)
    else:
        _to_chunked(np.ascontiguousarray(arr), out, transpose)
    return out


def from_chunks(flat: np.ndarray, shape: Sequence[int], transpose: bool = False
                ) -> np.ndarray:
    """The inverse of :func:`to_chunks`: a new float32 array of ``shape``."""
    n, h, w, c, _ = _check_shape(shape)
    src = np.ascontiguousarray(flat, np.float32).reshape(-1)
    if src.size != n * h * w * c:
        raise LayoutError(f"buffer holds {src.size} elements, shape {tuple(shape)} needs "
                          f"{n * h * w * c}", field="buf.size", value=src.size,
                          limit=n * h * w * c)
    out = np.empty(tuple(shape), np.float32)
    if native.NATIVE is not None:
        native.NATIVE.unpack(src, out.reshape(n, h, w, c), transpose)
    else:
        _from_chunked(src, out.reshape(n, h, w, c), transpose)
    return out


def _as_f16_buffer(buf: Any) -> np.ndarray:
    if isinstance(buf, (bytes, bytearray, memoryview)):
        raw = np.frombuffer(buf, dtype=np.uint8)
    elif isinstance(buf, np.ndarray):
        raw = buf
    else:
        raise LayoutError("buffer must be bytes or a float16/uint8 array", field="buf",
                          value=type(buf).__name__)
    if raw.dtype == np.uint8:
        raw = np.ascontiguousarray(raw).reshape(-1)
        if raw.size % 2:
            raise LayoutError("byte buffer length must be even (FP16 elements)",
                              field="buf.nbytes", value=raw.size, limit="multiple of 2")
        return raw.view(_F16)
    if raw.dtype.kind == "f" and raw.dtype.itemsize == 2:
        return np.ascontiguousarray(raw, dtype=_F16).reshape(-1)
    raise LayoutError("buffer dtype must be float16 or uint8", field="buf.dtype",
                      value=str(raw.dtype), limit="float16 or uint8")


def unpack(buf: Any, shape: Sequence[int], transpose: bool = False) -> np.ndarray:
    """Inverse of :func:`pack`: a chunked FP16 buffer to a float32 tensor (§1).

    ``buf`` is a float16 array, a uint8 array of raw bytes, or ``bytes``; it must hold
    exactly ``N*H*W*C`` FP16 elements.  Returns a new float32 array of ``shape``.
    """
    n, h, w, c, _ = _check_shape(shape)
    flat = _as_f16_buffer(buf)
    need = n * h * w * c
    if flat.size != need:
        raise LayoutError(
            f"buffer holds {flat.size} FP16 elements, shape {tuple(shape)} needs {need}",
            field="buf.size",
            value=flat.size,
            limit=need,
        )
    if native.NATIVE is not None:
        out = np.empty(tuple(shape), np.float32)
        native.NATIVE.unpack(flat, out.reshape(n, h, w, c), transpose)
        return out
    nfull, rem = divmod(c, _CHUNK)
    if (transpose or h == 1 or w == 1) and nfull + (rem > 0) == 1:
        return f16_to_f32(flat).reshape(tuple(shape))
    tmp = _scratch_f16((n, h, w, c))
    _from_chunked(flat, tmp, transpose)
    return f16_to_f32(tmp).reshape(tuple(shape))
