"""numpy references for the OpenVX NN kernels, written from the seed's equations
(``formats.md`` §2.6) in OpenVX's own dimension order: arrays are indexed ``a[x, y, c, n]``
(activations) and ``w[m, n, l, i]`` = ``[kx, ky, IFM, OFM]`` (weights), nothing converted
to NCHW.  Independent of ``dvsdk.vx`` (no import of it) so the tests compare against them.
"""

from __future__ import annotations

import math

import numpy as np


def out_size(size: int, pad: int, k_eff: int, skip: int, ceil: bool) -> int:
    span = size + 2 * pad - k_eff
    return (math.ceil(span / skip) if ceil else span // skip) + 1


def _padded(x: np.ndarray, px: int, py: int, ex: int = 0, ey: int = 0) -> np.ndarray:
    """Zero padding on each side, plus ``ex``/``ey`` zeros at the end (ceil overhang)."""
    return np.pad(x, ((px, px + ex), (py, py + ey)) + ((0, 0),) * (x.ndim - 2))


def convolution(x, w, b, pad=(0, 0), dil=(0, 0), skip=(1, 1), ceil=False):
    """out[j, k, i] = sum_l sum_{m,n} in_padded[j*sx + m*(dx+1), k*sy + n*(dy+1), l]
    * w[m, n, l, i] + b[i] (or b[j, k, i])."""
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    kx, ky, _, m_out = w.shape
    keff = [w.shape[a] + (w.shape[a] - 1) * dil[a] for a in (0, 1)]
    ow, oh = (out_size(x.shape[a], pad[a], keff[a], skip[a], ceil) for a in (0, 1))
    ex = max(0, (ow - 1) * skip[0] + keff[0] - (x.shape[0] + 2 * pad[0]))
    ey = max(0, (oh - 1) * skip[1] + keff[1] - (x.shape[1] + 2 * pad[1]))
    p = _padded(x, pad[0], pad[1], ex, ey)
    out = np.zeros((ow, oh, m_out) + x.shape[3:])
    for m in range(kx):
        for n in range(ky):
            xs = m * (dil[0] + 1)
            ys = n * (dil[1] + 1)
            patch = p[xs: xs + (ow - 1) * skip[0] + 1: skip[0],
                      ys: ys + (oh - 1) * skip[1] + 1: skip[1]]
            out += np.einsum("jkl...,li->jki...", patch, w[m, n])
    if b is not None:
        b = np.asarray(b, np.float64)
        out += (b.reshape(b.shape + (1,) * (x.ndim - 3)) if b.ndim == 3
                else b.reshape((1, 1, -1) + (1,) * (x.ndim - 3)))
    return out


def deconvolution(x, w, b, up, pad=(0, 0), a=(0, 0)):
    """Insert up-1 zeros between inputs, pad by k - pad - 1 per side (+a at the end), then
    out[j, k, i] = sum in_up[j + m, k + n, l] * w[m, n, l, i] + b[i]."""
    x = np.asarray(x, np.float64)
    kx, ky = w.shape[:2]
    shape = ((x.shape[0] - 1) * up[0] + 1, (x.shape[1] - 1) * up[1] + 1) + x.shape[2:]
    u = np.zeros(shape)
    u[::up[0], ::up[1]] = x
    p = np.pad(u, ((kx - pad[0] - 1, kx - pad[0] - 1 + a[0]),
                   (ky - pad[1] - 1, ky - pad[1] - 1 + a[1])) + ((0, 0),) * (x.ndim - 2))
    ow, oh = p.shape[0] - kx + 1, p.shape[1] - ky + 1
    out = np.zeros((ow, oh, w.shape[3]) + x.shape[3:])
    for m in range(kx):
        for n in range(ky):
            out += np.einsum("jkl...,li->jki...", p[m:m + ow, n:n + oh], w[m, n])
    if b is not None:
        out += np.asarray(b).reshape((1, 1, -1) + (1,) * (x.ndim - 3))
    return out


def fully_connected(x, w, b):
    """out[i, b] = sum_j in[j, b] w[j, i] + bias[i]; a [W, H, C, B] input flattened in
    OpenVX memory order (dimension 0 fastest)."""
    x = np.asarray(x, np.float64)
    if x.ndim > 2:
        x = x.reshape((-1,) + x.shape[3:], order="F")
    out = np.einsum("j...,ji->i...", x, w)
    if b is not None:
        out += np.asarray(b).reshape((-1,) + (1,) * (out.ndim - 1))
    return out


def pooling(x, kind, size, pad, skip, ceil=False):
    """Zero-padded input, window max or mean (the mean counts the padded zeros)."""
    x = np.asarray(x, np.float64)
    ow, oh = (out_size(x.shape[a], pad[a], size[a], skip[a], ceil) for a in (0, 1))
    ex = max(0, (ow - 1) * skip[0] + size[0] - (x.shape[0] + 2 * pad[0]))
    ey = max(0, (oh - 1) * skip[1] + size[1] - (x.shape[1] + 2 * pad[1]))
    p = _padded(x, pad[0], pad[1], ex, ey)
    wins = [p[m: m + (ow - 1) * skip[0] + 1: skip[0], n: n + (oh - 1) * skip[1] + 1: skip[1]]
            for m in range(size[0]) for n in range(size[1])]
    st = np.stack(wins)
    return st.max(axis=0) if kind == "max" else st.mean(axis=0)


def softmax(x):
    """Over dimension 0 for rank 1 and 2, over dimension 2 for rank 3 and 4."""
    x = np.asarray(x, np.float64)
    axis = 0 if x.ndim <= 2 else 2
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def normalization(x, across, n, alpha, beta):
    """x / (1 + alpha / n * sum x_i^2) ** beta over n maps (across) or an n x n square."""
    x = np.asarray(x, np.float64)
    r = n // 2
    sq = x * x
    s = np.zeros_like(x)
    if across:
        p = np.pad(sq, ((0, 0), (0, 0), (r, r)) + ((0, 0),) * (x.ndim - 3))
        for d in range(n):
            s += p[:, :, d: d + x.shape[2]]
    else:
        p = _padded(sq, r, r)
        for dx in range(n):
            for dy in range(n):
                s += p[dx: dx + x.shape[0], dy: dy + x.shape[1]]
    return x / (1 + alpha / n * s) ** beta


ACTIVATIONS = {
    "LOGISTIC": lambda x, a, b: 1 / (1 + np.exp(-x)),
    "HYPERBOLIC_TAN": lambda x, a, b: a * np.tanh(b * x),
    "RELU": lambda x, a, b: np.maximum(0, x),
    "BRELU": lambda x, a, b: np.minimum(a, np.maximum(0, x)),
    "SOFTRELU": lambda x, a, b: np.log1p(np.exp(x)),
    "ABS": lambda x, a, b: np.abs(x),
    "SQUARE": lambda x, a, b: x * x,
    "SQRT": lambda x, a, b: np.sqrt(x),
    "LINEAR": lambda x, a, b: a * x + b,
}


def roi_pooling(x, rois, pooled):
    """x [W, H, C]; rois [4, R] corners (x0, y0, x1, y1) inclusive; out [pw, ph, C, R]:
    each bin the max of its part of the ROI (Caffe's bins), 0 if that part is empty."""
    x = np.asarray(x, np.float64)
    w, h, c = x.shape[:3]
    pw, ph = pooled
    out = np.zeros((pw, ph, c, rois.shape[1]))
    for r in range(rois.shape[1]):
        x0, y0, x1, y1 = (int(np.floor(abs(v) + 0.5) * np.sign(v)) for v in rois[:, r])
        rw, rh = max(x1 - x0 + 1, 1), max(y1 - y0 + 1, 1)
        for i in range(pw):
            for j in range(ph):
                xs = min(max(math.floor(i * rw / pw) + x0, 0), w)
                xe = min(max(math.ceil((i + 1) * rw / pw) + x0, 0), w)
                ys = min(max(math.floor(j * rh / ph) + y0, 0), h)
                ye = min(max(math.ceil((j + 1) * rh / ph) + y0, 0), h)
                if xe > xs and ye > ys:
                    out[i, j, :, r] = x[xs:xe, ys:ye, :c].reshape(-1, c).max(axis=0)
    return out
