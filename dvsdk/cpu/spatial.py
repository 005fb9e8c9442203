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
def _roi_samples(roi: Arr, scale: float, half: bool, h: int, w: int, ph: int, pw: int,
                 ratio: int) -> tuple[list, int, int]:
    """Per bin, in grid order, the (positions, weights) of its samples (float32)."""
    f = np.float32
    off = f(0.5) if half else f(0.0)
    x0, y0, x1, y1 = (f(v) * f(scale) - off for v in roi)
    rw, rh = x1 - x0, y1 - y0
    if not half:
        rw, rh = max(rw, f(1.0)), max(rh, f(1.0))
    bh, bw = rh / f(ph), rw / f(pw)
    gh = ratio if ratio > 0 else int(np.ceil(rh / f(ph)))
    gw = ratio if ratio > 0 else int(np.ceil(rw / f(pw)))
    bins = []
    for i, j in itertools.product(range(ph), range(pw)):
        samples = []
        for iy, ix in itertools.product(range(gh), range(gw)):
            y = y0 + f(i) * bh + f(iy + 0.5) * bh / f(gh)
            x = x0 + f(j) * bw + f(ix + 0.5) * bw / f(gw)
            if y < -1.0 or y > h or x < -1.0 or x > w:
                samples.append(((0, 0, 0, 0), (f(0),) * 4))
                continue
            y, x = max(y, f(0)), max(x, f(0))
            ylo, xlo = int(y), int(x)
            if ylo >= h - 1:
                ylo = yhi = h - 1
                y = f(ylo)
            else:
                yhi = ylo + 1
            if xlo >= w - 1:
                xlo = xhi = w - 1
                x = f(xlo)
            else:
                xhi = xlo + 1
            ly, lx = y - f(ylo), x - f(xlo)
            hy, hx = f(1.0) - ly, f(1.0) - lx
            samples.append(((ylo * w + xlo, ylo * w + xhi, yhi * w + xlo, yhi * w + xhi),
                            (hy * hx, hy * lx, ly * hx, ly * lx)))
        bins.append(samples)
    return bins, gh, gw


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
    xf = x.astype(np.float32).reshape(n, c, h * w)
    out = np.zeros((rois.shape[0], c, ph * pw), np.float32)
    for r in range(rois.shape[0]):
        bins, gh, gw = _roi_samples(rois[r], scale, ctm == "half_pixel", h, w, ph, pw, ratio)
        img = xf[bidx[r]]                                     # (C, H*W)
        for b, samples in enumerate(bins):
            acc = None
            for pos, wt in samples:
                terms = [wt[k] * img[:, pos[k]] for k in range(4)]
                if mode == "avg":
                    v = terms[0] + terms[1] + terms[2] + terms[3]
                    acc = (np.zeros(c, np.float32) if acc is None else acc) + v
                else:
                    v = np.maximum(np.maximum(np.maximum(terms[0], terms[1]), terms[2]),
                                   terms[3])
                    acc = v if acc is None else np.maximum(acc, v)
            if acc is None:
                continue
            out[r, :, b] = acc / f(max(gh * gw, 1)) if mode == "avg" else acc
    return [out.reshape(rois.shape[0], c, ph, pw).astype(x.dtype)]


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
