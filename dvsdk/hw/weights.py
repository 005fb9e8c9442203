"""Weight packing for the DV700, byte-identical to DMP's user driver.

Implements dv700-interface.md §8.1 (conv, ``dmp_dv_pack_conv_weights``), §8.2 (dilated,
``dmp_dv_pack_dil_weights``), §8.3 (8-bit quantized format), §8.4 (FC,
``dmp_dv_pack_fc_weights``) and the size formulas of §7.4, plus the inverses the
simulator needs and an 8-bit k-means codebook builder (§8.3 [EXT]).

Everything is vectorized: the byte position of every weight is computed with numpy
broadcasting from the per-channel / per-kernel block geometry of §8.1, then all weights
are written by one fancy-index assignment (and read back by one gather).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np

from ..errors import WeightError
from . import elementary, layout

__all__ = [
    "conv_weight_size",
    "dilated_weight_size",
    "fc_weight_size",
    "pack_conv_weights",
    "pack_dilated_weights",
    "pack_fc_weights",
    "unpack_conv_weights",
    "unpack_dilated_weights",
    "unpack_fc_weights",
    "quantize_weights",
    "quantization_error",
]

_F16 = np.dtype("<f2")
_U16 = np.dtype("<u2")
_LUT_BYTES = 512  # 256 FP16 entries (§8.3)
_BLOCK = 72  # slots per 12x6 block (§8.1)
_MAX_K = 7  # MAX_CONV_KERNEL_SIZE (§7.6)
_FP16_MAX = 65504.0


def _round16(n: int) -> int:
    return (n + 15) & ~15


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


# --------------------------------------------------------------------------- checks


def _check_count(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise WeightError(f"{name} must be a positive integer", field=name, value=v, limit=">= 1")
    return int(v)


def _check_kernel(kx: Any, ky: Any) -> int:
    """Validate a kernel size (§8.1 checks) and return ``P = max(kx, ky) | 1``."""
    for name, v in (("kx", kx), ("ky", ky)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= _MAX_K:
            raise WeightError(f"kernel size {name} out of range", field=name, value=v,
                              limit=f"1..{_MAX_K}")
    return max(int(kx), int(ky)) | 1


def _fp16(values: Any, field: str, shape: tuple[int, ...], kinds: str = "fiu") -> np.ndarray:
    """Convert to little-endian FP16, checking dtype kind, shape and finiteness."""
    arr = np.asarray(values)
    if arr.dtype.kind not in kinds:
        raise WeightError(f"{field} must be numeric floats", field=f"{field}.dtype",
                          value=str(arr.dtype), limit="float16/float32/float64")
    if arr.shape != shape:
        raise WeightError(f"{field} has the wrong shape", field=f"{field}.shape",
                          value=arr.shape, limit=shape)
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.ascontiguousarray(arr, dtype=_F16)
    if not np.isfinite(out).all():
        raise WeightError(f"{field} has values that are not finite in FP16", field=field,
                          value="inf/nan", limit=f"|v| <= {_FP16_MAX:g}")
    return out


def _table(table: Any) -> np.ndarray:
    t = _fp16(table, "table", (256,))
    if t[0] != 0:
        raise WeightError("quantization table entry 0 must be 0.0 (unused slots read index 0)",
                          field="table[0]", value=float(t[0]), limit=0.0)
    return t


def _weights4(weights: Any, quantized: bool) -> np.ndarray:
    arr = np.asarray(weights)
    if arr.ndim != 4:
        raise WeightError("conv weights must be (M, C, ky, kx)", field="weights.ndim",
                          value=arr.ndim, limit=4)
    if quantized and arr.dtype != np.uint8:
        raise WeightError("with a table, weights must be uint8 indices", field="weights.dtype",
                          value=str(arr.dtype), limit="uint8")
    if not quantized and arr.dtype.kind != "f":
        raise WeightError("without a table, weights must be floats", field="weights.dtype",
                          value=str(arr.dtype), limit="float16/float32/float64")
    return arr


def _as_blob(blob: Any, size: int) -> np.ndarray:
    if isinstance(blob, (bytes, bytearray, memoryview)):
        buf = np.frombuffer(blob, dtype=np.uint8)
    elif isinstance(blob, np.ndarray) and blob.dtype == np.uint8:
        buf = blob.reshape(-1)
    else:
        raise WeightError("blob must be bytes or a uint8 array", field="blob",
                          value=type(blob).__name__)
    if buf.size < size:
        raise WeightError("weight blob too short", field="blob.size", value=int(buf.size),
                          limit=f">= {size}")
    return np.ascontiguousarray(buf[:size])


# ---------------------------------------------------------------------------- sizes


def _blocks_per_kernel(c: int, p: int) -> int:
    """Blocks per output kernel over all C input channels (§7.4 step 2)."""
    return {1: _ceil(c, 64), 3: _ceil(c, 8), 5: _ceil(c, 2), 7: c}[p]


def conv_weight_size(c: int, m: int, kx: int, ky: int, quantized: bool,
                     depthwise: bool = False, prelu: bool = False) -> int:
    """Packed conv weight bytes, ``get_weight_size`` (§7.4)."""
    p = _check_kernel(kx, ky)
    c = 1 if depthwise else _check_count("c", c)
    m = _check_count("m", m)
    cp = _blocks_per_kernel(c, p)
    hdr = 16 * _ceil(m, 8)
    size = _round16(_LUT_BYTES + 72 * m * cp + hdr) if quantized else 144 * m * cp + hdr
    return size + (hdr if prelu else 0)


def dilated_weight_size(c: int, m: int, kx: int, ky: int, quantized: bool) -> int:
    """Packed dilated-conv weight bytes, ``get_weight_size_dil`` (§7.4); no PReLU."""
    _check_kernel(kx, ky)
    lut = _LUT_BYTES if quantized else 0
    tap = conv_weight_size(c, m, 1, 1, quantized) - lut
    return lut + int(kx) * int(ky) * _round16(tap)


def fc_weight_size(n_in: int, n_out: int, quantized: bool) -> int:
    """Packed FC bytes (§8.4): ``[512] + roundup16(n_in*n_out*(1|2)) + roundup16(2*n_out)``.

    ``n_in = c_in*h_in*w_in`` and ``n_out = c_out*h_out*w_out``.
    """
    n_in = _check_count("n_in", n_in)
    n_out = _check_count("n_out", n_out)
    lut = _LUT_BYTES if quantized else 0
    return lut + _round16(n_in * n_out * (1 if quantized else 2)) + _round16(2 * n_out)


# ------------------------------------------------------------------------- geometry


@cache
def _slot_table(p: int) -> np.ndarray:
    """Slot (``6*row + col``) inside a 72-slot block, indexed ``[variant, y', x]`` (§8.1).

    The variant is ``c & 63`` for P=1, ``c & 7`` for P=3, ``c & 1`` for P=5, 0 for P=7.
    """
    if p == 1:
        t = np.arange(64) & 7
        g = np.arange(64) >> 3
        row = 11 - 3 * (t >> 1) - g // 3
        col = 3 * (t & 1) + g % 3
        tab = (6 * row + col).reshape(64, 1, 1)
    else:
        yp = np.arange(p)[None, :, None]
        x = np.arange(p)[None, None, :]
        if p == 3:
            t = np.arange(8)[:, None, None]
            tab = 6 * (9 - 3 * (t >> 1) + yp) + 3 * (t & 1) + x
        elif p == 5:
            t = np.arange(2)[:, None, None]
            tab = 6 * (7 - 6 * t + yp) + x
        else:
            tab = 6 * (5 + yp) + np.minimum(x, 5)
            last = np.array([17, 3, 9, 15, 0, 6, 12])[None, :, None]
            tab = np.where(x == 6, last, tab)
    tab = np.ascontiguousarray(tab, dtype=np.int64)
    tab.flags.writeable = False
    return tab


def _conv_geometry(
    c: int, m: int, kx: int, ky: int, quantized: bool, prelu: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Positions in one conv stream (§8.1), LUT excluded.

    Returns ``(block_byte (M, C), slots (C, ky, kx), header_byte (M,), content_bytes)``:
    the byte offset of the block holding ``w[m, c]``, the slot of each ``(c, y, x)``
    inside its block, the byte offset of ``bias[m]`` and the unpadded stream length.
    """
    p = max(kx, ky) | 1
    blk = _BLOCK * (1 if quantized else 2)
    hdr = 32 if prelu else 16
    nb = _blocks_per_kernel(c, p)
    mi = np.arange(m, dtype=np.int64)
    mchunk, mlane = mi >> 3, mi & 7
    mcount = np.minimum(8, m - 8 * mchunk)
    mstart = mchunk * (hdr + 8 * nb * blk)
    ci = np.arange(c, dtype=np.int64)
    csz = 64 if p == 1 else 8
    j = ci // csz
    if p in (1, 3):
        before, per, within, var = j, np.ones_like(ci), np.zeros_like(ci), ci & (csz - 1)
    elif p == 5:
        before = 4 * j
        per = (np.minimum(8, c - 8 * j) + 1) >> 1
        within, var = (ci & 7) >> 1, ci & 1
    else:
        before, per, within, var = 8 * j, np.minimum(8, c - 8 * j), ci & 7, np.zeros_like(ci)
    block = (mcount[:, None] * before[None, :] + mlane[:, None] * per[None, :]
             + within[None, :])
    block_byte = mstart[:, None] + hdr + block * blk
    slots = _slot_table(p)[var][:, p - ky :, :kx]
    nmc = _ceil(m, 8)
    content = nmc * hdr + m * nb * blk
    return block_byte, slots, mstart + 2 * mlane, content


def _header_index(header_byte: np.ndarray) -> np.ndarray:
    """Byte indices ``(M, 2)`` of FP16 values whose first byte is at ``header_byte``."""
    return header_byte[:, None] + np.arange(2)


# -------------------------------------------------------------------------- conv


def _conv_args(weights: Any, bias: Any, table: Any
               ) -> tuple[bool, np.ndarray, tuple[int, int, int, int], np.ndarray | None,
                          np.ndarray]:
    """Checked packer arguments: quantized?, (M, C, ky, kx) weights, their shape, the
    table (or None) and the FP16 bias."""
    q = table is not None
    w = _weights4(weights, q)
    m, c, ky, kx = (int(d) for d in w.shape)
    _check_kernel(kx, ky)
    _check_count("M", m)
    _check_count("C", c)
    lut = _table(table) if q else None
    return q, w, (m, c, ky, kx), lut, _fp16(bias, "bias", (m,))


def pack_conv_weights(weights: Any, bias: Any, prelu: Any = None, table: Any = None) -> bytes:
    """Pack conv weights like ``dmp_dv_pack_conv_weights`` (§8.1, §8.3).

    ``weights`` is ``(M, C, ky, kx)`` floats (rounded to FP16) or, when ``table`` (256
    FP16 values, entry 0 == 0.0) is given, uint8 indices into it.  Depthwise: C = 1.
    ``bias`` and optional ``prelu`` are ``(M,)``.  For deconvolution rotate each
    ``(ky, kx)`` plane by 180 degrees first (§4.2).  The length is
    :func:`conv_weight_size` (§7.4).
    """
    q, w, (m, c, ky, kx), lut, b16 = _conv_args(weights, bias, table)
    p16 = None if prelu is None else _fp16(prelu, "prelu", (m,))
    if not q:
        w = _fp16(w, "weights", w.shape, "f")
    size = conv_weight_size(c, m, kx, ky, q, prelu=p16 is not None)
    block_byte, slots, hdr_byte, _ = _conv_geometry(c, m, kx, ky, q, p16 is not None)
    out = np.zeros(size, dtype=np.uint8)
    base = 0
    if lut is not None:
        out[:_LUT_BYTES] = lut.view(np.uint8)
        base = _LUT_BYTES
        out[(base + block_byte)[:, :, None, None] + slots[None]] = w
    else:
        out.view(_U16)[(block_byte // 2)[:, :, None, None] + slots[None]] = w.view(_U16)
    out[_header_index(base + hdr_byte)] = b16.view(np.uint8).reshape(m, 2)
    if p16 is not None:
        out[_header_index(base + hdr_byte + 16)] = p16.view(np.uint8).reshape(m, 2)
    return out.tobytes()


def unpack_conv_weights(
    blob: Any, c: int, m: int, kx: int, ky: int, quantized: bool,
    depthwise: bool = False, prelu: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Inverse of :func:`pack_conv_weights` (§8.1): ``(weights, bias, prelu | None)``.

    Weights come back as float32 ``(M, C, ky, kx)`` (``C = 1`` if depthwise); quantized
    blobs are dequantized through their LUT.  ``blob`` may be longer than needed.
    """
    size = conv_weight_size(c, m, kx, ky, quantized, depthwise, prelu)
    c = 1 if depthwise else int(c)
    m, kx, ky = int(m), int(kx), int(ky)
    buf = _as_blob(blob, size)
    block_byte, slots, hdr_byte, _ = _conv_geometry(c, m, kx, ky, quantized, prelu)
    base = _LUT_BYTES if quantized else 0
    if quantized:
        lut = buf[:_LUT_BYTES].view(_F16)
        w = lut[buf[(base + block_byte)[:, :, None, None] + slots[None]]]
    else:
        w = buf.view(_U16)[(block_byte // 2)[:, :, None, None] + slots[None]].view(_F16)
    bias = np.ascontiguousarray(buf[_header_index(base + hdr_byte)]).view(_F16)[:, 0]
    pr = None
    if prelu:
        pr = np.ascontiguousarray(buf[_header_index(base + hdr_byte + 16)]).view(_F16)[:, 0]
        pr = pr.astype(np.float32)
    return w.astype(np.float32), bias.astype(np.float32), pr


# ----------------------------------------------------------------------- dilated


def _dilated_positions(c: int, m: int, kx: int, ky: int, q: bool
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Unit index of every ``w[m, c, iy, ix]`` and byte offset of the real bias (§8.2)."""
    block_byte, slots, hdr_byte, content = _conv_geometry(c, m, 1, 1, q, False)
    lut = _LUT_BYTES if q else 0
    tap = _round16(content)
    taps = (np.arange(ky * kx, dtype=np.int64) * tap).reshape(ky, kx)
    unit = 1 if q else 2
    pos = ((lut + block_byte)[:, :, None, None] + taps[None, None]) // unit
    pos += slots[None, :, :1, :1]
    return pos, lut + (ky * kx - 1) * tap + hdr_byte


def pack_dilated_weights(weights: Any, bias: Any, table: Any = None) -> bytes:
    """Pack dilated-conv weights like ``dmp_dv_pack_dil_weights`` (§8.2).

    One complete 1x1 packing per tap ``(iy, ix)`` (row-major); only the last tap
    carries the bias.  ``weights`` is ``(M, C, ky, kx)`` (no depthwise, no PReLU);
    ``table`` as in :func:`pack_conv_weights`.  Length: :func:`dilated_weight_size`.
    """
    q, w, (m, c, ky, kx), lut, b16 = _conv_args(weights, bias, table)
    if not q:
        w = _fp16(w, "weights", w.shape, "f")
    out = np.zeros(dilated_weight_size(c, m, kx, ky, q), dtype=np.uint8)
    pos, bias_byte = _dilated_positions(c, m, kx, ky, q)
    if lut is not None:
        out[:_LUT_BYTES] = lut.view(np.uint8)
        out[pos] = w
    else:
        out.view(_U16)[pos] = w.view(_U16)
    out[_header_index(bias_byte)] = b16.view(np.uint8).reshape(m, 2)
    return out.tobytes()


def unpack_dilated_weights(blob: Any, c: int, m: int, kx: int, ky: int, quantized: bool
                           ) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`pack_dilated_weights` (§8.2): float32 ``(weights, bias)``."""
    size = dilated_weight_size(c, m, kx, ky, quantized)
    buf = _as_blob(blob, size)
    pos, bias_byte = _dilated_positions(int(c), int(m), int(kx), int(ky), quantized)
    if quantized:
        w = buf[:_LUT_BYTES].view(_F16)[buf[pos]]
    else:
        w = buf.view(_U16)[pos].view(_F16)
    bias = np.ascontiguousarray(buf[_header_index(bias_byte)]).view(_F16)[:, 0]
    return w.astype(np.float32), bias.astype(np.float32)


# ---------------------------------------------------------------------------- FC


def _fc_shape(name: str, shape: Any) -> tuple[int, int, int]:
    try:
        shp = tuple(int(v) for v in shape)
    except (TypeError, ValueError):
        raise WeightError(f"{name} must be (C, H, W)", field=name, value=shape) from None
    if len(shp) != 3 or min(shp) < 1:
        raise WeightError(f"{name} must be three positive ints (C, H, W)", field=name,
                          value=shp, limit="(C>=1, H>=1, W>=1)")
    return shp  # type: ignore[return-value]


def _fc_shapes(w: np.ndarray, in_shape: Sequence[int] | None, out_shape: Sequence[int] | None
               ) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    if w.ndim == 6:
        din, dout = tuple(w.shape[3:]), tuple(w.shape[:3])
    elif w.ndim == 2:
        din, dout = (w.shape[1], 1, 1), (w.shape[0], 1, 1)
    else:
        raise WeightError("FC weights must be (n_out, n_in) or (c_out, h_out, w_out, c_in, "
                          "h_in, w_in)", field="weights.ndim", value=w.ndim, limit="2 or 6")
    sin = _fc_shape("in_shape", din if in_shape is None else in_shape)
    sout = _fc_shape("out_shape", dout if out_shape is None else out_shape)
    n_in, n_out = int(np.prod(sin)), int(np.prod(sout))
    if w.size != n_in * n_out or (w.ndim == 2 and w.shape != (n_out, n_in)):
        raise WeightError("FC weights do not match in_shape/out_shape", field="weights.shape",
                          value=w.shape, limit=(n_out, n_in))
    return sin, sout


def _whc8_rank(shape: tuple[int, int, int]) -> np.ndarray:
    """For every NCHW-flattened index of a ``(C, H, W)`` tensor, its WHC8 offset (§1)."""
    ch, h, w = shape
    return layout.offsets((h, w, ch)).transpose(2, 0, 1).reshape(-1)


def pack_fc_weights(weights: Any, bias: Any, in_shape: Sequence[int] | None = None,
                    out_shape: Sequence[int] | None = None, table: Any = None) -> bytes:
    """Pack FC weights like ``dmp_dv_pack_fc_weights`` (§8.4).

    ``weights``: ``(n_out, n_in)`` in NCHW flatten order, or 6-D
    ``(c_out, h_out, w_out, c_in, h_in, w_in)``.  ``in_shape = (c_in, h_in, w_in)`` and
    ``out_shape = (c_out, h_out, w_out)`` default to the 6-D shape, or to ``(n, 1, 1)``.
    Rows and columns are reordered so both sides follow the WHC8 layout (§1); the bias
    (``n_out`` values) stays in NCHW order, as in the C code ([AMBIG] in §8.4).
    """
    q = table is not None
    w = np.asarray(weights)
    sin, sout = _fc_shapes(w, in_shape, out_shape)
    n_in, n_out = int(np.prod(sin)), int(np.prod(sout))
    if q and w.dtype != np.uint8:
        raise WeightError("with a table, weights must be uint8 indices", field="weights.dtype",
                          value=str(w.dtype), limit="uint8")
    w2 = w.reshape(n_out, n_in)
    vals = w2 if q else _fp16(w2, "weights", (n_out, n_in), "f").view(_U16)
    lut = _table(table) if q else None
    b16 = _fp16(np.asarray(bias).reshape(-1) if np.ndim(bias) == 3 else bias, "bias", (n_out,))
    dest = np.empty_like(vals)
    dest[_whc8_rank(sout)[:, None], _whc8_rank(sin)[None, :]] = vals
    out = np.zeros(fc_weight_size(n_in, n_out, q), dtype=np.uint8)
    base = 0
    if lut is not None:
        out[:_LUT_BYTES] = lut.view(np.uint8)
        base = _LUT_BYTES
    wbytes = dest.view(np.uint8).reshape(-1)
    out[base : base + wbytes.size] = wbytes
    bstart = base + _round16(wbytes.size)
    out[bstart : bstart + 2 * n_out] = b16.view(np.uint8)
    return out.tobytes()


def unpack_fc_weights(blob: Any, in_shape: Sequence[int], out_shape: Sequence[int],
                      quantized: bool) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`pack_fc_weights` (§8.4): float32 ``(n_out, n_in)`` NCHW and bias."""
    sin = _fc_shape("in_shape", in_shape)
    sout = _fc_shape("out_shape", out_shape)
    n_in, n_out = int(np.prod(sin)), int(np.prod(sout))
    buf = _as_blob(blob, fc_weight_size(n_in, n_out, quantized))
    base = _LUT_BYTES if quantized else 0
    esz = 1 if quantized else 2
    raw = buf[base : base + n_in * n_out * esz]
    dest = raw.reshape(n_out, n_in) if quantized else raw.view(_U16).reshape(n_out, n_in)
    vals = dest[_whc8_rank(sout)[:, None], _whc8_rank(sin)[None, :]]
    w = buf[:_LUT_BYTES].view(_F16)[vals] if quantized else vals.view(_F16)
    bstart = base + _round16(n_in * n_out * esz)
    bias = buf[bstart : bstart + 2 * n_out].view(_F16)
    return w.astype(np.float32), bias.astype(np.float32)


# ------------------------------------------------------------------ quantization


def _nearest_codes(values: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Index of the nearest table entry for each value (ties: lower value; 0.0 -> code 0)."""
    tv = table.astype(np.float64)
    uniq, first = np.unique(tv, return_index=True)
    if uniq.size == 1:
        return np.full(values.shape, first[0], dtype=np.uint8)
    mids = (uniq[:-1] + uniq[1:]) / 2
    return first[np.searchsorted(mids, values, side="left")].astype(np.uint8)


def _init_centroids(s: np.ndarray, k: int) -> np.ndarray:
    """k starting centroids with point density ~ p(x)^(1/3) (the Panter-Dite optimum).

    ``p`` is estimated on equal-count bins of the sorted values ``s``: a bin of width
    ``d`` holding ``n/B`` values has density ``n/(B*d)``, so its share of the integral
    of ``p^(1/3)`` is proportional to ``d^(2/3)``.
    """
    nb = int(min(2048, max(1, s.size // 32)))
    edges = s[np.linspace(0, s.size - 1, nb + 1).round().astype(np.int64)]
    # (elementary.power, not numpy's **: its vector build differs from the C library's)
    cdf = np.concatenate([[0.0], np.cumsum(elementary.power(np.diff(edges), 2.0 / 3.0))])
    if cdf[-1] <= 0:  # (nearly) all values equal: spread over the distinct values instead
        u = np.unique(s)
        return u[np.linspace(0, u.size - 1, k).round().astype(np.int64)]
    return np.interp((np.arange(k) + 0.5) / k, cdf / cdf[-1], edges)


def quantize_weights(weights: Any, seed: int = 0, iters: int = 100
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Build an 8-bit codebook for one layer (§8.3; [EXT] k-means like DMP's convertor).

    Returns ``(table, indices)``: ``table`` is 256 FP16 values with entry 0 == 0.0 and
    entries 1..255 the 1-D k-means centroids of the nonzero weights; ``indices`` is
    uint8 with the shape of ``weights`` (exact zeros -> code 0).  With at most 255
    distinct nonzero FP16 values the codebook is exact (unused entries are 0.0).
    Lloyd iterations run on the sorted values with prefix sums, so each one costs
    O(k log n).  Deterministic for a given ``seed`` (used to re-seed empty clusters).
    """
    arr = np.asarray(weights)
    if arr.dtype.kind not in "fiu":
        raise WeightError("weights must be numeric", field="weights.dtype",
                          value=str(arr.dtype), limit="float")
    w = arr.astype(np.float64).reshape(-1)
    if not np.isfinite(w).all():
        raise WeightError("weights must be finite", field="weights", value="inf/nan")
    table = np.zeros(256, dtype=_F16)
    s = np.sort(w[w != 0])
    if s.size == 0:
        return table, np.zeros(arr.shape, dtype=np.uint8)
    with np.errstate(over="ignore"):
        s16 = s.astype(_F16)
    if not np.isfinite(s16).all():
        raise WeightError("weights exceed the FP16 range", field="weights",
                          value=float(np.abs(s).max()), limit=f"|v| <= {_FP16_MAX:g}")
    distinct = np.unique(s16)
    if distinct.size <= 255:
        table[1 : 1 + distinct.size] = distinct
    else:
        rng = np.random.default_rng(seed)
        k = 255
        cent = _init_centroids(s, k)
        csum = np.concatenate([[0.0], np.cumsum(s)])
        span = s[-1] - s[0]
        for _ in range(max(0, int(iters))):
            cut = np.searchsorted(s, (cent[:-1] + cent[1:]) / 2)
            edges = np.concatenate([[0], cut, [s.size]])
            cnt = np.diff(edges)
            sums = csum[edges[1:]] - csum[edges[:-1]]
            new = np.where(cnt > 0, sums / np.maximum(cnt, 1), cent)
            empty = cnt == 0
            if empty.any():
                cand = distinct.astype(np.float64)
                new[empty] = rng.choice(cand, int(empty.sum()), replace=False)
            new.sort()
            moved = np.abs(new - cent).max()
            cent = new
            if not empty.any() and moved <= 1e-9 * span:
                break
        table[1:] = cent.astype(_F16)
    return table, _nearest_codes(w, table).reshape(arr.shape)


def quantization_error(weights: Any, table: Any, indices: Any) -> dict[str, float]:
    """Error of ``table[indices]`` against ``weights``: ``max_abs``, ``rms``, ``rel_rms``.

    ``rel_rms`` is ``rms / rms(weights)`` (0.0 when both are zero).
    """
    w = np.asarray(weights, dtype=np.float64)
    idx = np.asarray(indices)
    if idx.dtype != np.uint8 or idx.shape != w.shape:
        raise WeightError("indices must be uint8 with the shape of weights",
                          field="indices", value=(str(idx.dtype), idx.shape),
                          limit=("uint8", w.shape))
    t = _fp16(table, "table", (256,)).astype(np.float64)
    err = t[idx] - w
    if err.size == 0:
        return {"max_abs": 0.0, "rms": 0.0, "rel_rms": 0.0}
    rms = float(np.sqrt(np.mean(err * err)))
    ref = float(np.sqrt(np.mean(w * w)))
    rel = rms / ref if ref > 0 else (0.0 if rms == 0 else float("inf"))
    return {"max_abs": float(np.abs(err).max()), "rms": rms, "rel_rms": rel}
