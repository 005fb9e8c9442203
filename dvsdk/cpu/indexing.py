"""Index, scan and bitwise kernels: Trilu, CumSum, CumProd, BitShift, BitwiseAnd/Or/Xor/Not,
ScatterElements (and the deprecated Scatter), GatherND, OneHot, EyeLike, CenterCropPad,
ReverseSequence.

ONNX semantics (ONNX Operators, the opsets the backend node tests use); integer and bool
results are exact (numpy's wrapping integer arithmetic).  Float arithmetic
(firmware_spec/arithmetic.md, the CPU steps): CumSum / CumProd add / multiply one position
of the axis at a time in the input's type, in the scan's order (first to last, or last to
first with ``reverse``); ScatterElements' reductions apply the updates one at a time in the
indices' C order (``np.<ufunc>.at``).  The rest only move or select values.  No onnx import.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelError
from .args import check_axis as _axis
from .dtypes import onnx_dtype

__all__ = ["INDEXING_KERNELS"]

Arr = np.ndarray
Attrs = dict[str, Any]


def _indices(idx: Arr, dim: int, op: str) -> Arr:
    """Negative indices count from the end; any outside [-dim, dim - 1] is an error."""
    idx = np.asarray(idx, np.int64)
    if idx.size and (idx.min() < -dim or idx.max() >= dim):
        raise ModelError(f"{op} index out of range", field=f"{op}.indices",
                         value=int(idx.min() if idx.min() < -dim else idx.max()),
                         limit=f"[{-dim}, {dim - 1}]")
    return np.where(idx < 0, idx + dim, idx)


# --------------------------------------------------------------------------- Trilu
def trilu(inputs: list, attrs: Attrs) -> list[Arr]:
    x = inputs[0]
    k = int(np.asarray(inputs[1]).reshape(-1)[0]) if len(inputs) > 1 and inputs[1] is not None \
        else 0
    if x.ndim < 2:
        raise ModelError("Trilu needs a rank >= 2 input", field="Trilu.input", value=x.shape)
    n, m = x.shape[-2:]
    diff = np.arange(m)[None, :] - np.arange(n)[:, None]    # column - row
    keep = diff >= k if int(attrs.get("upper", 1)) else diff <= k
    return [np.where(keep, x, np.zeros((), x.dtype))]


# --------------------------------------------------------------------------- scans
def _scan(ufunc: np.ufunc, op: str) -> Any:
    def kernel(inputs: list, attrs: Attrs) -> list[Arr]:
        x = inputs[0]
        axis = _axis(int(np.asarray(inputs[1]).reshape(-1)[0]), x.ndim, op)
        xs = np.moveaxis(x, axis, 0)
        out = np.empty_like(xs)
        order = range(xs.shape[0] - 1, -1, -1) if int(attrs.get("reverse", 0)) else \
            range(xs.shape[0])
        exclusive = int(attrs.get("exclusive", 0))
        acc = None
        with np.errstate(over="ignore", invalid="ignore"):
            for i in order:          # one position at a time, in the scan's order
                if exclusive:
                    out[i] = acc if acc is not None else ufunc.identity
                    acc = xs[i].copy() if acc is None else ufunc(acc, xs[i])
                else:
                    acc = xs[i].copy() if acc is None else ufunc(acc, xs[i])
                    out[i] = acc
        return [np.moveaxis(out, 0, axis)]
    return kernel


# --------------------------------------------------------------------------- bitwise
def bit_shift(inputs: list, attrs: Attrs) -> list[Arr]:
    x, y = inputs[0], inputs[1]
    bits = x.dtype.itemsize * 8
    direction = str(attrs.get("direction", ""))
    if direction not in ("LEFT", "RIGHT"):
        raise ModelError("BitShift direction must be LEFT or RIGHT",
                         field="BitShift.direction", value=direction, limit=["LEFT", "RIGHT"])
    y = y.astype(x.dtype)
    s = np.minimum(y, np.asarray(bits - 1, x.dtype))
    z = np.left_shift(x, s) if direction == "LEFT" else np.right_shift(x, s)
    return [np.where(y >= bits, np.zeros((), x.dtype), z).astype(x.dtype)]


def _bitwise(fn: np.ufunc) -> Any:
    def kernel(inputs: list, attrs: Attrs) -> list[Arr]:
        return [fn(inputs[0], inputs[1]).astype(inputs[0].dtype, copy=False)]
    return kernel


def bitwise_not(inputs: list, attrs: Attrs) -> list[Arr]:
    return [np.invert(inputs[0])]


# --------------------------------------------------------------------------- scatter / gather
_REDUCE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def scatter_elements(inputs: list, attrs: Attrs) -> list[Arr]:
    data, idx, upd = inputs[0], np.asarray(inputs[1]), inputs[2]
    axis = _axis(int(attrs.get("axis", 0)), data.ndim, "ScatterElements")
    if idx.shape != upd.shape or idx.ndim != data.ndim:
        raise ModelError("ScatterElements indices and updates need one shape of the data's "
                         "rank", field="ScatterElements.indices", value=(idx.shape, upd.shape),
                         limit=data.ndim)
    idx = _indices(idx, data.shape[axis], "ScatterElements")
    grid = list(np.indices(idx.shape, sparse=True))
    grid[axis] = idx
    where = tuple(np.broadcast_arrays(*grid))
    out = data.copy()
    reduction = str(attrs.get("reduction", "none"))
    if reduction == "none":
        out[where] = upd
    elif reduction in _REDUCE:
        with np.errstate(over="ignore", invalid="ignore"):
            _REDUCE[reduction].at(out, where, upd.astype(data.dtype, copy=False))
    else:
        raise ModelError("ScatterElements reduction unknown", field="ScatterElements.reduction",
                         value=reduction, limit=["none", *_REDUCE])
    return [out]


def gather_nd(inputs: list, attrs: Attrs) -> list[Arr]:
    data, idx = inputs[0], np.asarray(inputs[1], np.int64)
    b = int(attrs.get("batch_dims", 0))
    if not 0 <= b < min(data.ndim, idx.ndim) or idx.shape[:b] != data.shape[:b] \
            or not 1 <= idx.shape[-1] <= data.ndim - b:
        raise ModelError("GatherND indices do not fit the data", field="GatherND.indices",
                         value=(data.shape, idx.shape, b))
    k = idx.shape[-1]
    batch = int(np.prod(data.shape[:b], dtype=np.int64))
    d = data.reshape((batch, *data.shape[b:]))
    ri = idx.reshape(batch, -1, k)
    cols = tuple(_indices(ri[..., j], d.shape[1 + j], "GatherND") for j in range(k))
    got = d[(np.arange(batch)[:, None], *cols)]
    return [got.reshape(*idx.shape[:-1], *data.shape[b + k:])]


def one_hot(inputs: list, attrs: Attrs) -> list[Arr]:
    idx, depth, values = np.asarray(inputs[0]), inputs[1], inputs[2]
    d = int(np.asarray(depth).reshape(-1)[0])
    if d < 1:
        raise ModelError("OneHot depth must be >= 1", field="OneHot.depth", value=d, limit=1)
    rank = idx.ndim + 1
    axis = _axis(int(attrs.get("axis", -1)), rank, "OneHot")
    i = np.trunc(idx).astype(np.int64) if idx.dtype.kind == "f" else idx.astype(np.int64)
    i = np.where(i < 0, i + d, i)
    hot = np.expand_dims(i, axis) == np.arange(d).reshape([d if a == axis else 1
                                                           for a in range(rank)])
    v = np.asarray(values).reshape(-1)
    return [np.where(hot, v[1], v[0]).astype(v.dtype)]


def eye_like(inputs: list, attrs: Attrs) -> list[Arr]:
    x = inputs[0]
    if x.ndim != 2:
        raise ModelError("EyeLike needs a 2-D input", field="EyeLike.input", value=x.shape)
    dt = onnx_dtype(attrs["dtype"]) if attrs.get("dtype") is not None else x.dtype
    return [np.eye(x.shape[0], x.shape[1], int(attrs.get("k", 0)), dtype=dt)]


# --------------------------------------------------------------------------- crop / reverse
def center_crop_pad(inputs: list, attrs: Attrs) -> list[Arr]:
    x, shape = inputs[0], [int(v) for v in np.asarray(inputs[1]).reshape(-1)]
    axes = attrs.get("axes")
    axes = list(range(x.ndim)) if axes is None else [
        _axis(int(a), x.ndim, "CenterCropPad") for a in axes]
    if len(axes) != len(shape) or min(shape, default=1) < 0:
        raise ModelError("CenterCropPad shape must give one size >= 0 per axis",
                         field="CenterCropPad.shape", value=shape, limit=len(axes))
    out_shape = list(x.shape)
    src = [slice(None)] * x.ndim
    dst = [slice(None)] * x.ndim
    for a, size in zip(axes, shape, strict=True):
        n = x.shape[a]
        out_shape[a] = size
        if size < n:
            start = (n - size) // 2
            src[a] = slice(start, start + size)
        elif size > n:
            start = (size - n) // 2
            dst[a] = slice(start, start + n)
    out = np.zeros(out_shape, x.dtype)
    out[tuple(dst)] = x[tuple(src)]
    return [out]


def reverse_sequence(inputs: list, attrs: Attrs) -> list[Arr]:
    x, lens = inputs[0], np.asarray(inputs[1], np.int64).reshape(-1)
    b = _axis(int(attrs.get("batch_axis", 1)), x.ndim, "ReverseSequence")
    t = _axis(int(attrs.get("time_axis", 0)), x.ndim, "ReverseSequence")
    if b == t or lens.size != x.shape[b] or (lens.size and (lens.min() < 0 or
                                                           lens.max() > x.shape[t])):
        raise ModelError("ReverseSequence needs distinct axes and one length in "
                         "[0, time steps] per batch entry", field="ReverseSequence.sequence_lens",
                         value=lens.tolist(), limit=x.shape[t])
    out = x.copy()
    for i, n in enumerate(lens):
        if n > 1:
            sel = [slice(None)] * x.ndim
            sel[b], sel[t] = i, slice(0, int(n))
            out[tuple(sel)] = np.flip(x[tuple(sel)], axis=t - (b < t))
    return [out]


INDEXING_KERNELS = {
    "Trilu": trilu,
    "CumSum": _scan(np.add, "CumSum"),
    "CumProd": _scan(np.multiply, "CumProd"),
    "BitShift": bit_shift,
    "BitwiseAnd": _bitwise(np.bitwise_and),
    "BitwiseOr": _bitwise(np.bitwise_or),
    "BitwiseXor": _bitwise(np.bitwise_xor),
    "BitwiseNot": bitwise_not,
    "ScatterElements": scatter_elements,
    "Scatter": scatter_elements,
    "GatherND": gather_nd,
    "OneHot": one_hot,
    "EyeLike": eye_like,
    "CenterCropPad": center_crop_pad,
    "ReverseSequence": reverse_sequence,
}
