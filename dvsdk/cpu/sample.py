"""Sampling kernels: cubic Resize (opset 19) and GridSample (opsets 16 and 20).

Cubic Resize: separable over the resized axes; each output coordinate maps back to ``x``
by the coordinate transformation mode (the float32 formulas of the nearest/linear modes,
:func:`dvsdk.cpu.resize._source_coords`), and the four taps ``floor(x) - 1 .. floor(x) + 2``
(clamped to the edge) are weighted by Keys' cubic kernel with ``cubic_coeff_a`` (default
-0.75) at distances ``t + 1, t, 1 - t, 2 - t`` (``t = x - floor(x)``); with
``exclude_outside`` the taps outside the input get weight 0 and the rest are divided by
their sum.

GridSample: ``grid[n, *out]`` holds normalized coordinates in [-1, 1], innermost axis
first ((x, y) for 2-D); ``align_corners`` maps -1 and 1 to the centres (1) or the outer
edges (0) of the corner pixels.  Modes ``linear``/``bilinear`` (2**rank taps),
``nearest`` (round half to even) and ``cubic``/``bicubic`` (4**rank taps, Keys' kernel with
a = -0.75); padding ``zeros`` (taps outside read 0), ``border`` (coordinates and taps
clamped to the edge) and ``reflection`` (coordinates and taps reflected at the borders:
the pixel centres with align_corners, else the outer edges), for any number of spatial
axes, as the ONNX reference implementation does.

Arithmetic (firmware_spec/arithmetic.md, the CPU steps): coordinates and cubic weights in
float32 by the ONNX formulas' operations in their order (as the ONNX reference and
onnxruntime compute them), linear weights and the weighted sums in float64 in tap order
(axis by axis for Resize), rounded once to the input type.  No onnx import.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ..errors import ModelError

__all__ = ["resize_cubic", "grid_sample", "cubic_weights"]

Arr = np.ndarray


def cubic_weights(t: Arr, a: float) -> list[Arr]:
    """Keys' kernel for the four taps at distances ``t + 1, t, 1 - t, 2 - t``: float32
    operations in the order of the ONNX reference's (and onnxruntime's) formulas, the
    constants ``a + 2``, ``a + 3``, ``5a``, ``8a``, ``4a`` rounded to float32 once."""
    t = np.asarray(t, np.float32)
    f = np.float32
    one, two = f(1), f(2)
    a2, a3, a5, a8, a4, af = f(a + 2), f(a + 3), f(5 * a), f(8 * a), f(4 * a), f(a)

    def near(d: Arr) -> Arr:  # |d| <= 1
        return (a2 * d - a3) * d * d + one

    def far(d: Arr) -> Arr:   # 1 < |d| < 2
        return ((af * d - a5) * d + a8) * d - a4

    return [far(t + one), near(t), near(one - t), far(two - t)]


def resize_cubic(x: Arr, out: list[int], scales: list[float], attrs: dict[str, Any],
                 source_coords: Any) -> Arr:
    """Cubic Resize of ``x`` to shape ``out`` (see the module docstring)."""
    a = float(attrs.get("cubic_coeff_a", -0.75))
    exclude = int(attrs.get("exclude_outside", 0))
    ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
    y = x.astype(np.float64)
    for ax in range(x.ndim):
        n_in, n_out = x.shape[ax], out[ax]
        if n_in == n_out and scales[ax] == 1.0:
            continue
        xs = source_coords(ctm, n_out, n_in, scales[ax])  # float32
        base = np.floor(xs)
        ws = [w.astype(np.float64) for w in cubic_weights(xs - base, a)]
        taps = [base.astype(np.int64) + k - 1 for k in range(4)]
        if exclude:
            ws = [np.where((i >= 0) & (i < n_in), w, 0.0) for w, i in zip(ws, taps,
                                                                         strict=True)]
            total = ws[0] + ws[1] + ws[2] + ws[3]
            ws = [w / total for w in ws]
        shape = [1] * x.ndim
        shape[ax] = n_out
        acc = None
        for w, i in zip(ws, taps, strict=True):
            term = np.take(y, np.clip(i, 0, n_in - 1), axis=ax) * w.reshape(shape)
            acc = term if acc is None else acc + term
        y = acc
    return np.ascontiguousarray(y.astype(x.dtype))


def _reflect(v: Arr, lo: float, hi: float) -> Arr:
    """Reflect ``v`` at ``lo`` and ``hi`` until it lies in [lo, hi] (the reference's)."""
    span = hi - lo
    if span <= 0:
        return np.full_like(v, lo)
    below, above = v < lo, v > hi
    d = np.where(below, lo - v, np.where(above, v - hi, 0.0))
    n = np.trunc(d / span)
    r = d - n * span
    even = (n % 2) == 0
    from_lo, from_hi = lo + r, hi - r
    low_side = np.where(even, from_lo, from_hi)
    high_side = np.where(even, from_hi, from_lo)
    return np.where(below, low_side, np.where(above, high_side, v))


_MODES = {"linear": "linear", "bilinear": "linear", "nearest": "nearest", "cubic": "cubic",
          "bicubic": "cubic"}


def grid_sample(inputs: list, attrs: dict[str, Any]) -> list[Arr]:
    """ONNX GridSample-20 (and -16's mode names): see the module docstring."""
    x, grid = inputs[0], np.asarray(inputs[1])
    mode = _MODES.get(str(attrs.get("mode", "linear")))
    if mode is None:
        raise ModelError("GridSample mode not supported", field="GridSample.mode",
                         value=attrs.get("mode"), limit=sorted(_MODES))
    pad = str(attrs.get("padding_mode", "zeros"))
    if pad not in ("zeros", "border", "reflection"):
        raise ModelError("GridSample padding_mode not supported",
                         field="GridSample.padding_mode", value=pad,
                         limit="zeros, border, reflection")
    align = int(attrs.get("align_corners", 0))
    dims = x.shape[2:]
    nd = len(dims)
    if grid.shape[-1] != nd or grid.shape[0] != x.shape[0] or grid.ndim != x.ndim:
        raise ModelError("GridSample grid must be (N, *out, rank - 2)", field="GridSample.grid",
                         value=list(grid.shape), limit=[x.shape[0], "...", nd])
    g = grid.astype(np.float32)
    one, two = np.float32(1), np.float32(2)
    coords, axis_taps = [], []
    for a in range(nd):
        n_ = g[..., nd - 1 - a]
        size = np.float32(dims[a])
        # float32 operations in the order of the ONNX formulas (onnxruntime's too)
        c = (n_ + one) / two * (size - one) if align else ((n_ + one) * size - one) / two
        c = c.astype(np.float64)
        size = dims[a]
        if mode == "nearest":
            c = np.rint(c)
        lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        outside = (c < lo) | (c > hi)
        if pad == "border":
            c = np.where(outside, np.clip(c, 0, size - 1), c)
        elif pad == "reflection":
            c = np.where(outside, _reflect(c, lo, hi), c)
        coords.append(c)
        if mode == "nearest":
            axis_taps.append([(c.astype(np.int64), np.ones_like(c))])
            continue
        base = np.floor(c)
        t = c - base
        b = base.astype(np.int64)
        if mode == "linear":
            axis_taps.append([(b, 1.0 - t), (b + 1, t)])
        else:
            axis_taps.append([(b + k - 1, w.astype(np.float64)) for k, w in enumerate(
                cubic_weights(t.astype(np.float32), -0.75))])
    nidx = np.arange(x.shape[0]).reshape((-1,) + (1,) * (grid.ndim - 2))
    xd = x.astype(np.float64)
    acc = None
    for combo in itertools.product(*axis_taps):
        weight = None
        idx = []
        valid = None
        for a, (i, w) in enumerate(combo):
            size = dims[a]
            if pad == "zeros":
                ok = (i >= 0) & (i < size)
                valid = ok if valid is None else valid & ok
                i = np.clip(i, 0, size - 1)
            elif pad == "border":
                i = np.clip(i, 0, size - 1)
            else:
                lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
                i = np.trunc(_reflect(i.astype(np.float64), lo, hi)).astype(np.int64)
                i = np.clip(i, 0, size - 1)
            idx.append(i)
            weight = w if weight is None else weight * w
        v = xd[(nidx, slice(None), *idx)] if nd else xd  # (N, *out, C)
        if valid is not None:
            v = np.where(valid[..., None], v, 0.0)
        term = v * weight[..., None]
        acc = term if acc is None else acc + term
    y = np.moveaxis(acc, -1, 1)
    return [np.ascontiguousarray(y.astype(x.dtype))]
