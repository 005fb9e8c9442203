"""Quantization kernels: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv.

ONNX semantics for the integer quantized types numpy has (uint8, int8, uint16, int16); the
float8 / float4 / int4 / int2 types are refused by element type (:mod:`.dtypes`).  A scale
or zero point is per tensor (one element), per axis (1-D along ``axis``) or blocked (the
input's rank, ``block_size`` elements of ``axis`` per entry).

Arithmetic (firmware_spec/arithmetic.md, the CPU steps), as the ONNX reference computes it:

* QuantizeLinear: ``x / scale`` in numpy's type of the pair (float32 for float32 operands),
  rounded half to even, plus the zero point, saturated to the output type (NaN -> 0 before
  the zero point);
* DequantizeLinear: ``(float32(x) - zero_point) * scale`` in numpy's promoted type, rounded
  once to the scale's type (or ``output_dtype``);
* DynamicQuantizeLinear: float32 throughout: ``scale = (max(0, max x) - min(0, min x)) /
  255`` (1/255 when they are equal), ``zero_point = rint(clip(-min / scale, 0, 255))``,
  ``y = saturate(rint(x / scale) + zero_point)``;
* the integer products (MatMulInteger, ConvInteger and the QLinear ops' accumulators) in
  int64 with numpy's integer matmul (exact, no BLAS), wrapped to int32;
* QLinearMatMul / QLinearConv: ``acc * (a_scale * b_scale / y_scale)`` in numpy's promoted
  type, plus the output zero point, rounded half to even, saturated.

No onnx import.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelError
from ..hw import arith
from .args import optional as _opt
from .dtypes import onnx_dtype
from .nn import conv

__all__ = ["QUANT_KERNELS"]

Arr = np.ndarray
Attrs = dict[str, Any]


def _shaped(v: Arr, shape: tuple, axis: int, block: int, op: str, what: str) -> Arr:
    """A scale or zero point broadcastable to ``shape`` (per tensor, axis or block)."""
    v = np.asarray(v)
    if v.size == 1:
        return v.reshape(())
    rank = len(shape)
    if not -rank <= axis < rank:
        raise ModelError(f"{op} axis out of range", field=f"{op}.axis", value=axis,
                         limit=f"[{-rank}, {rank - 1}]")
    axis %= rank
    if not block:
        if v.ndim != 1 or v.size != shape[axis]:
            raise ModelError(f"{op} per-axis {what} needs one value per entry of the axis",
                             field=f"{op}.{what}", value=v.shape, limit=shape[axis])
        return v.reshape([v.size if a == axis else 1 for a in range(rank)])
    want = tuple(-(-d // block) if a == axis else d for a, d in enumerate(shape))
    if v.shape != want:
        raise ModelError(f"{op} blocked {what} has the wrong shape", field=f"{op}.{what}",
                         value=v.shape, limit=want)
    return np.repeat(v, block, axis=axis)[tuple(
        slice(0, d) if a == axis else slice(None) for a, d in enumerate(shape))]


def _saturate(r: Arr, dtype: np.dtype) -> Arr:
    info = np.iinfo(dtype)
    return np.clip(r, info.min, info.max).astype(dtype)


def _round(v: Arr) -> Arr:
    """Round half to even in float64 (exact for every float16/32/64 value); NaN -> 0."""
    return np.nan_to_num(np.rint(np.asarray(v, np.float64)), nan=0.0)


def quantize_linear(inputs: list, attrs: Attrs) -> list[Arr]:
    x, scale, zp = inputs[0], inputs[1], _opt(inputs, 2)
    axis, block = int(attrs.get("axis", 1)), int(attrs.get("block_size", 0) or 0)
    out_code = int(attrs.get("output_dtype", 0) or 0)
    dt = zp.dtype if zp is not None else onnx_dtype(out_code) if out_code else np.dtype(np.uint8)
    if dt.kind not in "iu" or dt.itemsize > 2:
        raise ModelError("QuantizeLinear output type must be uint8, int8, uint16 or int16",
                         field="QuantizeLinear.output_dtype", value=str(dt))
    s = _shaped(scale, x.shape, axis, block, "QuantizeLinear", "y_scale")
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = _round(x / s)
    if zp is not None:
        r = r + _shaped(zp, x.shape, axis, block, "QuantizeLinear", "y_zero_point")
    return [_saturate(r, dt)]


def dequantize_linear(inputs: list, attrs: Attrs) -> list[Arr]:
    x, scale, zp = inputs[0], inputs[1], _opt(inputs, 2)
    axis, block = int(attrs.get("axis", 1)), int(attrs.get("block_size", 0) or 0)
    dx = x.astype(np.float32)
    if zp is not None:
        dx = dx - _shaped(zp, x.shape, axis, block, "DequantizeLinear", "x_zero_point")
    y = dx * _shaped(scale, x.shape, axis, block, "DequantizeLinear", "x_scale")
    code = int(attrs.get("output_dtype", 0) or 0)
    return [y.astype(onnx_dtype(code) if code else scale.dtype)]


def dynamic_quantize_linear(inputs: list, attrs: Attrs) -> list[Arr]:
    x = np.asarray(inputs[0], np.float32)
    f = np.float32
    hi = f(max(0.0, float(arith.reduce_max(x)))) if x.size else f(0)
    lo = f(min(0.0, float(arith.reduce_min(x)))) if x.size else f(0)
    scale = (f(1.0) if hi == lo else f(hi - lo)) / f(255)
    zp = f(np.rint(min(f(255), max(f(0), f(0) - lo / scale))))
    with np.errstate(invalid="ignore", over="ignore"):
        y = _saturate(_round(x / scale) + np.float64(zp), np.dtype(np.uint8))
    return [y, np.asarray(scale, np.float32), np.asarray(zp).astype(np.uint8)]


# --------------------------------------------------------------------------- integer products
def _centered(x: Arr, zp: Arr | None) -> Arr:
    x = np.asarray(x).astype(np.int64)
    return x if zp is None else x - np.asarray(zp).astype(np.int64)


def _row_zp(zp: Arr | None, a: Arr) -> Arr | None:
    """MatMulInteger's a_zero_point: scalar or one per row of A (1-D, M)."""
    if zp is None or np.asarray(zp).size == 1:
        return zp
    return np.asarray(zp).reshape(-1, 1)


def _int_matmul(a: Arr, b: Arr) -> Arr:
    return arith.matmul_nd(a.astype(np.int64), b.astype(np.int64))  # exact, no BLAS


def matmul_integer(inputs: list, attrs: Attrs) -> list[Arr]:
    a, b = inputs[0], inputs[1]
    za, zb = _row_zp(_opt(inputs, 2), a), _opt(inputs, 3)
    return [_int_matmul(_centered(a, za), _centered(b, zb)).astype(np.int32)]


def _conv_int(x: Arr, w: Arr, zx: Arr | None, zw: Arr | None, bias: Arr | None,
              attrs: Attrs) -> Arr:
    xc = _centered(x, zx)
    if zw is not None and np.asarray(zw).size > 1:
        zw = np.asarray(zw).reshape((-1,) + (1,) * (w.ndim - 1))
    wc = _centered(w, zw)
    ins = [xc, wc] + ([np.asarray(bias).astype(np.int64)] if bias is not None else [])
    return conv(ins, attrs)[0].astype(np.int64)


def conv_integer(inputs: list, attrs: Attrs) -> list[Arr]:
    y = _conv_int(inputs[0], inputs[1], _opt(inputs, 2), _opt(inputs, 3), None, attrs)
    return [y.astype(np.int32)]


def _requantize(acc: Arr, mult: Arr, zp: Arr | None, dtype: np.dtype) -> Arr:
    acc = acc.astype(np.int32).astype(np.int64)    # the int32 accumulator ONNX specifies
    d = acc * mult
    if zp is not None:
        d = d + zp
    return _saturate(_round(d), dtype)


def qlinear_matmul(inputs: list, attrs: Attrs) -> list[Arr]:
    a, sa, za, b, sb, zb, sy, zy = inputs[:8]
    acc = _int_matmul(_centered(a, za), _centered(b, zb))
    mult = sa * sb / sy
    dt = zy.dtype if zy is not None else a.dtype
    return [_requantize(acc, mult, zy, dt)]


def qlinear_conv(inputs: list, attrs: Attrs) -> list[Arr]:
    x, sx, zx, w, sw, zw, sy, zy = inputs[:8]
    acc = _conv_int(x, w, zx, zw, _opt(inputs, 8), attrs)
    sw = np.asarray(sw)
    if sw.size > 1:
        sw = sw.reshape((1, -1) + (1,) * (x.ndim - 2))
    mult = sx * sw / sy
    dt = zy.dtype if zy is not None else x.dtype
    return [_requantize(acc, mult, zy, dt)]


QUANT_KERNELS = {
    "QuantizeLinear": quantize_linear,
    "DequantizeLinear": dequantize_linear,
    "DynamicQuantizeLinear": dynamic_quantize_linear,
    "MatMulInteger": matmul_integer,
    "ConvInteger": conv_integer,
    "QLinearMatMul": qlinear_matmul,
    "QLinearConv": qlinear_conv,
}
