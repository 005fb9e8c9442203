"""Reference functions for the CTS NN cases, plain numpy, independent of ``dvsdk``.

Two references per kernel where they disagree: ``text`` follows the NN extension's text
(seed S0, ``formats.md`` §2.6: exact sums, one rounding and one overflow policy at the end,
dilation as zeros inserted between taps, the input upscaled before the deconvolution, zero
padding for pooling) and ``cts`` follows the CTS's C reference functions as written
(``test_tensor_nn.c``: per-product rounding, overflow after every input map, taps shifted
by the dilation, deconvolution reading only the first ``input width`` upscaled positions,
pooling windows clamped to the input, ROI starts cast through ``size_t``, Q7.8 ROI
coordinates read as raw integers).  Raw integer values in and out; arrays ``a[x, y, c, n]``.
"""

from __future__ import annotations

import numpy as np

from .vx_cts_cases import FORMATS, cts_wrap_sat, round_shift, wrap_sat


def _fpp(fmt: str) -> int:
    return FORMATS[fmt][3]


# -- convolution and deconvolution: index tables per axis ------------------------------------------

def conv_taps(size: int, pad: int, k: int, d: int, step: int, out: int, cts: bool
              ) -> np.ndarray:
    """[out, k] input indices of each output's taps (``size`` = a padded zero).  Text: tap
    t of output o reads padded position ``o * step + t * (d + 1)``; the CTS adds ``d``."""
    pos = np.arange(out)[:, None] * step + np.arange(k)[None, :] * (d + 1) + (d if cts else 0)
    ok = (pos >= pad) & (pos < size + pad)
    return np.where(ok, pos - pad, size)


def deconv_taps(size: int, pad: int, k: int, up: int, out: int, cts: bool) -> np.ndarray:
    """Text: the input upscaled (``up - 1`` zeros between samples, width ``(size - 1) up +
    1``) and padded by ``k - pad - 1``; output o tap t reads upscaled position
    ``o + t - (k - pad - 1)``.  The CTS bounds that position by ``size`` instead."""
    pos = np.arange(out)[:, None] + np.arange(k)[None, :] - (k - pad - 1)
    limit = size if cts else (size - 1) * up + 1
    ok = (pos >= 0) & (pos < limit) & (pos % up == 0)
    return np.where(ok, pos // up, size)


def _gather_sum(x: np.ndarray, w: np.ndarray, ix: np.ndarray, iy: np.ndarray
                ) -> np.ndarray:
    """sum_{m,n,l} x[ix[j,m], iy[k,n], l, ...] * w[m, n, l, i] -> [j, k, i, ...], exact
    (float64 products and sums of integers below 2**53)."""
    return np.rint(gather_real(x, w, None, ix, iy)).astype(np.int64)


def _bias(b: np.ndarray | None, ndim: int) -> np.ndarray | int:
    if b is None:
        return 0
    b = np.asarray(b, np.int64)
    return b.reshape(b.shape + (1,) * (ndim - 3)) if b.ndim == 3 else \
        b.reshape((1, 1, -1) + (1,) * (ndim - 3))


def conv_text(fmt: str, x, w, b, ix, iy, wrap: bool, ne: bool) -> np.ndarray:
    """``saturate(round(sum_l sum_{m,n} in * w + b))``: exact sum, then the rounding policy
    (Q7.8: 16 fractional bits to 8), then the overflow policy, once."""
    f = _fpp(fmt)
    acc = _gather_sum(x, w, ix, iy) + (_bias(b, x.ndim) * (1 << f) if b is not None else 0)
    return wrap_sat(round_shift(acc, f, ne), fmt, wrap)


def conv_cts(fmt: str, x, w, b, ix, iy, wrap: bool, ne: bool) -> np.ndarray:
    """ownConvolution / ownDeconvolution: each product rounded (Q7.8: ``(p + 128) / 256``
    truncated, for NE) and wrapped or saturated, the sum wrapped or saturated after every
    input map.  For U8 these per-step policies give the text's value (all terms are
    non-negative and wrapping is modular), so only the tap tables differ."""
    if fmt == "U8":
        acc = _gather_sum(x, w, ix, iy) + _bias(b, x.ndim)
        return wrap_sat(acc, fmt, wrap)
    f = _fpp(fmt)
    xz = np.pad(np.asarray(x, np.int64), ((0, 1), (0, 1)) + ((0, 0),) * (x.ndim - 2))
    shape = (ix.shape[0], iy.shape[0], w.shape[3]) + x.shape[3:]
    total = np.broadcast_to(_bias(b, x.ndim), shape).astype(np.int64)
    for l_ in range(w.shape[2]):
        for m in range(w.shape[0]):
            for n in range(w.shape[1]):
                patch = xz[ix[:, m]][:, iy[:, n]][:, :, l_]          # [j, k, ...]
                p = patch[:, :, None] * w[m, n, l_].reshape((1, 1, -1) + (1,) * (x.ndim - 3))
                if f:
                    p = p + (1 << (f - 1)) if ne else p
                    p = np.where(p < 0, -(-p >> f), p >> f)            # C division
                total = total + cts_wrap_sat(p, fmt, wrap)
        total = cts_wrap_sat(total, fmt, wrap)
    return total


# -- fully connected ------------------------------------------------------------------------------

def fc_flat(x: np.ndarray, w: np.ndarray, core: int) -> tuple[np.ndarray, np.ndarray]:
    """[K, batches...] inputs and [K, OFM] weights, K in OpenVX memory order."""
    batches = x.shape[core:]
    xf = x.reshape((-1,) + batches, order="F") if core == 3 else x
    wf = w.reshape((-1, w.shape[-1]), order="F")
    return xf, wf


def fc_text(fmt: str, x, w, b, core: int, wrap: bool, ne: bool) -> np.ndarray:
    f = _fpp(fmt)
    xf, wf = fc_flat(np.asarray(x, np.int64), np.asarray(w, np.int64), core)
    acc = np.tensordot(wf.T.astype(np.float64), xf.astype(np.float64), axes=([1], [0]))
    acc = acc.astype(np.int64)
    if b is not None:
        acc = acc + np.asarray(b, np.int64).reshape((-1,) + (1,) * (acc.ndim - 1)) * (1 << f)
    return wrap_sat(round_shift(acc, f, ne), fmt, wrap)


def fc_cts(fmt: str, x, w, b, core: int, wrap: bool, ne: bool) -> np.ndarray:
    """ownFullyConnected: every product rounded and wrapped/saturated, the sum once."""
    if fmt == "U8":
        xf, wf = fc_flat(np.asarray(x, np.int64), np.asarray(w, np.int64), core)
        acc = np.tensordot(wf.T.astype(np.float64), xf.astype(np.float64), axes=([1], [0]))
        acc = acc.astype(np.int64)
        if b is not None:
            acc = acc + np.asarray(b, np.int64).reshape((-1,) + (1,) * (acc.ndim - 1))
        return wrap_sat(acc, fmt, wrap)
    f = _fpp(fmt)
    xf, wf = fc_flat(np.asarray(x, np.int64), np.asarray(w, np.int64), core)
    p = wf.reshape(wf.shape + (1,) * (xf.ndim - 1)) * xf[:, None]      # [K, O, batches]
    if f:
        p = p + (1 << (f - 1)) if ne else p
        p = np.where(p < 0, -(-p >> f), p >> f)
    acc = cts_wrap_sat(p, fmt, wrap).sum(axis=0)
    if b is not None:
        acc = acc + np.asarray(b, np.int64).reshape((-1,) + (1,) * (acc.ndim - 1))
    return cts_wrap_sat(acc, fmt, wrap)


# -- pooling ---------------------------------------------------------------------------------------

def _windows(size: int, pad: int, k: int, step: int, out: int, cts: bool) -> np.ndarray:
    """[out, k] input index per window cell; ``size`` = a zero (text: padding and the
    ceil overhang are zeros) or, for the CTS, a cell outside the clamped window (-1)."""
    pos = np.arange(out)[:, None] * step + np.arange(k)[None, :]
    ok = (pos >= pad) & (pos < size + pad)
    return np.where(ok, pos - pad, size if not cts else -1)


def pool_ref(fmt: str, x, is_max: bool, size, pad, step, y_dims, cts: bool) -> np.ndarray:
    """Text: max or average over the zero-padded window (``sum / (sx * sy)``, rounded to
    nearest).  CTS: the window clamped to the input; max starts from the type's minimum;
    average ``sum / (sx * sy)`` truncated (C division)."""
    _, lo, hi, _ = FORMATS[fmt]
    x = np.asarray(x, np.int64)
    ix = _windows(x.shape[0], pad[0], size[0], step[0], y_dims[0], cts)
    iy = _windows(x.shape[1], pad[1], size[1], step[1], y_dims[1], cts)
    fillv = (lo if is_max else 0) if cts else 0
    xz = np.pad(x, ((0, 1), (0, 1)) + ((0, 0),) * (x.ndim - 2), constant_values=fillv)
    ix = np.where(ix < 0, x.shape[0], ix)
    iy = np.where(iy < 0, x.shape[1], iy)
    cells = xz[ix][:, :, iy]                               # [ox, kx, oy, ky, ...]
    if is_max:
        r = cells.max(axis=(1, 3))
        if cts:      # an empty clamped window keeps the minimum ... stored as is
            return r
        return r
    s = cells.sum(axis=(1, 3))
    n = size[0] * size[1]
    r = (np.where(s < 0, -(-s // n), s // n) if cts else np.rint(s / n).astype(np.int64))
    return np.clip(r, lo, hi)


# -- softmax, activation ---------------------------------------------------------------------------

def _quantize(real: np.ndarray, fmt: str) -> np.ndarray:
    _, lo, hi, f = FORMATS[fmt]
    return np.clip(np.rint(np.asarray(real, np.float64) * (1 << f)), lo, hi).astype(np.int64)


def softmax_ref(fmt: str, x) -> np.ndarray:
    """``exp(z_i) / sum_k exp(z_k)`` over dim 0 (1-D, 2-D) or dim 2 (3-D, 4-D)."""
    real = np.asarray(x, np.float64) / (1 << _fpp(fmt))
    axis = 0 if real.ndim <= 2 else 2
    e = np.exp(real - real.max(axis=axis, keepdims=True))
    return _quantize(e / e.sum(axis=axis, keepdims=True), fmt)


def activation_ref(fmt: str, x, fn: str, a: float, b: float) -> np.ndarray:
    v = np.asarray(x, np.float64) / (1 << _fpp(fmt))
    return _quantize(activation_real(v, fn, a, b), fmt)


def activation_real(v: np.ndarray, fn: str, a: float, b: float) -> np.ndarray:
    """The nine functions of vx_nn_activation_function_e (``formats.md`` §2.6)."""
    return {"LOGISTIC": lambda: 1 / (1 + np.exp(-v)), "HYPERBOLIC_TAN": lambda: a * np.tanh(b * v),
         "RELU": lambda: np.maximum(v, 0), "BRELU": lambda: np.minimum(a, np.maximum(v, 0)),
         "SOFTRELU": lambda: np.log1p(np.exp(v)), "ABS": lambda: np.abs(v),
         "SQUARE": lambda: v * v, "SQRT": lambda: np.sqrt(np.maximum(v, 0)),
         "LINEAR": lambda: a * v + b}[fn]()


# -- ROI pooling -----------------------------------------------------------------------------------

def roi_ref(fmt: str, data, rois, y_dims, cts: bool) -> np.ndarray:
    """Max over each bin ``[x0 + floor(i w / pw), x0 + ceil((i + 1) w / pw))`` with
    ``w = max(x1 - x0, 0) + 1``; an empty bin is 0.  Text: coordinates are the ROI tensor's
    values (Q7.8: raw / 256, rounded to the nearest input position) and bins are cropped
    to the input ([0, W)).  CTS: coordinates are the raw integers and each bin edge is
    cast through ``size_t`` before the clamp, so a negative start becomes W (empty)."""
    data = np.asarray(data)
    data = data if data.dtype.kind == "f" else data.astype(np.int64)
    rois = np.asarray(rois, np.int64)
    if data.ndim == 3:
        data, rois = data[..., None], rois[..., None]
    W, H, C, B = data.shape
    pw, ph, _, R = y_dims[:4]
    coords = rois if (cts or not _fpp(fmt)) else np.floor(rois / 256.0 + 0.5).astype(np.int64)
    out = np.zeros((pw, ph, C, R, B), data.dtype)
    lo = FORMATS[fmt][1] if data.dtype.kind != "f" else -np.inf

    def edges(c0, extent, n, limit):
        i = np.arange(n)
        beg = c0 + (i * extent) // n
        aft = c0 + ((i + 1) * extent + n - 1) // n
        if cts:
            beg = np.where(beg < 0, limit, np.minimum(beg, limit))
            aft = np.where(aft < 0, limit, np.minimum(aft, limit))
        else:
            beg, aft = np.clip(beg, 0, limit), np.clip(aft, 0, limit)
        return beg, aft

    for bi in range(B):
        for r in range(R):
            x0, y0, x1, y1 = coords[:, r, bi]
            xb, xa = edges(x0, max(x1 - x0, 0) + 1, pw, W)
            yb, ya = edges(y0, max(y1 - y0, 0) + 1, ph, H)
            for i in range(pw):
                for j in range(ph):
                    if xb[i] < xa[i] and yb[j] < ya[j]:
                        cell = data[xb[i]:xa[i], yb[j]:ya[j], :, bi]
                        out[i, j, :, r, bi] = np.maximum(cell.max(axis=(0, 1)), lo)
    return out if len(y_dims) == 5 else out[..., 0]


# -- normalization (our own cases: the CTS's test is commented out) -------------------------------

def lrn_ref(fmt: str, x, same_map: bool, n: int, alpha: float, beta: float,
            divisor: int | None = None) -> np.ndarray:
    """``x / (1 + alpha / n * sum x_i^2) ** beta`` over n maps centred on x (ACROSS_MAPS) or
    the n x n square of its map (SAME_MAP), zero padded; ``divisor`` replaces n (the
    Caffe-style port divides SAME_MAP's alpha by n * n)."""
    v = np.asarray(x, np.float64) / (1 << _fpp(fmt))
    r = n // 2
    sq = v * v
    if same_map:
        p = np.pad(sq, ((r, r), (r, r)) + ((0, 0),) * (v.ndim - 2))
        s = sum(p[i:i + v.shape[0], j:j + v.shape[1]] for i in range(n) for j in range(n))
    else:
        p = np.pad(sq, ((0, 0), (0, 0), (r, r)) + ((0, 0),) * (v.ndim - 3))
        s = sum(p[:, :, i:i + v.shape[2]] for i in range(n))
    return _quantize(v / (1 + alpha / (divisor or n) * s) ** beta, fmt)


# -- FP16 (our own cases: real values, no policies) ---------------------------------------------

def gather_real(x, w, b, ix, iy) -> np.ndarray:
    """The convolution/deconvolution sum in float64 (text taps), plus the bias."""
    xz = np.pad(np.asarray(x, np.float64), ((0, 1), (0, 1)) + ((0, 0),) * (x.ndim - 2))
    wf = np.asarray(w, np.float64)
    acc = 0.0
    for m in range(w.shape[0]):               # one product per kernel column: [j, k, n, l]
        cols = xz[ix[:, m]][:, iy]            # [j, k, ky, l, ...]
        acc = acc + np.tensordot(cols, wf[m], axes=([2, 3], [0, 1]))
    out = np.moveaxis(np.asarray(acc), -1, 2)
    if b is None:
        return out
    b = np.asarray(b, np.float64)
    return out + (b.reshape(b.shape + (1,) * (x.ndim - 3)) if b.ndim == 3 else
                  b.reshape((1, 1, -1) + (1,) * (x.ndim - 3)))


def fc_real(x, w, b, core: int) -> np.ndarray:
    xf, wf = fc_flat(np.asarray(x, np.float64), np.asarray(w, np.float64), core)
    acc = np.tensordot(wf.T, xf, axes=([1], [0]))
    return acc if b is None else acc + np.asarray(b).reshape((-1,) + (1,) * (acc.ndim - 1))


def pool_real(x, is_max: bool, size, pad, step, y_dims) -> np.ndarray:
    x = np.asarray(x, np.float64)
    ix = _windows(x.shape[0], pad[0], size[0], step[0], y_dims[0], False)
    iy = _windows(x.shape[1], pad[1], size[1], step[1], y_dims[1], False)
    cells = np.pad(x, ((0, 1), (0, 1)) + ((0, 0),) * (x.ndim - 2))[ix][:, :, iy]
    return cells.max(axis=(1, 3)) if is_max else cells.sum(axis=(1, 3)) / (size[0] * size[1])


def softmax_real(x) -> np.ndarray:
    x = np.asarray(x, np.float64)
    axis = 0 if x.ndim <= 2 else 2
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)
