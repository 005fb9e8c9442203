"""Shape rules for the index, scan, bitwise, quantization and spatial CPU ops
(:mod:`dvsdk.cpu.indexing`, :mod:`dvsdk.cpu.quant`, :mod:`dvsdk.cpu.spatial`);
:mod:`.fold`'s ``SHAPE_RULES`` takes these in.

Each rule reads a :class:`dvsdk.compiler.fold._Ctx` and returns ``[(shape, dtype)]`` per
output, None while a shape-defining input (OneHot's depth, CenterCropPad's shape,
MaxUnpool's output_shape, Col2Im's image and block shapes, AffineGrid's size) is not
constant, or raises ModelError naming the op.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..cpu.dtypes import onnx_dtype
from ..cpu.nn import conv_output_shape, pool_output_shape, resolve_conv, resolve_pool
from ..cpu.spatial import col2im_shape, maxunpool_shape
from .limits import check_window, check_window_attrs

Shape = tuple[int, ...]
Result = list[tuple[Shape, np.dtype]] | None

_I32, _U8, _F32 = np.dtype(np.int32), np.dtype(np.uint8), np.dtype(np.float32)


def _same(c: Any) -> Result:
    return [(c.shape(0), c.dtype(0))]


def _bcast(c: Any) -> Result:
    try:
        shape = tuple(int(d) for d in np.broadcast_shapes(c.shape(0), c.shape(1)))
    except ValueError:
        raise c.fail("inputs cannot be broadcast together",
                     value=(c.shape(0), c.shape(1))) from None
    return [(shape, c.dtype(0))]


def _ints(c: Any, i: int) -> list[int] | None:
    v = c.const(i)
    return None if v is None else [int(x) for x in np.asarray(v).reshape(-1)]


def _axis(c: Any, rank: int, default: int, key: str = "axis") -> int:
    axis = int(c.op.attrs.get(key, default))
    if not -rank <= axis < max(rank, 1):
        raise c.fail(f"{key} out of range", value=axis, limit=f"[{-rank}, {rank - 1}]")
    return axis % max(rank, 1)


def _gather_nd(c: Any) -> Result:
    data, idx = c.shape(0), c.shape(1)
    b = int(c.op.attrs.get("batch_dims", 0))
    if not 0 <= b < min(len(data), len(idx)) or tuple(idx[:b]) != tuple(data[:b]) \
            or not 1 <= idx[-1] <= len(data) - b:
        raise c.fail("GatherND indices do not fit the data", value=(data, idx, b))
    return [((*idx[:-1], *data[b + idx[-1]:]), c.dtype(0))]


def _one_hot(c: Any) -> Result:
    depth = _ints(c, 1)
    if depth is None:
        return None
    idx = c.shape(0)
    axis = _axis(c, len(idx) + 1, -1)
    if depth[0] < 1:
        raise c.fail("OneHot depth must be >= 1", value=depth[0], limit=1)
    return [((*idx[:axis], depth[0], *idx[axis:]), c.dtype(2))]


def _eye_like(c: Any) -> Result:
    x = c.shape(0)
    if len(x) != 2:
        raise c.fail("EyeLike needs a 2-D input", value=x)
    dt = c.op.attrs.get("dtype")
    return [(x, onnx_dtype(dt) if dt is not None else c.dtype(0))]


def _center_crop_pad(c: Any) -> Result:
    shape = _ints(c, 1)
    if shape is None:
        return None
    x = list(c.shape(0))
    axes = c.op.attrs.get("axes")
    axes = list(range(len(x))) if axes is None else [int(a) for a in axes]
    if len(axes) != len(shape) or any(not -len(x) <= a < len(x) for a in axes) \
            or min(shape, default=1) < 0:
        raise c.fail("CenterCropPad shape must give one size >= 0 per axis",
                     value=(shape, axes), limit=len(x))
    for a, s in zip(axes, shape, strict=True):
        x[a % len(x)] = s
    return [(tuple(x), c.dtype(0))]


def _matmul_shape(c: Any, ia: int, ib: int) -> tuple[int, ...]:
    a, b = list(c.shape(ia)), list(c.shape(ib))
    a1, b1 = len(a) == 1, len(b) == 1
    a, b = ([1] + a if a1 else a), (b + [1] if b1 else b)
    try:
        batch = np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2]))
    except ValueError:
        batch = None
    if a[-1] != b[-2] or batch is None:
        raise c.fail(f"{c.op.type} operands do not multiply",
                     value=(c.shape(ia), c.shape(ib)))
    out = [*batch, a[-2], b[-1]]
    if a1:
        out.pop(-2)
    if b1:
        out.pop(-1)
    return tuple(int(d) for d in out)


def _conv_shape(c: Any, ix: int, iw: int) -> tuple[int, ...]:
    x, w = c.shape(ix), c.shape(iw)
    check_window_attrs(c.op.attrs, c.where)
    a = resolve_conv(c.op.attrs, x, w)
    check_window(a, len(x) - 2, c.where)
    if len(x) != len(w) or len(x) < 3 or x[1] != w[1] * a["group"] or w[0] % a["group"]:
        raise c.fail(f"{c.op.type} channel count does not match the weights and group",
                     value=(tuple(x), tuple(w), a["group"]))
    c.op.attrs = {**c.op.attrs, **a}
    out = conv_output_shape(x, w, a)
    if min(out[2:]) <= 0:
        raise c.fail(f"{c.op.type} output would be empty", value=out)
    return out


def _quantize(c: Any) -> Result:
    code = int(c.op.attrs.get("output_dtype", 0) or 0)
    dt = c.dtype(2) if c.has(2) else onnx_dtype(code) if code else _U8
    if dt.kind not in "iu" or dt.itemsize > 2:
        raise c.fail("QuantizeLinear output type must be uint8, int8, uint16 or int16",
                     value=str(dt))
    return [(c.shape(0), dt)]


def _dequantize(c: Any) -> Result:
    code = int(c.op.attrs.get("output_dtype", 0) or 0)
    return [(c.shape(0), onnx_dtype(code) if code else c.dtype(1))]


def _dynamic_quantize(c: Any) -> Result:
    return [(c.shape(0), _U8), ((), _F32), ((), _U8)]


def _lp_pool(c: Any) -> Result:
    x = c.shape(0)
    check_window_attrs(c.op.attrs, c.where)
    a = resolve_pool(c.op.attrs, x)
    check_window(a, len(x) - 2, c.where)
    c.op.attrs = {**a, "p": int(c.op.attrs.get("p", 2))}
    return [(pool_output_shape(x, a), c.dtype(0))]


def _max_unpool(c: Any) -> Result:
    out = c.const(2) if c.has(2) else None
    if c.has(2) and out is None:
        return None
    if "kernel_shape" not in c.op.attrs or len(c.shape(0)) != len(c.op.attrs["kernel_shape"]) + 2:
        raise c.fail("MaxUnpool needs kernel_shape, one entry per spatial axis",
                     value=c.shape(0))
    return [(maxunpool_shape(c.shape(0), c.op.attrs, out), c.dtype(0))]


def _roi_align(c: Any) -> Result:
    x, rois = c.shape(0), c.shape(1)
    a = c.op.attrs
    oh, ow = int(a.get("output_height", 1)), int(a.get("output_width", 1))
    if len(x) != 4 or len(rois) != 2 or rois[1] != 4 or tuple(c.shape(2)) != (rois[0],) \
            or min(oh, ow) < 1:
        raise c.fail("RoiAlign needs X (N, C, H, W), rois (R, 4), R batch indices and "
                     "output sizes >= 1", value=(x, rois, c.shape(2), (oh, ow)))
    return [((rois[0], x[1], oh, ow), c.dtype(0))]


def _col2im(c: Any) -> Result:
    image, block = c.const(1), c.const(2)
    if image is None or block is None:
        return None
    return [(col2im_shape(c.shape(0), image, block, c.op.attrs), c.dtype(0))]


def _affine_grid(c: Any) -> Result:
    size = _ints(c, 1)
    if size is None:
        return None
    nd = len(size) - 2
    if nd not in (2, 3) or tuple(c.shape(0)) != (size[0], nd, nd + 1) or min(size) < 1:
        raise c.fail("AffineGrid needs size (N, C, H, W) or (N, C, D, H, W) and theta "
                     "(N, 2, 3) or (N, 3, 4)", value=(c.shape(0), size))
    return [((size[0], *size[2:], nd), c.dtype(0))]


RULES_B: dict[str, Callable[[Any], Result]] = {
    **{t: _same for t in ("Trilu CumSum CumProd BitwiseNot ScatterElements Scatter "
                          "ReverseSequence").split()},
    **{t: _bcast for t in "BitShift BitwiseAnd BitwiseOr BitwiseXor".split()},
    "GatherND": _gather_nd,
    "OneHot": _one_hot,
    "EyeLike": _eye_like,
    "CenterCropPad": _center_crop_pad,
    "QuantizeLinear": _quantize,
    "DequantizeLinear": _dequantize,
    "DynamicQuantizeLinear": _dynamic_quantize,
    "MatMulInteger": lambda c: [(_matmul_shape(c, 0, 1), _I32)],
    "QLinearMatMul": lambda c: [(_matmul_shape(c, 0, 3), c.dtype(7) if c.has(7)
                                 else c.dtype(0))],
    "ConvInteger": lambda c: [(_conv_shape(c, 0, 1), _I32)],
    "LpPool": _lp_pool,
    "MaxUnpool": _max_unpool,
    "RoiAlign": _roi_align,
    "Col2Im": _col2im,
    "AffineGrid": _affine_grid,
    "QLinearConv": lambda c: [(_conv_shape(c, 0, 3), c.dtype(7) if c.has(7) else c.dtype(0))],
}
