"""ONNX ``Resize`` on the CPU: the output size from ``scales`` or ``sizes``, each axis's
source coordinates for its ``coordinate_transformation_mode``, nearest (with its
``nearest_mode``), linear (separable, axis by axis) and cubic
(:func:`dvsdk.cpu.sample.resize_cubic`) sampling.  The compiler's shape inference shares
:func:`resize_output_shape` with the kernel, so both agree by construction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ModelError
from .sample import resize_cubic

Arr = np.ndarray
Attrs = dict[str, Any]


def _resize_params(x_shape: Sequence[int], scales: Arr | None, sizes: Arr | None,
                   attrs: Attrs) -> tuple[list[int], list[float]]:
    rank = len(x_shape)
    axes = attrs.get("axes")
    axes = [int(a) % rank for a in axes] if axes else list(range(rank))
    out = [int(v) for v in x_shape]
    sc = [1.0] * rank
    if sizes is not None and sizes.size:
        for j, ax in enumerate(axes):
            out[ax] = int(sizes[j])
            sc[ax] = float(np.float32(out[ax]) / np.float32(x_shape[ax]))
        policy = attrs.get("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            s = pick(sc[ax] for ax in axes)
            for ax in axes:
                sc[ax] = s
                out[ax] = int(math.floor(x_shape[ax] * s + 0.5))
    elif scales is not None and scales.size:
        for j, ax in enumerate(axes):
            sc[ax] = float(scales[j])
            out[ax] = int(np.floor(np.float32(x_shape[ax]) * np.float32(sc[ax])))
    else:
        raise ModelError("Resize needs scales or sizes", field="Resize")
    return out, sc


def resize_output_shape(x_shape: Sequence[int], scales: Arr | None, sizes: Arr | None,
                        attrs: Attrs) -> tuple[int, ...]:
    """Output shape of Resize (floor(in * scale), or ``sizes``)."""
    return tuple(_resize_params(x_shape, scales, sizes, attrs)[0])


def _source_coords(mode: str, n_out: int, n_in: int, scale: float) -> Arr:
    x = np.arange(n_out, dtype=np.float32)
    s = np.float32(scale)
    if mode == "half_pixel":
        return (x + np.float32(0.5)) / s - np.float32(0.5)
    if mode == "pytorch_half_pixel":
        if n_out <= 1:
            return np.zeros(n_out, np.float32)
        return (x + np.float32(0.5)) / s - np.float32(0.5)
    if mode == "align_corners":  # the resized length is in * scale, unrounded (ONNX Resize)
        if n_out <= 1:
            return np.zeros(n_out, np.float32)
        return x * np.float32(n_in - 1) / (s * np.float32(n_in) - np.float32(1))
    if mode == "asymmetric":
        return x / s
    if mode == "tf_half_pixel_for_nn":
        return (x + np.float32(0.5)) / s
    if mode == "half_pixel_symmetric":
        adj = np.float32(n_out) / (s * np.float32(n_in))
        off = np.float32(n_in) / np.float32(2) * (np.float32(1) - adj)
        return off + (x + np.float32(0.5)) / s - np.float32(0.5)
    raise ModelError("Resize coordinate_transformation_mode not supported", field="Resize",
                     value=mode)


def _nearest_index(xs: Arr, mode: str, scale: float, n_in: int) -> Arr:
    if mode in ("round_prefer_floor", "round_prefer_ceil"):
        # float32 coordinates within 1e-6 of a half are ties (onnxruntime does the same, so
        # e.g. 7 -> 2 with scale 2/7 picks the tie rule the exact ratio 3.5 calls for)
        base = np.floor(xs)
        frac = xs - base
        tie = np.abs(frac - np.float32(0.5)) < 1e-6
        up = frac > 0.5 if mode == "round_prefer_floor" else frac >= 0.5
        up = np.where(tie, mode == "round_prefer_ceil", up)
        idx = base + up
    elif mode == "floor":
        idx = np.floor(xs)
    elif mode == "ceil":
        idx = np.ceil(xs)
    elif mode == "simple":  # Upsample / Resize-10: floor when enlarging, ceil when shrinking
        idx = np.floor(xs) if scale >= 1.0 else np.ceil(xs)
    else:
        raise ModelError("Resize nearest_mode not supported", field="Resize", value=mode)
    return np.clip(idx, 0, n_in - 1).astype(np.int64)


def resize(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX Resize, modes nearest, linear (separable, n-linear) and cubic
    (:func:`dvsdk.cpu.sample.resize_cubic`)."""
    x = inputs[0]
    scales = inputs[2] if len(inputs) > 2 else None
    sizes = inputs[3] if len(inputs) > 3 else None
    mode = attrs.get("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        raise ModelError("Resize mode not supported", field="Resize.mode", value=mode,
                         limit="nearest, linear, cubic")
    if attrs.get("antialias", 0) and mode != "nearest":
        raise ModelError("Resize antialias not supported", field="Resize.antialias", value=1)
    ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
    out, sc = _resize_params(x.shape, scales, sizes, attrs)
    if mode == "cubic":
        return [resize_cubic(x, out, sc, attrs, _source_coords)]
    y = x
    for ax in range(x.ndim):
        n_in, n_out = x.shape[ax], out[ax]
        if n_in == n_out and sc[ax] == 1.0:
            continue
        xs = _source_coords(ctm, n_out, n_in, sc[ax])
        if mode == "nearest":
            idx = _nearest_index(xs, attrs.get("nearest_mode", "round_prefer_floor"), sc[ax], n_in)
            y = np.take(y, idx, axis=ax)
        else:
            xs = np.clip(xs, 0, n_in - 1)
            i0 = np.floor(xs).astype(np.int64)
            i1 = np.minimum(i0 + 1, n_in - 1)
            w1 = (xs - i0).astype(np.float32)
            shape = [1] * x.ndim
            shape[ax] = n_out
            w1 = w1.reshape(shape)
            y = np.take(y, i0, axis=ax) * (1 - w1) + np.take(y, i1, axis=ax) * w1
    return [np.ascontiguousarray(y, dtype=x.dtype)]
