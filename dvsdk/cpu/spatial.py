"""Spatial kernels: LpPool, MaxUnpool, RoiAlign, Col2Im, AffineGrid (ONNX semantics).

Arithmetic (firmware_spec/arithmetic.md, the CPU steps):

* LpPool: ``|x| ** p`` (integer p: repeated float64 multiplication) summed in float64 one
  window tap at a time (C order of the taps; padding reads 0), then the p-th root by
  :func:`dvsdk.hw.elementary.power`, rounded once to the input type;
* MaxUnpool: moves values (each input value to its flat index in the inferred shape, the
  result placed at the start of ``output_shape`` when given), as the ONNX reference does;
* RoiAlign: the ONNX reference's (onnxruntime's) float32 operations in their order: ROI
  corners, bin sizes, sample coordinates, bilinear weights, then per bin the samples'
  ``w1*v1 + w2*v2 + w3*v3 + w4*v4`` added in grid order and divided by their count
  (``avg``) or their maximum (``max``);
* Col2Im: every block tap added in float64 in tap order (C order), rounded once;
* AffineGrid: the base grid ``-1 + (2i + 1) / n`` (or ``-1 + 2i / (n - 1)`` with
  ``align_corners``) in float64, each output coordinate ``theta[.., 0] * x + theta[.., 1] *
  y (+ ...) + theta[.., last]`` in float64 in that order, rounded once to float32.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ..errors import ModelError
from ..hw import elementary
from .nn import _pool_prepare, _windows, resolve_pool

__all__ = ["SPATIAL_KERNELS", "maxunpool_shape", "col2im_shape"]

Arr = np.ndarray
Attrs = dict[str, Any]


# --------------------------------------------------------------------------- LpPool
def lp_pool(inputs: list, attrs: Attrs) -> list[Arr]:
    x = inputs[0]
    p = int(attrs.get("p", 2))
    if p < 1:
        raise ModelError("LpPool p must be >= 1", field="LpPool.p", value=p, limit=">= 1")
    a = resolve_pool(attrs, x.shape)
    n = x.ndim - 2
    xp, out_shape, _ = _pool_prepare(np.abs(x.astype(np.float64)), a, 0.0)
    win = _windows(xp, out_shape[2:], a["kernel_shape"], a["strides"], a["dilations"])
    acc = np.zeros(out_shape, np.float64)
    for tap in np.ndindex(*a["kernel_shape"]):      # one tap at a time (fixed order)
        v = win[(Ellipsis, *tap)]
        term = v
        for _ in range(p - 1):
            term = term * v
        acc += term
    if n == 0:
        raise ModelError("LpPool needs a spatial axis", field="LpPool.input", value=x.shape)
    return [elementary.power(acc, 1.0 / p).astype(x.dtype)]


# --------------------------------------------------------------------------- MaxUnpool
def _unpool_inferred(x_shape: tuple, attrs: Attrs) -> tuple[int, ...]:
    k = [int(v) for v in attrs["kernel_shape"]]
    n = len(k)
    s = [int(v) for v in attrs.get("strides") or [1] * n]
    pads = [int(v) for v in attrs.get("pads") or [0] * (2 * n)]
    return (int(x_shape[0]), int(x_shape[1]),
            *((x_shape[2 + i] - 1) * s[i] - pads[i] - pads[n + i] + k[i] for i in range(n)))


def maxunpool_shape(x_shape: tuple, attrs: Attrs, output_shape: Arr | None) -> tuple:
    inferred = _unpool_inferred(x_shape, attrs)
    if output_shape is None:
        return inferred
    out = tuple(int(v) for v in np.asarray(output_shape).reshape(-1))
    if len(out) != len(inferred) or any(o < i for o, i in zip(out, inferred, strict=True)):
        raise ModelError("MaxUnpool output_shape must be at least the inferred shape",
                         field="MaxUnpool.output_shape", value=out, limit=inferred)
    return out


def max_unpool(inputs: list, attrs: Attrs) -> list[Arr]:
    x, idx = inputs[0], np.asarray(inputs[1], np.int64)
    out_given = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
    inferred = _unpool_inferred(x.shape, attrs)
    total = int(np.prod(inferred))
    if idx.shape != x.shape or (idx.size and (idx.min() < 0 or idx.max() >= total)):
        raise ModelError("MaxUnpool indices must match X and lie in the output",
                         field="MaxUnpool.I", value=idx.shape, limit=total)
    flat = np.zeros(total, x.dtype)
    flat[idx.reshape(-1)] = x.reshape(-1)
    y = np.zeros(maxunpool_shape(x.shape, attrs, out_given), x.dtype)
    y[tuple(slice(0, d) for d in inferred)] = flat.reshape(inferred)
    return [y]


# --------------------------------------------------------------------------- RoiAlign
def _roi_axis(start: Arr, size: Arr, n: int, g: int, limit: int
              ) -> tuple[Arr, Arr, Arr, Arr, Arr]:
    """One axis of the samples of ROIs whose grid has ``g`` samples a bin, each array
    (R, n bins, g samples), float32 in the reference's order: the coordinate
    ``start + bin * size + (k + 0.5) * size / g``, whether it lies in ``[-1, limit]``, its
    lower and upper neighbour and its weights ``(1 - l, l)``, clamped at the last pixel."""
    f = np.float32
    b = np.arange(n, dtype=f)[None, :, None]
    k = (np.arange(g) + 0.5).astype(f)[None, None, :]
    size = size[:, None, None]
    c = start[:, None, None] + b * size + k * size / f(g)
    inside = ~((c < -1.0) | (c > limit))
    c = np.where(f(0) > c, f(0), c)                      # max(c, 0), keeping -0.0
    lo = np.where(inside, c, f(0)).astype(np.int64)      # truncation of c >= 0
    last = lo >= limit - 1
    lo = np.where(last, limit - 1, lo)
    hi = np.where(last, lo, lo + 1)
    c = np.where(last, lo.astype(f), c)
    low = c - lo.astype(f)
    return inside, lo, hi, f(1.0) - low, low


def roi_align(inputs: list, attrs: Attrs) -> list[Arr]:
    x, rois, bidx = inputs[0], np.asarray(inputs[1]), np.asarray(inputs[2], np.int64)
    mode = str(attrs.get("mode", "avg"))
    ctm = str(attrs.get("coordinate_transformation_mode", "half_pixel"))
    if mode not in ("avg", "max") or ctm not in ("half_pixel", "output_half_pixel"):
        raise ModelError("RoiAlign mode must be avg or max, coordinate_transformation_mode "
                         "half_pixel or output_half_pixel", field="RoiAlign.mode",
                         value=(mode, ctm))
    ph, pw = int(attrs.get("output_height", 1)), int(attrs.get("output_width", 1))
    ratio, scale = int(attrs.get("sampling_ratio", 0)), float(attrs.get("spatial_scale", 1.0))
    n, c, h, w = x.shape
    if rois.ndim != 2 or rois.shape[1] != 4 or bidx.shape != (rois.shape[0],) or (
            bidx.size and (bidx.min() < 0 or bidx.max() >= n)):
        raise ModelError("RoiAlign needs rois (R, 4) and R batch indices into X",
                         field="RoiAlign.rois", value=(rois.shape, bidx.shape), limit=n)
    f = np.float32
    half = ctm == "half_pixel"
    corners = rois.astype(f) * f(scale) - (f(0.5) if half else f(0.0))
    if not np.isfinite(corners).all():
        raise ModelError("RoiAlign rois must be finite", field="RoiAlign.rois",
                         value=rois[~np.isfinite(corners).all(axis=1)][:1].tolist())
    x0, y0, x1, y1 = corners.T
    rw, rh = x1 - x0, y1 - y0
    if not half:
        rw, rh = np.where(f(1.0) > rw, f(1.0), rw), np.where(f(1.0) > rh, f(1.0), rh)
    bh, bw = rh / f(ph), rw / f(pw)
    r_count = rois.shape[0]
    gh = np.full(r_count, ratio) if ratio > 0 else np.ceil(rh / f(ph)).astype(np.int64)
    gw = np.full(r_count, ratio) if ratio > 0 else np.ceil(rw / f(pw)).astype(np.int64)
    rows = np.ascontiguousarray(x.astype(np.float32).reshape(n, c, h * w)
                                .transpose(0, 2, 1)).reshape(n * h * w, c)  # a pixel a row
    out = np.zeros((r_count, ph * pw, c), np.float32)
    # ROIs with the same sample grid at once; their samples one at a time, vectorized over
    # the ROIs, channels and bins, so each bin adds its samples in grid order
    for g_h, g_w in {(a, b) for a, b in zip(gh.tolist(), gw.tolist()) if a > 0 and b > 0}:
        idx = np.flatnonzero((gh == g_h) & (gw == g_w))
        yin, ylo, yhi, yh, yl = _roi_axis(y0[idx], bh[idx], ph, g_h, h)
        xin, xlo, xhi, xh, xl = _roi_axis(x0[idx], bw[idx], pw, g_w, w)
        base = (bidx[idx] * (h * w))[:, None]                   # each ROI's image
        acc = None
        for iy, ix in itertools.product(range(g_h), range(g_w)):
            ok = yin[:, :, None, iy] & xin[:, None, :, ix]     # (r, ph, pw)
            pos = [ylo[:, :, None, iy] * w + xlo[:, None, :, ix],
                   ylo[:, :, None, iy] * w + xhi[:, None, :, ix],
                   yhi[:, :, None, iy] * w + xlo[:, None, :, ix],
                   yhi[:, :, None, iy] * w + xhi[:, None, :, ix]]
            wts = [yh[:, :, None, iy] * xh[:, None, :, ix],
                   yh[:, :, None, iy] * xl[:, None, :, ix],
                   yl[:, :, None, iy] * xh[:, None, :, ix],
                   yl[:, :, None, iy] * xl[:, None, :, ix]]
            vals = []
            for p, wt in zip(pos, wts):
                p = base + np.where(ok, p, 0).reshape(len(idx), ph * pw)
                wt = np.where(ok, wt, f(0)).reshape(len(idx), ph * pw, 1)
                vals.append(wt * rows[p])                       # (r, bins, C)
            if mode == "avg":
                v = vals[0] + vals[1] + vals[2] + vals[3]
                acc = (np.zeros_like(v) if acc is None else acc) + v
            else:
                v = np.maximum(np.maximum(np.maximum(vals[0], vals[1]), vals[2]), vals[3])
                acc = v if acc is None else np.maximum(acc, v)
        out[idx] = acc / f(g_h * g_w) if mode == "avg" else acc
    return [out.transpose(0, 2, 1).reshape(r_count, c, ph, pw).astype(x.dtype)]


# --------------------------------------------------------------------------- Col2Im
def _col2im_geometry(in_shape: tuple, image: list[int], block: list[int], attrs: Attrs
                     ) -> tuple[list[int], list[int], list[int], list[int]]:
    n = len(image)
    d = [int(v) for v in attrs.get("dilations") or [1] * n]
    s = [int(v) for v in attrs.get("strides") or [1] * n]
    pads = [int(v) for v in attrs.get("pads") or [0] * (2 * n)]
    if len(block) != n or len(d) != n or len(s) != n or len(pads) != 2 * n or \
            min(block + d + s, default=1) < 1:
        raise ModelError("Col2Im image_shape, block_shape, dilations, strides and pads "
                         "disagree", field="Col2Im.block_shape", value=(image, block))
    grid = [(image[i] + pads[i] + pads[n + i] - (d[i] * (block[i] - 1) + 1)) // s[i] + 1
            for i in range(n)]
    k = int(np.prod(block))
    if len(in_shape) != 3 or in_shape[1] % k or min(grid) < 1 or \
            in_shape[2] != int(np.prod(grid)):
        raise ModelError("Col2Im input must be (N, C * prod(block_shape), L) with L the "
                         "number of blocks", field="Col2Im.input", value=tuple(in_shape),
                         limit=(k, grid))
    return d, s, pads, grid


def col2im_shape(in_shape: tuple, image: Arr, block: Arr, attrs: Attrs) -> tuple:
    im = [int(v) for v in np.asarray(image).reshape(-1)]
    bl = [int(v) for v in np.asarray(block).reshape(-1)]
    _col2im_geometry(in_shape, im, bl, attrs)
    return (int(in_shape[0]), int(in_shape[1]) // int(np.prod(bl)), *im)


def col2im(inputs: list, attrs: Attrs) -> list[Arr]:
    x = inputs[0]
    image = [int(v) for v in np.asarray(inputs[1]).reshape(-1)]
    block = [int(v) for v in np.asarray(inputs[2]).reshape(-1)]
    d, s, pads, grid = _col2im_geometry(x.shape, image, block, attrs)
    n = len(image)
    k = int(np.prod(block))
    N, C = x.shape[0], x.shape[1] // k
    cols = x.astype(np.float64).reshape(N, C, *block, *grid)
    full = [pads[i] + image[i] + pads[n + i] + s[i] + d[i] * block[i] for i in range(n)]
    acc = np.zeros((N, C, *full), np.float64)
    for tap in np.ndindex(*block):                 # one block tap at a time (fixed order)
        sel = tuple(slice(tap[i] * d[i], tap[i] * d[i] + s[i] * (grid[i] - 1) + 1, s[i])
                    for i in range(n))
        acc[(slice(None), slice(None), *sel)] += cols[(slice(None), slice(None), *tap)]
    crop = tuple(slice(pads[i], pads[i] + image[i]) for i in range(n))
    return [acc[(slice(None), slice(None), *crop)].astype(x.dtype)]


# --------------------------------------------------------------------------- AffineGrid
def affine_grid(inputs: list, attrs: Attrs) -> list[Arr]:
    theta = np.asarray(inputs[0], np.float64)
    size = [int(v) for v in np.asarray(inputs[1]).reshape(-1)]
    sp = size[2:]
    nd = len(sp)
    if nd not in (2, 3) or theta.shape != (size[0], nd, nd + 1):
        raise ModelError("AffineGrid needs size (N, C, H, W) or (N, C, D, H, W) and theta "
                         "(N, 2, 3) or (N, 3, 4)", field="AffineGrid.theta",
                         value=(theta.shape, size))
    align = int(attrs.get("align_corners", 0))
    axes = []
    for m in sp:
        i = np.arange(m, dtype=np.float64)
        if align:
            axes.append(-1.0 + i * (2.0 / (m - 1)) if m > 1 else np.full(m, -1.0))
        else:
            step = 2.0 / m
            axes.append((-1.0 + step / 2) + i * step)
    mesh = np.meshgrid(*axes, indexing="ij")          # (D,) H, W
    coords = [*mesh[::-1]]                            # x (width) first
    out = np.empty((size[0], *sp, nd), np.float64)
    for b in range(size[0]):
        for r in range(nd):
            acc = theta[b, r, 0] * coords[0]
            for j in range(1, nd):
                acc = acc + theta[b, r, j] * coords[j]
            out[b, ..., r] = acc + theta[b, r, nd]
    return [out.astype(np.float32).astype(inputs[0].dtype)]


SPATIAL_KERNELS = {
    "LpPool": lp_pool,
    "MaxUnpool": max_unpool,
    "RoiAlign": roi_align,
    "Col2Im": col2im,
    "AffineGrid": affine_grid,
}
